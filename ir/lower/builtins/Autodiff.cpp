// Graph lowering of the autodiff builtins: grad, value_and_grad and checkpoint make a transformed
// function value (its call is lowered in place, LowerTransforms.cpp); vjp and jvp lower at once;
// stop_gradient marks its results constant for autodiff; tree_map maps a function over pytrees.
#include "ir/lower/builtins/Rules.h"

#include <functional>

namespace tsr::ir::lowering {

namespace {

LVRef transformOf(BuiltinCall &c, sema::Transform tr) {
  LVRef f = c.arg(0, "f");
  if (!f) c.unsupported("`" + c.b.name + "` without a function");
  LV v;
  v.kind = LV::K::Transformed;
  v.transform = tr;
  v.inner = f;
  if (LVRef an = c.arg(1, "argnums"); an && tr != sema::Transform::Checkpoint) {
    v.tupleArgnums = an->kind == LV::K::Tuple || an->kind == LV::K::List;
    for (int64_t n : c.L.intsOf(an, c.at)) v.argnums.push_back(static_cast<int>(n));
  }
  if (LVRef aux = c.arg(2, "has_aux"); aux && tr != sema::Transform::Checkpoint) v.hasAux = aux->kind == LV::K::Bool && aux->b;
  return mk(v);
}

LVRef grad(BuiltinCall &c) { return transformOf(c, sema::Transform::Grad); }
LVRef valueAndGrad(BuiltinCall &c) { return transformOf(c, sema::Transform::ValueAndGrad); }
LVRef checkpoint(BuiltinCall &c) { return transformOf(c, sema::Transform::Checkpoint); }
// vmap(f, in_axes=0, out_axes=0): the transformed function; the checker has matched the axes.
LVRef vmap(BuiltinCall &c) {
  LVRef f = c.arg(0, "f");
  if (!f) c.unsupported("`vmap` without a function");
  LV v;
  v.kind = LV::K::Transformed;
  v.transform = sema::Transform::Vmap;
  v.inner = f;
  v.inAxes = c.arg(1, "in_axes");
  v.outAxes = c.arg(2, "out_axes");
  return mk(v);
}
LVRef vjp(BuiltinCall &c) { return c.L.vjpCall(c.args, c.at); }
LVRef jvp(BuiltinCall &c) { return c.L.jvpCall(c.arg(0, "f"), c.arg(1, "primals"), c.arg(2, "tangents"), c.at); }

// scan(f, init, xs, length=None, reverse=False): unrolled over its (compile-time) length for now:
// step i calls f on the carry and slice i of every xs leaf (from the end with reverse=True), and
// the ys are stacked along a new leading axis. The region op that compiles the body once is
// issue 20's next step (docs/autodiff.md, "scan").
LVRef scan(BuiltinCall &c) {
  LVRef f = c.arg(0, "f"), carry = c.arg(1, "init"), xs = c.arg(2, "xs"), len = c.arg(3, "length"), rev = c.arg(4, "reverse");
  bool reverse = rev && rev->kind == LV::K::Bool && rev->b;
  std::vector<Value *> leaves;
  if (xs) Lowering::tensorLeaves(xs, leaves);
  std::optional<int64_t> n;
  if (len && len->kind != LV::K::None) n = c.L.constInt(len);
  else if (!leaves.empty()) n = leaves[0]->type.dims.at(0).constantValue();
  if (!n) c.unsupported("scan over a number of steps not known at compile time (the body is unrolled until scan is a region op)");
  std::function<LVRef(const LVRef &, int64_t)> at = [&](const LVRef &v, int64_t i) -> LVRef {
    if (v->kind == LV::K::Tensor) {
      const auto &d = v->v->type.dims;
      std::vector<Dim> start(d.size(), Dim::constant(0)), stop = d;
      start[0] = Dim::constant(i);
      stop[0] = Dim::constant(i + 1);
      Value *s = c.L.op(OpKind::Slice, {v->v}, {{"start", start}, {"stop", stop}, {"step", std::vector<int64_t>(d.size(), 1)}}, c.at);
      return tensor(c.L.op(OpKind::Reshape, {s}, {{"shape", std::vector<Dim>(d.begin() + 1, d.end())}}, c.at));
    }
    LV copy = *v;
    for (auto &e : copy.elems) e = at(e, i);
    for (auto &fl : copy.fields) fl.second = at(fl.second, i);
    return mk(copy);
  };
  std::vector<LVRef> ys(static_cast<size_t>(*n));
  for (int64_t k = 0; k < *n; ++k) {
    int64_t i = reverse ? *n - 1 - k : k;
    LVRef x = xs ? at(xs, i) : none();
    LVRef r = c.L.callValue(f, {carry, x}, {}, c.at);
    if ((r->kind != LV::K::Tuple && r->kind != LV::K::List) || r->elems.size() != 2) c.unsupported("a scan body that does not return (carry, y)");
    carry = r->elems[0];
    ys[static_cast<size_t>(i)] = r->elems[1];
  }
  // Stack the ys leaf by leaf.
  std::function<LVRef(const std::vector<LVRef> &)> stack = [&](const std::vector<LVRef> &parts) -> LVRef {
    const LVRef &p0 = parts.at(0);
    if (p0->kind == LV::K::Tensor || Lowering::isNumber(p0)) {
      std::vector<Value *> rows;
      for (auto &p : parts) {
        Value *t = c.L.tensorOf(p, c.at);
        std::vector<Dim> one{Dim::constant(1)};
        one.insert(one.end(), t->type.dims.begin(), t->type.dims.end());
        rows.push_back(c.L.op(OpKind::Reshape, {t}, {{"shape", one}}, c.at));
      }
      return tensor(rows.size() == 1 ? rows[0] : c.L.op(OpKind::Concat, rows, {{"axis", int64_t{0}}}, c.at));
    }
    LV copy = *p0;
    for (size_t j = 0; j < copy.elems.size(); ++j) {
      std::vector<LVRef> sub;
      for (auto &p : parts) sub.push_back(p->elems.at(j));
      copy.elems[j] = stack(sub);
    }
    for (size_t j = 0; j < copy.fields.size(); ++j) {
      std::vector<LVRef> sub;
      for (auto &p : parts) sub.push_back(p->fields.at(j).second);
      copy.fields[j].second = stack(sub);
    }
    return mk(copy);
  };
  return tuple({carry, *n > 0 ? stack(ys) : none()});
}

// stop_gradient(x): a fresh alias of each tensor leaf that autodiff treats as a constant.
LVRef stopGradient(BuiltinCall &c) {
  std::function<LVRef(const LVRef &)> stop = [&](const LVRef &x) -> LVRef {
    if (x->kind == LV::K::Tensor) {
      Value *a = c.L.op(OpKind::Reshape, {x->v}, {{"shape", x->v->type.dims}}, c.at);
      c.L.constants_.insert(a);
      return tensor(a);
    }
    if (x->kind == LV::K::Tuple || x->kind == LV::K::List || x->kind == LV::K::Dict) {
      LV copy = *x;
      for (auto &e : copy.elems) e = stop(e);
      for (auto &f : copy.fields) f.second = stop(f.second);
      return mk(copy);
    }
    return x;
  };
  return stop(c.arg(0, "x"));
}

// tree_map(fn, tree, *rest): fn called on corresponding leaves; tuples, lists, dicts and None are
// structure (as jax.tree_util.tree_map).
LVRef treeMap(BuiltinCall &c) {
  LVRef fn = c.args.at(0);
  std::vector<LVRef> trees(c.args.begin() + 1, c.args.end());
  std::function<LVRef(const std::vector<LVRef> &)> map = [&](const std::vector<LVRef> &ts) -> LVRef {
    const LVRef &t0 = ts.at(0);
    if (t0->kind == LV::K::Tuple || t0->kind == LV::K::List) {
      std::vector<LVRef> out;
      for (size_t i = 0; i < t0->elems.size(); ++i) {
        std::vector<LVRef> sub;
        for (auto &t : ts) {
          if (t->kind != t0->kind || t->elems.size() != t0->elems.size()) c.unsupported("tree_map over trees of different structures");
          sub.push_back(t->elems[i]);
        }
        out.push_back(map(sub));
      }
      return tuple(out, t0->kind == LV::K::List);
    }
    if (t0->kind == LV::K::Dict) {
      LV d;
      d.kind = LV::K::Dict;
      for (auto &[k, v] : t0->fields) {
        std::vector<LVRef> sub;
        for (auto &t : ts) {
          LVRef found;
          if (t->kind == LV::K::Dict)
            for (auto &[k2, v2] : t->fields) if (k2 == k) found = v2;
          if (!found) c.unsupported("tree_map over trees of different structures (key \"" + k + "\")");
          sub.push_back(found);
        }
        d.fields.push_back({k, map(sub)});
      }
      return mk(d);
    }
    if (t0->kind == LV::K::None) return t0;
    return c.L.callValue(fn, ts, {}, c.at);
  };
  return map(trees);
}

} // namespace

void addAutodiffRules(GraphRules &r) {
  r["grad"] = grad;
  r["value_and_grad"] = valueAndGrad;
  r["checkpoint"] = checkpoint;
  r["vmap"] = vmap;
  r["scan"] = scan;
  r["vjp"] = vjp;
  r["jvp"] = jvp;
  r["stop_gradient"] = stopGradient;
  r["tree_map"] = treeMap;
}

} // namespace tsr::ir::lowering
