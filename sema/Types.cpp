#include "sema/Types.h"

#include "sema/Builtins.h"

#include <cmath>
#include <sstream>

namespace tsr::sema {

std::string_view typeKindName(TypeKind k) {
  static constexpr std::string_view names[] = {
#define X(k) #k,
      TSR_TYPE_KINDS(X)
#undef X
  };
  return names[static_cast<size_t>(k)];
}

namespace T {
static TypeRef make(Type t) { return std::make_shared<const Type>(std::move(t)); }
static Type of(TypeKind k) { Type t; t.kind = k; return t; }

TypeRef unknown() { static TypeRef u = make(of(TypeKind::Unknown)); return u; }
TypeRef none() { static TypeRef n = make(of(TypeKind::None)); return n; }
TypeRef boolean(std::optional<bool> v) { Type t = of(TypeKind::Bool); t.boolValue = v; return make(std::move(t)); }
TypeRef integer(std::optional<Dim> v) { Type t = of(TypeKind::Int); t.intValue = std::move(v); return make(std::move(t)); }
TypeRef floating(std::optional<double> v) { Type t = of(TypeKind::Float); t.floatValue = v; return make(std::move(t)); }
TypeRef str(std::optional<std::string> v) { Type t = of(TypeKind::Str); t.strValue = std::move(v); return make(std::move(t)); }
TypeRef dtypeVal(DType d, Policies p) { Type t = of(TypeKind::DTypeVal); t.dtype = d; t.policies = p; return make(std::move(t)); }
TypeRef tensor(std::vector<Dim> dims, DType d, Policies p) {
  Type t = of(TypeKind::Tensor); t.dims = std::move(dims); t.dtype = d; t.policies = p; return make(std::move(t));
}
TypeRef tensorUnknownRank(DType d) { Type t = of(TypeKind::Tensor); t.rankKnown = false; t.dtype = d; return make(std::move(t)); }
TypeRef scalar(DType d, Policies p) { return tensor({}, d, p); }
TypeRef tile(std::vector<Dim> dims, DType d) { Type t = of(TypeKind::Tile); t.dims = std::move(dims); t.dtype = d; return make(std::move(t)); }
TypeRef view(std::vector<Dim> dims, DType d, std::string root) {
  Type t = of(TypeKind::View); t.dims = std::move(dims); t.dtype = d; t.name = std::move(root); return make(std::move(t));
}
TypeRef tuple(std::vector<TypeRef> elems) { Type t = of(TypeKind::Tuple); t.elems = std::move(elems); return make(std::move(t)); }
TypeRef list(std::vector<TypeRef> elems) { Type t = of(TypeKind::List); t.elems = std::move(elems); return make(std::move(t)); }
TypeRef listOf(TypeRef elem) { Type t = of(TypeKind::List); t.elem = std::move(elem); t.lengthKnown = false; return make(std::move(t)); }
TypeRef dict(std::vector<std::pair<std::string, TypeRef>> fields) { Type t = of(TypeKind::Dict); t.fields = std::move(fields); return make(std::move(t)); }
TypeRef dictOf(TypeRef value) { Type t = of(TypeKind::Dict); t.elem = std::move(value); t.lengthKnown = false; return make(std::move(t)); }
TypeRef function(const FunctionInfo *fn) { Type t = of(TypeKind::Function); t.fn = fn; return make(std::move(t)); }
TypeRef builtin(const BuiltinInfo *b, TypeRef self) { Type t = of(TypeKind::Builtin); t.builtin = b; t.self = std::move(self); return make(std::move(t)); }
TypeRef module(const ModuleInfo *m) { Type t = of(TypeKind::Module); t.module = m; return make(std::move(t)); }
TypeRef lambda(const ast::Lambda *l) { Type t = of(TypeKind::Lambda); t.lambda = l; return make(std::move(t)); }
TypeRef range(bool tileRange) {
  Type t = of(TypeKind::Range);
  t.name = tileRange ? "tile.range" : "range"; // as typeStr prints it
  t.kernelRange = tileRange;
  return make(std::move(t));
}
TypeRef key() { static TypeRef k = make(of(TypeKind::Key)); return k; }
TypeRef config(std::vector<std::pair<std::string, Dim>> knobs) { Type t = of(TypeKind::Config); t.knobs = std::move(knobs); return make(std::move(t)); }
TypeRef schedule(std::vector<std::pair<std::string, Dim>> knobs) { Type t = of(TypeKind::Schedule); t.knobs = std::move(knobs); return make(std::move(t)); }
TypeRef opaque(std::string what) { Type t = of(TypeKind::Opaque); t.name = std::move(what); return make(std::move(t)); }
TypeRef kvcache(std::vector<Dim> dims, DType d, Policies p, bool rolling) {
  Type t = of(TypeKind::KVCache);
  t.dims = std::move(dims);
  t.dtype = d;
  t.policies = p;
  t.rolling = rolling;
  return make(std::move(t));
}
TypeRef withDims(const TypeRef &t, std::vector<Dim> dims) { Type c = *t; c.dims = std::move(dims); c.rankKnown = true; return make(std::move(c)); }
TypeRef withDType(const TypeRef &t, DType d, Policies p) { Type c = *t; c.dtype = d; c.policies = p; return make(std::move(c)); }
} // namespace T

std::string dimStr(const Dim &d) {
  // Unknown parts are internal names ("?3"): what the user can act on is that it is not known.
  if (d.hasUnknown()) return "?";
  if (auto c = d.constantValue()) return std::to_string(*c);
  return "\"" + d.str() + "\"";
}

std::string shapeStr(const std::vector<Dim> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dimStr(dims[i]);
  return s + "]";
}

static std::string dtypeWithPolicies(DType d, const Policies &p) { return std::string(dtypeName(d)) + p.str(); }

static std::string shaped(std::string_view head, const Type &t) {
  std::string s(head);
  s += "[";
  if (!t.rankKnown) s += "..., ";
  for (const Dim &d : t.dims) s += dimStr(d) + ", ";
  s += dtypeWithPolicies(t.dtype, t.policies) + "]";
  return s;
}

static std::string fmtFloat(double v) {
  std::ostringstream ss;
  ss << v;
  std::string s = ss.str();
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string typeStr(const Type &t) {
  switch (t.kind) {
  case TypeKind::Unknown: return "unknown";
  case TypeKind::None: return "None";
  case TypeKind::Bool: return "bool";
  case TypeKind::Int: return "int";
  case TypeKind::Float: return "float";
  case TypeKind::Str: return "str";
  case TypeKind::DTypeVal: return "dtype " + dtypeWithPolicies(t.dtype, t.policies);
  case TypeKind::Tensor: return shaped("Tensor", t);
  case TypeKind::Tile: return shaped("Tile", t);
  case TypeKind::View: return shaped("View", t);
  case TypeKind::KVCache: return shaped("KVCache", t) + (t.rolling ? " @rolling_window" : "");
  case TypeKind::Tuple: case TypeKind::List: {
    std::string s = t.kind == TypeKind::Tuple ? "tuple[" : "list[";
    if (!t.lengthKnown) return s + (t.elem ? typeStr(*t.elem) : "unknown") + ", ...]";
    for (size_t i = 0; i < t.elems.size(); ++i) s += (i ? ", " : "") + typeStr(*t.elems[i]);
    return s + "]";
  }
  case TypeKind::Dict: {
    if (!t.lengthKnown) return "dict[str, " + (t.elem ? typeStr(*t.elem) : "unknown") + "]";
    std::string s = "dict[";
    for (size_t i = 0; i < t.fields.size(); ++i) s += (i ? ", " : "") + t.fields[i].first + ": " + typeStr(*t.fields[i].second);
    return s + "]";
  }
  case TypeKind::Function: {
    std::string base = t.fn ? std::string(functionKindWord(t.fn->kind)) + " `" + t.fn->name + "`" : "function";
    switch (t.transform) {
    case Transform::Grad: return "grad of " + base;
    case Transform::ValueAndGrad: return "value_and_grad of " + base;
    case Transform::Checkpoint: return "checkpointed " + base;
    case Transform::Vmap: return "vmap of " + base;
    case Transform::Pullback: return "pullback";
    default: break;
    }
    if (t.launchGrid) return base + " launched on a grid";
    return base;
  }
  case TypeKind::Builtin: return t.builtin ? "builtin `" + t.builtin->name + "`" : "builtin";
  case TypeKind::Module: return t.module ? "module `" + t.module->name + "`" : "module";
  case TypeKind::Lambda: return "lambda";
  case TypeKind::Range: return t.name;
  case TypeKind::Key: return "random key";
  case TypeKind::Config: case TypeKind::Schedule: {
    std::string s = t.kind == TypeKind::Config ? "config(" : "Schedule(";
    for (size_t i = 0; i < t.knobs.size(); ++i) s += (i ? ", " : "") + t.knobs[i].first + "=" + t.knobs[i].second.str();
    return s + ")";
  }
  case TypeKind::Opaque: return t.name;
  }
  return "?";
}
std::string typeStr(const TypeRef &t) { return t ? typeStr(*t) : "unknown"; }

bool isRuntimeDim(const Dim &d) {
  if (d.hasUnknown() || d.isConstant()) return false;
  std::map<std::string, Dim> ones;
  for (const auto &s : d.symbols()) ones[s] = Dim::constant(1);
  return !d.substitute(ones).isConstant();
}

bool provablyDifferent(const Dim &a, const Dim &b) {
  if (a.hasUnknown() || b.hasUnknown()) return false;
  Dim diff = a - b;
  if (diff.isConstant()) return diff.constantValue() != std::optional<int64_t>(0) && !(diff == Dim::constant(0));
  // Opaque atoms (min(a, b), non-monomial quotients) survive substituting every named symbol.
  std::map<std::string, Dim> ones;
  for (const auto &s : diff.symbols()) ones[s] = Dim::constant(1);
  if (!diff.substitute(ones).isConstant()) return false;
  return true;
}

bool sameType(const TypeRef &a, const TypeRef &b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind) return false;
  const Type &x = *a, &y = *b;
  switch (x.kind) {
  case TypeKind::Tensor: case TypeKind::Tile: case TypeKind::View:
    return x.rankKnown == y.rankKnown && x.dims == y.dims && x.dtype == y.dtype && x.policies == y.policies;
  case TypeKind::DTypeVal: return x.dtype == y.dtype && x.policies == y.policies;
  case TypeKind::KVCache: return x.dims == y.dims && x.dtype == y.dtype && x.policies == y.policies && x.rolling == y.rolling;
  case TypeKind::Tuple: case TypeKind::List:
    if (x.lengthKnown != y.lengthKnown || x.elems.size() != y.elems.size()) return false;
    for (size_t i = 0; i < x.elems.size(); ++i) if (!sameType(x.elems[i], y.elems[i])) return false;
    return x.lengthKnown || sameType(x.elem, y.elem);
  case TypeKind::Dict:
    if (x.lengthKnown != y.lengthKnown || x.fields.size() != y.fields.size()) return false;
    for (size_t i = 0; i < x.fields.size(); ++i)
      if (x.fields[i].first != y.fields[i].first || !sameType(x.fields[i].second, y.fields[i].second)) return false;
    return x.lengthKnown || sameType(x.elem, y.elem);
  case TypeKind::Int: return x.intValue == y.intValue;
  case TypeKind::Bool: return x.boolValue == y.boolValue;
  case TypeKind::Float: return x.floatValue == y.floatValue || (x.floatValue && y.floatValue && std::isnan(*x.floatValue) && std::isnan(*y.floatValue));
  case TypeKind::Str: return x.strValue == y.strValue;
  case TypeKind::Function: return x.fn == y.fn && x.transform == y.transform && !x.launchGrid == !y.launchGrid;
  case TypeKind::Builtin: return x.builtin == y.builtin;
  case TypeKind::Module: return x.module == y.module;
  case TypeKind::Lambda: return x.lambda == y.lambda;
  default: return true;
  }
}

TypeRef join(const TypeRef &a, const TypeRef &b) {
  if (!a) return b;
  if (!b) return a;
  if (sameType(a, b)) return a;
  if (a->kind != b->kind) {
    // A Python number and a 0-d tensor (or a tensor and anything numeric) do not join.
    if (a->kind == TypeKind::Int && b->kind == TypeKind::Float) return T::floating();
    if (a->kind == TypeKind::Float && b->kind == TypeKind::Int) return T::floating();
    return T::unknown();
  }
  const Type &x = *a, &y = *b;
  switch (x.kind) {
  case TypeKind::Int: return T::integer();
  case TypeKind::Bool: return T::boolean();
  case TypeKind::Float: return T::floating();
  case TypeKind::Str: return T::str();
  case TypeKind::Tensor: case TypeKind::Tile: {
    if (x.dtype != y.dtype || !x.rankKnown || !y.rankKnown || x.dims.size() != y.dims.size())
      return x.dtype == y.dtype && x.kind == TypeKind::Tensor ? T::tensorUnknownRank(x.dtype) : T::unknown();
    std::vector<Dim> dims;
    for (size_t i = 0; i < x.dims.size(); ++i) dims.push_back(x.dims[i] == y.dims[i] ? x.dims[i] : Dim::unknown());
    Type c = x;
    c.dims = std::move(dims);
    if (x.policies != y.policies) c.policies = {};
    return std::make_shared<const Type>(std::move(c));
  }
  case TypeKind::Tuple: case TypeKind::List: {
    if (x.lengthKnown && y.lengthKnown && x.elems.size() == y.elems.size()) {
      std::vector<TypeRef> es;
      for (size_t i = 0; i < x.elems.size(); ++i) es.push_back(join(x.elems[i], y.elems[i]));
      return x.kind == TypeKind::Tuple ? T::tuple(std::move(es)) : T::list(std::move(es));
    }
    TypeRef e;
    for (auto &t : x.elems) e = join(e, t);
    for (auto &t : y.elems) e = join(e, t);
    if (x.elem) e = join(e, x.elem);
    if (y.elem) e = join(e, y.elem);
    Type c = x;
    c.elems.clear();
    c.elem = e ? e : T::unknown();
    c.lengthKnown = false;
    return std::make_shared<const Type>(std::move(c));
  }
  case TypeKind::Dict: {
    if (x.lengthKnown && y.lengthKnown && x.fields.size() == y.fields.size()) {
      std::vector<std::pair<std::string, TypeRef>> fs;
      for (size_t i = 0; i < x.fields.size(); ++i) {
        if (x.fields[i].first != y.fields[i].first) return T::dictOf(T::unknown());
        fs.push_back({x.fields[i].first, join(x.fields[i].second, y.fields[i].second)});
      }
      return T::dict(std::move(fs));
    }
    return T::dictOf(T::unknown());
  }
  default: return T::unknown();
  }
}

} // namespace tsr::sema
