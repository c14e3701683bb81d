// Graph lowering of conv, conv_transpose, max_pool and avg_pool (sema/builtins/Windows.cpp types
// them): the arguments read into sema::WindowArgs as the checker reads them, the geometry from
// sema/Windows.h, and one Graph IR op with every attribute written out (so that the printed
// graph and the content hash do not depend on defaults).
#include "ir/lower/builtins/Rules.h"
#include "sema/Windows.h"

namespace tsr::ir::lowering {

namespace {

LVRef window(BuiltinCall &c) {
  const OpKind k = c.op();
  const bool conv = k == OpKind::Conv || k == OpKind::ConvTranspose;
  // Parameter positions as the signatures in sema/builtins/Windows.cpp give them.
  std::vector<const char *> params;
  if (k == OpKind::Conv) params = {"x", "weight", "stride", "padding", "dilation", "groups"};
  else if (k == OpKind::ConvTranspose) params = {"x", "weight", "stride", "padding", "output_padding", "groups", "dilation"};
  else if (k == OpKind::MaxPool) params = {"x", "kernel_size", "stride", "padding", "dilation", "ceil_mode"};
  else params = {"x", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"};
  auto get = [&](const char *name) -> LVRef {
    for (size_t i = 0; i < params.size(); ++i)
      if (std::string_view(params[i]) == name) {
        LVRef v = c.arg(i, name);
        return v && v->kind != LV::K::None ? v : nullptr;
      }
    return nullptr;
  };
  auto ints = [&](const char *name, std::vector<int64_t> dflt) {
    LVRef v = get(name);
    return v ? c.L.intsOf(v, c.at) : dflt;
  };
  auto flag = [&](const char *name, bool dflt) {
    LVRef v = get(name);
    return v ? c.L.truthy(v, c.at) : dflt;
  };
  Value *x = c.tensor(0, "x");
  Value *w = conv ? c.tensor(1, "weight") : nullptr;
  const size_t n = x->type.rank() >= 2 ? x->type.rank() - 2 : 0;
  sema::WindowArgs a;
  if (conv) {
    for (size_t i = 2; i < w->type.rank(); ++i) {
      auto e = w->type.dims[i].constantValue();
      if (!e) c.unsupported("a convolution kernel of a size known only at run time");
      a.kernel.push_back(*e);
    }
  } else {
    a.kernel = ints("kernel_size", {});
  }
  a.stride = ints("stride", conv ? std::vector<int64_t>{1} : std::vector<int64_t>{});
  LVRef pad = get("padding");
  if (pad && pad->kind == LV::K::Str) a.paddingMode = pad->s;
  else a.padding = ints("padding", {0});
  if (k != OpKind::AvgPool) a.dilation = ints("dilation", {1});
  if (k == OpKind::ConvTranspose) a.outputPadding = ints("output_padding", {0});
  a.ceilMode = flag("ceil_mode", false);
  auto geo = sema::geometryFromArgs(n, a, k == OpKind::ConvTranspose);
  // The checker reported these already; a call it could not see is the same mistake.
  if (auto *e = std::get_if<std::string>(&geo)) c.unsupported("`" + std::string(opSpelling(k)) + "`: " + *e);
  const sema::WindowGeometry &g = std::get<sema::WindowGeometry>(geo);
  std::vector<Attr> attrs{{"strides", g.strides}, {"pads", g.pads}};
  if (k != OpKind::AvgPool) attrs.push_back({"dilations", g.dilations});
  if (conv) {
    LVRef gr = get("groups");
    attrs.push_back({"groups", gr ? c.L.intsOf(gr, c.at).at(0) : int64_t{1}});
    if (w->type.dtype != x->type.dtype) {
      // Operands promote as the checker typed the call (spec 6).
      auto p = promote(x->type.dtype, w->type.dtype);
      if (!p) c.unsupported("conv operands of dtypes that do not promote");
      if (x->type.dtype != *p) x = c.L.op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{*p, {}}}}, c.at);
      if (w->type.dtype != *p) w = c.L.op(OpKind::Cast, {w}, {{"dtype", DTypeAttr{*p, {}}}}, c.at);
    }
    return tensor(c.L.op(k, {x, w}, attrs, c.at));
  }
  attrs.push_back({"kernel", g.kernel});
  attrs.push_back({"ceil_mode", g.ceilMode});
  if (k == OpKind::AvgPool) attrs.push_back({"count_include_pad", flag("count_include_pad", true)});
  return tensor(c.L.op(k, {x}, attrs, c.at));
}

} // namespace

void addWindowRules(GraphRules &r) { r["window"] = window; }

} // namespace tsr::ir::lowering
