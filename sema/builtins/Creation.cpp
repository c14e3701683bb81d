// The creation builtins (spec 9): zeros, ones, full, the *_like builtins, arange, eye, tensor, and
// the random draws (random.key, split, fold_in, normal, uniform, randint, permutation, bernoulli).
#include "sema/builtins/Rules.h"

#include <cmath>

namespace tsr::sema::builtins {

namespace {


/// A tensor of a shape argument (the creation functions); negative extents are errors.
TypeRef tensorOfShape(CallSite &s, const ArgInfo *sa, std::optional<std::pair<DType, Policies>> dt) {
  auto dims = s.shape(sa, "shape");
  if (dims && !checkNonNegative(s, sa, *dims)) return T::unknown();
  if (!dt) return T::unknown();
  if (!dims) return sa && shapeKindOk(*sa->type) ? unknownRank(dt->first, dt->second) : T::unknown();
  return T::tensor(std::move(*dims), dt->first, dt->second);
}

// zeros(shape, dtype=f32), ones(shape, dtype=f32): shape an int or a tuple of ints (symbolic
// sizes stay symbolic); the dtype's policies are kept.
TypeRef ruleZeros(CallSite &s) {
  if (!s.expect({"shape", "dtype"}, 1)) return T::unknown();
  auto dt = dtypeArg(s, s.arg(1, "dtype"), DType::F32);
  return tensorOfShape(s, s.arg(0, "shape"), dt);
}

/// The dtype of a fill value without dtype=: a tensor's own, a Python number's as jnp's
/// (f32 for floats, i32 for ints, bool for bools). nullopt when unknown.
std::optional<std::pair<DType, Policies>> valueDType(CallSite &s, const ArgInfo *v) {
  if (isUnknown(v)) return std::nullopt;
  const Type &t = *v->type;
  if (t.isTensorLike()) return std::pair{t.dtype, t.policies};
  if (t.isPyNumber()) return std::pair{standaloneDType(t), Policies{}};
  s.wrongKind(v, "a number", paramName(v, "value"));
  return std::nullopt;
}

bool checkFillValue(CallSite &s, const ArgInfo *v) {
  if (isUnknown(v)) return true;
  const Type &t = *v->type;
  if (t.isPyNumber() || (t.isTensorLike() && t.rankKnown && t.dims.empty())) return true;
  s.wrongKind(v, "a number or a 0-d tensor", paramName(v, "value"));
  return false;
}

// full(shape, value, dtype=None): dtype from dtype=, else from the value (f32 for a float,
// i32 for an int, bool for a bool, a 0-d tensor's own).
TypeRef ruleFull(CallSite &s) {
  if (!s.expect({"shape", "value", "dtype"}, 2)) return T::unknown();
  const ArgInfo *v = s.arg(1, "value"), *d = s.arg(2, "dtype");
  if (!checkFillValue(s, v)) return T::unknown();
  auto dt = given(d) ? dtypeArg(s, d, std::nullopt) : valueDType(s, v);
  return tensorOfShape(s, s.arg(0, "shape"), dt);
}

/// The template of a *_like builtin: a tensor, or a Python number (as a 0-d tensor of its
/// jnp dtype).
TypeRef likeTemplate(CallSite &s, const ArgInfo *x) {
  if (isUnknown(x)) return nullptr;
  const Type &t = *x->type;
  if (t.is(K::Tensor)) return x->type;
  if (t.isPyNumber()) return T::scalar(standaloneDType(t));
  s.wrongKind(x, "a tensor", paramName(x, "x"));
  return nullptr;
}

// zeros_like(x, dtype=None), ones_like(x, dtype=None): x's dims; x's dtype and policies unless
// dtype= is given.
TypeRef ruleZerosLike(CallSite &s) {
  if (!s.expect({"x", "dtype"}, 1)) return T::unknown();
  const ArgInfo *d = s.arg(1, "dtype");
  std::optional<std::pair<DType, Policies>> dt;
  if (given(d) && !(dt = dtypeArg(s, d, std::nullopt))) return T::unknown();
  TypeRef t = likeTemplate(s, s.arg(0, "x"));
  if (!t) return T::unknown();
  return dt ? T::withDType(t, dt->first, dt->second) : t;
}

// full_like(x, value, dtype=None): x's dims and dtype (dtype= overrides).
TypeRef ruleFullLike(CallSite &s) {
  if (!s.expect({"x", "value", "dtype"}, 2)) return T::unknown();
  const ArgInfo *v = s.arg(1, "value"), *d = s.arg(2, "dtype");
  if (!checkFillValue(s, v)) return T::unknown();
  std::optional<std::pair<DType, Policies>> dt;
  if (given(d) && !(dt = dtypeArg(s, d, std::nullopt))) return T::unknown();
  TypeRef t = likeTemplate(s, s.arg(0, "x"));
  if (!t) return T::unknown();
  return dt ? T::withDType(t, dt->first, dt->second) : t;
}

// arange(stop), arange(start, stop, step=1, dtype=None): 1-d; the extent is symbolic when the
// bounds are (stop - start for step 1). i32 when all bounds are ints, f32 when any is a float;
// dtype= overrides. A zero step is an error.
TypeRef ruleArange(CallSite &s) {
  if (!s.expect({"start", "stop", "step", "dtype"}, 1)) return T::unknown();
  const ArgInfo *a0 = s.arg(0, "start"), *a1 = s.arg(1, "stop"), *st = s.arg(2, "step");
  const ArgInfo *start = a1 ? a0 : nullptr, *stop = a1 ? a1 : a0;
  bool anyFloat = false, unknownValue = false;
  for (auto [a, n] : {std::pair{start, "start"}, std::pair{stop, "stop"}, std::pair{st, "step"}}) {
    if (!a) continue;
    if (isUnknown(a)) { unknownValue = true; continue; }
    const Type &t = *a->type;
    if (t.is(K::Float)) anyFloat = true;
    else if (t.isScalarTensor()) { anyFloat |= isFloat(t.dtype); unknownValue = true; }
    else if (!t.is(K::Int) && !t.is(K::Bool)) {
      s.wrongKind(a, "a number", paramName(a, n));
      return T::unknown();
    }
  }
  if (st) {
    auto v = numberOf(*st->type);
    if (v && *v == 0) {
      s.wrongKind(st, "a nonzero step", "step");
      return T::unknown();
    }
  }
  const ArgInfo *d = s.arg(3, "dtype");
  // A bound of unknown type might be a float: without dtype= the dtype is not known.
  bool unknownBound = (start && isUnknown(start)) || isUnknown(stop) || (st && isUnknown(st));
  if (unknownBound && !anyFloat && !given(d)) return T::unknown();
  auto dt = dtypeArg(s, d, anyFloat ? DType::F32 : DType::I32);
  if (!dt) return T::unknown();
  Dim n = Dim::unknown();
  if (!unknownValue) {
    if (anyFloat) {
      auto b = start ? numberOf(*start->type) : std::optional<double>(0.0);
      auto e = numberOf(*stop->type);
      auto p = st ? numberOf(*st->type) : std::optional<double>(1.0);
      if (b && e && p && *p != 0) n = Dim::constant(std::max<int64_t>(0, static_cast<int64_t>(std::ceil((*e - *b) / *p))));
    } else {
      Dim b = start ? dimOf(*start->type) : Dim::constant(0);
      Dim e = dimOf(*stop->type);
      std::optional<int64_t> p = st ? intConstOf(*st->type) : std::optional<int64_t>(1);
      n = rangeExtent(b, e, p);
    }
  }
  return T::tensor({n}, dt->first, dt->second);
}

// eye(n, m=None, k=0, dtype=f32): [n, m] (m defaults to n).
TypeRef ruleEye(CallSite &s) {
  if (!s.expect({"n", "m", "k", "dtype"}, 1)) return T::unknown();
  const ArgInfo *n = s.arg(0, "n"), *m = s.arg(1, "m"), *k = s.arg(2, "k");
  auto nd = s.intDim(n, "n");
  std::optional<Dim> md = nd;
  if (given(m)) md = s.intDim(m, "m");
  if (given(k) && !isUnknown(k) && !intLike(*k->type)) {
    s.wrongKind(k, "an int", "k");
    return T::unknown();
  }
  auto dt = dtypeArg(s, s.arg(3, "dtype"), DType::F32);
  if (!dt) return T::unknown();
  if ((nd && !checkNonNegative(s, n, {*nd})) || (md && given(m) && !checkNonNegative(s, m, {*md}))) return T::unknown();
  return T::tensor({nd ? *nd : Dim::unknown(), md ? *md : Dim::unknown()}, dt->first, dt->second);
}

/// The shape and element kinds of a nested literal (tensor([[1, 2], [3, 4]])).
struct Nested {
  bool anyFloat = false, anyInt = false, unknownLeaf = false, rankKnown = true;
  std::optional<DType> tensorDType;
};

std::optional<std::vector<Dim>> nestedShape(const TypeRef &t, Nested &n) {
  switch (t->kind) {
  case K::Unknown: n.unknownLeaf = true; n.rankKnown = false; return std::vector<Dim>{};
  case K::Bool: return std::vector<Dim>{};
  case K::Int: n.anyInt = true; return std::vector<Dim>{};
  case K::Float: n.anyFloat = true; return std::vector<Dim>{};
  case K::Tensor: {
    if (!n.tensorDType) n.tensorDType = t->dtype;
    else if (auto p = promote(*n.tensorDType, t->dtype)) n.tensorDType = *p;
    if (!t->rankKnown) n.rankKnown = false;
    return t->dims;
  }
  case K::Tuple: case K::List: {
    if (!t->lengthKnown) {
      auto inner = nestedShape(t->elem ? t->elem : T::unknown(), n);
      if (!inner) return std::nullopt;
      inner->insert(inner->begin(), Dim::unknown());
      return inner;
    }
    std::optional<std::vector<Dim>> first;
    for (auto &e : t->elems) {
      auto d = nestedShape(e, n);
      if (!d) return std::nullopt;
      if (!first) first = d;
      else if (shapesProvablyDiffer(*first, *d)) return std::nullopt;
    }
    std::vector<Dim> out = first ? *first : std::vector<Dim>{};
    out.insert(out.begin(), Dim::constant(static_cast<int64_t>(t->elems.size())));
    return out;
  }
  default: return std::nullopt;
  }
}

// tensor(data, dtype=None): the shape of a nested list or tuple literal (n lists of m numbers:
// [n, m]; all rows must agree); dtype f32 if any element is a float, i32 for ints, bool for
// bools, or the given dtype.
TypeRef ruleTensor(CallSite &s) {
  if (!s.expect({"data", "dtype"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "data"), *d = s.arg(1, "dtype");
  std::optional<std::pair<DType, Policies>> dt;
  if (given(d) && !(dt = dtypeArg(s, d, std::nullopt))) return T::unknown();
  if (isUnknown(a)) return dt ? unknownRank(dt->first, dt->second) : T::unknown();
  Nested n;
  auto dims = nestedShape(a->type, n);
  if (!dims) {
    s.wrongKind(a, "a number or a rectangular nested list of numbers", paramName(a, "data"));
    return T::unknown();
  }
  if (!dt) {
    if (n.unknownLeaf) return T::unknown();
    DType k = n.anyFloat ? DType::F32 : n.anyInt ? DType::I32 : DType::Bool;
    if (n.tensorDType) {
      std::optional<DType> p = n.tensorDType;
      if (n.anyFloat || n.anyInt) p = promoteWithWeak(*p, n.anyFloat ? WeakScalar::Float : WeakScalar::Int);
      k = *p;
    }
    dt = std::pair{k, Policies{}};
  }
  if (!n.rankKnown) return unknownRank(dt->first, dt->second);
  return T::tensor(std::move(*dims), dt->first, dt->second);
}

// ---- random (spec 9) --------------------------------------------------------------------------------

bool keyArg(CallSite &s, const ArgInfo *a) {
  if (isUnknown(a) || a->type->is(K::Key)) return true;
  s.wrongKind(a, "a random key (from random.key or random.split)", paramName(a, "key"));
  return false;
}

// random.key(seed) -> Key; seed an int.
TypeRef ruleRandomKey(CallSite &s) {
  if (!s.expect({"seed"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "seed");
  if (!isUnknown(a) && !intLike(*a->type)) {
    s.wrongKind(a, "an int", paramName(a, "seed"));
    return T::unknown();
  }
  return T::key();
}

// random.split(key, num=2): a tuple of num keys when num is known, else a list of keys.
TypeRef ruleRandomSplit(CallSite &s) {
  if (!s.expect({"key", "num"}, 1)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *n = s.arg(1, "num");
  bool ok = keyArg(s, k);
  std::optional<int64_t> num = 2;
  if (given(n)) num = s.constInt(n, "num");
  if (!ok) return T::unknown();
  if (num && *num < 0) {
    s.wrongKind(n, "a non-negative number of keys", "num");
    return T::unknown();
  }
  if (given(n) && !num && !isUnknown(n) && !intLike(*n->type)) return T::unknown();
  if (!num) return T::listOf(T::key());
  return T::tuple(std::vector<TypeRef>(static_cast<size_t>(*num), T::key()));
}

// random.fold_in(key, data) -> Key: a key derived from an int.
TypeRef ruleRandomFoldIn(CallSite &s) {
  if (!s.expect({"key", "data"}, 2)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *d = s.arg(1, "data");
  if (!keyArg(s, k)) return T::unknown();
  if (!isUnknown(d) && !intLike(*d->type)) {
    s.wrongKind(d, "an int", "data");
    return T::unknown();
  }
  return T::key();
}

/// A `minval`/`maxval`/`p` argument: a number or a tensor that broadcasts to the shape.
bool boundArg(CallSite &s, const ArgInfo *a, const char *what, const std::optional<std::vector<Dim>> &shape) {
  if (!given(a) || isUnknown(a)) return true;
  const Type &t = *a->type;
  if (!numeric(t)) {
    s.wrongKind(a, "a number or a tensor", paramName(a, what));
    return false;
  }
  if (t.isTensorLike() && t.rankKnown && shape) return broadcastShapes(t.dims, *shape, s.reporterAt(a->range)).has_value();
  return true;
}

// random.normal(key, shape=(), dtype=f32) and random.uniform(key, shape=(), dtype=f32,
// minval=0.0, maxval=1.0): a tensor of the shape; the dtype must be a floating one.
BuiltinRule ruleRandomFloat(bool uniform) {
  return [uniform](CallSite &s) -> TypeRef {
    bool ok = uniform ? s.expect({"key", "shape", "dtype", "minval", "maxval"}, 1) : s.expect({"key", "shape", "dtype"}, 1);
    if (!ok) return T::unknown();
    const ArgInfo *k = s.arg(0, "key"), *sa = s.arg(1, "shape"), *d = s.arg(2, "dtype");
    if (!keyArg(s, k)) return T::unknown();
    auto dt = dtypeArg(s, d, DType::F32);
    if (dt && !isFloat(dt->first)) {
      s.wrongKind(d, "a floating-point dtype", "dtype");
      return T::unknown();
    }
    std::optional<std::vector<Dim>> shape = std::vector<Dim>{};
    if (given(sa)) {
      shape = s.shape(sa, "shape");
      if (!shape && !shapeKindOk(*sa->type)) return T::unknown();
    }
    if (uniform && (!boundArg(s, s.arg(3, "minval"), "minval", shape) || !boundArg(s, s.arg(4, "maxval"), "maxval", shape)))
      return T::unknown();
    if (!dt) return T::unknown();
    if (!shape) return unknownRank(dt->first, dt->second);
    if (!checkNonNegative(s, sa, *shape)) return T::unknown();
    return T::tensor(std::move(*shape), dt->first, dt->second);
  };
}

// random.randint(key, shape, minval, maxval, dtype=i32): integers in [minval, maxval); the
// dtype must be an integer one.
TypeRef ruleRandint(CallSite &s) {
  if (!s.expect({"key", "shape", "minval", "maxval", "dtype"}, 4)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *sa = s.arg(1, "shape"), *d = s.arg(4, "dtype");
  if (!keyArg(s, k)) return T::unknown();
  auto dt = dtypeArg(s, d, DType::I32);
  if (dt && !isInteger(dt->first)) {
    s.wrongKind(d, "an integer dtype", "dtype");
    return T::unknown();
  }
  auto shape = s.shape(sa, "shape");
  if (!shape && sa && !shapeKindOk(*sa->type)) return T::unknown();
  if (!boundArg(s, s.arg(2, "minval"), "minval", shape) || !boundArg(s, s.arg(3, "maxval"), "maxval", shape)) return T::unknown();
  if (!dt) return T::unknown();
  if (!shape) return unknownRank(dt->first, dt->second);
  if (!checkNonNegative(s, sa, *shape)) return T::unknown();
  return T::tensor(std::move(*shape), dt->first, dt->second);
}

// random.permutation(key, n): a 1-d i32 tensor [n]; of a tensor, the tensor's rows permuted
// (its own type).
TypeRef rulePermutation(CallSite &s) {
  if (!s.expect({"key", "n"}, 2)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *n = s.arg(1, "n");
  if (!keyArg(s, k) || isUnknown(n)) return T::unknown();
  if (n->type->is(K::Tensor) && !n->type->isScalarTensor()) return n->type;
  auto d = s.intDim(n, "n");
  if (!d) return T::unknown();
  if (!checkNonNegative(s, n, {*d})) return T::unknown();
  return T::tensor({*d}, DType::I32);
}

// random.bernoulli(key, p=0.5, shape=None): a bool tensor of the shape (default: p's shape,
// which must broadcast to the given shape).
TypeRef ruleBernoulli(CallSite &s) {
  if (!s.expect({"key", "p", "shape"}, 1)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *p = s.arg(1, "p"), *sa = s.arg(2, "shape");
  if (!keyArg(s, k)) return T::unknown();
  std::optional<std::vector<Dim>> shape;
  if (given(sa)) {
    shape = s.shape(sa, "shape");
    if (!shape) return shapeKindOk(*sa->type) ? unknownRank(DType::Bool) : T::unknown();
    if (!checkNonNegative(s, sa, *shape)) return T::unknown();
  }
  if (!boundArg(s, p, "p", shape)) return T::unknown();
  if (shape) return T::tensor(std::move(*shape), DType::Bool);
  if (!given(p)) return T::scalar(DType::Bool);
  if (isUnknown(p)) return T::unknown();
  if (p->type->isTensorLike()) return p->type->rankKnown ? T::tensor(p->type->dims, DType::Bool) : unknownRank(DType::Bool);
  return T::scalar(DType::Bool);
}

} // namespace

void addCreationBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // New tensors: a constant (splat) or an iota op of Graph IR, broadcast to the shape. Nothing flows
  // back into them, so none is differentiable.
  add("zeros", HostAndGraph, ruleZeros, "zeros(shape, dtype=f32) -> Tensor", "a tensor of zeros", false)
      .inGraph("fill", "constant", {{"value", "0"}}).example("zeros((2, 3))").example("zeros(n, dtype=i32)");
  add("ones", HostAndGraph, ruleZeros, "ones(shape, dtype=f32) -> Tensor", "a tensor of ones", false)
      .inGraph("fill", "constant", {{"value", "1"}}).example("ones((2, 3), dtype=bf16)");
  add("full", HostAndGraph, ruleFull, "full(shape, value, dtype=None) -> Tensor", "a tensor filled with value", false)
      .inGraph("fill", "constant").example("full((2, 3), 1.5)").example("full(n, 7)");
  add("zeros_like", HostAndGraph, ruleZerosLike, "zeros_like(x, dtype=None) -> Tensor", "zeros of x's shape and dtype", false)
      .inGraph("fill_like", "constant", {{"value", "0"}}).example("zeros_like(x)").example("zeros_like(i, dtype=f32)");
  add("ones_like", HostAndGraph, ruleZerosLike, "ones_like(x, dtype=None) -> Tensor", "ones of x's shape and dtype", false)
      .inGraph("fill_like", "constant", {{"value", "1"}}).example("ones_like(x)");
  add("full_like", HostAndGraph, ruleFullLike, "full_like(x, value, dtype=None) -> Tensor", "value in x's shape and dtype", false)
      .inGraph("fill_like", "constant").example("full_like(x, 2.0)").example("full_like(i, 7)");
  add("arange", HostAndGraph, ruleArange, "arange(start=0, stop, step=1, dtype=None) -> Tensor", "evenly spaced values in [start, stop)", false)
      .inGraph("arange", "iota").example("arange(n)").example("arange(1, 7, 2)").example("arange(0, 3, dtype=f32)");
  add("eye", HostAndGraph, ruleEye, "eye(n, m=None, k=0, dtype=f32) -> Tensor", "a matrix with ones on a diagonal", false)
      .inGraph("eye", "iota").example("eye(n)").example("eye(2, 3, k=1, dtype=i32)");
  add("tensor", HostAndGraph, ruleTensor, "tensor(data, dtype=None) -> Tensor", "a tensor from a nested list of numbers", false)
      .inGraph("tensor", "constant").inHost("tensor")
      .example("tensor([[1.0, 2.0], [3.0, 4.0]])").example("tensor([1, 2, 3], dtype=i64)");

  // Random draws by the runtime's Philox scheme (runtime/Random.h): graph code draws with the ops
  // random_normal, random_uniform and key_split; host code draws keys and permutations directly.
  add("random.key", HostAndGraph, ruleRandomKey, "random.key(seed) -> Key", "a random key from an int seed", false)
      .inHost("random_key").example("random.key(7)")
      .notYet(InGraph, "Graph IR has no op that makes a key from a seed; make the key in host code and pass it in");
  add("random.split", HostAndGraph, ruleRandomSplit, "random.split(key, num=2) -> tuple[Key, ...]", "num new independent keys", false)
      .inGraph("random_split", "key_split").inHost("random_split").example("random.split(key)").example("random.split(key, 3)");
  add("random.fold_in", HostAndGraph, ruleRandomFoldIn, "random.fold_in(key, data) -> Key", "a key derived from key and an int", false)
      .inHost("random_fold_in").example("random.fold_in(key, 5)")
      .notYet(InGraph, "Graph IR has no op that derives a key from an int; use random.split, or derive the key in host code");
  add("random.normal", HostAndGraph, ruleRandomFloat(false), "random.normal(key, shape=(), dtype=f32) -> Tensor",
      "standard normal samples", false)
      .inGraph("random_draw", "random_normal").example("random.normal(key, (2, 3))").example("random.normal(key, dtype=f64)");
  add("random.uniform", HostAndGraph, ruleRandomFloat(true),
      "random.uniform(key, shape=(), dtype=f32, minval=0.0, maxval=1.0) -> Tensor", "uniform samples in [minval, maxval)", false)
      .inGraph("random_draw", "random_uniform").example("random.uniform(key, (2, 3))")
      .example("random.uniform(key, (4,), minval=-1.0, maxval=1.0)");
  add("random.randint", HostAndGraph, ruleRandint, "random.randint(key, shape, minval, maxval, dtype=i32) -> Tensor",
      "uniform integers in [minval, maxval)", false)
      .inHost("random_randint").example("random.randint(key, (2, 3), 0, 10)")
      .notYet(InGraph, "an integer draw takes two random words per element and Graph IR draws one; draw in host code and pass the tensor in");
  add("random.permutation", HostAndGraph, rulePermutation, "random.permutation(key, n) -> Tensor[n, i32]",
      "a random permutation of range(n) (or of a tensor's rows)", false)
      .inHost("random_permutation").example("random.permutation(key, 5)").example("random.permutation(key, x)")
      .notYet(InGraph, "a permutation needs a sort, which Graph IR does not have; permute in host code");
  add("random.bernoulli", HostAndGraph, ruleBernoulli, "random.bernoulli(key, p=0.5, shape=None) -> Tensor[bool]",
      "True with probability p", false)
      .inGraph("random_bernoulli", "random_uniform").example("random.bernoulli(key, 0.3, (2, 3))").example("random.bernoulli(key, x / 4.0)");
}

} // namespace tsr::sema::builtins
