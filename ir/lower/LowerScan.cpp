// scan(f, init, xs, length=None, reverse=False) (jax.lax.scan; docs/language.md, scan) lowered to
// one scan region op (ir/Scan.h): `f` is lowered once, into a body graph of its own, by a
// Lowering of that graph that shares this one's frames (so that lambdas and closures see the
// same names). What the body reads from the enclosing graph (a closure's tensors) becomes the
// scan's leading operands, the body's `consts`, so that the body is a closed graph the executors
// can compile and run on its own.
#include "ir/lower/Lowering.h"
#include "ir/Scan.h"

#include <functional>
#include <unordered_map>

namespace tsr::ir::lowering {

namespace {

// The leaves of a pytree that the scan threads: tensors and keys, in a walk that a second pytree
// of the same structure (the body's returned carry) follows by position and dict key.
void leavesLike(const LVRef &like, const LVRef &v, std::vector<LVRef> &out, const std::function<void()> &mismatch) {
  switch (like->kind) {
  case LV::K::Tensor: case LV::K::Key: out.push_back(v); return;
  case LV::K::Tuple: case LV::K::List:
    if ((v->kind != LV::K::Tuple && v->kind != LV::K::List) || v->elems.size() != like->elems.size()) mismatch();
    for (size_t i = 0; i < like->elems.size(); ++i) leavesLike(like->elems[i], v->elems[i], out, mismatch);
    return;
  case LV::K::Dict:
    if (v->kind != LV::K::Dict) mismatch();
    for (auto &[k, e] : like->fields) {
      const LVRef *found = nullptr;
      for (auto &f : v->fields) if (f.first == k) found = &f.second;
      if (!found) mismatch();
      leavesLike(e, *found, out, mismatch);
    }
    return;
  default: return; // None and compile-time values: structure, the same at every step
  }
}

// `like` with its tensor and key leaves replaced by `vals[next++]` (leavesLike's order).
LVRef rebuild(const LVRef &like, const std::vector<Value *> &vals, size_t &next) {
  switch (like->kind) {
  case LV::K::Tensor: case LV::K::Key: return tensor(vals.at(next++));
  case LV::K::Tuple: case LV::K::List: case LV::K::Dict: {
    LV copy = *like;
    for (auto &e : copy.elems) e = rebuild(e, vals, next);
    for (auto &f : copy.fields) f.second = rebuild(f.second, vals, next);
    return mk(copy);
  }
  default: return like;
  }
}

} // namespace

LVRef Lowering::scanCall(const LVRef &f, LVRef init, const LVRef &xs, const LVRef &length, bool reverse, SourceRange at) {
  // Python numbers among the carries and ys become tensors, as jax.lax.scan makes them arrays.
  std::function<LVRef(Lowering &, const LVRef &)> tensors = [&](Lowering &L, const LVRef &v) -> LVRef {
    if (isNumber(v)) return tensor(L.tensorOf(v, at));
    if (v->kind != LV::K::Tuple && v->kind != LV::K::List && v->kind != LV::K::Dict) return v;
    LV copy = *v;
    for (auto &e : copy.elems) e = tensors(L, e);
    for (auto &fl : copy.fields) fl.second = tensors(L, fl.second);
    return mk(copy);
  };
  init = tensors(*this, init);
  auto noMatch = [&] { unsupported("a scan body whose carry has another structure than `init`", at); };
  std::vector<LVRef> initLeaves, xsLeaves;
  leavesLike(init, init, initLeaves, noMatch);
  if (xs && xs->kind != LV::K::None) leavesLike(xs, xs, xsLeaves, noMatch);
  Dim n;
  if (length && length->kind != LV::K::None) n = dimOf(length, at);
  else if (!xsLeaves.empty() && xsLeaves[0]->kind == LV::K::Tensor && xsLeaves[0]->v->type.rank() > 0) n = xsLeaves[0]->v->type.dims[0];
  else unsupported("a scan without `xs` or `length`", at);

  // The body: parameters for the carries and one step's slice of each xs, then f lowered once.
  size_t scans = 0;
  for (const Op *o : g_.ops) scans += o->kind == OpKind::Scan;
  auto body = std::make_shared<Graph>(g_.name + ".scan" + std::to_string(scans));
  std::vector<Value *> carryParams, xParams, inits, xsVals;
  for (size_t i = 0; i < initLeaves.size(); ++i) {
    inits.push_back(initLeaves[i]->v);
    carryParams.push_back(body->addParam("carry" + std::to_string(i), initLeaves[i]->v->type));
  }
  for (size_t i = 0; i < xsLeaves.size(); ++i) {
    Value *x = xsLeaves[i]->v;
    if (x->type.isKey() || x->type.rank() == 0) unsupported("a scan over a value without a leading axis", at);
    xsVals.push_back(x);
    xParams.push_back(body->addParam("x" + std::to_string(i), sliceType(x->type)));
  }
  size_t next = 0;
  LVRef carryIn = rebuild(init, carryParams, next);
  next = 0;
  LVRef xIn = xsLeaves.empty() ? none() : rebuild(xs, xParams, next);

  // scan(checkpoint(f), ...): the body is f, and the scan's vjp recomputes it from the stored
  // carries instead of storing its residuals (the op's `checkpoint` attribute).
  LVRef fn = f;
  bool checkpointed = false;
  if (fn->kind == LV::K::Transformed && fn->transform == sema::Transform::Checkpoint && fn->inner) {
    fn = fn->inner;
    checkpointed = true;
  }
  Lowering sub(m_, p_, *body);
  sub.frames_ = frames_;
  sub.depth_ = depth_;
  LVRef r = sub.callValue(fn, {carryIn, xIn}, {}, at);
  if ((r->kind != LV::K::Tuple && r->kind != LV::K::List) || r->elems.size() != 2) unsupported("a scan body that does not return (carry, y)", at);
  // What autodiff records while lowering (stop_gradient's constants, checkpoint and custom_vjp
  // regions) is kept per graph by the lowering that made it, and the scan's derivative
  // (ir/autodiff/ScanRules.cpp) differentiates the body graph alone: it would be lost silently.
  if (!sub.constants_.empty() || !sub.regions_.empty())
    unsupported("stop_gradient or checkpoint inside a scan body", at);
  std::vector<LVRef> carryOut, yLeaves;
  leavesLike(init, tensors(sub, r->elems[0]), carryOut, noMatch);
  LVRef yTree = tensors(sub, r->elems[1]);
  leavesLike(yTree, yTree, yLeaves, noMatch);
  for (size_t i = 0; i < carryOut.size(); ++i) {
    Value *v = carryOut[i]->v;
    const Type &want = inits[i]->type;
    if (v->type.dims != want.dims || v->type.isKey() != want.isKey())
      unsupported("a scan body whose carry changes from " + want.str() + " to " + v->type.str(), at);
    if (v->type != want) v = sub.op(OpKind::Cast, {v}, {{"dtype", DTypeAttr{want.dtype, want.policies}}}, at);
    body->outputs.push_back(v);
  }
  for (const LVRef &y : yLeaves) body->outputs.push_back(y->v);

  // Captures: every value the body's ops or outputs read that the body does not define is a
  // value of the enclosing graph; each becomes a parameter of the body (a const of the scan).
  std::unordered_map<const Value *, Value *> captured;
  std::vector<Value *> consts, constParams;
  for (Value *p : body->params) captured[p] = p;
  for (const Op *o : body->ops)
    for (Value *res : o->results) captured[res] = res;
  auto close = [&](Value *&v) {
    auto it = captured.find(v);
    if (it != captured.end()) { v = it->second; return; }
    Value *p = body->addParam("const" + std::to_string(consts.size()), v->type);
    consts.push_back(v);
    constParams.push_back(p);
    captured[v] = p;
    v = p;
  };
  for (Op *o : body->ops)
    for (Value *&x : o->operands) close(x);
  for (Value *&o : body->outputs) close(o);
  // The consts come first among the parameters (ir/Scan.h's order).
  std::vector<Value *> params = constParams;
  params.insert(params.end(), carryParams.begin(), carryParams.end());
  params.insert(params.end(), xParams.begin(), xParams.end());
  body->params = params;
  body->renumber();

  Op *scan = nullptr;
  try {
    scan = addScan(g_, body, consts, inits, xsVals, n, reverse, loc(at), checkpointed);
  } catch (IRError &e) {
    unsupported(e.message, at);
  }
  std::vector<Value *> finals(scan->results.begin(), scan->results.begin() + long(inits.size()));
  std::vector<Value *> ys(scan->results.begin() + long(inits.size()), scan->results.end());
  next = 0;
  LVRef carry = rebuild(init, finals, next);
  next = 0;
  return tuple({carry, rebuild(yTree, ys, next)});
}

} // namespace tsr::ir::lowering
