// Varying-axes tracking for reverse mode's collectives (Varying.h).
#include "ir/autodiff/Varying.h"

#include "ir/autodiff/GradRules.h"

#include <algorithm>

namespace tsr::ir::autodiff {

namespace {
thread_local const VaryingParams *current = nullptr;

std::string strAttr(const Op &o, const char *n) {
  const std::string *v = o.attrAs<std::string>(n);
  return v ? *v : std::string();
}
} // namespace

AxisSet VaryingParams::tracked() const {
  AxisSet t;
  for (const AxisSet &p : params) t.insert(p.begin(), p.end());
  return t;
}

int64_t VaryingParams::groupSize(const AxisSet &axes) const {
  int64_t n = 1;
  for (size_t i = 0; i < meshAxes.size(); ++i)
    if (axes.count(meshAxes[i])) n *= meshShape[i];
  return n;
}

std::string VaryingParams::axesAttr(const AxisSet &axes) const {
  std::string s;
  for (const std::string &a : meshAxes)
    if (axes.count(a)) s += (s.empty() ? "" : ",") + a;
  return s;
}

VaryingScope::VaryingScope(const VaryingParams *v) : saved_(current) { current = v; }
VaryingScope::~VaryingScope() { current = saved_; }
const VaryingParams *currentVarying() { return current; }

VaryingAnalysis::VaryingAnalysis(const Graph &g, const VaryingParams &vp) : g_(g), vp_(vp), tracked_(vp.tracked()) {
  for (size_t i = 0; i < g.params.size(); ++i) {
    AxisSet s;
    if (i < vp.params.size()) s = vp.params[i];
    of_[g.params[i]] = std::move(s);
  }
}

AxisSet VaryingAnalysis::opAxes(const Op &o) const {
  const std::string a = strAttr(o, "axes");
  AxisSet s;
  if (a.empty()) {
    s.insert(vp_.meshAxes.begin(), vp_.meshAxes.end());
    return s;
  }
  for (size_t p = 0;;) {
    size_t q = a.find(',', p);
    s.insert(a.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return s;
}

// Forwards over the ops not yet seen: all_reduce removes its axes; every other op varies over the
// union of its operands' axes, a collective also over its own tracked axes (its result differs
// per rank, or, for all_gather and broadcast, counts as doing so: JAX's all_gather).
void VaryingAnalysis::extend() {
  for (; done_ < g_.ops.size(); ++done_) {
    const Op *o = g_.ops[done_];
    AxisSet s;
    for (const Value *x : o->operands) {
      auto it = of_.find(x);
      if (it != of_.end()) s.insert(it->second.begin(), it->second.end());
    }
    if (isCollective(o->kind)) {
      AxisSet ax = opAxes(*o);
      if (o->kind == OpKind::AllReduce) {
        for (const std::string &a : ax) s.erase(a);
      } else {
        for (const std::string &a : ax)
          if (tracked_.count(a)) s.insert(a);
      }
    }
    for (const Value *r : o->results) of_[r] = s;
  }
}

const AxisSet &VaryingAnalysis::of(const Value *v) {
  auto it = of_.find(v);
  if (it != of_.end()) return it->second;
  extend();
  it = of_.find(v);
  static const AxisSet none;
  return it == of_.end() ? none : it->second;
}

Value *sumOverAxes(Emitter &E, Value *c, const AxisSet &axes, const VaryingParams &vp) {
  return E.fit(E.op(OpKind::AllReduce, {c}, {{"axes", vp.axesAttr(axes)}, {"group", vp.groupSize(axes)}, {"op", std::string("sum")}}), c->type);
}

Value *trackedAllReduceVjp(Emitter &E, const Op &o, Value *g, const AxisSet &xAxes, const VaryingAnalysis &va) {
  const VaryingParams &vp = va.params();
  AxisSet reduced = va.opAxes(o), varying, invariant;
  for (const std::string &a : reduced) (xAxes.count(a) ? varying : invariant).insert(a);
  if (varying.empty()) return nullptr;
  Value *x = o.operands[0], *y = o.result();
  const std::string op = strAttr(o, "op");
  // The cotangent summed over the reduced axes the operand is invariant over: the ranks there
  // hold the same x, so y counts it once per rank (y = n x).
  Value *total = invariant.empty() ? g : sumOverAxes(E, g, invariant, vp);
  if (op == "sum") return E.fit(total, x->type);
  if (op == "mean") {
    // y = (sum over the group) / n: each rank's x contributes 1/n of the (once summed) cotangent.
    return E.fit(E.div(total, E.scalar(double(vp.groupSize(reduced)), total->type)), x->type);
  }
  if (op == "prod") return E.fit(E.div(E.mul(total, y), x), x->type);
  // max, min: the ranks holding the extreme share the cotangent, split evenly among ties.
  Value *hit = E.op(OpKind::Cast, {E.op(OpKind::Eq, {x, y})}, {{"dtype", DTypeAttr{x->type.dtype, x->type.policies}}});
  Value *ties = E.op(OpKind::AllReduce, {hit}, {{"axes", vp.axesAttr(reduced)}, {"group", vp.groupSize(reduced)}, {"op", std::string("sum")}});
  return E.fit(E.mul(total, E.div(hit, ties)), x->type);
}

} // namespace tsr::ir::autodiff
