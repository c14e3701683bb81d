// Kernel lowering: statements: assignments, `if` on compile-time and run-time conditions, `for`
// loops (unrolled over compile-time ranges, `for` ops over tile.range), returns.
#include "ir/lower/kernel/KernelLowering.h"

namespace tsr::ir::kernel_lowering {

void KernelLowering::assign(Expr *target, const KVRef &v, SourceRange at) {
  if (auto *n = dyn_cast<Name>(target)) { env()[n->id] = v; return; }
  auto unpack = [&](const std::vector<Expr *> &ts) {
    if (v->kind != KV::K::Tuple || v->elems.size() != ts.size()) unsupported("unpacking a " + kindName(v) + " into " + std::to_string(ts.size()) + " names", at);
    for (size_t i = 0; i < ts.size(); ++i) assign(ts[i], v->elems[i], at);
  };
  if (auto *t = dyn_cast<Tuple>(target)) return unpack(t->elts);
  if (auto *l = dyn_cast<List>(target)) return unpack(l->elts);
  unsupported("assigning to this target in a kernel (write through tile.store)", target->range);
}

void KernelLowering::block(const std::vector<Stmt *> &body) {
  for (Stmt *s : body) stmt(s);
}

void KernelLowering::stmt(Stmt *s) {
  switch (s->kind) {
  case Kind::ExprStmt: {
    Expr *e = static_cast<ExprStmt *>(s)->expr;
    if (e->kind == Kind::StrLit) return; // a docstring
    expr(e);
    return;
  }
  case Kind::Assign: {
    auto *a = static_cast<Assign *>(s);
    KVRef v = expr(a->value);
    for (Expr *t : a->targets) assign(t, v, s->range);
    return;
  }
  case Kind::AnnAssign: {
    auto *a = static_cast<AnnAssign *>(s);
    if (a->value) assign(a->target, expr(a->value), s->range);
    return;
  }
  case Kind::AugAssign: {
    auto *a = static_cast<AugAssign *>(s);
    assign(a->target, binary(a->op, expr(a->target), expr(a->value), s->range), s->range);
    return;
  }
  case Kind::Pass: return;
  case Kind::Return: {
    auto *r = static_cast<Return *>(s);
    if (frames_.back()->fn == kernel_) {
      if (r->value) unsupported("a kernel returning a value (kernels write through views)", s->range);
      if (nested_ > 0) unsupported("a `return` inside a loop or a run-time `if` of a kernel", s->range);
      throw Returned{};
    }
    if (nested_ > 0) unsupported("a `return` inside a loop or a run-time `if` of an inline helper", s->range);
    returnValue_ = r->value ? expr(r->value) : none();
    throw Returned{};
  }
  case Kind::If: return ifStmt(static_cast<If *>(s));
  case Kind::For: return forStmt(static_cast<For *>(s));
  case Kind::Assert: {
    auto *a = static_cast<Assert *>(s);
    KVRef t = expr(a->test);
    if (isRuntime(t)) unsupported("an `assert` on a run-time value in a kernel", s->range);
    if (!truth(t, a->test->range)) unsupported("a launch for which the kernel's `assert` fails at compile time", s->range);
    return;
  }
  case Kind::Break: unsupported("`break` in a kernel", s->range);
  case Kind::Continue: unsupported("`continue` in a kernel", s->range);
  case Kind::While: unsupported("a `while` loop in a kernel", s->range);
  default: unsupported("this statement in a kernel", s->range);
  }
}

void KernelLowering::ifStmt(If *s) {
  KVRef t = expr(s->test);
  if (!isRuntime(t)) {
    block(truth(t, s->test->range) ? s->body : s->orelse);
    return;
  }
  tile::Value *cond = condition(t, s->test->range);
  std::vector<std::string> names;
  assignedNames(s->body, names);
  assignedNames(s->orelse, names);
  auto before = env();
  tile::Block *saved = cur_;
  ++nested_;
  // Each branch runs on its own copy of the names; what both end with becomes the results.
  auto runBranch = [&](const std::vector<Stmt *> &body) {
    tile::Block *b = f_.newBlock(nullptr);
    cur_ = b;
    env() = before;
    block(body);
    return std::make_pair(b, env());
  };
  auto [thenB, thenEnv] = runBranch(s->body);
  auto [elseB, elseEnv] = runBranch(s->orelse);
  --nested_;
  std::vector<std::string> results;
  std::vector<tile::Value *> thenVals, elseVals;
  std::vector<tile::Type> types;
  std::vector<bool> weak;
  for (const std::string &n : names) {
    auto a = thenEnv.find(n), b = elseEnv.find(n);
    if (a == thenEnv.end() || b == elseEnv.end()) continue;
    if (a->second == b->second) continue; // unchanged on both paths
    if (!(isNumber(a->second) || isRuntime(a->second)) || !(isNumber(b->second) || isRuntime(b->second))) {
      if (before.count(n)) unsupported("a run-time `if` that assigns a " + kindName(a->second) + " to `" + n + "`", s->range);
      continue;
    }
    DType d = joinDType(a->second, b->second, s->range);
    auto shape = broadcastShapes(shapeOf(a->second), shapeOf(b->second), s->range);
    cur_ = thenB;
    thenVals.push_back(convert(a->second, d, shape, s->range));
    cur_ = elseB;
    elseVals.push_back(convert(b->second, d, shape, s->range));
    types.push_back(tile::Type::tile(shape, d));
    weak.push_back(isWeak(a->second) && isWeak(b->second));
    results.push_back(n);
  }
  f_.addWithTypes(thenB, TOp::Yield, thenVals, {}, {}, loc(s->range));
  f_.addWithTypes(elseB, TOp::Yield, elseVals, {}, {}, loc(s->range));
  cur_ = saved;
  tile::Op *o = f_.addWithTypes(cur_, TOp::If, {cond}, {}, types, loc(s->range));
  for (tile::Block *b : {thenB, elseB}) {
    b->parent = o;
    o->regions.push_back(b);
  }
  env() = before;
  for (size_t i = 0; i < results.size(); ++i) env()[results[i]] = tileOf(o->results[i], weak[i]);
}

void KernelLowering::forStmt(For *s) {
  if (!s->orelse.empty()) unsupported("a `for` loop with an `else`", s->range);
  KVRef it = expr(s->iter);
  if (it->kind == KV::K::Tuple) {
    for (const KVRef &x : it->elems) {
      assign(s->target, x, s->range);
      block(s->body);
    }
    return;
  }
  if (it->kind != KV::K::Range) unsupported("a loop over a " + kindName(it) + " in a kernel", s->iter->range);
  const KVRef &lo = it->elems[0], &hi = it->elems[1], &st = it->elems[2];
  // A loop written over a call of the builtin whose kernel rule is "range" (tile.range) stays a
  // loop; over a range value bound earlier, compile-time bounds unroll it.
  bool isTileRange = false;
  if (auto *c = dyn_cast<Call>(s->iter)) {
    auto *at = dyn_cast<Attribute>(c->func);
    auto *ns = at ? dyn_cast<Name>(at->value) : nullptr;
    const sema::BuiltinInfo *b = ns && sema::isBuiltinNamespace(ns->id) ? sema::findBuiltin(ns->id + "." + at->attr) : nullptr;
    isTileRange = b && b->kernel.rule == "range";
  }
  if (!isTileRange && lo->kind == KV::K::Int && hi->kind == KV::K::Int && st->kind == KV::K::Int) {
    // range() over compile-time bounds unrolls.
    if (st->i == 0) unsupported("a range with step 0", s->iter->range);
    int64_t n = 0;
    for (int64_t i = lo->i; st->i > 0 ? i < hi->i : i > hi->i; i += st->i) {
      if (++n > 4096) unsupported("unrolling a loop of more than 4096 iterations (use tile.range)", s->iter->range);
      assign(s->target, integer(i), s->range);
      block(s->body);
    }
    return;
  }
  auto *target = dyn_cast<Name>(s->target);
  if (!target) unsupported("a loop over a range with a target that is not a name", s->target->range);
  if (st->kind == KV::K::Int && st->i <= 0) unsupported("a tile.range with a step that is not positive", s->iter->range);
  SourceRange at = s->range;
  tile::Value *l = convert(lo, DType::I64, {}, s->iter->range), *h = convert(hi, DType::I64, {}, s->iter->range),
              *stp = convert(st, DType::I64, {}, s->iter->range);
  // Loop-carried values: the names the body assigns that exist before the loop.
  std::vector<std::string> names, carried;
  assignedNames(s->body, names);
  for (const std::string &n : names)
    if (n != target->id && env().count(n)) carried.push_back(n);
  std::vector<tile::Value *> inits;
  std::vector<bool> weak;
  for (const std::string &n : carried) {
    const KVRef &v = env()[n];
    if (!isNumber(v) && !isRuntime(v)) unsupported("a loop that reassigns the " + kindName(v) + " `" + n + "`", at);
    inits.push_back(value(v, at));
    weak.push_back(isWeak(v));
  }
  std::vector<tile::Value *> operands{l, h, stp};
  std::vector<tile::Type> types;
  for (tile::Value *v : inits) { operands.push_back(v); types.push_back(v->type); }
  std::vector<Attr> attrs;
  int64_t stages = it->stages;
  if (!stages && isTileRange)
    for (auto &[k, v] : config_) if (k == "stages" && v->kind == KV::K::Int) stages = v->i;
  if (stages) attrs.push_back({"stages", stages});
  tile::Op *fo = f_.addWithTypes(cur_, TOp::For, operands, attrs, types, loc(at));
  tile::Block *body = f_.newBlock(fo);
  tile::Value *iv = f_.addBlockArg(body, tile::Type::scalar(DType::I64));
  auto before = env();
  env()[target->id] = tileOf(iv, true);
  for (size_t i = 0; i < carried.size(); ++i) env()[carried[i]] = tileOf(f_.addBlockArg(body, inits[i]->type), weak[i]);
  tile::Block *saved = cur_;
  cur_ = body;
  ++nested_;
  block(s->body);
  --nested_;
  std::vector<tile::Value *> yields;
  for (size_t i = 0; i < carried.size(); ++i) {
    const KVRef &v = env()[carried[i]];
    const tile::Type &want = inits[i]->type;
    if (!isNumber(v) && !isRuntime(v)) unsupported("a loop that makes `" + carried[i] + "` a " + kindName(v), at);
    tile::Value *y = isNumber(v) ? constant(v, want.dtype, want.shape, at) : value(v, at);
    if (y->type != want) {
      // A loop-carried value keeps its type: a number or a dtype-only change converts, as the
      // checker's join does; a new shape is an error.
      if (y->type.shape != want.shape && !y->type.isScalar())
        unsupported("a loop-carried `" + carried[i] + "` that changes from " + want.str() + " to " + y->type.str(), at);
      y = broadcastTo(castTo(y, want.dtype, at), want.shape, at);
    }
    yields.push_back(y);
  }
  f_.addWithTypes(body, TOp::Yield, yields, {}, {}, loc(at));
  cur_ = saved;
  env() = before;
  for (size_t i = 0; i < carried.size(); ++i) env()[carried[i]] = tileOf(fo->results[i], weak[i]);
}

// Names a statement list assigns (targets of =, +=, for; the destination of tile.cp_async).
void assignedNames(const std::vector<Stmt *> &body, std::vector<std::string> &out) {
  auto add = [&](const std::string &n) { if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n); };
  std::function<void(Expr *)> target = [&](Expr *t) {
    if (auto *n = dyn_cast<Name>(t)) add(n->id);
    else if (auto *tu = dyn_cast<Tuple>(t)) for (Expr *e : tu->elts) target(e);
    else if (auto *l = dyn_cast<List>(t)) for (Expr *e : l->elts) target(e);
  };
  std::function<void(Node *)> calls = [&](Node *n) {
    if (auto *c = dyn_cast<Call>(n)) {
      // A builtin whose kernel rule rebinds its first argument (tile.cp_async).
      auto *at = dyn_cast<Attribute>(c->func);
      auto *ns = at ? dyn_cast<Name>(at->value) : nullptr;
      const sema::BuiltinInfo *b = ns && sema::isBuiltinNamespace(ns->id) ? sema::findBuiltin(ns->id + "." + at->attr) : nullptr;
      if (b && b->kernel.rule == "cp_async" && !c->args.empty())
        if (auto *nm = dyn_cast<Name>(c->args[0].value)) add(nm->id);
    }
    forEachChild(n, calls);
  };
  for (Stmt *s : body) {
    if (auto *a = dyn_cast<Assign>(s)) for (Expr *t : a->targets) target(t);
    else if (auto *a = dyn_cast<AugAssign>(s)) target(a->target);
    else if (auto *a = dyn_cast<AnnAssign>(s)) target(a->target);
    else if (auto *f = dyn_cast<For>(s)) { target(f->target); assignedNames(f->body, out); assignedNames(f->orelse, out); }
    else if (auto *i = dyn_cast<If>(s)) { assignedNames(i->body, out); assignedNames(i->orelse, out); }
    else if (auto *w = dyn_cast<While>(s)) assignedNames(w->body, out);
    calls(s);
  }
}

} // namespace tsr::ir::kernel_lowering
