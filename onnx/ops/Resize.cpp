// ONNX's Resize, modes `nearest` and `linear`, as Graph IR: both are separable, so each resized
// axis is one `take` (nearest) or two `take`s blended by per-position weights (linear) along
// that axis, with the source indices and weights computed at import time from the static sizes
// and the known `scales` or `sizes`. Coordinate transformations: half_pixel (the default),
// pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn; nearest modes:
// round_prefer_floor (the default), round_prefer_ceil, floor, ceil. Linear reads the edge value
// beyond the input (ONNX's reference pads by the edge). Not supported: `cubic`,
// tf_crop_and_resize (the `roi` input), opset 10's Resize (Upsample's semantics).
// Semantics: ONNX 1.12's onnx/defs/tensor/defs.cc and its backend test generator (resize.py).
#include "onnx/Importer.h"

#include <algorithm>
#include <cmath>

namespace tsr::onnxio {

namespace {

// The input coordinate of output position `x` along an axis of `in` positions resized by
// `scale`. As ONNX's reference, the resized length in the formulas is in * scale, a fraction when
// `scales` gave a scale that the whole output length (its floor) does not match.
double sourceCoordinate(const std::string &mode, double x, double scale, int64_t in) {
  const double out = double(in) * scale;
  if (mode == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel") return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners") return out == 1 ? 0.0 : x * double(in - 1) / (out - 1);
  if (mode == "asymmetric") return x / scale;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  throw Unsupported("Resize's coordinate_transformation_mode `" + mode + "` is not supported");
}

int64_t nearestIndex(const std::string &mode, double x) {
  const double f = std::floor(x);
  if (mode == "floor") return int64_t(f);
  if (mode == "ceil") return int64_t(std::ceil(x));
  if (mode != "round_prefer_floor" && mode != "round_prefer_ceil") throw Unsupported("Resize's nearest_mode `" + mode + "` is not supported");
  if (x - f == 0.5) return int64_t(mode == "round_prefer_floor" ? f : f + 1);
  return int64_t(std::round(x));
}

V indexTensor(Importer &I, const std::vector<int64_t> &idx) {
  return I.tensor(rt::Tensor::fromI64({int64_t(idx.size())}, DType::I64, idx));
}

} // namespace

std::vector<Val> ruleResize(Importer &I, Node &n) {
  if (n.opset < 11) throw Unsupported("Resize of opset 10 (Upsample's semantics) is not supported");
  V x = in(I, n, 0);
  const std::string mode = n.s("mode", "nearest");
  if (mode != "nearest" && mode != "linear") throw Unsupported("Resize's mode `" + mode + "` is not supported");
  const std::string ctm = n.s("coordinate_transformation_mode", "half_pixel");
  if (ctm == "tf_crop_and_resize") throw Unsupported("Resize's tf_crop_and_resize is not supported");
  const std::string nearest = n.s("nearest_mode", "round_prefer_floor");
  const std::vector<int64_t> shape = Importer::staticShape(x, "Resize's input");
  const size_t r = shape.size();
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (n.has(3)) {
    sizes = I.knownInts(n.in[3], "sizes");
    if (sizes.size() != r) throw BadModel("Resize's sizes do not have one entry per axis");
    for (size_t a = 0; a < r; ++a) scales.push_back(shape[a] ? double(sizes[a]) / double(shape[a]) : 1.0);
  } else if (n.has(2)) {
    scales = I.knownFloats(n.in[2], "scales");
    if (scales.size() != r) throw BadModel("Resize's scales do not have one entry per axis");
    for (size_t a = 0; a < r; ++a) {
      if (!(scales[a] > 0)) throw BadModel("Resize's scales are not positive");
      sizes.push_back(int64_t(std::floor(double(shape[a]) * scales[a])));
    }
  } else {
    throw BadModel("Resize needs scales or sizes");
  }
  if (mode == "linear" && !isFloat(x->type.dtype)) throw Unsupported("linear Resize of a tensor that is not floating-point");
  for (size_t a = 0; a < r; ++a) {
    const int64_t inN = shape[a], outN = sizes[a];
    if (inN == outN && scales[a] == 1.0) continue; // every transformation is the identity then
    if (inN == 0 || outN <= 0) throw BadModel("Resize to or from an empty axis");
    std::vector<int64_t> i0(static_cast<size_t>(outN)), i1(static_cast<size_t>(outN));
    std::vector<double> w(static_cast<size_t>(outN));
    for (int64_t o = 0; o < outN; ++o) {
      const double c = sourceCoordinate(ctm, double(o), scales[a], inN);
      if (mode == "nearest") {
        i0[size_t(o)] = std::clamp<int64_t>(nearestIndex(nearest, c), 0, inN - 1);
      } else {
        const double f = std::floor(c);
        w[size_t(o)] = c - f;
        i0[size_t(o)] = std::clamp<int64_t>(int64_t(f), 0, inN - 1);
        i1[size_t(o)] = std::clamp<int64_t>(int64_t(f) + 1, 0, inN - 1);
      }
    }
    const ir::Attr axis{"axis", int64_t(a)};
    V lo = I.op(ir::OpKind::Take, {x, indexTensor(I, i0)}, {axis});
    if (mode == "nearest") {
      x = lo;
      continue;
    }
    V hi = I.op(ir::OpKind::Take, {x, indexTensor(I, i1)}, {axis});
    // lo + (hi - lo) * w, the weights along axis `a` broadcast over the others.
    std::vector<Dim> wshape(r, D(1));
    wshape[a] = D(outN);
    V wt = I.reshape(I.tensor(rt::Tensor::fromF64({outN}, x->type.dtype, w)), wshape);
    x = I.op(ir::OpKind::Add, {lo, I.op(ir::OpKind::Mul, {I.op(ir::OpKind::Sub, {hi, lo}), wt})});
  }
  return one(x);
}

} // namespace tsr::onnxio
