#include "codegen/llvm/MmaPlan.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

namespace tsr::codegen {

using tile::OpKind;

namespace {

bool isZero(const ir::AttrValue *v) {
  if (!v) return true;
  if (auto *i = std::get_if<int64_t>(v)) return *i == 0;
  if (auto *d = std::get_if<double>(v)) return *d == 0.0;
  return false;
}

/// The box of `load` as a 2-d tile of a 16-bit float tensor, unmasked and reading 0 outside the
/// tensor; the loop's index may only start a tile axis (the copy's alignment is decided from it).
bool plainBox(const tile::Op &load, const tile::Block &body) {
  if (load.kind != OpKind::LoadBox) return false;
  const tile::Value *t = load.operands[0];
  DType d = t->type.dtype;
  if ((d != DType::BF16 && d != DType::F16) || load.result()->type.dtype != d) return false;
  const bool *masked = load.attrAs<bool>("masked");
  if ((masked && *masked) || !isZero(load.attr("other"))) return false;
  const auto *box = load.attrAs<std::vector<int64_t>>("box");
  if (!box || box->size() != t->type.rank || load.operands.size() != 1 + box->size()) return false;
  int tileAxes = 0;
  for (size_t i = 0; i < box->size(); ++i) {
    if ((*box)[i] > 0) ++tileAxes;
    else if (load.operands[1 + i] == body.args[0]) return false;
  }
  return tileAxes == 2 && load.result()->type.shape.size() == 2;
}

} // namespace

bool isZeroConstant(const tile::Value *v) {
  return v->def && v->def->kind == OpKind::Constant && v->def->attr("value") && isZero(v->def->attr("value"));
}

std::optional<MmaPlan> planMmaLoop(const tile::Op &f, int warps, int smArch) {
  if (smArch < 80 || warps < 1 || f.kind != OpKind::For || f.regions.size() != 1 || f.operands.size() != 4 ||
      f.results.size() != 1)
    return std::nullopt;
  const tile::Block &body = *f.regions[0];
  if (body.args.size() != 2 || body.ops.size() < 4 || body.ops.size() > 6) return std::nullopt;
  // A positive constant step: the trip count is (hi - lo + step - 1) / step.
  const tile::Op *stepDef = f.operands[2]->def;
  if (!stepDef || stepDef->kind != OpKind::Constant) return std::nullopt;
  const int64_t *step = stepDef->attrAs<int64_t>("value");
  if (!step || *step <= 0) return std::nullopt;

  MmaPlan p;
  const tile::Op *yield = body.ops.back();
  std::unordered_map<const tile::Value *, int> uses;
  for (const tile::Op *op : body.ops) {
    for (const tile::Value *v : op->operands) uses[v]++;
    if (op->kind == OpKind::Dot) {
      if (p.dot) return std::nullopt;
      p.dot = op;
    } else if (op->kind != OpKind::LoadBox && op->kind != OpKind::Cast && op != yield) {
      return std::nullopt;
    }
  }
  if (!p.dot || yield->kind != OpKind::Yield || yield->operands.size() != 1 || yield->operands[0] != p.dot->result())
    return std::nullopt;
  if (p.dot->operands.size() != 3 || p.dot->operands[2] != body.args[1] || uses[body.args[1]] != 1 ||
      uses[p.dot->result()] != 1)
    return std::nullopt;
  const tile::Type &ct = p.dot->result()->type;
  if (ct.dtype != DType::F32 || ct.shape.size() != 2 || f.operands[3]->type.shape != ct.shape) return std::nullopt;

  // Each operand: a box, or the f32 cast of one, read by the dot alone.
  const tile::Op *loads[2], *casts[2];
  for (int q = 0; q < 2; ++q) {
    const tile::Value *v = p.dot->operands[q];
    casts[q] = nullptr;
    if (v->def && v->def->kind == OpKind::Cast) {
      casts[q] = v->def;
      if (v->type.dtype != DType::F32 || uses[v] != 1) return std::nullopt;
      v = v->def->operands[0];
    }
    if (!v->def || !plainBox(*v->def, body) || uses[v] != 1) return std::nullopt;
    loads[q] = v->def;
  }
  p.loadA = loads[0];
  p.loadB = loads[1];
  p.castA = casts[0];
  p.castB = casts[1];
  // Nothing else in the body: the ops counted are exactly the boxes, casts, dot and yield.
  if (body.ops.size() != size_t(4 + (p.castA ? 1 : 0) + (p.castB ? 1 : 0))) return std::nullopt;
  p.dtype = p.loadA->result()->type.dtype;
  if (p.loadB->result()->type.dtype != p.dtype) return std::nullopt;
  const auto &as = p.loadA->result()->type.shape, &bs = p.loadB->result()->type.shape;
  p.BM = as[0];
  p.BK = as[1];
  p.BN = bs[1];
  if (bs[0] != p.BK || ct.shape[0] != p.BM || ct.shape[1] != p.BN) return std::nullopt;
  if (p.BM % 16 || p.BN % 16 || p.BK % 16) return std::nullopt;

  // Hopper: whole warpgroups of 64 rows, each over the whole BN (wgmma's n is at most 256; the
  // swizzle's chunks are 64 columns); four stages where they fit in 208 KiB (a warp-specialized
  // loop, MmaWarpSpecialized.cpp, has its kernel's shared memory to itself). A tile of one
  // warpgroup takes five: its k tile is multiplied in half the time of two warpgroups' (a
  // ping-pong kernel's one warpgroup multiplies at a time), so the copies must start one tile
  // earlier to arrive as soon.
  if (smArch >= 90 && p.BM % 64 == 0 && p.BN % 64 == 0 && p.BN <= 256 && p.BK % 64 == 0 && warps == 4 * (p.BM / 64)) {
    p.wgmma = true;
    p.warpsM = warps;
    p.warpsN = 1;
    p.warpM = 16;
    p.warpN = p.BN;
    const int most = p.BM == 64 ? 5 : 4;
    p.stages = int(std::clamp<int64_t>(f.intAttr("stages", most), 3, most));
    while (p.stages > 3 && p.sharedBytes() > 208 * 1024) --p.stages;
    // TSR_WGMMA_WAIT=0|1: the groups left in flight (MmaPlan::inFlight), for measuring.
    if (const char *e = std::getenv("TSR_WGMMA_WAIT"); e && (e[0] == '0' || e[0] == '1') && !e[1]) p.inFlight = e[0] - '0';
    return p;
  }
  // The warp grid: the squarest warp tiles (most reuse of each fragment), multiples of 16, at
  // most 128 accumulators per thread (above that they spill).
  bool found = false;
  for (int wm = 1; wm <= warps; ++wm) {
    if (warps % wm) continue;
    int wn = warps / wm;
    if (p.BM % wm || p.BN % wn) continue;
    int64_t WM = p.BM / wm, WN = p.BN / wn;
    if (WM % 16 || WN % 16 || WM * WN / 32 > 128) continue;
    if (!found || std::llabs(WM - WN) < std::llabs(p.warpM - p.warpN)) {
      p.warpsM = wm;
      p.warpsN = wn;
      p.warpM = WM;
      p.warpN = WN;
      found = true;
    }
  }
  if (!found) return std::nullopt;
  // The copy ring: the loop's `stages` (its schedule's), else 3; fewer while the ring would not
  // leave room for the rest of the program's tiles.
  p.stages = int(std::clamp<int64_t>(f.intAttr("stages", 3), 2, 4));
  while (p.stages > 2 && p.sharedBytes() > 128 * 1024) --p.stages;
  return p;
}

} // namespace tsr::codegen
