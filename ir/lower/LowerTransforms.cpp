// Graph lowering: the autodiff transforms (grad, value_and_grad, vjp, jvp, checkpoint,
// custom_vjp), lowered in place through ir/autodiff (docs/ir.md, "Autodiff").
//
// A transformed call is lowered in place: the differentiated arguments get fresh aliases (so
// that a tensor also passed elsewhere is differentiated only here), the function is lowered
// inline, and ir/autodiff appends the derivative of that span of ops. Values the function
// closes over are constants of the span. Checkpoints and custom_vjp calls record regions that
// reverse mode treats with their own rules; stop_gradient's results are the span's constants.
#include "ir/lower/Lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tsr::ir::lowering {

std::string Lowering::locText(Loc l) const {
  if (!l.valid() || l.file > m_.files.size()) return "";
  return m_.files[l.file - 1] + ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
}

[[noreturn]] void Lowering::autodiffError(DiagKind k, std::vector<std::string> args, SourceRange at, std::vector<std::string> notes) {
  CompileError e{formatDiag(k, args), at, k, std::move(args), std::move(notes)};
  throw e;
}

void Lowering::tensorLeaves(const LVRef &v, std::vector<Value *> &out, bool keys) {
  switch (v->kind) {
  case LV::K::Tensor: out.push_back(v->v); return;
  case LV::K::Key: if (keys) out.push_back(v->v); return;
  case LV::K::Tuple: case LV::K::List: for (auto &e : v->elems) tensorLeaves(e, out, keys); return;
  case LV::K::Dict: for (auto &f : v->fields) tensorLeaves(f.second, out, keys); return;
  default: return;
  }
}

LVRef Lowering::aliasLeaves(const LVRef &v, std::vector<Value *> &inputs, SourceRange at, bool strict, const std::string &path) {
  switch (v->kind) {
  case LV::K::Tensor:
    if (autodiff::differentiable(v->v->type)) {
      Value *a = op(OpKind::Reshape, {v->v}, {{"shape", v->v->type.dims}}, at);
      inputs.push_back(a);
      return tensor(a);
    }
    break;
  case LV::K::Tuple: case LV::K::List: {
    LV c = *v;
    for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = aliasLeaves(c.elems[i], inputs, at, strict, path + "[" + std::to_string(i) + "]");
    return mk(c);
  }
  case LV::K::Dict: {
    LV c = *v;
    for (auto &f : c.fields) f.second = aliasLeaves(f.second, inputs, at, strict, path + "[\"" + f.first + "\"]");
    return mk(c);
  }
  case LV::K::None: return v;
  default: break;
  }
  if (strict) {
    std::string what = v->kind == LV::K::Tensor ? v->v->type.str() : kindName(v);
    autodiffError(DiagKind::GradNonFloat, {path + " (" + what + ")"}, at);
  }
  return v;
}

LVRef Lowering::replaceLeaves(const LVRef &like, const std::vector<Value *> &vals, size_t &next, SourceRange at) {
  switch (like->kind) {
  case LV::K::Tensor:
    if (isFloatTensor(like)) return tensor(vals.at(next++));
    return tensor(autodiff::Emitter(g_, loc(at)).zeros(like->v->type));
  case LV::K::Tuple: case LV::K::List: {
    LV c = *like;
    for (auto &e : c.elems) e = replaceLeaves(e, vals, next, at);
    return mk(c);
  }
  case LV::K::Dict: {
    LV c = *like;
    for (auto &f : c.fields) f.second = replaceLeaves(f.second, vals, next, at);
    return mk(c);
  }
  default: return none();
  }
}

bool Lowering::matchLeaves(const LVRef &like, const LVRef &given, std::vector<Value *> &out, SourceRange at) {
  if (like->kind == LV::K::Tensor) {
    if (!isFloatTensor(like)) return true;
    if (given->kind == LV::K::None) { out.push_back(nullptr); return true; }
    const Type &t = like->v->type;
    if (given->kind == LV::K::Tensor) {
      if (given->v->type.dims != t.dims) return false;
      out.push_back(autodiff::Emitter(g_, loc(at)).fit(given->v, t));
      return true;
    }
    if ((given->kind == LV::K::Float || given->kind == LV::K::Int) && t.dims.empty()) {
      out.push_back(autodiff::Emitter(g_, loc(at)).fit(asTensor(given, t.dtype, at), t));
      return true;
    }
    return false;
  }
  if (like->kind == LV::K::Tuple || like->kind == LV::K::List) {
    if ((given->kind != LV::K::Tuple && given->kind != LV::K::List) || given->elems.size() != like->elems.size()) return false;
    for (size_t i = 0; i < like->elems.size(); ++i)
      if (!matchLeaves(like->elems[i], given->elems[i], out, at)) return false;
    return true;
  }
  if (like->kind == LV::K::Dict) {
    if (given->kind != LV::K::Dict || given->fields.size() != like->fields.size()) return false;
    for (auto &[k, v] : like->fields) {
      const LVRef *g = nullptr;
      for (auto &f : given->fields) if (f.first == k) g = &f.second;
      if (!g || !matchLeaves(v, *g, out, at)) return false;
    }
    return true;
  }
  return true;
}

std::string Lowering::structureText(const LVRef &v, SourceRange at) {
  try {
    return sema::typeStr(structureOf(v, at));
  } catch (CompileError &) {
    return "a " + kindName(v);
  }
}

std::string Lowering::functionName(const LVRef &f) {
  if (f->kind == LV::K::Function) return f->fn->name;
  if (f->kind == LV::K::Lambda) return "lambda";
  if (f->kind == LV::K::Builtin) return f->builtin->name;
  return "the function";
}

autodiff::Span Lowering::span(size_t begin, size_t end, std::vector<Value *> inputs, std::vector<Value *> outputs) {
  autodiff::Span s;
  s.g = &g_;
  s.begin = begin;
  s.end = end;
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  s.constants = &constants_;
  s.regions = &regions_;
  return s;
}

LVRef Lowering::lowerSpan(const LVRef &f, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at, size_t &begin, size_t &end) {
  begin = g_.ops.size();
  ++diffDepth_;
  LVRef out;
  try {
    out = callValue(f, args, kwargs, at);
  } catch (...) {
    --diffDepth_;
    throw;
  }
  --diffDepth_;
  end = g_.ops.size();
  return out;
}

LVRef Lowering::callTransformed(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
  switch (t.transform) {
  case sema::Transform::Grad: case sema::Transform::ValueAndGrad: return gradCall(t, std::move(args), kwargs, at);
  case sema::Transform::Vmap: return vmapCall(t, std::move(args), kwargs, at);
  case sema::Transform::Checkpoint: {
    // Forward, a checkpointed function computes what the function does; the region tells
    // reverse mode to recompute it instead of keeping its intermediates.
    size_t begin = g_.ops.size();
    LVRef out = callValue(t.inner, args, kwargs, at);
    autodiff::Region r;
    r.kind = autodiff::Region::Kind::Checkpoint;
    r.begin = begin;
    r.end = g_.ops.size();
    tensorLeaves(out, r.outputs);
    if (r.end > r.begin) regions_.push_back(r);
    return out;
  }
  case sema::Transform::Pullback: {
    if (args.size() != 1 || !kwargs.empty()) unsupported("a pullback called with other than one cotangent", at);
    const Tape &tp = *t.tape;
    std::vector<Value *> seeds;
    if (!matchLeaves(tp.out, args[0], seeds, at))
      autodiffError(DiagKind::AutodiffStructure, {"vjp", "the cotangent " + structureText(args[0], at) + " does not have the structure of the output " + structureText(tp.out, at)}, at);
    std::vector<Value *> outs;
    std::vector<Value *> seedsFull;
    {
      std::vector<Value *> all;
      tensorLeaves(tp.out, all);
      size_t k = 0;
      for (Value *o : all) {
        if (!autodiff::differentiable(o->type)) continue;
        outs.push_back(o);
        seedsFull.push_back(seeds.at(k++));
      }
    }
    auto cots = runAutodiff([&] { return autodiff::reverseMode(span(tp.begin, tp.end, tp.inputs, outs), seedsFull); }, at);
    std::vector<LVRef> per;
    size_t next = 0;
    for (auto &p : tp.primals) per.push_back(replaceLeaves(p, cots, next, at));
    return tuple(per);
  }
  default: unsupported("this transformed function", at);
  }
}

LVRef Lowering::gradCall(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
  std::string tname = t.transform == sema::Transform::Grad ? "grad" : "value_and_grad";
  std::string fname = functionName(t.inner);
  std::vector<int> nums = t.argnums.empty() ? std::vector<int>{0} : t.argnums;
  std::vector<Value *> inputs;
  for (int n : nums) {
    if (n < 0 || static_cast<size_t>(n) >= args.size())
      autodiffError(DiagKind::ArgnumsRange, {std::to_string(n), fname, std::to_string(args.size())}, at);
    args[static_cast<size_t>(n)] = aliasLeaves(args[static_cast<size_t>(n)], inputs, at, true, "argument " + std::to_string(n));
  }
  size_t begin = 0, end = 0;
  LVRef out = lowerSpan(t.inner, args, kwargs, at, begin, end);
  // has_aux=True: the function's pair (loss, aux); aux is passed through, not differentiated.
  LVRef aux;
  if (t.hasAux) {
    if ((out->kind != LV::K::Tuple && out->kind != LV::K::List) || out->elems.size() != 2)
      autodiffError(DiagKind::AutodiffStructure, {tname + "(..., has_aux=True)", "`" + fname + "` returns " + structureText(out, at) + ", not a pair (loss, aux)"}, at);
    aux = out->elems[1];
    out = out->elems[0];
  }
  Value *y = nullptr;
  if (out->kind == LV::K::Tensor && autodiff::differentiable(out->v->type)) {
    Dim n = Dim::constant(1);
    for (auto &d : out->v->type.dims) n = n * d;
    if (n.isOne()) y = out->v;
  } else if (out->kind == LV::K::Float) {
    y = constant(out->f, DType::F32, at); // a constant: every gradient is zero
  }
  if (!y) autodiffError(DiagKind::GradNonScalar, {tname, fname, structureText(out, at)}, at);
  autodiff::Emitter E(g_, loc(at));
  // The loss's type: the value's, or the function's declared return type (`-> f16
  // @loss_scale(1024.0)`), whose policies lowering does not attach to the value.
  std::optional<double> scale = y->type.policies.lossScale;
  if (!scale && t.inner->kind == LV::K::Function && t.inner->fn->declaredReturn)
    scale = t.inner->fn->declaredReturn->policies.lossScale;
  Value *seed = E.fit(E.broadcast(E.scalar(scale ? *scale : 1.0, y->type), y->type.dims), y->type);
  auto cots = runAutodiff([&] { return autodiff::reverseMode(span(begin, end, inputs, {y}), {seed}); }, at);
  if (scale)
    for (Value *&c : cots) c = E.fit(E.div(c, E.scalar(*scale, c->type)), c->type);
  std::vector<LVRef> grads;
  size_t next = 0;
  for (int n : nums) grads.push_back(replaceLeaves(args[static_cast<size_t>(n)], cots, next, at));
  LVRef g = grads.size() == 1 && !t.tupleArgnums ? grads[0] : tuple(grads);
  if (t.transform == sema::Transform::Grad) return aux ? tuple({g, aux}) : g;
  return tuple({aux ? tuple({out, aux}) : out, g});
}

LVRef Lowering::vjpCall(const std::vector<LVRef> &all, SourceRange at) {
  if (all.empty()) unsupported("vjp without a function", at);
  std::vector<LVRef> primals(all.begin() + 1, all.end());
  auto tp = std::make_shared<Tape>();
  for (size_t i = 0; i < primals.size(); ++i) primals[i] = aliasLeaves(primals[i], tp->inputs, at, false, "primal " + std::to_string(i));
  LVRef out = lowerSpan(all[0], primals, {}, at, tp->begin, tp->end);
  tp->out = out;
  tp->primals = primals;
  tensorLeaves(out, tp->outputs);
  LV pb;
  pb.kind = LV::K::Transformed;
  pb.transform = sema::Transform::Pullback;
  pb.tape = tp;
  return tuple({out, mk(pb)});
}

LVRef Lowering::jvpCall(const LVRef &f, const LVRef &primalsArg, const LVRef &tangentsArg, SourceRange at) {
  auto isSeq = [](const LVRef &v) { return v && (v->kind == LV::K::Tuple || v->kind == LV::K::List); };
  if (!isSeq(primalsArg) || !isSeq(tangentsArg) || primalsArg->elems.size() != tangentsArg->elems.size())
    autodiffError(DiagKind::TangentMismatch, {structureText(tangentsArg ? tangentsArg : none(), at), structureText(primalsArg ? primalsArg : none(), at)}, at);
  std::vector<LVRef> primals = primalsArg->elems;
  std::vector<Value *> inputs, tangents;
  for (size_t i = 0; i < primals.size(); ++i) {
    std::vector<Value *> ts;
    if (!matchLeaves(primals[i], tangentsArg->elems[i], ts, at))
      autodiffError(DiagKind::TangentMismatch, {structureText(tangentsArg->elems[i], at), structureText(primals[i], at)}, at);
    std::vector<Value *> ins;
    primals[i] = aliasLeaves(primals[i], ins, at, false, "primal " + std::to_string(i));
    for (size_t k = 0; k < ins.size(); ++k) {
      inputs.push_back(ins[k]);
      tangents.push_back(ts[k] ? ts[k] : autodiff::Emitter(g_, loc(at)).zeros(ins[k]->type));
    }
  }
  size_t begin = 0, end = 0;
  LVRef out = lowerSpan(f, primals, {}, at, begin, end);
  std::vector<Value *> outs;
  tensorLeaves(out, outs);
  std::vector<Value *> floatOuts;
  for (Value *o : outs) if (autodiff::differentiable(o->type)) floatOuts.push_back(o);
  auto touts = runAutodiff([&] { return autodiff::forwardMode(span(begin, end, inputs, floatOuts), tangents); }, at);
  size_t next = 0;
  return tuple({out, replaceLeaves(out, touts, next, at)});
}

LVRef Lowering::customVjpCall(const FunctionInfo &fn, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
  size_t begin = g_.ops.size();
  LVRef r = callFunction(*fn.vjpFwd, args, kwargs, at);
  if ((r->kind != LV::K::Tuple && r->kind != LV::K::List) || r->elems.size() != 2)
    autodiffError(DiagKind::CustomVjpSignature, {"the forward function `" + fn.vjpFwd->name + "` returns " + structureText(r, at) + ", not (output, residuals)"}, at);
  LVRef out = r->elems[0], res = r->elems[1];
  autodiff::Region region;
  region.kind = autodiff::Region::Kind::Custom;
  region.begin = begin;
  region.end = g_.ops.size();
  for (auto &a : args) tensorLeaves(a, region.inputs);
  tensorLeaves(out, region.outputs);
  const FunctionInfo *bwd = fn.vjpBwd;
  std::string name = fn.name;
  region.backward = [this, bwd, name, out, res, args, kwargs, at](const std::vector<Value *> &cots) {
    std::vector<Value *> floatCots;
    {
      std::vector<Value *> leaves;
      tensorLeaves(out, leaves);
      for (size_t i = 0; i < leaves.size(); ++i)
        if (autodiff::differentiable(leaves[i]->type)) floatCots.push_back(cots.at(i));
    }
    size_t next = 0;
    LVRef g = replaceLeaves(out, floatCots, next, at);
    LVRef back = callFunction(*bwd, {res, g}, kwargs, at);
    std::vector<LVRef> per;
    if ((back->kind == LV::K::Tuple || back->kind == LV::K::List) && !(args.size() == 1 && back->elems.size() != 1)) per = back->elems;
    else per = {back};
    if (per.size() != args.size())
      throw autodiff::AutodiffError{autodiff::AutodiffError::Kind::Structure,
                                    "the backward function `" + bwd->name + "` returns " + std::to_string(per.size()) +
                                        " cotangent(s) for the " + std::to_string(args.size()) + " argument(s) of `" + name + "`", loc(at)};
    std::vector<Value *> ins;
    for (size_t i = 0; i < args.size(); ++i) {
      // One entry per tensor leaf of the argument (the region's inputs), null for none.
      std::vector<Value *> fl;
      if (!matchLeaves(args[i], per[i], fl, at))
        throw autodiff::AutodiffError{autodiff::AutodiffError::Kind::Structure,
                                      "the backward function `" + bwd->name + "` returns " + structureText(per[i], at) + " as the cotangent of " +
                                          structureText(args[i], at) + " (argument " + std::to_string(i) + " of `" + name + "`)", loc(at)};
      std::vector<Value *> leaves;
      tensorLeaves(args[i], leaves);
      size_t k = 0;
      for (Value *l : leaves) ins.push_back(autodiff::differentiable(l->type) ? fl.at(k++) : nullptr);
    }
    return ins;
  };
  regions_.push_back(region);
  return out;
}

} // namespace tsr::ir::lowering
