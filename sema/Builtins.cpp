// The builtin registry: every builtin of spec sections 6b, 7, 8, 9 and 10 is one entry, added by
// its family's file under sema/builtins/ (Math, Reductions, Layout, Creation, Host, Schedule,
// Autodiff, Distribution, Tile); this file builds the registry, answers lookups and implements
// CallSite's readers of compile-time arguments.
#include "sema/Builtins.h"
#include "sema/builtins/Rules.h"

#include <map>
#include <unordered_map>

namespace tsr::sema {

using namespace builtins;

namespace {

TypeRef ruleNamespace(CallSite &) { return T::unknown(); }

struct Registry {
  std::vector<BuiltinInfo> functions;
  std::vector<std::pair<TypeKind, BuiltinInfo>> methods;
  std::unordered_map<std::string, size_t> byName;
  std::map<std::pair<TypeKind, std::string>, size_t> methodIndex;
};

Registry build() {
  Registry r;
  std::vector<BuiltinInfo> all;
  std::vector<std::pair<TypeKind, BuiltinInfo>> methods;
  Registrar reg{all, methods};
  // The namespaces, callable where their members are (tile: kernels only).
  for (auto [ns, contexts] : {std::pair<const char *, unsigned>{"tile", InKernel}, {"random", HostAndGraph}, {"dist", HostAndGraph}}) {
    BuiltinInfo b;
    b.name = ns;
    b.contexts = contexts;
    b.rule = ruleNamespace;
    b.signature = ns;
    b.doc = std::string("the builtin namespace `") + ns + "`";
    b.isNamespace = true;
    all.push_back(std::move(b));
  }
  addMathBuiltins(reg);
  addReductionBuiltins(reg);
  addLayoutBuiltins(reg);
  addCreationBuiltins(reg);
  addHostBuiltins(reg);
  addScheduleBuiltins(reg);
  addAutodiffBuiltins(reg);
  addDistributionBuiltins(reg);
  addStateBuiltins(reg);
  addWindowBuiltins(reg);
  registerTileBuiltins(all);
  // The first entry of a name wins (the namespaces above, should TileOps list `tile` again).
  for (auto &b : all) {
    if (r.byName.count(b.name)) continue;
    r.byName[b.name] = r.functions.size();
    r.functions.push_back(std::move(b));
  }
  r.methods = std::move(methods);
  for (size_t i = 0; i < r.methods.size(); ++i) r.methodIndex.emplace(std::pair{r.methods[i].first, r.methods[i].second.name}, i);
  return r;
}

Registry &mutableRegistry() {
  static Registry r = build();
  return r;
}

const Registry &registry() { return mutableRegistry(); }

} // namespace

// ---- CallSite ------------------------------------------------------------------------------------------

bool CallSite::expect(const std::vector<std::string> &positional, size_t required, const std::vector<std::string> &keywordOnly) {
  bool ok = true;
  if (args.size() > positional.size()) {
    diags->report(DiagKind::TooManyArgs, args[positional.size()].range,
                  {name, std::to_string(positional.size()), std::to_string(args.size())});
    ok = false;
  }
  std::set<std::string> seen;
  for (const ArgInfo &k : keywords) {
    auto it = std::find(positional.begin(), positional.end(), k.keyword);
    bool isPositional = it != positional.end();
    bool isKeywordOnly = std::find(keywordOnly.begin(), keywordOnly.end(), k.keyword) != keywordOnly.end();
    if (!isPositional && !isKeywordOnly) {
      diags->report(DiagKind::UnknownKeyword, k.keywordRange.valid() ? k.keywordRange : k.range, {name, k.keyword});
      ok = false;
      continue;
    }
    bool byPosition = isPositional && static_cast<size_t>(it - positional.begin()) < args.size();
    if (byPosition || !seen.insert(k.keyword).second) {
      diags->report(DiagKind::DuplicateArg, k.keywordRange.valid() ? k.keywordRange : k.range, {name, k.keyword});
      ok = false;
    }
  }
  for (size_t i = args.size(); i < required && i < positional.size(); ++i)
    if (!kwarg(positional[i])) {
      diags->report(DiagKind::MissingArg, range, {name, positional[i]});
      ok = false;
    }
  return ok;
}

const ArgInfo *CallSite::arg(size_t pos, std::string_view n) const {
  if (pos < args.size()) return &args[pos];
  return kwarg(n);
}

const ArgInfo *CallSite::kwarg(std::string_view n) const {
  for (const ArgInfo &k : keywords)
    if (k.keyword == n) return &k;
  return nullptr;
}

std::optional<int64_t> CallSite::constInt(const ArgInfo *a, std::string_view what, bool required) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!intLike(t)) {
    wrongKind(a, "an int", what);
    return std::nullopt;
  }
  if (auto v = intConstOf(t)) return v;
  if (required) diags->report(DiagKind::NotCompileTime, a->range, {"`" + std::string(what) + "` of `" + name + "`"});
  return std::nullopt;
}

std::optional<Dim> CallSite::intDim(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!intLike(t)) {
    wrongKind(a, "an int", what);
    return std::nullopt;
  }
  return dimOf(t);
}

std::optional<std::vector<Dim>> CallSite::shape(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (intLike(t)) return std::vector<Dim>{dimOf(t)};
  if (!shapeKindOk(t)) {
    wrongKind(a, "a shape (an int or a tuple of ints)", what);
    return std::nullopt;
  }
  if (!t.lengthKnown) return std::nullopt;
  std::vector<Dim> dims;
  for (auto &e : t.elems) dims.push_back(isUnknown(e) ? Dim::unknown() : dimOf(*e));
  return dims;
}

std::optional<std::vector<int64_t>> CallSite::axes(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!shapeKindOk(t)) {
    wrongKind(a, "an int or a tuple of ints", what);
    return std::nullopt;
  }
  // In compiled code an axis decides the program's shape: a run-time int (an opaque value, such
  // as a positional parameter or a variable computed at run time) cannot be one. A compile-time
  // int whose value is not known yet (a keyword-only parameter's symbol) passes.
  auto runtime = [&](const Type &x) {
    if (!(context & (InGraph | InKernel)) || !x.intValue || x.intValue->isConstant()) return false;
    std::map<std::string, Dim> ones;
    for (auto &sym : x.intValue->symbols()) ones[sym] = Dim::constant(1);
    return !x.intValue->substitute(ones).isConstant() && !x.intValue->hasUnknown();
  };
  if (intLike(t)) {
    if (auto v = intConstOf(t)) return std::vector<int64_t>{*v};
    if (runtime(t)) diags->report(DiagKind::NotCompileTime, a->range, {"`" + std::string(what) + "` of `" + name + "`"});
    return std::nullopt;
  }
  if (!t.lengthKnown) return std::nullopt;
  std::vector<int64_t> out;
  for (auto &e : t.elems) {
    auto v = isUnknown(e) ? std::nullopt : intConstOf(*e);
    if (!v) {
      if (!isUnknown(e) && runtime(*e)) diags->report(DiagKind::NotCompileTime, a->range, {"`" + std::string(what) + "` of `" + name + "`"});
      return std::nullopt;
    }
    out.push_back(*v);
  }
  return out;
}

std::optional<DType> CallSite::dtype(const ArgInfo *a, std::string_view what, Policies *policies) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (t.is(K::DTypeVal)) {
    if (policies) *policies = t.policies;
    return t.dtype;
  }
  if (t.is(K::Str)) { // jnp accepts dtype names as strings
    if (!t.strValue) return std::nullopt;
    if (auto d = dtypeFromName(*t.strValue)) {
      if (policies) *policies = {};
      return d;
    }
    diags->report(DiagKind::UnknownDType, a->range, {*t.strValue});
    return std::nullopt;
  }
  wrongKind(a, "a dtype", what);
  return std::nullopt;
}

std::optional<bool> CallSite::constBool(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  if (!a->type->is(K::Bool)) {
    wrongKind(a, "a bool", what);
    return std::nullopt;
  }
  return a->type->boolValue;
}

std::optional<std::string> CallSite::constStr(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  if (!a->type->is(K::Str)) {
    wrongKind(a, "a string", what);
    return std::nullopt;
  }
  return a->type->strValue;
}

TypeRef CallSite::tensorArg(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return nullptr;
  if (a->type->isTensorLike()) return a->type;
  wrongKind(a, "a tensor", what);
  return nullptr;
}

void CallSite::wrongKind(const ArgInfo *a, std::string_view expected, std::string_view what) {
  diags->report(DiagKind::ArgKind, a ? a->range : range, {name, std::string(expected), std::string(what), typeStr(a ? a->type : nullptr)});
}

// ---- lookups ---------------------------------------------------------------------------------------------

const BuiltinInfo *findBuiltin(std::string_view name) {
  const Registry &r = registry();
  auto it = r.byName.find(std::string(name));
  return it == r.byName.end() ? nullptr : &r.functions[it->second];
}

const BuiltinInfo *findMethod(TypeKind receiver, std::string_view name) {
  const Registry &r = registry();
  auto it = r.methodIndex.find({receiver, std::string(name)});
  return it == r.methodIndex.end() ? nullptr : &r.methods[it->second].second;
}

const std::vector<BuiltinInfo> &allBuiltins() { return registry().functions; }

const std::vector<std::pair<TypeKind, BuiltinInfo>> &allMethods() { return registry().methods; }

bool testing::editBuiltin(std::string_view name, const std::function<void(BuiltinInfo &)> &edit) {
  Registry &r = mutableRegistry();
  if (auto it = r.byName.find(std::string(name)); it != r.byName.end()) {
    edit(r.functions[it->second]);
    return true;
  }
  for (auto &[kind, m] : r.methods)
    if (std::string(typeKindName(kind)) + "." + m.name == name) {
      edit(m);
      return true;
    }
  return false;
}

// ---- the entries' builders -------------------------------------------------------------------------------

BuiltinInfo &BuiltinInfo::inGraph(std::string r, std::string op, std::vector<std::pair<std::string, std::string>> attrs) {
  graph = {std::move(r), std::move(op), std::move(attrs)};
  return *this;
}

BuiltinInfo &BuiltinInfo::inKernel(std::string r, std::string op, std::vector<std::pair<std::string, std::string>> attrs) {
  kernel = {std::move(r), std::move(op), std::move(attrs)};
  return *this;
}

BuiltinInfo &BuiltinInfo::inHost(std::string r) {
  host = {std::move(r), {}, {}};
  return *this;
}

BuiltinInfo &BuiltinInfo::composes(std::string body) {
  graph = {"composite", {}, {}};
  composite = std::move(body);
  return *this;
}

BuiltinInfo &BuiltinInfo::onNumbers(double (*f)(double), NumberRule::Result result) {
  number = NumberRule{f, result};
  return *this;
}

BuiltinInfo &BuiltinInfo::growsReceiver(Grows g) {
  grows = g;
  return *this;
}

BuiltinInfo &BuiltinInfo::example(std::string call, unsigned ctx) {
  examples.push_back({ctx & contexts, std::move(call)});
  return *this;
}

BuiltinInfo &BuiltinInfo::notYet(unsigned ctx, std::string why) {
  pending.push_back({ctx, std::move(why)});
  return *this;
}

BuiltinInfo &BuiltinInfo::asValue() {
  isValue = true;
  return *this;
}

const char *contextPhrase(unsigned context) {
  return context == InGraph ? "graph functions" : context == InKernel ? "kernels" : "host code";
}

const std::string *BuiltinInfo::pendingIn(unsigned context) const {
  for (auto &[ctx, why] : pending)
    if (ctx & context) return &why;
  return nullptr;
}

std::optional<NumberResult> applyToNumber(const BuiltinInfo &b, double x, bool xIsInt) {
  if (!b.number) return std::nullopt;
  double r = b.number->f(x);
  switch (b.number->result) {
  case NumberRule::Result::Float: return NumberResult{r, false};
  case NumberRule::Result::ToInt: return NumberResult{xIsInt ? x : r, true};
  case NumberRule::Result::KeepKind: return NumberResult{r, xIsInt};
  }
  return std::nullopt;
}

bool isBuiltinNamespace(std::string_view name) {
  const BuiltinInfo *b = findBuiltin(name);
  return b && b->isNamespace;
}

} // namespace tsr::sema
