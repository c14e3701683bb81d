// Graph lowering: expressions (names, operators, comparisons, subscripts, attributes, calls and
// kernel launches).
#include "ir/lower/Lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tsr::ir::lowering {

LVRef Lowering::evalIn(const ModuleInfo &mod, Expr *e) {
  Frame frame{nullptr, &mod, {}};
  frames_.push_back(&frame);
  LVRef v = expr(e);
  frames_.pop_back();
  return v;
}

LVRef Lowering::lookup(const std::string &id, SourceRange at) {
  Frame &f = *frames_.back();
  auto it = f.env.find(id);
  if (it != f.env.end()) return it->second;
  auto g = f.module->globals.find(id);
  if (g != f.module->globals.end()) {
    const sema::Symbol &sym = g->second;
    if (sym.kind == sema::Symbol::Kind::Function) { LV v; v.kind = LV::K::Function; v.fn = sym.fn; return mk(v); }
    if (sym.kind == sema::Symbol::Kind::Module && sym.type && sym.type->module) { LV v; v.kind = LV::K::Module; v.module = sym.type->module; return mk(v); }
    if (sym.type) {
      // A module constant: its value is its type's compile-time value.
      const sema::Type &t = *sym.type;
      if (t.is(TypeKind::Int) && t.intValue) return integer(*t.intValue);
      if (t.is(TypeKind::Float) && t.floatValue) return floating(*t.floatValue);
      if (t.is(TypeKind::Bool) && t.boolValue) return boolean(*t.boolValue);
      if (t.is(TypeKind::Str) && t.strValue) return str(*t.strValue);
      if (t.is(TypeKind::DTypeVal)) { LV v; v.kind = LV::K::DType; v.dt = {t.dtype, t.policies}; return mk(v); }
      // A model loaded by onnx.load at module level (`f = onnx.load("m.onnx")`).
      if (t.is(TypeKind::Function) && t.fn && !t.fn->externalModel.empty() && t.transform == sema::Transform::None) {
        LV v;
        v.kind = LV::K::Function;
        v.fn = t.fn;
        return mk(v);
      }
    }
    unsupported("the module constant `" + id + "`", at);
  }
  if (auto d = dtypeFromName(id)) { LV v; v.kind = LV::K::DType; v.dt = {*d, {}}; return mk(v); }
  if (id == "INF") return floating(INFINITY);
  if (id == "NAN") return floating(NAN);
  if (const sema::BuiltinInfo *b = sema::findBuiltin(id)) { LV v; v.kind = LV::K::Builtin; v.builtin = b; return mk(v); }
  unsupported("the name `" + id + "`", at);
}

LVRef Lowering::expr(Expr *e) {
  switch (e->kind) {
  case Kind::Name: return lookup(static_cast<Name *>(e)->id, e->range);
  case Kind::IntLit: return integer(Dim::constant(static_cast<IntLit *>(e)->value));
  case Kind::FloatLit: return floating(static_cast<FloatLit *>(e)->value);
  case Kind::StrLit: return str(static_cast<StrLit *>(e)->value);
  case Kind::BoolLit: return boolean(static_cast<BoolLit *>(e)->value);
  case Kind::NoneLit: return none();
  case Kind::Tuple: case Kind::List: {
    const auto &elts = e->kind == Kind::Tuple ? static_cast<Tuple *>(e)->elts : static_cast<List *>(e)->elts;
    std::vector<LVRef> out;
    for (Expr *x : elts) out.push_back(expr(x));
    return tuple(std::move(out), e->kind == Kind::List);
  }
  case Kind::Dict: {
    auto *d = static_cast<Dict *>(e);
    LV v;
    v.kind = LV::K::Dict;
    for (size_t i = 0; i < d->values.size(); ++i) {
      if (!d->keys[i]) unsupported("`**` in a dict", e->range);
      LVRef k = expr(d->keys[i]);
      if (k->kind != LV::K::Str) unsupported("a dict with non-string keys", d->keys[i]->range);
      v.fields.push_back({k->s, expr(d->values[i])});
    }
    return mk(v);
  }
  case Kind::Unary: {
    auto *u = static_cast<Unary *>(e);
    LVRef x = expr(u->operand);
    if (u->op == UnaryOp::Not) return boolean(!truthy(x, u->operand->range));
    if (u->op == UnaryOp::Pos) return x;
    if (x->kind == LV::K::Int && u->op == UnaryOp::Neg) return integer(Dim::constant(0) - x->i);
    if (x->kind == LV::K::Float && u->op == UnaryOp::Neg) return floating(-x->f);
    if (x->kind != LV::K::Tensor) unsupported("this unary operator on a " + kindName(x), e->range);
    if (x->weak && u->op == UnaryOp::Neg) return weakFloat(op(OpKind::Neg, {x->v}, {}, e->range));
    return tensor(op(u->op == UnaryOp::Neg ? OpKind::Neg : OpKind::Not, {x->v}, {}, e->range));
  }
  case Kind::Binary: {
    auto *b = static_cast<Binary *>(e);
    LVRef l = expr(b->lhs);
    if (b->op == BinOp::MatMul && l->kind == LV::K::DType) return policy(l, b->rhs);
    return binary(b->op, l, expr(b->rhs), e->range);
  }
  case Kind::BoolOp: {
    auto *b = static_cast<BoolOp *>(e);
    LVRef last;
    for (Expr *x : b->values) {
      last = expr(x);
      bool t = truthy(last, x->range);
      if (b->isAnd ? !t : t) return last;
    }
    return last;
  }
  case Kind::Compare: return compare(static_cast<Compare *>(e));
  case Kind::IfExp: {
    auto *x = static_cast<IfExp *>(e);
    return truthy(expr(x->test), x->test->range) ? expr(x->body) : expr(x->orelse);
  }
  case Kind::Lambda: { LV v; v.kind = LV::K::Lambda; v.lambda = static_cast<Lambda *>(e); return mk(v); }
  case Kind::Call: return call(static_cast<Call *>(e));
  case Kind::Subscript: return subscript(static_cast<Subscript *>(e));
  case Kind::Attribute: return attribute(static_cast<Attribute *>(e));
  default: unsupported("this expression in a graph function", e->range);
  }
}

LVRef Lowering::policy(const LVRef &dt, Expr *rhs) {
  LV v = *dt;
  std::string name;
  std::vector<Expr *> args;
  if (auto *n = dyn_cast<Name>(rhs)) name = n->id;
  else if (auto *c = dyn_cast<Call>(rhs); c && c->func->kind == Kind::Name) {
    name = static_cast<Name *>(c->func)->id;
    for (auto &a : c->args) args.push_back(a.value);
  }
  if (name == "saturate") v.dt.policies.saturate = true;
  else if (name == "stochastic_round") v.dt.policies.stochasticRound = true;
  else if (name == "accum" && args.size() == 1) {
    LVRef a = expr(args[0]);
    if (a->kind != LV::K::DType) unsupported("this @accum", rhs->range);
    v.dt.policies.accum = a->dt.dtype;
  } else if (name == "loss_scale" && args.size() == 1) {
    LVRef a = expr(args[0]);
    if (a->kind == LV::K::Float) v.dt.policies.lossScale = a->f;
    else if (auto c = constInt(a)) v.dt.policies.lossScale = static_cast<double>(*c);
    else unsupported("this @loss_scale", rhs->range);
  } else {
    unsupported("this numeric policy", rhs->range);
  }
  return mk(v);
}

LVRef Lowering::numberOp(BinOp op, const LVRef &a, const LVRef &b, SourceRange at) {
  bool anyFloat = a->kind == LV::K::Float || b->kind == LV::K::Float;
  if (!anyFloat) {
    const Dim x = dimOf(a, at), y = dimOf(b, at);
    auto cx = x.constantValue(), cy = y.constantValue();
    switch (op) {
    case BinOp::Add: return integer(x + y);
    case BinOp::Sub: return integer(x - y);
    case BinOp::Mul: return integer(x * y);
    case BinOp::FloorDiv:
      if (cx && cy && *cy != 0) { int64_t q = *cx / *cy; if ((*cx % *cy != 0) && ((*cx < 0) != (*cy < 0))) --q; return integer(Dim::constant(q)); }
      if (auto q = x.divide(y)) return integer(*q);
      break;
    case BinOp::Mod:
      if (cx && cy && *cy != 0) { int64_t r = *cx % *cy; if (r != 0 && ((r < 0) != (*cy < 0))) r += *cy; return integer(Dim::constant(r)); }
      break;
    case BinOp::Div:
      if (cx && cy && *cy != 0) return floating(static_cast<double>(*cx) / static_cast<double>(*cy));
      break;
    case BinOp::Pow:
      if (cx && cy && *cy >= 0) { int64_t r = 1; for (int64_t k = 0; k < *cy; ++k) r *= *cx; return integer(Dim::constant(r)); }
      break;
    default: break;
    }
    unsupported("this arithmetic on sizes known only at run time", at);
  }
  auto num = [&](const LVRef &x) -> double {
    if (x->kind == LV::K::Float) return x->f;
    if (auto c = constInt(x)) return static_cast<double>(*c);
    unsupported("arithmetic mixing a run-time size and a float", at);
  };
  double x = num(a), y = num(b);
  switch (op) {
  case BinOp::Add: return floating(x + y);
  case BinOp::Sub: return floating(x - y);
  case BinOp::Mul: return floating(x * y);
  case BinOp::Div: return floating(x / y);
  case BinOp::Pow: return floating(std::pow(x, y));
  case BinOp::FloorDiv: return floating(std::floor(x / y));
  case BinOp::Mod: return floating(x - std::floor(x / y) * y);
  default: unsupported("this operator on floats", at);
  }
}

LVRef Lowering::weakBinary(BinOp bop, const LVRef &a, const LVRef &b, SourceRange at) {
  auto strong = [](const LVRef &x) { return x->kind == LV::K::Tensor && !x->weak; };
  if (strong(a) || strong(b)) {
    DType dt = promoteWithWeak((strong(a) ? a : b)->v->type.dtype, WeakScalar::Float);
    auto fit = [&](const LVRef &x) {
      if (!x->weak) return x;
      return tensor(dt == x->v->type.dtype ? x->v : op(OpKind::Cast, {x->v}, {{"dtype", DTypeAttr{dt, {}}}}, at));
    };
    return binary(bop, fit(a), fit(b), at);
  }
  auto plain = [](const LVRef &x) { return x->weak ? tensor(x->v) : x; };
  LVRef r = binary(bop, plain(a), plain(b), at);
  return r->kind == LV::K::Tensor ? weakFloat(r->v) : r;
}

LVRef Lowering::binary(BinOp bop, const LVRef &a, const LVRef &b, SourceRange at) {
  if ((a->kind == LV::K::Tuple || a->kind == LV::K::List) && bop == BinOp::Add && b->kind == a->kind) {
    std::vector<LVRef> es = a->elems;
    es.insert(es.end(), b->elems.begin(), b->elems.end());
    return tuple(es, a->kind == LV::K::List);
  }
  if (a->kind == LV::K::Str && b->kind == LV::K::Str && bop == BinOp::Add) return str(a->s + b->s);
  if (a->weak || b->weak) return weakBinary(bop, a, b, at);
  if (isNumber(a) && isNumber(b)) return numberOp(bop, a, b, at);
  if (a->kind != LV::K::Tensor && b->kind != LV::K::Tensor) unsupported("this operator on a " + kindName(a) + " and a " + kindName(b), at);
  std::optional<DType> other;
  if (a->kind == LV::K::Tensor && b->kind != LV::K::Tensor) other = a->v->type.dtype;
  if (b->kind == LV::K::Tensor && a->kind != LV::K::Tensor) other = b->v->type.dtype;
  Value *x = asTensor(a, other, at), *y = asTensor(b, other, at);
  if (bop == BinOp::MatMul) return tensor(op(OpKind::MatMul, {x, y}, {}, at));
  static const std::map<BinOp, OpKind> kinds = {
      {BinOp::Add, OpKind::Add}, {BinOp::Sub, OpKind::Sub}, {BinOp::Mul, OpKind::Mul}, {BinOp::Div, OpKind::Div},
      {BinOp::FloorDiv, OpKind::FloorDiv}, {BinOp::Mod, OpKind::Mod}, {BinOp::Pow, OpKind::Pow},
      {BinOp::BitAnd, OpKind::And}, {BinOp::BitOr, OpKind::Or}, {BinOp::BitXor, OpKind::Xor},
      {BinOp::LShift, OpKind::Shl}, {BinOp::RShift, OpKind::Shr}};
  return tensor(op(kinds.at(bop), {x, y}, {}, at));
}

// `a is b` on sizes and tuples of sizes: the same size expression at each axis, as sema decides
// it (language.md, "Sizes"). nullopt when a or b is not a compile-time size or a tuple of them.
static std::optional<bool> sameSizes(const LVRef &a, const LVRef &b) {
  auto size = [](const LVRef &x) { return x->kind == LV::K::Int && !x->v; };
  if (size(a) && size(b)) return a->i == b->i;
  if (a->kind != LV::K::Tuple || b->kind != LV::K::Tuple) return std::nullopt;
  for (const auto *t : {&a->elems, &b->elems})
    for (const LVRef &x : *t) if (!size(x)) return std::nullopt;
  if (a->elems.size() != b->elems.size()) return false;
  for (size_t i = 0; i < a->elems.size(); ++i) if (a->elems[i]->i != b->elems[i]->i) return false;
  return true;
}

LVRef Lowering::compare(Compare *c) {
  LVRef left = expr(c->left);
  LVRef result;
  for (size_t i = 0; i < c->ops.size(); ++i) {
    LVRef right = expr(c->comparators[i]);
    CmpOp o = c->ops[i];
    LVRef r;
    if (std::optional<bool> same; (o == CmpOp::Is || o == CmpOp::IsNot) && (same = sameSizes(left, right))) {
      r = boolean((o == CmpOp::Is) == *same);
    } else if (o == CmpOp::Is || o == CmpOp::IsNot || ((o == CmpOp::Eq || o == CmpOp::Ne) && (left->kind == LV::K::None || right->kind == LV::K::None))) {
      bool same = left->kind == LV::K::None && right->kind == LV::K::None;
      r = boolean((o == CmpOp::Is || o == CmpOp::Eq) ? same : !same);
    } else if (left->kind == LV::K::Str || right->kind == LV::K::Str) {
      bool eq = left->kind == right->kind && left->s == right->s;
      r = boolean(o == CmpOp::Ne ? !eq : eq);
    } else if (left->kind == LV::K::DType && right->kind == LV::K::DType) {
      bool eq = left->dt.dtype == right->dt.dtype;
      r = boolean(o == CmpOp::Ne ? !eq : eq);
    } else if (isNumber(left) && isNumber(right)) {
      auto num = [&](const LVRef &x) -> std::optional<double> {
        if (x->kind == LV::K::Float) return x->f;
        if (auto v = constInt(x)) return static_cast<double>(*v);
        return std::nullopt;
      };
      auto x = num(left), y = num(right);
      if (!x || !y) {
        if ((o == CmpOp::Eq || o == CmpOp::Ne) && left->kind == LV::K::Int && right->kind == LV::K::Int && left->i == right->i)
          r = boolean(o == CmpOp::Eq);
        else unsupported("a comparison of sizes known only at run time", c->range);
      } else {
        bool v = o == CmpOp::Lt ? *x < *y : o == CmpOp::Le ? *x <= *y : o == CmpOp::Gt ? *x > *y : o == CmpOp::Ge ? *x >= *y : o == CmpOp::Eq ? *x == *y : *x != *y;
        r = boolean(v);
      }
    } else {
      static const std::map<CmpOp, OpKind> kinds = {{CmpOp::Lt, OpKind::Lt}, {CmpOp::Le, OpKind::Le}, {CmpOp::Gt, OpKind::Gt},
                                                    {CmpOp::Ge, OpKind::Ge}, {CmpOp::Eq, OpKind::Eq}, {CmpOp::Ne, OpKind::Ne}};
      auto k = kinds.find(o);
      if (k == kinds.end()) unsupported("this comparison on tensors", c->range);
      std::optional<DType> other = left->kind == LV::K::Tensor ? std::optional<DType>(left->v->type.dtype)
                                 : right->kind == LV::K::Tensor ? std::optional<DType>(right->v->type.dtype) : std::nullopt;
      r = tensor(op(k->second, {asTensor(left, other, c->range), asTensor(right, other, c->range)}, {}, c->range));
    }
    if (c->ops.size() > 1 && r->kind != LV::K::Bool) unsupported("a chained comparison of tensors", c->range);
    if (result && result->kind == LV::K::Bool && !result->b) return result;
    result = r;
    left = right;
  }
  return result;
}

Value *Lowering::index0(Value *x, int64_t i, SourceRange at) {
  // x[i] along the first axis: a slice of one, then the axis dropped.
  std::vector<Dim> start(x->type.rank(), Dim::constant(0)), stop = x->type.dims;
  std::vector<int64_t> step(x->type.rank(), 1);
  start[0] = Dim::constant(i);
  stop[0] = Dim::constant(i + 1);
  Value *s = op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, at);
  std::vector<Dim> shape(x->type.dims.begin() + 1, x->type.dims.end());
  return op(OpKind::Reshape, {s}, {{"shape", shape}}, at);
}

LVRef Lowering::subscript(Subscript *s) {
  LVRef base = expr(s->value);
  if (base->kind == LV::K::Tuple || base->kind == LV::K::List) {
    if (s->indices.size() == 1 && s->indices[0]->kind == Kind::Slice) {
      auto *sl = static_cast<Slice *>(s->indices[0]);
      int64_t n = static_cast<int64_t>(base->elems.size());
      auto bound = [&](Expr *e, int64_t dflt) -> int64_t {
        if (!e) return dflt;
        auto c = constInt(expr(e));
        if (!c) unsupported("a run-time slice of a tuple", e->range);
        int64_t v = *c < 0 ? *c + n : *c;
        return std::clamp<int64_t>(v, 0, n);
      };
      int64_t lo = bound(sl->lower, 0), hi = bound(sl->upper, n);
      std::vector<LVRef> out;
      for (int64_t i = lo; i < hi; ++i) out.push_back(base->elems[i]);
      return tuple(out, base->kind == LV::K::List);
    }
    auto c = constInt(expr(s->indices[0]));
    if (!c) unsupported("a run-time index into a tuple", s->range);
    int64_t n = static_cast<int64_t>(base->elems.size()), i = *c < 0 ? *c + n : *c;
    if (i < 0 || i >= n) throw CompileError{"internal: tuple index out of range", s->range};
    return base->elems[i];
  }
  if (base->kind == LV::K::Dict) {
    LVRef k = expr(s->indices[0]);
    for (auto &f : base->fields) if (k->kind == LV::K::Str && f.first == k->s) return f.second;
    unsupported("a dict lookup with a key not in the dict", s->range);
  }
  if (base->kind != LV::K::Tensor) unsupported("indexing a " + kindName(base), s->range);
  return tensor(indexTensor(base->v, s));
}

Value *Lowering::indexTensor(Value *x, Subscript *s) {
  const auto &dims = x->type.dims;
  size_t consuming = 0;
  for (Expr *i : s->indices) if (i->kind != Kind::NoneLit && i->kind != Kind::EllipsisLit) ++consuming;
  std::vector<Dim> start, stop, out;
  std::vector<int64_t> step, reversed;
  size_t pos = 0;
  for (Expr *i : s->indices) {
    if (i->kind == Kind::NoneLit) { out.push_back(Dim::constant(1)); continue; }
    if (i->kind == Kind::EllipsisLit) {
      for (size_t k = 0; k < dims.size() - consuming; ++k, ++pos) {
        start.push_back(Dim::constant(0)); stop.push_back(dims[pos]); step.push_back(1); out.push_back(dims[pos]);
      }
      continue;
    }
    if (pos >= dims.size()) throw CompileError{"internal: too many indices", s->range};
    const Dim &n = dims[pos];
    auto resolve = [&](const Dim &v) -> Dim {
      auto c = v.constantValue();
      if (c && *c < 0) return n + v;
      if (c && n.constantValue()) return Dim::constant(std::min(*c, *n.constantValue()));
      return v;
    };
    if (auto *sl = dyn_cast<Slice>(i)) {
      int64_t st = 1;
      if (sl->step) {
        auto c = constInt(expr(sl->step));
        if (!c || *c == 0) unsupported("a slice with a run-time step", sl->range);
        if (*c < 0) {
          // x[::-k]: the axis reversed, then every k-th element.
          if (sl->lower || sl->upper) unsupported("a slice with bounds and a negative step", sl->range);
          reversed.push_back(static_cast<int64_t>(pos));
          st = -*c;
        } else {
          st = *c;
        }
      }
      Dim lo = sl->lower ? resolve(dimOf(expr(sl->lower), sl->range)) : Dim::constant(0);
      Dim hi = sl->upper ? resolve(dimOf(expr(sl->upper), sl->range)) : n;
      start.push_back(lo); stop.push_back(hi); step.push_back(st);
      Dim ext = hi - lo;
      if (st != 1) {
        // ceil(ext / st): exact rational dims are floored where evaluated.
        if (auto c = ext.constantValue()) ext = Dim::constant((*c + st - 1) / st);
        else if (auto q = (ext + Dim::constant(st - 1)).divide(Dim::constant(st))) ext = *q;
      }
      out.push_back(ext);
      ++pos;
      continue;
    }
    LVRef idx = expr(i);
    if (idx->kind == LV::K::Tensor) unsupported("indexing with a tensor (use gather)", i->range);
    Dim at = resolve(dimOf(idx, i->range));
    start.push_back(at); stop.push_back(at + Dim::constant(1)); step.push_back(1);
    ++pos;
  }
  for (; pos < dims.size(); ++pos) {
    start.push_back(Dim::constant(0)); stop.push_back(dims[pos]); step.push_back(1); out.push_back(dims[pos]);
  }
  bool whole = true;
  for (size_t k = 0; k < dims.size(); ++k)
    whole &= start[k] == Dim::constant(0) && stop[k] == dims[k] && step[k] == 1;
  if (!reversed.empty()) x = op(OpKind::Reverse, {x}, {{"axes", reversed}}, s->range);
  Value *v = whole ? x : op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, s->range);
  if (v->type.dims != out) v = op(OpKind::Reshape, {v}, {{"shape", out}}, s->range);
  return v;
}

LVRef Lowering::attribute(Attribute *a) {
  LVRef base = expr(a->value);
  const std::string &n = a->attr;
  if (base->kind == LV::K::Tensor) {
    const Type &t = base->v->type;
    if (n == "shape") {
      std::vector<LVRef> es;
      for (const Dim &d : t.dims) es.push_back(integer(d));
      return tuple(es);
    }
    if (n == "dtype") { LV v; v.kind = LV::K::DType; v.dt = {t.dtype, t.policies}; return mk(v); }
    if (n == "ndim") return integer(Dim::constant(static_cast<int64_t>(t.rank())));
    if (n == "T") {
      std::vector<int64_t> perm(t.rank());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      return tensor(op(OpKind::Transpose, {base->v}, {{"perm", perm}}, a->range));
    }
    if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::Tensor, n)) {
      LV v; v.kind = LV::K::Builtin; v.builtin = m; v.self = base; return mk(v);
    }
  }
  if (isCache(base)) return cacheAttribute(base, n, a->range);
  if (base->kind == LV::K::Dict) {
    for (auto &f : base->fields) if (f.first == n) return f.second;
    if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::Dict, n)) {
      LV v; v.kind = LV::K::Builtin; v.builtin = m; v.self = base; return mk(v);
    }
  }
  if (base->kind == LV::K::Builtin && base->builtin->isNamespace) {
    if (const sema::BuiltinInfo *b = sema::findBuiltin(base->builtin->name + "." + n)) {
      LV v; v.kind = LV::K::Builtin; v.builtin = b; return mk(v);
    }
  }
  if (base->kind == LV::K::Module) {
    auto g = base->module->globals.find(n);
    if (g != base->module->globals.end()) {
      Frame f{nullptr, base->module, {}};
      frames_.push_back(&f);
      LVRef v = lookup(n, a->range);
      frames_.pop_back();
      return v;
    }
  }
  unsupported("the attribute `" + n + "` of a " + kindName(base), a->attrRange);
}

LVRef Lowering::launch(Call *c, Subscript *sub) {
  LVRef callee = expr(sub->value);
  if (callee->kind != LV::K::Function || callee->fn->kind != FunctionKind::Kernel) unsupported("indexing a " + kindName(callee), sub->range);
  const FunctionInfo &k = *callee->fn;
  std::vector<Attr> attrs{{"callee", (k.module->name.empty() ? "" : k.module->name + ".") + k.name}};
  LV cfg;
  cfg.kind = LV::K::Dict;
  for (auto &[name, values] : k.space)
    if (!values.empty()) { cfg.fields.push_back({name, integer(Dim::constant(values[0]))}); attrs.push_back({name, values[0]}); }
  if (k.schedule)
    for (auto &[name, d] : k.schedule->knobs) { cfg.fields.push_back({name, integer(d)}); if (auto v = d.constantValue()) attrs.push_back({name, *v}); }
  LVRef grid = sub->indices.size() == 1 ? expr(sub->indices[0]) : [&] {
    std::vector<LVRef> es;
    for (Expr *i : sub->indices) es.push_back(expr(i));
    return tuple(es);
  }();
  std::vector<Dim> gridSpace; // every configuration's grid, one after another (autotuned kernels)
  if (grid->kind == LV::K::Lambda) {
    auto gridFor = [&](const LV &c) {
      std::map<std::string, LVRef> env = env_copy();
      if (!grid->lambda->params.empty()) env[grid->lambda->params[0].name] = mk(c);
      Frame f{frames_.back()->fn, frames_.back()->module, std::move(env)};
      frames_.push_back(&f);
      LVRef g = expr(grid->lambda->body);
      frames_.pop_back();
      return shapeOf(g, sub->range);
    };
    // The grid of each configuration of an autotune space (autotuneConfigurations' order), so
    // that the kernel runner can time them (exec/Autotune.h): attribute `grid_space`.
    const auto configs = k.autotune ? autotuneConfigurations(k) : decltype(autotuneConfigurations(k)){};
    if (configs.size() > 1) {
      for (const auto &c : configs) {
        LV ci = cfg;
        for (auto &[name, v] : c)
          for (auto &[n, x] : ci.fields)
            if (n == name) x = integer(Dim::constant(v));
        std::vector<Dim> g = gridFor(ci);
        gridSpace.insert(gridSpace.end(), g.begin(), g.end());
      }
    }
    std::map<std::string, LVRef> env = env_copy();
    if (!grid->lambda->params.empty()) env[grid->lambda->params[0].name] = mk(cfg);
    Frame f{frames_.back()->fn, frames_.back()->module, std::move(env)};
    frames_.push_back(&f);
    grid = expr(grid->lambda->body);
    frames_.pop_back();
  }
  attrs.push_back({"grid", shapeOf(grid, sub->range)});
  if (!gridSpace.empty()) attrs.push_back({"grid_space", gridSpace});
  std::vector<Value *> operands;
  std::map<std::string, size_t> operandOf;
  size_t ai = 0;
  std::vector<Expr *> argExprs;
  for (const Arg &a : c->args) if (a.kind == ArgKind::Positional) argExprs.push_back(a.value);
  for (const auto &prm : k.params) {
    Expr *e = nullptr;
    if (prm.kind == ParamKind::Positional) e = ai < argExprs.size() ? argExprs[ai++] : nullptr;
    for (const Arg &a : c->args) if (a.kind == ArgKind::Keyword && a.name == prm.name) e = a.value;
    if (!e) {
      if (!prm.compileTime()) unsupported("a kernel launch without `" + prm.name + "`", c->range);
      // From the configuration, or the parameter's default.
      bool configured = false;
      for (auto &a : attrs) configured |= a.name == prm.name;
      const TypeRef &d = prm.defaultType;
      if (!configured && d) {
        if (d->intValue && d->intValue->constantValue()) attrs.push_back({prm.name, *d->intValue->constantValue()});
        else if (d->boolValue) attrs.push_back({prm.name, *d->boolValue});
        else if (d->floatValue) attrs.push_back({prm.name, *d->floatValue});
      }
      continue;
    }
    LVRef v = expr(e);
    if (prm.compileTime()) {
      if (auto ci = constInt(v); ci && v->kind == LV::K::Int) attrs.push_back({prm.name, *ci});
      else if (v->kind == LV::K::Bool) attrs.push_back({prm.name, v->b});
      else if (v->kind == LV::K::Float) attrs.push_back({prm.name, v->f});
      else unsupported("a kernel's compile-time argument `" + prm.name + "` known only at run time", e->range);
      continue;
    }
    operandOf[prm.name] = operands.size();
    operands.push_back(asTensor(v, std::nullopt, e->range));
  }
  std::vector<Type> results;
  std::vector<std::pair<Expr *, size_t>> rebind;
  for (const std::string &w : kernelWrittenParams(k)) {
    auto it = operandOf.find(w);
    if (it == operandOf.end()) continue;
    results.push_back(operands[it->second]->type);
    size_t pos = 0, idx = 0;
    for (const auto &prm : k.params) {
      if (prm.name == w) break;
      if (prm.kind == ParamKind::Positional) ++pos;
    }
    (void)idx;
    if (pos < argExprs.size()) rebind.push_back({argExprs[pos], results.size() - 1});
  }
  Op *o = g_.addWithTypes(OpKind::KernelCall, operands, attrs, results, loc(c->range));
  for (auto &[e, r] : rebind) {
    if (auto *n = dyn_cast<Name>(e)) env()[n->id] = tensor(o->results[r]);
    else unsupported("a kernel writing into a tensor that has no name", e->range);
  }
  return none();
}

LVRef Lowering::call(Call *c) {
  if (LVRef model = onnxLoad(c)) return model;
  if (auto *sub = dyn_cast<Subscript>(c->func)) {
    LVRef base = expr(sub->value);
    if (base->kind == LV::K::Function) return launch(c, sub);
  }
  LVRef callee = expr(c->func);
  std::vector<LVRef> args;
  std::map<std::string, LVRef> kwargs;
  std::vector<SourceRange> argRanges;
  for (const Arg &a : c->args) {
    if (a.kind == ArgKind::Positional) { args.push_back(expr(a.value)); argRanges.push_back(a.value->range); }
    else if (a.kind == ArgKind::Keyword) kwargs[a.name] = expr(a.value);
    else unsupported("`*` or `**` arguments", a.range);
  }
  if (callee->kind == LV::K::Builtin) return builtin(*callee, args, kwargs, c->range, c->func->range);
  return callValue(callee, args, kwargs, c->range);
}

LVRef Lowering::callValue(const LVRef &callee, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
  if (callee->kind == LV::K::Function) {
    if (callee->fn->kind == FunctionKind::Kernel) unsupported("a kernel launch inside a graph function", at);
    // Outside differentiation, a function with a custom VJP computes its primal definition.
    if (callee->fn->customVjp && diffDepth_ > 0 && callee->fn->vjpFwd && callee->fn->vjpBwd)
      return customVjpCall(*callee->fn, args, kwargs, at);
    return callFunction(*callee->fn, args, kwargs, at);
  }
  if (callee->kind == LV::K::Transformed) return callTransformed(*callee, args, kwargs, at);
  if (callee->kind == LV::K::Lambda) {
    std::map<std::string, LVRef> env = env_copy();
    size_t i = 0;
    for (const Param &p : callee->lambda->params) env[p.name] = i < args.size() ? args[i++] : (p.defaultValue ? expr(p.defaultValue) : none());
    Frame f{frames_.back()->fn, frames_.back()->module, std::move(env)};
    frames_.push_back(&f);
    LVRef r = expr(callee->lambda->body);
    frames_.pop_back();
    return r;
  }
  if (callee->kind == LV::K::Builtin) return builtin(*callee, args, kwargs, at, at);
  // A dtype whose name is also a builtin's (`bool`): calling it calls the builtin.
  if (callee->kind == LV::K::DType && callee->dt.policies.empty())
    if (const sema::BuiltinInfo *b = sema::findBuiltin(dtypeName(callee->dt.dtype))) {
      LV v;
      v.kind = LV::K::Builtin;
      v.builtin = b;
      return builtin(v, args, kwargs, at, at);
    }
  unsupported("calling a " + kindName(callee), at);
}

} // namespace tsr::ir::lowering
