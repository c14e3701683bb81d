// The host interpreter: expressions (operators, comprehensions, lambdas, f-strings), subscripts
// and attributes.
#include "exec/host/InterpreterImpl.h"

#include <algorithm>

namespace tsr::host {

const sema::ModuleInfo &Interpreter::Impl::moduleOf(const std::shared_ptr<Env> &env) {
  for (Env *e = env.get(); e; e = e->parent.get()) if (e->module) return *e->module;
  return *P.main;
}

ValueRef Interpreter::Impl::moduleValue(const sema::ModuleInfo &m, const std::string &id) {
  auto key = std::make_pair(&m, id);
  if (auto it = moduleValues.find(key); it != moduleValues.end()) return it->second;
  Expr *value = nullptr;
  for (Stmt *st : m.ast->body)
    if (auto *as = dyn_cast<Assign>(st))
      for (Expr *t : as->targets)
        if (auto *n = dyn_cast<Name>(t); n && n->id == id) value = as->value;
  if (!value) return nullptr;
  auto env = std::make_shared<Env>();
  env->module = &m;
  ValueRef v = expr(value, env);
  moduleValues[key] = v;
  return v;
}

ValueRef Interpreter::Impl::lookup(const std::string &id, const std::shared_ptr<Env> &env, SourceRange at) {
  for (Env *e = env.get(); e; e = e->parent.get()) {
    auto it = e->vars.find(id);
    if (it != e->vars.end()) return it->second;
  }
  const sema::ModuleInfo &m = moduleOf(env);
  auto g = m.globals.find(id);
  if (g != m.globals.end()) {
    const sema::Symbol &sym = g->second;
    if (sym.kind == sema::Symbol::Kind::Function) { Value v; v.k = K::Function; v.fn = sym.fn; return mk(v); }
    if (sym.type && sym.type->is(TypeKind::Module)) { Value v; v.k = K::Module; v.module = sym.type->module; return mk(v); }
    if (sym.type) {
      const sema::Type &t = *sym.type;
      if (t.is(TypeKind::Int) && t.intValue && t.intValue->constantValue()) return integer(*t.intValue->constantValue());
      if (t.is(TypeKind::Float) && t.floatValue) return floating(*t.floatValue);
      if (t.is(TypeKind::Bool) && t.boolValue) return boolean(*t.boolValue);
      if (t.is(TypeKind::Str) && t.strValue) return str(*t.strValue);
      if (t.is(TypeKind::DTypeVal)) { Value v; v.k = K::DType; v.dtype = t.dtype; v.policies = t.policies; return mk(v); }
    }
    // Other module-level values (lists, tuples, dicts, tensors): the module's assignment to
    // the name, run once in the module's scope (as Python runs a module's body) and kept.
    if (ValueRef v = moduleValue(m, id)) return v;
    fail("the module-level name `" + id + "` cannot be used at run time yet", at);
  }
  if (auto d = dtypeFromName(id)) { Value v; v.k = K::DType; v.dtype = *d; return mk(v); }
  if (id == "INF") return floating(INFINITY);
  if (id == "NAN") return floating(NAN);
  if (const sema::BuiltinInfo *b = sema::findBuiltin(id)) { Value v; v.k = K::Builtin; v.builtin = b; return mk(v); }
  fail("undefined name `" + id + "`", at);
}

ValueRef Interpreter::Impl::expr(Expr *e, std::shared_ptr<Env> &env) {
  switch (e->kind) {
  case Kind::Name: return lookup(static_cast<Name *>(e)->id, env, e->range);
  case Kind::IntLit: return integer(static_cast<IntLit *>(e)->value);
  case Kind::FloatLit: return floating(static_cast<FloatLit *>(e)->value);
  case Kind::StrLit: return str(static_cast<StrLit *>(e)->value);
  case Kind::BoolLit: return boolean(static_cast<BoolLit *>(e)->value);
  case Kind::NoneLit: return none();
  case Kind::FString: {
    std::string s;
    for (auto &p : static_cast<FString *>(e)->parts) {
      if (!p.expr) { s += p.text; continue; }
      ValueRef v = expr(p.expr, env);
      s += p.formatSpec.empty() ? (p.conversion == 'r' ? repr(v) : display(v)) : formatSpec(v, p.formatSpec, p.expr->range);
    }
    return str(s);
  }
  case Kind::Tuple: case Kind::List: {
    const auto &elts = e->kind == Kind::Tuple ? static_cast<Tuple *>(e)->elts : static_cast<List *>(e)->elts;
    std::vector<ValueRef> out;
    for (Expr *x : elts) out.push_back(expr(x, env));
    return seq(out, e->kind == Kind::List);
  }
  case Kind::Dict: {
    auto *d = static_cast<Dict *>(e);
    Value v;
    v.k = K::Dict;
    for (size_t i = 0; i < d->values.size(); ++i) {
      if (!d->keys[i]) fail("`**` in a dict cannot run yet", e->range);
      ValueRef k = expr(d->keys[i], env);
      if (k->k != K::Str) fail("dict keys are strings", d->keys[i]->range);
      v.dict.push_back({k->s, expr(d->values[i], env)});
    }
    return mk(v);
  }
  case Kind::Comprehension: {
    auto *c = static_cast<Comprehension *>(e);
    auto scope = std::make_shared<Env>(*env);
    Value result;
    result.k = c->form == Comprehension::Form::Dict ? K::Dict : K::List;
    std::function<void(size_t)> gen = [&](size_t gi) {
      if (gi == c->generators.size()) {
        if (c->form == Comprehension::Form::Dict) {
          ValueRef k = expr(c->elt, scope);
          if (k->k != K::Str) fail("dict keys are strings", c->elt->range);
          result.dict.push_back({k->s, expr(c->value, scope)});
        } else {
          result.items.push_back(expr(c->elt, scope));
        }
        return;
      }
      auto &g = c->generators[gi];
      ValueRef it = expr(g.iter, scope);
      for (auto &x : iterate(it, g.iter->range)) {
        assign(g.target, x, scope);
        bool keep = true;
        for (Expr *cond : g.ifs) keep = keep && truthy(expr(cond, scope), cond->range);
        if (keep) gen(gi + 1);
      }
    };
    gen(0);
    return mk(result);
  }
  case Kind::Unary: {
    auto *u = static_cast<Unary *>(e);
    ValueRef x = expr(u->operand, env);
    if (u->op == UnaryOp::Not) return boolean(!truthy(x, u->operand->range));
    if (x->k == K::Int && u->op == UnaryOp::Neg) return integer(-x->i);
    if (x->k == K::Float && u->op == UnaryOp::Neg) return floating(-x->f);
    if (u->op == UnaryOp::Pos) return x;
    if (x->k == K::Tensor) return eager(synth.make<Unary>(e->range, u->op, nameNode(0, u->operand->range)), {x}, moduleOf(env), e);
    fail("operator `" + std::string(spelling(u->op)) + "` cannot be applied to a " + kindName(x), e->range);
  }
  case Kind::Binary: {
    auto *b = static_cast<Binary *>(e);
    ValueRef l = expr(b->lhs, env), r = expr(b->rhs, env);
    return binary(b->op, l, r, b->lhs, b->rhs, e->range, e, env);
  }
  case Kind::BoolOp: {
    auto *b = static_cast<BoolOp *>(e);
    ValueRef last;
    for (Expr *x : b->values) {
      last = expr(x, env);
      bool t = truthy(last, x->range);
      if (b->isAnd ? !t : t) return last;
    }
    return last;
  }
  case Kind::Compare: return compare(static_cast<Compare *>(e), env);
  case Kind::IfExp: {
    auto *x = static_cast<IfExp *>(e);
    return truthy(expr(x->test, env), x->test->range) ? expr(x->body, env) : expr(x->orelse, env);
  }
  case Kind::Lambda: {
    Value v;
    v.k = K::Lambda;
    v.lambda = static_cast<Lambda *>(e);
    v.closure = env;
    return mk(v);
  }
  case Kind::Call: return call(static_cast<Call *>(e), env);
  case Kind::Subscript: return subscript(static_cast<Subscript *>(e), env);
  case Kind::Attribute: return attribute(static_cast<Attribute *>(e), env);
  default: fail("this expression cannot run yet", e->range);
  }
}

ValueRef Interpreter::Impl::binary(BinOp op, const ValueRef &l, const ValueRef &r, Expr *le, Expr *re, SourceRange at, const void *site, std::shared_ptr<Env> &env) {
  if (l->k == K::Tensor || r->k == K::Tensor)
    return eager(synth.make<Binary>(at, op, nameNode(0, le->range), nameNode(1, re->range), at), {l, r}, moduleOf(env), site);
  if ((l->k == K::Str || l->k == K::List || l->k == K::Tuple) && op == BinOp::Add && l->k == r->k) {
    if (l->k == K::Str) return str(l->s + r->s);
    std::vector<ValueRef> items = l->items;
    items.insert(items.end(), r->items.begin(), r->items.end());
    return seq(items, l->k == K::List);
  }
  if (l->k == K::Str && op == BinOp::Mul && r->k == K::Int) {
    std::string s;
    for (int64_t i = 0; i < r->i; ++i) s += l->s;
    return str(s);
  }
  auto isNum = [](const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; };
  if (!isNum(l) || !isNum(r)) fail("operator `" + std::string(spelling(op)) + "` cannot be applied to a " + kindName(l) + " and a " + kindName(r), at);
  bool fl = l->k == K::Float || r->k == K::Float;
  auto num = [](const ValueRef &v) { return v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i); };
  auto inum = [](const ValueRef &v) { return v->k == K::Bool ? static_cast<int64_t>(v->b) : v->i; };
  if (!fl && op != BinOp::Div && op != BinOp::Pow) {
    int64_t a = inum(l), b = inum(r);
    switch (op) {
    case BinOp::Add: return integer(a + b);
    case BinOp::Sub: return integer(a - b);
    case BinOp::Mul: return integer(a * b);
    case BinOp::FloorDiv: case BinOp::Mod: {
      if (b == 0) fail(op == BinOp::FloorDiv ? "integer division by zero" : "integer modulo by zero", at);
      if (b == -1) return integer(op == BinOp::FloorDiv ? int64_t(0 - uint64_t(a)) : 0); // (i64 min / -1 traps)
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) { --q; m += b; }
      return integer(op == BinOp::FloorDiv ? q : m);
    }
    case BinOp::BitAnd: return integer(a & b);
    case BinOp::BitOr: return integer(a | b);
    case BinOp::BitXor: return integer(a ^ b);
    case BinOp::LShift: case BinOp::RShift:
      if (b < 0) fail("negative shift count", at);
      if (op == BinOp::LShift) return integer(b >= 64 ? 0 : int64_t(uint64_t(a) << b)); // (i64 wraps)
      return integer(a >> std::min<int64_t>(b, 63));
    default: break;
    }
  }
  double a = num(l), b = num(r);
  switch (op) {
  case BinOp::Add: return floating(a + b);
  case BinOp::Sub: return floating(a - b);
  case BinOp::Mul: return floating(a * b);
  case BinOp::Div:
    if (b == 0) fail("division by zero", at);
    return floating(a / b);
  case BinOp::Pow:
    if (!fl && inum(r) >= 0) {
      uint64_t p = 1, x = uint64_t(inum(l)); // (by squaring; i64 wraps)
      for (uint64_t e = uint64_t(inum(r)); e != 0; e >>= 1, x *= x)
        if (e & 1) p *= x;
      return integer(int64_t(p));
    }
    if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power", at);
    return floating(std::pow(a, b));
  case BinOp::FloorDiv:
    if (b == 0) fail("float floor division by zero", at); // (Python's ZeroDivisionError)
    return floating(std::floor(a / b));
  case BinOp::Mod:
    if (b == 0) fail("float modulo by zero", at);
    return floating(a - std::floor(a / b) * b);
  default: fail("operator `" + std::string(spelling(op)) + "` cannot be applied to floats", at);
  }
}

ValueRef Interpreter::Impl::compare(Compare *c, std::shared_ptr<Env> &env) {
  ValueRef left = expr(c->left, env);
  ValueRef result;
  Expr *leftExpr = c->left;
  for (size_t i = 0; i < c->ops.size(); ++i) {
    ValueRef right = expr(c->comparators[i], env);
    CmpOp op = c->ops[i];
    ValueRef r;
    if (left->k == K::Tensor || right->k == K::Tensor) {
      auto *node = synth.make<Compare>(c->range, nameNode(0, leftExpr->range));
      node->ops.push_back(op);
      node->comparators.push_back(nameNode(1, c->comparators[i]->range));
      r = eager(node, {left, right}, moduleOf(env), c->comparators[i]);
    } else if (op == CmpOp::Is || op == CmpOp::IsNot) {
      bool same = left->k == right->k && (left->k == K::None || left.get() == right.get());
      r = boolean(op == CmpOp::Is ? same : !same);
    } else if (op == CmpOp::In || op == CmpOp::NotIn) {
      bool found = false;
      if (right->k == K::Dict && left->k == K::Str) for (auto &[k, v] : right->dict) found |= k == left->s;
      else if (right->k == K::Str && left->k == K::Str) found = right->s.find(left->s) != std::string::npos;
      else for (auto &x : iterate(right, c->range)) found |= equal(left, x);
      r = boolean(op == CmpOp::In ? found : !found);
    } else if (op == CmpOp::Eq || op == CmpOp::Ne) {
      bool eq = equal(left, right);
      r = boolean(op == CmpOp::Eq ? eq : !eq);
    } else {
      int cmp = order(left, right, c->range);
      bool v = op == CmpOp::Lt ? cmp < 0 : op == CmpOp::Le ? cmp <= 0 : op == CmpOp::Gt ? cmp > 0 : cmp >= 0;
      r = boolean(v);
    }
    if (c->ops.size() == 1) return r;
    if (r->k != K::Bool) fail("a chained comparison of tensors cannot run", c->range);
    if (!r->b) return r;
    result = r;
    left = right;
    leftExpr = c->comparators[i];
  }
  return result;
}

bool Interpreter::Impl::equal(const ValueRef &a, const ValueRef &b) {
  auto isNum = [](const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; };
  if (isNum(a) && isNum(b)) {
    auto num = [](const ValueRef &v) { return v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i); };
    return num(a) == num(b);
  }
  if (a->k != b->k) return false;
  switch (a->k) {
  case K::None: return true;
  case K::Str: return a->s == b->s;
  case K::DType: return a->dtype == b->dtype;
  case K::List: case K::Tuple:
    if (a->items.size() != b->items.size()) return false;
    for (size_t i = 0; i < a->items.size(); ++i) if (!equal(a->items[i], b->items[i])) return false;
    return true;
  default: return a.get() == b.get();
  }
}

int Interpreter::Impl::order(const ValueRef &a, const ValueRef &b, SourceRange at) {
  auto isNum = [](const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; };
  if (isNum(a) && isNum(b)) {
    auto num = [](const ValueRef &v) { return v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i); };
    double x = num(a), y = num(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a->k == K::Str && b->k == K::Str) return a->s < b->s ? -1 : a->s > b->s ? 1 : 0;
  fail("a " + kindName(a) + " and a " + kindName(b) + " cannot be ordered", at);
}

ValueRef Interpreter::Impl::subscript(Subscript *s, std::shared_ptr<Env> &env) {
  ValueRef base = expr(s->value, env);
  if (base->k == K::Tensor) {
    // The indices are evaluated here; the indexing runs as a graph.
    std::vector<ValueRef> operands{base};
    auto *node = synth.make<Subscript>(s->range, nameNode(0, s->value->range));
    node->trailingComma = s->trailingComma;
    auto operand = [&](Expr *x) -> Expr * {
      if (!x) return nullptr;
      operands.push_back(expr(x, env));
      return nameNode(operands.size() - 1, x->range);
    };
    for (Expr *i : s->indices) {
      if (auto *sl = dyn_cast<Slice>(i)) {
        auto *n = synth.make<Slice>(sl->range);
        n->lower = operand(sl->lower);
        n->upper = operand(sl->upper);
        n->step = operand(sl->step);
        node->indices.push_back(n);
      } else if (i->kind == Kind::NoneLit || i->kind == Kind::EllipsisLit) {
        node->indices.push_back(i);
      } else {
        node->indices.push_back(operand(i));
      }
    }
    return eager(node, operands, moduleOf(env), s);
  }
  if (s->indices.size() != 1) fail("this indexing cannot run yet", s->range);
  if (auto *sl = dyn_cast<Slice>(s->indices[0])) {
    if (base->k != K::List && base->k != K::Tuple && base->k != K::Str) fail("a " + kindName(base) + " cannot be sliced", s->range);
    int64_t n = base->k == K::Str ? static_cast<int64_t>(base->s.size()) : static_cast<int64_t>(base->items.size());
    auto bound = [&](Expr *x, int64_t dflt) -> int64_t {
      if (!x) return dflt;
      ValueRef v = expr(x, env);
      if (v->k != K::Int) fail("slice bounds are ints", x->range);
      int64_t b = v->i < 0 ? v->i + n : v->i;
      return std::clamp<int64_t>(b, 0, n);
    };
    int64_t lo = bound(sl->lower, 0), hi = bound(sl->upper, n);
    if (base->k == K::Str) return str(hi > lo ? base->s.substr(lo, hi - lo) : "");
    std::vector<ValueRef> out;
    for (int64_t i = lo; i < hi; ++i) out.push_back(base->items[i]);
    return seq(out, base->k == K::List);
  }
  ValueRef idx = expr(s->indices[0], env);
  if (base->k == K::Dict) {
    if (idx->k != K::Str) fail("dict keys are strings", s->indices[0]->range);
    for (auto &[k, v] : base->dict) if (k == idx->s) return v;
    fail("the dict has no key \"" + idx->s + "\"", s->indices[0]->range);
  }
  if (base->k == K::List || base->k == K::Tuple || base->k == K::Str) {
    if (idx->k != K::Int) fail("indices are ints", s->indices[0]->range);
    int64_t n = base->k == K::Str ? static_cast<int64_t>(base->s.size()) : static_cast<int64_t>(base->items.size());
    int64_t i = idx->i < 0 ? idx->i + n : idx->i;
    if (i < 0 || i >= n) fail("index " + std::to_string(idx->i) + " is out of range for a " + kindName(base) + " of length " + std::to_string(n), s->indices[0]->range);
    return base->k == K::Str ? str(std::string(1, base->s[i])) : base->items[i];
  }
  if (base->k == K::Function) fail("launching kernels cannot run on the CPU yet", s->range, 3);
  fail("a " + kindName(base) + " cannot be indexed", s->range);
}

ValueRef Interpreter::Impl::attribute(Attribute *a, std::shared_ptr<Env> &env) {
  ValueRef base = expr(a->value, env);
  const std::string &n = a->attr;
  if (base->k == K::Tensor) {
    if (n == "shape") {
      std::vector<ValueRef> es;
      for (int64_t d : base->t.shape()) es.push_back(integer(d));
      return seq(es, false);
    }
    if (n == "ndim") return integer(base->t.ndim());
    if (n == "dtype") { Value v; v.k = K::DType; v.dtype = base->t.dtype(); return mk(v); }
    if (n == "T") return eager(synth.make<Attribute>(a->range, nameNode(0, a->value->range), "T", a->attrRange), {base}, moduleOf(env), a);
    if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::Tensor, n)) { Value v; v.k = K::Builtin; v.builtin = m; v.self = base; return mk(v); }
  }
  if (base->k == K::Module) {
    auto g = base->module->globals.find(n);
    if (g != base->module->globals.end()) {
      auto scope = std::make_shared<Env>();
      scope->module = base->module;
      return lookup(n, scope, a->attrRange);
    }
  }
  if (base->k == K::Builtin && base->builtin->isNamespace) {
    if (const sema::BuiltinInfo *b = sema::findBuiltin(base->builtin->name + "." + n)) { Value v; v.k = K::Builtin; v.builtin = b; return mk(v); }
  }
  if (isCache(base)) {
    // A KVCache's attributes (as the checker types them, sema/CheckCalls.cpp) and append.
    const rt::Tensor &k = base->dict.at(0).second->t, &pos = base->dict.at(2).second->t;
    const int64_t S = k.shape()[2];
    if (n == "k" || n == "v") return base->dict.at(n == "k" ? 0 : 1).second;
    if (n == "appended") return base->dict.at(2).second;
    if (n == "length") return tensor(rt::Tensor::fromI64({}, DType::I32, std::vector<int64_t>{base->b ? std::min(pos.toI64(0), S) : pos.toI64(0)}));
    if (n == "max_len") return integer(S);
    if (n == "rolling_window") return boolean(base->b);
    if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::KVCache, n)) { Value v; v.k = K::Builtin; v.builtin = m; v.self = base; return mk(v); }
    fail("a KVCache has no attribute `" + n + "`", a->attrRange);
  }
  if (base->k == K::Dict && base->s == kConfigMark) {
    for (auto &[k, v] : base->dict) if (k == n) return v;
    fail("the configuration has no entry `" + n + "`", a->attrRange);
  }
  if (base->k == K::Dict || base->k == K::List) {
    Value v;
    v.k = K::Builtin;
    v.builtin = sema::findMethod(base->k == K::Dict ? TypeKind::Dict : TypeKind::List, n);
    v.self = base;
    if (v.builtin) return mk(v);
  }
  fail("a " + kindName(base) + " has no attribute `" + n + "`", a->attrRange);
}

} // namespace tsr::host
