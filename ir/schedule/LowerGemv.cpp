// GEMV programs for matrix products of a few rows (LowerGemv.h says what they are and when the
// executor takes them).
#include "ir/schedule/LowerGemv.h"
#include "ir/schedule/Fusion.h"
#include "ir/schedule/TileBuilder.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

namespace tsr::ir::schedule {

using namespace build;

namespace {

// Accumulator elements a GPU thread holds (RegisterPlan.h's slots of a [BN, BK] tile) over a
// program's BM rows of A: 16 keep four 16-byte loads of f32 in flight per thread and k step
// (twice that for B read along n, whose k steps are rows), unless a tile must be larger to give
// every thread a row.
constexpr int64_t kGpuSlots = 16;

// Elements of a CPU program's [BN, BK] tile, at most 64 along B's contiguous axis: each tile op
// is a loop over the tile, and a program keeps B's tile, BM accumulators and their products
// live: small tiles stay in L1. On the 2-core build machine GPT's four f32 linears (gemv.tsr at
// 1, 4 and 8 rows) took 244, 638 and 935 us per call with 8 x 64 tiles, 245, 624 and 867 with
// 16 x 32, 298 and 1387 (1 and 4 rows) with 16 x 128 (docs/performance.md).
constexpr int64_t kCpuTileElems = 512;
constexpr int64_t kCpuTileCols = 64;

int64_t pow2Ceil(int64_t x) {
  int64_t p = 1;
  while (p < x && p < (int64_t(1) << 40)) p *= 2;
  return p;
}

// Bytes of one element as stored (a box's vector width is 16 bytes of its narrowest tensor).
int64_t storageBytes(DType d) {
  if (d == DType::Bool) return 1;
  if (d == DType::TF32) return 4;
  return std::max(1, dtypeBits(d) / 8);
}

struct GemvTiles {
  int64_t BM = 1, BO = 1, BC = 1; // rows of A; B's other axis; B's contiguous axis
};

// The tile along B's contiguous extent C, at most `widest`: the largest power of two that
// divides C (no masked chunk, so every box takes the vector path), unless that is under a
// quarter of the widest tile C allows, which then takes it with one masked chunk.
int64_t contiguousTile(int64_t C, int64_t widest) {
  const int64_t cap = std::min(widest, pow2Ceil(C));
  int64_t p = 1;
  while (p * 2 <= cap && C % (p * 2) == 0) p *= 2;
  return p * 4 < cap ? cap : p;
}

GemvTiles gemvTiles(const std::array<int64_t, 3> &mnk, int64_t batch, GemvLayout layout, int64_t esz,
                    const TileTarget &t) {
  const int64_t M = mnk[0], N = mnk[1], K = mnk[2];
  const bool kMajor = layout == GemvLayout::KMajor;
  const int64_t C = kMajor ? K : N, O = kMajor ? N : K;
  GemvTiles g;
  g.BM = bucket(M, {1, 2, 4, kGemvMaxRows});
  if (const char *given = std::getenv("TSR_GEMV_TILES")) {
    int64_t bo = 0, bc = 0;
    if (std::sscanf(given, "%" SCNd64 "x%" SCNd64, &bo, &bc) == 2 && bo > 0 && bc > 0) {
      g.BO = bo;
      g.BC = bc;
      return g;
    }
  }
  if (!t.gpuTarget()) {
    g.BC = contiguousTile(C, kCpuTileCols);
    g.BO = std::min(pow2Ceil(O), std::max<int64_t>(1, kCpuTileElems / g.BC));
  } else {
    const int64_t threads = t.threads(), vec = std::max<int64_t>(1, 16 / esz);
    // A thread holds a vector of each row's chunk of A (KMajor) and an accumulator per row, and
    // each row's loads have their own addresses and bounds: 8 rows of f32 took 254 registers
    // (sm_90, ptxas -v), 8 of bf16 spilled. At most 16 elements of rows' chunks: 4 rows of f32,
    // 2 of bf16; a product of more rows runs as several blocks of rows (B read again, from L2).
    while (g.BM > 1 && g.BM * vec > 16) g.BM /= 2;
    if (kMajor) {
      // A row of w (k) takes up to the whole CTA, one vector per thread, so that a long K takes
      // few k steps (each waits for its loads).
      g.BC = contiguousTile(C, threads * vec);
      // Rows of the tile the threads cover at once (RegisterPlan.h: threads sharing a row take
      // one vector each): fewer would leave threads without a row.
      const int64_t sweep = std::max<int64_t>(1, threads / std::max<int64_t>(1, g.BC / vec));
      g.BO = std::max(sweep, threads * kGpuSlots / (g.BM * g.BC));
      g.BO = std::max<int64_t>(1, std::min(g.BO, pow2Ceil(O)));
      // Fewer rows per program make more programs: the weight's read spreads over more
      // multiprocessors.
      const int64_t others = batch * ((M + g.BM - 1) / g.BM);
      while (g.BO > sweep && g.BO > 1 && (N + g.BO - 1) / g.BO * others < kGpuMultiprocessors) g.BO /= 2;
    } else {
      // B's rows are the k steps, and all programs together read N x BK elements per step: a
      // row chunk of 8 vectors (128 bytes) leaves the most rows per step and makes the most
      // programs; BK as deep as 32 accumulator elements per thread allow, dividing K.
      g.BC = contiguousTile(C, 8 * vec);
      const int64_t sweep = std::max<int64_t>(1, threads / std::max<int64_t>(1, g.BC / vec));
      const int64_t deepest = std::max(sweep, threads * 2 * kGpuSlots / (g.BM * g.BC));
      g.BO = std::max(sweep, contiguousTile(O, deepest));
    }
  }
  // A 1-d slice of the tile must tell rows from columns by its length (RegisterPlan.h).
  if (g.BO == g.BC && g.BO > 1) g.BO /= 2;
  return g;
}

} // namespace

bool gemvWanted(int64_t M, const Type &result) {
  if (!isFloat(result.dtype) || M < 1 || M > kGemvMaxRows) return false;
  const char *e = std::getenv("TSR_GEMV");
  return !(e && std::string(e) == "0");
}

GemvLayout gemvLayoutOf(const Op &op) {
  if (op.operands.size() != 2) return GemvLayout::NMajor;
  const Value *b = op.operands[1];
  if (b->type.rank() == 1) return GemvLayout::KMajor; // [K] is B [K, 1]: k is its only axis
  const Op *d = b->def;
  if (!d || d->kind != OpKind::Transpose) return GemvLayout::NMajor;
  const auto *perm = d->attrAs<std::vector<int64_t>>("perm");
  const int64_t r = int64_t(b->type.rank());
  if (!perm || int64_t(perm->size()) != r || r < 2) return GemvLayout::NMajor;
  return (*perm)[size_t(r - 2)] == r - 1 && (*perm)[size_t(r - 1)] == r - 2 ? GemvLayout::KMajor : GemvLayout::NMajor;
}

Kernel lowerGemv(const Op &op, size_t batchRank, DType adt, DType bdt, const Type &result, const std::array<int64_t, 3> &mnk,
                 GemvLayout layout, const std::string &name, const TileTarget &target, const Step *epi, bool storeProduct) {
  const DType T = result.dtype;
  if (!isFloat(T)) throw tile::TileError{"a GEMV program of a non-float result"};
  if (mnk[0] < 0 || mnk[1] < 0 || mnk[2] < 0) throw tile::TileError{"a GEMV program of a negative extent"};
  const DType acc = accumulatorOf(result);
  const bool kMajor = layout == GemvLayout::KMajor;
  int64_t batch = 1;
  for (size_t i = 0; i < batchRank && i < result.dims.size(); ++i) {
    const auto d = result.dims[i].constantValue();
    batch *= d ? *d : kGpuMultiprocessors; // symbolic: taken as many
  }
  const int64_t esz = std::min({storageBytes(T), storageBytes(adt), storageBytes(bdt)});
  const GemvTiles g = gemvTiles(mnk, batch, layout, esz, target);

  return fitShared(target, {g.BO, g.BC}, [&](const std::vector<int64_t> &tl) {
    const int64_t BM = g.BM, BO = tl[0], BC = tl[1];
    const int64_t BN = kMajor ? BO : BC, BK = kMajor ? BC : BO;
    Kernel k = newKernel(name, target);
    tile::Function &f = *k.fn;
    f.loc = op.loc;
    const size_t n = batchRank + 2;
    TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n), epi ? epi->outputs.at(0)->type.dtype : T));
    TV *mm = epi && storeProduct ? f.addParam("mm", tile::Type::tensor(uint32_t(n), T)) : nullptr;
    TV *A = f.addParam("a", tile::Type::tensor(uint32_t(n), adt));
    TV *B = f.addParam(kMajor ? "bt" : "b", tile::Type::tensor(uint32_t(n), bdt));
    std::unordered_map<const Value *, TV *> params;
    if (epi) params = addEpilogueParams(f, *epi, op.result(), n);
    k.tiles = "GEMV BM=" + std::to_string(BM) + " BN=" + std::to_string(BN) + " BK=" + std::to_string(BK) +
              (kMajor ? " k-major" : " n-major");

    Builder b{f, f.body, op.loc};
    std::vector<TV *> lead(n, nullptr);
    k.grid[0] = {{int(n - 1)}, BN};
    k.grid[1] = {{int(n - 2)}, BM};
    if (batchRank > 0) {
      std::vector<int> axes;
      for (size_t d = 0; d < batchRank; ++d) axes.push_back(int(d));
      k.grid[2] = {axes, 1};
      decompose(b, b.pid(2), axes, out, lead);
    }
    setGrid(f, k.grid);
    TV *n0 = b.bin(TK::Mul, b.pid(0), b.i64(BN));
    TV *m0 = b.bin(TK::Mul, b.pid(1), b.i64(BM));
    std::vector<TV *> rows; // the program's rows of A and of the output
    for (int64_t r = 0; r < BM; ++r) rows.push_back(r == 0 ? m0 : b.bin(TK::Add, m0, b.i64(r)));
    TV *K = b.dim(A, int(n - 1));
    // The tile [BN, BK] (KMajor) or [BK, BN] (NMajor): B's contiguous axis last.
    const std::vector<int64_t> tshape = kMajor ? std::vector<int64_t>{BN, BK} : std::vector<int64_t>{BK, BN};
    const int64_t kpos = kMajor ? 1 : 0; // the tile axis of k
    std::vector<TV *> inits;
    for (int64_t r = 0; r < BM; ++r) inits.push_back(b.constant(tshape, acc, AttrValue(0.0)));
    // TSR_GEMV_TEST_BREAK=1 (the negative control of tests/schedule/gemv_check.py only): the
    // loop skips the first chunk of K, so that every sum misses terms.
    const char *brk = std::getenv("TSR_GEMV_TEST_BREAK");
    const bool broken = brk && std::string(brk) == "1";
    std::vector<TV *> loopOps{b.i64(broken ? BK : 0), K, b.i64(BK)};
    std::vector<tile::Type> carriedTypes;
    for (TV *i : inits) {
      loopOps.push_back(i);
      carriedTypes.push_back(i->type);
    }
    tile::Op *loop = f.addWithTypes(f.body, TK::For, loopOps, {}, carriedTypes, op.loc);
    tile::Block *body = f.newBlock(loop);
    TV *k0 = f.addBlockArg(body, tile::Type::scalar(DType::I64));
    std::vector<TV *> carried;
    for (const tile::Type &ty : carriedTypes) carried.push_back(f.addBlockArg(body, ty));
    Builder lb{f, body, op.loc};
    // Operands in the result dtype (the evaluator's rule), then in the accumulator's. Elements
    // past K, N or M read 0 (load_box's `other`): past K both factors are 0; past N or M the
    // products are not stored.
    auto operand = [&](TV *t, DType dt, const Coords &c) {
      TV *x = lb.cast(loadBox(lb, t, c), reprOf(dt));
      x = convert(lb, x, dt, T);
      return lb.cast(x, acc);
    };
    Coords wc;
    wc.start = lead;
    wc.block.assign(n, 0);
    wc.start[n - 2] = kMajor ? n0 : k0;
    wc.block[n - 2] = kMajor ? BN : BK;
    wc.start[n - 1] = kMajor ? k0 : n0;
    wc.block[n - 1] = kMajor ? BK : BN;
    TV *w = operand(B, bdt, wc);
    std::vector<TV *> next;
    for (int64_t r = 0; r < BM; ++r) {
      Coords xc;
      xc.start = lead;
      xc.block.assign(n, 0);
      xc.start[n - 2] = rows[size_t(r)];
      xc.start[n - 1] = k0;
      xc.block[n - 1] = BK;
      TV *x = operand(A, adt, xc); // [BK]
      x = lb.broadcast(lb.op(TK::ExpandDims, {x}, {{"axis", int64_t(kMajor ? 0 : 1)}}), tshape);
      next.push_back(lb.bin(TK::Add, carried[size_t(r)], lb.bin(TK::Mul, w, x)));
    }
    f.addWithTypes(body, TK::Yield, next, {}, {}, op.loc);
    for (int64_t r = 0; r < BM; ++r) {
      TV *sum = b.op(TK::ReduceSum, {loop->results[size_t(r)]}, {{"axis", kpos}}); // [BN]
      sum = b.cast(sum, T, result.policies);
      Coords oc;
      oc.start = lead;
      oc.block.assign(n, 0);
      oc.start[n - 2] = rows[size_t(r)];
      oc.start[n - 1] = n0;
      oc.block[n - 1] = BN;
      if (!epi) {
        storeBox(b, out, oc, sum);
        continue;
      }
      if (mm) storeBox(b, mm, oc, sum);
      storeBox(b, out, oc, epilogueTile(b, *epi, op.result(), sum, oc, params));
      b.loc = op.loc;
    }
    return k;
  });
}

} // namespace tsr::ir::schedule
