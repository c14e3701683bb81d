// ONNX's recurrent layers, RNN, GRU and LSTM (opsets 7-14), as Graph IR's scan region op
// (ir/Scan.h): one scan per direction whose body is one time step, compiled once and run
// `seq_length` times, so autodiff differentiates the layer with the scan's own rule and the
// graph does not grow with the sequence. The input projection X W^T + Wb of every step is one
// matmul before the scan (it does not depend on the carry); the body does the recurrent part.
//
// Semantics follow ONNX 1.12's operator definitions (onnx/defs/rnn/defs.cc): gate orders RNN i,
// GRU z r h, LSTM i o f c, peepholes P = [Pi Po Pf]; `clip` bounds every gate's input before its
// activation; `layout` 1 is batch-major X, Y, Y_h, Y_c; `sequence_lens` masks the steps past each
// batch row's length (the carry is kept, Y is 0 there, and a reverse direction starts at the
// row's last step), as ONNX Runtime does.
#include "onnx/Importer.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

namespace tsr::onnxio {

using ir::OpKind;

// A named namespace: the rules' files compile as one translation unit (onnx/CMakeLists.txt), where
// the other families' anonymous helpers (add, mul, ...) would clash.
namespace recurrent_ops {

V add(Importer &I, V a, V b) { return I.op(OpKind::Add, {a, b}); }
V sub(Importer &I, V a, V b) { return I.op(OpKind::Sub, {a, b}); }
V mul(Importer &I, V a, V b) { return I.op(OpKind::Mul, {a, b}); }

/// One activation of the `activations` attribute, with its alpha and beta.
struct Act {
  std::string name; // lowercase
  double alpha = 0, beta = 0;
};

/// The activation functions ONNX lists for the recurrent operators.
V activate(Importer &I, const Act &a, V x) {
  const std::string &f = a.name;
  if (f == "sigmoid") return I.op(OpKind::Sigmoid, {x});
  if (f == "tanh") return I.op(OpKind::Tanh, {x});
  if (f == "relu") return I.op(OpKind::Relu, {x});
  if (f == "affine") return add(I, mul(I, x, c(I, x, a.alpha)), c(I, x, a.beta));
  if (f == "leakyrelu") return I.op(OpKind::Where, {I.op(OpKind::Ge, {x, c(I, x, 0)}), x, mul(I, x, c(I, x, a.alpha))});
  if (f == "thresholdedrelu") return I.op(OpKind::Where, {I.op(OpKind::Gt, {x, c(I, x, a.alpha)}), x, c(I, x, 0)});
  if (f == "scaledtanh") return mul(I, I.op(OpKind::Tanh, {mul(I, x, c(I, x, a.beta))}), c(I, x, a.alpha));
  if (f == "hardsigmoid")
    return I.op(OpKind::Max, {c(I, x, 0), I.op(OpKind::Min, {c(I, x, 1), add(I, mul(I, x, c(I, x, a.alpha)), c(I, x, a.beta))})});
  if (f == "elu")
    return I.op(OpKind::Where, {I.op(OpKind::Ge, {x, c(I, x, 0)}), x, mul(I, I.op(OpKind::Expm1, {x}), c(I, x, a.alpha))});
  if (f == "softsign") return I.op(OpKind::Div, {x, add(I, I.op(OpKind::Abs, {x}), c(I, x, 1))});
  if (f == "softplus") return I.op(OpKind::Log1p, {I.op(OpKind::Exp, {x})});
  throw Unsupported("the activation `" + f + "` is not supported");
}

/// The per-direction activations: `perDir` functions for each direction, from the attribute or
/// ONNX's defaults. Alphas and betas are taken in order by the functions that have them (ONNX
/// Runtime's reading), with ONNX's defaults where the lists run out.
std::vector<Act> activations(Node &n, const std::vector<std::string> &defaults, size_t dirs) {
  std::vector<std::string> names;
  if (auto *a = n.attr("activations")) {
    for (auto &s : a->strings()) names.push_back(s);
    // One direction's list serves both (ONNX Runtime's reading of a short list).
    if (dirs == 2 && names.size() == defaults.size()) names.insert(names.end(), names.begin(), names.end());
  } else {
    for (size_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (names.size() != defaults.size() * dirs)
    throw BadModel("`activations` has " + std::to_string(names.size()) + " functions; " + std::to_string(defaults.size() * dirs) +
                   " are needed (" + std::to_string(defaults.size()) + " per direction)");
  const std::vector<double> alphas = n.floats("activation_alpha").value_or(std::vector<double>{});
  const std::vector<double> betas = n.floats("activation_beta").value_or(std::vector<double>{});
  size_t ia = 0, ib = 0;
  std::vector<Act> out;
  for (auto &name : names) {
    Act a;
    for (char ch : name) a.name += char(std::tolower(static_cast<unsigned char>(ch)));
    const std::string &f = a.name;
    double da = 0, db = 0;
    bool hasA = false, hasB = false;
    if (f == "affine" || f == "scaledtanh") hasA = hasB = true, da = 1, db = 0;
    else if (f == "leakyrelu") hasA = true, da = 0.01;
    else if (f == "thresholdedrelu" || f == "elu") hasA = true, da = 1;
    else if (f == "hardsigmoid") hasA = hasB = true, da = 0.2, db = 0.5;
    a.alpha = hasA && ia < alphas.size() ? alphas[ia++] : da;
    a.beta = hasB && ib < betas.size() ? betas[ib++] : db;
    out.push_back(a);
  }
  return out;
}

enum class Cell { Rnn, Gru, Lstm };

/// The recurrent layer: reads the inputs and attributes common to the three operators, runs one
/// scan per direction through `cell`, and assembles Y, Y_h (and Y_c for LSTM).
std::vector<Val> recurrent(Importer &I, Node &n, Cell kind) {
  const int64_t gates = kind == Cell::Rnn ? 1 : kind == Cell::Gru ? 3 : 4;
  const std::string direction = n.s("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    throw BadModel("`direction` is `" + direction + "`, not forward, reverse or bidirectional");
  const size_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = n.i("layout", 0);
  if (layout != 0 && layout != 1) throw BadModel("`layout` must be 0 or 1");
  if (!n.attr("hidden_size")) throw BadModel("the attribute `hidden_size` is missing");
  const int64_t H = n.i("hidden_size", 0);
  if (H <= 0 || H > (int64_t(1) << 32)) throw BadModel("`hidden_size` must be positive and at most 2^32");
  const std::vector<std::string> defaults = kind == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                            : kind == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const std::vector<Act> acts = activations(n, defaults, dirs);
  const auto *clipAttr = n.attr("clip");
  const double clip = clipAttr ? clipAttr->f() : 0;
  if (clipAttr && !(clip > 0)) throw BadModel("`clip` must be positive");
  const bool linearBeforeReset = kind == Cell::Gru && n.i("linear_before_reset", 0) != 0;
  const bool inputForget = kind == Cell::Lstm && n.i("input_forget", 0) != 0;

  V x = in(I, n, 0), w = in(I, n, 1), r = in(I, n, 2);
  if (x->type.rank() != 3 || w->type.rank() != 3 || r->type.rank() != 3) throw BadModel("X, W and R must have rank 3");
  if (!isFloat(Importer::dtype(x))) throw BadModel("X must be a float tensor");
  if (layout == 1) x = I.transpose(x, {1, 0, 2}); // [seq, batch, input]
  const DType dt = Importer::dtype(x);
  const Dim S = Importer::dims(x)[0], B = Importer::dims(x)[1], In = Importer::dims(x)[2];
  const int64_t G = gates * H;
  auto expect = [&](V v, std::vector<Dim> want, const char *what) {
    if (Importer::dims(v) != want) {
      std::string s;
      for (auto &d : want) s += (s.empty() ? "" : ", ") + d.str();
      throw BadModel(std::string(what) + " must have the shape [" + s + "]");
    }
    if (Importer::dtype(v) != dt) throw BadModel(std::string(what) + " must have X's dtype");
  };
  expect(w, {D(int64_t(dirs)), D(G), In}, "W");
  expect(r, {D(int64_t(dirs)), D(G), D(H)}, "R");
  V bias = n.has(3) ? in(I, n, 3) : nullptr;
  if (bias) expect(bias, {D(int64_t(dirs)), D(2 * G)}, "B");
  // The mask of the steps within each row's length, [seq, batch, 1] in X's dtype.
  V mask = nullptr;
  if (n.has(4)) {
    V lens = in(I, n, 4);
    if (Importer::dims(lens) != std::vector<Dim>{B} || isFloat(Importer::dtype(lens))) throw BadModel("sequence_lens must be an integer [batch]");
    V t = I.iota({S, B}, 0, Importer::dtype(lens));
    mask = I.reshape(I.cast(I.op(OpKind::Lt, {t, lens}), dt), {S, B, D(1)});
  }
  auto state = [&](size_t i, const char *what) -> V {
    if (!n.has(i)) return nullptr;
    V s = in(I, n, i);
    if (layout == 1) s = I.transpose(s, {1, 0, 2});
    expect(s, {D(int64_t(dirs)), B, D(H)}, what);
    return s;
  };
  V h0all = state(5, "initial_h");
  V c0all = kind == Cell::Lstm ? state(6, "initial_c") : nullptr;
  V peep = kind == Cell::Lstm && n.has(7) ? in(I, n, 7) : nullptr;
  if (peep) expect(peep, {D(int64_t(dirs)), D(3 * H)}, "P");
  if (kind != Cell::Lstm && n.has(6)) throw BadModel("the input 6 is not one of this operator's");

  auto row = [&](V v, size_t d) { // v[d], the direction's slice of a [dirs, ...] tensor
    std::vector<Dim> shape(Importer::dims(v).begin() + 1, Importer::dims(v).end());
    return I.reshape(I.sliceAxis(v, 0, D(int64_t(d)), D(int64_t(d) + 1)), shape);
  };
  auto part = [&](V v, int64_t k) { return I.sliceAxis(v, v->type.rank() - 1, D(k * H), D((k + 1) * H)); };
  auto clipped = [&](V v) {
    if (!clipAttr) return v;
    return I.op(OpKind::Min, {I.op(OpKind::Max, {v, c(I, v, -clip)}), c(I, v, clip)});
  };

  std::vector<V> ys, hs, cs;
  for (size_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Act *act = &acts[d * defaults.size()];
    V rt = I.transpose(row(r, d), {1, 0}); // [H, G]
    // The input projection of every step at once: [seq, batch, G].
    V xw = I.op(OpKind::MatMul, {x, I.transpose(row(w, d), {1, 0})});
    V rbH = nullptr; // GRU with linear_before_reset: Rbh stays inside the reset gate's product
    if (bias) {
      V bd = row(bias, d);
      V wb = I.sliceAxis(bd, 0, D(0), D(G)), rb = I.sliceAxis(bd, 0, D(G), D(2 * G));
      if (linearBeforeReset) {
        rbH = part(rb, 2);
        rb = I.concat({I.sliceAxis(rb, 0, D(0), D(2 * H)), I.full({D(H)}, 0, dt)}, 0);
      }
      xw = add(I, xw, add(I, wb, rb));
    }
    V h0 = h0all ? row(h0all, d) : I.full({B, D(H)}, 0, dt);
    std::vector<V> inits{h0}, xs{xw};
    if (kind == Cell::Lstm) inits.push_back(c0all ? row(c0all, d) : I.full({B, D(H)}, 0, dt));
    if (mask) xs.push_back(mask);
    V pd = peep ? row(peep, d) : nullptr;

    auto step = [&](const std::vector<V> &carry, const std::vector<V> &xt) -> std::vector<V> {
      V h = carry[0], pre = xt[0];
      V hn, cn = nullptr;
      if (kind == Cell::Rnn) {
        hn = activate(I, act[0], clipped(add(I, pre, I.op(OpKind::MatMul, {h, rt}))));
      } else if (kind == Cell::Gru) {
        V hr = I.op(OpKind::MatMul, {h, I.sliceAxis(rt, 1, D(0), D(2 * H))});
        V z = activate(I, act[0], clipped(add(I, part(pre, 0), part(hr, 0))));
        V rg = activate(I, act[0], clipped(add(I, part(pre, 1), part(hr, 1))));
        V rh = part(rt, 2);
        V cand = linearBeforeReset ? mul(I, rg, rbH ? add(I, I.op(OpKind::MatMul, {h, rh}), rbH) : I.op(OpKind::MatMul, {h, rh}))
                                   : I.op(OpKind::MatMul, {mul(I, rg, h), rh});
        V hh = activate(I, act[1], clipped(add(I, part(pre, 2), cand)));
        hn = add(I, mul(I, sub(I, c(I, z, 1), z), hh), mul(I, z, h));
      } else {
        V cprev = carry[1];
        V g = add(I, pre, I.op(OpKind::MatMul, {h, rt}));
        V gi = part(g, 0), go = part(g, 1), gf = part(g, 2), gc = part(g, 3);
        if (pd) {
          gi = add(I, gi, mul(I, part(pd, 0), cprev));
          gf = add(I, gf, mul(I, part(pd, 2), cprev));
        }
        V i = activate(I, act[0], clipped(gi));
        V f = inputForget ? sub(I, c(I, i, 1), i) : activate(I, act[0], clipped(gf));
        V cc = activate(I, act[1], clipped(gc));
        cn = add(I, mul(I, f, cprev), mul(I, i, cc));
        if (pd) go = add(I, go, mul(I, part(pd, 1), cn));
        V o = activate(I, act[0], clipped(go));
        hn = mul(I, o, activate(I, act[2], cn));
      }
      V y = hn;
      if (mask) { // past the row's length: keep the carry, and Y is 0
        V m = xt[1];
        hn = add(I, h, mul(I, m, sub(I, hn, h)));
        if (cn) cn = add(I, carry[1], mul(I, m, sub(I, cn, carry[1])));
        y = mul(I, m, y);
      }
      std::vector<V> out{hn};
      if (cn) out.push_back(cn);
      out.push_back(y);
      return out;
    };
    std::vector<V> res = I.scan(inits, xs, S, reverse, step);
    hs.push_back(I.reshape(res[0], {D(1), B, D(H)}));
    if (kind == Cell::Lstm) cs.push_back(I.reshape(res[1], {D(1), B, D(H)}));
    ys.push_back(I.reshape(res.back(), {S, D(1), B, D(H)}));
  }
  V y = I.concat(ys, 1), yh = I.concat(hs, 0); // [seq, dirs, batch, H], [dirs, batch, H]
  V yc = kind == Cell::Lstm ? I.concat(cs, 0) : nullptr;
  if (layout == 1) {
    y = I.transpose(y, {2, 0, 1, 3});
    yh = I.transpose(yh, {1, 0, 2});
    if (yc) yc = I.transpose(yc, {1, 0, 2});
  }
  std::vector<Val> out{Importer::of(y), Importer::of(yh)};
  if (yc) out.push_back(Importer::of(yc));
  return out;
}

} // namespace recurrent_ops

std::vector<Val> ruleRNN(Importer &I, Node &n) { return recurrent_ops::recurrent(I, n, recurrent_ops::Cell::Rnn); }
std::vector<Val> ruleGRU(Importer &I, Node &n) { return recurrent_ops::recurrent(I, n, recurrent_ops::Cell::Gru); }
std::vector<Val> ruleLSTM(Importer &I, Node &n) { return recurrent_ops::recurrent(I, n, recurrent_ops::Cell::Lstm); }

} // namespace tsr::onnxio
