// The host builtins (spec 9): print, len, range, enumerate, zip, the conversions, list/tuple/dict,
// sorted, reversed, time, progress, the files (load, save, load_csv, load_bytes, encode_bytes, decode_bytes, write_text), to_host, item,
// cdiv, and the methods of dicts and lists.
#include "sema/builtins/Rules.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace tsr::sema::builtins {

namespace {

// ---- host builtins (spec 9) -----------------------------------------------------------------------

// print(*values, sep=" ", end="\n", flush=False) -> None.
TypeRef rulePrint(CallSite &s) {
  for (auto &k : s.keywords) {
    if (k.keyword == "sep" || k.keyword == "end") {
      if (!isUnknown(k.type) && !k.type->is(K::Str) && !k.type->is(K::None)) s.wrongKind(&k, "a string", k.keyword);
    } else if (k.keyword == "flush") {
      if (!isUnknown(k.type) && !k.type->is(K::Bool)) s.wrongKind(&k, "a bool", k.keyword);
    } else {
      s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
    }
  }
  return T::none();
}

size_t utf8Length(const std::string &s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// len(x): of a tuple, list, dict, string (constant when known), range, or tensor (its first
// extent; a 0-d tensor has no length).
TypeRef ruleLen(CallSite &s) {
  if (!s.expect({"x"}, 1) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (isUnknown(a)) return T::integer();
  const Type &t = *a->type;
  auto n = [](size_t v) { return T::integer(Dim::constant(static_cast<int64_t>(v))); };
  switch (t.kind) {
  case K::Tuple: case K::List: return t.lengthKnown ? n(t.elems.size()) : T::integer();
  case K::Dict: return t.lengthKnown ? n(t.fields.size()) : T::integer();
  case K::Str: return t.strValue ? n(utf8Length(*t.strValue)) : T::integer();
  case K::Range:
    if (t.elems.size() == 3) return T::integer(rangeExtent(dimOf(*t.elems[0]), dimOf(*t.elems[1]), intConstOf(*t.elems[2])));
    return T::integer();
  case K::Tensor:
    if (!t.rankKnown) return T::integer();
    if (!t.dims.empty()) return T::integer(t.dims[0]);
    break;
  default: break;
  }
  s.wrongKind(a, "a tuple, list, dict, string or tensor of at least one dimension", "x");
  return T::unknown();
}

// range(stop), range(start, stop, step=1): ints (Python's range; a zero step is an error).
// The Range type records its bounds as three Int elements (start, stop, step) for len().
TypeRef ruleRange(CallSite &s) {
  if (!s.expect({"start", "stop", "step"}, 1) || !noKeywords(s)) return T::unknown();
  const ArgInfo *start = s.args.size() >= 2 ? &s.args[0] : nullptr;
  const ArgInfo *stop = s.args.size() >= 2 ? &s.args[1] : &s.args[0];
  const ArgInfo *step = s.args.size() >= 3 ? &s.args[2] : nullptr;
  std::vector<TypeRef> bounds;
  for (auto [a, n] : {std::pair{start, "start"}, std::pair{stop, "stop"}, std::pair{step, "step"}}) {
    if (!a) {
      bounds.push_back(T::integer(Dim::constant(std::string_view(n) == "step" ? 1 : 0)));
      continue;
    }
    if (!isUnknown(a) && !intLike(*a->type)) {
      s.wrongKind(a, "an int", n);
      return T::unknown();
    }
    const Type &t = *a->type;
    if (t.is(K::Int)) bounds.push_back(a->type);
    else if (auto c = intConstOf(t)) bounds.push_back(T::integer(Dim::constant(*c)));
    else bounds.push_back(T::integer()); // Unknown, or a run-time int (a 0-d tensor)
  }
  if (step && intConstOf(*step->type) == std::optional<int64_t>(0)) {
    s.wrongKind(step, "a nonzero step", "step");
    return T::unknown();
  }
  Type r = *T::range(false);
  r.elems = std::move(bounds);
  return makeType(std::move(r));
}

// enumerate(iterable, start=0): pairs (index, element); a tuple of pairs for a tuple of known
// length (so that graph functions unroll loops over it), a list otherwise.
TypeRef ruleEnumerate(CallSite &s) {
  if (!s.expect({"iterable", "start"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable"), *st = s.arg(1, "start");
  std::optional<int64_t> start = 0;
  if (given(st)) {
    if (!isUnknown(st) && !intLike(*st->type)) {
      s.wrongKind(st, "an int", "start");
      return T::unknown();
    }
    start = intConstOf(*st->type);
  }
  if (isUnknown(a)) return T::listOf(T::tuple({T::integer(), T::unknown()}));
  if (auto es = knownElems(*a->type)) {
    std::vector<TypeRef> pairs;
    for (size_t i = 0; i < es->size(); ++i)
      pairs.push_back(T::tuple({start ? T::integer(Dim::constant(*start + static_cast<int64_t>(i))) : T::integer(), (*es)[i]}));
    return a->type->is(K::Tuple) ? T::tuple(std::move(pairs)) : T::list(std::move(pairs));
  }
  TypeRef e = iterElem(s, a);
  if (e->is(K::Unknown) && !a->type->is(K::Unknown) && !(a->type->is(K::List) || a->type->is(K::Tuple) || a->type->is(K::Dict)))
    return T::unknown();
  return T::listOf(T::tuple({T::integer(), e}));
}

// zip(*iterables, strict=False): tuples of corresponding elements, as long as the shortest;
// a tuple of tuples when all are tuples of known length, a list otherwise.
TypeRef ruleZip(CallSite &s) {
  for (auto &k : s.keywords)
    if (k.keyword != "strict") s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
  bool allKnown = true, allTuples = true;
  size_t n = SIZE_MAX;
  for (auto &a : s.args) {
    auto es = isUnknown(a.type) ? std::nullopt : knownElems(*a.type);
    if (es) n = std::min(n, es->size());
    else allKnown = false;
    allTuples &= a.type->is(K::Tuple);
  }
  if (s.args.empty()) return T::list({});
  if (allKnown) {
    std::vector<TypeRef> rows;
    for (size_t i = 0; i < n; ++i) {
      std::vector<TypeRef> row;
      for (auto &a : s.args) row.push_back((*knownElems(*a.type))[i]);
      rows.push_back(T::tuple(std::move(row)));
    }
    return allTuples ? T::tuple(std::move(rows)) : T::list(std::move(rows));
  }
  std::vector<TypeRef> row;
  for (auto &a : s.args) {
    TypeRef e = iterElem(s, &a);
    if (e->is(K::Unknown) && !isUnknown(a.type) && !(a.type->is(K::List) || a.type->is(K::Tuple) || a.type->is(K::Dict)))
      return T::unknown();
    row.push_back(e);
  }
  return T::listOf(T::tuple(std::move(row)));
}

/// Whether a tensor argument of int()/float()/bool()/item() has one element (ShapeMismatch when
/// its element count is a known constant other than 1).
bool oneElement(CallSite &s, const ArgInfo *a) {
  const Type &t = *a->type;
  if (!t.rankKnown) return true;
  auto c = product(t.dims).constantValue();
  if (c && *c != 1) {
    s.diags->report(DiagKind::ShapeMismatch, a->range, {tick(s.name) + " needs a tensor with one element", shapeStr(t.dims), "[]"});
    return false;
  }
  return true;
}

std::optional<double> parseFloat(const std::string &text) {
  std::string t;
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '_') t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "inf" || t == "+inf" || t == "infinity" || t == "+infinity") return INFINITY;
  if (t == "-inf" || t == "-infinity") return -INFINITY;
  if (t == "nan" || t == "+nan" || t == "-nan") return NAN;
  if (t.empty()) return std::nullopt;
  char *end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

// int(x): Python's (truncation toward zero for floats; constants fold; a one-element tensor's
// value); float(x): Python's (strings such as "inf" fold); bool(x): truthiness; str(x).
TypeRef ruleInt(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::integer(Dim::constant(0));
  if (isUnknown(a)) return T::integer();
  const Type &t = *a->type;
  switch (t.kind) {
  case K::Int: return a->type;
  case K::Bool: return t.boolValue ? T::integer(Dim::constant(*t.boolValue ? 1 : 0)) : T::integer();
  case K::Float:
    if (t.floatValue && std::isfinite(*t.floatValue) && std::fabs(*t.floatValue) < 9.0e18)
      return T::integer(Dim::constant(static_cast<int64_t>(*t.floatValue)));
    return T::integer();
  case K::Str:
    if (t.strValue) {
      char *end = nullptr;
      long long v = std::strtoll(t.strValue->c_str(), &end, 10);
      if (!t.strValue->empty() && end == t.strValue->c_str() + t.strValue->size()) return T::integer(Dim::constant(v));
    }
    return T::integer();
  case K::Tensor: case K::Tile:
    return oneElement(s, a) ? T::integer() : T::unknown();
  default: break;
  }
  s.wrongKind(a, "a number, a string or a one-element tensor", "x");
  return T::unknown();
}

TypeRef ruleFloat(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::floating(0.0);
  if (isUnknown(a)) return T::floating();
  const Type &t = *a->type;
  switch (t.kind) {
  case K::Float: return a->type;
  case K::Int: case K::Bool: return T::floating(numberOf(t));
  case K::Str:
    if (t.strValue) {
      if (auto v = parseFloat(*t.strValue)) return T::floating(*v);
      s.wrongKind(a, "a string that spells a number", "x");
      return T::unknown();
    }
    return T::floating();
  case K::Tensor: case K::Tile:
    return oneElement(s, a) ? T::floating() : T::unknown();
  default: break;
  }
  s.wrongKind(a, "a number, a string or a one-element tensor", "x");
  return T::unknown();
}

TypeRef ruleBool(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::boolean(false);
  if (isUnknown(a)) return T::boolean();
  const Type &t = *a->type;
  switch (t.kind) {
  case K::Bool: return a->type;
  case K::None: return T::boolean(false);
  case K::Int: case K::Float: {
    auto v = numberOf(t);
    return v ? T::boolean(*v != 0) : T::boolean();
  }
  case K::Str: return t.strValue ? T::boolean(!t.strValue->empty()) : T::boolean();
  case K::Tuple: case K::List: return t.lengthKnown ? T::boolean(!t.elems.empty()) : T::boolean();
  case K::Dict: return t.lengthKnown ? T::boolean(!t.fields.empty()) : T::boolean();
  case K::Tensor: case K::Tile: return oneElement(s, a) ? T::boolean() : T::unknown();
  default: return T::boolean(true);
  }
}

TypeRef ruleStr(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::str(std::string());
  if (isUnknown(a)) return T::str();
  const Type &t = *a->type;
  if (t.is(K::Str)) return a->type;
  if (auto c = intConstOf(t); c && t.is(K::Int)) return T::str(std::to_string(*c));
  if (t.is(K::Bool) && t.boolValue) return T::str(*t.boolValue ? "True" : "False");
  if (t.is(K::None)) return T::str("None");
  return T::str();
}

// time() -> float: seconds since the epoch.
TypeRef ruleTime(CallSite &s) {
  if (!s.expect({}, 0)) return T::unknown();
  return T::floating();
}

// progress(iterable, desc=None, total=None): the iterable itself (a progress bar as it is
// consumed).
TypeRef ruleProgress(CallSite &s) {
  if (!s.expect({"iterable"}, 1, {"desc", "total"})) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable"), *d = s.kwarg("desc"), *n = s.kwarg("total");
  if (given(d) && !isUnknown(d) && !d->type->is(K::Str)) s.wrongKind(d, "a string", "desc");
  if (given(n) && !isUnknown(n) && !intLike(*n->type)) s.wrongKind(n, "an int", "total");
  if (isUnknown(a)) return T::unknown();
  if (iterElem(s, a)->is(K::Unknown) && !(a->type->is(K::List) || a->type->is(K::Tuple) || a->type->is(K::Dict)))
    return T::unknown();
  return a->type;
}

bool pathArg(CallSite &s, const ArgInfo *a) {
  if (isUnknown(a) || a->type->is(K::Str)) return true;
  s.wrongKind(a, "a path string", paramName(a, "path"));
  return false;
}

// load(path): a tensor (.npy) or a dict of tensors (.npz, .safetensors), known only at run
// time: Unknown.
TypeRef ruleLoad(CallSite &s) {
  if (!s.expect({"path"}, 1)) return T::unknown();
  pathArg(s, s.arg(0, "path"));
  return T::unknown();
}

// save(path, value) -> None: value a tensor or a dict of tensors.
TypeRef ruleSave(CallSite &s) {
  if (!s.expect({"path", "value"}, 2)) return T::unknown();
  const ArgInfo *p = s.arg(0, "path"), *v = s.arg(1, "value");
  pathArg(s, p);
  if (!isUnknown(v) && !v->type->is(K::Tensor) && !v->type->is(K::Dict))
    s.wrongKind(v, "a tensor or a dict of tensors", paramName(v, "value"));
  return T::none();
}

// load_csv(path, dtype=f32, delimiter=","): a 2-d tensor of unknown extents.
TypeRef ruleLoadCsv(CallSite &s) {
  if (!s.expect({"path", "dtype", "delimiter"}, 1)) return T::unknown();
  const ArgInfo *p = s.arg(0, "path"), *d = s.arg(1, "dtype"), *del = s.arg(2, "delimiter");
  pathArg(s, p);
  if (given(del) && !isUnknown(del) && !del->type->is(K::Str)) s.wrongKind(del, "a string", "delimiter");
  auto dt = dtypeArg(s, d, DType::F32);
  if (!dt) return T::unknown();
  return T::tensor({Dim::unknown(), Dim::unknown()}, dt->first, dt->second);
}

// load_bytes(path): the file's bytes as a 1-d i32 tensor of values 0..255, its length known
// only at run time.
TypeRef ruleLoadBytes(CallSite &s) {
  if (!s.expect({"path"}, 1)) return T::unknown();
  pathArg(s, s.arg(0, "path"));
  return T::tensor({Dim::unknown()}, DType::I32);
}

// encode_bytes(s) -> Tensor[?, i32]: the bytes of a string (its UTF-8), each 0..255.
TypeRef ruleEncodeBytes(CallSite &s) {
  if (!s.expect({"s"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "s");
  if (given(a) && !isUnknown(a) && !a->type->is(K::Str)) s.wrongKind(a, "a string", paramName(a, "s"));
  return T::tensor({Dim::unknown()}, DType::I32);
}

// decode_bytes(x) -> str: the string of the bytes a 1-d integer tensor holds (each 0..255, checked
// when it runs), for text that a byte-level model produces.
TypeRef ruleDecodeBytes(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (isUnknown(a)) return T::str();
  TypeRef t = s.tensorArg(a, "x");
  if (!t) return T::str();
  if (!isInteger(t->dtype) || (t->rankKnown && t->dims.size() != 1))
    s.wrongKind(a, "a 1-d integer tensor of byte values", paramName(a, "x"));
  return T::str();
}

// write_text(path, text) -> None: text written to the file at path (created or replaced), as
// bytes, for reports and plots that a program produces as strings.
TypeRef ruleWriteText(CallSite &s) {
  if (!s.expect({"path", "text"}, 2)) return T::unknown();
  const ArgInfo *p = s.arg(0, "path"), *t = s.arg(1, "text");
  pathArg(s, p);
  if (given(t) && !isUnknown(t) && !t->type->is(K::Str)) s.wrongKind(t, "a string", paramName(t, "text"));
  return T::none();
}

// to_host(x): the same value, copied to host memory.
TypeRef ruleToHost(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  return isUnknown(a) ? T::unknown() : a->type;
}

// item(x): the value of a one-element tensor as a Python number (float, int or bool by its
// dtype); a tensor whose element count is a known constant other than 1 is an error.
TypeRef ruleItem(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  TypeRef t = s.tensorArg(a, "x");
  if (!t || !oneElement(s, a)) return T::unknown();
  if (t->dtype == DType::Bool) return T::boolean();
  if (isInteger(t->dtype)) return T::integer();
  return T::floating();
}

// cdiv(a, b): ceiling division of ints; constants fold, otherwise an opaque size "cdiv(a, b)"
// (equal texts are equal sizes). A zero divisor is an error.
TypeRef ruleCdiv(CallSite &s) {
  if (!s.expect({"a", "b"}, 2)) return T::unknown();
  const ArgInfo *a = s.arg(0, "a"), *b = s.arg(1, "b");
  for (auto [x, n] : {std::pair{a, "a"}, std::pair{b, "b"}})
    if (!isUnknown(x) && !intLike(*x->type)) {
      s.wrongKind(x, "an int", paramName(x, n));
      return T::unknown();
    }
  if (!isUnknown(b) && intConstOf(*b->type) == std::optional<int64_t>(0)) {
    s.wrongKind(b, "a nonzero divisor", paramName(b, "b"));
    return T::unknown();
  }
  if (isUnknown(a) || isUnknown(b) || !a->type->is(K::Int) || !b->type->is(K::Int) || !a->type->intValue || !b->type->intValue)
    return T::integer();
  const Dim &x = *a->type->intValue, &y = *b->type->intValue;
  auto cx = x.constantValue(), cy = y.constantValue();
  if (cx && cy) {
    int64_t q = *cx / *cy;
    if ((*cx % *cy != 0) && ((*cx < 0) == (*cy < 0))) ++q; // ceiling, as -(-a // b)
    return T::integer(Dim::constant(q));
  }
  if (y.isOne()) return T::integer(x);
  if (x.hasUnknown() || y.hasUnknown()) return T::integer();
  return T::integer(Dim::opaque("cdiv(" + x.str() + ", " + y.str() + ")"));
}

// dict(mapping=None, **kwargs): a dict whose fields are the keyword names (and the mapping's
// fields) in order.
TypeRef ruleDict(CallSite &s) {
  if (s.args.size() > 1) {
    s.diags->report(DiagKind::TooManyArgs, s.args[1].range, {s.name, "1", std::to_string(s.args.size())});
    return T::unknown();
  }
  std::vector<std::pair<std::string, TypeRef>> fields;
  if (!s.args.empty()) {
    const ArgInfo &m = s.args[0];
    if (isUnknown(m.type)) return T::dictOf(T::unknown());
    if (m.type->is(K::Dict)) {
      if (!m.type->lengthKnown) return T::dictOf(m.type->elem ? m.type->elem : T::unknown());
      fields = m.type->fields;
    } else if (m.type->is(K::List) || m.type->is(K::Tuple)) {
      return T::dictOf(T::unknown());
    } else {
      s.wrongKind(&m, "a dict or a list of pairs", "mapping");
      return T::unknown();
    }
  }
  std::set<std::string> seen;
  for (auto &k : s.keywords) {
    if (!seen.insert(k.keyword).second) {
      s.diags->report(DiagKind::DuplicateArg, k.range, {s.name, k.keyword});
      continue;
    }
    auto it = std::find_if(fields.begin(), fields.end(), [&](auto &f) { return f.first == k.keyword; });
    if (it != fields.end()) it->second = k.type;
    else fields.push_back({k.keyword, k.type});
  }
  return T::dict(std::move(fields));
}

// list(x=()), tuple(x=()): the elements of an iterable (known individually for tuples, lists and
// dicts of known length).
BuiltinRule ruleSequence(bool tuple) {
  return [tuple](CallSite &s) -> TypeRef {
    if (!s.expect({"iterable"}, 0) || !noKeywords(s)) return T::unknown();
    const ArgInfo *a = s.arg(0, "iterable");
    if (!a) return tuple ? T::tuple({}) : T::list({});
    if (isUnknown(a)) return tuple ? tupleOf(T::unknown()) : T::listOf(T::unknown());
    if (auto es = knownElems(*a->type)) return tuple ? T::tuple(*es) : T::list(*es);
    TypeRef e = iterElem(s, a);
    if (e->is(K::Unknown) && !(a->type->is(K::List) || a->type->is(K::Tuple) || a->type->is(K::Dict))) return T::unknown();
    return tuple ? tupleOf(e) : T::listOf(e);
  };
}

// sorted(iterable, reverse=False) -> a list; reversed(seq) -> the elements in reverse order.
TypeRef ruleSorted(CallSite &s) {
  if (!s.expect({"iterable"}, 1, {"reverse"})) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable"), *r = s.kwarg("reverse");
  if (given(r) && !isUnknown(r) && !r->type->is(K::Bool)) s.wrongKind(r, "a bool", "reverse");
  if (isUnknown(a)) return T::listOf(T::unknown());
  TypeRef e = iterElem(s, a);
  if (auto es = knownElems(*a->type)) {
    TypeRef j;
    for (auto &x : *es) j = join(j, x);
    return T::list(std::vector<TypeRef>(es->size(), j ? j : T::unknown()));
  }
  return T::listOf(e);
}

TypeRef ruleReversed(CallSite &s) {
  if (!s.expect({"seq"}, 1) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "seq");
  if (isUnknown(a)) return T::listOf(T::unknown());
  if (auto es = knownElems(*a->type)) {
    std::vector<TypeRef> r(es->rbegin(), es->rend());
    return a->type->is(K::Tuple) ? T::tuple(std::move(r)) : T::list(std::move(r));
  }
  return T::listOf(iterElem(s, a));
}

// ---- methods of dicts and lists ------------------------------------------------------------------

// d.items(), d.keys(), d.values(): tuples of known fields (so graph functions unroll loops over
// them); lists of unknown length for dicts whose keys are not known.
BuiltinRule dictView(int which) { // 0 items, 1 keys, 2 values
  return [which](CallSite &s) -> TypeRef {
    if (!s.expect({}, 0)) return T::unknown();
    const TypeRef &d = s.self;
    if (isUnknown(d) || !d->is(K::Dict)) return T::listOf(T::unknown());
    if (!d->lengthKnown) {
      TypeRef v = d->elem ? d->elem : T::unknown();
      if (which == 0) return T::listOf(T::tuple({T::unknown(), v}));
      return T::listOf(which == 1 ? T::unknown() : v);
    }
    std::vector<TypeRef> out;
    for (auto &[k, v] : d->fields) {
      if (which == 0) out.push_back(T::tuple({T::str(k), v}));
      else out.push_back(which == 1 ? T::str(k) : v);
    }
    return T::tuple(std::move(out));
  };
}

// d.get(key, default=None): the field's type for a known key; the default's when the key is
// absent.
TypeRef ruleDictGet(CallSite &s) {
  if (!s.expect({"key", "default"}, 1)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *dflt = s.arg(1, "default");
  TypeRef fallback = dflt ? dflt->type : T::none();
  const TypeRef &d = s.self;
  if (isUnknown(d) || !d->is(K::Dict)) return T::unknown();
  if (!d->lengthKnown) return dflt ? join(d->elem ? d->elem : T::unknown(), fallback) : (d->elem ? d->elem : T::unknown());
  auto key = isUnknown(k) || !k->type->is(K::Str) ? std::nullopt : k->type->strValue;
  if (!key) {
    TypeRef j = dflt ? fallback : nullptr;
    for (auto &f : d->fields) j = join(j, f.second);
    return j ? j : fallback;
  }
  for (auto &[n, v] : d->fields)
    if (n == *key) return v;
  return fallback;
}

// l.append(x), l.extend(iterable) -> None; l.pop(index=-1) -> the element.
TypeRef ruleListAppend(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  return T::none();
}

TypeRef ruleListExtend(CallSite &s) {
  if (!s.expect({"iterable"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable");
  if (!isUnknown(a)) iterElem(s, a);
  return T::none();
}

TypeRef ruleListPop(CallSite &s) {
  if (!s.expect({"index"}, 0)) return T::unknown();
  const ArgInfo *i = s.arg(0, "index");
  if (given(i) && !isUnknown(i) && !intLike(*i->type)) {
    s.wrongKind(i, "an int", "index");
    return T::unknown();
  }
  const TypeRef &l = s.self;
  if (isUnknown(l) || !l->is(K::List)) return T::unknown();
  if (!l->lengthKnown) return l->elem ? l->elem : T::unknown();
  if (l->elems.empty()) {
    s.diags->report(DiagKind::IndexOutOfRange, i ? i->range : s.range, {"-1", "an empty list"});
    return T::unknown();
  }
  std::optional<int64_t> idx = -1;
  if (given(i)) idx = intConstOf(*i->type);
  if (idx) {
    int64_t n = static_cast<int64_t>(l->elems.size()), k = *idx < 0 ? *idx + n : *idx;
    if (k < 0 || k >= n) {
      s.diags->report(DiagKind::IndexOutOfRange, i ? i->range : s.range, {std::to_string(*idx), typeStr(l)});
      return T::unknown();
    }
    return l->elems[static_cast<size_t>(k)];
  }
  TypeRef j;
  for (auto &e : l->elems) j = join(j, e);
  return j;
}

} // namespace

void addHostBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  auto method = [&](TypeKind k, std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.method(k, std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // Host builtins. Those that only shape compile-time structure (len, range, enumerate, zip,
  // list, tuple, dict) are allowed in graph functions too: spec 3 unrolls loops over them, and
  // lowering computes them at compile time (ir/lower/builtins/Structure.cpp).
  add("print", InHost, rulePrint, "print(*values, sep=\" \", end=\"\\n\") -> None", "write values to standard output", false)
      .inHost("print").example("print(x, n, \"ok\", sep=\", \")");
  add("len", HostAndGraph, ruleLen, "len(x) -> int", "the number of elements (a tensor's first extent)", false)
      .inGraph("len").inHost("len").example("len(x)").example("len((1, 2, 3))").example("len(d)", InHost).example("len(\"abc\")", InHost);
  add("range", HostAndGraph, ruleRange, "range(start=0, stop, step=1) -> range", "the ints start, start + step, ... below stop", false)
      .inGraph("range").inHost("range").example("range(n)").example("range(1, 7, 2)");
  add("enumerate", HostAndGraph, ruleEnumerate, "enumerate(iterable, start=0) -> list[tuple[int, T]]", "(index, element) pairs", false)
      .inGraph("enumerate").inHost("enumerate").example("enumerate((x, y))").example("enumerate([5, 6], start=1)");
  add("zip", HostAndGraph, ruleZip, "zip(*iterables) -> list[tuple]", "tuples of corresponding elements", false)
      .inGraph("zip").inHost("zip").example("zip((x, y), (1, 2))");
  add("int", Anywhere, ruleInt, "int(x=0) -> int", "x as an int (truncated toward zero)", false)
      .inGraph("int").inKernel("convert", "i64").inHost("int").example("int(2.7)").example("int(n)").example("int(sum(i))", InHost);
  add("float", Anywhere, ruleFloat, "float(x=0.0) -> float", "x as a float (float(\"inf\") is infinity)", false)
      .inGraph("float").inKernel("convert", "f32").inHost("float").example("float(n)").example("float(\"inf\")", InHost)
      .example("float(sum(x))", InHost);
  add("bool", Anywhere, ruleBool, "bool(x=False) -> bool", "the truth value of x", false)
      .inGraph("bool").inKernel("convert", "bool").inHost("bool").example("bool(n)").example("bool(())", HostAndGraph);
  add("str", InHost, ruleStr, "str(x=\"\") -> str", "x as a string", false).inHost("str").example("str(n)").example("str(x)");
  add("list", HostAndGraph, ruleSequence(false), "list(iterable=()) -> list", "the elements of an iterable as a list", false)
      .inGraph("list").inHost("list").example("list((x, y))").example("list(range(n))");
  add("tuple", HostAndGraph, ruleSequence(true), "tuple(iterable=()) -> tuple", "the elements of an iterable as a tuple", false)
      .inGraph("tuple").inHost("tuple").example("tuple([1, 2])").example("tuple(d)");
  add("dict", HostAndGraph, ruleDict, "dict(mapping=None, **fields) -> dict", "a dict of the keyword arguments", false)
      .inGraph("dict").inHost("dict").example("dict(w=x, b=v)").example("dict(d, lr=0.1)");
  add("sorted", InHost, ruleSorted, "sorted(iterable, *, reverse=False) -> list", "the elements in ascending order", false)
      .inHost("sorted").example("sorted([3, 1, 2])").example("sorted([\"b\", \"a\"], reverse=True)");
  add("reversed", HostAndGraph, ruleReversed, "reversed(seq) -> list", "the elements in reverse order", false)
      .inGraph("reversed").inHost("reversed").example("reversed((x, y))").example("reversed(range(n))");
  add("time", InHost, ruleTime, "time() -> float", "seconds since the epoch", false).inHost("time").example("time()");
  add("progress", InHost, ruleProgress, "progress(iterable, *, desc=None, total=None) -> iterable",
      "the iterable, with a progress bar as it is consumed", false)
      .inHost("progress").example("progress(range(n), desc=\"steps\")");
  add("load", InHost, ruleLoad, "load(path) -> Tensor | dict", "a tensor (.npy, IDX) or dict of tensors (.npz, .safetensors)", false)
      .inHost("load").example("load(\"x.npy\")");
  add("save", InHost, ruleSave, "save(path, value) -> None", "write a tensor or a dict of tensors", false)
      .inHost("save").example("save(\"out.npy\", x)").example("save(\"out.safetensors\", d)");
  add("load_csv", InHost, ruleLoadCsv, "load_csv(path, dtype=f32, delimiter=\",\") -> Tensor[?, ?]",
      "a 2-d tensor from a CSV file (.gz too)", false)
      .inHost("load_csv").example("load_csv(\"rows.csv\")");
  add("load_bytes", InHost, ruleLoadBytes, "load_bytes(path) -> Tensor[?, i32]",
      "the bytes of a file as they are stored, each 0..255, as a 1-d i32 tensor", false)
      .inHost("load_bytes").example("load_bytes(\"rows.csv\")");
  add("encode_bytes", InHost, ruleEncodeBytes, "encode_bytes(s) -> Tensor[?, i32]",
      "the bytes of a string (UTF-8), each 0..255, as a 1-d i32 tensor", false)
      .inHost("encode_bytes").example("encode_bytes(\"hi\")");
  add("decode_bytes", InHost, ruleDecodeBytes, "decode_bytes(x) -> str",
      "the string of the bytes (0..255) of a 1-d integer tensor, as they are", false)
      .inHost("decode_bytes").example("decode_bytes(tensor([72, 105]))");
  add("write_text", InHost, ruleWriteText, "write_text(path, text) -> None", "write a string to a text file (replacing it)", false)
      .inHost("write_text").example("write_text(\"out.txt\", \"hello\")");
  add("to_host", InHost, ruleToHost, "to_host(x) -> Tensor", "x copied to host memory", false).inHost("to_host").example("to_host(x)");
  add("item", InHost, ruleItem, "item(x) -> float | int | bool", "the value of a one-element tensor", false)
      .inHost("item").example("item(sum(x))");
  add("cdiv", Anywhere, ruleCdiv, "cdiv(a, b) -> int", "ceiling division of ints, -(-a // b)", false)
      .inGraph("cdiv").inKernel("cdiv").inHost("cdiv").example("cdiv(7, n)");

  method(K::Tensor, "item", InHost, withSelf(ruleItem), "x.item() -> float | int | bool", "as item(x)", false)
      .inHost("item").example("sum(x).item()");
  method(K::Dict, "items", HostAndGraph, dictView(0), "d.items() -> tuple[tuple[str, T], ...]", "the (key, value) pairs", false)
      .inGraph("dict_items").inHost("dict_items").example("d.items()");
  method(K::Dict, "keys", HostAndGraph, dictView(1), "d.keys() -> tuple[str, ...]", "the keys", false)
      .inGraph("dict_keys").inHost("dict_keys").example("d.keys()");
  method(K::Dict, "values", HostAndGraph, dictView(2), "d.values() -> tuple[T, ...]", "the values", false)
      .inGraph("dict_values").inHost("dict_values").example("d.values()");
  method(K::Dict, "get", HostAndGraph, ruleDictGet, "d.get(key, default=None) -> T", "the value of key, or default", false)
      .inGraph("dict_get").inHost("dict_get").example("d.get(\"w\")").example("d.get(\"nothing\", 1.0)");
  method(K::List, "append", InHost, ruleListAppend, "l.append(x) -> None", "add x at the end", false)
      .inHost("list_append").growsReceiver(BuiltinInfo::Grows::Element).example("[1, 2].append(3)");
  method(K::List, "extend", InHost, ruleListExtend, "l.extend(iterable) -> None", "add the elements of iterable at the end", false)
      .inHost("list_extend").growsReceiver(BuiltinInfo::Grows::Elements).example("[1].extend((2, 3))");
  method(K::List, "pop", InHost, ruleListPop, "l.pop(index=-1) -> T", "remove and return an element", false)
      .inHost("list_pop").example("[1, 2, 3].pop()").example("[1, 2, 3].pop(0)");
}

} // namespace tsr::sema::builtins
