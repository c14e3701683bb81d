// The register-tile analysis (RegisterPlan.h): the program's shape, the layout, each value's
// fragment kind, and the ops' check.
#include "codegen/llvm/RegisterPlan.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace tsr::codegen {

namespace {

using tile::Op;
using tile::OpKind;
using tile::Value;

// Bytes of one element of tensor storage (Tensor.h).
int64_t storageBytes(DType d) {
  if (d == DType::Bool) return 1;
  if (d == DType::TF32) return 4;
  return std::max(1, dtypeBits(d) / 8);
}

int64_t floorPow2(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}
int64_t ceilPow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

void walk(const tile::Block &b, const std::function<void(const Op &)> &f) {
  for (const Op *op : b.ops) {
    f(*op);
    for (const tile::Block *r : op->regions) walk(*r, f);
  }
}

struct Planner {
  const tile::Function &F;
  RegisterPlan plan;
  int64_t BR = 1, N = 1;
  int rank = 2;

  std::optional<Frag> classify(const std::vector<int64_t> &s) const {
    if (s.size() == 2) {
      if (s[0] == BR && s[1] == N) return Frag::Full;
      if (s[0] == 1 && s[1] == 1) return Frag::Uniform;
      if (rank == 1) return std::nullopt;
      if (s[0] == BR && s[1] == 1) return Frag::Rows;
      if (s[0] == 1 && s[1] == N) return Frag::Cols;
      return std::nullopt;
    }
    if (s.size() == 1) {
      if (rank == 1) {
        if (s[0] == N) return Frag::Full;
        if (s[0] == 1) return Frag::Uniform;
        return std::nullopt;
      }
      if (s[0] == 1) return Frag::Uniform;
      if (s[0] == BR && s[0] == N) return std::nullopt; // a row or a column: not told by the shape
      if (s[0] == BR) return Frag::Rows;
      if (s[0] == N) return Frag::Cols;
    }
    return std::nullopt;
  }

  bool isTile(const Value *v) const { return !v->type.isTensor() && !v->type.isScalar(); }
  Frag fragOf(const Value *v) const { return plan.frag.at(v); }

  // Whether op `o` has a register lowering for the fragments its values got.
  bool opFits(const Op &o) const {
    bool anyTile = false;
    for (const Value *v : o.operands) anyTile |= isTile(v);
    for (const Value *v : o.results) anyTile |= isTile(v);
    switch (o.kind) {
    case OpKind::If: return !anyTile && o.regions.empty(); // an if has regions: not lowered here
    case OpKind::Dot:
    case OpKind::Transpose:
    case OpKind::Load:
    case OpKind::Store:
    case OpKind::AtomicAdd:
    case OpKind::AtomicAddBox:
    case OpKind::ArgMax:
    case OpKind::ArgMin: return !anyTile;
    case OpKind::Broadcast: {
      const Value *in = o.operands[0];
      if (!isTile(in)) return true;
      if (in->type.shape.size() != o.result()->type.shape.size()) return false;
      Frag s = fragOf(in), d = fragOf(o.result());
      return s == d || s == Frag::Uniform || d == Frag::Full;
    }
    case OpKind::ExpandDims:
    case OpKind::Reshape: {
      const Value *in = o.operands[0];
      if (!isTile(in) || !isTile(o.result())) return true; // scalar <-> [1]: Uniform
      Frag s = fragOf(in), d = fragOf(o.result());
      return s == d;
    }
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::ReduceProd: {
      const Value *in = o.operands[0];
      const int64_t axis = o.intAttr("axis");
      const Frag s = fragOf(in);
      const bool lastAxis = axis == int64_t(in->type.shape.size()) - 1;
      if (s == Frag::Full) return true; // along the row (the last axis) or the column (axis 0 of 2)
      if (s == Frag::Uniform) return true;
      // A slice reduced along its extent-1 axis is itself.
      if (s == Frag::Rows) return in->type.shape.size() == 2 && lastAxis;
      if (s == Frag::Cols) return in->type.shape.size() == 2 && axis == 0;
      return false;
    }
    default: return true;
    }
  }

  std::optional<RegisterPlan> run(int threads, int64_t maxSlots) {
    // The program's shape: its largest 2-d tile, else its largest 1-d one.
    std::vector<const Value *> tiles;
    auto note = [&](const Value *v) {
      if (isTile(v)) tiles.push_back(v);
    };
    bool bad = false;
    std::function<void(const tile::Block &)> collect = [&](const tile::Block &b) {
      for (const Value *a : b.args) note(a);
      for (const Op *op : b.ops) {
        for (const Value *r : op->results) note(r);
        for (const tile::Block *r : op->regions) collect(*r);
      }
    };
    collect(*F.body);
    if (tiles.empty()) return std::nullopt;
    const Value *main2 = nullptr, *main1 = nullptr;
    for (const Value *v : tiles) {
      const auto &s = v->type.shape;
      if (s.size() > 2) bad = true;
      else if (s.size() == 2 && (!main2 || v->type.numElements() > main2->type.numElements())) main2 = v;
      else if (s.size() == 1 && (!main1 || v->type.numElements() > main1->type.numElements())) main1 = v;
    }
    if (bad) return std::nullopt;
    if (main2) {
      BR = main2->type.shape[0];
      N = main2->type.shape[1];
      rank = 2;
    } else {
      BR = 1;
      N = main1->type.shape[0];
    }
    // One row: [1, N] and [N] are the same registers (a Cols value is the Full one).
    if (BR == 1) rank = 1;
    for (const Value *v : tiles) {
      auto f = classify(v->type.shape);
      if (!f) return std::nullopt;
      plan.frag[v] = *f;
    }
    bool fits = true;
    walk(*F.body, [&](const Op &o) { fits = fits && opFits(o); });
    if (!fits) return std::nullopt;

    // The layout: vectors of 16 bytes of the narrowest tensor the boxes read or write.
    int64_t esz = 4;
    bool anyBox = false;
    walk(*F.body, [&](const Op &o) {
      if (o.kind != OpKind::LoadBox && o.kind != OpKind::StoreBox) return;
      anyBox = true;
      esz = std::min(esz, storageBytes(o.operands[0]->type.dtype));
    });
    if (!anyBox) esz = 4;
    RegisterLayout &L = plan.layout;
    L.rows = BR;
    L.cols = N;
    L.rank = rank;
    L.threads = threads;
    L.vec = std::max<int64_t>(1, 16 / esz);
    while (L.vec > 1 && N % L.vec != 0) L.vec /= 2;
    const int64_t nv = N / L.vec;
    if (BR == 1) {
      L.threadsPerRow = threads;
    } else {
      // By default the row's vectors in one sweep of as many threads as fit. A narrower group
      // that leaves fewer of the CTA's vector slots (threads x rows per thread x vectors per
      // row) idle wins: a 768-wide bf16 row (96 vectors) takes 32 threads of 3 vectors, a warp
      // per row whose reductions are shuffles only, where 64 threads would hold 128 vector
      // slots, a quarter of them idle.
      auto slots = [&](int64_t p) { return threads * ((BR + threads / p - 1) / (threads / p)) * ((nv + p - 1) / p); };
      int64_t best = std::min<int64_t>(threads, std::max(floorPow2(nv), threads / std::min<int64_t>(threads, ceilPow2(BR))));
      for (int64_t p = 1; p <= threads; p *= 2)
        if (slots(p) < slots(best)) best = p;
      L.threadsPerRow = best;
    }
    L.rowsPerSweep = threads / L.threadsPerRow;
    L.rowsPerThread = (BR + L.rowsPerSweep - 1) / L.rowsPerSweep;
    L.colVectors = (nv + L.threadsPerRow - 1) / L.threadsPerRow;
    if (L.fullSlots() > maxSlots) return std::nullopt;
    return std::move(plan);
  }
};

} // namespace

std::optional<RegisterPlan> planRegisterTiles(const tile::Function &f, int threads, int64_t maxSlots) {
  if (threads < 1 || (threads & (threads - 1)) != 0) return std::nullopt;
  Planner p{f, {}};
  return p.run(threads, maxSlots);
}

} // namespace tsr::codegen
