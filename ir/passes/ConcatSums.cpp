// Sums of concatenations: add(concat(a...), concat(b...)) along one axis -> concat(add(a_i, b_i)),
// when the pieces line up, a zero piece (broadcast_to of a constant 0) being cut where the other
// side has a boundary. Reverse mode gives every slice of a tensor a cotangent padded with zeros
// to the whole (the vjp of slice, ir/autodiff/GradRules.cpp), and adds them: the backward of
// `q, k, v = split(qkv, 3, axis=-1)` was three concats of [B, T, 3D] and two adds, where one
// concat of dq, dk and dv is the answer. XLA's algebraic simplifier folds add(pad, pad) the same
// way. Pieces where both sides are zero stay zero (a broadcast); x + 0 is x, as simplify's rule.
// Extents along the axis must be constants; a non-zero piece that would have to be cut leaves
// the add as it is.
#include "ir/passes/Pipeline.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tsr::ir {

namespace {

/// The scalar constant 0 that `v` broadcasts (broadcast_to of a rank-0 constant 0), or null.
Value *zeroSource(Value *v) {
  if (!v->def || v->def->kind != OpKind::BroadcastTo) return nullptr;
  Value *s = v->def->operands[0];
  if (!s->def || s->def->kind != OpKind::Constant || s->type.rank() != 0) return nullptr;
  const AttrValue *a = s->def->attr("value");
  if (!a) return nullptr;
  if (auto *d = std::get_if<double>(a)) return *d == 0.0 && !std::signbit(*d) ? s : nullptr;
  if (auto *i = std::get_if<int64_t>(a)) return *i == 0 ? s : nullptr;
  if (auto *b = std::get_if<bool>(a)) return !*b ? s : nullptr;
  return nullptr;
}

struct Piece {
  int64_t start = 0, size = 0;
  Value *v = nullptr;
  Value *zero = nullptr; // the scalar 0 it broadcasts, when it is a zero piece
};

/// The pieces of concat `c` along `axis` with their constant extents; false if one is symbolic.
bool piecesOf(const Op *c, size_t axis, std::vector<Piece> &out) {
  int64_t at = 0;
  for (Value *v : c->operands) {
    auto n = v->type.dims[axis].constantValue();
    if (!n) return false;
    out.push_back({at, *n, v, zeroSource(v)});
    at += *n;
  }
  return true;
}

size_t concatAxis(const Op *c) {
  const auto *a = c->attrAs<int64_t>("axis");
  const int64_t rank = int64_t(c->result()->type.rank());
  return size_t(a ? (*a < 0 ? *a + rank : *a) : 0);
}

} // namespace

bool foldConcatSums(Graph &g) {
  Replacements replace;
  bool changed = false;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op *op = g.ops[i];
    replace.apply(op->operands);
    if (op->kind != OpKind::Add || op->operands.size() != 2) continue;
    Op *ca = op->operands[0]->def, *cb = op->operands[1]->def;
    const Type &rt = op->result()->type;
    if (!ca || !cb || ca->kind != OpKind::Concat || cb->kind != OpKind::Concat) continue;
    if (ca->result()->type != rt || cb->result()->type != rt) continue;
    const size_t axis = concatAxis(ca);
    if (axis != concatAxis(cb) || axis >= rt.rank()) continue;
    std::vector<Piece> pa, pb;
    if (!piecesOf(ca, axis, pa) || !piecesOf(cb, axis, pb)) continue;
    std::set<int64_t> cuts;
    for (const Piece &p : pa) cuts.insert(p.start);
    for (const Piece &p : pb) cuts.insert(p.start);
    cuts.insert(pa.back().start + pa.back().size);
    // Each interval between cuts: the piece of each side that covers it, whole or (a zero) cut.
    std::vector<int64_t> bounds(cuts.begin(), cuts.end());
    auto cover = [&](const std::vector<Piece> &ps, int64_t s, int64_t e, bool &ok) -> const Piece * {
      for (const Piece &p : ps)
        if (p.start <= s && e <= p.start + p.size) {
          if ((p.start != s || p.size != e - s) && !p.zero) ok = false;
          return &p;
        }
      ok = false;
      return nullptr;
    };
    bool ok = true;
    std::vector<std::pair<const Piece *, const Piece *>> pairs;
    for (size_t k = 0; k + 1 < bounds.size() && ok; ++k) {
      const Piece *x = cover(pa, bounds[k], bounds[k + 1], ok), *y = cover(pb, bounds[k], bounds[k + 1], ok);
      pairs.push_back({x, y});
    }
    // Nothing to gain unless a side's pieces change (two concats with the same cuts and no zero
    // would trade one add for several).
    bool anyZero = false;
    for (auto &[x, y] : pairs) anyZero = anyZero || (x && x->zero) || (y && y->zero);
    if (!ok || !anyZero) continue;
    const size_t before = g.ops.size();
    std::vector<Value *> parts;
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [x, y] = pairs[k];
      std::vector<Dim> dims = rt.dims;
      dims[axis] = Dim::constant(bounds[k + 1] - bounds[k]);
      const Type want = Type::tensor(dims, rt.dtype, rt.policies);
      auto whole = [&](const Piece *p) { return p->v->type == want ? p->v : nullptr; };
      Value *part = nullptr;
      try {
        if (x->zero && y->zero) part = g.add(OpKind::BroadcastTo, {x->zero}, {{"shape", dims}}, op->loc);
        else if (x->zero) part = whole(y);
        else if (y->zero) part = whole(x);
        else part = g.add(OpKind::Add, {x->v, y->v}, {}, op->loc);
      } catch (const IRError &) {
        part = nullptr; // pieces that do not add (shape inference's refusal): the add stays
      }
      if (!part || part->type != want) { ok = false; break; }
      parts.push_back(part);
    }
    Value *joined = nullptr;
    try {
      joined = !ok ? nullptr : parts.size() == 1 ? parts[0] : g.add(OpKind::Concat, parts, {{"axis", int64_t(axis)}}, op->loc);
    } catch (const IRError &) {
      joined = nullptr;
    }
    // The new ops go where the add was (g.add appended them); a failed attempt leaves them dead.
    std::vector<Op *> made(g.ops.begin() + long(before), g.ops.end());
    g.ops.erase(g.ops.begin() + long(before), g.ops.end());
    g.ops.insert(g.ops.begin() + long(i), made.begin(), made.end());
    i += made.size();
    if (!joined || joined->type != rt) continue;
    replace.to[op->result()] = joined;
    changed = true;
  }
  replace.apply(g.outputs);
  return changed;
}

} // namespace tsr::ir
