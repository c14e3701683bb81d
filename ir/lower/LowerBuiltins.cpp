// Graph lowering: calls of builtins, dispatched through their registry entries to the rules of
// ir/lower/builtins/ (Rules.h), and the helpers those rules share.
#include "ir/lower/Lowering.h"
#include "ir/lower/builtins/Rules.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tsr::ir::lowering {

LVRef Lowering::arg(const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kw, size_t i, const char *name) {
  if (i < args.size()) return args[i];
  auto it = kw.find(name);
  return it == kw.end() ? nullptr : it->second;
}

DTypeAttr Lowering::dtypeArg(const LVRef &v, DTypeAttr dflt) {
  if (!v || v->kind == LV::K::None) return dflt;
  if (v->kind == LV::K::DType) return v->dt;
  if (v->kind == LV::K::Str) if (auto d = dtypeFromName(v->s)) return {*d, {}};
  return dflt;
}

Value *Lowering::reduce(OpKind k, Value *x, const LVRef &axisArg, bool keep, SourceRange at) {
  std::vector<Attr> attrs;
  if (axisArg && axisArg->kind != LV::K::None) attrs.push_back({"axes", intsOf(axisArg, at)});
  attrs.push_back({"keepdims", keep});
  return op(k, {x}, attrs, at);
}

Value *Lowering::reducedCount(Value *x, const LVRef &axisArg, DType dt, SourceRange at) {
  std::vector<size_t> axes;
  if (!axisArg || axisArg->kind == LV::K::None) {
    for (size_t i = 0; i < x->type.rank(); ++i) axes.push_back(i);
  } else {
    for (int64_t a : intsOf(axisArg, at)) axes.push_back(static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(x->type.rank()) : a));
  }
  int64_t known = 1;
  Value *count = nullptr;
  for (size_t a : axes) {
    const Dim &d = x->type.dims[a];
    if (auto c = d.constantValue()) { known *= *c; continue; }
    Value *v = op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{d}}}, at);
    count = count ? op(OpKind::Mul, {count, v}, {}, at) : v;
  }
  Value *k = constant(static_cast<double>(known), count ? DType::I64 : dt, at);
  if (!count) return k;
  if (known != 1) count = op(OpKind::Mul, {count, k}, {}, at);
  return op(OpKind::Cast, {count}, {{"dtype", DTypeAttr{dt, {}}}}, at);
}

// ---- the call a rule sees ----------------------------------------------------------------------

LVRef BuiltinCall::arg(size_t i, const char *name) const { return L.arg(args, kw, i, name); }

LVRef BuiltinCall::kwarg(const char *name) const {
  auto it = kw.find(name);
  return it == kw.end() ? nullptr : it->second;
}

Value *BuiltinCall::tensor(size_t i, const char *name) const {
  LVRef v = arg(i, name);
  if (!v) unsupported("a call without `" + std::string(name) + "`");
  return L.asTensor(v, std::nullopt, at);
}

OpKind BuiltinCall::op() const {
  auto k = opFromSpelling(b.graph.op);
  if (!k) throw CompileError{"internal: the builtin `" + b.name + "` names no Graph IR op `" + b.graph.op + "`", at};
  return *k;
}

std::string BuiltinCall::attr(const std::string &name) const {
  if (LVRef v = kwarg(name.c_str()); v && v->kind == LV::K::Str) return v->s;
  for (auto &[k, dflt] : b.graph.attrs)
    if (k == name) return dflt;
  return {};
}

bool BuiltinCall::keepdims() const {
  LVRef k = kwarg("keepdims");
  return k && k->kind == LV::K::Bool && k->b;
}

// ---- the table ---------------------------------------------------------------------------------

GraphRule findGraphRule(std::string_view name) {
  static const GraphRules rules = [] {
    GraphRules r;
    addMathRules(r);
    addReductionRules(r);
    addLayoutRules(r);
    addCreationRules(r);
    addStructureRules(r);
    addAutodiffRules(r);
    addCompositeRules(r);
    addStateRules(r);
    addWindowRules(r);
    addDistributionRules(r);
    return r;
  }();
  auto it = rules.find(name);
  return it == rules.end() ? nullptr : it->second;
}

// A builtin called in graph code: its entry's rule. A math builtin of a number known at compile
// time is that number, as the checker types it (sqrt(float(D)) in a scale stays a Python float).
LVRef Lowering::builtin(const LV &b, std::vector<LVRef> args, const std::map<std::string, LVRef> &kw, SourceRange at, SourceRange calleeRange) {
  const sema::BuiltinInfo &e = *b.builtin;
  if (b.self) args.insert(args.begin(), b.self);
  if (e.number && args.size() == 1 && kw.empty() && isNumber(args[0]) &&
      (args[0]->kind == LV::K::Float || constInt(args[0]))) {
    bool isInt = args[0]->kind != LV::K::Float;
    double v = isInt ? static_cast<double>(*constInt(args[0])) : args[0]->f;
    if (auto r = sema::applyToNumber(e, v, isInt))
      return r->isInt ? integer(Dim::constant(static_cast<int64_t>(r->value))) : floating(r->value);
  }
  GraphRule rule = e.graph.given() ? findGraphRule(e.graph.rule) : nullptr;
  if (!rule) unsupported("`" + e.name + "` in a graph function", calleeRange);
  BuiltinCall call{*this, e, std::move(args), kw, at, calleeRange, b.self != nullptr};
  return rule(call);
}

} // namespace tsr::ir::lowering

namespace tsr::ir {

bool hasGraphBuiltinRule(std::string_view rule) { return lowering::findGraphRule(rule) != nullptr; }

} // namespace tsr::ir
