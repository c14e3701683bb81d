// Reverse-mode autodiff of a span of Graph IR (Autodiff.h): cotangents flow from the outputs back
// to the inputs through each op's vjp rule (GradRules.cpp), summed where a value has several
// uses. Checkpoint regions are recomputed at the point where the backward pass reaches them, and
// custom regions call the backward function lowering built for them. Under tensor parallelism
// (a VaryingScope with tracked mesh axes: Varying.h), all_reduce of a varying operand transposes
// to the identity and an invariant value's cotangents from varying uses are summed over the axes
// once, when its cotangent is first read.
#include "ir/autodiff/Autodiff.h"
#include "ir/autodiff/Varying.h"

#include <map>
#include <optional>

#include <unordered_map>

namespace tsr::ir::autodiff {

namespace {

// The op that turned an active float into the active integer `v`, for the error's message.
const Op *integerOrigin(const Value *v, const std::unordered_set<const Value *> &active) {
  const Op *at = v->def;
  for (int guard = 0; at && guard < 10000; ++guard) {
    const Value *next = nullptr;
    for (const Value *x : at->operands) {
      if (!active.count(x)) continue;
      if (differentiable(x->type)) return at;
      next = x;
    }
    if (!next) return at;
    at = next->def;
  }
  return at;
}

[[noreturn]] void integerPath(const Value *v, const std::unordered_set<const Value *> &active, Loc fallback) {
  const Op *o = integerOrigin(v, active);
  std::string what = o ? "the integer result of `" + std::string(opSpelling(o->kind)) + "`" : "an integer value";
  throw AutodiffError{AutodiffError::Kind::NonDifferentiable, what, o ? o->loc : fallback};
}

class Backprop {
public:
  Backprop(const Span &s) : g_(*s.g), constants_(s.constants), active_(activeValues(s)) {
    if (s.regions)
      for (const Region &r : *s.regions)
        if (r.begin >= s.begin && r.end <= s.end && r.begin < r.end) regions_.push_back(r);
    if (const VaryingParams *vp = currentVarying(); vp && !vp->tracked().empty()) va_.emplace(*s.g, *vp);
  }

  void seed(Value *v, Value *c) {
    if (c) accumulate(v, c, Loc{});
  }

  Value *result(Value *in) {
    flush(in);
    auto it = cot_.find(in);
    if (it != cot_.end()) return it->second;
    Emitter E(g_, Loc{});
    return E.zeros(in->type);
  }

  // Processes ops [begin, end) backwards; a region that ends where the walk is is handled whole
  // (the outermost one, when regions nest).
  void run(size_t begin, size_t end) {
    size_t i = end;
    while (i > begin) {
      const Region *found = nullptr;
      for (const Region &r : regions_)
        if (r.end == i && r.begin >= begin && (!found || r.begin < found->begin)) found = &r;
      if (found) {
        Region r = *found; // regions_ may grow while it is handled
        if (r.kind == Region::Kind::Checkpoint) recompute(r);
        else custom(r);
        i = r.begin;
        continue;
      }
      --i;
      step(g_.ops[i]);
    }
  }

private:
  bool isActive(const Value *v) const { return active_.count(v) > 0; }
  bool hasCot(const Value *v) const { return cot_.count(v) > 0 || pending_.count(v) > 0; }

  // `extra`: the tracked axes the contribution varies over and `v` does not (its use's result
  // varies over them): kept apart and summed over them when `v`'s cotangent is read (flush).
  void accumulate(Value *v, Value *c, Loc loc, const AxisSet &extra = {}) {
    if (!c) return;
    Emitter E(g_, loc);
    if (c->type.dims != v->type.dims) throw IRError{"autodiff: a cotangent of shape " + c->type.str() + " for a value of type " + v->type.str()};
    c = E.fit(c, v->type);
    if (!extra.empty()) {
      Value *&p = pending_[v][extra];
      p = p ? E.fit(E.add(p, c), v->type) : c;
      return;
    }
    auto it = cot_.find(v);
    if (it == cot_.end()) cot_[v] = c;
    else it->second = E.fit(E.add(it->second, c), v->type);
  }

  // The varying contributions to `v`'s cotangent, each summed over its axes (one all_reduce per
  // set of axes: the transpose of Megatron's f), added to the rest.
  void flush(Value *v) {
    auto it = pending_.find(v);
    if (it == pending_.end()) return;
    std::map<AxisSet, Value *> parts = std::move(it->second);
    pending_.erase(it);
    for (auto &[axes, c] : parts) {
      Emitter E(g_, c->def ? c->def->loc : Loc{});
      accumulate(v, sumOverAxes(E, c, axes, va_->params()), Loc{});
    }
  }

  // The tracked axes an op's results vary over and its operand `x` does not.
  AxisSet extraAxes(const Op *op, const Value *x) {
    AxisSet s;
    if (!va_) return s;
    const AxisSet &xs = va_->of(x);
    for (const Value *r : op->results)
      for (const std::string &a : va_->of(r))
        if (!xs.count(a)) s.insert(a);
    return s;
  }

  void step(Op *op) {
    Value *gy = nullptr;
    bool anyCot = false;
    for (Value *r : op->results)
      if (hasCot(r)) anyCot = true;
    if (!anyCot) return;
    for (Value *r : op->results) flush(r);
    const GradRule &rule = gradRule(op->kind);
    std::vector<bool> act(op->operands.size(), false);
    bool any = false;
    for (size_t j = 0; j < op->operands.size(); ++j) {
      Value *x = op->operands[j];
      if (!isActive(x)) continue;
      if (std::find(rule.noGradOperands.begin(), rule.noGradOperands.end(), j) != rule.noGradOperands.end()) continue;
      if (!differentiable(x->type)) {
        // A bool (a mask) carries no derivative, correctly; an integer computed from the
        // inputs would silently lose the derivative of the path through it.
        if (x->type.isKey() || x->type.dtype == DType::Bool) continue;
        integerPath(x, active_, op->loc);
      }
      act[j] = true;
      any = true;
    }
    if (!any) return;
    if (rule.vjpResults) {
      // An op of several results (scan): every result's cotangent at once.
      std::vector<Value *> gs;
      for (Value *r : op->results) {
        auto it = cot_.find(r);
        gs.push_back(it == cot_.end() ? nullptr : it->second);
      }
      Emitter E(g_, op->loc);
      std::vector<Value *> cs = rule.vjpResults(E, *op, gs, act);
      for (size_t j = 0; j < op->operands.size(); ++j)
        if (act[j] && j < cs.size() && cs[j]) accumulate(op->operands[j], cs[j], op->loc, extraAxes(op, op->operands[j]));
      return;
    }
    if (rule.nondiff || op->results.size() != 1) {
      std::string what = "`" + std::string(opSpelling(op->kind)) + "`";
      if (op->kind == OpKind::KernelCall)
        if (const std::string *callee = op->attrAs<std::string>("callee")) what = "the kernel `" + *callee + "`";
      throw AutodiffError{AutodiffError::Kind::NonDifferentiable, what, op->loc};
    }
    gy = cot_.at(op->result());
    if (!rule.vjp) throw IRError{"autodiff: no vjp rule for " + std::string(opSpelling(op->kind))};
    Emitter E(g_, op->loc);
    if (va_ && op->kind == OpKind::AllReduce)
      if (Value *c = trackedAllReduceVjp(E, *op, gy, va_->of(op->operands[0]), *va_)) {
        accumulate(op->operands[0], c, op->loc);
        return;
      }
    std::vector<Value *> cs = rule.vjp(E, *op, gy, act);
    for (size_t j = 0; j < op->operands.size(); ++j)
      if (act[j] && j < cs.size() && cs[j]) accumulate(op->operands[j], cs[j], op->loc, extraAxes(op, op->operands[j]));
  }

  // A checkpoint: its ops are cloned here, in the backward pass, and the clones differentiated,
  // so that the forward intermediates die once the forward pass has used them. The clones carry
  // a `remat` attribute with a number of their own, which keeps common-subexpression
  // elimination from merging them back into the originals.
  void recompute(const Region &r) {
    bool any = false;
    for (Value *out : r.outputs) any |= hasCot(out);
    if (!any) return;
    for (Value *out : r.outputs) flush(out);
    int64_t generation = ++rematCount_;
    std::unordered_map<const Value *, Value *> map;
    size_t cb = g_.ops.size();
    for (size_t k = r.begin; k < r.end; ++k) {
      const Op *o = g_.ops[k];
      std::vector<Value *> operands;
      for (Value *x : o->operands) {
        auto it = map.find(x);
        operands.push_back(it == map.end() ? x : it->second);
      }
      std::vector<Attr> attrs;
      for (const Attr &a : o->attrs) if (a.name != "remat") attrs.push_back(a);
      attrs.push_back({"remat", generation});
      std::vector<Type> types;
      for (Value *res : o->results) types.push_back(res->type);
      Op *c = g_.addWithTypes(o->kind, operands, attrs, types, o->loc);
      c->body = o->body;
      for (size_t j = 0; j < o->results.size(); ++j) {
        map[o->results[j]] = c->results[j];
        if (isActive(o->results[j])) active_.insert(c->results[j]);
      }
    }
    size_t ce = g_.ops.size();
    for (Value *out : r.outputs) {
      auto m = map.find(out);
      auto c = cot_.find(out);
      if (m == map.end() || c == cot_.end()) continue; // an output defined outside: it keeps its own
      Value *moved = c->second;
      cot_.erase(c);
      accumulate(m->second, moved, Loc{});
    }
    // Regions nested in this one, moved onto the clones.
    std::vector<Region> nested;
    for (const Region &q : regions_) {
      if (q.begin < r.begin || q.end > r.end || (q.begin == r.begin && q.end == r.end)) continue;
      Region s = q;
      s.begin = cb + (q.begin - r.begin);
      s.end = cb + (q.end - r.begin);
      for (auto *list : {&s.inputs, &s.outputs})
        for (Value *&v : *list)
          if (auto m = map.find(v); m != map.end()) v = m->second;
      nested.push_back(s);
    }
    regions_.insert(regions_.end(), nested.begin(), nested.end());
    run(cb, ce);
  }

  // A custom_vjp call: its backward function maps the outputs' cotangents to the inputs'.
  void custom(const Region &r) {
    bool anyCot = false, anyActive = false;
    for (Value *out : r.outputs) anyCot |= hasCot(out);
    for (Value *in : r.inputs) anyActive |= isActive(in) && differentiable(in->type);
    if (!anyCot || !anyActive) return;
    for (Value *out : r.outputs) flush(out);
    Loc loc = r.end > 0 ? g_.ops[r.end - 1]->loc : Loc{};
    Emitter E(g_, loc);
    std::vector<Value *> outCots;
    for (Value *out : r.outputs) {
      auto it = cot_.find(out);
      outCots.push_back(it != cot_.end() ? it->second : (differentiable(out->type) ? E.zeros(out->type) : nullptr));
    }
    std::vector<Value *> ins = r.backward(outCots);
    if (ins.size() != r.inputs.size())
      throw AutodiffError{AutodiffError::Kind::Structure, "the backward function returns " + std::to_string(ins.size()) +
                          " cotangent(s) for " + std::to_string(r.inputs.size()) + " input(s)", loc};
    for (size_t j = 0; j < ins.size(); ++j) {
      Value *in = r.inputs[j];
      if (!ins[j] || !isActive(in) || !differentiable(in->type)) continue;
      if (ins[j]->type.dims != in->type.dims)
        throw AutodiffError{AutodiffError::Kind::Structure, "the backward function's cotangent " + ins[j]->type.str() +
                            " for an input of type " + in->type.str(), loc};
      accumulate(in, ins[j], loc);
    }
  }

  Graph &g_;
  const std::unordered_set<const Value *> *constants_;
  std::unordered_set<const Value *> active_;
  std::unordered_map<const Value *, Value *> cot_;
  std::optional<VaryingAnalysis> va_;
  std::unordered_map<const Value *, std::map<AxisSet, Value *>> pending_;
  std::vector<Region> regions_;
  int64_t rematCount_ = 0;
};

} // namespace

std::vector<Value *> reverseMode(const Span &span, const std::vector<Value *> &seeds) {
  Backprop bp(span);
  for (size_t i = 0; i < span.outputs.size() && i < seeds.size(); ++i)
    if (differentiable(span.outputs[i]->type)) bp.seed(span.outputs[i], seeds[i]);
  bp.run(span.begin, span.end);
  std::vector<Value *> out;
  for (Value *in : span.inputs) out.push_back(bp.result(in));
  return out;
}

} // namespace tsr::ir::autodiff
