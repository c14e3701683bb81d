// The lowering of a window step (Fusion.h) to Tile IR: conv, conv_transpose, max_pool (and its
// form that reads a second tensor at the maxima), max_pool_grad, avg_pool and avg_pool_grad as
// one program over the result, tiled as an elementwise program's. Each result element is a
// reduction over its window, computed in the program by a `for` loop over the window's taps (and
// for conv the group's input channels), the elements read by offsets (Tile IR `load`, a gather)
// and masked where a tap falls in the padding. This is direct convolution, the "pull" form of
// every op: each program writes its own elements once, so no op needs atomics or a zeroed output,
// and the transposed ops (conv_transpose, the pools' gradients) find the windows that cover an
// element by the inverse of the window map, i = o*stride + k*dilation - pad_begin, taking the
// taps k for which (i + pad_begin - k*dilation) is a multiple of the stride (Dumoulin & Visin, "A
// guide to convolution arithmetic for deep learning", 2016, sec. 4: the transposed convolution as
// a convolution over the stride-dilated input).
//
// Semantics are the reference evaluator's (ir/eval/ConvPool.h): ONNX's Conv, ConvTranspose,
// MaxPool and AveragePool and PyTorch's functional forms; max_pool takes each window's first
// maximum in row-major tap order, a NaN wins (the first NaN stays), a window with nothing inside
// gives -inf (the dtype's lowest integer; 0 for the second-tensor form); avg_pool divides by the
// window's elements inside the input, or with count_include_pad inside the input and its pads, and
// gives NaN for an empty divisor. Sums accumulate in accumulatorOf(result) (f32, f64 for f64) and
// round once into the result, where the evaluator accumulates in f64: results agree to the
// accumulator's rounding. Extents are read at run time (`dim`), so a program serves every input
// shape with its result shape; strides, dilations, pads and pool kernels are attributes.
#include "ir/schedule/LowerGroups.h"
#include "ir/schedule/TileBuilder.h"

#include <cmath>
#include <limits>

namespace tsr::ir::schedule {

using namespace build;

namespace {

std::vector<int64_t> intsAttr(const Op &op, const char *name, std::vector<int64_t> dflt) {
  const auto *v = op.attrAs<std::vector<int64_t>>(name);
  return v ? *v : dflt;
}

// A `for` loop of one step from lo to hi with loop-carried tiles: begin, build the body with
// `body` (the iteration's scalar and the carried values), end with the next values.
struct Loop {
  tile::Op *op = nullptr;
  Builder b;
  TV *iv = nullptr;
  std::vector<TV *> carried;
};

Loop beginLoop(Builder &b, TV *lo, TV *hi, const std::vector<TV *> &init) {
  std::vector<TV *> operands{lo, hi, b.i64(1)};
  std::vector<tile::Type> types;
  for (TV *v : init) {
    operands.push_back(v);
    types.push_back(v->type);
  }
  tile::Op *op = b.f.addWithTypes(b.blk, TK::For, operands, {}, types, b.loc);
  tile::Block *body = b.f.newBlock(op);
  Loop l{op, Builder{b.f, body, b.loc}, nullptr, {}};
  l.iv = b.f.addBlockArg(body, tile::Type::scalar(DType::I64));
  for (TV *v : init) l.carried.push_back(b.f.addBlockArg(body, v->type));
  return l;
}

std::vector<TV *> endLoop(Loop &l, const std::vector<TV *> &next) {
  l.b.f.addWithTypes(l.b.blk, TK::Yield, next, {}, {}, l.b.loc);
  return l.op->results;
}

// The lowering of one op: its parameters, the result's coordinates and the helpers the six ops
// share. Spatial axis j of a tensor of rank 2 + n is its axis 2 + j.
struct WindowLowering {
  const Op &op;
  const std::vector<int64_t> &shape; // the result's
  Builder &b;
  const Coords &c;
  std::vector<int64_t> ts; // the tile's shape
  size_t n;                // spatial axes
  std::vector<int64_t> strides, dilations, pads;

  TV *splat(TV *s) { return ts.empty() ? s : b.broadcast(s, ts); }
  TV *splatIn(Builder &lb, TV *s) { return ts.empty() ? s : lb.broadcast(s, ts); }
  TV *ci(Builder &lb, int64_t v) { return lb.constant(ts, DType::I64, v); }
  TV *stride(Builder &lb, TV *t, size_t d) { return splatIn(lb, lb.op(TK::TensorStride, {t}, {{"axis", int64_t(d)}})); }
  TV *dimOf(Builder &lb, TV *t, size_t d) { return splatIn(lb, lb.dim(t, int(d))); }
  TV *index(size_t d) { return axisIndex(b, c, d); }
  TV *all(Builder &lb, TV *a, TV *m) { return lb.bin(TK::And, a, m); }
  // 0 <= i < extent
  TV *inRange(Builder &lb, TV *i, TV *extent) {
    return lb.bin(TK::And, lb.bin(TK::Ge, i, ci(lb, 0)), lb.bin(TK::Lt, i, extent));
  }
  // The taps of a window of static kernel extents K (row-major, the last axis fastest) from a
  // scalar tap number t.
  std::vector<TV *> tapsOf(Builder &lb, TV *t, const std::vector<int64_t> &K) {
    std::vector<TV *> k(K.size());
    for (size_t j = K.size(); j-- > 0;) {
      if (j == 0) { k[j] = t; break; }
      TV *e = lb.i64(K[j]);
      TV *q = lb.bin(TK::Div, t, e);
      k[j] = lb.bin(TK::Sub, t, lb.bin(TK::Mul, q, e));
      t = q;
    }
    return k;
  }
  // The same with extents read from tensor `w`'s spatial axes at run time.
  std::vector<TV *> tapsOfDims(Builder &lb, TV *t, TV *w) {
    std::vector<TV *> k(n);
    for (size_t j = n; j-- > 0;) {
      if (j == 0) { k[j] = t; break; }
      TV *e = lb.dim(w, int(2 + j));
      TV *q = lb.bin(TK::Div, t, e);
      k[j] = lb.bin(TK::Sub, t, lb.bin(TK::Mul, q, e));
      t = q;
    }
    return k;
  }
};

} // namespace

bool isWindowStepOp(const Op &op) {
  const bool pool = op.kind == OpKind::MaxPool || op.kind == OpKind::MaxPoolGrad || op.kind == OpKind::AvgPool ||
                    op.kind == OpKind::AvgPoolGrad;
  const bool conv = op.kind == OpKind::Conv || op.kind == OpKind::ConvTranspose;
  if ((!pool && !conv) || op.results.size() != 1 || op.operands.empty()) return false;
  const Type &r = op.result()->type;
  if (r.isKey() || r.rank() < 3 || r.rank() > 5) return false;
  for (const Value *v : op.operands)
    if (v->type.isKey() || v->type.rank() != r.rank()) return false;
  const size_t n = r.rank() - 2;
  auto sized = [&](const char *a, size_t want) {
    const auto *v = op.attrAs<std::vector<int64_t>>(a);
    return !v || v->size() == want;
  };
  if (!sized("strides", n) || !sized("dilations", n) || !sized("pads", 2 * n)) return false;
  for (int64_t s : intsAttr(op, "strides", {})) if (s < 1) return false;
  for (int64_t d : intsAttr(op, "dilations", {})) if (d < 1) return false;
  if (conv && op.attrAs<int64_t>("groups") && *op.attrAs<int64_t>("groups") < 1) return false;
  if (conv) return op.operands.size() == 2 && isFloat(r.dtype) && op.operands[0]->type.dtype == r.dtype && op.operands[1]->type.dtype == r.dtype;
  const auto *k = op.attrAs<std::vector<int64_t>>("kernel");
  if (!k || k->size() != n) return false;
  for (int64_t e : *k) if (e < 1) return false;
  switch (op.kind) {
  case OpKind::MaxPool:
    // the maxima of x (any dtype but bool), or t's elements at them
    if (op.operands[0]->type.dtype == DType::Bool) return false;
    return op.operands.size() == 1 ? op.operands[0]->type.dtype == r.dtype : op.operands.size() == 2 && op.operands[1]->type.dtype == r.dtype;
  case OpKind::MaxPoolGrad:
    return op.operands.size() == 2 && isFloat(r.dtype) && op.operands[1]->type.dtype == r.dtype && op.operands[0]->type.dtype != DType::Bool;
  default: // avg_pool (x), avg_pool_grad (g): float; avg_pool's windows are not dilated
    for (int64_t d : intsAttr(op, "dilations", {})) if (d != 1) return false;
    return op.operands.size() == 1 && isFloat(r.dtype) && op.operands[0]->type.dtype == r.dtype;
  }
}

Kernel lowerWindow(const Op &op, const std::vector<int64_t> &shape, const std::string &name, const TileTarget &target) {
  if (!isWindowStepOp(op)) throw tile::TileError{"a window step of `" + std::string(opSpelling(op.kind)) + "`"};
  if (shape.size() != op.result()->type.rank()) throw tile::TileError{"a window step's result shape of another rank"};
  const size_t r = shape.size(), n = r - 2;
  const DType rdt = op.result()->type.dtype;
  const DType acc = accumulatorOf(op.result()->type);
  const std::vector<int64_t> tiles = outputTiles(shape, target);

  return fitShared(target, tiles, [&](const std::vector<int64_t> &tl) {
    Kernel k = newKernel(name, target);
    tile::Function &f = *k.fn;
    f.loc = op.loc;
    TV *out = f.addParam("out", tile::Type::tensor(uint32_t(r), rdt));
    std::vector<TV *> in;
    for (size_t i = 0; i < op.operands.size(); ++i)
      in.push_back(f.addParam(i == 0 ? "x" : "w", tile::Type::tensor(uint32_t(r), op.operands[i]->type.dtype)));
    Builder b{f, f.body, f.loc};
    Coords c = tileOverOutput(b, k, f, shape, out, tl[0], tl[1]);
    k.tiles = outputTilesText(r, tl[0], tl[1]);
    WindowLowering W{op, shape, b, c, c.tileShape(), n, intsAttr(op, "strides", std::vector<int64_t>(n, 1)),
                     intsAttr(op, "dilations", std::vector<int64_t>(n, 1)), intsAttr(op, "pads", std::vector<int64_t>(2 * n, 0))};
    const std::vector<int64_t> &ts = W.ts;
    std::vector<TV *> ext(r, nullptr);
    for (size_t d = 0; d < r; ++d) if (c.block[d] > 0) ext[d] = b.dim(out, int(d));
    TV *inside = inBoundsMask(b, c, ext);
    std::vector<TV *> idx(r);
    for (size_t d = 0; d < r; ++d) idx[d] = W.index(d);
    TV *result = nullptr;

    switch (op.kind) {
    case OpKind::Conv:
    case OpKind::ConvTranspose: {
      // conv: y[n, m, o] = sum over the group's channels c and taps k of
      //   x[n, g*Cg + c, o*s + k*d - pb] w[m, c, k], g = m / Mg;
      // conv_transpose: y[n, m, o] = sum over the group's input channels c and the taps k with
      //   o = i*s + k*d - pb of x[n, g*Cg + c, i] w[g*Cg + c, m % Mg, k], g = m / Mg.
      // Two loops: the taps outside, where each tap's positions, padding mask and offsets are
      // computed once; the channels inside, two loads and a multiply-add per element.
      const bool tr = op.kind == OpKind::ConvTranspose;
      TV *x = in[0], *w = in[1];
      // The group sizes from the attribute (>= 1), so that no program divides by a run-time
      // extent that may be 0 (a conv of no channels gives zeros, as the evaluator's).
      TV *G = b.i64(op.attrAs<int64_t>("groups") ? *op.attrAs<int64_t>("groups") : 1);
      TV *Mg = tr ? b.dim(w, 1) : b.bin(TK::Div, b.dim(out, 1), G);
      TV *Cg = tr ? b.bin(TK::Div, b.dim(x, 1), G) : b.dim(w, 1);
      TV *T = b.i64(1);
      for (size_t j = 0; j < n; ++j) T = b.bin(TK::Mul, T, b.dim(w, int(2 + j)));
      // The weight's offsets are the same for the whole tile when m is (the channel axis outside
      // the tile): one scalar load per channel and tap, broadcast.
      const bool wScalar = c.block[1] == 0;
      TV *mS = c.start[1];
      TV *grp = b.bin(TK::Div, idx[1], W.splat(Mg));
      TV *cbase = b.bin(TK::Mul, grp, W.splat(Cg)); // the group's first input channel
      TV *xrow = b.bin(TK::Add, b.bin(TK::Mul, idx[0], W.stride(b, x, 0)), b.bin(TK::Mul, cbase, W.stride(b, x, 1)));
      TV *wrow; // w's offset of channel 0 of the group (tile, or scalar when wScalar)
      if (!tr) {
        wrow = wScalar ? b.bin(TK::Mul, mS, b.op(TK::TensorStride, {w}, {{"axis", int64_t(0)}})) : b.bin(TK::Mul, idx[1], W.stride(b, w, 0));
      } else {
        auto rowOf = [&](Builder &lb, TV *m, TV *mg, TV *cg, bool tile) {
          TV *g = lb.bin(TK::Div, m, mg);
          TV *mi = lb.bin(TK::Sub, m, lb.bin(TK::Mul, g, mg));
          TV *s0 = lb.op(TK::TensorStride, {w}, {{"axis", int64_t(0)}}), *s1 = lb.op(TK::TensorStride, {w}, {{"axis", int64_t(1)}});
          if (tile) { s0 = W.splatIn(lb, s0); s1 = W.splatIn(lb, s1); }
          return lb.bin(TK::Add, lb.bin(TK::Mul, mi, s1), lb.bin(TK::Mul, lb.bin(TK::Mul, g, cg), s0));
        };
        wrow = wScalar ? rowOf(b, mS, Mg, Cg, false) : rowOf(b, idx[1], W.splat(Mg), W.splat(Cg), true);
      }
      TV *sxc = b.op(TK::TensorStride, {x}, {{"axis", int64_t(1)}});
      TV *swc = b.op(TK::TensorStride, {w}, {{"axis", int64_t(tr ? 0 : 1)}});
      Loop L = beginLoop(b, b.i64(0), T, {b.constant(ts, acc, 0.0)});
      Builder &lb = L.b;
      std::vector<TV *> kk = W.tapsOfDims(lb, L.iv, w);
      TV *xoff = xrow, *ok = inside;
      TV *woff = wrow;
      for (size_t j = 0; j < n; ++j) {
        TV *kj = W.splatIn(lb, kk[j]);
        TV *i;
        if (!tr) {
          i = lb.bin(TK::Add, lb.bin(TK::Mul, idx[2 + j], W.ci(lb, W.strides[j])),
                     lb.bin(TK::Sub, lb.bin(TK::Mul, kj, W.ci(lb, W.dilations[j])), W.ci(lb, W.pads[j])));
        } else {
          TV *num = lb.bin(TK::Sub, lb.bin(TK::Add, idx[2 + j], W.ci(lb, W.pads[j])), lb.bin(TK::Mul, kj, W.ci(lb, W.dilations[j])));
          TV *st = W.ci(lb, W.strides[j]);
          i = lb.bin(TK::FloorDiv, num, st);
          ok = W.all(lb, ok, lb.bin(TK::Eq, lb.bin(TK::Mod, num, st), W.ci(lb, 0)));
        }
        ok = W.all(lb, ok, W.inRange(lb, i, W.dimOf(lb, x, 2 + j)));
        xoff = lb.bin(TK::Add, xoff, lb.bin(TK::Mul, i, W.stride(lb, x, 2 + j)));
        TV *sw = lb.op(TK::TensorStride, {w}, {{"axis", int64_t(2 + j)}});
        woff = lb.bin(TK::Add, woff, wScalar ? lb.bin(TK::Mul, kk[j], sw) : lb.bin(TK::Mul, kj, W.splatIn(lb, sw)));
      }
      // The channels of the group: x's and w's offsets advance by their channel strides.
      Loop C = beginLoop(lb, lb.i64(0), Cg, {L.carried[0]});
      Builder &cb = C.b;
      TV *xv = cb.op(TK::Load, {x, cb.bin(TK::Add, xoff, W.splatIn(cb, cb.bin(TK::Mul, C.iv, sxc))), ok});
      TV *wo = cb.bin(TK::Add, woff, wScalar ? cb.bin(TK::Mul, C.iv, swc) : W.splatIn(cb, cb.bin(TK::Mul, C.iv, swc)));
      TV *wv = wScalar ? W.splatIn(cb, cb.op(TK::Load, {w, wo})) : cb.op(TK::Load, {w, wo, inside});
      TV *sum = endLoop(C, {cb.bin(TK::Add, C.carried[0], cb.bin(TK::Mul, cb.cast(xv, acc), cb.cast(wv, acc)))})[0];
      result = endLoop(L, {sum})[0];
      break;
    }
    case OpKind::MaxPool:
    case OpKind::MaxPoolGrad:
    case OpKind::AvgPool:
    case OpKind::AvgPoolGrad: {
      const std::vector<int64_t> K = *op.attrAs<std::vector<int64_t>>("kernel");
      int64_t T = 1;
      for (int64_t e : K) T *= e;
      TV *x = in[0];
      // The first maximum of window `o` (spatial indices, tiles) of x at row (n, c): the tap
      // number, -1 where no tap lies inside x. `lb` builds into the current block.
      auto firstMax = [&](Builder &lb, const std::vector<TV *> &o, TV *mask) {
        const DType xd = op.operands[0]->type.dtype;
        TV *row = lb.bin(TK::Add, lb.bin(TK::Mul, idx[0], W.stride(lb, x, 0)), lb.bin(TK::Mul, idx[1], W.stride(lb, x, 1)));
        const bool fl = isFloat(xd);
        Loop L = beginLoop(lb, lb.i64(0), lb.i64(T), {lb.constant(ts, xd, fl ? AttrValue(0.0) : AttrValue(int64_t(0))), W.ci(lb, -1)});
        Builder &ib = L.b;
        std::vector<TV *> kk = W.tapsOf(ib, L.iv, K);
        TV *off = row, *ok = mask;
        for (size_t j = 0; j < n; ++j) {
          TV *i = ib.bin(TK::Add, ib.bin(TK::Mul, o[j], W.ci(ib, W.strides[j])),
                         ib.bin(TK::Sub, ib.bin(TK::Mul, W.splatIn(ib, kk[j]), W.ci(ib, W.dilations[j])), W.ci(ib, W.pads[j])));
          ok = W.all(ib, ok, W.inRange(ib, i, W.dimOf(ib, x, 2 + j)));
          off = ib.bin(TK::Add, off, ib.bin(TK::Mul, i, W.stride(ib, x, 2 + j)));
        }
        TV *v = ib.op(TK::Load, {x, off, ok});
        TV *best = L.carried[0], *at = L.carried[1];
        // Taken: the first element inside, then one greater than the best so far or a NaN,
        // unless the best is already a NaN (the first NaN stays).
        TV *none = ib.bin(TK::Lt, at, W.ci(ib, 0));
        TV *better = ib.bin(TK::Gt, v, best);
        if (fl) {
          TV *vnan = ib.bin(TK::Ne, v, v), *bnan = ib.bin(TK::Ne, best, best);
          better = ib.bin(TK::And, ib.op(TK::Not, {bnan}), ib.bin(TK::Or, better, vnan));
        }
        TV *take = ib.bin(TK::And, ok, ib.bin(TK::Or, none, better));
        std::vector<TV *> res = endLoop(L, {ib.op(TK::Select, {take, v, best}), ib.op(TK::Select, {take, W.splatIn(ib, L.iv), at})});
        return res;
      };
      // The element offset in tensor t (the row of idx[0], idx[1]) of tap `tap` (a tile) of window o.
      auto tapOffset = [&](Builder &lb, TV *t, const std::vector<TV *> &o, TV *tap) {
        TV *off = lb.bin(TK::Add, lb.bin(TK::Mul, idx[0], W.stride(lb, t, 0)), lb.bin(TK::Mul, idx[1], W.stride(lb, t, 1)));
        for (size_t j = n; j-- > 0;) {
          TV *e = W.ci(lb, K[j]);
          TV *q = lb.bin(TK::FloorDiv, tap, e);
          TV *kj = lb.bin(TK::Sub, tap, lb.bin(TK::Mul, q, e));
          tap = q;
          TV *i = lb.bin(TK::Add, lb.bin(TK::Mul, o[j], W.ci(lb, W.strides[j])),
                         lb.bin(TK::Sub, lb.bin(TK::Mul, kj, W.ci(lb, W.dilations[j])), W.ci(lb, W.pads[j])));
          off = lb.bin(TK::Add, off, lb.bin(TK::Mul, i, W.stride(lb, t, 2 + j)));
        }
        return off;
      };
      // avg_pool's divisor of window o (PyTorch's: with count_include_pad the window clipped
      // to the padded extent, else to the input), in the accumulator's dtype; S: x's extents.
      const bool includePad = op.attrAs<bool>("count_include_pad") && *op.attrAs<bool>("count_include_pad");
      auto divisor = [&](Builder &lb, const std::vector<TV *> &o, const std::vector<TV *> &S) {
        TV *d = lb.constant(ts, DType::I64, int64_t(1));
        for (size_t j = 0; j < n; ++j) {
          TV *lo = lb.bin(TK::Sub, lb.bin(TK::Mul, o[j], W.ci(lb, W.strides[j])), W.ci(lb, W.pads[j]));
          TV *hi = lb.bin(TK::Min, lb.bin(TK::Add, lo, W.ci(lb, K[j])), lb.bin(TK::Add, S[j], W.ci(lb, W.pads[n + j])));
          if (!includePad) {
            lo = lb.bin(TK::Max, lo, W.ci(lb, 0));
            hi = lb.bin(TK::Min, hi, S[j]);
          }
          d = lb.bin(TK::Mul, d, lb.bin(TK::Max, lb.bin(TK::Sub, hi, lo), W.ci(lb, 0)));
        }
        return d;
      };
      std::vector<TV *> o(idx.begin() + 2, idx.end());

      if (op.kind == OpKind::MaxPool) {
        std::vector<TV *> m = firstMax(b, o, inside);
        TV *found = b.bin(TK::Ge, m[1], W.ci(b, 0));
        if (op.operands.size() == 2) {
          TV *t = in[1];
          TV *v = b.op(TK::Load, {t, tapOffset(b, t, o, b.op(TK::Max, {m[1], W.ci(b, 0)})), b.bin(TK::And, inside, found)});
          result = v; // 0 (the load's `other`) where no tap is inside
        } else {
          AttrValue lowest = isFloat(rdt) ? AttrValue(-std::numeric_limits<double>::infinity())
                             : dtypeBits(rdt) >= 64 ? AttrValue(std::numeric_limits<int64_t>::min())
                                                    : AttrValue(-(int64_t(1) << (dtypeBits(rdt) - 1)));
          result = b.op(TK::Select, {found, m[0], b.constant(ts, rdt, lowest)});
        }
      } else if (op.kind == OpKind::AvgPool) {
        std::vector<TV *> S(n);
        TV *row = b.bin(TK::Add, b.bin(TK::Mul, idx[0], W.stride(b, x, 0)), b.bin(TK::Mul, idx[1], W.stride(b, x, 1)));
        for (size_t j = 0; j < n; ++j) S[j] = W.dimOf(b, x, 2 + j);
        Loop L = beginLoop(b, b.i64(0), b.i64(T), {b.constant(ts, acc, 0.0)});
        Builder &lb = L.b;
        std::vector<TV *> kk = W.tapsOf(lb, L.iv, K);
        TV *off = row, *ok = inside;
        for (size_t j = 0; j < n; ++j) {
          TV *i = lb.bin(TK::Add, lb.bin(TK::Sub, lb.bin(TK::Mul, o[j], W.ci(lb, W.strides[j])), W.ci(lb, W.pads[j])), W.splatIn(lb, kk[j]));
          ok = W.all(lb, ok, W.inRange(lb, i, S[j]));
          off = lb.bin(TK::Add, off, lb.bin(TK::Mul, i, W.stride(lb, x, 2 + j)));
        }
        TV *sum = endLoop(L, {lb.bin(TK::Add, L.carried[0], lb.cast(lb.op(TK::Load, {x, off, ok}), acc))})[0];
        TV *d = divisor(b, o, S);
        TV *nan = b.constant(ts, acc, std::numeric_limits<double>::quiet_NaN());
        result = b.op(TK::Select, {b.bin(TK::Gt, d, W.ci(b, 0)), b.bin(TK::Div, sum, b.cast(d, acc)), nan});
      } else {
        // The gradients: the result has x's shape; element i gets, for each tap k whose window
        // o = (i + pb - k*d) / s exists (an exact quotient inside g's extents), g[o] if that
        // window's first maximum is tap k (max_pool_grad), or g[o] / divisor(o) (avg_pool_grad).
        const bool isMax = op.kind == OpKind::MaxPoolGrad;
        TV *g = in[isMax ? 1 : 0];
        std::vector<TV *> S(n);
        for (size_t j = 0; j < n; ++j) S[j] = W.dimOf(b, out, 2 + j);
        TV *grow = b.bin(TK::Add, b.bin(TK::Mul, idx[0], W.stride(b, g, 0)), b.bin(TK::Mul, idx[1], W.stride(b, g, 1)));
        Loop L = beginLoop(b, b.i64(0), b.i64(T), {b.constant(ts, acc, 0.0)});
        Builder &lb = L.b;
        std::vector<TV *> kk = W.tapsOf(lb, L.iv, K);
        TV *ok = inside, *goff = grow;
        std::vector<TV *> ow(n);
        for (size_t j = 0; j < n; ++j) {
          TV *num = lb.bin(TK::Sub, lb.bin(TK::Add, idx[2 + j], W.ci(lb, W.pads[j])),
                           lb.bin(TK::Mul, W.splatIn(lb, kk[j]), W.ci(lb, W.dilations[j])));
          TV *s = W.ci(lb, W.strides[j]);
          ow[j] = lb.bin(TK::FloorDiv, num, s);
          ok = W.all(lb, ok, lb.bin(TK::Eq, lb.bin(TK::Mod, num, s), W.ci(lb, 0)));
          ok = W.all(lb, ok, W.inRange(lb, ow[j], W.dimOf(lb, g, 2 + j)));
          goff = lb.bin(TK::Add, goff, lb.bin(TK::Mul, ow[j], W.stride(lb, g, 2 + j)));
        }
        TV *gv = lb.cast(lb.op(TK::Load, {g, goff, ok}), acc);
        if (isMax) {
          ok = lb.bin(TK::And, ok, lb.bin(TK::Eq, firstMax(lb, ow, ok)[1], W.splatIn(lb, L.iv)));
        } else {
          TV *d = divisor(lb, ow, S);
          ok = lb.bin(TK::And, ok, lb.bin(TK::Gt, d, W.ci(lb, 0)));
          gv = lb.bin(TK::Div, gv, lb.cast(lb.bin(TK::Max, d, W.ci(lb, 1)), acc));
        }
        result = endLoop(L, {lb.op(TK::Select, {ok, lb.bin(TK::Add, L.carried[0], gv), L.carried[0]})})[0];
      }
      break;
    }
    default: throw tile::TileError{"a window step of `" + std::string(opSpelling(op.kind)) + "`"};
    }
    storeBox(b, out, c, b.cast(result, rdt, op.result()->type.policies));
    return k;
  });
}

} // namespace tsr::ir::schedule
