#include "codegen/llvm/FlashPlan.h"

#include <algorithm>
#include <functional>

namespace tsr::codegen {

using tile::OpKind;

namespace {

bool zeroAttr(const ir::AttrValue *v) {
  if (!v) return true;
  if (auto *i = std::get_if<int64_t>(v)) return *i == 0;
  if (auto *d = std::get_if<double>(v)) return *d == 0.0;
  return false;
}

/// Whether `load` is an unmasked box of a 16-bit float tensor with two tile axes, reading zero
/// outside the tensor, whose extents are {rows, cols}; `iv` (the loop's index, or null) may only
/// start a tile axis.
bool plainBox(const tile::Op *load, const tile::Value *iv, int64_t rows, int64_t cols) {
  if (!load || load->kind != OpKind::LoadBox) return false;
  const tile::Value *t = load->operands[0];
  const DType d = t->type.dtype;
  if ((d != DType::BF16 && d != DType::F16) || load->result()->type.dtype != d) return false;
  const bool *masked = load->attrAs<bool>("masked");
  if ((masked && *masked) || !zeroAttr(load->attr("other"))) return false;
  const auto *box = load->attrAs<std::vector<int64_t>>("box");
  if (!box || box->size() != t->type.rank || load->operands.size() != 1 + box->size()) return false;
  std::vector<int64_t> ext;
  for (size_t i = 0; i < box->size(); ++i) {
    // Starts are copied before the body runs: the index, constants, or values from outside.
    const tile::Value *s = load->operands[1 + i];
    if (iv && s != iv && s->owner != iv->owner && !(s->def && s->def->kind == OpKind::Constant) &&
        s->def && std::find(iv->owner->ops.begin(), iv->owner->ops.end(), s->def) != iv->owner->ops.end())
      return false;
    if ((*box)[i] > 0) ext.push_back((*box)[i]);
    else if (iv && load->operands[1 + i] == iv) return false;
  }
  return ext == std::vector<int64_t>{rows, cols};
}

bool writesMemory(const tile::Op *op) {
  return !op->regions.empty() || op->kind == OpKind::Store || op->kind == OpKind::StoreBox ||
         op->kind == OpKind::AtomicAdd || op->kind == OpKind::AtomicAddBox;
}

} // namespace

std::optional<FlashPlan> planFlashLoop(const tile::Op &f, const tile::Block &block, int warps, int smArch) {
  if (smArch < 90 || f.kind != OpKind::For || f.regions.size() != 1 || f.operands.size() < 4 ||
      f.results.size() != f.operands.size() - 3)
    return std::nullopt;
  const tile::Op *stepDef = f.operands[2]->def;
  if (!stepDef || stepDef->kind != OpKind::Constant) return std::nullopt;
  const int64_t *step = stepDef->attrAs<int64_t>("value");
  if (!step || *step <= 0) return std::nullopt;
  const tile::Block &body = *f.regions[0];
  if (body.ops.empty() || body.ops.back()->kind != OpKind::Yield) return std::nullopt;
  const tile::Value *iv = body.args[0];

  // Uses in the loop's block (and everything nested in it).
  std::unordered_map<const tile::Value *, int> uses;
  std::unordered_map<const tile::Value *, const tile::Op *> user; // the last use's op
  std::function<void(const tile::Block &)> count = [&](const tile::Block &b) {
    for (const tile::Op *op : b.ops) {
      for (const tile::Value *v : op->operands) {
        uses[v]++;
        user[v] = op;
      }
      for (const tile::Block *r : op->regions) count(*r);
    }
  };
  count(block);
  std::unordered_map<const tile::Value *, bool> inBody;
  for (const tile::Value *a : body.args) inBody[a] = true;
  for (const tile::Op *op : body.ops)
    for (const tile::Value *r : op->results) inBody[r] = true;

  FlashPlan p;
  p.loop = &f;
  for (const tile::Op *op : body.ops) {
    if (op->kind != OpKind::Dot) continue;
    const tile::Value *a = op->operands[0];
    if (!inBody.count(a)) {
      if (p.dotS) return std::nullopt;
      p.dotS = op;
    } else {
      if (p.dotO) return std::nullopt;
      p.dotO = op;
    }
  }
  if (!p.dotS || !p.dotO || p.dotS->operands.size() != 2) return std::nullopt;
  const tile::Type &st = p.dotS->result()->type, &ot = p.dotO->result()->type;
  if (st.dtype != DType::F32 || ot.dtype != DType::F32 || st.shape.size() != 2 || ot.shape.size() != 2) return std::nullopt;
  p.BM = st.shape[0];
  p.BN = st.shape[1];
  p.Dv = ot.shape[1];
  if (ot.shape[0] != p.BM) return std::nullopt;

  // S = Q K^T: Q a box before the loop read by this product alone, with nothing between it and
  // the loop that writes memory; K a box of the loop transposed.
  const tile::Value *q = p.dotS->operands[0];
  p.loadQ = q->def;
  if (!p.loadQ || q->type.shape.size() != 2) return std::nullopt;
  p.Dk = q->type.shape[1];
  if (!plainBox(p.loadQ, nullptr, p.BM, p.Dk) || uses[q] != 1) return std::nullopt;
  p.dtype = q->type.dtype;
  {
    bool seen = false;
    for (const tile::Op *op : block.ops) {
      if (op == p.loadQ) seen = true;
      else if (op == &f) break;
      else if (seen && writesMemory(op)) return std::nullopt;
    }
    if (!seen) return std::nullopt;
  }
  const tile::Value *kt = p.dotS->operands[1];
  p.transposeK = kt->def;
  if (!p.transposeK || p.transposeK->kind != OpKind::Transpose || uses[kt] != 1) return std::nullopt;
  const auto *perm = p.transposeK->attrAs<std::vector<int64_t>>("perm");
  if (!perm || *perm != std::vector<int64_t>{1, 0}) return std::nullopt;
  const tile::Value *k = p.transposeK->operands[0];
  p.loadK = k->def;
  if (!plainBox(p.loadK, iv, p.BN, p.Dk) || uses[k] != 1 || k->type.dtype != p.dtype) return std::nullopt;

  // O = P V: P the cast of a [BM, BN] f32 value of the loop, V a box of the loop.
  const tile::Value *pc = p.dotO->operands[0], *v = p.dotO->operands[1];
  p.castP = pc->def;
  if (!p.castP || p.castP->kind != OpKind::Cast || pc->type.dtype != p.dtype || uses[pc] != 1 ||
      p.castP->operands[0]->type.dtype != DType::F32 || pc->type.shape != std::vector<int64_t>{p.BM, p.BN})
    return std::nullopt;
  p.loadV = v->def;
  if (!plainBox(p.loadV, iv, p.BN, p.Dv) || uses[v] != 1 || v->type.dtype != p.dtype) return std::nullopt;
  if (p.dotO->operands.size() == 3) {
    if (p.dotO->operands[2]->type != ot) return std::nullopt;
  } else if (uses[p.dotO->result()] == 1 && user[p.dotO->result()]->kind == OpKind::Add) {
    const tile::Op *add = user[p.dotO->result()];
    const tile::Value *other = add->operands[0] == p.dotO->result() ? add->operands[1] : add->operands[0];
    if (other != p.dotO->result() && other->type == ot && add->result()->type == ot) p.addO = add;
  }

  // The instructions' shapes: whole warpgroups of 64 rows; k steps of 16 over BN and over Dk
  // (rounded up, zeros past it); wgmma's n (a multiple of 8) for BN and Dv.
  if (p.BM % 64 || warps != 4 * (p.BM / 64) || p.BN % 16 || p.BN > 256 || p.Dk % 8 || p.Dv % 8 || p.Dk > 256 ||
      p.Dv > 256)
    return std::nullopt;

  // ---- the kinds of the loop's values ----
  enum : int { Unknown = -1, Bad = -2 };
  auto byShape = [&](const tile::Type &t) -> int {
    if (t.isTensor()) return Bad;
    if (t.isScalar()) return int(Frag::Uniform);
    if (t.shape.size() == 2) {
      const int64_t a = t.shape[0], b = t.shape[1];
      if (a == 1 && b == 1) return int(Frag::Uniform);
      if (a == p.BM && b == 1) return int(Frag::Rows);
      if (a == 1 && b % 8 == 0) return int(Frag::Cols);
      if (a == p.BM && b % 8 == 0 && b <= 256) return int(Frag::Full);
      return Bad;
    }
    if (t.shape.size() == 1) {
      const int64_t n = t.shape[0];
      if (n == 1) return int(Frag::Uniform);
      const bool rows = n == p.BM, cols = n % 8 == 0 && n <= 256;
      return rows && cols ? Unknown : rows ? int(Frag::Rows) : cols ? int(Frag::Cols) : Bad;
    }
    return Bad;
  };
  std::unordered_map<const tile::Value *, int> kind;
  for (size_t i = 1; i < body.args.size(); ++i) {
    const tile::Type &t = body.args[i]->type;
    if (t != f.operands[2 + i]->type) return std::nullopt;
    int k0 = byShape(t);
    if (k0 == Unknown) k0 = int(Frag::Rows); // a carried [BM] vector: a row statistic
    if (k0 == Bad || (!t.isScalar() && t.dtype != DType::F32)) return std::nullopt;
    kind[body.args[i]] = k0;
  }
  const tile::Op *yield = body.ops.back();
  for (const tile::Op *op : body.ops) {
    if (op == yield) continue;
    if (op == p.loadK || op == p.loadV || op == p.transposeK || op == p.dotO) continue;
    if (!op->regions.empty() || op->results.size() != 1) return std::nullopt;
    // Operands from outside the loop: scalars (and the tensors of boxes, above) only.
    for (const tile::Value *x : op->operands)
      if (!inBody.count(x) && x != q && !x->type.isScalar()) return std::nullopt;
    const tile::Value *r = op->result();
    if (op->kind == OpKind::Constant) {
      kind[r] = int(Frag::Uniform);
      continue;
    }
    int k0 = byShape(r->type);
    if (k0 == Bad) return std::nullopt;
    const bool scalarOp = r->type.isScalar();
    switch (op->kind) {
    case OpKind::Dot: break; // dotS: Full
    case OpKind::Arange:
    case OpKind::ExpandDims: break;
    case OpKind::Broadcast:
      if (op->operands[0]->type.isScalar()) k0 = int(Frag::Uniform); // a splat
      break;
    case OpKind::Reshape: {
      // Only a 1-d tile made a row [n, 1] or a column [1, n] (as expand_dims would).
      const auto &in = op->operands[0]->type.shape, &out = r->type.shape;
      if (in.size() != 1 || out.size() != 2 || (out != std::vector<int64_t>{in[0], 1} && out != std::vector<int64_t>{1, in[0]}))
        return std::nullopt;
      break;
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
    case OpKind::TensorDim:
    case OpKind::TensorStride:
      if (!scalarOp) return std::nullopt;
      break;
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin: {
      const tile::Type &in = op->operands[0]->type;
      if (op->intAttr("axis", -1) != 1 || in.shape.size() != 2 || in.shape[0] != p.BM || r->type.shape.size() != 1)
        return std::nullopt;
      k0 = int(Frag::Rows);
      break;
    }
    default:
      if (!tile::isElementwise(op->kind)) return std::nullopt;
      break;
    }
    kind[r] = k0;
  }
  // The 1-d tiles whose length fits both kinds: from their uses and their operands.
  for (bool changed = true; changed;) {
    changed = false;
    auto settle = [&](const tile::Value *x, int k0) {
      auto it = kind.find(x);
      if (it != kind.end() && it->second == Unknown && (k0 == int(Frag::Rows) || k0 == int(Frag::Cols))) {
        it->second = k0;
        changed = true;
      }
    };
    for (const tile::Op *op : body.ops) {
      if (op->kind == OpKind::ExpandDims && op->operands[0]->type.shape.size() == 1)
        settle(op->operands[0], op->intAttr("axis") == 1 ? int(Frag::Rows) : int(Frag::Cols));
      if (op->kind == OpKind::Reshape)
        settle(op->operands[0], op->result()->type.shape[1] == 1 ? int(Frag::Rows) : int(Frag::Cols));
      if (tile::isElementwise(op->kind) && op->result()->type.shape.size() == 1) {
        std::vector<const tile::Value *> group{op->result()};
        for (const tile::Value *x : op->operands)
          if (x->type.shape.size() == 1) group.push_back(x);
        for (const tile::Value *x : group)
          if (auto it = kind.find(x); it != kind.end() && it->second >= 0 && it->second != int(Frag::Uniform))
            for (const tile::Value *y : group) settle(y, it->second);
      }
    }
  }
  for (auto &[x, k0] : kind) {
    if (k0 < 0) return std::nullopt;
    p.frag[x] = Frag(k0);
  }
  // A 1-d elementwise op reads rows with rows and columns with columns (a length that is both BM
  // and a width must not mix them).
  for (const tile::Op *op : body.ops)
    if (tile::isElementwise(op->kind) && op->result()->type.shape.size() == 1)
      for (const tile::Value *x : op->operands)
        if (auto it = p.frag.find(x); x->type.shape.size() == 1 && it != p.frag.end() && it->second != Frag::Uniform &&
                                      it->second != p.frag.at(op->result()))
          return std::nullopt;
  // Every carried value comes back in its own kind or one that broadcasts into it.
  for (size_t i = 0; i < yield->operands.size(); ++i) {
    const tile::Value *y = yield->operands[i];
    const Frag want = p.frag.at(body.args[1 + i]);
    auto it = p.frag.find(y);
    const Frag have = it != p.frag.end() ? it->second : y->type.isScalar() ? Frag::Uniform : Frag::Full;
    if (it == p.frag.end() && y != p.dotO->result() && !y->type.isScalar()) return std::nullopt;
    if (want != Frag::Full && have != want && have != Frag::Uniform) return std::nullopt;
  }
  p.frag[p.dotO->result()] = Frag::Full;
  if (p.sharedBytes() > 200 * 1024) return std::nullopt;
  return p;
}

} // namespace tsr::codegen
