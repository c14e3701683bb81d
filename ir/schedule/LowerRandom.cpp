// The lowering of a random step (Fusion.h) to Tile IR: random_bits, and random_uniform over
// [0, 1), as one program over the result that computes each element's Philox4x32-10 words
// from the key and the element's flat index, by the scheme of runtime/Random.h (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011), bit for bit: a compiled draw equals
// the evaluator's on every target.
//
// Tile IR has no 32-bit unsigned type, so the words are held in i64 with their upper halves
// zero: a 32 x 32-bit product fits the 64 bits exactly (wrapping as two's complement, which is
// what `mul` does), and its high word is (p >> 32) & 0xFFFFFFFF (the mask undoes the arithmetic
// shift's sign extension). Each element computes its own block, four times the work of a
// thread that keeps the four words of a block; the step is memory-bound on a GPU all the same.
#include "ir/schedule/LowerGroups.h"
#include "ir/schedule/TileBuilder.h"
#include "runtime/Numeric.h"

#include <array>
#include <cmath>

namespace tsr::ir::schedule {

using namespace build;

namespace {

constexpr int64_t kWord = 0xFFFFFFFF;
constexpr int64_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;     // Philox4x32's multipliers
constexpr int64_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;     // its key bumps (Weyl sequence)

// Philox4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1): four i64 tiles of words.
std::array<TV *, 4> philox(Builder &b, std::array<TV *, 4> c, TV *k0, TV *k1, const std::vector<int64_t> &shape) {
  auto k = [&](int64_t v) { return b.constant(shape, DType::I64, v); };
  auto word = [&](TV *x) { return b.bin(TK::And, x, k(kWord)); };
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = word(b.bin(TK::Add, k0, k(kW0)));
      k1 = word(b.bin(TK::Add, k1, k(kW1)));
    }
    TV *p0 = b.bin(TK::Mul, k(kM0), c[0]), *p1 = b.bin(TK::Mul, k(kM1), c[2]);
    TV *hi0 = word(b.bin(TK::Shr, p0, k(32))), *lo0 = word(p0);
    TV *hi1 = word(b.bin(TK::Shr, p1, k(32))), *lo1 = word(p1);
    c = {b.bin(TK::Xor, b.bin(TK::Xor, hi1, c[1]), k0), lo1, b.bin(TK::Xor, b.bin(TK::Xor, hi0, c[3]), k1), lo0};
  }
  return c;
}

} // namespace

Kernel lowerRandom(const Op &op, const std::vector<int64_t> &shape, const std::string &name, const TileTarget &target) {
  const bool bits = op.kind == OpKind::RandomBits;
  if ((!bits && op.kind != OpKind::RandomUniform) || op.operands.size() != 1 || op.results.size() != 1)
    throw tile::TileError{"a random step of `" + std::string(opSpelling(op.kind)) + "` with " + std::to_string(op.operands.size()) + " operands"};
  const DType T = op.result()->type.dtype;
  if (bits ? T != DType::I64 : !isFloat(T)) throw tile::TileError{"a random step of dtype " + std::string(dtypeName(T))};
  const size_t n = shape.size();
  const std::vector<int64_t> tiles = outputTiles(shape, target);

  return fitShared(target, tiles, [&](const std::vector<int64_t> &tl) {
    Kernel k = newKernel(name, target);
    tile::Function &f = *k.fn;
    f.loc = op.loc;
    TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n), T));
    TV *key = f.addParam("key", tile::Type::tensor(1, DType::I64));
    Builder b{f, f.body, f.loc};
    Coords c = tileOverOutput(b, k, f, shape, out, tl[0], tl[1]);
    k.tiles = outputTilesText(n, tl[0], tl[1]);
    const std::vector<int64_t> ts = c.tileShape();
    auto splat = [&](TV *s) { return ts.empty() ? s : b.broadcast(s, ts); };
    auto kc = [&](int64_t v) { return b.constant(ts, DType::I64, v); };

    // The element's flat row-major index in the result (the evaluator's i), from its extents.
    TV *flat = kc(0);
    TV *step = b.i64(1);
    for (size_t d = n; d-- > 0;) {
      flat = b.bin(TK::Add, flat, b.bin(TK::Mul, axisIndex(b, c, d), splat(step)));
      step = b.bin(TK::Mul, step, b.dim(out, int(d)));
    }
    TV *k0 = splat(b.op(TK::Load, {key, b.i64(0)})), *k1 = splat(b.op(TK::Load, {key, b.i64(1)}));
    TV *blockIx = b.bin(TK::Shr, flat, kc(2));
    TV *lane = b.bin(TK::And, flat, kc(3));
    auto wordOf = [&](int64_t draw) {
      std::array<TV *, 4> ctr{b.bin(TK::And, blockIx, kc(kWord)), b.bin(TK::And, b.bin(TK::Shr, blockIx, kc(32)), kc(kWord)),
                              kc(draw), kc(0)};
      std::array<TV *, 4> w = philox(b, ctr, k0, k1, ts);
      TV *r = w[3];
      for (int l = 2; l >= 0; --l) r = b.op(TK::Select, {b.bin(TK::Eq, lane, kc(l)), w[size_t(l)], r});
      return r;
    };

    TV *val;
    if (bits) {
      val = wordOf(0);
    } else if (T == DType::F64) {
      // the top 53 of the 64 bits (w0 << 32 | w1), without leaving the positive i64s
      TV *w0 = wordOf(0), *w1 = wordOf(1);
      TV *m = b.bin(TK::Or, b.bin(TK::Shl, w0, kc(21)), b.bin(TK::Shr, w1, kc(11)));
      val = b.bin(TK::Mul, b.cast(m, DType::F64), b.constant(ts, DType::F64, std::ldexp(1.0, -53)));
    } else {
      // the top p + 1 bits of the word, times 2^-(p+1): exact in f32 and in T
      const int p = rt::significandBits(T);
      TV *m = b.bin(TK::Shr, wordOf(0), kc(31 - p));
      TV *u = b.bin(TK::Mul, b.cast(m, DType::F32), b.constant(ts, DType::F32, std::ldexp(1.0, -(p + 1))));
      val = b.cast(u, T);
    }
    storeBox(b, out, c, val);
    return k;
  });
}

} // namespace tsr::ir::schedule
