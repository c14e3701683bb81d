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

/// FlashPlan::deferred and its companions, with a third stage, where the loop allows them: one
/// RS product, accumulating through an add into a Full carried value that only the yield reads,
/// after an SS product that starts the body's products; its A a plain cast (packed in registers
/// at once: a saturating or stochastic cast is not). The three stages must fit beside the rest of
/// the CTA's shared memory (a Hopper CTA's 227 KiB less the 1 KiB of alignment and mbarriers).
void planOverlap(FlashPlan &p, const tile::Block &body, const std::unordered_map<const tile::Value *, int> &uses,
                 const std::unordered_map<const tile::Value *, const tile::Op *> &user) {
  constexpr int64_t kSharedMax = 227 * 1024;
  int rs = -1;
  for (size_t i = 0; i < p.dots.size(); ++i)
    if (!p.dots[i].ss) {
      if (rs >= 0) return;
      rs = int(i);
    }
  if (rs <= 0 || !p.dots[0].ss || p.dots[0].add) return;
  const FlashPlan::Dot &d = p.dots[size_t(rs)];
  if (!d.add) return;
  const auto *cast = d.castA->attrAs<ir::DTypeAttr>("dtype");
  if (!cast || cast->policies.saturate || cast->policies.stochasticRound) return;
  const tile::Value *sum = d.add->result();
  const tile::Op *yield = body.ops.back();
  auto u = uses.find(sum);
  auto by = user.find(sum);
  if (u == uses.end() || u->second != 1 || by == user.end() || by->second != yield) return;
  int carry = -1;
  for (size_t i = 0; i < yield->operands.size(); ++i)
    if (yield->operands[i] == sum) carry = int(i);
  if (carry < 0 || p.frag.at(body.args[1 + size_t(carry)]) != Frag::Full) return;
  FlashPlan q = p;
  q.stages = 3;
  if (q.sharedBytes() > kSharedMax) return;
  p.stages = 3;
  p.deferred = rs;
  p.overlapAfter = 0;
  p.deferredCarry = carry;
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
  // The boxes of the loop (2-d: the ring; 1-d: registers), and the products.
  auto ringIndex = [&](const tile::Op *ld) -> int {
    for (size_t i = 0; i < p.ring.size(); ++i)
      if (p.ring[i].load == ld) return int(i);
    return -1;
  };
  auto preIndex = [&](const tile::Op *ld) -> int {
    for (size_t i = 0; i < p.pre.size(); ++i)
      if (p.pre[i].load == ld) return int(i);
    return -1;
  };
  std::unordered_map<const tile::Op *, int> viaProducts; // uses of a box's tile by the products
  bool dtypeSet = false;
  auto sameDtype = [&](DType d) {
    if (d != DType::BF16 && d != DType::F16) return false;
    if (!dtypeSet) p.dtype = d, dtypeSet = true;
    return d == p.dtype;
  };
  for (const tile::Op *op : body.ops) {
    if (op->kind != OpKind::Dot) continue;
    if (op->operands.size() < 2 || op->operands.size() > 3) return std::nullopt;
    const tile::Type &rt = op->result()->type;
    if (rt.dtype != DType::F32 || rt.shape.size() != 2) return std::nullopt;
    if (!p.BM) p.BM = rt.shape[0];
    if (rt.shape[0] != p.BM) return std::nullopt;
    FlashPlan::Dot d;
    d.op = op;
    d.n = rt.shape[1];
    const tile::Value *a = op->operands[0], *b = op->operands[1];
    if (!inBody.count(a)) {
      // SS: a box from before the loop, and the transpose of a box of the loop.
      d.ss = true;
      if (!a->def || a->type.shape.size() != 2 || !plainBox(a->def, nullptr, p.BM, a->type.shape[1]) ||
          !sameDtype(a->type.dtype))
        return std::nullopt;
      d.k = a->type.shape[1];
      d.a = preIndex(a->def);
      if (d.a < 0) {
        p.pre.push_back({a->def, p.BM, d.k, p.preBytes()});
        d.a = int(p.pre.size()) - 1;
      }
      viaProducts[a->def]++;
      d.transposeB = b->def;
      if (!d.transposeB || d.transposeB->kind != OpKind::Transpose || uses[b] != 1) return std::nullopt;
      const auto *perm = d.transposeB->attrAs<std::vector<int64_t>>("perm");
      if (!perm || *perm != std::vector<int64_t>{1, 0}) return std::nullopt;
      b = d.transposeB->operands[0];
      if (!plainBox(b->def, iv, d.n, d.k) || !sameDtype(b->type.dtype)) return std::nullopt;
    } else {
      // RS: the cast of an f32 value of the loop, and a box of the loop.
      d.castA = a->def;
      if (!d.castA || d.castA->kind != OpKind::Cast || uses[a] != 1 || !sameDtype(a->type.dtype) ||
          d.castA->operands[0]->type.dtype != DType::F32 || a->type.shape.size() != 2 || a->type.shape[0] != p.BM)
        return std::nullopt;
      d.k = a->type.shape[1];
      if (!plainBox(b->def, iv, d.k, d.n) || !sameDtype(b->type.dtype)) return std::nullopt;
      if (op->operands.size() == 3) {
        if (op->operands[2]->type != rt) return std::nullopt;
      } else if (uses[op->result()] == 1 && user[op->result()]->kind == OpKind::Add) {
        const tile::Op *add = user[op->result()];
        const tile::Value *other = add->operands[0] == op->result() ? add->operands[1] : add->operands[0];
        if (other != op->result() && other->type == rt && add->result()->type == rt) d.add = add;
      }
    }
    if (op->operands.size() == 3 && d.ss) return std::nullopt;
    d.b = ringIndex(b->def);
    if (d.b < 0) {
      p.ring.push_back({b->def, b->type.shape[0], b->type.shape[1], p.stageBytes()});
      d.b = int(p.ring.size()) - 1;
    }
    viaProducts[b->def]++;
    // The instructions' shapes: whole warpgroups of 64 rows; n a multiple of 8 up to 256; k steps
    // of 16 (an SS product's k is copied up to one, zeros past it; an RS product's is the A
    // fragments' columns).
    if (d.n % 8 || d.n > 256 || d.k > 256 || (d.ss ? d.k % 8 : d.k % 16)) return std::nullopt;
    p.dots.push_back(d);
  }
  if (p.dots.empty() || p.BM % 64 || warps != 4 * (p.BM / 64)) return std::nullopt;
  // Every box's tile is read by the products alone (a pre box by its SS products, which nothing
  // between its load and the loop may overwrite).
  for (const auto &bx : p.pre) {
    if (uses[bx.load->result()] != viaProducts[bx.load]) return std::nullopt;
    bool seen = false;
    for (const tile::Op *op : block.ops) {
      if (op == bx.load) seen = true;
      else if (op == &f) break;
      else if (seen && writesMemory(op)) return std::nullopt;
    }
    if (!seen) return std::nullopt;
  }
  for (const auto &bx : p.ring) {
    // Its direct uses (RS products) and transposes (SS products, each used once).
    int direct = 0;
    for (const auto &d : p.dots) direct += !d.ss && d.op->operands[1] == bx.load->result() ? 1 : 0;
    int transposes = 0;
    for (const auto &d : p.dots) transposes += d.ss && d.transposeB->operands[0] == bx.load->result() ? 1 : 0;
    if (uses[bx.load->result()] != direct + transposes) return std::nullopt;
  }
  std::unordered_map<const tile::Op *, bool> product; // ops the products absorb
  for (const auto &d : p.dots) {
    product[d.op] = true;
    if (d.transposeB) product[d.transposeB] = true;
  }
  for (const auto &bx : p.ring) product[bx.load] = true;
  for (const tile::Op *op : body.ops) {
    if (op->kind != OpKind::LoadBox || product.count(op)) continue;
    // A 1-d box of the loop: unmasked, f32, its one tile axis started by the loop's index or a
    // value from outside.
    const auto *box = op->attrAs<std::vector<int64_t>>("box");
    const bool *masked = op->attrAs<bool>("masked");
    if (!box || (masked && *masked) || op->result()->type.shape.size() != 1 || op->result()->type.dtype != DType::F32 ||
        op->operands.size() != 1 + box->size())
      return std::nullopt;
    if (op->attr("other") && !std::get_if<double>(op->attr("other")) && !std::get_if<int64_t>(op->attr("other")))
      return std::nullopt;
    p.vectorLoads.push_back(op);
    product[op] = true;
  }

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
    if (product.count(op) && op->kind != OpKind::Dot && op->kind != OpKind::LoadBox) continue; // boxes, transposes
    if (op->kind == OpKind::LoadBox && std::find(p.vectorLoads.begin(), p.vectorLoads.end(), op) == p.vectorLoads.end())
      continue; // the ring's boxes
    if (!op->regions.empty() || op->results.size() != 1) return std::nullopt;
    // Operands from outside the loop: scalars, the boxes of SS products and the tensors of boxes
    // (above), and tiles of a register kind (read once, before the loop).
    for (size_t i = 0; i < op->operands.size(); ++i) {
      const tile::Value *x = op->operands[i];
      if (inBody.count(x) || x->type.isScalar() || x->type.isTensor()) continue;
      if (op->kind == OpKind::Dot && i == 0) continue;
      const int k0 = byShape(x->type);
      if (k0 == Bad || x->type.shape.size() > 2 || (x->type.shape.size() == 2 && k0 == int(Frag::Full)))
        return std::nullopt;
      if (!kind.count(x)) {
        kind[x] = k0;
        p.outside.push_back(x);
      }
    }
    const tile::Value *r = op->result();
    if (op->kind == OpKind::Constant) {
      kind[r] = int(Frag::Uniform);
      continue;
    }
    int k0 = byShape(r->type);
    if (k0 == Bad) return std::nullopt;
    const bool scalarOp = r->type.isScalar();
    switch (op->kind) {
    case OpKind::Dot: break; // Full
    case OpKind::LoadBox: break; // a 1-d box: Rows or Cols
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
    if (it == p.frag.end() && !y->type.isScalar()) return std::nullopt;
    if (want != Frag::Full && have != want && have != Frag::Uniform) return std::nullopt;
  }
  if (p.sharedBytes() > 200 * 1024) return std::nullopt;
  if (f.intAttr("stages", 2) >= 3) planOverlap(p, body, uses, user);
  return p;
}

} // namespace tsr::codegen
