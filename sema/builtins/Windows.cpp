// Convolution and pooling builtins: conv, conv_transpose, max_pool, avg_pool over 1 to 3
// spatial axes (NCHW, as torch.nn.functional's conv*d, conv_transpose*d, max_pool*d and
// avg_pool*d, whose argument forms they take). Each is one Graph IR op (ir/Ops.def); the
// extents and the mistakes come from sema/Windows.h, which Graph IR's shape inference shares.
// The stdlib's nn.conv2d, nn.max_pool2d, ... (stdlib/nn.tsr) are written over these.
#include "sema/Windows.h"
#include "sema/builtins/Rules.h"

namespace tsr::sema::builtins {

namespace {

// An int or a tuple of ints known at compile time; nullopt (reported where the kind is wrong,
// silent where a value is not known) otherwise. `absent` when the argument is not given.
std::optional<std::vector<int64_t>> intList(CallSite &s, const ArgInfo *a, std::string_view what, std::vector<int64_t> absent) {
  if (!given(a)) return absent;
  auto dims = s.shape(a, what);
  if (!dims) return std::nullopt;
  std::vector<int64_t> out;
  for (const Dim &d : *dims) {
    auto c = d.constantValue();
    if (!c) {
      if (!d.hasUnknown()) s.diags->report(DiagKind::NotCompileTime, a->range, {tick(what)});
      return std::nullopt;
    }
    out.push_back(*c);
  }
  return out;
}

enum class Which { Conv, ConvTranspose, MaxPool, AvgPool };

const char *nameOf(Which w) {
  switch (w) {
  case Which::Conv: return "conv";
  case Which::ConvTranspose: return "conv_transpose";
  case Which::MaxPool: return "max_pool";
  case Which::AvgPool: return "avg_pool";
  }
  return "";
}

// The shared rule: the arguments read into WindowArgs, the geometry and the result's dims from
// sema/Windows.h; a mistake there is E0315 at the call, naming the builtin.
TypeRef windowRule(CallSite &s, Which which) {
  const bool conv = which == Which::Conv || which == Which::ConvTranspose;
  std::vector<std::string> params;
  if (which == Which::Conv) params = {"x", "weight", "stride", "padding", "dilation", "groups"};
  else if (which == Which::ConvTranspose) params = {"x", "weight", "stride", "padding", "output_padding", "groups", "dilation"};
  else if (which == Which::MaxPool) params = {"x", "kernel_size", "stride", "padding", "dilation", "ceil_mode"};
  else params = {"x", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"};
  if (!s.expect(params, 2)) return T::unknown();
  const char *name = nameOf(which);
  const ArgInfo *xa = s.arg(0, "x");
  TypeRef x = s.tensorArg(xa, "x");
  TypeRef w;
  if (conv) w = s.tensorArg(s.arg(1, "weight"), "weight");
  if (!x || (conv && !w)) return T::unknown();
  if ((conv || which == Which::AvgPool) && !isFloat(x->dtype)) {
    s.wrongKind(xa, "a floating-point tensor", "x");
    return T::unknown();
  }
  if (conv && !isFloat(w->dtype)) {
    s.wrongKind(s.arg(1, "weight"), "a floating-point tensor", "weight");
    return T::unknown();
  }
  DType dt = x->dtype;
  Policies pol = x->policies;
  if (conv && w->dtype != x->dtype) {
    auto p = promote(x->dtype, w->dtype);
    if (!p) {
      s.diags->report(DiagKind::NoPromotion, s.range, {std::string(dtypeName(x->dtype)), std::string(dtypeName(w->dtype))});
      return T::unknown();
    }
    dt = *p;
  }
  if (!x->rankKnown || (conv && !w->rankKnown)) return unknownRank(dt, pol);
  auto report = [&](const std::string &m, SourceRange r) {
    s.diags->report(DiagKind::WindowShape, r, {name, m});
    return T::unknown();
  };
  const size_t rank = x->dims.size();
  if (rank < 3 || rank > 5) return report("the input must be [N, C, 1 to 3 spatial axes], not of rank " + std::to_string(rank), xa->range);
  const size_t n = rank - 2;
  if (conv && w->dims.size() != rank) {
    s.diags->report(DiagKind::RankMismatch, s.arg(1, "weight")->range,
                    {"the `weight` of `" + std::string(name) + "`", std::to_string(rank), std::to_string(w->dims.size())});
    return T::unknown();
  }
  WindowArgs a;
  bool ok = true;
  auto read = [&](const char *param, size_t pos, std::vector<int64_t> dflt, std::vector<int64_t> &out) {
    auto v = intList(s, s.arg(pos, param), param, std::move(dflt));
    if (v) out = *v;
    else ok = false;
  };
  auto posOf = [&](const char *p) {
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i] == p) return i;
    return params.size();
  };
  if (conv) {
    for (size_t i = 2; i < rank; ++i) {
      auto k = w->dims[i].constantValue();
      if (!k) return report("the kernel extents must be known at compile time, not \"" + w->dims[i].str() + "\"", s.arg(1, "weight")->range);
      a.kernel.push_back(*k);
    }
  } else {
    read("kernel_size", 1, {}, a.kernel);
  }
  read("stride", posOf("stride"), conv ? std::vector<int64_t>{1} : std::vector<int64_t>{}, a.stride);
  const ArgInfo *pad = s.arg(posOf("padding"), "padding");
  if (given(pad) && pad->type && pad->type->is(K::Str)) {
    if (!conv || which == Which::ConvTranspose) {
      s.wrongKind(pad, "an int or a tuple of ints", "padding");
      return T::unknown();
    }
    auto m = s.constStr(pad, "padding");
    if (!m) return T::unknown();
    a.paddingMode = *m;
  } else {
    read("padding", posOf("padding"), {0}, a.padding);
  }
  if (which != Which::AvgPool) read("dilation", posOf("dilation"), {1}, a.dilation);
  if (which == Which::ConvTranspose) read("output_padding", posOf("output_padding"), {0}, a.outputPadding);
  int64_t groups = 1;
  if (conv) {
    const ArgInfo *g = s.arg(posOf("groups"), "groups");
    if (given(g)) {
      auto v = s.constInt(g, "groups", true);
      if (!v) return T::unknown();
      groups = *v;
    }
  }
  for (const char *b : {"ceil_mode", "count_include_pad"}) {
    const ArgInfo *arg = s.arg(posOf(b), b);
    if (!given(arg) || posOf(b) == params.size()) continue;
    auto v = s.constBool(arg, b);
    if (!v) return T::unknown();
    if (std::string_view(b) == "ceil_mode") a.ceilMode = *v;
  }
  if (!ok) return T::unknown();
  auto geo = geometryFromArgs(n, a, which == Which::ConvTranspose);
  if (auto *e = std::get_if<std::string>(&geo)) return report(*e, s.range);
  const WindowOp op = which == Which::Conv ? WindowOp::Conv : which == Which::ConvTranspose ? WindowOp::ConvTranspose : WindowOp::Pool;
  auto out = windowResult(op, x->dims, conv ? &w->dims : nullptr, std::get<WindowGeometry>(geo), groups);
  if (auto *e = std::get_if<std::string>(&out)) return report(*e, s.range);
  return T::tensor(std::get<std::vector<Dim>>(out), dt, pol);
}

} // namespace

void addWindowBuiltins(Registrar &r) {
  r.add("conv", HostAndGraph, [](CallSite &s) { return windowRule(s, Which::Conv); },
        "conv(x, weight, stride=1, padding=0, dilation=1, groups=1) -> Tensor",
        "convolution of x [N, C, S..] by weight [M, C/groups, K..] over 1 to 3 spatial axes, as torch.nn.functional.conv*d")
      .inGraph("window", "conv")
      .example("conv(reshape(x, (1, 1, 6)), reshape(v, (1, 1, 3)))")
      .example("conv(reshape(x, (1, 2, 3)), reshape(m, (2, 2, 3)), padding=1)");
  r.add("conv_transpose", HostAndGraph, [](CallSite &s) { return windowRule(s, Which::ConvTranspose); },
        "conv_transpose(x, weight, stride=1, padding=0, output_padding=0, groups=1, dilation=1) -> Tensor",
        "transposed convolution of x [N, C, S..] by weight [C, M/groups, K..], as torch.nn.functional.conv_transpose*d")
      .inGraph("window", "conv_transpose")
      .example("conv_transpose(reshape(x, (1, 1, 6)), reshape(v, (1, 1, 3)), stride=2)");
  r.add("max_pool", HostAndGraph, [](CallSite &s) { return windowRule(s, Which::MaxPool); },
        "max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> Tensor",
        "window maxima of x [N, C, S..] over 1 to 3 spatial axes, as torch.nn.functional.max_pool*d")
      .inGraph("window", "max_pool")
      .example("max_pool(reshape(x, (1, 2, 3)), 2, stride=1)");
  r.add("avg_pool", HostAndGraph, [](CallSite &s) { return windowRule(s, Which::AvgPool); },
        "avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor",
        "window means of x [N, C, S..] over 1 to 3 spatial axes, as torch.nn.functional.avg_pool*d")
      .inGraph("window", "avg_pool")
      .example("avg_pool(reshape(x, (1, 2, 3)), 2, stride=1, padding=1)");
}

} // namespace tsr::sema::builtins
