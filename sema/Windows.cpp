// Sliding-window extents (Windows.h states the formulas and their sources).
#include "sema/Windows.h"

namespace tsr::sema {

namespace {
std::string axisMsg(size_t i, const std::string &m) { return "spatial axis " + std::to_string(i) + ": " + m; }
} // namespace

std::variant<Dim, std::string> windowOut(const Dim &in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, bool ceilMode) {
  const int64_t span = d * (k - 1) + 1;
  auto c = in.constantValue();
  if (!c) {
    if (s != 1) return std::string("a strided window needs a spatial extent known at compile time, not \"" + in.str() + "\"");
    // Stride 1: every start counts; the extent is S + (pb + pe - span + 1) exactly.
    return in + Dim::constant(pb + pe - span + 1);
  }
  if (*c > (int64_t(1) << 40)) return "the spatial extent " + std::to_string(*c) + " is too large";
  const int64_t padded = *c + pb + pe;
  if (padded < span)
    return "the window (" + std::to_string(k) + (d > 1 ? " with dilation " + std::to_string(d) : std::string()) +
           ") is larger than the padded input (" + std::to_string(padded) + ")";
  int64_t out = (padded - span) / s + 1;
  if (ceilMode) {
    out = (padded - span + s - 1) / s + 1;
    if ((out - 1) * s >= *c + pb) --out; // the last window must start inside the input or its begin padding
  }
  return Dim::constant(out);
}

std::variant<Dim, std::string> transposedOut(const Dim &in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  const int64_t extra = d * (k - 1) + 1 - pb - pe;
  auto c = in.constantValue();
  if (!c) {
    if (s != 1) return std::string("a strided transposed convolution needs a spatial extent known at compile time, not \"" + in.str() + "\"");
    return in + Dim::constant(extra - 1);
  }
  if (*c > (int64_t(1) << 30)) return "the spatial extent " + std::to_string(*c) + " is too large";
  const int64_t out = (*c - 1) * s + extra;
  if (out < 1) return "the padding (" + std::to_string(pb) + ", " + std::to_string(pe) + ") leaves no output";
  return Dim::constant(out);
}

std::variant<std::vector<Dim>, std::string> windowOutShape(const std::vector<Dim> &in, const WindowGeometry &g, bool transposed) {
  const size_t n = g.rank();
  if (in.size() != n) return "the kernel has " + std::to_string(n) + " spatial axes but the input " + std::to_string(in.size());
  std::vector<Dim> out;
  for (size_t i = 0; i < n; ++i) {
    auto r = transposed ? transposedOut(in[i], g.kernel[i], g.strides[i], g.dilations[i], g.pads[i], g.pads[n + i])
                        : windowOut(in[i], g.kernel[i], g.strides[i], g.dilations[i], g.pads[i], g.pads[n + i], g.ceilMode);
    if (auto *m = std::get_if<std::string>(&r)) return n == 1 ? *m : axisMsg(i, *m);
    out.push_back(std::get<Dim>(r));
  }
  return out;
}

std::variant<WindowGeometry, std::string> geometryFromArgs(size_t n, const WindowArgs &a, bool transposed) {
  if (n < 1 || n > 3) return "1 to 3 spatial axes are supported, not " + std::to_string(n);
  auto each = [&](const std::vector<int64_t> &v, const char *what, std::vector<int64_t> &out) -> std::optional<std::string> {
    if (v.size() == 1) out.assign(n, v[0]);
    else if (v.size() == n) out = v;
    else return std::string("`") + what + "` has " + std::to_string(v.size()) + " values for " + std::to_string(n) + " spatial axes";
    return std::nullopt;
  };
  WindowGeometry g;
  g.ceilMode = a.ceilMode;
  if (auto e = each(a.kernel, "kernel_size", g.kernel)) return *e;
  if (auto e = each(a.stride.empty() ? g.kernel : a.stride, "stride", g.strides)) return *e;
  if (auto e = each(a.dilation.empty() ? std::vector<int64_t>{1} : a.dilation, "dilation", g.dilations)) return *e;
  g.pads.assign(2 * n, 0);
  if (a.paddingMode == "same") {
    for (size_t i = 0; i < n; ++i) {
      if (g.strides[i] != 1) return std::string("padding=\"same\" needs stride 1");
      const int64_t total = g.dilations[i] * (g.kernel[i] - 1);
      g.pads[i] = total / 2;
      g.pads[n + i] = total - total / 2;
    }
  } else if (!a.paddingMode.empty() && a.paddingMode != "valid") {
    return "padding must be \"same\", \"valid\" or sizes, not \"" + a.paddingMode + "\"";
  } else if (a.paddingMode.empty()) {
    if (a.padding.size() == 1 || a.padding.size() == n)
      for (size_t i = 0; i < n; ++i) g.pads[i] = g.pads[n + i] = a.padding[a.padding.size() == 1 ? 0 : i];
    else if (a.padding.size() == 2 * n) g.pads = a.padding;
    else return "`padding` has " + std::to_string(a.padding.size()) + " values for " + std::to_string(n) + " spatial axes";
  }
  if (auto e = checkGeometry(g, n, false)) return *e;
  if (transposed) {
    std::vector<int64_t> op;
    if (auto e = each(a.outputPadding.empty() ? std::vector<int64_t>{0} : a.outputPadding, "output_padding", op)) return *e;
    for (size_t i = 0; i < n; ++i) {
      if (op[i] < 0 || (op[i] >= g.strides[i] && op[i] >= g.dilations[i]))
        return "output_padding " + std::to_string(op[i]) + " must be smaller than the stride or the dilation";
      g.pads[n + i] -= op[i];
    }
  }
  return g;
}

std::variant<std::vector<Dim>, std::string> windowResult(WindowOp op, const std::vector<Dim> &x, const std::vector<Dim> *w,
                                                         const WindowGeometry &g, int64_t groups) {
  if (x.size() < 3 || x.size() > 5) return "the input must be [N, C, 1 to 3 spatial axes], not of rank " + std::to_string(x.size());
  const size_t n = x.size() - 2;
  if (w && w->size() != x.size())
    return "the weight must have the input's rank " + std::to_string(x.size()) + ", not " + std::to_string(w->size());
  if (auto e = checkGeometry(g, n, op != WindowOp::Pool)) return *e;
  std::vector<Dim> out{x[0], x[1]};
  if (w) {
    if (groups < 1) return "groups must be positive, not " + std::to_string(groups);
    const Dim G = Dim::constant(groups);
    // conv: w [M, C/g, K..]; conv_transpose: w [C, M/g, K..].
    const Dim need = op == WindowOp::Conv ? (*w)[1] * G : (*w)[0];
    auto cc = x[1].constantValue(), nc = need.constantValue();
    if (cc && nc && *cc != *nc)
      return "the input has " + std::to_string(*cc) + " channels but the weight expects " + std::to_string(*nc) +
             (op == WindowOp::Conv && groups > 1 ? " (" + (*w)[1].str() + " per group times groups = " + std::to_string(groups) + ")" : "");
    if (cc && *cc % groups) return "the input's " + std::to_string(*cc) + " channels do not divide into " + std::to_string(groups) + " groups";
    if (auto m = (*w)[0].constantValue(); op == WindowOp::Conv && m && *m % groups)
      return "the weight's " + std::to_string(*m) + " output channels do not divide into " + std::to_string(groups) + " groups";
    out[1] = op == WindowOp::Conv ? (*w)[0] : (*w)[1] * G;
  }
  auto sp = windowOutShape(std::vector<Dim>(x.begin() + 2, x.end()), g, op == WindowOp::ConvTranspose);
  if (auto *e = std::get_if<std::string>(&sp)) return *e;
  for (const Dim &d : std::get<std::vector<Dim>>(sp)) out.push_back(d);
  return out;
}

std::optional<std::string> checkGeometry(const WindowGeometry &g, size_t spatial, bool negativePads) {
  const size_t n = spatial;
  if (n < 1 || n > 3) return "1 to 3 spatial axes are supported, not " + std::to_string(n);
  if (g.kernel.size() != n) return "the kernel has " + std::to_string(g.kernel.size()) + " axes for " + std::to_string(n) + " spatial axes";
  if (g.strides.size() != n) return "the stride has " + std::to_string(g.strides.size()) + " entries for " + std::to_string(n) + " spatial axes";
  if (g.dilations.size() != n) return "the dilation has " + std::to_string(g.dilations.size()) + " entries for " + std::to_string(n) + " spatial axes";
  if (g.pads.size() != 2 * n) return "the padding has " + std::to_string(g.pads.size()) + " entries for " + std::to_string(n) + " spatial axes";
  // Beyond 2^31 the extents' products could overflow int64 (a fuzzer's sizes, not a model's).
  constexpr int64_t kLimit = int64_t(1) << 31;
  auto large = [&](int64_t v) { return v >= kLimit || v <= -kLimit; };
  for (size_t i = 0; i < n; ++i)
    if (large(g.kernel[i]) || large(g.strides[i]) || large(g.dilations[i]) || large(g.pads[i]) || large(g.pads[n + i]))
      return std::string("a kernel size, stride, dilation or padding of 2^31 or more is not supported");
  for (size_t i = 0; i < n; ++i) {
    if (g.kernel[i] < 1) return "the kernel size " + std::to_string(g.kernel[i]) + " is not positive";
    if (g.strides[i] < 1) return "the stride " + std::to_string(g.strides[i]) + " is not positive";
    if (g.dilations[i] < 1) return "the dilation " + std::to_string(g.dilations[i]) + " is not positive";
    if (!negativePads && (g.pads[i] < 0 || g.pads[n + i] < 0)) return "the padding is negative";
  }
  return std::nullopt;
}

} // namespace tsr::sema
