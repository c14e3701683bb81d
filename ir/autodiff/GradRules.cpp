// The derivative table of Graph IR: one entry per op of ir/Ops.def, each giving the op's
// vector-Jacobian product and Jacobian-vector product as graph-building code (GradRules.h says
// the conventions). The formulas are the textbook ones (Griewank & Walther, "Evaluating
// Derivatives", 2nd ed., 2008, ch. 3; Baydin et al., "Automatic Differentiation in Machine
// Learning: a Survey", JMLR 2018, table 2); where a function has a kink or ties, the choice is
// PyTorch's, so that tests can compare with torch.autograd: relu'(0) = 0, the maximum and
// minimum of two equal values share the gradient equally, and reduce_max/reduce_min share it
// equally among the tied extremes (torch.amax).
#include "ir/autodiff/GradRules.h"
#include "ir/autodiff/ScanRules.h"
#include "ir/autodiff/WindowRules.h"

#include <array>
#include <cmath>
#include <map>

namespace tsr::ir::autodiff {

// ---- the emitter ------------------------------------------------------------------------------

Value *Emitter::op(OpKind k, std::vector<Value *> operands, std::vector<Attr> attrs) {
  return g_.add(k, std::move(operands), std::move(attrs), loc_);
}

Value *Emitter::scalar(double v, const Type &like) {
  DType dt = like.dtype;
  AttrValue a = isFloat(dt) ? AttrValue(v) : dt == DType::Bool ? AttrValue(v != 0) : AttrValue(static_cast<int64_t>(v));
  return op(OpKind::Constant, {}, {{"value", a}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{dt, {}}}});
}

Value *Emitter::zeros(const Type &t) {
  AttrValue a = isFloat(t.dtype) ? AttrValue(0.0) : t.dtype == DType::Bool ? AttrValue(false) : AttrValue(int64_t{0});
  Value *z = op(OpKind::Constant, {}, {{"value", a}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{t.dtype, t.policies}}});
  return broadcast(z, t.dims);
}

Value *Emitter::fit(Value *v, const Type &t) {
  if (v->type.dtype == t.dtype && v->type.policies == t.policies) return v;
  return op(OpKind::Cast, {v}, {{"dtype", DTypeAttr{t.dtype, t.policies}}});
}

Value *Emitter::reshape(Value *v, const std::vector<Dim> &dims) {
  if (v->type.dims == dims) return v;
  return op(OpKind::Reshape, {v}, {{"shape", dims}});
}

Value *Emitter::broadcast(Value *v, const std::vector<Dim> &dims) {
  if (v->type.dims == dims) return v;
  return op(OpKind::BroadcastTo, {v}, {{"shape", dims}});
}

Value *Emitter::reduceSum(Value *v, std::vector<int64_t> axes, bool keep) {
  if (axes.empty()) return v;
  return op(OpKind::ReduceSum, {v}, {{"axes", std::move(axes)}, {"keepdims", keep}});
}

Value *Emitter::unbroadcast(Value *v, const Type &t) {
  const auto &r = v->type.dims;
  const auto &s = t.dims;
  if (r.size() < s.size()) throw IRError{"autodiff: unbroadcast of " + v->type.str() + " to " + t.str()};
  std::vector<int64_t> axes;
  size_t lead = r.size() - s.size();
  for (size_t i = 0; i < lead; ++i) axes.push_back(static_cast<int64_t>(i));
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i].isOne() && !r[lead + i].isOne()) axes.push_back(static_cast<int64_t>(lead + i));
  return fit(reshape(reduceSum(v, axes, false), s), t);
}

Value *Emitter::swapLast2(Value *v) {
  std::vector<int64_t> perm(v->type.rank());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return op(OpKind::Transpose, {v}, {{"perm", perm}});
}

bool differentiable(const Type &t) { return !t.isKey() && isFloat(t.dtype); }

namespace {

using Vjp = decltype(GradRule::vjp);
using Jvp = decltype(GradRule::jvp);

// ---- helpers of the rules -------------------------------------------------------------------

// The reduced axes of a reduction (all when the op has no `axes`), as non-negative indices.
std::vector<bool> reducedAxes(const Op &o) {
  size_t r = o.operands[0]->type.rank();
  const auto *axes = o.attrAs<std::vector<int64_t>>("axes");
  std::vector<bool> red(r, axes == nullptr);
  if (axes)
    for (int64_t a : *axes) red[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(r) : a)] = true;
  return red;
}
std::vector<int64_t> axisList(const std::vector<bool> &red) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < red.size(); ++i) if (red[i]) out.push_back(static_cast<int64_t>(i));
  return out;
}
// The operand's dims with the reduced axes as 1 (the result's dims under keepdims).
std::vector<Dim> keptDims(const Op &o) {
  std::vector<Dim> d = o.operands[0]->type.dims;
  auto red = reducedAxes(o);
  for (size_t i = 0; i < d.size(); ++i) if (red[i]) d[i] = Dim::constant(1);
  return d;
}

// A unary elementwise op given by its derivative f'(x) (with y = f(x) at hand).
GradRule unaryRule(std::function<Value *(Emitter &, Value *x, Value *y, const Op &)> deriv) {
  GradRule r;
  r.vjp = [deriv](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
    Value *x = o.operands[0];
    return {E.fit(E.mul(g, deriv(E, x, o.result(), o)), x->type)};
  };
  r.jvp = [deriv](Emitter &E, const Op &o, const std::vector<Value *> &t) -> Value * {
    return E.fit(E.mul(t[0], deriv(E, o.operands[0], o.result(), o)), o.result()->type);
  };
  return r;
}

// An op that is linear in its one differentiated operand and whose forward-mode rule is the op
// itself applied to the tangent (layout ops, casts, sums).
Jvp sameOp() {
  return [](Emitter &E, const Op &o, const std::vector<Value *> &t) -> Value * {
    std::vector<Value *> ops = o.operands;
    ops[0] = t[0];
    return E.fit(E.op(o.kind, ops, o.attrs), o.result()->type);
  };
}

// ---- collectives (runtime/dist; docs/distributed.md) -----------------------------------------
// Under SPMD semantics every rank runs the same program on its own values, and the objective
// that a rank's cotangents belong to is the sum of the ranks' objectives (JAX's convention for
// psum under pmap: psum's transpose is psum). So with y_i = sum_j x_j on every rank i, the
// cotangent of x_j is sum_i ybar_i: all_reduce(sum)'s transpose is all_reduce(sum) of the
// cotangent; mean's is mean; all_gather's is reduce_scatter(sum) and reduce_scatter(sum)'s is
// all_gather; broadcast from src transposes to the sum on src (dist_reduce) and back;
// all_to_all's is all_to_all with split and concat swapped. max/min send the summed cotangent to
// the ranks that hold the extreme, split evenly among ties (as torch.amax); prod's is
// sum(ybar) * y / x.
Value *collectiveLike(Emitter &E, const Op &o, OpKind k, Value *x, std::vector<Attr> extra) {
  std::vector<Attr> attrs;
  for (const Attr &a : o.attrs)
    if (a.name == "axes" || a.name == "group") attrs.push_back(a);
  for (Attr &a : extra) attrs.push_back(std::move(a));
  return E.op(k, {x}, std::move(attrs));
}

void addCollectiveGradRules(std::map<OpKind, GradRule> &t) {
  auto strAttr = [](const Op &o, const char *n) { const std::string *v = o.attrAs<std::string>(n); return v ? *v : std::string(); };
  auto intA = [](const Op &o, const char *n) { const int64_t *v = o.attrAs<int64_t>(n); return v ? *v : int64_t(0); };
  {
    GradRule r;
    // The share of the extreme's cotangent (or tangent) each rank's x gets: [x == y] / ties.
    auto extremeShare = [](Emitter &E, const Op &o) {
      Value *x = o.operands[0], *y = o.result();
      Value *hit = E.op(OpKind::Cast, {E.op(OpKind::Eq, {x, y})}, {{"dtype", DTypeAttr{x->type.dtype, x->type.policies}}});
      Value *ties = collectiveLike(E, o, OpKind::AllReduce, hit, {{"op", std::string("sum")}});
      return E.div(hit, ties);
    };
    r.vjp = [strAttr, extremeShare](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      const std::string op = strAttr(o, "op");
      Value *x = o.operands[0];
      if (op == "sum" || op == "mean") return {E.fit(collectiveLike(E, o, OpKind::AllReduce, g, {{"op", op}}), x->type)};
      Value *total = collectiveLike(E, o, OpKind::AllReduce, g, {{"op", std::string("sum")}});
      if (op == "prod") return {E.fit(E.div(E.mul(total, o.result()), x), x->type)};
      return {E.fit(E.mul(total, extremeShare(E, o)), x->type)};
    };
    r.jvp = [strAttr, extremeShare](Emitter &E, const Op &o, const std::vector<Value *> &t) -> Value * {
      const std::string op = strAttr(o, "op");
      Value *y = o.result();
      if (op == "sum" || op == "mean") return E.fit(collectiveLike(E, o, OpKind::AllReduce, t[0], {{"op", op}}), y->type);
      if (op == "prod")
        return E.fit(E.mul(y, collectiveLike(E, o, OpKind::AllReduce, E.div(t[0], o.operands[0]), {{"op", std::string("sum")}})), y->type);
      return E.fit(collectiveLike(E, o, OpKind::AllReduce, E.mul(t[0], extremeShare(E, o)), {{"op", std::string("sum")}}), y->type);
    };
    t[OpKind::AllReduce] = r;
  }
  {
    GradRule r;
    r.vjp = [intA](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(collectiveLike(E, o, OpKind::ReduceScatter, g, {{"op", std::string("sum")}, {"dim", intA(o, "dim")}}), o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::AllGather] = r;
  }
  {
    GradRule r;
    auto linear = [strAttr](Emitter &E, const Op &o) {
      const std::string op = strAttr(o, "op");
      if (op != "sum" && op != "mean")
        throw AutodiffError{AutodiffError::Kind::NonDifferentiable, "`reduce_scatter` with op=\"" + op + "\" (only sum and mean are differentiable)", E.loc()};
      return op;
    };
    r.vjp = [intA, linear](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      const std::string op = linear(E, o);
      Value *x = o.operands[0];
      Value *v = collectiveLike(E, o, OpKind::AllGather, g, {{"dim", intA(o, "dim")}});
      if (op == "mean") v = E.div(v, E.scalar(double(intA(o, "group")), v->type));
      return {E.fit(v, x->type)};
    };
    r.jvp = [linear](Emitter &E, const Op &o, const std::vector<Value *> &t) -> Value * {
      linear(E, o);
      return E.fit(E.op(o.kind, {t[0]}, o.attrs), o.result()->type);
    };
    t[OpKind::ReduceScatter] = r;
  }
  {
    GradRule r;
    r.vjp = [intA](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(collectiveLike(E, o, OpKind::DistReduce, g, {{"dst", intA(o, "src")}}), o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::DistBroadcast] = r;
  }
  {
    GradRule r;
    r.vjp = [intA](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(collectiveLike(E, o, OpKind::DistBroadcast, g, {{"src", intA(o, "dst")}}), o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::DistReduce] = r;
  }
  {
    GradRule r;
    r.vjp = [intA](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(collectiveLike(E, o, OpKind::AllToAll, g, {{"split_dim", intA(o, "concat_dim")}, {"concat_dim", intA(o, "split_dim")}}),
                    o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::AllToAll] = r;
  }
}

// The tangent of an operand, or zeros of its type when it is not active.
Value *tangentOr0(Emitter &E, const std::vector<Value *> &t, const Op &o, size_t i) {
  return t[i] ? t[i] : E.zeros(o.operands[i]->type);
}

// A binary broadcasting op given by its partial derivatives (each with the result's shape after
// broadcasting). Only the partials of active operands are formed.
GradRule binaryRule(std::function<Value *(Emitter &, const Op &, size_t which, Value *seed)> partialTimes) {
  GradRule r;
  r.vjp = [partialTimes](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) {
    std::vector<Value *> out(2, nullptr);
    for (size_t i = 0; i < 2; ++i)
      if (active[i]) out[i] = E.unbroadcast(E.broadcast(partialTimes(E, o, i, g), o.result()->type.dims), o.operands[i]->type);
    return out;
  };
  r.jvp = [partialTimes](Emitter &E, const Op &o, const std::vector<Value *> &t) -> Value * {
    Value *sum = nullptr;
    for (size_t i = 0; i < 2; ++i) {
      if (!t[i]) continue;
      Value *term = partialTimes(E, o, i, t[i]);
      sum = sum ? E.add(sum, term) : term;
    }
    return E.fit(E.broadcast(sum, o.result()->type.dims), o.result()->type);
  };
  return r;
}

Value *scatterAlong(Emitter &E, Value *g, size_t ax, Value *idx, const Dim &full);

// Pads `v` with zeros along `axis` so that it sits at [start, start + (n-1)*step + 1) with
// `step` between elements, in an axis of extent `full`: the transpose of a slice.
Value *padAxis(Emitter &E, Value *v, size_t axis, const Dim &start, int64_t step, const Dim &full) {
  std::vector<Dim> dims = v->type.dims;
  const Dim n = dims[axis];
  Value *mid = v;
  Dim len = n;
  if (step != 1 && !n.constantValue()) {
    // A symbolic count: element i goes to start + i * step, by a one-hot scatter (the
    // interleaving below needs the count to compute the padded lengths).
    Value *i = E.op(OpKind::Iota, {}, {{"shape", std::vector<Dim>{n}}, {"axis", int64_t{0}}, {"dtype", DTypeAttr{DType::I64, {}}}});
    Type i64 = Type::tensor({}, DType::I64);
    Value *st = start.constantValue() ? E.scalar(static_cast<double>(*start.constantValue()), i64)
                                      : E.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{start}}});
    Value *pos = E.add(E.mul(i, E.scalar(static_cast<double>(step), i64)), st);
    return scatterAlong(E, v, axis, pos, full);
  }
  if (step != 1) {
    int64_t cn = *n.constantValue();
    if (cn == 0) return E.zeros(Type::tensor([&] { auto d = dims; d[axis] = full; return d; }(), v->type.dtype, v->type.policies));
    // Interleave: [n] -> [n, 1] ++ zeros [n, step-1] -> [n * step], then keep (n-1)*step + 1.
    std::vector<Dim> d1 = dims;
    d1.insert(d1.begin() + static_cast<long>(axis) + 1, Dim::constant(1));
    std::vector<Dim> dz = d1;
    dz[axis + 1] = Dim::constant(step - 1);
    Value *w = E.op(OpKind::Concat, {E.reshape(v, d1), E.zeros(Type::tensor(dz, v->type.dtype, v->type.policies))},
                    {{"axis", static_cast<int64_t>(axis + 1)}});
    std::vector<Dim> d2 = dims;
    d2[axis] = Dim::constant(cn * step);
    w = E.reshape(w, d2);
    len = Dim::constant((cn - 1) * step + 1);
    std::vector<Dim> st(d2.size(), Dim::constant(0)), sp = d2;
    sp[axis] = len;
    mid = E.op(OpKind::Slice, {w}, {{"start", st}, {"stop", sp}, {"step", std::vector<int64_t>(d2.size(), 1)}});
  }
  std::vector<Value *> parts;
  auto zerosOf = [&](const Dim &ext) {
    std::vector<Dim> d = mid->type.dims;
    d[axis] = ext;
    return E.zeros(Type::tensor(d, v->type.dtype, v->type.policies));
  };
  Dim after = full - start - len;
  if (start.constantValue() != std::optional<int64_t>(0)) parts.push_back(zerosOf(start));
  parts.push_back(mid);
  if (after.constantValue() != std::optional<int64_t>(0)) parts.push_back(zerosOf(after));
  if (parts.size() == 1) return mid;
  return E.op(OpKind::Concat, parts, {{"axis", static_cast<int64_t>(axis)}});
}

// d y / d x_i of y = prod(x over axes), broadcast to x's shape: y / x_i where x_i != 0; the
// product of the others where x_i is the only zero of its slice; 0 where the slice has another
// zero. (y / x alone would give NaN at zeros.)
Value *prodPartial(Emitter &E, const Op &o) {
  Value *x = o.operands[0];
  auto red = reducedAxes(o);
  auto axes = axisList(red);
  std::vector<Dim> kept = keptDims(o);
  Value *zero = E.scalar(0, x->type), *one = E.scalar(1, x->type);
  Value *isZero = E.op(OpKind::Eq, {x, zero});
  Value *nz = E.where(isZero, one, x);
  Value *prodNz = E.op(OpKind::ReduceProd, {nz}, {{"axes", axes}, {"keepdims", true}});
  Value *zeroCount = E.reduceSum(E.fit(isZero, Type::tensor(x->type.dims, DType::I32)), axes, true);
  Value *y = E.reshape(o.result(), kept);
  Value *onlyZero = E.op(OpKind::Eq, {zeroCount, E.scalar(1, Type::tensor({}, DType::I32))});
  Value *atZero = E.where(onlyZero, prodNz, E.broadcast(zero, kept));
  return E.broadcast(E.where(isZero, atZero, E.div(y, nz)), x->type.dims);
}

// The share of reduce_max/reduce_min's cotangent each element gets: 1/count on the tied
// extremes of its slice, 0 elsewhere, in dtype `like`.
Value *extremeShare(Emitter &E, const Op &o, const Type &like) {
  Value *x = o.operands[0];
  auto axes = axisList(reducedAxes(o));
  Value *hit = E.fit(E.op(OpKind::Eq, {x, E.reshape(o.result(), keptDims(o))}), Type::tensor(x->type.dims, like.dtype));
  return E.div(hit, E.reduceSum(hit, axes, true));
}

// The scatter-add of `g` (the shape of gather's indices) into zeros of x's shape along `axis`:
// a one-hot product over the indexed axis, then a zero padding of the other axes where the
// indices are shorter.
Value *gatherTranspose(Emitter &E, const Op &o, Value *g) {
  Value *x = o.operands[0], *idx = o.operands[1];
  int64_t r = static_cast<int64_t>(x->type.rank());
  int64_t a = *o.attrAs<int64_t>("axis");
  size_t ax = static_cast<size_t>(a < 0 ? a + r : a);
  std::vector<Dim> id = idx->type.dims, u = id;
  u.insert(u.begin() + static_cast<long>(ax) + 1, Dim::constant(1));
  std::vector<Dim> oh = id;
  oh.insert(oh.begin() + static_cast<long>(ax) + 1, x->type.dims[ax]);
  Value *iota = E.op(OpKind::Iota, {}, {{"shape", oh}, {"axis", static_cast<int64_t>(ax + 1)}, {"dtype", DTypeAttr{idx->type.dtype, {}}}});
  Value *hit = E.op(OpKind::Eq, {E.reshape(idx, u), iota});
  Value *scattered = E.reduceSum(E.where(hit, E.reshape(g, u), E.scalar(0, g->type)), {static_cast<int64_t>(ax)}, false);
  for (size_t i = 0; i < x->type.rank(); ++i)
    if (i != ax && scattered->type.dims[i] != x->type.dims[i]) scattered = padAxis(E, scattered, i, Dim::constant(0), 1, x->type.dims[i]);
  return E.fit(scattered, x->type);
}

// The scatter-add of `g` along axis `ax`: position i of that axis (of extent n) adds into
// position idx[i] (idx: [n], integer) of an axis of extent `full`; other axes keep their extent.
// A one-hot product, so that no scatter op is needed.
Value *scatterAlong(Emitter &E, Value *g, size_t ax, Value *idx, const Dim &full) {
  const auto &d = g->type.dims;
  std::vector<Dim> gd(d.begin(), d.begin() + static_cast<long>(ax) + 1);
  gd.push_back(Dim::constant(1));
  gd.insert(gd.end(), d.begin() + static_cast<long>(ax) + 1, d.end());
  size_t post = d.size() - ax - 1;
  std::vector<Dim> idd{d[ax], Dim::constant(1)}, ohd{d[ax], full};
  for (size_t i = 0; i < post; ++i) { idd.push_back(Dim::constant(1)); ohd.push_back(Dim::constant(1)); }
  Value *iota = E.op(OpKind::Iota, {}, {{"shape", ohd}, {"axis", int64_t{1}}, {"dtype", DTypeAttr{idx->type.dtype, {}}}});
  Value *hit = E.op(OpKind::Eq, {E.reshape(idx, idd), iota});
  return E.reduceSum(E.where(hit, E.reshape(g, gd), E.scalar(0, g->type)), {static_cast<int64_t>(ax)}, false);
}

// The scatter-add of take's cotangent: x[..., idx, ...] read rows of axis `axis`; each row of x
// gets the sum of the cotangents of the positions that read it.
Value *takeTranspose(Emitter &E, const Op &o, Value *g) {
  Value *x = o.operands[0], *idx = o.operands[1];
  int64_t r = static_cast<int64_t>(x->type.rank());
  int64_t a = *o.attrAs<int64_t>("axis");
  size_t ax = static_cast<size_t>(a < 0 ? a + r : a);
  Dim nI = Dim::constant(1);
  for (auto &d : idx->type.dims) nI = nI * d;
  const auto &xd = x->type.dims;
  std::vector<Dim> gd(xd.begin(), xd.begin() + static_cast<long>(ax));
  gd.push_back(nI);
  gd.insert(gd.end(), xd.begin() + static_cast<long>(ax) + 1, xd.end());
  Value *s = scatterAlong(E, E.reshape(g, gd), ax, E.reshape(idx, {nI}), xd[ax]);
  return E.fit(E.reshape(s, xd), x->type);
}

constexpr double kSqrt1_2 = 0.70710678118654752440;   // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794; // 1/sqrt(2 pi)
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

// ---- the table --------------------------------------------------------------------------------

std::map<OpKind, GradRule> buildTable() {
  std::map<OpKind, GradRule> t;
  auto s = [](Emitter &E, double v, Value *like) { return E.scalar(v, like->type); };

  // -- unary: the derivative f'(x) --
  t[OpKind::Neg] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) { return s(E, -1, x); });
  t[OpKind::Abs] = unaryRule([](Emitter &E, Value *x, Value *, const Op &) { return E.op(OpKind::Sign, {x}); });
  t[OpKind::Exp] = unaryRule([](Emitter &, Value *, Value *y, const Op &) { return y; });
  t[OpKind::Log] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) { return E.div(s(E, 1, x), x); });
  t[OpKind::Log1p] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) { return E.div(s(E, 1, x), E.add(x, s(E, 1, x))); });
  t[OpKind::Expm1] = unaryRule([s](Emitter &E, Value *, Value *y, const Op &) { return E.add(y, s(E, 1, y)); });
  // d/dx 2^x = ln 2 * 2^x; d/dx log2 x = 1 / (x ln 2).
  t[OpKind::Exp2] = unaryRule([s](Emitter &E, Value *, Value *y, const Op &) { return E.mul(s(E, 0.6931471805599453, y), y); });
  t[OpKind::Log2] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) { return E.div(s(E, 1.4426950408889634, x), x); });
  t[OpKind::Sqrt] = unaryRule([s](Emitter &E, Value *, Value *y, const Op &) { return E.div(s(E, 0.5, y), y); });
  // d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3.
  t[OpKind::Rsqrt] = unaryRule([s](Emitter &E, Value *, Value *y, const Op &) { return E.mul(s(E, -0.5, y), E.mul(y, E.mul(y, y))); });
  t[OpKind::Tanh] = unaryRule([s](Emitter &E, Value *, Value *y, const Op &) { return E.sub(s(E, 1, y), E.mul(y, y)); });
  t[OpKind::Sigmoid] = unaryRule([s](Emitter &E, Value *, Value *y, const Op &) { return E.mul(y, E.sub(s(E, 1, y), y)); });
  t[OpKind::Relu] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) {
    return E.fit(E.op(OpKind::Gt, {x, s(E, 0, x)}), x->type);
  });
  t[OpKind::Gelu] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &o) -> Value * {
    const std::string *ap = o.attrAs<std::string>("approximate");
    if (ap && *ap == "tanh") {
      // y = x/2 (1 + tanh(u)), u = c (x + k x^3): y' = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 k x^2).
      const double c = 0.7978845608028654, k = 0.044715;
      Value *x2 = E.mul(x, x);
      Value *u = E.mul(s(E, c, x), E.add(x, E.mul(s(E, k, x), E.mul(x2, x))));
      Value *th = E.op(OpKind::Tanh, {u});
      Value *left = E.mul(s(E, 0.5, x), E.add(s(E, 1, x), th));
      Value *du = E.mul(s(E, c, x), E.add(s(E, 1, x), E.mul(s(E, 3 * k, x), x2)));
      Value *right = E.mul(E.mul(s(E, 0.5, x), x), E.mul(E.sub(s(E, 1, x), E.mul(th, th)), du));
      return E.add(left, right);
    }
    // y = x Phi(x): y' = Phi(x) + x phi(x).
    Value *cdf = E.mul(s(E, 0.5, x), E.add(s(E, 1, x), E.op(OpKind::Erf, {E.mul(x, s(E, kSqrt1_2, x))})));
    Value *pdf = E.mul(s(E, kInvSqrt2Pi, x), E.op(OpKind::Exp, {E.mul(s(E, -0.5, x), E.mul(x, x))}));
    return E.add(cdf, E.mul(x, pdf));
  });
  // silu = x sigmoid(x): y' = sigmoid(x) (1 + x (1 - sigmoid(x))).
  t[OpKind::Silu] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) {
    Value *sg = E.op(OpKind::Sigmoid, {x});
    return E.mul(sg, E.add(s(E, 1, x), E.mul(x, E.sub(s(E, 1, x), sg))));
  });
  t[OpKind::Sin] = unaryRule([](Emitter &E, Value *x, Value *, const Op &) { return E.op(OpKind::Cos, {x}); });
  t[OpKind::Cos] = unaryRule([](Emitter &E, Value *x, Value *, const Op &) { return E.neg(E.op(OpKind::Sin, {x})); });
  t[OpKind::Erf] = unaryRule([s](Emitter &E, Value *x, Value *, const Op &) {
    return E.mul(s(E, kTwoOverSqrtPi, x), E.op(OpKind::Exp, {E.neg(E.mul(x, x))}));
  });
  for (OpKind k : {OpKind::Floor, OpKind::Ceil, OpKind::Round, OpKind::Sign}) t[k].nondiff = true;
  t[OpKind::Not] = {}; // bool and integer results: no cotangent
  {
    GradRule c;
    c.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(g, o.operands[0]->type)};
    };
    c.jvp = sameOp();
    t[OpKind::Cast] = c;
  }

  // -- binary, broadcasting: partial derivative times the seed --
  t[OpKind::Add] = binaryRule([](Emitter &, const Op &, size_t, Value *g) { return g; });
  t[OpKind::Sub] = binaryRule([](Emitter &E, const Op &, size_t i, Value *g) { return i == 0 ? g : E.neg(g); });
  t[OpKind::Mul] = binaryRule([](Emitter &E, const Op &o, size_t i, Value *g) { return E.mul(g, o.operands[1 - i]); });
  t[OpKind::Div] = binaryRule([](Emitter &E, const Op &o, size_t i, Value *g) {
    Value *b = o.operands[1];
    return i == 0 ? E.div(g, b) : E.neg(E.div(E.mul(g, o.result()), b));
  });
  // a ** b: b a^(b-1) and a^b log(a).
  t[OpKind::Pow] = binaryRule([s](Emitter &E, const Op &o, size_t i, Value *g) {
    Value *a = o.operands[0], *b = o.operands[1];
    if (i == 0) return E.mul(g, E.mul(b, E.op(OpKind::Pow, {a, E.sub(b, s(E, 1, b))})));
    return E.mul(g, E.mul(o.result(), E.op(OpKind::Log, {a})));
  });
  // maximum/minimum: the larger (smaller) operand gets the seed; equal operands get half each.
  for (OpKind k : {OpKind::Max, OpKind::Min}) {
    OpKind wins = k == OpKind::Max ? OpKind::Gt : OpKind::Lt;
    t[k] = binaryRule([wins](Emitter &E, const Op &o, size_t i, Value *g) {
      Value *a = o.operands[i], *b = o.operands[1 - i];
      Value *zero = E.scalar(0, g->type);
      Value *tie = E.where(E.op(OpKind::Eq, {a, b}), E.mul(g, E.scalar(0.5, g->type)), zero);
      return E.where(E.op(wins, {a, b}), g, tie);
    });
  }
  // a mod b = a - floor(a / b) b (Python's and NumPy's remainder).
  t[OpKind::Mod] = binaryRule([](Emitter &E, const Op &o, size_t i, Value *g) {
    if (i == 0) return g;
    return E.neg(E.mul(g, E.op(OpKind::Floor, {E.div(o.operands[0], o.operands[1])})));
  });
  t[OpKind::FloorDiv].nondiff = true;
  for (OpKind k : {OpKind::And, OpKind::Or, OpKind::Xor, OpKind::Shl, OpKind::Shr, OpKind::Eq, OpKind::Ne, OpKind::Lt,
                   OpKind::Le, OpKind::Gt, OpKind::Ge})
    t[k] = {}; // integer and bool results: no cotangent
  {
    GradRule w;
    w.noGradOperands = {0};
    w.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) {
      std::vector<Value *> out(3, nullptr);
      Value *c = o.operands[0], *zero = E.scalar(0, g->type);
      if (active[1]) out[1] = E.unbroadcast(E.where(c, g, zero), o.operands[1]->type);
      if (active[2]) out[2] = E.unbroadcast(E.where(c, zero, g), o.operands[2]->type);
      return out;
    };
    w.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      return E.fit(E.where(o.operands[0], tangentOr0(E, tg, o, 1), tangentOr0(E, tg, o, 2)), o.result()->type);
    };
    t[OpKind::Where] = w;
  }

  // -- reductions --
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      Value *x = o.operands[0];
      return {E.fit(E.broadcast(E.reshape(g, keptDims(o)), x->type.dims), x->type)};
    };
    r.jvp = sameOp();
    t[OpKind::ReduceSum] = r;
  }
  for (OpKind k : {OpKind::ReduceMax, OpKind::ReduceMin}) {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      Value *x = o.operands[0];
      return {E.fit(E.mul(extremeShare(E, o, g->type), E.reshape(g, keptDims(o))), x->type)};
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      Value *share = extremeShare(E, o, tg[0]->type);
      Value *sum = E.op(OpKind::ReduceSum, {E.mul(share, tg[0])}, o.attrs);
      return E.fit(sum, o.result()->type);
    };
    t[k] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      Value *x = o.operands[0];
      return {E.fit(E.mul(prodPartial(E, o), E.reshape(g, keptDims(o))), x->type)};
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      return E.fit(E.op(OpKind::ReduceSum, {E.mul(prodPartial(E, o), tg[0])}, o.attrs), o.result()->type);
    };
    t[OpKind::ReduceProd] = r;
  }
  for (OpKind k : {OpKind::ArgMax, OpKind::ArgMin}) t[k].nondiff = true;

  // -- matmul (NumPy: 1-d operands are a row / a column, batch dims broadcast) --
  {
    GradRule m;
    m.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) {
      Value *a = o.operands[0], *b = o.operands[1];
      bool av = a->type.rank() == 1, bv = b->type.rank() == 1;
      Value *a2 = av ? E.reshape(a, {Dim::constant(1), a->type.dims[0]}) : a;
      Value *b2 = bv ? E.reshape(b, {b->type.dims[0], Dim::constant(1)}) : b;
      std::vector<Dim> y2 = g->type.dims;
      if (av) y2.insert(y2.end() - (bv ? 0 : 1), Dim::constant(1));
      if (bv) y2.push_back(Dim::constant(1));
      Value *g2 = E.reshape(g, y2);
      std::vector<Value *> out(2, nullptr);
      if (active[0]) {
        Value *ga = E.op(OpKind::MatMul, {g2, E.swapLast2(b2)});
        Type t2 = Type::tensor(a2->type.dims, a->type.dtype, a->type.policies);
        out[0] = E.fit(E.reshape(E.unbroadcast(ga, t2), a->type.dims), a->type);
      }
      if (active[1]) {
        Value *gb = E.op(OpKind::MatMul, {E.swapLast2(a2), g2});
        Type t2 = Type::tensor(b2->type.dims, b->type.dtype, b->type.policies);
        out[1] = E.fit(E.reshape(E.unbroadcast(gb, t2), b->type.dims), b->type);
      }
      return out;
    };
    m.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      Value *sum = nullptr;
      if (tg[0]) sum = E.op(OpKind::MatMul, {tg[0], o.operands[1]});
      if (tg[1]) {
        Value *term = E.op(OpKind::MatMul, {o.operands[0], tg[1]});
        sum = sum ? E.add(sum, term) : term;
      }
      return E.fit(sum, o.result()->type);
    };
    t[OpKind::MatMul] = m;
  }

  // -- layout: each is linear; its transpose moves the cotangent back --
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(E.reshape(g, o.operands[0]->type.dims), o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::Reshape] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      const auto &perm = *o.attrAs<std::vector<int64_t>>("perm");
      std::vector<int64_t> inv(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
      return {E.fit(E.op(OpKind::Transpose, {g}, {{"perm", inv}}), o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::Transpose] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.unbroadcast(g, o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::BroadcastTo] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      Value *x = o.operands[0];
      const auto &start = *o.attrAs<std::vector<Dim>>("start");
      const auto &stop = *o.attrAs<std::vector<Dim>>("stop");
      const auto &step = *o.attrAs<std::vector<int64_t>>("step");
      Value *v = g;
      for (size_t i = 0; i < x->type.rank(); ++i)
        if (!(start[i] == Dim::constant(0) && stop[i] == x->type.dims[i] && step[i] == 1))
          v = padAxis(E, v, i, start[i], step[i], x->type.dims[i]);
      return {E.fit(v, x->type)};
    };
    r.jvp = sameOp();
    t[OpKind::Slice] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &active) {
      int64_t rank = static_cast<int64_t>(g->type.rank());
      int64_t a = *o.attrAs<int64_t>("axis");
      size_t ax = static_cast<size_t>(a < 0 ? a + rank : a);
      std::vector<Value *> out(o.operands.size(), nullptr);
      Dim offset = Dim::constant(0);
      for (size_t i = 0; i < o.operands.size(); ++i) {
        Value *x = o.operands[i];
        if (active[i]) {
          std::vector<Dim> st(g->type.rank(), Dim::constant(0)), sp = g->type.dims;
          st[ax] = offset;
          sp[ax] = offset + x->type.dims[ax];
          out[i] = E.fit(E.op(OpKind::Slice, {g}, {{"start", st}, {"stop", sp}, {"step", std::vector<int64_t>(g->type.rank(), 1)}}), x->type);
        }
        offset = offset + x->type.dims[ax];
      }
      return out;
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &tg) -> Value * {
      std::vector<Value *> parts;
      for (size_t i = 0; i < o.operands.size(); ++i) parts.push_back(tangentOr0(E, tg, o, i));
      return E.fit(E.op(OpKind::Concat, parts, o.attrs), o.result()->type);
    };
    t[OpKind::Concat] = r;
  }
  {
    GradRule r;
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {E.fit(E.op(OpKind::Reverse, {g}, o.attrs), o.operands[0]->type)};
    };
    r.jvp = sameOp();
    t[OpKind::Reverse] = r;
  }
  {
    GradRule r;
    r.noGradOperands = {1};
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {gatherTranspose(E, o, g), nullptr};
    };
    r.jvp = sameOp();
    t[OpKind::Gather] = r;
  }
  {
    GradRule r;
    r.noGradOperands = {1};
    r.vjp = [](Emitter &E, const Op &o, Value *g, const std::vector<bool> &) -> std::vector<Value *> {
      return {takeTranspose(E, o, g), nullptr};
    };
    r.jvp = sameOp();
    t[OpKind::Take] = r;
  }

  // -- creation: no differentiable operands. A random draw is a function of its key, which
  // carries no derivative; replaying the key replays the draw. --
  for (OpKind k : {OpKind::Constant, OpKind::Iota, OpKind::DimValue, OpKind::KeySplit}) t[k] = {};
  for (OpKind k : {OpKind::RandomNormal, OpKind::RandomUniform}) {
    GradRule r;
    r.noGradOperands = {0};
    r.vjp = [](Emitter &E, const Op &o, Value *, const std::vector<bool> &) -> std::vector<Value *> {
      throw AutodiffError{AutodiffError::Kind::NonDifferentiable, "the bounds of `" + std::string(opSpelling(o.kind)) + "`", E.loc()};
    };
    r.jvp = [](Emitter &E, const Op &o, const std::vector<Value *> &) -> Value * {
      throw AutodiffError{AutodiffError::Kind::NonDifferentiable, "the bounds of `" + std::string(opSpelling(o.kind)) + "`", E.loc()};
    };
    t[k] = r;
  }
  t[OpKind::RandomBits].nondiff = true;
  t[OpKind::KernelCall].nondiff = true;
  // A run-time check of integers (KVCache.append): no derivative.
  t[OpKind::CheckLe].nondiff = true;
  // The scan region op: its rules build scans of transformed bodies (ScanRules.cpp).
  t[OpKind::Scan] = scanGradRule();
  addCollectiveGradRules(t);
  // Convolution and pooling (WindowRules.cpp).
  addWindowGradRules(t);
  return t;
}

} // namespace

const GradRule &gradRule(OpKind k) {
  static const std::map<OpKind, GradRule> table = buildTable();
  auto it = table.find(k);
  if (it == table.end()) throw IRError{"autodiff: no gradient rule for " + std::string(opSpelling(k))};
  return it->second;
}

} // namespace tsr::ir::autodiff
