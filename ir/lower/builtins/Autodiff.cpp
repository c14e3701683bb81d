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

// scan(f, init, xs, length=None, reverse=False): one scan region op whose body is f compiled
// once (ir/lower/LowerScan.cpp).
LVRef scan(BuiltinCall &c) {
  LVRef rev = c.arg(4, "reverse");
  return c.L.scanCall(c.arg(0, "f"), c.arg(1, "init"), c.arg(2, "xs"), c.arg(3, "length"), rev && rev->kind == LV::K::Bool && rev->b, c.at);
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
