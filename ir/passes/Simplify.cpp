// Algebraic simplification, as a table of rewrite rules (after tinygrad's pattern matcher): each
// rule looks at one op and returns the value that replaces its result, or rewrites the op in
// place. A rule never changes a result's type: a rewrite that would is skipped.
#include "ir/passes/Pipeline.h"

#include <unordered_map>

namespace tsr::ir {

namespace {

std::optional<double> constantValue(const Value *v) {
  if (!v->def || v->def->kind != OpKind::Constant) return std::nullopt;
  if (auto *d = v->def->attrAs<double>("value")) return *d;
  if (auto *i = v->def->attrAs<int64_t>("value")) return static_cast<double>(*i);
  if (auto *b = v->def->attrAs<bool>("value")) return *b ? 1.0 : 0.0;
  return std::nullopt;
}

bool isConst(const Value *v, double c) {
  auto x = constantValue(v);
  return x && *x == c;
}

// Returns x if it can stand for op's result (same type), else null.
Value *same(Op *op, Value *x) { return x->type == op->result()->type ? x : nullptr; }

using Rule = Value *(*)(Op *);

const Rule kRules[] = {
    // x + 0, 0 + x, x - 0
    [](Op *op) -> Value * {
      if (op->kind == OpKind::Add && isConst(op->operands[1], 0)) return same(op, op->operands[0]);
      if (op->kind == OpKind::Add && isConst(op->operands[0], 0)) return same(op, op->operands[1]);
      if (op->kind == OpKind::Sub && isConst(op->operands[1], 0)) return same(op, op->operands[0]);
      return nullptr;
    },
    // x * 1, 1 * x, x / 1
    [](Op *op) -> Value * {
      if (op->kind == OpKind::Mul && isConst(op->operands[1], 1)) return same(op, op->operands[0]);
      if (op->kind == OpKind::Mul && isConst(op->operands[0], 1)) return same(op, op->operands[1]);
      if (op->kind == OpKind::Div && isConst(op->operands[1], 1)) return same(op, op->operands[0]);
      return nullptr;
    },
    // -(-x)
    [](Op *op) -> Value * {
      if (op->kind == OpKind::Neg && op->operands[0]->def && op->operands[0]->def->kind == OpKind::Neg)
        return same(op, op->operands[0]->def->operands[0]);
      return nullptr;
    },
    // casts, reshapes and broadcasts that change nothing
    [](Op *op) -> Value * {
      if (op->kind == OpKind::Cast || op->kind == OpKind::Reshape || op->kind == OpKind::BroadcastTo)
        return same(op, op->operands[0]);
      return nullptr;
    },
    // transpose by the identity permutation
    [](Op *op) -> Value * {
      if (op->kind != OpKind::Transpose) return nullptr;
      auto *perm = op->attrAs<std::vector<int64_t>>("perm");
      for (size_t i = 0; perm && i < perm->size(); ++i)
        if ((*perm)[i] != static_cast<int64_t>(i)) return nullptr;
      return perm ? same(op, op->operands[0]) : nullptr;
    },
    // reshape(reshape(x)) -> reshape(x), in place
    [](Op *op) -> Value * {
      if (op->kind == OpKind::Reshape && op->operands[0]->def && op->operands[0]->def->kind == OpKind::Reshape)
        op->operands[0] = op->operands[0]->def->operands[0];
      return nullptr;
    },
    // reshape(reduce(x, keepdims=false)) to the keepdims shape -> reduce(x, keepdims=true), in
    // place: autodiff's rules reduce, then reshape to broadcast back, and a row program
    // (ir/schedule/RowFusion.cpp) takes keepdims reductions of the last axis only, so
    // layer_norm's backward was five passes over its rows instead of one.
    [](Op *op) -> Value * {
      if (op->kind != OpKind::Reshape || !op->operands[0]->def) return nullptr;
      Op *red = op->operands[0]->def;
      if (opClass(red->kind) != OpClass::Reduce || red->results.size() != 1 || red->operands.size() != 1) return nullptr;
      const auto *keep = red->attrAs<bool>("keepdims");
      const auto *axes = red->attrAs<std::vector<int64_t>>("axes");
      if (!keep || *keep || !axes || axes->empty()) return nullptr;
      const Type &xt = red->operands[0]->type;
      const int64_t rank = int64_t(xt.rank());
      std::vector<Dim> kept = xt.dims;
      for (int64_t a : *axes) {
        if (a < -rank || a >= rank) return nullptr;
        kept[size_t(a < 0 ? a + rank : a)] = Dim::constant(1);
      }
      const Type &rt = op->result()->type;
      if (rt.dims != kept || rt.dtype != red->result()->type.dtype || !(rt.policies == red->result()->type.policies)) return nullptr;
      op->kind = red->kind;
      op->operands = {red->operands[0]};
      op->attrs = red->attrs;
      for (Attr &a : op->attrs)
        if (a.name == "keepdims") a.value = true;
      return nullptr;
    },
    // an elementwise binary op or comparison reading broadcast_to(s) where the other operand
    // has the result's dims -> the op reads s (NumPy broadcasting), in place: a row
    // statistic broadcast by a view could not join the row program that computes it.
    [](Op *op) -> Value * {
      const OpClass c = opClass(op->kind);
      if ((c != OpClass::Binary && c != OpClass::Compare) || op->operands.size() != 2) return nullptr;
      const std::vector<Dim> &dims = op->result()->type.dims;
      for (size_t i = 0; i < 2; ++i) {
        Value *b = op->operands[i];
        if (!b->def || b->def->kind != OpKind::BroadcastTo || op->operands[1 - i]->type.dims != dims) continue;
        const Value *src = b->def->operands[0];
        if (src->type.isKey() || src->type.rank() > dims.size()) continue;
        bool fits = true;
        const size_t lead = dims.size() - src->type.rank();
        for (size_t d = 0; d < src->type.rank(); ++d) {
          const auto one = src->type.dims[d].constantValue();
          fits = fits && (src->type.dims[d] == dims[lead + d] || (one && *one == 1));
        }
        if (fits && src->type.dtype == b->type.dtype && src->type.policies == b->type.policies) op->operands[i] = b->def->operands[0];
      }
      return nullptr;
    },
    // transpose(transpose(x)) -> one transpose with the composed permutation, in place
    [](Op *op) -> Value * {
      if (op->kind != OpKind::Transpose || !op->operands[0]->def || op->operands[0]->def->kind != OpKind::Transpose) return nullptr;
      Op *inner = op->operands[0]->def;
      auto *p2 = op->attrAs<std::vector<int64_t>>("perm");
      auto *p1 = inner->attrAs<std::vector<int64_t>>("perm");
      if (!p1 || !p2 || p1->size() != p2->size()) return nullptr;
      std::vector<int64_t> composed(p2->size());
      for (size_t i = 0; i < p2->size(); ++i) composed[i] = (*p1)[(*p2)[i]];
      op->operands[0] = inner->operands[0];
      for (auto &a : op->attrs) if (a.name == "perm") a.value = composed;
      return nullptr;
    },
};

} // namespace

bool simplify(Graph &g) {
  Replacements replace;
  bool changed = false;
  for (Op *op : g.ops) {
    replace.apply(op->operands);
    if (op->results.size() != 1) continue;
    for (Rule rule : kRules) {
      std::vector<Value *> before = op->operands;
      std::vector<Attr> attrsBefore = op->attrs;
      if (Value *v = rule(op)) {
        replace.to[op->result()] = v;
        changed = true;
        break;
      }
      if (op->operands != before || !(op->attrs == attrsBefore)) changed = true;
    }
  }
  replace.apply(g.outputs);
  return changed;
}

} // namespace tsr::ir
