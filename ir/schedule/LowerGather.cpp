// The lowering of a gather step (Fusion.h) to Tile IR: take (numpy.take along an axis) and
// gather (torch.gather) as one program over the result. Each program computes, for its tile of
// result elements, the element offsets of their indices from the result coordinates and the
// indices tensor's strides, loads the indices, and loads the elements of x at the offsets the
// indices give (Tile IR `load` by offsets: a gather in the hardware's sense). Both tensors are
// read through their views as they are (any strides), so a transposed or sliced table needs no
// copy, and the result is written once.
//
// Indices are checked as the evaluator checks them (ir/eval/Evaluator.cpp, take and gather): a
// take index may be negative and counts from the end of the axis; a gather index may not. An
// element whose index is out of range reads nothing and is counted into `err`, and the executor
// reports the step as the evaluator would.
#include "ir/schedule/LowerGroups.h"
#include "ir/schedule/TileBuilder.h"

namespace tsr::ir::schedule {

using namespace build;

Kernel lowerGather(const Op &op, const std::vector<int64_t> &shape, const std::string &name, const TileTarget &target) {
  if ((op.kind != OpKind::Take && op.kind != OpKind::Gather) || op.operands.size() != 2 || op.results.size() != 1)
    throw tile::TileError{"a gather step of `" + std::string(opSpelling(op.kind)) + "`"};
  const bool take = op.kind == OpKind::Take;
  const Type &xt = op.operands[0]->type, &it = op.operands[1]->type;
  const size_t xr = xt.rank(), ir = it.rank(), n = shape.size();
  const auto *axisAttr = op.attrAs<int64_t>("axis");
  if (!axisAttr) throw tile::TileError{"a gather step without an axis"};
  const int64_t axis = *axisAttr < 0 ? *axisAttr + int64_t(xr) : *axisAttr;
  if (axis < 0 || axis >= int64_t(xr)) throw tile::TileError{"gather axis " + std::to_string(*axisAttr) + " of a rank-" + std::to_string(xr) + " tensor"};
  if (n != (take ? xr - 1 + ir : ir) || (!take && ir != xr))
    throw tile::TileError{"a gather step whose result rank " + std::to_string(n) + " does not fit x's " + std::to_string(xr) +
                          " and the indices' " + std::to_string(ir)};
  const size_t a = size_t(axis);
  const std::vector<int64_t> tiles = outputTiles(shape, target);

  return fitShared(target, tiles, [&](const std::vector<int64_t> &tl) {
    Kernel k = newKernel(name, target);
    tile::Function &f = *k.fn;
    f.loc = op.loc;
    TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n), op.result()->type.dtype));
    TV *x = f.addParam("x", tile::Type::tensor(uint32_t(xr), xt.dtype));
    TV *idx = f.addParam("indices", tile::Type::tensor(uint32_t(ir), it.dtype));
    TV *err = f.addParam("err", tile::Type::tensor(1, DType::I64));
    Builder b{f, f.body, f.loc};
    Coords c = tileOverOutput(b, k, f, shape, out, tl[0], tl[1]);
    k.tiles = outputTilesText(n, tl[0], tl[1]);
    const std::vector<int64_t> ts = c.tileShape();
    auto splat = [&](TV *s) { return ts.empty() ? s : b.broadcast(s, ts); };
    auto stride = [&](TV *t, size_t d) { return splat(b.op(TK::TensorStride, {t}, {{"axis", int64_t(d)}})); };
    // index along result axis `d` times tensor t's stride along its axis `td`
    auto term = [&](size_t d, TV *t, size_t td) { return b.bin(TK::Mul, axisIndex(b, c, d), stride(t, td)); };

    // The offsets of the indices and of x's other axes, from the result's coordinates: take's
    // result axes are x's before `a`, then the indices', then x's after `a`; gather's are the
    // indices', which are also x's (but `a`).
    TV *ioff = b.constant(ts, DType::I64, int64_t(0)), *xoff = ioff;
    for (size_t d = 0; d < n; ++d) {
      if (!take) {
        ioff = b.bin(TK::Add, ioff, term(d, idx, d));
        if (d != a) xoff = b.bin(TK::Add, xoff, term(d, x, d));
      } else if (d < a) {
        xoff = b.bin(TK::Add, xoff, term(d, x, d));
      } else if (d < a + ir) {
        ioff = b.bin(TK::Add, ioff, term(d, idx, d - a));
      } else {
        xoff = b.bin(TK::Add, xoff, term(d, x, d - ir + 1));
      }
    }
    std::vector<TV *> ext(n, nullptr);
    for (size_t d = 0; d < n; ++d) if (c.block[d] > 0) ext[d] = b.dim(out, int(d));
    TV *inside = inBoundsMask(b, c, ext);

    TV *i = b.cast(b.op(TK::Load, {idx, ioff, inside}), DType::I64);
    TV *extent = splat(b.dim(x, int(a)));
    TV *zero = b.constant(ts, DType::I64, int64_t(0));
    if (take) i = b.op(TK::Select, {b.bin(TK::Lt, i, zero), b.bin(TK::Add, i, extent), i});
    TV *bad = b.bin(TK::Or, b.bin(TK::Lt, i, zero), b.bin(TK::Ge, i, extent));
    xoff = b.bin(TK::Add, xoff, b.bin(TK::Mul, i, stride(x, a)));
    TV *ok = b.bin(TK::And, inside, b.op(TK::Not, {bad}));
    TV *val = b.op(TK::Load, {x, xoff, ok});
    storeBox(b, out, c, b.cast(val, op.result()->type.dtype));
    reportChecks(b, {bad}, inside, err);
    return k;
  });
}

} // namespace tsr::ir::schedule
