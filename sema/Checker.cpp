// Statements and expressions of function bodies and module top levels.
//
// One room (over 1,000 lines): FunctionChecker's statements and expressions are one flow-sensitive
// walk (locals, joins at if/else, two passes over loops), whose cases call each other; calls,
// subscripts and attributes are CheckCalls.cpp's, and modules and signatures Modules.cpp's.
#include "sema/Checker.h"
#include "sema/Decorators.h"

#include <cmath>

namespace tsr::sema {

using namespace ast;

FunctionChecker::FunctionChecker(ProgramChecker &pc, ModuleInfo &mod, const FunctionInfo *fn, BodyContext ctx, bool record)
    : pc_(pc), mod_(mod), fn_(fn), ctx_(ctx), record_(record) {
  if (fn && fn->def) {
    collectAssigned(fn->def->body, assignedNames_);
    for (const std::string &s : fn->symbols) symbolValues_[s] = T::integer(Dim::symbol(s));
  }
}

void FunctionChecker::record(SourceRange r, const std::string &name, const TypeRef &t) {
  if (record_ && !inLambda_ && prepassDepth_ == 0 && !noRecord_) pc_.P.bindings.push_back({r, name, t, fn_});
}

void FunctionChecker::bindParam(const std::string &name, TypeRef type, SourceRange decl) {
  locals_[name] = {type, decl, true};
  record(decl, name, type);
}

// Names assigned anywhere in a block are locals of the whole function (Python's rule).
void FunctionChecker::collectAssigned(const Block &b, std::unordered_set<std::string> &out) {
  std::function<void(Expr *)> targets = [&](Expr *e) {
    if (!e) return;
    if (auto *n = dyn_cast<Name>(e)) out.insert(n->id);
    else if (auto *t = dyn_cast<Tuple>(e)) for (Expr *x : t->elts) targets(x);
    else if (auto *l = dyn_cast<List>(e)) for (Expr *x : l->elts) targets(x);
    else if (auto *s = dyn_cast<Starred>(e)) targets(s->value);
  };
  for (Stmt *s : b) {
    switch (s->kind) {
    case Kind::Assign: for (Expr *t : static_cast<Assign *>(s)->targets) targets(t); break;
    case Kind::AugAssign: targets(static_cast<AugAssign *>(s)->target); break;
    case Kind::AnnAssign: targets(static_cast<AnnAssign *>(s)->target); break;
    case Kind::For: targets(static_cast<For *>(s)->target); collectAssigned(static_cast<For *>(s)->body, out); collectAssigned(static_cast<For *>(s)->orelse, out); break;
    case Kind::If: collectAssigned(static_cast<If *>(s)->body, out); collectAssigned(static_cast<If *>(s)->orelse, out); break;
    case Kind::While: collectAssigned(static_cast<While *>(s)->body, out); collectAssigned(static_cast<While *>(s)->orelse, out); break;
    case Kind::With: {
      auto *w = static_cast<With *>(s);
      for (auto &it : w->items) targets(it.var);
      collectAssigned(w->body, out);
      break;
    }
    default: break;
    }
  }
}

Local *FunctionChecker::lookupLocal(const std::string &n) {
  auto it = locals_.find(n);
  if (it != locals_.end()) return &it->second;
  return nullptr;
}

// ---- statements ----------------------------------------------------------------------------

void FunctionChecker::checkBody(const Block &body) { block(body); }

void FunctionChecker::block(const Block &b) {
  for (Stmt *s : b) stmt(s);
}

void FunctionChecker::stmt(Stmt *s) {
  DiagnosticEngine &D = pc_.P.diags;
  switch (s->kind) {
  case Kind::ExprStmt: expr(static_cast<ExprStmt *>(s)->expr); return;
  case Kind::Assign: {
    auto *a = static_cast<Assign *>(s);
    TypeRef v = assignedValue(a->value);
    for (Expr *t : a->targets) assign(t, v, a->value->range);
    return;
  }
  case Kind::AugAssign: {
    auto *a = static_cast<AugAssign *>(s);
    TypeRef cur = expr(a->target);
    TypeRef v = expr(a->value);
    Reporter r{D, s->range, {}};
    TypeRef res;
    std::string op(spelling(a->op));
    if (a->op == BinOp::MatMul) res = matmul(cur, v, r);
    else if ((cur->is(TypeKind::List) || cur->is(TypeKind::Tuple)) && a->op == BinOp::Add) res = join(cur, v);
    else if (cur->is(TypeKind::Str) && a->op == BinOp::Add) res = T::str();
    else res = elementwise(op, a->op == BinOp::Div ? ElementwiseKind::TrueDivide : ElementwiseKind::Arithmetic, cur, v, r);
    assign(a->target, res, a->value->range);
    return;
  }
  case Kind::AnnAssign: {
    auto *a = static_cast<AnnAssign *>(s);
    TypeRef ann = pc_.annotationType(a->annotation, const_cast<FunctionInfo *>(fn_), mod_, nullptr);
    if (a->value) {
      TypeRef v = expr(a->value);
      if (!v->is(TypeKind::Unknown) && !ann->is(TypeKind::Unknown)) {
        bool ok = v->kind == ann->kind || (ann->isScalarTensor() && v->isPyNumber()) || (ann->is(TypeKind::Float) && v->is(TypeKind::Int));
        if (ok && v->is(TypeKind::Tensor) && ann->is(TypeKind::Tensor))
          ok = v->dtype == ann->dtype && !(v->rankKnown && ann->rankKnown && shapesProvablyDiffer(v->dims, ann->dims));
        if (!ok) D.report(DiagKind::AssignTypeMismatch, a->value->range, {a->target->kind == Kind::Name ? static_cast<Name *>(a->target)->id : "target", typeStr(ann), typeStr(v)});
      }
      // The name has the declared type from here on (what the user said it is), whatever was
      // assigned; a mismatch was reported above.
      assign(a->target, ann->is(TypeKind::Unknown) ? v : (v->isPyNumber() && ann->is(TypeKind::Float) ? T::floating() : (v->kind == ann->kind && !v->is(TypeKind::Tensor) ? v : ann)), a->value->range);
    } else {
      assign(a->target, ann, a->annotation->range);
    }
    return;
  }
  case Kind::Return: checkReturn(static_cast<Return *>(s)); return;
  case Kind::Pass: return;
  case Kind::Break: case Kind::Continue: {
    std::string_view w = s->kind == Kind::Break ? "break" : "continue";
    if (loopDepth_ == 0) D.report(DiagKind::OutsideLoop, s->range, {std::string(w)});
    else if (ctx_ == BodyContext::Graph)
      D.report(DiagKind::NotInGraph, s->range, {"`" + std::string(w) + "`", "loops in graph functions are unrolled at compile time and run every iteration"});
    else if (ctx_ == BodyContext::Kernel)
      D.report(DiagKind::NotInKernel, s->range, {"`" + std::string(w) + "`", "a tile.range loop runs every iteration; use tile.where or a mask"});
    return;
  }
  case Kind::If: checkIf(static_cast<If *>(s)); return;
  case Kind::For: checkFor(static_cast<For *>(s)); return;
  case Kind::While: checkWhile(static_cast<While *>(s)); return;
  case Kind::With: {
    auto *w = static_cast<With *>(s);
    if (ctx_ == BodyContext::Kernel) D.report(DiagKind::NotInKernel, s->range, {"a `with` block", "placement applies to graph and host code"});
    for (auto &it : w->items) {
      if (ctx_ == BodyContext::Kernel) {
        DiagnosticEngine::Suppress quiet(D); // the block itself was reported
        expr(it.context);
      } else {
        expr(it.context);
      }
      if (it.var) assign(it.var, T::unknown(), it.context->range);
    }
    block(w->body);
    return;
  }
  case Kind::Assert: {
    auto *a = static_cast<Assert *>(s);
    TypeRef t = expr(a->test);
    if (ctx_ == BodyContext::Kernel && t->isTensorLike()) checkCondition(a->test, t, "assert");
    if (a->msg) expr(a->msg);
    return;
  }
  case Kind::FunctionDef:
    D.report(DiagKind::Unsupported, static_cast<FunctionDef *>(s)->nameRange, {"a function defined inside a function"});
    D.note("define it at module level, or use a lambda");
    return;
  case Kind::ClassDef: D.report(DiagKind::Unsupported, s->range, {"`class`"}); return;
  case Kind::Import: case Kind::ImportFrom:
    if (ctx_ == BodyContext::Module) { checkModuleStmt(s); return; }
    D.report(DiagKind::Unsupported, s->range, {"an import inside a function"});
    D.note("import at the top of the module");
    // Bind the names so that their uses are not reported again.
    if (auto *imp = dyn_cast<Import>(s))
      for (auto &a : imp->names) if (!a.path.empty()) locals_[a.asName.empty() ? a.path[0] : a.asName] = {T::unknown(), a.range, true};
    if (auto *imp = dyn_cast<ImportFrom>(s))
      for (auto &a : imp->names) if (!a.path.empty()) locals_[a.asName.empty() ? a.path[0] : a.asName] = {T::unknown(), a.range, true};
    return;
  case Kind::Del: D.report(DiagKind::Unsupported, s->range, {"`del`"}); return;
  case Kind::Raise: D.report(DiagKind::Unsupported, s->range, {"`raise`"}); D.note("use `assert condition, message` to stop with an error"); return;
  case Kind::Global: D.report(DiagKind::Unsupported, s->range, {"`global` (or `nonlocal`)"}); D.note("module-level names are constants; pass values as arguments and return results"); return;
  default: return;
  }
}

void FunctionChecker::checkReturn(Return *s) {
  DiagnosticEngine &D = pc_.P.diags;
  if (ctx_ == BodyContext::Module) {
    D.report(DiagKind::OutsideFunction, s->range, {"return"});
    return;
  }
  TypeRef t = s->value ? expr(s->value) : T::none();
  if (ctx_ == BodyContext::Kernel && fn_ && fn_->kind == FunctionKind::Kernel && s->value && !t->is(TypeKind::None)) {
    D.report(DiagKind::KernelReturn, s->value->range);
    return;
  }
  if (prepassDepth_ > 0) return;
  sawReturn_ = true;
  if (returnType_ && s->value && !t->is(TypeKind::Unknown) && !returnType_->is(TypeKind::Unknown) && !returnType_->is(TypeKind::None)) {
    bool differ = returnType_->kind != t->kind && !(returnType_->isPyNumber() && t->isPyNumber());
    if (!differ && t->is(TypeKind::Tuple) && t->lengthKnown && returnType_->lengthKnown) differ = t->elems.size() != returnType_->elems.size();
    if (differ) {
      D.report(DiagKind::InconsistentReturn, s->value->range, {fn_ ? fn_->name : "function", typeStr(t), typeStr(returnType_)});
      return;
    }
  }
  if (fn_ && fn_->declaredReturn && s->value && !t->is(TypeKind::Unknown)) {
    TypeRef want = fn_->declaredReturn;
    if (!env_.empty() && (want->is(TypeKind::Tensor) || want->is(TypeKind::KVCache))) {
      std::vector<Dim> dims;
      for (const Dim &d : want->dims) dims.push_back(d.substitute(env_));
      want = T::withDims(want, dims);
    }
    bool ok = true;
    if (want->is(TypeKind::Tensor)) {
      if (t->is(TypeKind::Tensor)) {
        ok = t->dtype == want->dtype && !(t->rankKnown && want->rankKnown && shapesProvablyDiffer(t->dims, want->dims));
      } else if (t->isPyNumber()) {
        ok = want->isScalarTensor();
      } else {
        ok = false;
      }
    } else if (want->is(TypeKind::KVCache)) {
      ok = t->is(TypeKind::KVCache) && t->dtype == want->dtype && t->rolling == want->rolling && !shapesProvablyDiffer(t->dims, want->dims);
    } else if (want->is(TypeKind::Float)) {
      ok = t->is(TypeKind::Float) || t->is(TypeKind::Int) || t->isScalarTensor();
    } else if (!want->is(TypeKind::Unknown)) {
      ok = want->kind == t->kind || (want->is(TypeKind::Int) && t->is(TypeKind::Bool));
      if (ok && want->is(TypeKind::Tuple) && want->lengthKnown && t->lengthKnown) ok = want->elems.size() == t->elems.size();
    }
    if (!ok) {
      D.report(DiagKind::ReturnTypeMismatch, s->value->range, {typeStr(t), typeStr(want)});
      if (fn_->def && fn_->def->returns) D.note("the return type is declared here", fn_->def->returns->range);
    }
  }
  returnType_ = returnType_ ? join(returnType_, t) : t;
}

void FunctionChecker::checkCondition(Expr *test, const TypeRef &t, std::string_view what) {
  DiagnosticEngine &D = pc_.P.diags;
  // Graph functions are compiled for compile-time control flow (spec 3): a condition on a value
  // known only at run time (a positional int parameter, data) cannot choose what to compile.
  if (ctx_ == BodyContext::Graph && t->is(TypeKind::Bool) && t->runtime && !specializing_) {
    D.report(DiagKind::NotInGraph, test->range, {"`" + std::string(what) + "` on a value known only at run time",
                                                 "make it a keyword-only parameter (compile-time), or select with where(cond, a, b)"});
    return;
  }
  if (t->is(TypeKind::Tensor) || t->is(TypeKind::Tile)) {
    bool single = t->rankKnown && product(t->dims).isOne();
    if (ctx_ == BodyContext::Graph || ctx_ == BodyContext::Kernel) {
      std::string hint = ctx_ == BodyContext::Graph ? "select between values with where(cond, a, b)" : "select with tile.where(cond, a, b) or pass a mask";
      if (ctx_ == BodyContext::Graph)
        D.report(DiagKind::NotInGraph, test->range, {"`" + std::string(what) + "` on a tensor value", hint});
      else
        D.report(DiagKind::NotInKernel, test->range, {"`" + std::string(what) + "` on a tile value", hint});
      return;
    }
    if (!single && t->rankKnown) D.report(DiagKind::ConditionType, test->range, {typeStr(t)});
  }
}

// Locals after two paths merge: a name bound on only one path keeps that path's type but is
// marked as possibly undefined only if it was not defined before.
static void mergeLocals(std::unordered_map<std::string, Local> &into, const std::unordered_map<std::string, Local> &a,
                        const std::unordered_map<std::string, Local> &b) {
  std::unordered_map<std::string, Local> out;
  for (auto &[n, la] : a) {
    auto it = b.find(n);
    if (it == b.end()) { out[n] = la; continue; }
    Local l = la;
    l.type = join(la.type, it->second.type);
    out[n] = l;
  }
  for (auto &[n, lb] : b) if (!out.count(n)) out[n] = lb;
  into = std::move(out);
}

void FunctionChecker::checkIf(If *s) {
  TypeRef t = expr(s->test);
  checkCondition(s->test, t, "if");
  std::optional<bool> known = t->boolValue;
  if (!known && t->is(TypeKind::None)) known = false;
  if (known) {
    // Only the taken branch is compiled (spec 3: `if` on compile-time values).
    block(*known ? s->body : s->orelse);
    return;
  }
  auto before = locals_;
  block(s->body);
  auto afterBody = locals_;
  locals_ = before;
  block(s->orelse);
  mergeLocals(locals_, afterBody, locals_);
}

TypeRef FunctionChecker::iterElement(const TypeRef &it, Expr *iterExpr) {
  DiagnosticEngine &D = pc_.P.diags;
  switch (it->kind) {
  case TypeKind::Unknown: return T::unknown();
  case TypeKind::Range: return T::integer();
  case TypeKind::Tuple: case TypeKind::List: {
    if (!it->lengthKnown) return it->elem ? it->elem : T::unknown();
    TypeRef e;
    for (auto &x : it->elems) e = join(e, x);
    return e ? e : T::unknown();
  }
  case TypeKind::Dict: return T::str();
  case TypeKind::Str: return T::str();
  case TypeKind::Tensor:
    if (ctx_ == BodyContext::Graph) {
      D.report(DiagKind::NotInGraph, iterExpr->range, {"a `for` loop over a tensor", "loops in graph functions run over compile-time ranges"});
      return T::unknown();
    }
    if (!it->rankKnown) return T::tensorUnknownRank(it->dtype);
    if (it->dims.empty()) { D.report(DiagKind::NotIterable, iterExpr->range, {typeStr(it)}); return T::unknown(); }
    return T::tensor(std::vector<Dim>(it->dims.begin() + 1, it->dims.end()), it->dtype, it->policies);
  default:
    D.report(DiagKind::NotIterable, iterExpr->range, {typeStr(it)});
    return T::unknown();
  }
}

// Checks a loop body so that types carried around the loop are seen at their joined value: a
// first pass with diagnostics suppressed finds what the body assigns, then the real pass runs
// from the merge of the entry types and the first pass's exit types.
void FunctionChecker::loopBody(const Block &body, const std::function<void()> &bindTargets) {
  ++loopDepth_;
  auto entry = locals_;
  if (prepassDepth_ < 2) {
    DiagnosticEngine::Suppress quiet(pc_.P.diags);
    ++prepassDepth_;
    bindTargets();
    block(body);
    --prepassDepth_;
    auto exit = locals_;
    locals_ = entry;
    for (auto &[n, l] : exit) {
      auto it = locals_.find(n);
      if (it != locals_.end()) it->second.type = join(it->second.type, l.type);
    }
  }
  bindTargets();
  block(body);
  auto afterBody = locals_;
  mergeLocals(locals_, entry, afterBody);
  --loopDepth_;
}

void FunctionChecker::checkFor(For *s) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef it = expr(s->iter);
  if (ctx_ == BodyContext::Kernel && !(it->is(TypeKind::Range) || it->is(TypeKind::Unknown) || it->is(TypeKind::Tuple) || it->is(TypeKind::List)))
    D.report(DiagKind::NotInKernel, s->iter->range, {"a `for` loop over " + typeStr(it), "kernel loops run over tile.range(start, end, step)"});
  if (it->is(TypeKind::Range) && it->kernelRange && ctx_ != BodyContext::Kernel)
    D.report(DiagKind::TileOutsideKernel, s->iter->range, {"tile.range"});
  // Graph functions unroll loops over tuples of known length: each element is checked with its
  // own type, so symbolic sizes stay exact (`for s in x.shape: n = n * s`).
  if ((ctx_ == BodyContext::Graph || (fn_ && fn_->kind == FunctionKind::Inline)) && it->is(TypeKind::Tuple) &&
      it->lengthKnown && it->elems.size() <= 16 && s->target->kind == Kind::Name) {
    ++loopDepth_;
    bool first = true;
    for (auto &e : it->elems) {
      // Bindings are listed once (for the first element), not once per unrolled iteration.
      bool saved = noRecord_;
      noRecord_ = noRecord_ || !first;
      assign(s->target, e, s->iter->range);
      block(s->body);
      noRecord_ = saved;
      first = false;
    }
    --loopDepth_;
    block(s->orelse);
    return;
  }
  if (ctx_ == BodyContext::Graph && !specializing_ && it->is(TypeKind::Range) && !it->kernelRange) {
    for (auto &bound : it->elems)
      if (bound && bound->intValue && isRuntimeDim(*bound->intValue)) {
        D.report(DiagKind::NotInGraph, s->iter->range, {"a `for` loop over a range known only at run time",
                                                         "graph loops are unrolled: take the bound from a shape or a keyword-only parameter"});
        break;
      }
  }
  TypeRef elem = iterElement(it, s->iter);
  // A loop counter is one value per iteration: an opaque size, so that `x[k0:k0 + BN]` has the
  // extent BN.
  // In a graph function the loop is unrolled, so its counter is a compile-time value (a symbol);
  // elsewhere it is a run-time one.
  if (it->is(TypeKind::Range) && elem->is(TypeKind::Int) && !elem->intValue && s->target->kind == Kind::Name) {
    const std::string &n = static_cast<Name *>(s->target)->id;
    elem = T::integer(ctx_ == BodyContext::Graph ? Dim::symbol(n) : Dim::opaque(n));
  }
  loopBody(s->body, [&] { assign(s->target, elem, s->iter->range); });
  block(s->orelse);
}

void FunctionChecker::checkWhile(While *s) {
  DiagnosticEngine &D = pc_.P.diags;
  if (ctx_ == BodyContext::Graph)
    D.report(DiagKind::NotInGraph, s->range, {"`while`", "loops in graph functions run over compile-time ranges; use `for i in range(n)`"});
  else if (ctx_ == BodyContext::Kernel)
    D.report(DiagKind::NotInKernel, s->range, {"`while`", "kernel loops run over tile.range(start, end, step)"});
  TypeRef t = expr(s->test);
  if (ctx_ == BodyContext::Host) checkCondition(s->test, t, "while");
  loopBody(s->body, [] {});
  block(s->orelse);
}

void FunctionChecker::bind(const std::string &n, const TypeRef &t, SourceRange at) {
  DiagnosticEngine &D = pc_.P.diags;
  if (prepassDepth_ == 0 && !inLambda_) {
    const BuiltinInfo *b = findBuiltin(n);
    if (b && !b->isNamespace && !mod_.isStdlib && record_ && !locals_.count(n) && !(ctx_ == BodyContext::Module && mod_.globals.count(n)))
      D.report(DiagKind::ShadowedBuiltin, at, {n});
  }
  if (ctx_ == BodyContext::Module) {
    auto it = mod_.globals.find(n);
    if (it != mod_.globals.end() && it->second.kind == Symbol::Kind::Constant && it->second.type && it->second.decl != at) {
      D.report(DiagKind::AssignToConstant, at, {n});
      D.note("first assigned here", it->second.decl);
      return;
    }
    if (it != mod_.globals.end() && it->second.kind != Symbol::Kind::Constant) {
      // Functions are collected before the module's statements run: report whichever of the
      // two comes second in the file.
      if (it->second.kind == Symbol::Kind::Function && it->second.decl.begin > at.begin) {
        D.report(DiagKind::Redefinition, it->second.decl, {n});
        D.note("first defined here", at);
      } else {
        D.report(DiagKind::Redefinition, at, {n});
        D.note("first defined here", it->second.decl);
      }
      return;
    }
    Symbol sym;
    sym.kind = Symbol::Kind::Constant;
    sym.type = t;
    sym.decl = at;
    sym.pendingBuiltin = modulePending_;
    mod_.globals[n] = sym;
    record(at, n, t);
    return;
  }
  // An int whose value is not known still has one value from here on: give it an opaque size,
  // so that `x[i:i + BM]` has the extent BM.
  TypeRef bound = t;
  if (t->is(TypeKind::Int) && !t->intValue) bound = T::integer(Dim::opaque(n));
  locals_[n] = {bound, at, true};
  record(at, n, t);
}

void FunctionChecker::assign(Expr *target, const TypeRef &v, SourceRange valueRange) {
  DiagnosticEngine &D = pc_.P.diags;
  switch (target->kind) {
  case Kind::Name: bind(static_cast<Name *>(target)->id, v, target->range); return;
  case Kind::Tuple: case Kind::List: {
    const std::vector<Expr *> &elts = target->kind == Kind::Tuple ? static_cast<Tuple *>(target)->elts : static_cast<List *>(target)->elts;
    size_t starIdx = elts.size();
    for (size_t i = 0; i < elts.size(); ++i) if (elts[i]->kind == Kind::Starred) starIdx = i;
    std::vector<TypeRef> parts;
    if ((v->is(TypeKind::Tuple) || v->is(TypeKind::List)) && v->lengthKnown) {
      size_t n = v->elems.size();
      bool ok = starIdx == elts.size() ? n == elts.size() : n + 1 >= elts.size();
      if (!ok) {
        D.report(DiagKind::UnpackCount, valueRange, {std::to_string(n), std::to_string(elts.size())});
        for (Expr *e : elts) assign(e->kind == Kind::Starred ? static_cast<Starred *>(e)->value : e, T::unknown(), valueRange);
        return;
      }
      for (size_t i = 0, j = 0; i < elts.size(); ++i) {
        if (i == starIdx) {
          size_t take = n - (elts.size() - 1);
          std::vector<TypeRef> rest(v->elems.begin() + j, v->elems.begin() + j + take);
          assign(static_cast<Starred *>(elts[i])->value, T::list(rest), valueRange);
          j += take;
        } else {
          assign(elts[i], v->elems[j++], valueRange);
        }
      }
      return;
    }
    TypeRef elem = T::unknown();
    if (v->is(TypeKind::Tuple) || v->is(TypeKind::List)) elem = v->elem ? v->elem : T::unknown();
    else if (v->is(TypeKind::Tensor) && v->rankKnown && !v->dims.empty()) {
      if (auto c = v->dims[0].constantValue(); c && starIdx == elts.size() && *c != static_cast<int64_t>(elts.size())) {
        D.report(DiagKind::UnpackCount, valueRange, {std::to_string(*c), std::to_string(elts.size())});
      }
      elem = T::tensor(std::vector<Dim>(v->dims.begin() + 1, v->dims.end()), v->dtype, v->policies);
    } else if (!v->is(TypeKind::Unknown)) {
      D.report(DiagKind::UnpackCount, valueRange, {"1", std::to_string(elts.size())});
      D.note(typeStr(v) + " cannot be unpacked");
    }
    for (Expr *e : elts) {
      if (e->kind == Kind::Starred) assign(static_cast<Starred *>(e)->value, T::listOf(elem), valueRange);
      else assign(e, elem, valueRange);
    }
    return;
  }
  case Kind::Subscript: {
    auto *s = static_cast<Subscript *>(target);
    TypeRef base = expr(s->value);
    for (Expr *i : s->indices) if (i->kind != Kind::Slice) expr(i);
    if (base->is(TypeKind::Tensor) && ctx_ == BodyContext::Graph) {
      D.report(DiagKind::NotInGraph, target->range, {"assigning into a tensor", "tensors in graph functions are values; build the new value with where(...) or concat(...)"});
      return;
    }
    if (base->is(TypeKind::View) || (base->is(TypeKind::Tensor) && ctx_ == BodyContext::Kernel)) {
      D.report(DiagKind::NotInKernel, target->range, {"assigning into a tensor", "write a tile with tile.store(X[...], value)"});
      return;
    }
    if (base->is(TypeKind::Dict) && s->indices.size() == 1 && s->value->kind == Kind::Name) {
      // d["k"] = v updates the dict's type in place, so that later reads see v's type.
      TypeRef key = expr(s->indices[0]);
      auto *n = static_cast<Name *>(s->value);
      Local *l = lookupLocal(n->id);
      if (l && key->strValue && base->lengthKnown) {
        auto fields = base->fields;
        bool found = false;
        for (auto &f : fields) if (f.first == *key->strValue) { f.second = v; found = true; }
        if (!found) fields.push_back({*key->strValue, v});
        l->type = T::dict(std::move(fields));
      } else if (l) {
        l->type = T::dictOf(join(base->elem, v));
      }
    }
    if (base->is(TypeKind::Tuple)) D.report(DiagKind::InvalidAssignTarget, target->range, {"an element of a tuple"});
    return;
  }
  case Kind::Attribute:
    expr(static_cast<Attribute *>(target)->value);
    D.report(DiagKind::InvalidAssignTarget, target->range, {"an attribute"});
    return;
  case Kind::Starred: assign(static_cast<Starred *>(target)->value, v, valueRange); return;
  default: return; // the builder reported it
  }
}

// The value of an assignment's right-hand side. A module and a tile.range are not values one
// can store: both are reported here (and the name gets Unknown, so its uses stay quiet).
TypeRef FunctionChecker::assignedValue(Expr *value) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef v = expr(value);
  if (v->is(TypeKind::Module)) {
    std::string shown = value->kind == Kind::Name ? static_cast<Name *>(value)->id : v->module->name;
    D.report(DiagKind::ModuleNotValue, value->range, {shown});
    D.note("use its members, as `" + shown + ".name`");
    return T::unknown();
  }
  if (v->is(TypeKind::Range) && v->kernelRange) {
    D.report(DiagKind::TileRange, value->range);
    return T::unknown();
  }
  return v;
}

// ---- module level ----------------------------------------------------------------------------

// An import of a name that a `def` of this module also defines: one of them is a mistake.
// Functions are collected first, so report whichever comes second in the file.
bool FunctionChecker::redefinesFunction(const std::string &name, SourceRange importRange) {
  auto it = mod_.globals.find(name);
  if (it == mod_.globals.end() || it->second.kind != Symbol::Kind::Function || !it->second.fn ||
      it->second.fn->module != &mod_)
    return false;
  DiagnosticEngine &D = pc_.P.diags;
  if (it->second.decl.begin > importRange.begin) {
    D.report(DiagKind::Redefinition, it->second.decl, {name});
    D.note("first defined here, by the import", importRange);
  } else {
    D.report(DiagKind::Redefinition, importRange, {name});
    D.note("first defined here", it->second.decl);
  }
  return true;
}

void FunctionChecker::checkModuleStmt(Stmt *s) {
  DiagnosticEngine &D = pc_.P.diags;
  modulePending_ = nullptr; // what this statement's constants need
  switch (s->kind) {
  case Kind::FunctionDef: return; // collected before
  case Kind::Import: {
    auto *imp = static_cast<Import *>(s);
    for (auto &a : imp->names) {
      if (a.path.empty()) continue; // a syntax error, already reported
      if (a.path.size() == 1 && a.path[0] == "tessera") {
        Symbol sym;
        sym.kind = Symbol::Kind::Builtin;
        sym.type = tesseraModule();
        sym.decl = a.range;
        mod_.globals[a.asName.empty() ? "tessera" : a.asName] = sym;
        continue;
      }
      ModuleInfo *m = pc_.loadModule(a.path, "", a.range, &mod_);
      if (!m) continue;
      if (redefinesFunction(a.asName.empty() ? a.path[0] : a.asName, a.range)) continue;
      Symbol sym;
      sym.kind = Symbol::Kind::Module;
      sym.decl = a.range;
      sym.imported = true;
      if (!a.asName.empty()) {
        sym.type = T::module(m);
        mod_.globals[a.asName] = sym;
      } else {
        // `import a.b` binds `a`; `a.b` is then found as a member of the package.
        ModuleInfo *top = a.path.size() == 1 ? m : pc_.loadModule({a.path[0]}, "", a.range, &mod_);
        sym.type = T::module(top ? top : m);
        mod_.globals[a.path[0]] = sym;
      }
    }
    return;
  }
  case Kind::ImportFrom: {
    auto *imp = static_cast<ImportFrom *>(s);
    if (imp->module.path.empty()) return; // a syntax error, already reported
    if (imp->module.path.size() == 1 && imp->module.path[0] == "tessera") {
      for (auto &a : imp->names) {
        const BuiltinInfo *b = a.path.empty() ? nullptr : findBuiltin(a.path[0]);
        if (!b) { D.report(DiagKind::NameNotInModule, a.range, {"tessera", a.path.empty() ? "" : a.path[0]}); continue; }
        Symbol sym;
        sym.kind = Symbol::Kind::Builtin;
        sym.type = T::builtin(b);
        sym.decl = a.range;
        mod_.globals[a.asName.empty() ? a.path[0] : a.asName] = sym;
      }
      return;
    }
    ModuleInfo *m = pc_.loadModule(imp->module.path, "", imp->module.range, &mod_);
    if (!m) return;
    if (imp->star) {
      D.report(DiagKind::Unsupported, s->range, {"`from ... import *`"});
      D.note("import the names you use, so that readers can see where they come from");
      return;
    }
    for (auto &a : imp->names) {
      if (a.path.empty()) continue;
      const std::string &n = a.path[0];
      Symbol sym;
      auto it = m->globals.find(n);
      if (it != m->globals.end()) {
        sym = it->second;
      } else {
        // A package's submodule: `from optim import adamw` loads optim/adamw.tsr.
        std::vector<std::string> sub = imp->module.path;
        sub.push_back(n);
        DiagnosticEngine::Suppress quiet(D);
        ModuleInfo *sm = pc_.loadModule(sub, "", a.range, &mod_);
        if (!sm) {
          DiagnosticEngine::Suppress *dummy = nullptr;
          (void)dummy;
        }
        if (sm) {
          sym.kind = Symbol::Kind::Module;
          sym.type = T::module(sm);
        }
      }
      if (!sym.type && sym.kind != Symbol::Kind::Function) {
        D.report(DiagKind::NameNotInModule, a.range, {m->name, n});
        continue;
      }
      if (redefinesFunction(a.asName.empty() ? n : a.asName, a.range)) continue;
      sym.decl = a.range;
      sym.imported = true;
      sym.used = false;
      mod_.globals[a.asName.empty() ? n : a.asName] = sym;
    }
    return;
  }
  case Kind::Assign: {
    auto *a = static_cast<Assign *>(s);
    TypeRef v = assignedValue(a->value);
    for (Expr *t : a->targets) {
      if (t->kind != Kind::Name) {
        D.report(DiagKind::Unsupported, t->range, {"unpacking at module level"});
        continue;
      }
      assign(t, v, a->value->range);
    }
    return;
  }
  case Kind::AnnAssign: case Kind::AugAssign:
    if (s->kind == Kind::AugAssign) {
      auto *a = static_cast<AugAssign *>(s);
      if (auto *n = dyn_cast<Name>(a->target)) { D.report(DiagKind::AssignToConstant, a->target->range, {n->id}); return; }
    }
    stmt(s);
    return;
  case Kind::ExprStmt: {
    auto *e = static_cast<ExprStmt *>(s);
    if (e->expr->kind == Kind::StrLit) return; // a docstring
    D.report(DiagKind::Unsupported, s->range, {"code at module level other than constants, imports and definitions"});
    D.note("put it in `main`, which `tsr run` calls");
    return;
  }
  case Kind::Pass: return;
  case Kind::If: case Kind::For: case Kind::While: case Kind::With: case Kind::Assert:
    D.report(DiagKind::Unsupported, s->range, {"code at module level other than constants, imports and definitions"});
    D.note("put it in `main`, which `tsr run` calls");
    return;
  default: stmt(s); return;
  }
}

// ---- expressions -----------------------------------------------------------------------------

TypeRef FunctionChecker::expr(Expr *e) {
  if (!e) return T::unknown();
  TypeRef t = exprUncached(e);
  if (!t) t = T::unknown();
  if (record_ && prepassDepth_ == 0) pc_.P.exprTypes[e] = t;
  return t;
}

std::string FunctionChecker::describeOperand(Expr *e, const TypeRef &t, bool left) {
  std::string what = left ? "the left operand" : "the right operand";
  if (e->kind == Kind::Name) {
    what = static_cast<Name *>(e)->id;
  } else if (e->range.valid() && pc_.P.sm.has(e->range.file) && e->range.end > e->range.begin && e->range.end - e->range.begin <= 32) {
    // Short operands are shown as written: `p[0:3]` is Tensor[3, f32].
    std::string text = pc_.P.sm.file(e->range.file).text().substr(e->range.begin, e->range.end - e->range.begin);
    if (text.find('\n') == std::string::npos) what = "`" + text + "`";
  }
  return what + " is " + typeStr(t);
}

static SourceRange declOf(FunctionChecker *fc, Expr *e, std::unordered_map<std::string, Local> &locals) {
  if (auto *n = dyn_cast<Name>(e)) {
    auto it = locals.find(n->id);
    if (it != locals.end()) return it->second.decl;
  }
  return {};
}

TypeRef FunctionChecker::exprUncached(Expr *e) {
  DiagnosticEngine &D = pc_.P.diags;
  switch (e->kind) {
  case Kind::Name: return name(static_cast<Name *>(e));
  case Kind::IntLit: return T::integer(Dim::constant(static_cast<IntLit *>(e)->value));
  case Kind::FloatLit: return T::floating(static_cast<FloatLit *>(e)->value);
  case Kind::StrLit: return T::str(static_cast<StrLit *>(e)->value);
  case Kind::FString: {
    auto *f = static_cast<FString *>(e);
    if (ctx_ == BodyContext::Graph || ctx_ == BodyContext::Kernel) {
      if (ctx_ == BodyContext::Graph) D.report(DiagKind::NotInGraph, e->range, {"an f-string", "format values in host code"});
      else D.report(DiagKind::NotInKernel, e->range, {"an f-string", "format values in host code"});
    }
    for (auto &p : f->parts) if (p.expr) expr(p.expr);
    return T::str();
  }
  case Kind::BoolLit: return T::boolean(static_cast<BoolLit *>(e)->value);
  case Kind::NoneLit: return T::none();
  case Kind::EllipsisLit: return T::opaque("...");
  case Kind::ErrorExpr: return T::unknown();
  case Kind::Tuple: {
    std::vector<TypeRef> es;
    bool splat = false;
    for (Expr *x : static_cast<Tuple *>(e)->elts) {
      if (x->kind == Kind::Starred) { expr(static_cast<Starred *>(x)->value); splat = true; continue; }
      es.push_back(expr(x));
    }
    if (splat) { Type t; t.kind = TypeKind::Tuple; t.lengthKnown = false; t.elem = T::unknown(); return std::make_shared<const Type>(t); }
    return T::tuple(std::move(es));
  }
  case Kind::List: {
    std::vector<TypeRef> es;
    bool splat = false;
    for (Expr *x : static_cast<List *>(e)->elts) {
      if (x->kind == Kind::Starred) { expr(static_cast<Starred *>(x)->value); splat = true; continue; }
      es.push_back(expr(x));
    }
    if (ctx_ == BodyContext::Kernel) D.report(DiagKind::NotInKernel, e->range, {"a list", "kernels work on tiles and scalars"});
    if (splat) return T::listOf(T::unknown());
    return T::list(std::move(es));
  }
  case Kind::Set: {
    for (Expr *x : static_cast<Set *>(e)->elts) expr(x);
    return T::opaque("set");
  }
  case Kind::Dict: {
    auto *d = static_cast<Dict *>(e);
    std::vector<std::pair<std::string, TypeRef>> fields;
    bool allStr = true;
    TypeRef vals;
    for (size_t i = 0; i < d->values.size(); ++i) {
      TypeRef v = expr(d->values[i]);
      vals = join(vals, v);
      if (!d->keys[i]) { allStr = false; continue; }
      TypeRef k = expr(d->keys[i]);
      if (k->strValue) {
        bool replaced = false;
        for (auto &f : fields) if (f.first == *k->strValue) { f.second = v; replaced = true; }
        if (!replaced) fields.push_back({*k->strValue, v});
      } else {
        allStr = false;
      }
    }
    if (ctx_ == BodyContext::Kernel) D.report(DiagKind::NotInKernel, e->range, {"a dict", "kernels work on tiles and scalars"});
    if (allStr) return T::dict(std::move(fields));
    return T::dictOf(vals ? vals : T::unknown());
  }
  case Kind::Comprehension: return comprehension(static_cast<Comprehension *>(e));
  case Kind::Unary: return unary(static_cast<Unary *>(e));
  case Kind::Binary: return binary(static_cast<Binary *>(e));
  case Kind::BoolOp: {
    auto *b = static_cast<BoolOp *>(e);
    TypeRef res;
    std::optional<bool> value = b->isAnd ? std::optional<bool>(true) : std::optional<bool>(false);
    // A known false operand of `and` (true of `or`) decides the result whatever follows, as
    // Python's short circuit does: the operands after it are checked but never run.
    bool decided = false;
    for (Expr *v : b->values) {
      TypeRef t = expr(v);
      if (t->is(TypeKind::Tensor) && ctx_ != BodyContext::Host) checkCondition(v, t, b->isAnd ? "and" : "or");
      if (decided) { res = join(res, t); continue; }
      if (t->boolValue && value) {
        if (b->isAnd) value = *value && *t->boolValue; else value = *value || *t->boolValue;
        decided = *value != b->isAnd;
      } else {
        value.reset();
      }
      res = join(res, t);
    }
    if (res && res->is(TypeKind::Bool)) return T::boolean(value);
    return res ? res : T::unknown();
  }
  case Kind::Compare: return compare(static_cast<Compare *>(e));
  case Kind::IfExp: {
    auto *x = static_cast<IfExp *>(e);
    TypeRef t = expr(x->test);
    checkCondition(x->test, t, "if");
    std::optional<bool> known = t->boolValue;
    if (!known && t->is(TypeKind::None)) known = false;
    if (known) {
      // The branch not taken is not compiled; it is still resolved for names.
      TypeRef taken = expr(*known ? x->body : x->orelse);
      { DiagnosticEngine::Suppress quiet(D); expr(*known ? x->orelse : x->body); }
      return taken;
    }
    TypeRef a = expr(x->body), b = expr(x->orelse);
    return join(a, b);
  }
  case Kind::Lambda: {
    auto *l = static_cast<Lambda *>(e);
    for (auto &p : l->params) if (p.defaultValue) expr(p.defaultValue);
    return T::lambda(l);
  }
  case Kind::Call: return call(static_cast<Call *>(e));
  case Kind::Subscript: return subscript(static_cast<Subscript *>(e));
  case Kind::Slice: {
    auto *s = static_cast<Slice *>(e);
    expr(s->lower); expr(s->upper); expr(s->step);
    return T::opaque("slice");
  }
  case Kind::Attribute: return attribute(static_cast<Attribute *>(e));
  case Kind::Starred: expr(static_cast<Starred *>(e)->value); return T::unknown();
  default: return T::unknown();
  }
}

TypeRef FunctionChecker::name(Name *n) {
  DiagnosticEngine &D = pc_.P.diags;
  const std::string &id = n->id;
  for (FunctionChecker *fc = this; fc; fc = fc->parent_) {
    if (Local *l = fc->lookupLocal(id)) {
      if (record_) pc_.P.definitions[n] = l->decl;
      return l->type;
    }
    if (fc->assignedNames_.count(id) && !fc->inLambda_ && fc == this) {
      // Assigned later in this function: a use before the first assignment.
      D.report(DiagKind::UndefinedName, n->range, {id});
      D.note("`" + id + "` is assigned later in this function, so it names that local here");
      locals_[id] = {T::unknown(), n->range, true};
      return T::unknown();
    }
    auto sv = fc->symbolValues_.find(id);
    if (sv != fc->symbolValues_.end()) return sv->second;
  }
  auto g = mod_.globals.find(id);
  if (g != mod_.globals.end()) {
    g->second.used = true;
    if (record_) pc_.P.definitions[n] = g->second.decl;
    if (g->second.kind == Symbol::Kind::Function) return T::function(g->second.fn);
    if (g->second.pendingBuiltin && refusedModuleConstant(id, *g->second.pendingBuiltin, n->range)) return T::unknown();
    return g->second.type ? g->second.type : T::unknown();
  }
  if (auto d = dtypeFromName(id)) return T::dtypeVal(*d);
  if (id == "INF") return T::floating(INFINITY);
  if (id == "NAN") return T::floating(NAN);
  if (const BuiltinInfo *b = findBuiltin(id)) return b->isValue ? builtinValue(*b, n->range) : T::builtin(b);
  if (id == "Tensor") return T::opaque("Tensor");
  D.report(DiagKind::UndefinedName, n->range, {id});
  // One report per name and function: later uses resolve to Unknown silently.
  locals_[id] = {T::unknown(), n->range, true};
  return T::unknown();
}

TypeRef FunctionChecker::policyType(Binary *b, const TypeRef &lhs) {
  DiagnosticEngine &D = pc_.P.diags;
  Policies p = lhs->policies;
  Expr *rhs = b->rhs;
  // Errors about a policy point at it as written, `@` included.
  SourceRange prange = b->opRange.valid() ? b->opRange.to(rhs->range) : rhs->range;
  std::string pname;
  std::vector<Expr *> args;
  if (auto *n = dyn_cast<Name>(rhs)) pname = n->id;
  else if (auto *c = dyn_cast<Call>(rhs); c && c->func->kind == Kind::Name) {
    pname = static_cast<Name *>(c->func)->id;
    for (auto &a : c->args) args.push_back(a.value);
  } else {
    D.report(DiagKind::InvalidPolicy, prange, {"expected a policy such as @accum(f32) after the dtype"});
    return lhs;
  }
  auto dup = [&](bool present) {
    if (present) D.report(DiagKind::DuplicatePolicy, prange, {pname});
    return present;
  };
  auto fits = [&](std::optional<std::string> why) {
    if (why) D.report(DiagKind::InvalidPolicy, prange, {*why});
    return !why;
  };
  if (pname == "accum") {
    if (args.size() != 1) { D.report(DiagKind::InvalidPolicy, prange, {"@accum takes one dtype, as in @accum(f32)"}); return lhs; }
    TypeRef a = expr(args[0]);
    if (!a->is(TypeKind::DTypeVal)) { D.report(DiagKind::InvalidPolicy, args[0]->range, {"@accum takes a dtype, not " + typeStr(a)}); return lhs; }
    if (dup(p.accum.has_value())) return lhs;
    if (fits(checkAccumPolicy(lhs->dtype, a->dtype))) p.accum = a->dtype;
  } else if (pname == "loss_scale") {
    if (args.size() != 1) { D.report(DiagKind::InvalidPolicy, prange, {"@loss_scale takes one number, as in @loss_scale(1024.0)"}); return lhs; }
    TypeRef a = expr(args[0]);
    std::optional<double> v = a->floatValue;
    if (!v && a->intValue && a->intValue->constantValue()) v = static_cast<double>(*a->intValue->constantValue());
    if (!v) { D.report(DiagKind::InvalidPolicy, args[0]->range, {"@loss_scale takes a constant number"}); return lhs; }
    if (dup(p.lossScale.has_value())) return lhs;
    if (fits(checkLossScalePolicy(lhs->dtype, *v))) p.lossScale = v;
  } else if (pname == "stochastic_round") {
    if (dup(p.stochasticRound)) return lhs;
    if (fits(checkStochasticRoundPolicy(lhs->dtype))) p.stochasticRound = true;
  } else if (pname == "saturate") {
    if (dup(p.saturate)) return lhs;
    if (fits(checkSaturatePolicy(lhs->dtype))) p.saturate = true;
  } else {
    D.report(DiagKind::UnknownPolicy, prange, {pname});
    return lhs;
  }
  return T::dtypeVal(lhs->dtype, p);
}

static ElementwiseKind kindOf(BinOp op) {
  switch (op) {
  case BinOp::Div: return ElementwiseKind::TrueDivide;
  case BinOp::LShift: case BinOp::RShift: case BinOp::BitAnd: case BinOp::BitOr: case BinOp::BitXor: return ElementwiseKind::Bitwise;
  default: return ElementwiseKind::Arithmetic;
  }
}

TypeRef FunctionChecker::binary(Binary *b) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef l = expr(b->lhs);
  if (b->op == BinOp::MatMul && l->is(TypeKind::DTypeVal)) return policyType(b, l);
  TypeRef r = expr(b->rhs);
  Reporter rep{D, b->range, {}};
  auto withNotes = [&]() {
    rep.operandNotes.push_back({describeOperand(b->lhs, l, true), declOf(this, b->lhs, locals_)});
    rep.operandNotes.push_back({describeOperand(b->rhs, r, false), declOf(this, b->rhs, locals_)});
  };
  if (l->is(TypeKind::Unknown) || r->is(TypeKind::Unknown)) return T::unknown();
  if (b->op == BinOp::MatMul) {
    withNotes();
    return matmul(l, r, rep);
  }
  // Sequences and strings.
  auto seq = [](const TypeRef &t) { return t->is(TypeKind::Tuple) || t->is(TypeKind::List); };
  if (b->op == BinOp::Add && seq(l) && seq(r) && l->kind == r->kind) {
    if (l->lengthKnown && r->lengthKnown) {
      std::vector<TypeRef> es = l->elems;
      es.insert(es.end(), r->elems.begin(), r->elems.end());
      return l->is(TypeKind::Tuple) ? T::tuple(es) : T::list(es);
    }
    return join(l, r);
  }
  if (b->op == BinOp::Mul && seq(l) && r->is(TypeKind::Int)) {
    if (l->lengthKnown && r->intValue && r->intValue->constantValue() && *r->intValue->constantValue() >= 0 && *r->intValue->constantValue() <= 1024) {
      std::vector<TypeRef> es;
      for (int64_t i = 0; i < *r->intValue->constantValue(); ++i) es.insert(es.end(), l->elems.begin(), l->elems.end());
      return l->is(TypeKind::Tuple) ? T::tuple(es) : T::list(es);
    }
    return join(l, l);
  }
  if (l->is(TypeKind::Str) || r->is(TypeKind::Str)) {
    if (b->op == BinOp::Add && l->is(TypeKind::Str) && r->is(TypeKind::Str)) {
      if (l->strValue && r->strValue) return T::str(*l->strValue + *r->strValue);
      return T::str();
    }
    if ((b->op == BinOp::Mul && (l->is(TypeKind::Int) || r->is(TypeKind::Int))) || b->op == BinOp::Mod) return T::str();
  }
  if (l->is(TypeKind::View) || r->is(TypeKind::View)) {
    D.report(DiagKind::OperandTypes, b->range, {std::string(spelling(b->op)), typeStr(l), typeStr(r)});
    D.note("a view is a place in memory: read it with tile.load(...) first");
    return T::unknown();
  }
  withNotes();
  return elementwise(spelling(b->op), kindOf(b->op), l, r, rep);
}

TypeRef FunctionChecker::unary(Unary *u) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef t = expr(u->operand);
  if (t->is(TypeKind::Unknown)) return t;
  if (u->op == UnaryOp::Not) {
    if (t->isTensorLike() && ctx_ != BodyContext::Host) {
      checkCondition(u->operand, t, "not");
      return T::boolean();
    }
    if (t->boolValue) return T::boolean(!*t->boolValue);
    if (t->is(TypeKind::None)) return T::boolean(true);
    return T::boolean();
  }
  Reporter r{D, u->range, {}};
  if (t->isPyNumber()) {
    if (u->op == UnaryOp::Neg) {
      if (t->intValue) return T::integer(Dim::constant(0) - *t->intValue);
      if (t->floatValue) return T::floating(-*t->floatValue);
    }
    if (u->op == UnaryOp::Invert && t->is(TypeKind::Float)) {
      D.report(DiagKind::OperandType, u->range, {"~", "float"});
      return T::unknown();
    }
    return t->is(TypeKind::Bool) ? T::integer() : (t->is(TypeKind::Int) ? T::integer() : T::floating());
  }
  if (!t->isTensorLike()) {
    D.report(DiagKind::OperandType, u->range, {std::string(spelling(u->op)), typeStr(t)});
    return T::unknown();
  }
  if (u->op == UnaryOp::Invert && isFloat(t->dtype)) {
    D.report(DiagKind::IntegerOnly, u->range, {"operator `~`", std::string(dtypeName(t->dtype))});
    return T::unknown();
  }
  return unaryElementwise(spelling(u->op), t, r, false);
}

// Sizes: `a is b` holds when both are the same size expression (the same symbol, or equal
// constants), and for tuples of sizes when they have one length and the same size at each axis.
// It is known at compile time; equal values of differently named symbols are not the same size
// (language.md, "Sizes"). nullopt when a or b is not a size or a tuple of them.
static std::optional<bool> sameSizes(const TypeRef &a, const TypeRef &b) {
  if (a->intValue && b->intValue) return *a->intValue == *b->intValue;
  if (!a->is(TypeKind::Tuple) || !b->is(TypeKind::Tuple) || !a->lengthKnown || !b->lengthKnown) return std::nullopt;
  bool same = a->elems.size() == b->elems.size();
  for (size_t i = 0; i < a->elems.size(); ++i) {
    if (!a->elems[i]->intValue) return std::nullopt;
    if (i < b->elems.size()) {
      if (!b->elems[i]->intValue) return std::nullopt;
      same = same && *a->elems[i]->intValue == *b->elems[i]->intValue;
    }
  }
  return same;
}

TypeRef FunctionChecker::compare(Compare *c) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef left = expr(c->left);
  TypeRef result;
  std::optional<bool> value = true;
  for (size_t i = 0; i < c->ops.size(); ++i) {
    TypeRef right = expr(c->comparators[i]);
    CmpOp op = c->ops[i];
    TypeRef r;
    if (op == CmpOp::Is || op == CmpOp::IsNot || ((op == CmpOp::Eq || op == CmpOp::Ne) && (left->is(TypeKind::None) || right->is(TypeKind::None)))) {
      // `x is None` and `x != None` are decided by the types: a value is None or it is not.
      std::optional<bool> same;
      if (auto s = sameSizes(left, right)) same = s;
      else if (left->is(TypeKind::None) && right->is(TypeKind::None)) same = true;
      else if ((left->is(TypeKind::None) && !right->is(TypeKind::Unknown)) || (right->is(TypeKind::None) && !left->is(TypeKind::Unknown))) same = false;
      bool negate = op == CmpOp::IsNot || op == CmpOp::Ne;
      r = T::boolean(same ? std::optional<bool>(*same != negate) : std::nullopt);
    } else if (op == CmpOp::In || op == CmpOp::NotIn) {
      std::optional<bool> v;
      if (right->is(TypeKind::Dict) && right->lengthKnown && left->strValue) {
        bool found = false;
        for (auto &f : right->fields) found |= f.first == *left->strValue;
        v = (op == CmpOp::In) == found;
      }
      r = T::boolean(v);
    } else if (left->is(TypeKind::Str) || right->is(TypeKind::Str) || left->is(TypeKind::DTypeVal) || right->is(TypeKind::DTypeVal)) {
      std::optional<bool> v;
      if (left->strValue && right->strValue) v = *left->strValue == *right->strValue;
      if (left->is(TypeKind::DTypeVal) && right->is(TypeKind::DTypeVal)) v = left->dtype == right->dtype;
      if (v && op == CmpOp::Ne) v = !*v;
      if (op != CmpOp::Eq && op != CmpOp::Ne) v.reset();
      r = T::boolean(v);
    } else if (left->is(TypeKind::Tuple) && right->is(TypeKind::Tuple)) {
      r = T::boolean();
    } else {
      Reporter rep{D, c->range, {}};
      rep.operandNotes.push_back({describeOperand(i == 0 ? c->left : c->comparators[i - 1], left, true), {}});
      rep.operandNotes.push_back({describeOperand(c->comparators[i], right, false), {}});
      r = elementwise(spelling(op), ElementwiseKind::Comparison, left, right, rep);
    }
    if (r->boolValue && value) value = *value && *r->boolValue; else value.reset();
    result = result ? (result->is(TypeKind::Bool) && r->is(TypeKind::Bool) ? T::boolean(value) : join(result, r)) : r;
    left = right;
  }
  return result ? result : T::unknown();
}

TypeRef FunctionChecker::comprehension(Comprehension *c) {
  DiagnosticEngine &D = pc_.P.diags;
  if (ctx_ == BodyContext::Kernel) D.report(DiagKind::NotInKernel, c->range, {"a comprehension", "kernels work on tiles and scalars"});
  auto saved = locals_;
  for (auto &g : c->generators) {
    TypeRef it = expr(g.iter);
    TypeRef elem = iterElement(it, g.iter);
    ++prepassDepth_; // comprehension variables are not bindings of the function
    assign(g.target, elem, g.iter->range);
    --prepassDepth_;
    for (Expr *cond : g.ifs) expr(cond);
  }
  TypeRef elt = expr(c->elt);
  TypeRef val = c->value ? expr(c->value) : nullptr;
  locals_ = saved;
  switch (c->form) {
  case Comprehension::Form::Dict: return T::dictOf(val ? val : T::unknown());
  case Comprehension::Form::Set: return T::opaque("set");
  default: return T::listOf(elt);
  }
}

} // namespace tsr::sema
