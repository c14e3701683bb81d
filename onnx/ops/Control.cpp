// ONNX's control flow, If, Loop and Scan, over their subgraphs (GRAPH attributes), and the
// builder's scan of a step (Importer::scan, also used by ops/Recurrent.cpp). A Graph IR graph is
// straight-line with one region op, scan (ir/Scan.h), so:
//
// - If: a condition known at import converts the chosen branch in place; one known only at run
//   time converts both branches and selects each output with `where` (ONNX's operators have no
//   side effects, so computing both is the same function), which needs the branches' outputs to
//   have one shape and dtype; otherwise the condition must be known (a model input: specialized
//   on, as shape inputs are).
// - Loop: a trip count known at import (a model input is specialized on) is a scan of that
//   length over the iteration numbers, its loop-carried values the scan's carries and its scan
//   outputs the stacked ys. A condition that the body computes makes the loop a bounded while:
//   an extra carry `active` keeps the values once the condition is false (no scan outputs then:
//   their number would depend on the data). A body that needs its iteration number at import
//   (a Slice at the iteration, as ONNX's own tests write) is unrolled instead, up to 1024
//   iterations in all the model's Loops. A Loop without a trip count is refused (Graph IR has
//   no unbounded loop).
// - Scan (opset 9-17): one scan op, inputs moved to axis 0 and reversed per scan_input_axes and
//   directions, outputs back per scan_output_axes and directions. Opset 8's batched form runs one
//   scan per batch row (a static batch, no sequence_lens).
//
// The subgraphs' nodes read values of the enclosing graphs by name; inside a scan's body those
// become the scan's consts (Importer::scan closes over them).
#include "onnx/Importer.h"

#include "ir/Scan.h"

#include <unordered_map>

namespace tsr::onnxio {

using ir::OpKind;

std::vector<Val> Importer::subgraph(const onnx::GraphProto &g, const std::vector<Val> &inputs, int64_t opset) {
  if (size_t(g.input_size()) != inputs.size())
    throw BadModel("the subgraph `" + g.name() + "` has " + std::to_string(g.input_size()) + " inputs; " + std::to_string(inputs.size()) +
                   " are given");
  // The subgraph's names shadow the enclosing ones while it is converted, and are dropped after
  // (a Loop unrolled converts its body once per iteration, with other values under the same names).
  struct Scope {
    Importer &I;
    std::map<std::string, Val> env;
    std::string node, op;
    ir::Loc loc;
    std::vector<std::string> local;
    ~Scope() {
      for (auto &name : local) I.materialized_.erase(name);
      I.env = std::move(env);
      I.currentNode = node;
      I.currentOp = op;
      I.loc_ = loc;
    }
  } scope{*this, env, currentNode, currentOp, loc_, {}};
  for (int i = 0; i < g.input_size(); ++i) {
    Val x = inputs[size_t(i)];
    x.name = g.input(i).name();
    scope.local.push_back(x.name);
    env[x.name] = std::move(x);
  }
  for (auto &t : g.initializer()) {
    Val x = ofKnown(tensorOfProto(t, baseDir_));
    x.name = t.name();
    scope.local.push_back(x.name);
    env[x.name] = std::move(x);
  }
  for (auto &nd : g.node())
    for (auto &o : nd.output()) scope.local.push_back(o);
  convertNodes(g, opset);
  std::vector<Val> out;
  for (auto &o : g.output()) {
    auto it = env.find(o.name());
    if (it == env.end()) throw BadModel("the subgraph `" + g.name() + "` does not compute its output `" + o.name() + "`");
    out.push_back(it->second);
  }
  return out;
}

std::vector<ir::Value *> Importer::scan(const std::vector<ir::Value *> &inits, const std::vector<ir::Value *> &xs, Dim length, bool reverse,
                                        const Step &step) {
  auto body = std::make_shared<ir::Graph>("step");
  std::vector<ir::Value *> carryParams, xParams;
  for (size_t i = 0; i < inits.size(); ++i) carryParams.push_back(body->addParam("carry" + std::to_string(i), inits[i]->type));
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i]->type.rank() == 0) throw BadModel("a scanned input has rank 0");
    xParams.push_back(body->addParam("x" + std::to_string(i), ir::sliceType(xs[i]->type)));
  }
  ir::Graph *outer = g_;
  g_ = body.get();
  std::vector<ir::Value *> outs;
  try {
    outs = step(carryParams, xParams);
  } catch (...) {
    g_ = outer;
    throw;
  }
  g_ = outer;
  if (outs.size() < inits.size()) throw BadModel("a scan's step returns fewer values than it carries");
  for (size_t i = 0; i < inits.size(); ++i) {
    if (outs[i]->type.dims != inits[i]->type.dims)
      throw Unsupported("a loop-carried value changes its shape from " + inits[i]->type.str() + " to " + outs[i]->type.str() +
                        " (a scan's carries keep their types)");
    if (outs[i]->type != inits[i]->type) outs[i] = body->add(OpKind::Cast, {outs[i]}, {{"dtype", ir::DTypeAttr{inits[i]->type.dtype, {}}}}, loc_);
  }
  body->outputs = outs;

  // Values of the enclosing graph that the body reads become its leading parameters (the consts).
  std::unordered_map<const ir::Value *, ir::Value *> inside;
  for (ir::Value *p : body->params) inside[p] = p;
  for (const ir::Op *o : body->ops)
    for (ir::Value *r : o->results) inside[r] = r;
  std::vector<ir::Value *> consts, constParams;
  auto close = [&](ir::Value *&v) {
    auto it = inside.find(v);
    if (it != inside.end()) {
      v = it->second;
      return;
    }
    ir::Value *p = body->addParam("const" + std::to_string(consts.size()), v->type);
    consts.push_back(v);
    constParams.push_back(p);
    inside[v] = p;
    v = p;
  };
  for (ir::Op *o : body->ops)
    for (ir::Value *&x : o->operands) close(x);
  for (ir::Value *&o : body->outputs) close(o);
  std::vector<ir::Value *> params = constParams;
  params.insert(params.end(), carryParams.begin(), carryParams.end());
  params.insert(params.end(), xParams.begin(), xParams.end());
  body->params = params;
  body->renumber();
  ir::Op *op = nullptr;
  try {
    op = ir::addScan(*g_, body, consts, inits, xs, length, reverse, loc_);
  } catch (const ir::IRError &e) {
    throw BadModel("scan: " + e.message);
  }
  return op->results;
}

// A named namespace: the rules' files compile as one translation unit (onnx/CMakeLists.txt).
namespace control_ops {

/// The Loop iterations an import unrolls at most, all Loops together.
constexpr int64_t kMaxUnrolled = 1024;

const onnx::GraphProto &graphAttr(Node &n, const char *name) {
  auto *a = n.attr(name);
  if (!a || a->type() != onnx::AttributeProto::GRAPH) throw BadModel(std::string("the attribute `") + name + "` (a graph) is missing");
  return a->g();
}

/// A boolean condition known at import: one element.
bool knownCondition(Importer &I, const Val &x, const char *what) {
  const rt::Tensor &t = I.known(x, what);
  if (t.numel() != 1) throw BadModel(std::string("the ") + what + " must have one element");
  return t.toI64(0) != 0;
}

V scalarOf(Importer &I, V x, const char *what) {
  int64_t n = 1;
  for (const Dim &d : x->type.dims) {
    auto c = d.constantValue();
    if (!c) throw BadModel(std::string("the ") + what + " must have one element");
    n *= *c;
  }
  if (n != 1) throw BadModel(std::string("the ") + what + " must have one element");
  return I.reshape(x, {});
}

Val knownScalar(rt::Tensor t) { return Importer::ofKnown(std::move(t)); }

/// How a Loop body's condition output relates to its condition input, read from the body: `Keeps`
/// when it is the input through Identity nodes, `True` when it is a Constant true, else `Computed`.
enum class BodyCondition { Keeps, True, Computed };
BodyCondition bodyCondition(const onnx::GraphProto &body) {
  if (body.output_size() < 1 || body.input_size() < 2) return BodyCondition::Computed;
  std::string name = body.output(0).name();
  for (int hops = 0; hops <= body.node_size(); ++hops) {
    if (name == body.input(1).name()) return BodyCondition::Keeps;
    const onnx::NodeProto *producer = nullptr;
    for (auto &nd : body.node())
      for (auto &o : nd.output())
        if (o == name) producer = &nd;
    if (!producer) return BodyCondition::Computed;
    if (producer->op_type() == "Identity" && producer->input_size() == 1) {
      name = producer->input(0);
      continue;
    }
    if (producer->op_type() == "Constant")
      for (auto &a : producer->attribute())
        if (a.name() == "value" && a.t().data_type() == onnx::TensorProto::BOOL) {
          try {
            rt::Tensor t = tensorOfProto(a.t(), ".");
            if (t.numel() == 1 && t.toI64(0) != 0) return BodyCondition::True;
          } catch (const std::exception &) {
          }
        }
    return BodyCondition::Computed;
  }
  return BodyCondition::Computed;
}

rt::Tensor scalarTensor(DType dt, int64_t value) {
  rt::Tensor t = rt::Tensor::empty({}, dt);
  t.fromI64(0, value);
  return t;
}

/// x[None]: a new axis 0 of extent 1.
V unsqueeze0(Importer &I, V x) {
  std::vector<Dim> d = Importer::dims(x);
  d.insert(d.begin(), D(1));
  return I.reshape(x, d);
}

/// Moves axis `from` of x to position `to` (a transpose).
V moveAxis(Importer &I, V x, size_t from, size_t to) {
  std::vector<int64_t> perm;
  for (size_t i = 0; i < x->type.rank(); ++i)
    if (i != from) perm.push_back(int64_t(i));
  perm.insert(perm.begin() + long(to), int64_t(from));
  return I.transpose(x, perm);
}

} // namespace control_ops

using namespace control_ops;

/// If: the branch the condition picks (known at import), or both branches and `where` per output.
std::vector<Val> ruleIf(Importer &I, Node &n) {
  const onnx::GraphProto &thenG = graphAttr(n, "then_branch"), &elseG = graphAttr(n, "else_branch");
  if (!n.has(0)) throw BadModel("the condition is missing");
  if (n.in[0].k) return I.subgraph(knownCondition(I, n.in[0], "condition") ? thenG : elseG, {}, n.opset);
  V cond = scalarOf(I, I.v(n.in[0]), "condition");
  if (Importer::dtype(cond) != DType::Bool) cond = I.op(OpKind::Ne, {cond, c(I, cond, 0)});
  const Val condVal = n.in[0];
  std::vector<Val> a = I.subgraph(thenG, {}, n.opset);
  std::vector<Val> b = I.subgraph(elseG, {}, n.opset);
  if (a.size() != b.size()) throw BadModel("the branches have " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + " outputs");
  std::vector<Val> out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].seq || b[i].seq || a[i].str || b[i].str) {
      I.known(condVal, "condition of an If whose branches give sequences or strings");
      throw Unsupported("an If whose branches give sequences or strings needs its condition at import time");
    }
    V x = I.v(a[i]), y = I.v(b[i]);
    if (Importer::dims(x) != Importer::dims(y) || Importer::dtype(x) != Importer::dtype(y)) {
      I.known(condVal, "condition of an If whose branches differ in shape");
      throw Unsupported("the branches of If give " + x->type.str() + " and " + y->type.str() +
                        "; a condition known only at run time needs one shape and dtype (a data-dependent shape)");
    }
    out.push_back(Importer::of(I.op(OpKind::Where, {cond, x, y})));
  }
  return out;
}

/// Loop (opsets 7-17): a scan over the iteration numbers, or the body unrolled (see the top).
std::vector<Val> ruleLoop(Importer &I, Node &n) {
  const onnx::GraphProto &body = graphAttr(n, "body");
  if (n.in.size() < 2) throw BadModel("Loop needs the inputs M and cond (either may be empty)");
  const size_t N = n.in.size() - 2;
  if (size_t(body.input_size()) != 2 + N) throw BadModel("the body has " + std::to_string(body.input_size()) + " inputs, not " + std::to_string(2 + N));
  if (size_t(body.output_size()) < 1 + N) throw BadModel("the body has fewer outputs than the loop carries values");
  const size_t K = size_t(body.output_size()) - 1 - N;
  if (!n.has(0))
    throw Unsupported("a Loop without a trip count (a while loop) is not supported: Graph IR's scan runs a length fixed when the "
                      "graph is built");
  const std::vector<int64_t> m = I.knownInts(n.in[0], "trip count");
  if (m.size() != 1) throw BadModel("the trip count must have one element");
  const int64_t M = std::max<int64_t>(m[0], 0);
  if (M > (int64_t(1) << 31)) throw Unsupported("a trip count of " + std::to_string(M) + " is too large");
  for (size_t j = 0; j < N; ++j)
    if (!n.has(2 + j) || n.in[2 + j].seq || n.in[2 + j].str) throw Unsupported("a Loop carrying sequences, strings or optional values is not supported");
  const BodyCondition bc = bodyCondition(body);
  // The loop runs exactly M times when the condition starts true and the body keeps it so.
  bool startKnown = !n.has(1) || n.in[1].k.has_value();
  bool start = !n.has(1) || (n.in[1].k && knownCondition(I, n.in[1], "condition"));
  if (!startKnown && K > 0 && bc != BodyCondition::Computed) {
    start = knownCondition(I, n.in[1], "condition of a Loop with scan outputs"); // their number depends on it
    startKnown = true;
  }
  const bool fixed = startKnown && bc != BodyCondition::Computed;
  if (K > 0 && !fixed)
    throw Unsupported("a Loop whose body computes its condition, with scan outputs, has a data-dependent number of outputs");
  if (startKnown && !start) {
    if (K > 0) throw Unsupported("a Loop that runs no iteration, with scan outputs (their shape is not known)");
    std::vector<Val> out(n.in.begin() + 2, n.in.end());
    return out;
  }
  if (M == 0 && K > 0) throw Unsupported("a Loop of 0 iterations with scan outputs (their shape is not known)");
  if (M == 0) return std::vector<Val>(n.in.begin() + 2, n.in.end());

  std::vector<V> inits;
  for (size_t j = 0; j < N; ++j) inits.push_back(I.v(n.in[2 + j]));
  V startCond = fixed ? nullptr : scalarOf(I, I.v(n.in[1]), "condition");
  if (startCond && Importer::dtype(startCond) != DType::Bool) startCond = I.op(OpKind::Ne, {startCond, c(I, startCond, 0)});
  std::vector<Val> outVals;
  try {
    // One scan: the carries (active first when the body computes the condition), the iteration
    // numbers as xs.
    std::vector<V> carries = inits;
    if (!fixed) carries.insert(carries.begin(), startCond);
    V iters = I.iota({D(M)}, 0, DType::I64);
    auto step = [&](const std::vector<V> &carry, const std::vector<V> &xs) -> std::vector<V> {
      const size_t off = fixed ? 0 : 1;
      std::vector<Val> args{Importer::of(xs[0]), fixed ? knownScalar(scalarTensor(DType::Bool, 1)) : Importer::of(carry[0])};
      for (size_t j = 0; j < N; ++j) args.push_back(Importer::of(carry[off + j]));
      std::vector<Val> outs = I.subgraph(body, args, n.opset);
      std::vector<V> next;
      V active = fixed ? nullptr : carry[0];
      if (!fixed) {
        V condOut = scalarOf(I, I.v(outs[0]), "body's condition");
        if (Importer::dtype(condOut) != DType::Bool) condOut = I.op(OpKind::Ne, {condOut, c(I, condOut, 0)});
        next.push_back(I.op(OpKind::And, {active, condOut}));
      }
      for (size_t j = 0; j < N; ++j) {
        if (outs[1 + j].seq || outs[1 + j].str) throw Unsupported("a Loop carrying sequences or strings is not supported");
        V v = I.v(outs[1 + j]);
        // Once inactive (the condition turned false), the values stay.
        next.push_back(active ? I.op(OpKind::Where, {active, v, carry[off + j]}) : v);
      }
      for (size_t k = 0; k < K; ++k) {
        if (outs[1 + N + k].seq || outs[1 + N + k].str) throw Unsupported("a Loop whose scan outputs are sequences or strings is not supported");
        next.push_back(I.v(outs[1 + N + k]));
      }
      return next;
    };
    std::vector<V> res = I.scan(carries, {iters}, D(M), false, step);
    for (size_t j = fixed ? 0 : 1; j < res.size(); ++j) outVals.push_back(Importer::of(res[j]));
    return outVals;
  } catch (const Unsupported &) {
    // A body that needs its iteration number (or a value computed from it) at import: unrolled,
    // when the condition is fixed and the loop short.
    if (!fixed || M > kMaxUnrolled - I.unrolled) throw;
  }
  I.unrolled += M;
  std::vector<Val> vals(n.in.begin() + 2, n.in.end());
  std::vector<std::vector<V>> scans(K);
  for (int64_t i = 0; i < M; ++i) {
    std::vector<Val> args{knownScalar(scalarTensor(DType::I64, i)), knownScalar(scalarTensor(DType::Bool, 1))};
    args.insert(args.end(), vals.begin(), vals.end());
    std::vector<Val> outs = I.subgraph(body, args, n.opset);
    for (size_t j = 0; j < N; ++j) vals[j] = outs[1 + j];
    for (size_t k = 0; k < K; ++k) {
      if (outs[1 + N + k].seq || outs[1 + N + k].str) throw Unsupported("a Loop whose scan outputs are sequences or strings is not supported");
      scans[k].push_back(unsqueeze0(I, I.v(outs[1 + N + k])));
    }
  }
  for (size_t k = 0; k < K; ++k) {
    for (size_t i = 1; i < scans[k].size(); ++i)
      if (Importer::dims(scans[k][i]) != Importer::dims(scans[k][0]))
        throw Unsupported("a Loop whose scan output changes its shape between iterations");
    vals.push_back(Importer::of(I.concat(scans[k], 0)));
  }
  return vals;
}

namespace control_ops {

/// Scan's opset-9 form over values (one batch row in opset 8): `states`, `xs` with their scan axes
/// and directions, the outputs' axes and directions. Returns the final states, then the scan outputs.
std::vector<V> scanCore(Importer &I, Node &n, const onnx::GraphProto &body, const std::vector<V> &states, std::vector<V> xs,
                        const std::vector<int64_t> &inAxes, const std::vector<int64_t> &inDirs, const std::vector<int64_t> &outAxes,
                        const std::vector<int64_t> &outDirs, size_t K) {
  if (xs.empty()) throw BadModel("Scan needs at least one scan input");
  for (size_t j = 0; j < xs.size(); ++j) {
    const size_t a = Importer::axis(inAxes.empty() ? 0 : inAxes[j], xs[j]->type.rank());
    xs[j] = moveAxis(I, xs[j], a, 0);
    if (!inDirs.empty() && inDirs[j]) xs[j] = I.op(OpKind::Reverse, {xs[j]}, {{"axes", std::vector<int64_t>{0}}});
  }
  const Dim L = Importer::dims(xs[0])[0];
  for (V x : xs)
    if (Importer::dims(x)[0] != L) throw BadModel("Scan's inputs have different sequence lengths");
  const size_t N = states.size();
  auto step = [&](const std::vector<V> &carry, const std::vector<V> &xt) -> std::vector<V> {
    std::vector<Val> args;
    for (V c : carry) args.push_back(Importer::of(c));
    for (V x : xt) args.push_back(Importer::of(x));
    std::vector<Val> outs = I.subgraph(body, args, n.opset);
    std::vector<V> next;
    for (auto &o : outs) {
      if (o.seq || o.str) throw Unsupported("a Scan body giving sequences or strings is not supported");
      next.push_back(I.v(o));
    }
    return next;
  };
  std::vector<V> res = I.scan(states, xs, L, false, step);
  for (size_t k = 0; k < K; ++k) {
    V y = res[N + k];
    if (!outDirs.empty() && outDirs[k]) y = I.op(OpKind::Reverse, {y}, {{"axes", std::vector<int64_t>{0}}});
    const size_t rank = y->type.rank();
    const int64_t a = outAxes.empty() ? 0 : outAxes[k];
    if (a < -int64_t(rank) || a >= int64_t(rank)) throw BadModel("a scan_output_axes value is out of range");
    res[N + k] = moveAxis(I, y, 0, size_t(a < 0 ? a + int64_t(rank) : a));
  }
  return res;
}

} // namespace control_ops

/// Scan: opset 9-17 as one scan op; opset 8 (batch axis 0, sequence axis 1) one per batch row.
std::vector<Val> ruleScan(Importer &I, Node &n) {
  const onnx::GraphProto &body = graphAttr(n, "body");
  if (!n.attr("num_scan_inputs")) throw BadModel("the attribute `num_scan_inputs` is missing");
  const int64_t M = n.i("num_scan_inputs", 0);
  const bool batched = n.opset < 9;
  const size_t first = batched ? 1 : 0; // opset 8's sequence_lens
  if (batched && n.has(0)) throw Unsupported("Scan (opset 8) with sequence_lens is not supported");
  if (M < 1 || size_t(M) + first > n.in.size()) throw BadModel("num_scan_inputs does not fit the inputs");
  const size_t N = n.in.size() - first - size_t(M);
  if (size_t(body.output_size()) < N) throw BadModel("the body has fewer outputs than the scan's states");
  const size_t K = size_t(body.output_size()) - N;
  auto list = [&](const char *name, size_t count) {
    std::vector<int64_t> v = n.ints(name).value_or(std::vector<int64_t>{});
    if (!v.empty() && v.size() != count) throw BadModel(std::string("`") + name + "` has " + std::to_string(v.size()) + " values, not " + std::to_string(count));
    return v;
  };
  std::vector<V> states, xs;
  for (size_t j = 0; j < N + size_t(M); ++j) {
    if (!n.has(first + j)) throw BadModel("an input of Scan is missing");
    (j < N ? states : xs).push_back(I.v(n.in[first + j]));
  }
  if (!batched) {
    std::vector<V> res = scanCore(I, n, body, states, xs, list("scan_input_axes", size_t(M)), list("scan_input_directions", size_t(M)),
                                  list("scan_output_axes", K), list("scan_output_directions", K), K);
    std::vector<Val> out;
    for (V v : res) out.push_back(Importer::of(v));
    return out;
  }
  // Opset 8: axis 0 is the batch, axis 1 the sequence; one scan per row of a static batch.
  const std::vector<int64_t> dirs = list("directions", size_t(M));
  auto row = [&](V v, int64_t b) {
    if (v->type.rank() == 0) throw BadModel("Scan (opset 8)'s inputs have a batch axis");
    std::vector<Dim> d(Importer::dims(v).begin() + 1, Importer::dims(v).end());
    return I.reshape(I.sliceAxis(v, 0, D(b), D(b + 1)), d);
  };
  for (V v : xs)
    if (v->type.rank() < 2) throw BadModel("Scan (opset 8)'s scan inputs have a batch and a sequence axis");
  auto batch = Importer::dims(xs[0])[0].constantValue();
  if (!batch) throw Unsupported("Scan (opset 8) needs a static batch size");
  if (*batch > 1024) throw Unsupported("Scan (opset 8) over a batch of more than 1024 rows");
  std::vector<std::vector<V>> rows(N + K);
  for (int64_t b = 0; b < *batch; ++b) {
    std::vector<V> s, x;
    for (V v : states) s.push_back(row(v, b));
    for (V v : xs) x.push_back(row(v, b));
    std::vector<V> res = scanCore(I, n, body, s, x, {}, dirs, {}, {}, K);
    for (size_t j = 0; j < res.size(); ++j) rows[j].push_back(unsqueeze0(I, res[j]));
  }
  std::vector<Val> out;
  for (auto &r : rows) out.push_back(Importer::of(I.concat(r, 0)));
  return out;
}

} // namespace tsr::onnxio
