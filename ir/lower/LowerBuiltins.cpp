// Graph lowering: calls of builtins.
#include "ir/lower/Lowering.h"

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

LVRef Lowering::builtin(const LV &b, std::vector<LVRef> args, const std::map<std::string, LVRef> &kw, SourceRange at, SourceRange calleeRange) {
  std::string name = b.builtin->name;
  if (b.self) args.insert(args.begin(), b.self);
  auto A = [&](size_t i, const char *n) { return arg(args, kw, i, n); };
  auto T0 = [&](size_t i, const char *n) -> Value * {
    LVRef v = A(i, n);
    if (!v) unsupported("a call without `" + std::string(n) + "`", at);
    return asTensor(v, std::nullopt, at);
  };
  static const std::map<std::string, OpKind> unaryOps = {
      {"exp", OpKind::Exp}, {"log", OpKind::Log}, {"log1p", OpKind::Log1p}, {"expm1", OpKind::Expm1}, {"sqrt", OpKind::Sqrt},
      {"rsqrt", OpKind::Rsqrt}, {"tanh", OpKind::Tanh}, {"sigmoid", OpKind::Sigmoid}, {"relu", OpKind::Relu},
      {"silu", OpKind::Silu}, {"abs", OpKind::Abs}, {"sin", OpKind::Sin}, {"cos", OpKind::Cos}, {"erf", OpKind::Erf},
      {"floor", OpKind::Floor}, {"ceil", OpKind::Ceil}, {"sign", OpKind::Sign}, {"round", OpKind::Round}};
  // Math on compile-time numbers stays compile-time (sqrt(float(D)) in a scale).
  if ((name == "sqrt" || name == "abs" || name == "float" || name == "int" || name == "exp" || name == "log") && !args.empty() && isNumber(args[0]) && constInt(args[0]).has_value() + (args[0]->kind == LV::K::Float) > 0) {
    double v = args[0]->kind == LV::K::Float ? args[0]->f : static_cast<double>(*constInt(args[0]));
    if (name == "sqrt") return floating(std::sqrt(v));
    if (name == "exp") return floating(std::exp(v));
    if (name == "log") return floating(std::log(v));
    if (name == "abs") return args[0]->kind == LV::K::Float ? floating(std::fabs(v)) : integer(Dim::constant(static_cast<int64_t>(std::fabs(v))));
    if (name == "float") return floating(v);
    if (name == "int") return integer(Dim::constant(static_cast<int64_t>(v)));
  }
  if (name == "int" && !args.empty() && args[0]->kind == LV::K::Int) return args[0];
  if (name == "float" && !args.empty() && args[0]->kind == LV::K::Int)
    return tensor(op(OpKind::Cast, {asTensor(args[0], std::nullopt, at)}, {{"dtype", DTypeAttr{DType::F32, {}}}}, at));
  if (auto u = unaryOps.find(name); u != unaryOps.end()) return tensor(op(u->second, {T0(0, "x")}, {}, at));
  if (name == "gelu") {
    LVRef ap = kw.count("approximate") ? kw.at("approximate") : nullptr;
    return tensor(op(OpKind::Gelu, {T0(0, "x")}, {{"approximate", std::string(ap && ap->kind == LV::K::Str ? ap->s : "none")}}, at));
  }
  if (name == "maximum" || name == "minimum") {
    LVRef a = A(0, "a"), bb = A(1, "b");
    std::optional<DType> other = a->kind == LV::K::Tensor ? std::optional<DType>(a->v->type.dtype) : bb->kind == LV::K::Tensor ? std::optional<DType>(bb->v->type.dtype) : std::nullopt;
    return tensor(op(name == "maximum" ? OpKind::Max : OpKind::Min, {asTensor(a, other, at), asTensor(bb, other, at)}, {}, at));
  }
  if (name == "where") {
    LVRef a = A(1, "a"), bb = A(2, "b");
    std::optional<DType> other = a->kind == LV::K::Tensor ? std::optional<DType>(a->v->type.dtype) : bb->kind == LV::K::Tensor ? std::optional<DType>(bb->v->type.dtype) : std::nullopt;
    return tensor(op(OpKind::Where, {T0(0, "cond"), asTensor(a, other, at), asTensor(bb, other, at)}, {}, at));
  }
  if (name == "cast" || name == "astype") {
    Value *x = T0(0, "x");
    DTypeAttr d = dtypeArg(A(1, "dtype"), {x->type.dtype, x->type.policies});
    return tensor(op(OpKind::Cast, {x}, {{"dtype", d}}, at));
  }
  if (name == "matmul") return tensor(op(OpKind::MatMul, {T0(0, "a"), T0(1, "b")}, {}, at));
  if (name == "sum" || name == "max" || name == "min" || name == "prod" || name == "mean" || name == "argmax" || name == "argmin") {
    LVRef x = A(0, "x");
    if (x && x->kind != LV::K::Tensor) {
      if (name == "max" || name == "min") {
        std::vector<LVRef> items = args.size() == 1 ? iterate(x, at) : args;
        LVRef best = items.at(0);
        for (auto &it : items) {
          auto u = constInt(it), v = constInt(best);
          if (!u || !v) unsupported("max/min of sizes known only at run time", at);
          if (name == "max" ? *u > *v : *u < *v) best = it;
        }
        return best;
      }
      unsupported(name + " of a " + kindName(x), at);
    }
    Value *t = T0(0, "x");
    LVRef axis = A(1, "axis");
    LVRef keepArg = kw.count("keepdims") ? kw.at("keepdims") : nullptr;
    bool keep = keepArg && keepArg->kind == LV::K::Bool && keepArg->b;
    // sum and prod of bools count in i32 (as jnp.sum); dtype= casts before reducing.
    if (kw.count("dtype") && (name == "sum" || name == "mean" || name == "prod"))
      t = op(OpKind::Cast, {t}, {{"dtype", dtypeArg(kw.at("dtype"), {t->type.dtype, {}})}}, at);
    else if ((name == "sum" || name == "prod") && t->type.dtype == DType::Bool)
      t = op(OpKind::Cast, {t}, {{"dtype", DTypeAttr{DType::I32, {}}}}, at);
    static const std::map<std::string, OpKind> reds = {{"sum", OpKind::ReduceSum}, {"max", OpKind::ReduceMax}, {"min", OpKind::ReduceMin},
                                                       {"prod", OpKind::ReduceProd}, {"argmax", OpKind::ArgMax}, {"argmin", OpKind::ArgMin}, {"mean", OpKind::ReduceSum}};
    Value *r = reduce(reds.at(name), t, axis, keep, at);
    if (name == "mean") {
      if (!isFloat(r->type.dtype)) r = op(OpKind::Cast, {r}, {{"dtype", DTypeAttr{DType::F32, {}}}}, at);
      r = op(OpKind::Div, {r, reducedCount(t, axis, r->type.dtype, at)}, {}, at);
    }
    return tensor(r);
  }
  if (name == "var" || name == "logsumexp") {
    Value *x = T0(0, "x");
    LVRef axis = A(1, "axis");
    LVRef keepArg = kw.count("keepdims") ? kw.at("keepdims") : nullptr;
    bool keep = keepArg && keepArg->kind == LV::K::Bool && keepArg->b;
    if (name == "var") {
      if (!isFloat(x->type.dtype)) x = op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{DType::F32, {}}}}, at);
      int64_t ddof = 0;
      if (kw.count("ddof")) {
        auto c = constInt(kw.at("ddof"));
        if (!c) unsupported("a ddof known only at run time", at);
        ddof = *c;
      }
      Value *cnt = reducedCount(x, axis, x->type.dtype, at);
      Value *mu = op(OpKind::Div, {reduce(OpKind::ReduceSum, x, axis, true, at), cnt}, {}, at);
      Value *d = op(OpKind::Sub, {x, mu}, {}, at);
      Value *s = reduce(OpKind::ReduceSum, op(OpKind::Mul, {d, d}, {}, at), axis, keep, at);
      Value *den = ddof == 0 ? cnt : op(OpKind::Sub, {cnt, constant(static_cast<double>(ddof), x->type.dtype, at)}, {}, at);
      return tensor(op(OpKind::Div, {s, den}, {}, at));
    }
    // logsumexp(x) = m + log(sum(exp(x - m))), m the maximum: no overflow for large x.
    Value *m = reduce(OpKind::ReduceMax, x, axis, true, at);
    Value *s = reduce(OpKind::ReduceSum, op(OpKind::Exp, {op(OpKind::Sub, {x, m}, {}, at)}, {}, at), axis, true, at);
    Value *r = op(OpKind::Add, {m, op(OpKind::Log, {s}, {}, at)}, {}, at);
    if (!keep) {
      std::vector<Dim> shape = reduce(OpKind::ReduceMax, x, axis, false, at)->type.dims;
      r = op(OpKind::Reshape, {r}, {{"shape", shape}}, at);
    }
    return tensor(r);
  }
  if (name == "reshape") {
    Value *x = T0(0, "x");
    std::vector<Dim> shape;
    if (b.self && args.size() > 2) { for (size_t i = 1; i < args.size(); ++i) shape.push_back(dimOf(args[i], at)); }
    else shape = shapeOf(A(1, "shape"), at);
    // One -1 takes the remaining count.
    for (auto &d : shape) {
      if (d.constantValue() != std::optional<int64_t>(-1)) continue;
      Dim total = Dim::constant(1), rest = Dim::constant(1);
      for (auto &e : x->type.dims) total = total * e;
      for (auto &e : shape) if (&e != &d) rest = rest * e;
      auto q = total.divide(rest);
      if (!q) unsupported("this -1 in reshape", at);
      d = *q;
    }
    return tensor(op(OpKind::Reshape, {x}, {{"shape", shape}}, at));
  }
  if (name == "transpose") {
    Value *x = T0(0, "x");
    LVRef p = A(1, "perm");
    std::vector<int64_t> perm;
    if (p && p->kind != LV::K::None) perm = intsOf(p, at);
    else for (size_t i = x->type.rank(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    return tensor(op(OpKind::Transpose, {x}, {{"perm", perm}}, at));
  }
  if (name == "expand" || name == "broadcast_to") {
    Value *x = T0(0, "x");
    std::vector<Dim> shape = shapeOf(A(1, "shape"), at);
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i].constantValue() == std::optional<int64_t>(-1)) shape[i] = x->type.dims[i - (shape.size() - x->type.rank())];
    return tensor(op(OpKind::BroadcastTo, {x}, {{"shape", shape}}, at));
  }
  if (name == "squeeze" || name == "unsqueeze") {
    Value *x = T0(0, "x");
    LVRef axis = A(1, "axis");
    std::vector<Dim> shape = x->type.dims;
    if (name == "unsqueeze") {
      int64_t a = intsOf(axis, at).at(0);
      if (a < 0) a += static_cast<int64_t>(shape.size()) + 1;
      shape.insert(shape.begin() + a, Dim::constant(1));
    } else if (!axis || axis->kind == LV::K::None) {
      std::vector<Dim> kept;
      for (auto &d : shape) if (!d.isOne()) kept.push_back(d);
      shape = kept;
    } else {
      std::vector<int64_t> axes = intsOf(axis, at);
      std::vector<Dim> kept;
      for (size_t i = 0; i < shape.size(); ++i) {
        bool drop = false;
        for (int64_t a : axes) drop |= static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(shape.size()) : a) == i;
        if (!drop) kept.push_back(shape[i]);
      }
      shape = kept;
    }
    return tensor(op(OpKind::Reshape, {x}, {{"shape", shape}}, at));
  }
  if (name == "concat" || name == "stack") {
    LVRef xs = A(0, "tensors");
    LVRef axisArg = A(1, "axis");
    int64_t axis = axisArg ? intsOf(axisArg, at).at(0) : 0;
    std::vector<Value *> parts;
    for (auto &e : iterate(xs, at)) parts.push_back(asTensor(e, std::nullopt, at));
    if (name == "stack") {
      int64_t r = static_cast<int64_t>(parts.at(0)->type.rank()) + 1;
      if (axis < 0) axis += r;
      for (auto &p : parts) {
        std::vector<Dim> shape = p->type.dims;
        shape.insert(shape.begin() + axis, Dim::constant(1));
        p = op(OpKind::Reshape, {p}, {{"shape", shape}}, at);
      }
    }
    return tensor(op(OpKind::Concat, parts, {{"axis", axis}}, at));
  }
  if (name == "split") {
    Value *x = T0(0, "x");
    LVRef sections = A(1, "sections");
    LVRef axisArg = A(2, "axis");
    int64_t axis = axisArg ? intsOf(axisArg, at).at(0) : 0;
    size_t ax = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(x->type.rank()) : axis);
    std::vector<Dim> sizes;
    if (sections->kind == LV::K::Int) {
      auto n = constInt(sections);
      if (!n || *n <= 0) unsupported("split into a run-time number of parts", at);
      auto part = x->type.dims[ax].divide(Dim::constant(*n));
      if (!part) unsupported("this split", at);
      sizes.assign(static_cast<size_t>(*n), *part);
    } else {
      sizes = shapeOf(sections, at);
    }
    std::vector<LVRef> out;
    Dim offset = Dim::constant(0);
    for (const Dim &sz : sizes) {
      std::vector<Dim> start(x->type.rank(), Dim::constant(0)), stop = x->type.dims;
      std::vector<int64_t> step(x->type.rank(), 1);
      start[ax] = offset;
      stop[ax] = offset + sz;
      out.push_back(tensor(op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, at)));
      offset = offset + sz;
    }
    return tuple(out);
  }
  if (name == "zeros" || name == "ones" || name == "full") {
    std::vector<Dim> shape = shapeOf(A(0, "shape"), at);
    double value = name == "ones" ? 1.0 : 0.0;
    LVRef dtArg = name == "full" ? A(2, "dtype") : A(1, "dtype");
    DTypeAttr dflt{DType::F32, {}};
    if (name == "full") {
      LVRef v = A(1, "value");
      if (v->kind == LV::K::Float) value = v->f;
      else if (auto c = constInt(v)) { value = static_cast<double>(*c); dflt.dtype = v->kind == LV::K::Bool ? DType::Bool : DType::I32; }
      else unsupported("full() with a run-time value", at);
    }
    DTypeAttr d = dtypeArg(dtArg, dflt);
    Value *s = constant(value, d.dtype, at);
    if (!d.policies.empty()) s = op(OpKind::Cast, {s}, {{"dtype", d}}, at);
    return tensor(shape.empty() ? s : op(OpKind::BroadcastTo, {s}, {{"shape", shape}}, at));
  }
  if (name == "zeros_like" || name == "ones_like") {
    Value *x = T0(0, "x");
    DTypeAttr d = dtypeArg(A(1, "dtype"), {x->type.dtype, x->type.policies});
    Value *s = constant(name == "ones_like" ? 1.0 : 0.0, d.dtype, at);
    return tensor(op(OpKind::BroadcastTo, {s}, {{"shape", x->type.dims}}, at));
  }
  if (name == "arange") {
    LVRef a0 = A(0, "start"), a1 = A(1, "stop"), a2 = A(2, "step");
    Dim start = a1 ? dimOf(a0, at) : Dim::constant(0), stop = a1 ? dimOf(a1, at) : dimOf(a0, at);
    int64_t step = 1;
    if (a2) {
      auto c = constInt(a2);
      if (!c || *c <= 0) unsupported("arange with a step that is not a positive constant", at);
      step = *c;
    }
    DTypeAttr d = dtypeArg(kw.count("dtype") ? kw.at("dtype") : nullptr, {DType::I32, {}});
    // ceil((stop - start) / step) elements: exact rational dims are floored where evaluated.
    Dim n = stop - start;
    if (step != 1) {
      if (auto c = n.constantValue()) n = Dim::constant((*c + step - 1) / step);
      else if (auto q = (n + Dim::constant(step - 1)).divide(Dim::constant(step))) n = *q;
    }
    Value *i = op(OpKind::Iota, {}, {{"shape", std::vector<Dim>{n}}, {"axis", int64_t{0}}, {"dtype", d}}, at);
    if (step != 1) i = op(OpKind::Mul, {i, asTensor(integer(Dim::constant(step)), d.dtype, at)}, {}, at);
    if (start != Dim::constant(0)) i = op(OpKind::Add, {i, asTensor(integer(start), d.dtype, at)}, {}, at);
    return tensor(i);
  }
  if (name == "one_hot") {
    Value *labels = T0(0, "labels");
    Dim n = dimOf(A(1, "n"), at);
    DTypeAttr d = dtypeArg(A(2, "dtype"), {DType::F32, {}});
    std::vector<Dim> shape = labels->type.dims;
    std::vector<Dim> expanded = shape;
    expanded.push_back(Dim::constant(1));
    shape.push_back(n);
    Value *l = op(OpKind::Reshape, {labels}, {{"shape", expanded}}, at);
    Value *iota = op(OpKind::Iota, {}, {{"shape", shape}, {"axis", static_cast<int64_t>(shape.size() - 1)}, {"dtype", DTypeAttr{labels->type.dtype, {}}}}, at);
    Value *eq = op(OpKind::Eq, {l, iota}, {}, at);
    return tensor(op(OpKind::Cast, {eq}, {{"dtype", d}}, at));
  }
  if (name == "gather") {
    Value *x = T0(0, "x"), *idx = T0(1, "indices");
    int64_t axis = intsOf(A(2, "axis"), at).at(0);
    return tensor(op(OpKind::Gather, {x, idx}, {{"axis", axis}}, at));
  }
  if (name == "clamp" || name == "clip") {
    LVRef x = A(0, "x");
    LVRef lo = A(1, "min"), hi = A(2, "max");
    Value *v = asTensor(x, std::nullopt, at);
    if (lo && lo->kind != LV::K::None) v = op(OpKind::Max, {v, asTensor(lo, v->type.dtype, at)}, {}, at);
    if (hi && hi->kind != LV::K::None) v = op(OpKind::Min, {v, asTensor(hi, v->type.dtype, at)}, {}, at);
    return tensor(v);
  }
  if (name == "len") {
    LVRef x = A(0, "x");
    if (x->kind == LV::K::Tuple || x->kind == LV::K::List) return integer(Dim::constant(static_cast<int64_t>(x->elems.size())));
    if (x->kind == LV::K::Tensor && x->v->type.rank() > 0) return integer(x->v->type.dims[0]);
    unsupported("len() of a " + kindName(x), at);
  }
  if (name == "range") {
    LVRef a0 = A(0, "start"), a1 = A(1, "stop"), a2 = A(2, "step");
    auto c0 = constInt(a0), c1 = a1 ? constInt(a1) : std::optional<int64_t>(0), c2 = a2 ? constInt(a2) : std::optional<int64_t>(1);
    if (!c0 || !c1 || !c2 || *c2 == 0) unsupported("a range whose bounds are known only at run time", at);
    int64_t lo = a1 ? *c0 : 0, hi = a1 ? *c1 : *c0, st = *c2;
    std::vector<LVRef> out;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
      out.push_back(integer(Dim::constant(i)));
      if (out.size() > 4096) unsupported("a loop of more than 4096 iterations (graph loops are unrolled)", at);
    }
    return tuple(out, true);
  }
  if (name == "cdiv") {
    Dim x = dimOf(A(0, "a"), at), y = dimOf(A(1, "b"), at);
    auto cx = x.constantValue(), cy = y.constantValue();
    if (cx && cy && *cy > 0) return integer(Dim::constant((*cx + *cy - 1) / *cy));
    // (a + b - 1) / b, exact in the dim algebra; where a grid is evaluated it is floored,
    // which makes it the ceiling division.
    if (auto q = (x + y - Dim::constant(1)).divide(y)) return integer(*q);
    unsupported("cdiv of sizes known only at run time", at);
  }
  if (name == "tuple" || name == "list") return tuple(iterate(A(0, "x"), at), name == "list");
  if (name == "random.normal" || name == "random.uniform") {
    LVRef key = A(0, "key");
    if (!key || key->kind != LV::K::Key) unsupported("a random draw without a key", at);
    std::vector<Dim> shape = shapeOf(A(1, "shape"), at);
    DTypeAttr d = dtypeArg(A(2, "dtype"), {DType::F32, {}});
    return tensor(op(name == "random.normal" ? OpKind::RandomNormal : OpKind::RandomUniform, {key->v},
                     {{"shape", shape}, {"dtype", d}}, at));
  }
  if (name == "random.split") {
    LVRef key = A(0, "key");
    auto n = A(1, "num") ? constInt(A(1, "num")) : std::optional<int64_t>(2);
    if (!key || key->kind != LV::K::Key || !n) unsupported("this random.split", at);
    std::vector<LVRef> out;
    for (int64_t i = 0; i < *n; ++i) out.push_back(tensor(op(OpKind::KeySplit, {key->v}, {{"index", i}, {"count", *n}}, at)));
    return tuple(out);
  }
  if (name == "random.bernoulli") {
    // bernoulli(p) is uniform < p (runtime/Random.h draws both from the same 24 bits).
    LVRef key = A(0, "key"), p = A(1, "p"), shapeArg = A(2, "shape");
    if (!key || key->kind != LV::K::Key) unsupported("a random draw without a key", at);
    Value *pv = p ? asTensor(p, DType::F32, at) : constant(0.5, DType::F32, at);
    std::vector<Dim> shape = shapeArg && shapeArg->kind != LV::K::None ? shapeOf(shapeArg, at) : pv->type.dims;
    Value *u = op(OpKind::RandomUniform, {key->v}, {{"shape", shape}, {"dtype", DTypeAttr{DType::F32, {}}}}, at);
    return tensor(op(OpKind::Lt, {u, pv}, {}, at));
  }
  if (name == "stop_gradient") {
    // A fresh alias of each tensor leaf that autodiff treats as a constant.
    std::function<LVRef(const LVRef &)> stop = [&](const LVRef &x) -> LVRef {
      if (x->kind == LV::K::Tensor) {
        Value *a = op(OpKind::Reshape, {x->v}, {{"shape", x->v->type.dims}}, at);
        constants_.insert(a);
        return tensor(a);
      }
      if (x->kind == LV::K::Tuple || x->kind == LV::K::List || x->kind == LV::K::Dict) {
        LV c = *x;
        for (auto &e : c.elems) e = stop(e);
        for (auto &f : c.fields) f.second = stop(f.second);
        return mk(c);
      }
      return x;
    };
    return stop(A(0, "x"));
  }
  if (name == "grad" || name == "value_and_grad" || name == "checkpoint") {
    LVRef f = A(0, "f");
    if (!f) unsupported("`" + name + "` without a function", at);
    LV v;
    v.kind = LV::K::Transformed;
    v.transform = name == "grad" ? sema::Transform::Grad : name == "value_and_grad" ? sema::Transform::ValueAndGrad : sema::Transform::Checkpoint;
    v.inner = f;
    if (LVRef an = A(1, "argnums"); an && name != "checkpoint") {
      v.tupleArgnums = an->kind == LV::K::Tuple || an->kind == LV::K::List;
      for (int64_t n : intsOf(an, at)) v.argnums.push_back(static_cast<int>(n));
    }
    return mk(v);
  }
  if (name == "vjp") return vjpCall(args, at);
  if (name == "jvp") return jvpCall(A(0, "f"), A(1, "primals"), A(2, "tangents"), at);
  unsupported("`" + name + "` in a graph function", calleeRange);
}

} // namespace tsr::ir::lowering
