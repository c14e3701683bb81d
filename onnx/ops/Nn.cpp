// ONNX's convolution, pooling and normalization operators as Graph IR. Layout NCHW (N, C, then
// 1 to 3 spatial axes), weights [M, C/group, k...], as ONNX and PyTorch.
//
// Convolution and pooling go through windows (im2col): the input is padded, its spatial axes
// flattened, and `take` gathers every window at indices computed at import time, giving
// [N, C, windows, kernel elements]; a convolution is then one batched matmul per group, a pool a
// reduction over the last axis. Built from Graph IR's own ops, both have gradients (autodiff's
// rules for take, matmul and the reductions) and every backend's lowering; the cost is the
// window tensor's memory (N * C * windows * kernel elements) and static spatial sizes.
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

/// Convolution of x [N, C, S...] with w [M, C/g, K...] for a window geometry.
V convolve(Importer &I, V x, V wt, const Window &w, int64_t g) {
  const auto &xd = Importer::dims(x);
  const auto &wd = Importer::dims(wt);
  auto C = xd[1].constantValue(), M = wd[0].constantValue();
  if (!C || !M || *C % g || *M % g) throw BadModel("the channels do not divide into the groups");
  const int64_t O = w.outCount(), K = w.kernelCount(), Cg = *C / g, Mg = *M / g;
  V cols = windows(I, x, w, 0.0); // [N, C, O, K]
  cols = I.reshape(cols, {xd[0], D(g), D(Cg), D(O), D(K)});
  cols = I.reshape(I.transpose(cols, {0, 1, 3, 2, 4}), {xd[0], D(g), D(O), D(Cg * K)});
  V wm = I.transpose(I.reshape(wt, {D(g), D(Mg), D(Cg * K)}), {0, 2, 1}); // [g, Cg*K, Mg]
  V y = I.op(OpKind::MatMul, {cols, wm}); // [N, g, O, Mg]
  y = I.transpose(y, {0, 1, 3, 2});
  return I.reshape(y, outShape(x, w, D(*M)));
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
  V y = convolve(I, x, wt, w, n.i("group", 1));
  if (n.has(2)) y = addBias(I, y, I.v(n.in[2]));
  return one(y);
}

std::vector<Val> ruleConvTranspose(Importer &I, Node &n) {
  // The gradient of a convolution: the input dilated by the stride (stride-1 zeros between
  // elements), padded by dilation*(k-1) - pad on each side (plus output_padding at the end), and
  // convolved (stride 1, the same dilation) with the kernel flipped and its in/out channels
  // swapped per group.
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
    }
  }
  // Dilate by the stride.
  for (size_t i = 0; i < s; ++i) {
    if (stride[i] == 1) continue;
    const size_t a = 2 + i;
    std::vector<Dim> d = x->type.dims;
    std::vector<Dim> e = d;
    e.insert(e.begin() + long(a) + 1, D(1));
    V xe = I.reshape(x, e);
    std::vector<Dim> z = e;
    z[a + 1] = D(stride[i] - 1);
    V wide = I.concat({xe, I.full(z, 0, Importer::dtype(x))}, int64_t(a + 1));
    std::vector<Dim> f = d;
    f[a] = D(S[i] * stride[i]);
    x = I.sliceAxis(I.reshape(wide, f), a, D(0), D((S[i] - 1) * stride[i] + 1));
  }
  // Pad (or crop) each side.
  Window w;
  for (size_t i = 0; i < s; ++i) {
    const size_t a = 2 + i;
    int64_t lo = dil[i] * (K[i] - 1) - pads[i], hi = dil[i] * (K[i] - 1) - pads[i + s] + outPad[i];
    const Dim N = x->type.dims[a];
    if (lo < 0 || hi < 0) {
      x = I.sliceAxis(x, a, D(std::max<int64_t>(0, -lo)), N + D(std::min<int64_t>(0, hi)));
      lo = std::max<int64_t>(0, lo);
      hi = std::max<int64_t>(0, hi);
    }
    w.padBegin.push_back(lo);
    w.padEnd.push_back(hi);
  }
  std::vector<int64_t> xs = Importer::staticShape(x, "ConvTranspose input");
  for (size_t i = 0; i < s; ++i) {
    w.size.push_back(xs[2 + i]);
    w.kernel.push_back(K[i]);
    w.stride.push_back(1);
    w.dilation.push_back(dil[i]);
    w.out.push_back(xs[2 + i] + w.padBegin[i] + w.padEnd[i] - dil[i] * (K[i] - 1));
  }
  // Weight [C, M/g, K...] -> [g, C/g, M/g, K...] -> [g, M/g, C/g, K...] flipped -> [M, C/g, K...].
  const int64_t C = ws[0], Mg = ws[1];
  if (C % g) throw BadModel("the channels do not divide into the groups");
  std::vector<Dim> w5{D(g), D(C / g), D(Mg)};
  for (int64_t k : K) w5.push_back(D(k));
  V wr = I.reshape(wt, w5);
  std::vector<int64_t> perm{0, 2, 1};
  std::vector<int64_t> flip;
  for (size_t i = 0; i < s; ++i) {
    perm.push_back(int64_t(3 + i));
    flip.push_back(int64_t(3 + i));
  }
  wr = I.op(OpKind::Reverse, {I.transpose(wr, perm)}, {{"axes", flip}});
  std::vector<Dim> wd{D(g * Mg), D(C / g)};
  for (int64_t k : K) wd.push_back(D(k));
  V y = convolve(I, x, I.reshape(wr, wd), w, g);
  if (n.has(2)) y = addBias(I, y, I.v(n.in[2]));
  return one(y);
}

std::vector<Val> ruleMaxPool(Importer &I, Node &n) {
  if (n.numOutputs > 1) throw Unsupported("MaxPool's Indices output is not supported");
  V x = in(I, n, 0);
  auto k = n.ints("kernel_shape");
  if (!k) throw BadModel("MaxPool needs kernel_shape");
  Window w = window(n, spatialOf(x, "MaxPool"), *k, n.i("ceil_mode", 0));
  const double lowest = isFloat(Importer::dtype(x)) ? -INFINITY : double(std::numeric_limits<int32_t>::min());
  V y = I.reduce(OpKind::ReduceMax, windows(I, x, w, lowest), {3}, false);
  return one(I.reshape(y, outShape(x, w, x->type.dims[1])));
}

std::vector<Val> ruleAveragePool(Importer &I, Node &n) {
  V x = in(I, n, 0);
  auto k = n.ints("kernel_shape");
  if (!k) throw BadModel("AveragePool needs kernel_shape");
  std::vector<int64_t> S = spatialOf(x, "AveragePool");
  Window w = window(n, S, *k, n.i("ceil_mode", 0));
  const bool includePad = n.i("count_include_pad", 0);
  const int64_t pads0 = 0;
  (void)pads0;
  // Each window's divisor: its elements inside the input (or inside input and explicit pads).
  const size_t s = S.size();
  std::vector<int64_t> explicitEnd = n.ints("pads").value_or(std::vector<int64_t>(2 * s, 0));
  std::vector<double> count(size_t(w.outCount()));
  std::vector<int64_t> o(s, 0);
  for (size_t oi = 0; oi < count.size(); ++oi) {
    double cnt = 1;
    for (size_t i = 0; i < s; ++i) {
      int64_t lo = includePad ? 0 : w.padBegin[i];
      int64_t hi = includePad ? w.padBegin[i] + S[i] + (n.s("auto_pad", "NOTSET") == "NOTSET" ? explicitEnd[i + s] : w.padEnd[i])
                              : w.padBegin[i] + S[i];
      int64_t inside = 0;
      for (int64_t kk = 0; kk < w.kernel[i]; ++kk) {
        int64_t p = o[i] * w.stride[i] + kk * w.dilation[i];
        inside += p >= lo && p < hi;
      }
      cnt *= double(inside);
    }
    count[oi] = cnt;
    for (size_t i = s; i-- > 0;) {
      if (++o[i] < w.out[i]) break;
      o[i] = 0;
    }
  }
  V sum = I.reduce(OpKind::ReduceSum, windows(I, x, w, 0.0), {3}, false); // [N, C, O]
  V div = I.tensor(rt::Tensor::fromF64({w.outCount()}, Importer::dtype(x), count), "pool_count");
  return one(I.reshape(I.op(OpKind::Div, {sum, div}), outShape(x, w, x->type.dims[1])));
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
