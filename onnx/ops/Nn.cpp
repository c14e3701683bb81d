// ONNX's convolution, pooling and normalization operators as Graph IR. Layout NCHW (N, C, then
// 1 to 3 spatial axes), weights [M, C/group, k...], as ONNX and PyTorch.
//
// Conv, ConvTranspose, MaxPool (and its Indices) and AveragePool are Graph IR's own window ops
// (conv, conv_transpose, max_pool, avg_pool: their gradients and evaluation in ir/), the geometry
// (auto_pad, output_shape, output_padding) resolved here into explicit pads. LpPool still goes
// through windows (im2col): the input padded, its spatial axes flattened, and `take` gathering
// every window at indices computed at import time ([N, C, windows, kernel elements]), then a
// reduction over the last axis. Global pools are reductions over the spatial axes.
// Semantics: ONNX 1.12's operator definitions (onnx/defs/nn/defs.cc).
#include "onnx/Importer.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tsr::onnxio {

using ir::OpKind;

namespace {


/// The geometry of a sliding window over the spatial axes.
struct Window {
  std::vector<int64_t> size, kernel, stride, dilation, padBegin, padEnd, out;
  int64_t outCount() const {
    int64_t p = 1;
    for (int64_t o : out) p *= o;
    return p;
  }
  int64_t kernelCount() const {
    int64_t p = 1;
    for (int64_t k : kernel) p *= k;
    return p;
  }
};

/// Reads kernel_shape (or `kernel`), strides, dilations, pads and auto_pad; with ceil_mode the
/// last partial window counts (padding the end further).
Window window(Node &n, const std::vector<int64_t> &spatial, std::vector<int64_t> kernel, bool ceilMode) {
  const size_t s = spatial.size();
  Window w;
  w.size = spatial;
  w.kernel = std::move(kernel);
  if (w.kernel.size() != s) throw BadModel("the kernel's rank does not match the input's spatial rank");
  w.stride = n.ints("strides").value_or(std::vector<int64_t>(s, 1));
  w.dilation = n.ints("dilations").value_or(std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = n.ints("pads").value_or(std::vector<int64_t>(2 * s, 0));
  if (w.stride.size() != s || w.dilation.size() != s || pads.size() != 2 * s) throw BadModel("strides, dilations or pads do not match the spatial rank");
  for (size_t i = 0; i < s; ++i)
    if (w.stride[i] <= 0 || w.dilation[i] <= 0 || w.kernel[i] <= 0 || pads[i] < 0 || pads[i + s] < 0)
      throw BadModel("strides, dilations and kernel sizes must be positive and pads not negative");
  w.padBegin.assign(pads.begin(), pads.begin() + long(s));
  w.padEnd.assign(pads.begin() + long(s), pads.end());
  const std::string autoPad = n.s("auto_pad", "NOTSET");
  for (size_t i = 0; i < s; ++i) {
    const int64_t span = w.dilation[i] * (w.kernel[i] - 1) + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      const int64_t out = (w.size[i] + w.stride[i] - 1) / w.stride[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.stride[i] + span - w.size[i]);
      w.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.padEnd[i] = total - w.padBegin[i];
    } else if (autoPad == "VALID") {
      w.padBegin[i] = w.padEnd[i] = 0;
    } else if (autoPad != "NOTSET") {
      throw Unsupported("auto_pad `" + autoPad + "` is not supported");
    }
    const int64_t padded = w.size[i] + w.padBegin[i] + w.padEnd[i];
    if (padded < span) throw BadModel("the kernel is larger than the padded input");
    int64_t out = (padded - span) / w.stride[i] + 1;
    if (ceilMode) {
      out = (padded - span + w.stride[i] - 1) / w.stride[i] + 1;
      if ((out - 1) * w.stride[i] >= w.size[i] + w.padBegin[i]) --out; // a window must start inside
      w.padEnd[i] += std::max<int64_t>(0, (out - 1) * w.stride[i] + span - padded);
    }
    w.out.push_back(out);
  }
  return w;
}

/// x [N, C, spatial...] -> its windows [N, C, windows, kernel elements], padded with `padValue`.
V windows(Importer &I, V x, const Window &w, double padValue) {
  const size_t s = w.size.size();
  for (size_t i = 0; i < s; ++i) {
    const size_t a = 2 + i;
    std::vector<V> parts;
    std::vector<Dim> d = x->type.dims;
    if (w.padBegin[i]) {
      d[a] = D(w.padBegin[i]);
      parts.push_back(I.full(d, padValue, Importer::dtype(x)));
    }
    parts.push_back(x);
    if (w.padEnd[i]) {
      d[a] = D(w.padEnd[i]);
      parts.push_back(I.full(d, padValue, Importer::dtype(x)));
    }
    x = I.concat(parts, int64_t(a));
  }
  std::vector<int64_t> padded(s), stride(s, 1);
  int64_t total = 1;
  for (size_t i = 0; i < s; ++i) {
    padded[i] = w.size[i] + w.padBegin[i] + w.padEnd[i];
    total *= padded[i];
  }
  for (size_t i = s; i-- > 1;) stride[i - 1] = stride[i] * padded[i];
  const auto &d = Importer::dims(x);
  V flat = I.reshape(x, {d[0], d[1], D(total)});
  const int64_t O = w.outCount(), K = w.kernelCount();
  std::vector<int64_t> idx(size_t(O * K));
  std::vector<int64_t> o(s, 0);
  for (int64_t oi = 0; oi < O; ++oi) {
    std::vector<int64_t> k(s, 0);
    for (int64_t ki = 0; ki < K; ++ki) {
      int64_t lin = 0;
      for (size_t i = 0; i < s; ++i) lin += (o[i] * w.stride[i] + k[i] * w.dilation[i]) * stride[i];
      idx[size_t(oi * K + ki)] = lin;
      for (size_t i = s; i-- > 0;) {
        if (++k[i] < w.kernel[i]) break;
        k[i] = 0;
      }
    }
    for (size_t i = s; i-- > 0;) {
      if (++o[i] < w.out[i]) break;
      o[i] = 0;
    }
  }
  V index = I.tensor(rt::Tensor::fromI64({O, K}, DType::I64, idx), "window_index");
  return I.op(OpKind::Take, {flat, index}, {{"axis", int64_t(2)}});
}

std::vector<int64_t> spatialOf(V x, const char *what) {
  std::vector<int64_t> s = Importer::staticShape(x, what);
  if (s.size() < 3) throw BadModel(std::string(what) + " needs an input of rank 3 or more (N, C, spatial...)");
  return std::vector<int64_t>(s.begin() + 2, s.end());
}

std::vector<Dim> outShape(V x, const Window &w, Dim channels) {
  std::vector<Dim> d{x->type.dims[0], channels};
  for (int64_t o : w.out) d.push_back(D(o));
  return d;
}

V addBias(Importer &I, V y, V b) {
  std::vector<Dim> d(y->type.rank(), D(1));
  d[1] = y->type.dims[1];
  return I.op(OpKind::Add, {y, I.reshape(b, d)});
}

std::vector<int64_t> kernelOf(Node &n, V w) {
  if (auto k = n.ints("kernel_shape")) return *k;
  std::vector<int64_t> s = Importer::staticShape(w, "Conv weight");
  return std::vector<int64_t>(s.begin() + 2, s.end());
}

/// The attributes of Graph IR's window ops (conv, pools) for a geometry: strides, dilations,
/// pads (begins then ends), and for convolutions (groups > 0) the groups.
std::vector<ir::Attr> windowAttrs(const Window &w, int64_t groups) {
  std::vector<int64_t> pads = w.padBegin;
  pads.insert(pads.end(), w.padEnd.begin(), w.padEnd.end());
  std::vector<ir::Attr> a{{"strides", w.stride}, {"pads", pads}, {"dilations", w.dilation}};
  if (groups > 0) a.push_back({"groups", groups});
  return a;
}

/// Broadcasts a per-channel vector [C] against [N, C, ...].
V perChannel(Importer &I, V p, size_t rank) {
  if (rank < 2 || p->type.rank() != 1) throw BadModel("per-channel parameters need a 1-d parameter and an input of rank 2 or more (N, C, ...)");
  std::vector<Dim> d(rank, D(1));
  d[1] = p->type.dims.at(0);
  return I.reshape(p, d);
}

} // namespace

std::vector<Val> ruleConv(Importer &I, Node &n) {
  V x = in(I, n, 0), wt = in(I, n, 1);
  Window w = window(n, spatialOf(x, "Conv"), kernelOf(n, wt), false);
  V y = I.op(OpKind::Conv, {x, wt}, windowAttrs(w, n.i("group", 1)));
  if (n.has(2)) y = addBias(I, y, I.v(n.in[2]));
  return one(y);
}

std::vector<Val> ruleConvTranspose(Importer &I, Node &n) {
  // Graph IR's conv_transpose: output_padding is a smaller end padding (it may go negative,
  // which the op reads as an extension); output_shape and auto_pad SAME_* choose the pads.
  V x = in(I, n, 0), wt = in(I, n, 1);
  std::vector<int64_t> S = spatialOf(x, "ConvTranspose");
  const size_t s = S.size();
  std::vector<int64_t> ws = Importer::staticShape(wt, "ConvTranspose weight");
  std::vector<int64_t> K = n.ints("kernel_shape").value_or(std::vector<int64_t>(ws.begin() + 2, ws.end()));
  const int64_t g = n.i("group", 1);
  std::vector<int64_t> stride = n.ints("strides").value_or(std::vector<int64_t>(s, 1));
  std::vector<int64_t> dil = n.ints("dilations").value_or(std::vector<int64_t>(s, 1));
  std::vector<int64_t> outPad = n.ints("output_padding").value_or(std::vector<int64_t>(s, 0));
  std::vector<int64_t> pads = n.ints("pads").value_or(std::vector<int64_t>(2 * s, 0));
  if (K.size() != s || stride.size() != s || dil.size() != s || outPad.size() != s || pads.size() != 2 * s)
    throw BadModel("ConvTranspose's attributes do not match the spatial rank");
  if (std::vector<int64_t>(ws.begin() + 2, ws.end()) != K) throw BadModel("ConvTranspose's kernel_shape differs from its weight's");
  const std::string autoPad = n.s("auto_pad", "NOTSET");
  auto outputShape = n.ints("output_shape");
  for (size_t i = 0; i < s; ++i) {
    const int64_t full = stride[i] * (S[i] - 1) + outPad[i] + ((K[i] - 1) * dil[i] + 1);
    int64_t want = -1;
    if (outputShape) want = outputShape->at(outputShape->size() - s + i);
    else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") want = S[i] * stride[i];
    if (want >= 0) {
      const int64_t total = full - want;
      // The larger half of the cropping at the end, except for SAME_LOWER (as ONNX Runtime; a
      // negative total, an output larger than the full one, extends the end).
      const int64_t first = autoPad == "SAME_LOWER" ? total - total / 2 : total / 2;
      pads[i] = first;
      pads[i + s] = total - first;
    } else if (autoPad == "VALID") {
      pads[i] = pads[i + s] = 0;
    } else if (autoPad != "NOTSET") {
      throw Unsupported("auto_pad `" + autoPad + "` is not supported");
    }
  }
  for (size_t i = 0; i < s; ++i) pads[i + s] -= outPad[i];
  const int64_t C = ws[0];
  if (g < 1 || C % g) throw BadModel("the channels do not divide into the groups");
  V y = I.op(OpKind::ConvTranspose, {x, wt}, {{"strides", stride}, {"pads", pads}, {"dilations", dil}, {"groups", g}});
  if (n.has(2)) y = addBias(I, y, I.v(n.in[2]));
  return one(y);
}

std::vector<Val> ruleMaxPool(Importer &I, Node &n) {
  V x = in(I, n, 0);
  auto k = n.ints("kernel_shape");
  if (!k) throw BadModel("MaxPool needs kernel_shape");
  const bool ceil = n.i("ceil_mode", 0);
  Window w = window(n, spatialOf(x, "MaxPool"), *k, false);
  std::vector<ir::Attr> attrs = windowAttrs(w, 0);
  attrs.push_back({"kernel", w.kernel});
  attrs.push_back({"ceil_mode", ceil});
  std::vector<Val> out = one(I.op(OpKind::MaxPool, {x}, attrs));
  if (n.numOutputs > 1) {
    // Indices: each maximum's position in x flattened, max_pool reading a tensor of those
    // positions at x's maxima. storage_order 0: row-major over [N, C, spatial...]; 1: the
    // spatial axes column-major ((n * C + c) * H * W + w * H + h), as ONNX's MaxPool states.
    const auto &d = Importer::dims(x);
    V pos = nullptr;
    if (n.i("storage_order", 0) == 0) {
      Dim total = D(1);
      for (const Dim &e : d) total = total * e;
      pos = I.reshape(I.op(OpKind::Iota, {}, {{"shape", std::vector<Dim>{total}}, {"axis", int64_t(0)}, {"dtype", ir::DTypeAttr{DType::I64, {}}}}), d);
    } else {
      auto C = d[1].constantValue();
      if (!C) throw Unsupported("MaxPool's Indices with storage_order 1 over a symbolic channel count");
      std::vector<int64_t> S = spatialOf(x, "MaxPool");
      int64_t plane = 1;
      for (int64_t e : S) plane *= e;
      std::vector<int64_t> mult(d.size());
      mult[0] = *C * plane;
      mult[1] = plane;
      for (size_t i = 0, m = 1; i < S.size(); m *= S[i], ++i) mult[2 + i] = m;
      for (size_t a = 0; a < d.size(); ++a) {
        V ia = I.op(OpKind::Iota, {}, {{"shape", d}, {"axis", int64_t(a)}, {"dtype", ir::DTypeAttr{DType::I64, {}}}});
        V term = I.op(OpKind::Mul, {ia, I.scalar(double(mult[a]), DType::I64)});
        pos = pos ? I.op(OpKind::Add, {pos, term}) : term;
      }
    }
    out.push_back(Val{I.op(OpKind::MaxPool, {x, pos}, attrs)});
  }
  return out;
}

std::vector<Val> ruleAveragePool(Importer &I, Node &n) {
  V x = in(I, n, 0);
  auto k = n.ints("kernel_shape");
  if (!k) throw BadModel("AveragePool needs kernel_shape");
  Window w = window(n, spatialOf(x, "AveragePool"), *k, false);
  std::vector<ir::Attr> attrs = windowAttrs(w, 0);
  attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [](const ir::Attr &a) { return a.name == "dilations"; }), attrs.end());
  attrs.push_back({"kernel", w.kernel});
  attrs.push_back({"ceil_mode", bool(n.i("ceil_mode", 0))});
  attrs.push_back({"count_include_pad", bool(n.i("count_include_pad", 0))});
  return one(I.op(OpKind::AvgPool, {x}, attrs));
}

std::vector<Val> ruleLpPool(Importer &I, Node &n) {
  V x = in(I, n, 0);
  auto k = n.ints("kernel_shape");
  if (!k) throw BadModel("LpPool needs kernel_shape");
  Window w = window(n, spatialOf(x, "LpPool"), *k, false);
  const double p = double(n.i("p", 2));
  V a = I.op(OpKind::Pow, {I.op(OpKind::Abs, {windows(I, x, w, 0.0)}), c(I, x, p)});
  V y = I.op(OpKind::Pow, {I.reduce(OpKind::ReduceSum, a, {3}, false), c(I, x, 1.0 / p)});
  return one(I.reshape(y, outShape(x, w, x->type.dims[1])));
}

std::vector<Val> ruleGlobalAveragePool(Importer &I, Node &n) {
  V x = in(I, n, 0);
  std::vector<int64_t> axes;
  Dim cnt = D(1);
  for (size_t i = 2; i < x->type.rank(); ++i) {
    axes.push_back(int64_t(i));
    cnt = cnt * x->type.dims[i];
  }
  auto cc = cnt.constantValue();
  if (!cc) throw Unsupported("GlobalAveragePool over symbolic spatial sizes");
  return one(I.op(OpKind::Div, {I.reduce(OpKind::ReduceSum, x, axes, true), c(I, x, double(*cc))}));
}

std::vector<Val> ruleGlobalMaxPool(Importer &I, Node &n) {
  V x = in(I, n, 0);
  std::vector<int64_t> axes;
  for (size_t i = 2; i < x->type.rank(); ++i) axes.push_back(int64_t(i));
  return one(I.reduce(OpKind::ReduceMax, x, axes, true));
}

namespace {
/// mean and biased variance of x over `axes` (kept), in x's dtype.
std::pair<V, V> moments(Importer &I, V x, const std::vector<int64_t> &axes) {
  Dim cnt = D(1);
  for (int64_t a : axes) cnt = cnt * x->type.dims[size_t(a)];
  auto cc = cnt.constantValue();
  if (!cc) throw Unsupported("normalization over symbolic sizes");
  V k = c(I, x, double(*cc));
  V mean = I.op(OpKind::Div, {I.reduce(OpKind::ReduceSum, x, axes, true), k});
  V d = I.op(OpKind::Sub, {x, mean});
  V var = I.op(OpKind::Div, {I.reduce(OpKind::ReduceSum, I.op(OpKind::Mul, {d, d}), axes, true), k});
  return {mean, var};
}
} // namespace

std::vector<Val> ruleBatchNormalization(Importer &I, Node &n) {
  // Inference: (x - mean) / sqrt(var + eps) * scale + B with the running statistics, per channel.
  // Training mode (opset 14+): the batch's statistics, and the updated running ones.
  V x = in(I, n, 0), scale = in(I, n, 1), b = in(I, n, 2), mean = in(I, n, 3), var = in(I, n, 4);
  const size_t r = x->type.rank();
  const double eps = n.f("epsilon", 1e-5);
  const bool training = n.opset >= 14 ? n.i("training_mode", 0) != 0 : n.numOutputs > 1;
  V m = perChannel(I, mean, r), v = perChannel(I, var, r);
  std::vector<Val> extra;
  if (training) {
    std::vector<int64_t> axes{0};
    for (size_t i = 2; i < r; ++i) axes.push_back(int64_t(i));
    auto [bm, bv] = moments(I, x, axes);
    m = bm;
    v = bv;
    const double momentum = n.f("momentum", 0.9);
    std::vector<Dim> cdim{x->type.dims[1]};
    V bm1 = I.reshape(bm, cdim), bv1 = I.reshape(bv, cdim);
    V rm = I.op(OpKind::Add, {I.op(OpKind::Mul, {mean, c(I, mean, momentum)}), I.op(OpKind::Mul, {bm1, c(I, mean, 1 - momentum)})});
    V rv = I.op(OpKind::Add, {I.op(OpKind::Mul, {var, c(I, var, momentum)}), I.op(OpKind::Mul, {bv1, c(I, var, 1 - momentum)})});
    extra = {Importer::of(rm), Importer::of(rv)};
  }
  V y = I.op(OpKind::Div, {I.op(OpKind::Sub, {x, m}), I.op(OpKind::Sqrt, {I.op(OpKind::Add, {v, c(I, x, eps)})})});
  y = I.op(OpKind::Add, {I.op(OpKind::Mul, {y, perChannel(I, scale, r)}), perChannel(I, b, r)});
  std::vector<Val> out = one(I.cast(y, Importer::dtype(x)));
  for (auto &e : extra) out.push_back(e);
  return out;
}

std::vector<Val> ruleInstanceNormalization(Importer &I, Node &n) {
  V x = in(I, n, 0), scale = in(I, n, 1), b = in(I, n, 2);
  const size_t r = x->type.rank();
  std::vector<int64_t> axes;
  for (size_t i = 2; i < r; ++i) axes.push_back(int64_t(i));
  auto [mean, var] = moments(I, x, axes);
  V y = I.op(OpKind::Div, {I.op(OpKind::Sub, {x, mean}), I.op(OpKind::Sqrt, {I.op(OpKind::Add, {var, c(I, x, n.f("epsilon", 1e-5))})})});
  return one(I.op(OpKind::Add, {I.op(OpKind::Mul, {y, perChannel(I, scale, r)}), perChannel(I, b, r)}));
}

std::vector<Val> ruleLayerNormalization(Importer &I, Node &n) {
  // Normalizes over axes [axis, rank); outputs Y, Mean and InvStdDev (both with the reduced axes
  // kept as size 1).
  V x = in(I, n, 0), scale = in(I, n, 1);
  const size_t r = x->type.rank();
  const size_t ax = Importer::axis(n.i("axis", -1), r);
  std::vector<int64_t> axes;
  for (size_t i = ax; i < r; ++i) axes.push_back(int64_t(i));
  auto [mean, var] = moments(I, x, axes);
  V inv = I.op(OpKind::Rsqrt, {I.op(OpKind::Add, {var, c(I, x, n.f("epsilon", 1e-5))})});
  V y = I.op(OpKind::Mul, {I.op(OpKind::Mul, {I.op(OpKind::Sub, {x, mean}), inv}), scale});
  if (n.has(2)) y = I.op(OpKind::Add, {y, I.v(n.in[2])});
  return {Importer::of(y), Importer::of(mean), Importer::of(inv)};
}

std::vector<Val> ruleMeanVarianceNormalization(Importer &I, Node &n) {
  // (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes` (default [0, 2, 3]), as ONNX's
  // function body.
  V x = in(I, n, 0);
  std::vector<int64_t> axes = n.ints("axes").value_or(std::vector<int64_t>{0, 2, 3});
  for (auto &a : axes) a = int64_t(Importer::axis(a, x->type.rank()));
  auto [mean, var] = moments(I, x, axes);
  V sd = I.op(OpKind::Add, {I.op(OpKind::Sqrt, {var}), c(I, x, 1e-9)});
  return one(I.op(OpKind::Div, {I.op(OpKind::Sub, {x, mean}), sd}));
}

std::vector<Val> ruleLpNormalization(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const int64_t ax = int64_t(Importer::axis(n.i("axis", -1), x->type.rank()));
  const int64_t p = n.i("p", 2);
  V norm;
  if (p == 1) norm = I.reduce(OpKind::ReduceSum, I.op(OpKind::Abs, {x}), {ax}, true);
  else if (p == 2) norm = I.op(OpKind::Sqrt, {I.reduce(OpKind::ReduceSum, I.op(OpKind::Mul, {x, x}), {ax}, true)});
  else throw BadModel("LpNormalization's p must be 1 or 2");
  return one(I.op(OpKind::Div, {x, norm}));
}

} // namespace tsr::onnxio

namespace tsr::onnxio {

namespace {
/// NegativeLogLikelihoodLoss of log-probabilities x [N, C, d...] at targets t [N, d...]:
/// loss = -x[n, t, d...] * weight[t] (0 where t == ignore_index), reduced by `reduction`:
/// none, sum, or mean = sum(loss) / sum(the weights taken).
V nllLoss(Importer &I, Node &n, V x, V t, V weight) {
  const DType dt = Importer::dtype(x);
  std::vector<Dim> td = Importer::dims(t);
  if (x->type.rank() != td.size() + 1) throw BadModel("the target's rank must be the input's minus 1");
  V mask = nullptr;
  if (n.attr("ignore_index")) {
    mask = I.op(OpKind::Ne, {t, I.scalar(double(n.i("ignore_index", 0)), Importer::dtype(t))});
    t = I.op(OpKind::Where, {mask, t, I.scalar(0, Importer::dtype(t))});
  }
  std::vector<Dim> u = td;
  u.insert(u.begin() + 1, D(1));
  V picked = I.reshape(I.op(OpKind::Gather, {x, I.reshape(t, u)}, {{"axis", int64_t(1)}}), td);
  V w = weight ? I.op(OpKind::Take, {weight, t}, {{"axis", int64_t(0)}}) : I.full(td, 1, dt);
  if (mask) w = I.op(OpKind::Where, {mask, w, I.scalar(0, dt)});
  V loss = I.op(OpKind::Neg, {I.op(OpKind::Mul, {picked, w})});
  const std::string reduction = n.s("reduction", "mean");
  std::vector<int64_t> all;
  for (size_t i = 0; i < td.size(); ++i) all.push_back(int64_t(i));
  if (reduction == "none") return loss;
  V sum = I.reduce(OpKind::ReduceSum, loss, all, false);
  if (reduction == "sum") return sum;
  if (reduction != "mean") throw Unsupported("the reduction `" + reduction + "` is not supported");
  return I.op(OpKind::Div, {sum, I.reduce(OpKind::ReduceSum, w, all, false)});
}
} // namespace

std::vector<Val> ruleNegativeLogLikelihoodLoss(Importer &I, Node &n) {
  return one(nllLoss(I, n, in(I, n, 0), in(I, n, 1), n.has(2) ? I.v(n.in[2]) : nullptr));
}

std::vector<Val> ruleSoftmaxCrossEntropyLoss(Importer &I, Node &n) {
  // log_softmax over the class axis (1), then NegativeLogLikelihoodLoss; the second output is the
  // log-probabilities.
  V x = in(I, n, 0);
  V m = I.reduce(OpKind::ReduceMax, x, {1}, true);
  V d = I.op(OpKind::Sub, {x, m});
  V lp = I.op(OpKind::Sub, {d, I.op(OpKind::Log, {I.reduce(OpKind::ReduceSum, I.op(OpKind::Exp, {d}), {1}, true)})});
  V loss = nllLoss(I, n, lp, in(I, n, 1), n.has(2) ? I.v(n.in[2]) : nullptr);
  return {Importer::of(loss), Importer::of(lp)};
}

} // namespace tsr::onnxio
