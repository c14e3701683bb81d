// Kernel lowering: names, expressions, subscripts, attributes, calls and inlined helpers.
#include "ir/lower/kernel/KernelLowering.h"

namespace tsr::ir::kernel_lowering {

KVRef KernelLowering::lookup(const std::string &id, SourceRange at) {
  Frame &fr = *frames_.back();
  auto it = fr.env.find(id);
  if (it != fr.env.end()) return it->second;
  if (fr.fn == kernel_) {
    auto s = symbols_.find(id);
    if (s != symbols_.end()) {
      KV v;
      v.kind = KV::K::Tile;
      v.v = dimOf(s->second.tensor, s->second.axis, at);
      v.weak = true;
      v.known = s->second.known;
      return mk(v);
    }
  }
  auto g = fr.module->globals.find(id);
  if (g != fr.module->globals.end()) {
    const sema::Symbol &sym = g->second;
    if (sym.kind == sema::Symbol::Kind::Function) { KV v; v.kind = KV::K::Function; v.fn = sym.fn; return mk(v); }
    if (sym.kind == sema::Symbol::Kind::Module && sym.type && sym.type->module) { KV v; v.kind = KV::K::Module; v.module = sym.type->module; return mk(v); }
    if (sym.type) {
      const sema::Type &t = *sym.type;
      if (t.is(sema::TypeKind::Int) && t.intValue && t.intValue->constantValue()) return integer(*t.intValue->constantValue());
      if (t.is(sema::TypeKind::Float) && t.floatValue) return floating(*t.floatValue);
      if (t.is(sema::TypeKind::Bool) && t.boolValue) return boolean(*t.boolValue);
      if (t.is(sema::TypeKind::Str) && t.strValue) { KV v; v.kind = KV::K::Str; v.s = *t.strValue; return mk(v); }
      if (t.is(sema::TypeKind::DTypeVal)) { KV v; v.kind = KV::K::DType; v.dt = t.dtype; return mk(v); }
    }
    unsupported("the module constant `" + id + "` in a kernel", at);
  }
  if (auto d = dtypeFromName(id)) { KV v; v.kind = KV::K::DType; v.dt = *d; return mk(v); }
  if (id == "INF") return floating(INFINITY);
  if (id == "NAN") return floating(NAN);
  if (id == "True") return boolean(true);
  if (id == "False") return boolean(false);
  if (const sema::BuiltinInfo *b = sema::findBuiltin(id)) { KV v; v.kind = KV::K::Builtin; v.builtin = b; return mk(v); }
  unsupported("the name `" + id + "` here", at);
}

bool KernelLowering::truth(const KVRef &v, SourceRange at) {
  switch (v->kind) {
  case KV::K::None: return false;
  case KV::K::Bool: return v->b;
  case KV::K::Int: return v->i != 0;
  case KV::K::Float: return v->f != 0;
  case KV::K::Str: return !v->s.empty();
  case KV::K::Tuple: return !v->elems.empty();
  default: unsupported("the truth of a " + kindName(v) + " at compile time", at);
  }
}

tile::Value *KernelLowering::condition(const KVRef &v, SourceRange at) {
  tile::Value *c = value(v, at);
  if (!c->type.isScalar()) unsupported("an `if` on a tile (use tile.where)", at);
  if (c->type.dtype != DType::Bool) c = op(TOp::Ne, {c, constant(integer(0), c->type.dtype, {}, at)}, {}, at);
  return c;
}

KVRef KernelLowering::expr(Expr *e) {
  switch (e->kind) {
  case Kind::Name: return lookup(static_cast<Name *>(e)->id, e->range);
  case Kind::IntLit: return integer(static_cast<IntLit *>(e)->value);
  case Kind::FloatLit: return floating(static_cast<FloatLit *>(e)->value);
  case Kind::BoolLit: return boolean(static_cast<BoolLit *>(e)->value);
  case Kind::NoneLit: return none();
  case Kind::StrLit: { KV v; v.kind = KV::K::Str; v.s = static_cast<StrLit *>(e)->value; return mk(v); }
  case Kind::Tuple: case Kind::List: {
    std::vector<KVRef> es;
    for (Expr *x : e->kind == Kind::Tuple ? static_cast<Tuple *>(e)->elts : static_cast<List *>(e)->elts) es.push_back(expr(x));
    return tuple(es);
  }
  case Kind::Unary: {
    auto *u = static_cast<Unary *>(e);
    KVRef x = expr(u->operand);
    switch (u->op) {
    case UnaryOp::Pos: return x;
    case UnaryOp::Neg:
      if (x->kind == KV::K::Int) return integer(-x->i);
      if (x->kind == KV::K::Float) return floating(-x->f);
      if (x->kind == KV::K::Bool) return integer(-int64_t(x->b));
      return elementwise(TOp::Neg, {x}, e->range, x->kind == KV::K::Tile && x->weak ? std::optional<DType>(x->v->type.dtype) : std::nullopt);
    case UnaryOp::Not:
      if (!isRuntime(x)) return boolean(!truth(x, e->range));
      return tileOf(op(TOp::Not, {convert(x, DType::Bool, shapeOf(x), e->range)}, {}, e->range), x->weak);
    case UnaryOp::Invert:
      if (x->kind == KV::K::Int) return integer(~x->i);
      return elementwise(TOp::Not, {x}, e->range);
    }
    break;
  }
  case Kind::Binary: {
    auto *b = static_cast<Binary *>(e);
    return binary(b->op, expr(b->lhs), expr(b->rhs), e->range);
  }
  case Kind::BoolOp: {
    auto *b = static_cast<BoolOp *>(e);
    KVRef acc = expr(b->values[0]);
    for (size_t i = 1; i < b->values.size(); ++i) {
      if (!isRuntime(acc)) {
        bool t = truth(acc, b->values[i - 1]->range);
        if (b->isAnd ? !t : t) return acc;
        acc = expr(b->values[i]);
        continue;
      }
      KVRef y = expr(b->values[i]);
      auto shape = broadcastShapes(shapeOf(acc), shapeOf(y), e->range);
      acc = tileOf(op(b->isAnd ? TOp::And : TOp::Or, {convert(acc, DType::Bool, shape, e->range), convert(y, DType::Bool, shape, e->range)}, {}, e->range),
                   isWeak(acc) && isWeak(y));
    }
    return acc;
  }
  case Kind::Compare: {
    auto *c = static_cast<Compare *>(e);
    KVRef left = expr(c->left), result;
    for (size_t i = 0; i < c->ops.size(); ++i) {
      KVRef right = expr(c->comparators[i]);
      KVRef r = compare(c->ops[i], left, right, e->range);
      if (!result) result = r;
      else if (!isRuntime(result) && !isRuntime(r)) result = boolean(result->b && r->b);
      else {
        auto shape = broadcastShapes(shapeOf(result), shapeOf(r), e->range);
        result = tileOf(op(TOp::And, {convert(result, DType::Bool, shape, e->range), convert(r, DType::Bool, shape, e->range)}, {}, e->range));
      }
      left = right;
    }
    return result;
  }
  case Kind::IfExp: {
    auto *x = static_cast<IfExp *>(e);
    KVRef t = expr(x->test);
    if (!isRuntime(t)) return truth(t, x->test->range) ? expr(x->body) : expr(x->orelse);
    KVRef a = expr(x->body), b = expr(x->orelse);
    DType d = joinDType(a, b, e->range);
    auto shape = broadcastShapes(broadcastShapes(shapeOf(t), shapeOf(a), e->range), shapeOf(b), e->range);
    return tileOf(op(TOp::Select, {convert(t, DType::Bool, shape, e->range), convert(a, d, shape, e->range), convert(b, d, shape, e->range)}, {}, e->range),
                  isWeak(a) && isWeak(b));
  }
  case Kind::Call: return call(static_cast<Call *>(e));
  case Kind::Subscript: return subscript(static_cast<Subscript *>(e));
  case Kind::Attribute: return attribute(static_cast<Attribute *>(e));
  default: break;
  }
  unsupported("this expression in a kernel", e->range);
}

KVRef KernelLowering::subscript(Subscript *s) {
  KVRef base = expr(s->value);
  if (base->kind == KV::K::Tensor) return view(base, s);
  if (base->kind == KV::K::Tuple) {
    if (s->indices.size() != 1) unsupported("a tuple index with several parts", s->range);
    KVRef i = expr(s->indices[0]);
    if (i->kind != KV::K::Int) unsupported("a tuple index known only at run time", s->indices[0]->range);
    int64_t n = static_cast<int64_t>(base->elems.size()), k = i->i < 0 ? i->i + n : i->i;
    if (k < 0 || k >= n) unsupported("a tuple index out of range", s->indices[0]->range);
    return base->elems[k];
  }
  if (base->kind == KV::K::Tile) {
    // x[:, None]: full slices keep an axis, None adds one.
    tile::Value *v = value(base, s->range);
    size_t axis = 0;
    int64_t pos = 0;
    for (Expr *ie : s->indices) {
      if (ie->kind == Kind::NoneLit) {
        v = op(TOp::ExpandDims, {v}, {{"axis", pos}}, ie->range);
        ++pos;
        continue;
      }
      auto *sl = dyn_cast<Slice>(ie);
      if (!sl || sl->lower || sl->upper || sl->step) unsupported("indexing a tile other than with `:` and `None`", ie->range);
      if (axis >= base->v->type.shape.size()) unsupported("a tile index with more axes than the tile has", ie->range);
      ++axis;
      ++pos;
    }
    return tileOf(v, base->weak);
  }
  unsupported("indexing a " + kindName(base), s->range);
}

KVRef KernelLowering::attribute(Attribute *a) {
  KVRef base = expr(a->value);
  const std::string &n = a->attr;
  if (base->kind == KV::K::Builtin && base->builtin->isNamespace) {
    if (const sema::BuiltinInfo *b = sema::findBuiltin(base->builtin->name + "." + n)) { KV v; v.kind = KV::K::Builtin; v.builtin = b; return mk(v); }
  }
  if (base->kind == KV::K::Config) {
    for (auto &[k, v] : base->fields) if (k == n) return v;
    unsupported("the configuration entry `" + n + "`, which this launch does not set", a->attrRange);
  }
  if (base->kind == KV::K::Tile) {
    if (n == "shape") {
      std::vector<KVRef> es;
      for (int64_t d : base->v->type.shape) es.push_back(integer(d));
      return tuple(es);
    }
    if (n == "dtype") { KV v; v.kind = KV::K::DType; v.dt = base->v->type.dtype; return mk(v); }
    if (n == "T") {
      if (base->v->type.shape.size() != 2) unsupported("`.T` of a tile that is not 2-d", a->range);
      return tileOf(op(TOp::Transpose, {base->v}, {{"perm", std::vector<int64_t>{1, 0}}}, a->range));
    }
  }
  if (base->kind == KV::K::Tensor) {
    if (n == "dtype") { KV v; v.kind = KV::K::DType; v.dt = base->dt; return mk(v); }
    if (n == "shape") {
      std::vector<KVRef> es;
      for (size_t d = 0; d < base->dims.size(); ++d) {
        KV v;
        v.kind = KV::K::Tile;
        v.v = dimOf(base->v, static_cast<int64_t>(d), a->range);
        v.weak = true;
        v.known = base->dims[d].constantValue();
        es.push_back(mk(v));
      }
      return tuple(es);
    }
  }
  if (base->kind == KV::K::Module) {
    auto g = base->module->globals.find(n);
    if (g != base->module->globals.end()) {
      Frame fr{nullptr, base->module, {}};
      frames_.push_back(&fr);
      KVRef v = lookup(n, a->range);
      frames_.pop_back();
      return v;
    }
  }
  unsupported("the attribute `" + n + "` of a " + kindName(base), a->attrRange);
}

KVRef KernelLowering::call(Call *c) {
  if (c->func->kind == Kind::Subscript) unsupported("a kernel launch inside a kernel", c->range);
  KVRef callee = expr(c->func);
  Args args;
  for (const Arg &a : c->args) {
    if (a.kind == ArgKind::Positional) { args.pos.push_back(expr(a.value)); args.ranges.push_back(a.value->range); }
    else if (a.kind == ArgKind::Keyword) args.kw.push_back({a.name, expr(a.value)});
    else unsupported("`*` or `**` arguments in a kernel", a.range);
  }
  if (callee->kind == KV::K::Builtin) return builtin(*callee->builtin, c, args);
  // A dtype whose name is also a builtin's (`bool`): calling it calls the builtin.
  if (callee->kind == KV::K::DType)
    if (const sema::BuiltinInfo *b = sema::findBuiltin(dtypeName(callee->dt))) return builtin(*b, c, args);
  if (callee->kind == KV::K::Function && callee->fn->kind == FunctionKind::Inline) return inlineCall(*callee->fn, args, c->range);
  if (callee->kind == KV::K::Function) unsupported("calling " + std::string(sema::functionKindWord(callee->fn->kind)) + " `" + callee->fn->name + "` from a kernel", c->range);
  unsupported("calling a " + kindName(callee), c->range);
}

KVRef KernelLowering::inlineCall(const FunctionInfo &fn, const Args &args, SourceRange at) {
  if (++depth_ > 64) unsupported("inlining deeper than 64 calls", at);
  Frame fr{&fn, fn.module, {}};
  size_t ai = 0;
  for (const Param &prm : fn.def->params) {
    KVRef v;
    for (auto &[k, x] : args.kw) if (k == prm.name) v = x;
    if (!v && prm.kind == ParamKind::Positional && ai < args.pos.size()) v = args.pos[ai++];
    if (!v && prm.defaultValue) {
      frames_.push_back(&fr);
      v = expr(prm.defaultValue);
      frames_.pop_back();
    }
    if (!v) unsupported("a call without the argument `" + prm.name + "`", at);
    fr.env[prm.name] = v;
  }
  frames_.push_back(&fr);
  KVRef result = none();
  returnValue_ = nullptr;
  try {
    block(fn.def->body);
  } catch (Returned &) {
    result = returnValue_;
  }
  frames_.pop_back();
  --depth_;
  return result;
}

} // namespace tsr::ir::kernel_lowering
