// Calls of vmap(f, in_axes, out_axes) (spec 14, jax.vmap): in_axes matched to the positional
// arguments as a pytree prefix, the mapped axes removed to give f's example arguments, the mapped
// sizes compared, and the batch axis inserted into f's result at out_axes.
#include "sema/Checker.h"

namespace tsr::sema {

namespace {

/// The source of a spec for messages: `(None, 0)`, `0`, `None`.
std::string specText(const TypeRef &t) {
  switch (t->kind) {
  case TypeKind::None: return "None";
  case TypeKind::Int: return t->intValue ? t->intValue->str() : "int";
  case TypeKind::Tuple: case TypeKind::List: {
    std::string s = t->is(TypeKind::Tuple) ? "(" : "[";
    for (size_t i = 0; i < t->elems.size(); ++i) s += (i ? ", " : "") + specText(t->elems[i]);
    if (t->is(TypeKind::Tuple) && t->elems.size() == 1) s += ",";
    return s + (t->is(TypeKind::Tuple) ? ")" : "]");
  }
  case TypeKind::Dict: {
    std::string s = "{";
    for (size_t i = 0; i < t->fields.size(); ++i) s += (i ? ", " : "") + ("\"" + t->fields[i].first + "\": ") + specText(t->fields[i].second);
    return s + "}";
  }
  default: return typeStr(t);
  }
}

/// `f`, `grad` of `f`, the lambda: the mapped function as messages name it.
std::string functionText(const TypeRef &f) {
  static const char *names[] = {"", "grad", "value_and_grad", "vjp", "pullback", "jvp", "checkpoint", "vmap"};
  if (f->transform != Transform::None && f->inner) return "`" + std::string(names[static_cast<int>(f->transform)]) + "` of " + functionText(f->inner);
  if (f->fn) return "`" + f->fn->name + "`";
  if (f->is(TypeKind::Lambda)) return "the lambda";
  return typeStr(f);
}

std::string axesText(int64_t n) { return std::to_string(n) + (n == 1 ? " axis" : " axes"); }

struct VmapMatch {
  DiagnosticEngine &D;
  std::string which; // "in_axes" or "out_axes"
  bool failed = false;
  // The first mapped size and where it came from.
  std::optional<Dim> size;
  std::string sizeWhat;

  void mismatch(const TypeRef &spec, const std::string &what, SourceRange at) {
    if (failed) return;
    failed = true;
    D.report(DiagKind::VmapAxes, at, {"`" + which + "` " + specText(spec), what});
  }

  /// `t` with the axis of every tensor leaf that `spec` maps removed (in_axes).
  TypeRef unmap(const TypeRef &t, const TypeRef &spec, const std::string &path, SourceRange at) {
    if (failed || t->is(TypeKind::Unknown) || spec->is(TypeKind::None)) return t;
    if (spec->is(TypeKind::Int)) {
      int64_t a = *spec->intValue->constantValue();
      switch (t->kind) {
      case TypeKind::Tensor: {
        if (!t->rankKnown) return T::unknown();
        int64_t r = static_cast<int64_t>(t->rank());
        int64_t n = a < 0 ? a + r : a;
        if (n < 0 || n >= r) {
          mismatch(spec, path + " (" + typeStr(t) + "), which has " + axesText(r), at);
          return T::unknown();
        }
        Dim d = t->dims[static_cast<size_t>(n)];
        std::string what = path + " (axis " + std::to_string(n) + ")";
        if (!size) {
          size = d;
          sizeWhat = what;
        } else if (provablyDifferent(*size, d)) {
          failed = true;
          D.report(DiagKind::VmapSize, at, {what, d.str(), sizeWhat, size->str()});
          return T::unknown();
        }
        std::vector<Dim> dims = t->dims;
        dims.erase(dims.begin() + n);
        return T::withDims(t, std::move(dims));
      }
      case TypeKind::Tuple: case TypeKind::List: {
        if (!t->lengthKnown) return T::unknown();
        Type c = *t;
        for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = unmap(c.elems[i], spec, path + "[" + std::to_string(i) + "]", at);
        return std::make_shared<const Type>(std::move(c));
      }
      case TypeKind::Dict: {
        if (!t->lengthKnown) return T::unknown();
        Type c = *t;
        for (auto &f : c.fields) f.second = unmap(f.second, spec, path + "[\"" + f.first + "\"]", at);
        return std::make_shared<const Type>(std::move(c));
      }
      case TypeKind::None: return t;
      default:
        mismatch(spec, path + " (" + typeStr(t) + "), which is not a tensor", at);
        return T::unknown();
      }
    }
    // A tuple, list or dict of specs: the argument must have that structure.
    bool seq = spec->is(TypeKind::Tuple) || spec->is(TypeKind::List);
    bool fits = seq ? (t->is(TypeKind::Tuple) || t->is(TypeKind::List)) && t->lengthKnown && t->elems.size() == spec->elems.size()
                    : t->is(TypeKind::Dict) && t->lengthKnown && t->fields.size() == spec->fields.size();
    if (fits && !seq)
      for (auto &f : spec->fields) {
        const std::string &k = f.first;
        fits = fits && std::any_of(t->fields.begin(), t->fields.end(), [&](auto &g) { return g.first == k; });
      }
    if (!fits) {
      mismatch(spec, "the structure of " + path + " (" + typeStr(t) + ")", at);
      return T::unknown();
    }
    Type c = *t;
    if (seq) {
      for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = unmap(c.elems[i], spec->elems[i], path + "[" + std::to_string(i) + "]", at);
    } else {
      for (auto &f : c.fields)
        for (auto &g : spec->fields)
          if (g.first == f.first) f.second = unmap(f.second, g.second, path + "[\"" + f.first + "\"]", at);
    }
    return std::make_shared<const Type>(std::move(c));
  }

  /// `t` with the batch axis of size B inserted into every leaf that `spec` maps (out_axes).
  TypeRef remap(const TypeRef &t, const TypeRef &spec, const Dim &B, const std::string &path, SourceRange at) {
    if (failed || t->is(TypeKind::Unknown) || spec->is(TypeKind::None)) return t;
    if (spec->is(TypeKind::Int)) {
      int64_t a = *spec->intValue->constantValue();
      switch (t->kind) {
      case TypeKind::Tensor: {
        if (!t->rankKnown) return t;
        int64_t r = static_cast<int64_t>(t->rank()) + 1;
        int64_t n = a < 0 ? a + r : a;
        if (n < 0 || n >= r) {
          mismatch(spec, path + " (" + typeStr(t) + "), which has " + axesText(r - 1), at);
          return T::unknown();
        }
        std::vector<Dim> dims = t->dims;
        dims.insert(dims.begin() + n, B);
        return T::withDims(t, std::move(dims));
      }
      case TypeKind::Float: return T::tensor({B}, DType::F32);
      case TypeKind::Int: return T::tensor({B}, DType::I64);
      case TypeKind::Bool: return T::tensor({B}, DType::Bool);
      case TypeKind::Tuple: case TypeKind::List: {
        if (!t->lengthKnown) return T::unknown();
        Type c = *t;
        for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = remap(c.elems[i], spec, B, path + "[" + std::to_string(i) + "]", at);
        return std::make_shared<const Type>(std::move(c));
      }
      case TypeKind::Dict: {
        if (!t->lengthKnown) return T::unknown();
        Type c = *t;
        for (auto &f : c.fields) f.second = remap(f.second, spec, B, path + "[\"" + f.first + "\"]", at);
        return std::make_shared<const Type>(std::move(c));
      }
      case TypeKind::None: return t;
      default:
        mismatch(spec, path + " (" + typeStr(t) + "), which is not a tensor", at);
        return T::unknown();
      }
    }
    bool seq = spec->is(TypeKind::Tuple) || spec->is(TypeKind::List);
    bool fits = seq ? (t->is(TypeKind::Tuple) || t->is(TypeKind::List)) && t->lengthKnown && t->elems.size() == spec->elems.size()
                    : t->is(TypeKind::Dict) && t->lengthKnown && t->fields.size() == spec->fields.size();
    if (!fits) {
      mismatch(spec, "the structure of " + path + " (" + typeStr(t) + ")", at);
      return T::unknown();
    }
    Type c = *t;
    if (seq) {
      for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = remap(c.elems[i], spec->elems[i], B, path + "[" + std::to_string(i) + "]", at);
    } else {
      for (auto &f : c.fields) {
        bool found = false;
        for (auto &g : spec->fields)
          if (g.first == f.first) { f.second = remap(f.second, g.second, B, path + "[\"" + f.first + "\"]", at); found = true; }
        if (!found) { mismatch(spec, "the structure of " + path + " (" + typeStr(t) + ")", at); return T::unknown(); }
      }
    }
    return std::make_shared<const Type>(std::move(c));
  }
};

} // namespace

TypeRef FunctionChecker::callVmap(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef inner = callee->inner ? callee->inner : T::unknown();
  TypeRef inAxes = callee->inAxes ? callee->inAxes : T::integer(Dim::constant(0));
  TypeRef outAxes = callee->outAxes ? callee->outAxes : T::integer(Dim::constant(0));
  if (args.hasSplat) return T::unknown();
  std::string fname = functionText(inner);
  VmapMatch m{D, "in_axes"};
  // A tuple or list of specs has one per positional argument; an int or None applies to all.
  std::vector<TypeRef> specs;
  if (inAxes->is(TypeKind::Tuple) || inAxes->is(TypeKind::List)) {
    if (inAxes->elems.size() != args.positional.size()) {
      m.mismatch(inAxes, "the " + std::to_string(args.positional.size()) + " positional argument(s) of " + fname, at);
      return T::unknown();
    }
    specs = inAxes->elems;
  } else if (inAxes->is(TypeKind::Dict)) {
    m.mismatch(inAxes, "the positional arguments of " + fname + " (a dict of axes is the spec of one argument: put it in a tuple)", at);
    return T::unknown();
  } else {
    specs.assign(args.positional.size(), inAxes);
  }
  Args example = args;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    example.positional[i].type = m.unmap(args.positional[i].type, specs[i], "argument " + std::to_string(i), args.positional[i].range);
    if (m.failed) return T::unknown();
  }
  if (!m.size) {
    // jax.vmap: "vmap must have at least one non-None value in in_axes". Unknown arguments may
    // still be mapped.
    bool unknownArg = false;
    for (auto &a : args.positional) unknownArg |= a.type->is(TypeKind::Unknown) || (a.type->is(TypeKind::Tensor) && !a.type->rankKnown);
    if (!unknownArg) m.mismatch(inAxes, "any tensor of the arguments of " + fname + ": vmap needs at least one mapped axis", at);
    return T::unknown();
  }
  TypeRef r = callValue(inner, example, at, calleeRange);
  VmapMatch o{D, "out_axes"};
  return o.remap(r, outAxes, *m.size, "the result", at);
}

} // namespace tsr::sema
