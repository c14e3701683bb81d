// Reshapes that split leading axes, moved past elementwise ops toward the graph's outputs (after XLA's
// ReshapeMover):
// e(reshape(x, S), b, ...) -> reshape(e(x, b', ...), S) when the reshape only regroups leading
// axes (S and x's shape S0 end in the same axes) and every other operand can follow: another
// reshape from S0, a value that broadcasts against the common trailing axes only (a bias, a
// scalar), or a materialized value of shape S (reshaped to S0, which on a contiguous buffer is
// a view). A linear layer over [B, T, D] is a product over [B*T, D] reshaped back; with the
// reshape moved past its bias, activation and residual add, those ops read the product's result
// directly, so that fusion (ir/schedule/Fusion.h) can make them the product's epilogue.
#include "ir/passes/Pipeline.h"

#include <algorithm>
#include <unordered_set>

namespace tsr::ir {

namespace {

bool elementwise(OpKind k) {
  switch (opClass(k)) {
  case OpClass::Unary: case OpClass::Binary: case OpClass::Compare: case OpClass::Ternary: return true;
  default: return k == OpKind::Cast;
  }
}

bool isView(OpKind k) {
  return k == OpKind::Transpose || k == OpKind::BroadcastTo || k == OpKind::Slice || k == OpKind::Reverse ||
         k == OpKind::Reshape;
}

/// The number of trailing axes that `a` and `b` share, when the axes before them hold the same
/// number of elements (a regrouping of the leading axes only); 0 otherwise.
size_t sharedTail(const std::vector<Dim> &a, const std::vector<Dim> &b) {
  size_t t = 0;
  while (t < a.size() && t < b.size() && a[a.size() - 1 - t] == b[b.size() - 1 - t]) ++t;
  if (t == 0) return 0;
  // The leading axes' products, symbolically ([B * T] against [B, T]).
  Dim pa = Dim::constant(1), pb = Dim::constant(1);
  for (size_t i = 0; i + t < a.size(); ++i) pa = pa * a[i];
  for (size_t i = 0; i + t < b.size(); ++i) pb = pb * b[i];
  return pa == pb ? t : 0;
}

/// Whether `v` broadcasts against the last `tail` axes of `dims` alone (NumPy, from the right).
bool broadcastsIntoTail(const Value *v, const std::vector<Dim> &dims, size_t tail) {
  const auto &vd = v->type.dims;
  if (vd.size() > tail) return false;
  for (size_t i = 0; i < vd.size(); ++i)
    if (!(vd[vd.size() - 1 - i] == dims[dims.size() - 1 - i]) && !vd[vd.size() - 1 - i].isOne()) return false;
  return true;
}

/// Moves the reshape `r` (into dims S, from S0 sharing `tail` trailing axes) past the
/// elementwise ops that read it, and past every elementwise op that reads those, when all of
/// them can follow (the closure); returns false, changing nothing, when one cannot. Moving only
/// part of a chain would leave its first half materialized for a view to read, where the whole
/// chain was one fused step.
bool moveClosure(Graph &g, Op *r) {
  const std::vector<Dim> S = r->result()->type.dims, S0 = r->operands[0]->type.dims;
  const size_t tail = sharedTail(S0, S);
  if (tail == 0) return false;
  std::unordered_map<const Value *, std::vector<Op *>> users;
  for (Op *op : g.ops)
    for (Value *o : op->operands) users[o].push_back(op);
  auto fromS0 = [&](const Value *o) {
    return o->def && o->def->kind == OpKind::Reshape && o->type.dims == S && o->def->operands[0]->type.dims == S0;
  };
  // The closure: the elementwise ops connected to r's result through elementwise ops, both ways
  // (a backward pass's chain reads the forward's values and another product's result): readers
  // of its values, and the defining ops of its operands other than the leaves (reshapes from
  // S0, values that broadcast into the tail, non-elementwise values).
  std::unordered_set<const Op *> in;
  std::vector<const Value *> work{r->result()};
  auto visit = [&](Op *e) {
    if (elementwise(e->kind) && e->results.size() == 1 && in.insert(e).second) work.push_back(e->result());
  };
  while (!work.empty()) {
    const Value *v = work.back();
    work.pop_back();
    for (Op *u : users[v]) visit(u);
    if (v->def && in.count(v->def))
      for (Value *o : v->def->operands)
        if (o->def && !fromS0(o) && !broadcastsIntoTail(o, S, tail)) visit(o->def);
    if (in.size() > 4096) return false;
  }
  if (in.empty()) return false;
  for (const Op *e : in) {
    if (e->result()->type.dims != S) return false;
    for (const Value *o : e->operands) {
      if ((o->def && in.count(o->def)) || fromS0(o) || broadcastsIntoTail(o, S, tail)) continue;
      // A value of the whole shape that is in memory anyway (a parameter, or the result of an op
      // that fusion materializes): read through a reshape to S0, a view where it is contiguous.
      if (o->type.dims == S && (!o->def || (!elementwise(o->def->kind) && !isView(o->def->kind) &&
                                            o->def->kind != OpKind::Constant && o->def->kind != OpKind::Iota)))
        continue;
      return false;
    }
  }
  // Each closure op must type at S0 as it did at S (shape inference, before anything changes:
  // a failure half way would leave the graph broken).
  std::unordered_map<const Value *, Type> movedType;
  for (const Op *op : g.ops) {
    if (!in.count(op)) continue;
    std::vector<Type> tys;
    for (const Value *o : op->operands) {
      if (auto m = movedType.find(o); m != movedType.end()) tys.push_back(m->second);
      else if (fromS0(o)) tys.push_back(o->def->operands[0]->type);
      else if (broadcastsIntoTail(o, S, tail)) tys.push_back(o->type);
      else tys.push_back(Type::tensor(S0, o->type.dtype, o->type.policies));
    }
    std::vector<const Type *> ptrs;
    for (const Type &t : tys) ptrs.push_back(&t);
    auto r = inferTypes(op->kind, ptrs, op->attrs);
    const auto *types = std::get_if<std::vector<Type>>(&r);
    const Type &was = op->result()->type;
    if (!types || types->size() != 1 || (*types)[0] != Type::tensor(S0, was.dtype, was.policies)) return false;
    movedType[op->result()] = (*types)[0];
  }
  // The rewrite: each closure op again at S0 where it was, a reshape back to S for readers outside.
  std::unordered_map<const Value *, Value *> moved, back;
  std::vector<Op *> order = std::move(g.ops);
  g.ops.clear();
  for (Op *op : order) {
    if (!in.count(op)) {
      for (Value *&o : op->operands)
        if (auto b = back.find(o); b != back.end()) o = b->second;
      g.ops.push_back(op);
      continue;
    }
    std::vector<Value *> operands;
    for (Value *o : op->operands) {
      if (auto m = moved.find(o); m != moved.end()) operands.push_back(m->second);
      else if (fromS0(o)) operands.push_back(o->def->operands[0]);
      else if (broadcastsIntoTail(o, S, tail)) operands.push_back(o);
      else operands.push_back(g.add(OpKind::Reshape, {o}, {{"shape", S0}}, op->loc));
    }
    Value *m = g.add(op->kind, operands, op->attrs, op->loc);
    Value *b = g.add(OpKind::Reshape, {m}, {{"shape", S}}, op->loc);
    if (b->type != op->result()->type) throw IRError{"reshape-mover: a moved op changed its result's type"};
    moved[op->result()] = m;
    back[op->result()] = b;
  }
  for (Value *&o : g.outputs)
    if (auto b = back.find(o); b != back.end()) o = b->second;
  return true;
}

} // namespace

bool moveReshapes(Graph &g) {
  bool changed = false;
  std::vector<Op *> candidates;
  for (Op *op : g.ops)
    // Only reshapes that split leading axes ([B*T, D] -> [B, T, D]) move: the reshapes the move
    // makes go the other way, and moving those back would undo it.
    if (op->kind == OpKind::Reshape && op->results.size() == 1 && op->operands[0]->type.rank() < op->result()->type.rank())
      candidates.push_back(op);
  for (Op *r : candidates) changed |= moveClosure(g, r);
  return changed;
}

} // namespace tsr::ir
