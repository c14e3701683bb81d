// Derivatives and batching of convolution and pooling (WindowRules.h).
//
// The ops close under transposition, so every derivative is again one of them and derivatives
// of any order exist:
// - conv is bilinear. Its transpose in x is conv_transpose with the same geometry (the end
//   padding adjusted so the result has x's extent: the rows a stride skipped at the end get
//   zeros); its transpose in w is a conv of x by the cotangent with the roles of stride and
//   dilation exchanged and batch and channel axes swapped per group (convWeightGrad below;
//   Dumoulin & Visin, "A guide to convolution arithmetic for deep learning", 2016, sec. 4).
// - conv_transpose(x, w) is conv's transpose: its transpose in x is conv, in w the same
//   weight-gradient with the cotangent as the input.
// - max_pool routes through each window's first maximum (PyTorch's choice for ties):
//   max_pool_grad(x, g) adds g there, max_pool(x, t) reads t there; the two are each other's
//   transpose in their second operand and constant in x (a.e.).
// - avg_pool is linear; avg_pool_grad is its transpose, and avg_pool that of avg_pool_grad.
// Batching folds the vmapped axis into N (every op treats the N examples alike); a batched conv
// weight runs once per example (unrollExamples).
#include "ir/autodiff/WindowRules.h"

namespace tsr::ir::autodiff {

namespace {

using Operands = std::vector<Value *>;

std::vector<Attr> without(const std::vector<Attr> &a, const char *name) {
  std::vector<Attr> r;
  for (const Attr &x : a) if (x.name != name) r.push_back(x);
  return r;
}
std::vector<Attr> with(std::vector<Attr> a, const std::string &name, AttrValue v) {
  for (auto &x : a)
    if (x.name == name) { x.value = std::move(v); return a; }
  a.push_back({name, std::move(v)});
  return a;
}
std::vector<int64_t> ints(const Op &o, const char *n, std::vector<int64_t> dflt) {
  const auto *v = o.attrAs<std::vector<int64_t>>(n);
  return v ? *v : dflt;
}
int64_t groupsOf(const Op &o) { return o.attrAs<int64_t>("groups") ? *o.attrAs<int64_t>("groups") : 1; }

Value *transpose(Emitter &E, Value *v, std::vector<int64_t> perm) { return E.op(OpKind::Transpose, {v}, {{"perm", std::move(perm)}}); }

// The end padding that gives a transposed window op `target` extents: for conv's x-cotangent
// (conv_transpose of gy) and its weight-gradient conv. With a symbolic input extent (stride 1
// only, sema/Windows.h) the extents already agree with the forward end padding.
int64_t endPad(const Dim &target, int64_t produced, int64_t pb, int64_t fallback) {
  auto t = target.constantValue();
  return t ? produced - pb - *t : fallback;
}

// The cotangent of conv's weight [Cout, Cin/G, K..] from its input xin [N, Cin, H..] and output
// cotangent g [N, Cout, Ho..]: w'[o, c, k] = sum_{n, i} g[n, o, i] xin[n, grp(o)*Cg + c, i*s + k*d - pb],
// a conv over xin read as [Cg, G*N, H..] with g read as the kernel [G*Og, N, Ho..], stride d,
// dilation s, grouped by G.
Value *convWeightGrad(Emitter &E, Value *xin, Value *g, const Op &o, const std::vector<Dim> &wdims) {
  const auto &xd = xin->type.dims, &gd = g->type.dims;
  const size_t n = xd.size() - 2;
  // The cotangent is this conv's kernel, whose extents must be constants (sema/Windows.h).
  for (size_t i = 2; i < gd.size(); ++i)
    if (!gd[i].constantValue() || !xd[i].constantValue())
      throw AutodiffError{AutodiffError::Kind::NonDifferentiable,
                          "the weight of `" + std::string(opSpelling(o.kind)) + "` over a spatial size not known at compile time (\"" +
                              (gd[i].constantValue() ? xd[i] : gd[i]).str() + "\"; its input's gradient works)",
                          E.loc()};
  const int64_t G = groupsOf(o);
  const Dim N = xd[0], Gd = Dim::constant(G);
  const Dim Cg = *xd[1].divide(Gd), Og = *gd[1].divide(Gd);
  std::vector<int64_t> s = ints(o, "strides", std::vector<int64_t>(n, 1)), d = ints(o, "dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = ints(o, "pads", std::vector<int64_t>(2 * n, 0));
  std::vector<Dim> split{N, Gd, Cg}, head;
  std::vector<int64_t> permX{2, 1, 0}, permG{1, 2, 0};
  for (size_t i = 0; i < n; ++i) {
    split.push_back(xd[2 + i]);
    permX.push_back(int64_t(3 + i));
    permG.push_back(int64_t(3 + i));
  }
  Value *xr = transpose(E, E.reshape(xin, split), permX); // [Cg, G, N, H..]
  std::vector<Dim> xm{Cg, Gd * N};
  xm.insert(xm.end(), xd.begin() + 2, xd.end());
  xr = E.reshape(xr, xm);
  std::vector<Dim> gsplit{N, Gd, Og};
  gsplit.insert(gsplit.end(), gd.begin() + 2, gd.end());
  Value *gr = transpose(E, E.reshape(g, gsplit), permG); // [G, Og, N, Ho..]
  std::vector<Dim> gm{Gd * Og, N};
  gm.insert(gm.end(), gd.begin() + 2, gd.end());
  gr = E.reshape(gr, gm);
  std::vector<int64_t> p2 = pads;
  for (size_t i = 0; i < n; ++i) {
    const int64_t K = *wdims[2 + i].constantValue();
    auto Ho = gd[2 + i].constantValue();
    // The weight-gradient conv's extent is (H + pb + pe'' - s*(Ho-1) - 1)/d + 1; choose pe'' so it is K.
    if (Ho) p2[n + i] = endPad(xd[2 + i], d[i] * (K - 1) + s[i] * (*Ho - 1) + 1, pads[i], pads[n + i]);
  }
  Value *c = E.op(OpKind::Conv, {xr, gr}, {{"strides", d}, {"pads", p2}, {"dilations", s}, {"groups", G}});
  std::vector<int64_t> back{1, 0};
  for (size_t i = 0; i < n; ++i) back.push_back(int64_t(2 + i));
  return transpose(E, c, back); // [G*Og, Cg, K..]
}

// conv's x-cotangent: conv_transpose of g by w, its end padding set so the result has x's extents.
Value *convInputGrad(Emitter &E, const Op &o, Value *g, Value *w, const Type &x) {
  const size_t n = x.rank() - 2;
  std::vector<int64_t> s = ints(o, "strides", std::vector<int64_t>(n, 1)), d = ints(o, "dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = ints(o, "pads", std::vector<int64_t>(2 * n, 0));
  for (size_t i = 0; i < n; ++i) {
    const int64_t K = *w->type.dims[2 + i].constantValue();
    auto Ho = g->type.dims[2 + i].constantValue();
    if (Ho) pads[n + i] = endPad(x.dims[2 + i], (*Ho - 1) * s[i] + d[i] * (K - 1) + 1, pads[i], pads[n + i]);
  }
  return E.op(OpKind::ConvTranspose, {g, w}, with(o.attrs, "pads", pads));
}

// conv_transpose's x-cotangent: conv of g by w with the same geometry (its extents are x's).
Value *convTransposeInputGrad(Emitter &E, const Op &o, Value *g, Value *w) { return E.op(OpKind::Conv, {g, w}, o.attrs); }

Value *tangentOr0(Emitter &E, const std::vector<Value *> &t, const Op &o, size_t i) {
  return t[i] ? t[i] : E.zeros(o.operands[i]->type);
}

} // namespace

void addWindowGradRules(std::map<OpKind, GradRule> &t) {
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) -> std::vector<Value *> {
      Value *x = o.operands[0], *w = o.operands[1];
      Operands out(2, nullptr);
      if (active[0]) out[0] = E.fit(convInputGrad(E, o, g, w, x->type), x->type);
      if (active[1]) out[1] = E.fit(convWeightGrad(E, x, g, o, w->type.dims), w->type);
      return out;
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      Value *sum = nullptr;
      if (tg[0]) sum = E.op(OpKind::Conv, {tg[0], o.operands[1]}, o.attrs);
      if (tg[1]) {
        Value *b = E.op(OpKind::Conv, {o.operands[0], tg[1]}, o.attrs);
        sum = sum ? E.add(sum, b) : b;
      }
      return E.fit(sum, o.result()->type);
    };
    t[OpKind::Conv] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) -> std::vector<Value *> {
      Value *x = o.operands[0], *w = o.operands[1];
      Operands out(2, nullptr);
      if (active[0]) out[0] = E.fit(convTransposeInputGrad(E, o, g, w), x->type);
      // y = conv_transpose(x, w) is the conv of y's space into x's: w's cotangent is that conv's
      // weight gradient with g as its input and x as its output's cotangent.
      if (active[1]) out[1] = E.fit(convWeightGrad(E, g, x, o, w->type.dims), w->type);
      return out;
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      Value *sum = nullptr;
      if (tg[0]) sum = E.op(OpKind::ConvTranspose, {tg[0], o.operands[1]}, o.attrs);
      if (tg[1]) {
        Value *b = E.op(OpKind::ConvTranspose, {o.operands[0], tg[1]}, o.attrs);
        sum = sum ? E.add(sum, b) : b;
      }
      return E.fit(sum, o.result()->type);
    };
    t[OpKind::ConvTranspose] = r;
  }
  {
    // max_pool(x) and max_pool(x, t): the value read at x's window maxima; x's own derivative
    // in the two-operand form is zero almost everywhere (the maxima move only at ties).
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) -> std::vector<Value *> {
      Value *x = o.operands[0];
      const size_t src = o.operands.size() - 1;
      Operands out(o.operands.size(), nullptr);
      if (active[src]) out[src] = E.fit(E.op(OpKind::MaxPoolGrad, {x, g}, o.attrs), o.operands[src]->type);
      return out;
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      const size_t src = o.operands.size() - 1;
      return E.fit(E.op(OpKind::MaxPool, {o.operands[0], tangentOr0(E, tg, o, src)}, o.attrs), o.result()->type);
    };
    t[OpKind::MaxPool] = r;
  }
  {
    GradRule r;
    r.noGradOperands = {0};
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {nullptr, E.fit(E.op(OpKind::MaxPool, {o.operands[0], g}, o.attrs), o.operands[1]->type)};
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      return E.fit(E.op(OpKind::MaxPoolGrad, {o.operands[0], tangentOr0(E, tg, o, 1)}, o.attrs), o.result()->type);
    };
    t[OpKind::MaxPoolGrad] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      const Type &x = o.operands[0]->type;
      return {E.fit(E.op(OpKind::AvgPoolGrad, {g}, with(o.attrs, "shape", x.dims)), x)};
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      return E.fit(E.op(OpKind::AvgPool, {tg[0]}, o.attrs), o.result()->type);
    };
    t[OpKind::AvgPool] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(E.op(OpKind::AvgPool, {g}, without(o.attrs, "shape")), o.operands[0]->type)};
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      return E.fit(E.op(OpKind::AvgPoolGrad, {tg[0]}, o.attrs), o.result()->type);
    };
    t[OpKind::AvgPoolGrad] = r;
  }
}

void addWindowBatchRules(std::map<OpKind, BatchRule> &t) {
  // Operands [B, N, ...] merged to [B*N, ...] (unbatched ones broadcast first); the result split
  // back. `perExample` marks the operands with the N axis (not a conv's weight).
  auto merged = [](Emitter &E, const Op &o, const Operands &xs, const std::vector<bool> &bd, const Dim &B) -> Operands {
    const bool conv = o.kind == OpKind::Conv || o.kind == OpKind::ConvTranspose;
    if (conv && bd[1]) return unrollExamples(E, o, xs, bd, B);
    const size_t per = conv ? 1 : xs.size();
    Operands ops = xs;
    Dim N;
    for (size_t i = 0; i < per; ++i) {
      Value *v = xs[i];
      if (!bd[i]) {
        std::vector<Dim> one{Dim::constant(1)}, full{B};
        one.insert(one.end(), v->type.dims.begin(), v->type.dims.end());
        full.insert(full.end(), v->type.dims.begin(), v->type.dims.end());
        v = E.broadcast(E.reshape(v, one), full);
      }
      N = v->type.dims[1];
      std::vector<Dim> d{B * N};
      d.insert(d.end(), v->type.dims.begin() + 2, v->type.dims.end());
      ops[i] = E.reshape(v, d);
    }
    std::vector<Attr> attrs = o.attrs;
    if (o.kind == OpKind::AvgPoolGrad) {
      std::vector<Dim> sh = *o.attrAs<std::vector<Dim>>("shape");
      N = sh[0];
      sh[0] = B * sh[0];
      attrs = with(attrs, "shape", sh);
    }
    Value *y = E.op(o.kind, ops, attrs);
    std::vector<Dim> out{B};
    out.insert(out.end(), o.result()->type.dims.begin(), o.result()->type.dims.end());
    return {E.reshape(y, out)};
  };
  for (OpKind k : {OpKind::Conv, OpKind::ConvTranspose, OpKind::MaxPool, OpKind::MaxPoolGrad, OpKind::AvgPool, OpKind::AvgPoolGrad})
    t[k] = {merged};
}

} // namespace tsr::ir::autodiff
