// The rules of the scan region op (ScanRules.h). Both build new body graphs from the op's body
// with the transforms that work on spans of one graph (reverseMode, forwardMode, batchSpan):
// the body is cloned into a scratch graph, transformed there, and the parts are cloned into the
// bodies of new scans. So a scan's derivative and its batched form are scans again, and their
// bodies are compiled once like the original's.
#include "ir/autodiff/ScanRules.h"

#include "ir/Scan.h"
#include "ir/autodiff/Autodiff.h"
#include "ir/autodiff/Batching.h"

#include <unordered_map>
#include <unordered_set>

namespace tsr::ir::autodiff {

namespace {

using ValueMap = std::unordered_map<const Value *, Value *>;

// Clones `ops` into `to`, reading operands through `map` (values not in it are taken as they
// are: they must be `to`'s), each result joining the map.
void cloneOps(Graph &to, const std::vector<Op *> &ops, ValueMap &map) {
  for (const Op *o : ops) {
    std::vector<Value *> operands;
    for (Value *x : o->operands) {
      auto it = map.find(x);
      operands.push_back(it == map.end() ? x : it->second);
    }
    std::vector<Type> types;
    for (const Value *r : o->results) types.push_back(r->type);
    Op *c = to.addWithTypes(o->kind, operands, o->attrs, types, o->loc);
    c->body = o->body;
    for (size_t k = 0; k < o->results.size(); ++k) map[o->results[k]] = c->results[k];
  }
}

Value *mapped(const ValueMap &map, Value *v) {
  auto it = map.find(v);
  return it == map.end() ? v : it->second;
}

// The vjp of scan. For a body f(consts, carry, x) -> (carry', y), the joint graph J holds f's ops
// and, appended by reverseMode, the ops of its vjp from the cotangents of (carry', y). The
// values of f's ops that the vjp ops read are the residuals: the forward scan's body is replaced
// by f returning them as further ys (stacked per step; the carry entering a step likewise when
// the vjp reads it), and the backward scan runs J's vjp ops in the opposite order of steps, with
// the carries' cotangents as its carries (plus the consts' cotangents, summed over the steps)
// and the residuals, the xs and the ys' cotangents as its xs. Ops without operands (constants)
// that the vjp reads are cloned into the backward body instead of stored.
std::vector<Value *> scanVjp(Emitter &E, Op &op, const std::vector<Value *> &gs, const std::vector<bool> &active) {
  auto s = scanShape(op);
  if (!s || !op.body) throw IRError{"autodiff: a scan without its body or its attributes"};
  const std::shared_ptr<Graph> original = op.body; // kept alive: op.body is replaced below
  const Graph &body = *original;
  const size_t C = s->consts, K = s->carries, X = s->xs, Y = body.outputs.size() - K;
  // The body's inputs that get cotangents: the float carries (a carry can become active through
  // the steps), and the active float consts and xs.
  std::vector<bool> diff(body.params.size(), false);
  for (size_t j = 0; j < body.params.size(); ++j) {
    if (!differentiable(body.params[j]->type)) continue;
    diff[j] = (j >= C && j < C + K) || active[j];
  }

  // J: the body's ops, then reverse mode from one cotangent parameter per float output.
  Graph J(body.name + ".vjp");
  ValueMap toJ;
  for (Value *p : body.params) toJ[p] = J.addParam(p->name, p->type);
  cloneOps(J, body.ops, toJ);
  const size_t nFwd = J.ops.size();
  std::vector<Value *> outs, seeds(body.outputs.size(), nullptr), ins;
  for (Value *o : body.outputs) outs.push_back(mapped(toJ, o));
  for (size_t k = 0; k < outs.size(); ++k)
    if (differentiable(outs[k]->type)) seeds[k] = J.addParam("ct" + std::to_string(k), outs[k]->type);
  for (size_t j = 0; j < body.params.size(); ++j)
    if (diff[j]) ins.push_back(toJ.at(body.params[j]));
  Span span{&J, 0, nFwd, ins, outs, nullptr, nullptr};
  std::vector<Value *> cots = reverseMode(span, seeds);

  // What the vjp ops read from the forward part.
  std::unordered_set<const Value *> fwdResults, jParamsUsed;
  for (size_t i = 0; i < nFwd; ++i)
    for (const Value *r : J.ops[i]->results) fwdResults.insert(r);
  // Forward values that depend on no parameter (constants, their broadcasts) are recomputed in
  // the backward body rather than stored: `remat`, every such op, in order (dce drops the unread).
  std::unordered_set<const Value *> paramFree;
  std::vector<Op *> remat;
  for (size_t i = 0; i < nFwd; ++i) {
    Op *o = J.ops[i];
    bool free = true;
    for (const Value *x : o->operands) free &= paramFree.count(x) > 0;
    if (!free || o->kind == OpKind::Scan || o->kind == OpKind::KernelCall) continue;
    remat.push_back(o);
    for (const Value *r : o->results) paramFree.insert(r);
  }
  // With the checkpoint policy every forward op is recomputed in the backward body, from the
  // carries stored per step: nothing else is stored.
  if (s->checkpoint) {
    remat.assign(J.ops.begin(), J.ops.begin() + long(nFwd));
    for (size_t i = 0; i < nFwd; ++i)
      for (const Value *r : J.ops[i]->results) paramFree.insert(r);
    for (size_t k = 0; k < K; ++k) jParamsUsed.insert(toJ.at(body.params[C + k]));
  }
  std::vector<Value *> residuals;
  std::unordered_set<const Value *> seen;
  auto need = [&](Value *v) {
    if (!seen.insert(v).second) return;
    if (!fwdResults.count(v)) { jParamsUsed.insert(v); return; }
    if (paramFree.count(v)) return;
    if (v->type.isKey()) throw AutodiffError{AutodiffError::Kind::NonDifferentiable, "a random key that the derivative of a scan body reads", v->def->loc};
    residuals.push_back(v);
  };
  std::vector<Op *> bwdOps(J.ops.begin() + long(nFwd), J.ops.end());
  std::unordered_set<const Value *> bwdDefined;
  for (Op *o : bwdOps) {
    for (Value *x : o->operands)
      if (!bwdDefined.count(x)) need(x);
    for (Value *r : o->results) bwdDefined.insert(r);
  }
  for (Value *c : cots)
    if (!bwdDefined.count(c)) need(c);
  // The carries entering a step that the vjp reads are stored too.
  std::vector<size_t> storedCarries;
  for (size_t k = 0; k < K; ++k)
    if (jParamsUsed.count(toJ.at(body.params[C + k]))) storedCarries.push_back(k);

  // The forward scan's new body: f's ops, returning the residuals and stored carries as ys.
  auto fwd = std::make_shared<Graph>(body.name);
  ValueMap toF;
  for (Value *p : body.params) toF[p] = fwd->addParam(p->name, p->type);
  cloneOps(*fwd, body.ops, toF);
  for (Value *o : body.outputs) fwd->outputs.push_back(mapped(toF, o));
  ValueMap jToF; // J's forward values -> fwd's
  for (size_t j = 0; j < body.params.size(); ++j) jToF[toJ.at(body.params[j])] = fwd->params[j];
  for (size_t i = 0; i < nFwd; ++i)
    for (size_t k = 0; k < J.ops[i]->results.size(); ++k) jToF[J.ops[i]->results[k]] = fwd->ops[i]->results[k];
  for (Value *r : residuals) fwd->outputs.push_back(jToF.at(r));
  for (size_t k : storedCarries) fwd->outputs.push_back(fwd->params[C + k]);
  fwd->renumber();
  // The op keeps its results and gains one per residual and stored carry.
  op.body = fwd;
  std::vector<Value *> stored;
  for (Value *r : residuals) stored.push_back(E.graph().addResult(&op, stackedType(r->type, s->length)));
  for (size_t k : storedCarries) stored.push_back(E.graph().addResult(&op, stackedType(body.params[C + k]->type, s->length)));

  // The backward body: (consts; cotangents of the float carries, sums of the consts' cotangents;
  // residuals, stored carries, xs, the ys' cotangents) -> (the carries' and consts' cotangents;
  // the xs' cotangents).
  auto bwd = std::make_shared<Graph>(body.name + ".bwd");
  ValueMap toB; // J's values -> bwd's
  std::vector<Value *> bConsts, bInits, bXs;
  for (size_t j = 0; j < C; ++j) {
    toB[toJ.at(body.params[j])] = bwd->addParam("const" + std::to_string(j), body.params[j]->type);
    bConsts.push_back(op.operands[j]);
  }
  std::vector<size_t> floatCarries, diffConsts, diffXs, ctYs;
  for (size_t k = 0; k < K; ++k)
    if (diff[C + k]) floatCarries.push_back(k);
  for (size_t j = 0; j < C; ++j)
    if (diff[j]) diffConsts.push_back(j);
  for (size_t x = 0; x < X; ++x)
    if (diff[C + K + x]) diffXs.push_back(x);
  for (size_t y = 0; y < Y; ++y)
    if (seeds[K + y]) ctYs.push_back(y);
  auto orZeros = [&](Value *g, const Type &t) { return g ? g : E.zeros(t); };
  for (size_t k : floatCarries) {
    toB[seeds[k]] = bwd->addParam("ct_carry" + std::to_string(k), seeds[k]->type);
    bInits.push_back(orZeros(gs[k], op.results[k]->type));
  }
  std::vector<Value *> constAcc;
  for (size_t j : diffConsts) {
    constAcc.push_back(bwd->addParam("ct_const" + std::to_string(j), body.params[j]->type));
    bInits.push_back(E.zeros(body.params[j]->type));
  }
  for (size_t r = 0; r < residuals.size(); ++r) {
    toB[residuals[r]] = bwd->addParam("res" + std::to_string(r), residuals[r]->type);
    bXs.push_back(stored[r]);
  }
  for (size_t q = 0; q < storedCarries.size(); ++q) {
    size_t k = storedCarries[q];
    toB[toJ.at(body.params[C + k])] = bwd->addParam("carry" + std::to_string(k), body.params[C + k]->type);
    bXs.push_back(stored[residuals.size() + q]);
  }
  for (size_t x = 0; x < X; ++x) {
    toB[toJ.at(body.params[C + K + x])] = bwd->addParam("x" + std::to_string(x), body.params[C + K + x]->type);
    bXs.push_back(op.operands[C + K + x]);
  }
  for (size_t y : ctYs) {
    toB[seeds[K + y]] = bwd->addParam("ct_y" + std::to_string(y), seeds[K + y]->type);
    bXs.push_back(orZeros(gs[K + y], op.results[K + y]->type));
  }
  cloneOps(*bwd, remat, toB);
  cloneOps(*bwd, bwdOps, toB);
  // ins (and cots) follow the order of `diff`: consts, carries, xs.
  std::unordered_map<size_t, Value *> cotOf;
  for (size_t j = 0, n = 0; j < body.params.size(); ++j)
    if (diff[j]) cotOf[j] = mapped(toB, cots[n++]);
  for (size_t k : floatCarries) bwd->outputs.push_back(cotOf.at(C + k));
  {
    Emitter B(*bwd, E.loc());
    for (size_t q = 0; q < diffConsts.size(); ++q)
      bwd->outputs.push_back(B.fit(B.add(constAcc[q], cotOf.at(diffConsts[q])), constAcc[q]->type));
  }
  for (size_t x : diffXs) bwd->outputs.push_back(cotOf.at(C + K + x));
  bwd->renumber();

  Op *back = addScan(E.graph(), bwd, bConsts, bInits, bXs, s->length, !s->reverse, E.loc());
  std::vector<Value *> out(op.operands.size(), nullptr);
  size_t r = 0;
  for (size_t k : floatCarries) out[C + k] = back->results[r++];
  for (size_t j : diffConsts) out[j] = back->results[r++];
  for (size_t x : diffXs) out[C + K + x] = back->results[r++];
  return out;
}

// The jvp of scan: a scan whose body computes f and, from forwardMode over it, the tangents of
// its outputs from those of its inputs (tangent consts as further consts, tangent carries as
// further carries, tangent xs as further xs). Inactive operands have zero tangents.
std::vector<Value *> scanJvp(Emitter &E, const Op &op, const std::vector<Value *> &tangents) {
  auto s = scanShape(op);
  if (!s || !op.body) throw IRError{"autodiff: a scan without its body or its attributes"};
  const Graph &body = *op.body;
  const size_t C = s->consts, K = s->carries, X = s->xs;
  // Carries carry tangents when they are floats (a tangent can enter them through the steps).
  std::vector<bool> diff(body.params.size(), false);
  for (size_t j = 0; j < body.params.size(); ++j)
    diff[j] = differentiable(body.params[j]->type) && ((j >= C && j < C + K) || tangents[j]);
  auto nb = std::make_shared<Graph>(body.name + ".jvp");
  ValueMap toN;
  std::vector<Value *> tParams(body.params.size(), nullptr);
  std::vector<Value *> consts, inits, xs;
  auto group = [&](size_t lo, size_t hi, std::vector<Value *> &outer, bool stackedOperand) {
    for (size_t j = lo; j < hi; ++j) {
      toN[body.params[j]] = nb->addParam(body.params[j]->name, body.params[j]->type);
      outer.push_back(op.operands[j]);
    }
    for (size_t j = lo; j < hi; ++j) {
      if (!diff[j]) continue;
      tParams[j] = nb->addParam("t_" + body.params[j]->name, body.params[j]->type);
      const Type &ot = op.operands[j]->type;
      outer.push_back(tangents[j] ? tangents[j] : E.zeros(stackedOperand ? ot : body.params[j]->type));
    }
  };
  group(0, C, consts, false);
  group(C, C + K, inits, false);
  group(C + K, C + K + X, xs, true);
  size_t begin = nb->ops.size();
  cloneOps(*nb, body.ops, toN);
  std::vector<Value *> outs, ins, ts;
  for (Value *o : body.outputs) outs.push_back(mapped(toN, o));
  for (size_t j = 0; j < body.params.size(); ++j)
    if (diff[j]) { ins.push_back(toN.at(body.params[j])); ts.push_back(tParams[j]); }
  Span span{nb.get(), begin, nb->ops.size(), ins, outs, nullptr, nullptr};
  std::vector<Value *> touts = forwardMode(span, ts);
  // Outputs: the carries and their tangents, then the ys and theirs (float outputs only).
  std::vector<int> tangentAt(outs.size(), -1);
  for (size_t k = 0; k < K; ++k) nb->outputs.push_back(outs[k]);
  for (size_t k = 0; k < K; ++k)
    if (diff[C + k]) nb->outputs.push_back(touts[k]);
  for (size_t y = K; y < outs.size(); ++y) nb->outputs.push_back(outs[y]);
  for (size_t y = K; y < outs.size(); ++y)
    if (differentiable(outs[y]->type)) nb->outputs.push_back(touts[y]);
  nb->renumber();
  Op *f = addScan(E.graph(), nb, consts, inits, xs, s->length, s->reverse, E.loc(), s->checkpoint);
  std::vector<Value *> res(op.results.size(), nullptr);
  size_t at = K;
  for (size_t k = 0; k < K; ++k)
    if (diff[C + k]) res[k] = f->results[at++];
  at += outs.size() - K;
  for (size_t y = K; y < outs.size(); ++y)
    if (differentiable(outs[y]->type)) res[y] = f->results[at++];
  return res;
}

// The batching rule: which carries are batched is a fixed point (a carry that enters unbatched
// becomes batched when the body mixes a batched value into it); the body is batched by batchSpan
// in a graph of its own, on example placeholders, and the scan of that body runs over xs whose
// scan axis is moved first ([L, B, ...]); its ys come back as [L, B, ...] and are moved to
// [B, L, ...].
std::vector<Value *> scanBatch(Emitter &E, const Op &op, const std::vector<Value *> &xsIn, const std::vector<bool> &bd, const Dim &B) {
  auto s = scanShape(op);
  if (!s || !op.body) throw IRError{"vmap: a scan without its body or its attributes"};
  const Graph &body = *op.body;
  const size_t C = s->consts, K = s->carries;
  std::vector<bool> pb(bd.begin(), bd.end()); // per body parameter: batched
  for (bool changed = true; changed;) {
    changed = false;
    std::unordered_set<const Value *> dep;
    for (size_t j = 0; j < body.params.size(); ++j)
      if (pb[j]) dep.insert(body.params[j]);
    for (const Op *o : body.ops) {
      bool any = false;
      for (const Value *x : o->operands) any |= dep.count(x) > 0;
      if (any)
        for (const Value *r : o->results) dep.insert(r);
    }
    for (size_t k = 0; k < K; ++k)
      if (!pb[C + k] && dep.count(body.outputs[k])) pb[C + k] = changed = true;
  }
  auto batchedType = [&](const Type &t) { return stackedType(t, B); };
  auto nb = std::make_shared<Graph>(body.name + ".vmap");
  Emitter N(*nb, E.loc());
  std::vector<Value *> placeholders, batchedVals;
  ValueMap toN;
  for (size_t j = 0; j < body.params.size(); ++j) {
    const Type &t = body.params[j]->type;
    Value *p = nb->addParam(body.params[j]->name, pb[j] ? batchedType(t) : t);
    if (!pb[j]) { toN[body.params[j]] = p; continue; }
    Value *ex = N.zeros(t); // the example placeholder: batchSpan maps it to p
    toN[body.params[j]] = ex;
    placeholders.push_back(ex);
    batchedVals.push_back(p);
  }
  size_t begin = nb->ops.size();
  cloneOps(*nb, body.ops, toN);
  std::vector<Value *> outs;
  for (Value *o : body.outputs) outs.push_back(mapped(toN, o));
  Span span{nb.get(), begin, nb->ops.size(), placeholders, outs, nullptr, nullptr};
  std::vector<Value *> bouts = batchSpan(span, batchedVals, B, nullptr, nullptr);
  for (size_t k = 0; k < outs.size(); ++k) {
    const bool wantBatched = k >= K || pb[C + k];
    Value *v = bouts[k];
    if (!v) {
      // Unbatched: an example placeholder's value passed through, or one the same for every example.
      v = outs[k];
      for (size_t q = 0; q < placeholders.size(); ++q)
        if (v == placeholders[q]) v = batchedVals[q];
      if (wantBatched && v->type.rank() == outs[k]->type.rank()) v = N.broadcast(v, batchedType(v->type).dims);
    }
    nb->outputs.push_back(v);
  }
  nb->renumber();
  std::vector<Value *> consts, inits, xs;
  for (size_t j = 0; j < C; ++j) consts.push_back(xsIn[j]);
  for (size_t k = 0; k < K; ++k) {
    Value *v = xsIn[C + k];
    inits.push_back(pb[C + k] && !bd[C + k] ? E.broadcast(v, batchedType(v->type).dims) : v);
  }
  auto swap01 = [&](Value *v) {
    std::vector<int64_t> perm{1, 0};
    for (size_t d = 2; d < v->type.rank(); ++d) perm.push_back(int64_t(d));
    return E.op(OpKind::Transpose, {v}, {{"perm", perm}});
  };
  for (size_t j = C + K; j < op.operands.size(); ++j) xs.push_back(bd[j] ? swap01(xsIn[j]) : xsIn[j]);
  Op *f = addScan(E.graph(), nb, consts, inits, xs, s->length, s->reverse, E.loc(), s->checkpoint);
  std::vector<Value *> res;
  for (size_t k = 0; k < K; ++k) {
    Value *v = f->results[k];
    res.push_back(pb[C + k] ? v : E.broadcast(v, batchedType(v->type).dims));
  }
  for (size_t y = K; y < f->results.size(); ++y) res.push_back(swap01(f->results[y]));
  return res;
}

} // namespace

GradRule scanGradRule() {
  GradRule r;
  r.vjpResults = scanVjp;
  r.jvpResults = scanJvp;
  return r;
}

BatchRule scanBatchRule() { return BatchRule{scanBatch}; }

} // namespace tsr::ir::autodiff
