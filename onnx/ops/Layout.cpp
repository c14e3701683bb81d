// ONNX's shape, layout, indexing and creation operators as Graph IR: reshape, transpose, slice,
// concat, take (Gather) and gather (GatherElements), broadcast_to, iota, constant. Shape arguments
// (Reshape's shape, Slice's starts, Pad's pads, ...) must be known at import time; the importer
// evaluates shape computations ahead (Import.cpp). Semantics: ONNX 1.12's operator definitions
// (onnx/defs/tensor/defs.cc).
#include "onnx/Importer.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace tsr::onnxio {

using ir::OpKind;

namespace {

Dim product(const std::vector<Dim> &d, size_t b, size_t e) {
  Dim p = D(1);
  for (size_t i = b; i < e; ++i) p = p * d[i];
  return p;
}
rt::Tensor i64Tensor(const std::vector<int64_t> &v, bool scalar = false) {
  return rt::Tensor::fromI64(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(v.size())}, DType::I64, v);
}
/// Axes from an attribute (before `opsetInput`) or from input `idx` (from it on).
std::optional<std::vector<int64_t>> axesOf(Importer &I, Node &n, int64_t opsetInput, size_t idx, const char *name = "axes") {
  if (n.opset < opsetInput) return n.ints(name);
  if (!n.has(idx)) return std::nullopt;
  return I.knownInts(n.in[idx], name);
}
/// Index tensors may be negative (counted from the end of `size`): normalized here.
V normalizeIndex(Importer &I, Val &idx, const Dim &size) {
  if (idx.k) {
    auto s = size.constantValue();
    if (s) {
      rt::Tensor t = rt::Tensor::empty(idx.k->shape(), DType::I64);
      for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t x = idx.k->toI64(i);
        t.data<int64_t>()[i] = x < 0 ? x + *s : x;
      }
      return I.tensor(std::move(t), idx.name);
    }
  }
  V x = I.v(idx);
  V n = size.constantValue() ? I.scalar(double(*size.constantValue()), Importer::dtype(x))
                             : I.cast(I.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{size}}}), Importer::dtype(x));
  return I.op(OpKind::Where, {I.op(OpKind::Lt, {x, I.scalar(0, Importer::dtype(x))}), I.op(OpKind::Add, {x, n}), x});
}

} // namespace

std::vector<Val> ruleConstant(Importer &I, Node &n) {
  if (auto *a = n.attr("value")) return {Importer::ofKnown(tensorOfProto(a->t(), I.baseDir()))};
  if (auto *a = n.attr("value_float")) return {Importer::ofKnown(rt::Tensor::scalar(a->f(), DType::F32))};
  if (auto *a = n.attr("value_int")) return {Importer::ofKnown(rt::Tensor::fromI64({}, DType::I64, std::vector<int64_t>{a->i()}))};
  if (auto v = n.floats("value_floats")) return {Importer::ofKnown(rt::Tensor::fromF64({int64_t(v->size())}, DType::F32, *v))};
  if (auto v = n.ints("value_ints")) return {Importer::ofKnown(i64Tensor(*v))};
  throw Unsupported("Constant with a sparse or string value is not supported");
}

std::vector<Val> ruleConstantOfShape(Importer &I, Node &n) {
  std::vector<int64_t> shape = I.knownInts(n.in.at(0), "shape");
  rt::Tensor value = rt::Tensor::scalar(0, DType::F32);
  if (auto *a = n.attr("value")) value = tensorOfProto(a->t(), I.baseDir());
  if (value.numel() != 1) throw BadModel("ConstantOfShape's value must hold one element");
  std::vector<Dim> dims;
  int64_t count = 1;
  for (int64_t s : shape) {
    if (s < 0) throw BadModel("a negative size in the shape");
    dims.push_back(D(s));
    count *= s;
  }
  if (count <= 4096) return {Importer::ofKnown(rt::Tensor::full(shape, value.dtype(), value.toF64(0)))};
  return one(I.full(dims, value.toF64(0), value.dtype()));
}

std::vector<Val> ruleShape(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const auto &d = Importer::dims(x);
  const int64_t r = int64_t(d.size());
  int64_t b = n.i("start", 0), e = n.attr("end") ? n.i("end", r) : r;
  if (b < 0) b += r;
  if (e < 0) e += r;
  b = std::clamp<int64_t>(b, 0, r);
  e = std::clamp<int64_t>(e, 0, r);
  std::vector<int64_t> vals;
  bool isStatic = true;
  for (int64_t i = b; i < e; ++i) {
    auto c = d[size_t(i)].constantValue();
    isStatic &= c.has_value();
    vals.push_back(c.value_or(0));
  }
  if (isStatic) return {Importer::ofKnown(i64Tensor(vals))};
  std::vector<V> parts;
  for (int64_t i = b; i < e; ++i)
    parts.push_back(I.reshape(I.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{d[size_t(i)]}}}), {D(1)}));
  return one(I.concat(parts, 0));
}

std::vector<Val> ruleSize(Importer &I, Node &n) {
  V x = in(I, n, 0);
  Dim p = product(Importer::dims(x), 0, x->type.rank());
  if (auto c = p.constantValue()) return {Importer::ofKnown(i64Tensor({*c}, true))};
  return one(I.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{p}}}));
}

std::vector<Val> ruleReshape(Importer &I, Node &n) {
  V x = in(I, n, 0);
  std::vector<int64_t> shape = I.knownInts(n.in.at(1), "shape");
  const bool allowZero = n.i("allowzero", 0);
  const auto &d = Importer::dims(x);
  std::vector<Dim> out;
  int inferAt = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferAt >= 0) throw BadModel("Reshape's shape has two -1s");
      inferAt = int(i);
      out.push_back(D(1));
    } else if (shape[i] == 0 && !allowZero) {
      if (i >= d.size()) throw BadModel("Reshape's shape copies a dim (0) the input does not have");
      out.push_back(d[i]);
    } else if (shape[i] < 0) {
      throw BadModel("Reshape's shape has a negative size");
    } else {
      out.push_back(D(shape[i]));
    }
  }
  if (inferAt >= 0) {
    auto q = product(d, 0, d.size()).divide(product(out, 0, out.size()));
    if (!q) throw BadModel("Reshape cannot infer the -1 of an empty shape");
    out[size_t(inferAt)] = *q;
  }
  return one(I.reshape(x, out));
}

std::vector<Val> ruleFlatten(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const auto &d = Importer::dims(x);
  int64_t a = n.i("axis", 1);
  if (a < 0) a += int64_t(d.size());
  if (a < 0 || a > int64_t(d.size())) throw BadModel("Flatten's axis is out of range");
  return one(I.reshape(x, {product(d, 0, size_t(a)), product(d, size_t(a), d.size())}));
}

std::vector<Val> ruleSqueeze(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const auto &d = Importer::dims(x);
  auto axes = axesOf(I, n, 13, 1);
  std::vector<bool> drop(d.size(), false);
  if (axes) {
    for (int64_t a : *axes) drop[Importer::axis(a, d.size())] = true;
  } else {
    for (size_t i = 0; i < d.size(); ++i) drop[i] = d[i].isOne();
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < d.size(); ++i)
    if (!drop[i]) out.push_back(d[i]);
  return one(I.reshape(x, out));
}

std::vector<Val> ruleUnsqueeze(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const auto &d = Importer::dims(x);
  auto axes = axesOf(I, n, 13, 1);
  if (!axes) throw BadModel("Unsqueeze needs axes");
  const size_t r = d.size() + axes->size();
  std::vector<bool> ins(r, false);
  for (int64_t a : *axes) ins[Importer::axis(a, r)] = true;
  std::vector<Dim> out;
  size_t j = 0;
  for (size_t i = 0; i < r; ++i) out.push_back(ins[i] ? D(1) : d.at(j++));
  return one(I.reshape(x, out));
}

std::vector<Val> ruleTranspose(Importer &I, Node &n) {
  V x = in(I, n, 0);
  std::vector<int64_t> perm;
  if (auto p = n.ints("perm")) perm = *p;
  else
    for (size_t i = x->type.rank(); i-- > 0;) perm.push_back(int64_t(i));
  return one(I.transpose(x, perm));
}

std::vector<Val> ruleConcat(Importer &I, Node &n) {
  std::vector<V> xs;
  for (auto &x : n.in)
    if (x.present()) xs.push_back(I.v(x));
  if (xs.empty()) throw BadModel("Concat has no inputs");
  size_t ax = Importer::axis(n.i("axis", 0), xs[0]->type.rank());
  return one(I.concat(xs, int64_t(ax)));
}

std::vector<Val> ruleSplit(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t ax = Importer::axis(n.i("axis", 0), x->type.rank());
  auto size = x->type.dims[ax].constantValue();
  std::optional<std::vector<int64_t>> split = n.opset < 13 ? n.ints("split") : (n.has(1) ? std::optional(I.knownInts(n.in[1], "split")) : std::nullopt);
  std::vector<int64_t> parts;
  if (split) {
    parts = *split;
  } else {
    if (!size) throw Unsupported("Split of a symbolic axis into equal parts");
    const int64_t k = int64_t(n.numOutputs);
    if (k == 0 || *size % k) throw BadModel("Split's axis does not divide into " + std::to_string(k) + " equal parts");
    parts.assign(size_t(k), *size / k);
  }
  std::vector<Val> out;
  int64_t at = 0;
  for (int64_t p : parts) {
    out.push_back(Importer::of(I.sliceAxis(x, ax, D(at), D(at + p))));
    at += p;
  }
  return out;
}

std::vector<Val> ruleSlice(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t r = x->type.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset < 10) {
    starts = n.ints("starts").value_or(std::vector<int64_t>{});
    ends = n.ints("ends").value_or(std::vector<int64_t>{});
    if (auto a = n.ints("axes")) axes = *a;
  } else {
    starts = I.knownInts(n.in.at(1), "starts");
    ends = I.knownInts(n.in.at(2), "ends");
    if (n.has(3)) axes = I.knownInts(n.in[3], "axes");
    if (n.has(4)) steps = I.knownInts(n.in[4], "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw BadModel("Slice's starts, ends, axes and steps differ in length");
  std::vector<Dim> b(r, D(0)), e = x->type.dims;
  std::vector<int64_t> s(r, 1);
  std::vector<int64_t> reversed;
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t a = Importer::axis(axes[i], r);
    const int64_t st = steps[i];
    if (st == 0) throw BadModel("Slice's step is 0");
    auto nc = x->type.dims[a].constantValue();
    if (!nc) {
      // A symbolic axis: positive steps, starts and ends relative to its size.
      if (st < 0) throw Unsupported("Slice with a negative step along a symbolic axis");
      const Dim &N = x->type.dims[a];
      b[a] = starts[i] < 0 ? N + D(starts[i]) : D(starts[i]);
      e[a] = ends[i] >= INT32_MAX ? N : ends[i] < 0 ? N + D(ends[i]) : D(ends[i]);
      s[a] = st;
      continue;
    }
    const int64_t N = *nc;
    int64_t lo = starts[i], hi = ends[i];
    if (st > 0) {
      lo = lo < 0 ? std::max<int64_t>(0, lo + N) : std::min(lo, N);
      hi = hi < 0 ? std::max<int64_t>(0, hi + N) : std::min(hi, N);
      if (hi < lo) hi = lo;
      b[a] = D(lo);
      e[a] = D(hi);
      s[a] = st;
    } else {
      lo = lo < 0 ? std::max<int64_t>(-1, lo + N) : std::min(lo, N - 1);
      hi = hi < 0 ? std::max<int64_t>(-1, hi + N) : std::min(hi, N - 1);
      const int64_t count = lo > hi ? (lo - hi + (-st) - 1) / (-st) : 0;
      // Along the reversed axis, element N-1-lo is the first taken.
      const int64_t first = N - 1 - lo;
      reversed.push_back(int64_t(a));
      b[a] = D(count ? first : 0);
      e[a] = D(count ? first + (count - 1) * (-st) + 1 : 0);
      s[a] = -st;
    }
  }
  if (!reversed.empty()) x = I.op(OpKind::Reverse, {x}, {{"axes", reversed}});
  return one(I.op(OpKind::Slice, {x}, {{"start", b}, {"stop", e}, {"step", s}}));
}

std::vector<Val> ruleGather(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t ax = Importer::axis(n.i("axis", 0), x->type.rank());
  if (!n.has(1)) throw BadModel("Gather needs indices");
  V idx = normalizeIndex(I, n.in[1], x->type.dims[ax]);
  return one(I.op(OpKind::Take, {x, idx}, {{"axis", int64_t(ax)}}));
}

std::vector<Val> ruleGatherElements(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t ax = Importer::axis(n.i("axis", 0), x->type.rank());
  if (!n.has(1)) throw BadModel("GatherElements needs indices");
  V idx = normalizeIndex(I, n.in[1], x->type.dims[ax]);
  return one(I.op(OpKind::Gather, {x, idx}, {{"axis", int64_t(ax)}}));
}

std::vector<Val> ruleGatherND(Importer &I, Node &n) {
  // data [d0, ..., d(r-1)], indices [..., m]: out[...] = data[idx[..., 0], ..., idx[..., m-1], :].
  // As take along the first m axes flattened, at the linear index sum_k idx_k * stride_k.
  if (n.i("batch_dims", 0) != 0) throw Unsupported("GatherND with batch_dims is not supported");
  V x = in(I, n, 0), idx = in(I, n, 1);
  std::vector<int64_t> ds = Importer::staticShape(x, "GatherND data");
  const auto &id = Importer::dims(idx);
  auto m = id.empty() ? std::nullopt : id.back().constantValue();
  if (!m || *m < 1 || *m > int64_t(ds.size())) throw BadModel("GatherND's index depth does not fit the data");
  std::vector<int64_t> strides(size_t(*m), 1);
  for (int64_t k = *m - 1; k > 0; --k) strides[size_t(k - 1)] = strides[size_t(k)] * ds[size_t(k)];
  rt::Tensor st = rt::Tensor::fromI64({*m}, Importer::dtype(idx), strides);
  rt::Tensor sz = rt::Tensor::fromI64({*m}, Importer::dtype(idx), std::vector<int64_t>(ds.begin(), ds.begin() + *m));
  V size = I.tensor(sz), zero = I.scalar(0, Importer::dtype(idx));
  V norm = I.op(OpKind::Where, {I.op(OpKind::Lt, {idx, zero}), I.op(OpKind::Add, {idx, size}), idx});
  V lin = I.reduce(OpKind::ReduceSum, I.op(OpKind::Mul, {norm, I.tensor(st)}), {int64_t(id.size()) - 1}, false);
  int64_t p = 1;
  for (int64_t k = 0; k < *m; ++k) p *= ds[size_t(k)];
  std::vector<Dim> flat{D(p)};
  for (size_t k = size_t(*m); k < ds.size(); ++k) flat.push_back(D(ds[k]));
  return one(I.op(OpKind::Take, {I.reshape(x, flat), lin}, {{"axis", int64_t(0)}}));
}

std::vector<Val> ruleExpand(Importer &I, Node &n) {
  V x = in(I, n, 0);
  std::vector<int64_t> shape = I.knownInts(n.in.at(1), "shape");
  const auto &d = Importer::dims(x);
  const size_t r = std::max(d.size(), shape.size());
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim *a = i < r - d.size() ? nullptr : &d[i - (r - d.size())];
    const int64_t *s = i < r - shape.size() ? nullptr : &shape[i - (r - shape.size())];
    if (!s) out[i] = *a;
    else if (!a || !(*s == 1)) out[i] = D(*s);
    else out[i] = *a;
  }
  return one(I.broadcastTo(x, out));
}

std::vector<Val> ruleTile(Importer &I, Node &n) {
  // [d0, d1, ...] -> [1, d0, 1, d1, ...] -> broadcast [r0, d0, r1, d1, ...] -> [r0*d0, r1*d1, ...]
  V x = in(I, n, 0);
  std::vector<int64_t> reps = I.knownInts(n.in.at(1), "repeats");
  const auto &d = Importer::dims(x);
  if (reps.size() != d.size()) throw BadModel("Tile's repeats differ in length from the input's rank");
  std::vector<Dim> mid, wide, out;
  for (size_t i = 0; i < d.size(); ++i) {
    mid.push_back(D(1));
    mid.push_back(d[i]);
    wide.push_back(D(reps[i]));
    wide.push_back(d[i]);
    out.push_back(D(reps[i]) * d[i]);
  }
  return one(I.reshape(I.broadcastTo(I.reshape(x, mid), wide), out));
}

std::vector<Val> ruleRange(Importer &I, Node &n) {
  const rt::Tensor &start = I.known(n.in.at(0), "start");
  double s = start.toF64(0), l = I.known(n.in.at(1), "limit").toF64(0), dl = I.known(n.in.at(2), "delta").toF64(0);
  if (dl == 0) throw BadModel("Range's delta is 0");
  const int64_t count = std::max<int64_t>(0, int64_t(std::ceil((l - s) / dl)));
  rt::Tensor out = rt::Tensor::empty({count}, start.dtype());
  for (int64_t i = 0; i < count; ++i) {
    if (isFloat(start.dtype())) out.fromF64(i, s + double(i) * dl);
    else out.fromI64(i, start.toI64(0) + i * I.known(n.in[2], "delta").toI64(0));
  }
  return {Importer::ofKnown(std::move(out))};
}

std::vector<Val> ruleEyeLike(Importer &I, Node &n) {
  V x = in(I, n, 0);
  if (x->type.rank() != 2) throw BadModel("EyeLike takes a 2-d input");
  DType dt = n.attr("dtype") ? dtypeOfElem(int32_t(n.i("dtype", 1))) : Importer::dtype(x);
  const auto &d = Importer::dims(x);
  V diff = I.op(OpKind::Sub, {I.iota(d, 1, DType::I64), I.iota(d, 0, DType::I64)});
  return one(I.cast(I.op(OpKind::Eq, {diff, I.scalar(double(n.i("k", 0)), DType::I64)}), dt));
}

std::vector<Val> ruleTrilu(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t r = x->type.rank();
  if (r < 2) throw BadModel("Trilu takes a tensor of rank 2 or more");
  const int64_t k = n.has(1) ? I.knownInts(n.in[1], "k").at(0) : 0;
  std::vector<Dim> d{x->type.dims[r - 2], x->type.dims[r - 1]};
  V diff = I.op(OpKind::Sub, {I.iota(d, 1, DType::I64), I.iota(d, 0, DType::I64)}); // j - i
  V kk = I.scalar(double(k), DType::I64);
  V keep = n.i("upper", 1) ? I.op(OpKind::Ge, {diff, kk}) : I.op(OpKind::Le, {diff, kk});
  return one(I.op(OpKind::Where, {keep, x, I.scalar(0, Importer::dtype(x))}));
}

std::vector<Val> ruleOneHot(Importer &I, Node &n) {
  V idx = in(I, n, 0);
  const int64_t depth = int64_t(I.knownFloats(n.in.at(1), "depth").at(0));
  V values = in(I, n, 2);
  const auto &d = Importer::dims(idx);
  const size_t r = d.size() + 1;
  const size_t ax = Importer::axis(n.i("axis", -1), r);
  std::vector<Dim> out;
  for (size_t i = 0, j = 0; i < r; ++i) out.push_back(i == ax ? D(depth) : d[j++]);
  std::vector<Dim> unsq = out;
  unsq[ax] = D(1);
  V id = I.cast(idx, DType::I64);
  id = I.op(OpKind::Where, {I.op(OpKind::Lt, {id, I.scalar(0, DType::I64)}), I.op(OpKind::Add, {id, I.scalar(double(depth), DType::I64)}), id});
  V hot = I.op(OpKind::Eq, {I.reshape(id, unsq), I.iota(out, int64_t(ax), DType::I64)});
  V off = I.reshape(I.sliceAxis(values, 0, D(0), D(1)), {}), on = I.reshape(I.sliceAxis(values, 0, D(1), D(2)), {});
  return one(I.op(OpKind::Where, {hot, on, off}));
}

std::vector<Val> rulePad(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t r = x->type.rank();
  std::vector<int64_t> pads;
  double value = 0;
  if (n.opset < 11) {
    pads = n.ints("pads").value_or(std::vector<int64_t>{});
    value = n.f("value", 0);
  } else {
    pads = I.knownInts(n.in.at(1), "pads");
    if (n.has(2)) value = I.knownFloats(n.in[2], "constant_value").at(0);
  }
  if (pads.size() != 2 * r) throw BadModel("Pad's pads must hold two values per axis");
  const std::string mode = n.s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") throw Unsupported("Pad's mode `" + mode + "` is not supported");
  for (size_t a = 0; a < r; ++a) {
    int64_t lo = pads[a], hi = pads[a + r];
    Dim N = x->type.dims[a];
    // Negative pads crop.
    if (lo < 0 || hi < 0) {
      x = I.sliceAxis(x, a, D(lo < 0 ? -lo : 0), hi < 0 ? N + D(hi) : N);
      N = x->type.dims[a];
      lo = std::max<int64_t>(lo, 0);
      hi = std::max<int64_t>(hi, 0);
    }
    if (!lo && !hi) continue;
    auto side = [&](int64_t p, bool before) -> V {
      std::vector<Dim> d = x->type.dims;
      d[a] = D(p);
      if (mode == "constant") return I.full(d, value, Importer::dtype(x));
      if (mode == "edge") {
        V e = before ? I.sliceAxis(x, a, D(0), D(1)) : I.sliceAxis(x, a, N - D(1), N);
        return I.broadcastTo(e, d);
      }
      // reflect: x[p], ..., x[1] before; x[N-2], ..., x[N-1-p] after.
      auto nc = N.constantValue();
      if (!nc || p >= *nc) throw Unsupported("Pad reflect by as much as the axis's size or along a symbolic axis");
      V s = before ? I.sliceAxis(x, a, D(1), D(p + 1)) : I.sliceAxis(x, a, D(*nc - 1 - p), D(*nc - 1));
      return I.op(OpKind::Reverse, {s}, {{"axes", std::vector<int64_t>{int64_t(a)}}});
    };
    std::vector<V> parts;
    if (lo) parts.push_back(side(lo, true));
    parts.push_back(x);
    if (hi) parts.push_back(side(hi, false));
    x = I.concat(parts, int64_t(a));
  }
  return one(x);
}

std::vector<Val> ruleDepthToSpace(Importer &I, Node &n) {
  V x = in(I, n, 0);
  if (x->type.rank() != 4) throw BadModel("DepthToSpace takes a 4-d input");
  const int64_t b = n.i("blocksize", 0);
  if (b <= 0) throw BadModel("DepthToSpace needs a positive blocksize");
  const auto &d = Importer::dims(x);
  auto c = d[1].divide(D(b * b));
  if (!c) throw BadModel("bad blocksize");
  std::vector<Dim> mid;
  std::vector<int64_t> perm;
  if (n.s("mode", "DCR") == "DCR") {
    mid = {d[0], D(b), D(b), *c, d[2], d[3]};
    perm = {0, 3, 4, 1, 5, 2};
  } else {
    mid = {d[0], *c, D(b), D(b), d[2], d[3]};
    perm = {0, 1, 4, 2, 5, 3};
  }
  return one(I.reshape(I.transpose(I.reshape(x, mid), perm), {d[0], *c, d[2] * D(b), d[3] * D(b)}));
}

std::vector<Val> ruleSpaceToDepth(Importer &I, Node &n) {
  V x = in(I, n, 0);
  if (x->type.rank() != 4) throw BadModel("SpaceToDepth takes a 4-d input");
  const int64_t b = n.i("blocksize", 0);
  if (b <= 0) throw BadModel("SpaceToDepth needs a positive blocksize");
  const auto &d = Importer::dims(x);
  auto h = d[2].divide(D(b)), w = d[3].divide(D(b));
  V m = I.reshape(x, {d[0], d[1], *h, D(b), *w, D(b)});
  return one(I.reshape(I.transpose(m, {0, 3, 5, 1, 2, 4}), {d[0], d[1] * D(b * b), *h, *w}));
}

std::vector<Val> ruleCumSum(Importer &I, Node &n) {
  // Along the axis moved last: x @ M with M[i, j] = 1 where element i adds into j (i <= j, or
  // i < j exclusive; reversed: i >= j, i > j).
  V x = in(I, n, 0);
  const size_t r = x->type.rank();
  const size_t ax = Importer::axis(I.knownInts(n.in.at(1), "axis").at(0), r);
  auto len = x->type.dims[ax].constantValue();
  if (!len) throw Unsupported("CumSum along a symbolic axis");
  std::vector<int64_t> perm;
  for (size_t i = 0; i < r; ++i)
    if (i != ax) perm.push_back(int64_t(i));
  perm.push_back(int64_t(ax));
  std::vector<int64_t> inv(r);
  for (size_t i = 0; i < r; ++i) inv[size_t(perm[i])] = int64_t(i);
  std::vector<Dim> sq{D(*len), D(*len)};
  V i = I.iota(sq, 0, DType::I64), j = I.iota(sq, 1, DType::I64);
  const bool ex = n.i("exclusive", 0), rev = n.i("reverse", 0);
  OpKind cmp = rev ? (ex ? OpKind::Gt : OpKind::Ge) : (ex ? OpKind::Lt : OpKind::Le);
  V mask = I.cast(I.op(cmp, {i, j}), Importer::dtype(x));
  return one(I.transpose(I.op(OpKind::MatMul, {I.transpose(x, perm), mask}), inv));
}

} // namespace tsr::onnxio
