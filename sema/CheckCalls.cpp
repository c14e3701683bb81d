// Calls, subscripts and attributes: binding arguments to parameters and symbols, kernel launches,
// builtins, autodiff transforms and lambdas.
#include "sema/Checker.h"
#include "sema/Decorators.h"

namespace tsr::sema {

using namespace ast;

static unsigned contextBit(BodyContext c) {
  switch (c) {
  case BodyContext::Graph: return InGraph;
  case BodyContext::Kernel: return InKernel;
  default: return InHost;
  }
}

// Replaces the callee's symbols by what a call bound them to, in every tensor of a type.
static TypeRef substitute(const TypeRef &t, const std::map<std::string, Dim> &env) {
  if (!t || env.empty()) return t;
  switch (t->kind) {
  case TypeKind::Tensor: case TypeKind::Tile: case TypeKind::KVCache: {
    std::vector<Dim> dims;
    for (const Dim &d : t->dims) dims.push_back(d.substitute(env));
    return T::withDims(t, std::move(dims));
  }
  case TypeKind::Int:
    if (t->intValue) return T::integer(t->intValue->substitute(env));
    return t;
  case TypeKind::Tuple: case TypeKind::List: {
    Type c = *t;
    for (auto &e : c.elems) e = substitute(e, env);
    if (c.elem) c.elem = substitute(c.elem, env);
    return std::make_shared<const Type>(std::move(c));
  }
  case TypeKind::Dict: {
    Type c = *t;
    for (auto &f : c.fields) f.second = substitute(f.second, env);
    if (c.elem) c.elem = substitute(c.elem, env);
    return std::make_shared<const Type>(std::move(c));
  }
  default: return t;
  }
}

// ---- subscripts -------------------------------------------------------------------------------

TypeRef FunctionChecker::subscript(Subscript *s) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef base = expr(s->value);
  auto indexTuple = [&]() -> TypeRef {
    if (s->indices.size() == 1 && !s->trailingComma) return expr(s->indices[0]);
    std::vector<TypeRef> es;
    for (Expr *i : s->indices) es.push_back(expr(i));
    return T::tuple(es);
  };
  switch (base->kind) {
  case TypeKind::Unknown: case TypeKind::Opaque:
    for (Expr *i : s->indices) expr(i);
    return T::unknown();
  case TypeKind::Function: {
    TypeRef grid = indexTuple();
    if (!base->fn || base->fn->kind != FunctionKind::Kernel || base->transform != Transform::None || base->launchGrid) {
      D.report(DiagKind::LaunchNonKernel, s->value->range, {base->fn ? base->fn->name : typeStr(base)});
      return T::unknown();
    }
    Type launched = *base;
    launched.launchGrid = grid;
    return std::make_shared<const Type>(std::move(launched));
  }
  case TypeKind::Builtin:
    for (Expr *i : s->indices) expr(i);
    D.report(DiagKind::LaunchNonKernel, s->value->range, {base->builtin ? base->builtin->name : "builtin"});
    return T::unknown();
  case TypeKind::Tensor: {
    // Inside a kernel, a slice of a tensor parameter is a view: a place to load from or store to.
    bool view = ctx_ == BodyContext::Kernel;
    return indexTensor(s, base, view);
  }
  case TypeKind::Tile: case TypeKind::View: return indexTensor(s, base, base->is(TypeKind::View));
  case TypeKind::Tuple: case TypeKind::List: case TypeKind::Str: {
    TypeRef idx = indexTuple();
    if (base->is(TypeKind::Str)) return T::str();
    if (s->indices.size() == 1 && s->indices[0]->kind == Kind::Slice) {
      auto *sl = static_cast<Slice *>(s->indices[0]);
      auto cst = [&](Expr *e) -> std::optional<int64_t> {
        if (!e) return std::nullopt;
        TypeRef t = expr(e);
        return t->intValue ? t->intValue->constantValue() : std::nullopt;
      };
      if (base->lengthKnown && !sl->step) {
        int64_t n = static_cast<int64_t>(base->elems.size());
        auto lo = cst(sl->lower), hi = cst(sl->upper);
        if ((!sl->lower || lo) && (!sl->upper || hi)) {
          int64_t a = lo.value_or(0), b = hi.value_or(n);
          if (a < 0) a = std::max<int64_t>(0, a + n);
          if (b < 0) b = std::max<int64_t>(0, b + n);
          a = std::min(a, n);
          b = std::min(b, n);
          std::vector<TypeRef> es;
          for (int64_t i = a; i < b; ++i) es.push_back(base->elems[static_cast<size_t>(i)]);
          return base->is(TypeKind::Tuple) ? T::tuple(es) : T::list(es);
        }
      }
      return join(base, base);
    }
    if (idx->is(TypeKind::Int)) {
      if (!base->lengthKnown) return base->elem ? base->elem : T::unknown();
      auto c = idx->intValue ? idx->intValue->constantValue() : std::nullopt;
      if (!c) {
        TypeRef e;
        for (auto &x : base->elems) e = join(e, x);
        return e ? e : T::unknown();
      }
      int64_t n = static_cast<int64_t>(base->elems.size());
      int64_t i = *c < 0 ? *c + n : *c;
      if (i < 0 || i >= n) {
        D.report(DiagKind::IndexOutOfRange, s->indices[0]->range, {std::to_string(*c), typeStr(base)});
        return T::unknown();
      }
      return base->elems[static_cast<size_t>(i)];
    }
    if (!idx->is(TypeKind::Unknown))
      D.report(DiagKind::ArgKind, s->indices[0]->range, {"indexing", "an int", "the index", typeStr(idx)});
    return T::unknown();
  }
  case TypeKind::Dict: {
    TypeRef idx = indexTuple();
    if (idx->strValue && base->lengthKnown) {
      for (auto &f : base->fields) if (f.first == *idx->strValue) return f.second;
      D.report(DiagKind::KeyNotInDict, s->indices[0]->range, {"\"" + *idx->strValue + "\""});
      std::string keys;
      for (auto &f : base->fields) keys += (keys.empty() ? "" : ", ") + ("\"" + f.first + "\"");
      if (!keys.empty()) D.note("its keys are " + keys);
      return T::unknown();
    }
    if (!base->lengthKnown) return base->elem ? base->elem : T::unknown();
    TypeRef e;
    for (auto &f : base->fields) e = join(e, f.second);
    return e ? e : T::unknown();
  }
  default:
    for (Expr *i : s->indices) expr(i);
    D.report(DiagKind::NotSubscriptable, s->value->range, {typeStr(base)});
    return T::unknown();
  }
}

TypeRef FunctionChecker::indexTensor(Subscript *s, const TypeRef &base, bool asView) {
  DiagnosticEngine &D = pc_.P.diags;
  std::string root = base->is(TypeKind::View) ? base->name : (s->value->kind == Kind::Name ? static_cast<Name *>(s->value)->id : "");
  bool strided = base->is(TypeKind::View) && base->strided;
  auto finish = [&](std::vector<Dim> dims) -> TypeRef {
    if (asView) {
      Type v = *T::view(std::move(dims), base->dtype, root);
      v.strided = strided;
      return std::make_shared<const Type>(std::move(v));
    }
    if (base->is(TypeKind::Tile)) return T::tile(std::move(dims), base->dtype);
    return T::tensor(std::move(dims), base->dtype, base->policies);
  };
  size_t consuming = 0;
  bool ellipsis = false;
  for (Expr *i : s->indices) {
    if (i->kind == Kind::NoneLit) continue;
    if (i->kind == Kind::EllipsisLit) { ellipsis = true; continue; }
    ++consuming;
  }
  if (!base->rankKnown) {
    for (Expr *i : s->indices) if (i->kind != Kind::Slice) expr(i); else expr(i);
    return T::tensorUnknownRank(base->dtype);
  }
  const std::vector<Dim> &dims = base->dims;
  if (consuming > dims.size()) {
    D.report(DiagKind::TooManyIndices, s->range, {std::to_string(dims.size())});
    for (Expr *i : s->indices) expr(i);
    return T::unknown();
  }
  std::vector<Dim> out;
  size_t pos = 0;
  auto intOf = [&](Expr *e, const char *which) -> std::optional<Dim> {
    if (!e) return std::nullopt;
    TypeRef t = expr(e);
    if (t->is(TypeKind::Int) || t->is(TypeKind::Bool)) return t->intValue ? *t->intValue : Dim::unknown();
    if (t->isScalarTensor() && isInteger(t->dtype)) return Dim::unknown();
    if (t->is(TypeKind::Unknown) && e->kind == Kind::Name) return Dim::opaque(static_cast<Name *>(e)->id);
    if (!t->is(TypeKind::Unknown) && !t->is(TypeKind::None))
      D.report(DiagKind::ArgKind, e->range, {"slice", "an int", which, typeStr(t)});
    return t->is(TypeKind::None) ? std::nullopt : std::optional<Dim>(Dim::unknown());
  };
  for (Expr *i : s->indices) {
    if (i->kind == Kind::NoneLit) { out.push_back(Dim::constant(1)); continue; }
    if (i->kind == Kind::EllipsisLit) {
      size_t keep = dims.size() - consuming;
      for (size_t k = 0; k < keep; ++k) out.push_back(dims[pos++]);
      continue;
    }
    if (i->kind == Kind::Slice) {
      auto *sl = static_cast<Slice *>(i);
      std::optional<Dim> lo = intOf(sl->lower, "start"), hi = intOf(sl->upper, "stop");
      std::optional<int64_t> step;
      if (sl->step) {
        auto st = intOf(sl->step, "step");
        step = st ? st->constantValue() : std::nullopt;
        if (!step) step = 1;
        if (*step == 0) { D.report(DiagKind::ArgKind, sl->step->range, {"slice", "a nonzero int", "step", "0"}); step = 1; }
        if (asView && *step != 1) strided = true;
      }
      out.push_back(sliceExtent(dims[pos], lo, hi, step));
      ++pos;
      continue;
    }
    TypeRef t = expr(i);
    if (t->is(TypeKind::Int) || t->is(TypeKind::Bool) || (t->isScalarTensor() && isInteger(t->dtype))) {
      if (t->intValue) {
        auto c = t->intValue->constantValue();
        auto n = dims[pos].constantValue();
        if (c && n && (*c >= *n || *c < -*n)) {
          D.report(DiagKind::IndexOutOfRange, i->range, {std::to_string(*c), "an axis of size " + std::to_string(*n)});
        }
      }
      ++pos;
      continue;
    }
    if (t->is(TypeKind::Tensor) && !asView) {
      // Integer-array (gather) and boolean-mask indexing, as NumPy's advanced indexing.
      if (t->dtype == DType::Bool) out.push_back(Dim::unknown());
      else if (t->rankKnown) out.insert(out.end(), t->dims.begin(), t->dims.end());
      else return T::tensorUnknownRank(base->dtype);
      ++pos;
      continue;
    }
    if (t->is(TypeKind::Unknown)) { out.push_back(Dim::unknown()); ++pos; continue; }
    D.report(DiagKind::ArgKind, i->range, {"indexing", "an int, a slice, None or ...", "the index", typeStr(t)});
    return T::unknown();
  }
  (void)ellipsis;
  while (pos < dims.size()) out.push_back(dims[pos++]);
  return finish(std::move(out));
}

// ---- attributes -------------------------------------------------------------------------------

TypeRef FunctionChecker::attribute(Attribute *a) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef base = expr(a->value);
  const std::string &at = a->attr;
  auto noSuch = [&]() {
    D.report(DiagKind::NoSuchAttribute, a->attrRange, {typeStr(base), at});
    return T::unknown();
  };
  switch (base->kind) {
  case TypeKind::Unknown: return T::unknown();
  case TypeKind::Tensor: case TypeKind::Tile: case TypeKind::View: {
    if (at == "shape") {
      if (!base->rankKnown) return T::listOf(T::integer());
      std::vector<TypeRef> es;
      for (const Dim &d : base->dims) es.push_back(T::integer(d));
      return T::tuple(es);
    }
    if (at == "dtype") return T::dtypeVal(base->dtype, base->policies);
    if (at == "ndim") return base->rankKnown ? T::integer(Dim::constant(static_cast<int64_t>(base->dims.size()))) : T::integer();
    if (at == "T") {
      if (!base->rankKnown) return base;
      if (base->dims.size() < 2) {
        D.report(DiagKind::RankMismatch, a->range, {"`.T`", "at least 2", std::to_string(base->dims.size())});
        return T::unknown();
      }
      std::vector<Dim> d = base->dims;
      std::swap(d[d.size() - 1], d[d.size() - 2]);
      return T::withDims(base, d);
    }
    if (const BuiltinInfo *m = findMethod(TypeKind::Tensor, at)) return T::builtin(m, base);
    return noSuch();
  }
  case TypeKind::Module: {
    const ModuleInfo *m = base->module;
    auto it = m->globals.find(at);
    if (it != m->globals.end()) {
      if (record_) pc_.P.definitions[a] = it->second.decl;
      if (it->second.kind == Symbol::Kind::Function) return T::function(it->second.fn);
      return it->second.type ? it->second.type : T::unknown();
    }
    if (!m->ast) {
      // A package: its submodules load on first use.
      std::vector<std::string> dotted;
      std::string n = m->name;
      size_t p = 0;
      while ((p = n.find('.')) != std::string::npos) { dotted.push_back(n.substr(0, p)); n = n.substr(p + 1); }
      dotted.push_back(n);
      dotted.push_back(at);
      DiagnosticEngine::Suppress quiet(D);
      if (ModuleInfo *sub = pc_.loadModule(dotted, "", a->range, &mod_)) return T::module(sub);
    }
    D.report(DiagKind::NameNotInModule, a->attrRange, {m->name, at});
    return T::unknown();
  }
  case TypeKind::Builtin: {
    if (base->builtin && base->builtin->isNamespace) {
      if (const BuiltinInfo *b = findBuiltin(base->builtin->name + "." + at)) return T::builtin(b);
      // A namespace of kernel operations (tile) named outside a kernel.
      if (!(base->builtin->contexts & InHost) && ctx_ != BodyContext::Kernel) {
        D.report(DiagKind::TileOutsideKernel, a->range, {base->builtin->name + "." + at});
        return T::unknown();
      }
      return noSuch();
    }
    // kernel.autotune and the like appear only in decorators.
    return noSuch();
  }
  case TypeKind::Opaque:
    if (isTesseraModule(base)) {
      if (auto d = dtypeFromName(at)) return T::dtypeVal(*d);
      if (const BuiltinInfo *b = findBuiltin(at)) return T::builtin(b);
      return noSuch();
    }
    return T::unknown();
  case TypeKind::KVCache: {
    // A cache's run-time length, the positions appended so far (past max_len in a rolling
    // window), its storage [batch, heads, max_len, head_dim] (in ring order in a rolling window:
    // position p at slot p % max_len) and its compile-time configuration (spec 14).
    if (at == "length" || at == "appended") return T::scalar(DType::I32);
    if (at == "k" || at == "v") return T::tensor(base->dims, base->dtype, base->policies);
    if (at == "max_len") return T::integer(base->dims[2]);
    if (at == "rolling_window") return T::boolean(base->rolling);
    if (const BuiltinInfo *m = findMethod(base->kind, at)) return T::builtin(m, base);
    return noSuch();
  }
  case TypeKind::Config: case TypeKind::Schedule: {
    for (auto &[k, v] : base->knobs) if (k == at) return T::integer(v);
    if (const BuiltinInfo *m = findMethod(base->kind, at)) return T::builtin(m, base);
    return noSuch();
  }
  default:
    if (const BuiltinInfo *m = findMethod(base->kind, at)) return T::builtin(m, base);
    return noSuch();
  }
}

// ---- calls -----------------------------------------------------------------------------------

TypeRef FunctionChecker::call(Call *c) {
  if (TypeRef model = onnxCall(c)) return model; // onnx.load("m.onnx"): CheckOnnx.cpp
  TypeRef callee = expr(c->func);
  Args args;
  for (const Arg &a : c->args) {
    TypeRef t = expr(a.value);
    if (t->is(TypeKind::Module)) {
      pc_.P.diags.report(DiagKind::ModuleNotValue, a.value->range, {t->module->name});
      t = T::unknown();
    }
    switch (a.kind) {
    case ArgKind::Positional: args.positional.push_back({t, a.value->range, a.value, ""}); break;
    case ArgKind::Keyword: {
      ArgInfo ai{t, a.value->range, a.value, a.name};
      ai.keywordRange = {a.range.file, a.range.begin, a.value->range.begin > a.range.begin ? a.value->range.begin - 1 : a.range.end};
      args.keywords.push_back(ai);
      break;
    }
    default: args.hasSplat = true; break;
    }
  }
  // A launch's grid is the subscript of the kernel: errors about the grid point at it.
  gridRange_ = {};
  if (auto *sub = dyn_cast<Subscript>(c->func); sub && !sub->indices.empty())
    gridRange_ = sub->indices.front()->range.to(sub->indices.back()->range);
  SourceRange gridRange = gridRange_;
  TypeRef r = callValue(callee, args, c->range, c->func->range);
  gridRange_ = gridRange;
  // A method that grows a local list (its entry says how: xs.append(v), xs.extend(vs)): the
  // list's length is no longer known, and its elements may now be v's type too.
  const BuiltinInfo *grower = callee->is(TypeKind::Builtin) && callee->builtin && callee->builtin->grows != BuiltinInfo::Grows::No
                                  ? callee->builtin : nullptr;
  if (auto *at = dyn_cast<Attribute>(c->func); grower && at && at->value->kind == Kind::Name) {
    if (Local *l = lookupLocal(static_cast<Name *>(at->value)->id); l && l->type->is(TypeKind::List)) {
      TypeRef elem = l->type->elem;
      for (auto &e : l->type->elems) elem = join(elem, e);
      if (!args.positional.empty()) {
        const TypeRef &v = args.positional.back().type;
        if (grower->grows == BuiltinInfo::Grows::Elements)
          elem = join(elem, (v->is(TypeKind::List) || v->is(TypeKind::Tuple)) ? (v->elem ? v->elem : (v->elems.empty() ? nullptr : v->elems[0])) : T::unknown());
        else elem = join(elem, v);
      }
      l->type = T::listOf(elem ? elem : T::unknown());
    }
  }
  return r;
}

TypeRef FunctionChecker::callValue(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange) {
  DiagnosticEngine &D = pc_.P.diags;
  switch (callee->kind) {
  case TypeKind::Unknown: return T::unknown();
  case TypeKind::Builtin: return callBuiltin(callee, args, at, calleeRange);
  case TypeKind::Function:
    if (callee->transform != Transform::None) return callTransform(callee, args, at, calleeRange);
    if (!callee->fn) return T::unknown();
    return callFunction(callee->fn, args, at, calleeRange, callee->launchGrid);
  case TypeKind::Lambda: {
    std::vector<TypeRef> ts;
    for (auto &a : args.positional) ts.push_back(a.type);
    return callLambda(callee->lambda, ts, at);
  }
  case TypeKind::DTypeVal:
    // A dtype whose name is also a builtin's (`bool`): calling it calls the builtin.
    if (const BuiltinInfo *b = callee->policies.empty() ? findBuiltin(dtypeName(callee->dtype)) : nullptr)
      return callBuiltin(T::builtin(b), args, at, calleeRange);
    D.report(DiagKind::NotCallable, calleeRange, {typeStr(callee)});
    return T::unknown();
  case TypeKind::Opaque:
    if (callee->name == "Tensor") return T::unknown();
    [[fallthrough]];
  default:
    D.report(DiagKind::NotCallable, calleeRange, {typeStr(callee)});
    return T::unknown();
  }
}

TypeRef FunctionChecker::callLambda(const Lambda *l, const std::vector<TypeRef> &args, SourceRange at) {
  DiagnosticEngine &D = pc_.P.diags;
  FunctionChecker child(pc_, mod_, fn_, ctx_, record_);
  child.parent_ = this;
  child.inLambda_ = true;
  size_t npos = 0;
  for (auto &p : l->params) npos += p.kind == ParamKind::Positional;
  if (args.size() > npos) D.report(DiagKind::TooManyArgs, at, {"lambda", std::to_string(npos), std::to_string(args.size())});
  size_t i = 0;
  for (auto &p : l->params) {
    if (p.kind != ParamKind::Positional) continue;
    if (i < args.size()) child.locals_[p.name] = {args[i], p.nameRange, true};
    else if (p.defaultValue) child.locals_[p.name] = {expr(p.defaultValue), p.nameRange, true};
    else {
      D.report(DiagKind::MissingArg, at, {"lambda", p.name});
      child.locals_[p.name] = {T::unknown(), p.nameRange, true};
    }
    ++i;
  }
  return child.expr(l->body);
}

bool FunctionChecker::allowedHere(const FunctionInfo *callee, SourceRange at) {
  DiagnosticEngine &D = pc_.P.diags;
  if (callee->kind == FunctionKind::Inline) return true;
  if (ctx_ == BodyContext::Graph && callee->kind == FunctionKind::Host) {
    D.report(DiagKind::NotInGraph, at, {"calling the host function `" + callee->name + "`", "graph functions call graph functions, kernels and @inline helpers; mark it @jit or @inline"});
    return false;
  }
  if (ctx_ == BodyContext::Kernel && callee->kind != FunctionKind::Inline) {
    D.report(DiagKind::NotInKernel, at, {"calling the " + std::string(functionKindWord(callee->kind)) + " `" + callee->name + "`", "kernels call @inline helpers and tile operations"});
    return false;
  }
  if (ctx_ == BodyContext::Module && callee->kind != FunctionKind::Inline) {
    D.report(DiagKind::Unsupported, at, {"calling a function at module level"});
    D.note("module-level constants are computed at compile time; call functions from `main`");
    return false;
  }
  return true;
}

// A builtin whose entry is pending in this context (BuiltinInfo::pending) is refused here, with
// the entry's reason, rather than type-checked and left to fail in lowering or at run time.
// Module-level code is exempt: the checker itself computes module constants (a Schedule for
// @kernel.schedule), and a function that uses such a constant is refused at the name.
bool FunctionChecker::refusedAsPending(const BuiltinInfo &b, SourceRange at) {
  if (ctx_ == BodyContext::Module) {
    if (!b.pending.empty() && !modulePending_) modulePending_ = &b;
    return false;
  }
  unsigned bit = contextBit(ctx_);
  const std::string *why = b.pendingIn(bit);
  if (!why) return false;
  pc_.P.diags.report(DiagKind::NotImplementedYet, at, {"`" + b.name + "`", contextPhrase(bit), *why});
  return true;
}

bool FunctionChecker::refusedModuleConstant(const std::string &name, const BuiltinInfo &b, SourceRange at) {
  if (ctx_ == BodyContext::Module) {
    if (!modulePending_) modulePending_ = &b;
    return false;
  }
  unsigned bit = contextBit(ctx_);
  const std::string *why = b.pendingIn(bit);
  if (!why && (b.contexts & bit)) return false;
  // Not callable here at all (a mesh in a graph function): the reason the entry gives elsewhere.
  if (!why) why = &b.pending.front().second;
  pc_.P.diags.report(DiagKind::NotImplementedYet, at, {"the module constant `" + name + "` (made by `" + b.name + "`)", contextPhrase(bit), *why});
  return true;
}

TypeRef FunctionChecker::builtinValue(const BuiltinInfo &b, SourceRange at) {
  if (refusedAsPending(b, at)) return T::unknown();
  CallSite site;
  site.name = b.name;
  site.range = site.calleeRange = at;
  site.context = contextBit(ctx_);
  site.diags = &pc_.P.diags;
  site.enclosing = fn_;
  TypeRef t = b.rule(site);
  return t ? t : T::unknown();
}

TypeRef FunctionChecker::callBuiltin(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange) {
  DiagnosticEngine &D = pc_.P.diags;
  const BuiltinInfo *b = callee->builtin;
  if (!b) return T::unknown();
  if (b->isNamespace) {
    D.report(DiagKind::NotCallable, calleeRange, {"the namespace `" + b->name + "`"});
    return T::unknown();
  }
  unsigned bit = contextBit(ctx_);
  // The tile operations are the builtins of kernels alone.
  bool kernelOnly = b->contexts == InKernel;
  if (!(b->contexts & bit)) {
    if (kernelOnly) D.report(DiagKind::TileOutsideKernel, calleeRange, {b->name});
    else if (ctx_ == BodyContext::Graph) D.report(DiagKind::NotInGraph, calleeRange, {"`" + b->name + "`", "call it from host code"});
    else if (ctx_ == BodyContext::Kernel) D.report(DiagKind::NotInKernel, calleeRange, {"`" + b->name + "`", "kernels use tile operations (tile.load, tile.dot, ...) on tiles"});
    else D.report(DiagKind::Unsupported, calleeRange, {"`" + b->name + "` outside a function"});
    return T::unknown();
  }
  if (refusedAsPending(*b, calleeRange)) return T::unknown();
  if (ctx_ == BodyContext::Kernel && !kernelOnly) {
    auto whole = [](const TypeRef &t) { return t->is(TypeKind::Tensor) && !t->isScalarTensor(); };
    bool any = callee->self && whole(callee->self);
    for (auto &a : args.positional) any |= whole(a.type);
    for (auto &a : args.keywords) any |= whole(a.type);
    if (any) {
      D.report(DiagKind::NotInKernel, at, {"`" + b->name + "` on a whole tensor", "load a tile with tile.load(X[...]) and use the tile operations"});
      return T::unknown();
    }
  }
  CallSite site;
  site.name = b->name;
  site.range = at;
  site.calleeRange = calleeRange;
  site.args = args.positional;
  site.keywords = args.keywords;
  site.self = callee->self;
  site.context = bit;
  site.diags = &D;
  site.enclosing = fn_;
  site.callValue = [this, at](const TypeRef &f, const std::vector<TypeRef> &ts) {
    Args a;
    for (auto &t : ts) a.positional.push_back({t, at, nullptr, ""});
    return callValue(f, a, at, at);
  };
  if (args.hasSplat) {
    DiagnosticEngine::Suppress quiet(D);
    b->rule(site);
    return T::unknown();
  }
  TypeRef r = b->rule(site);
  if (!r) r = T::unknown();
  // Tile shapes must be compile-time (spec section 7): constants, keyword-only parameters,
  // autotuned knobs, and the dims of the kernel's tensors (a kernel is specialized for each
  // value of a dim that shapes its tiles, as for keyword-only parameters). Program ids, loop
  // counters and other run-time values cannot shape a tile.
  if (ctx_ == BodyContext::Kernel && r->is(TypeKind::Tile) && fn_ && !specializing_) {
    for (const Dim &d : r->dims) {
      std::map<std::string, Dim> ones;
      for (const std::string &s : d.symbols()) ones[s] = Dim::constant(1);
      // Unknown parts come from earlier errors or gradual types: not provably run-time.
      if (!d.hasUnknown() && !d.substitute(ones).isConstant()) {
        D.report(DiagKind::TileShapeNotStatic, at, {shapeStr(r->dims)});
        D.note("a tile's extents are constants, keyword-only parameters or dims of the kernel's tensors; a run-time value such as a program id or a loop counter cannot be one");
        return T::unknown();
      }
    }
  }
  return r;
}

static bool compatibleScalar(const TypeRef &want, const TypeRef &got) {
  switch (want->kind) {
  case TypeKind::Int: return got->is(TypeKind::Int) || got->is(TypeKind::Bool);
  case TypeKind::Float: return got->is(TypeKind::Float) || got->is(TypeKind::Int) || got->is(TypeKind::Bool) || got->isScalarTensor();
  case TypeKind::Bool: return got->is(TypeKind::Bool);
  case TypeKind::Str: return got->is(TypeKind::Str);
  case TypeKind::None: return got->is(TypeKind::None);
  case TypeKind::Dict: {
    // The params dict of a model loaded by onnx.load (the only dict a signature declares): a
    // dict with every tensor of the model.
    if (!got->is(TypeKind::Dict)) return false;
    if (!got->lengthKnown) return true;
    for (auto &[k, t] : want->fields) {
      const TypeRef *g = nullptr;
      for (auto &[gk, gt] : got->fields)
        if (gk == k) g = &gt;
      if (!g) return false;
      // Each tensor of the model's rank, sizes and dtype (unknown parts pass).
      const Type &w = *t, &x = **g;
      if (w.is(TypeKind::Tensor) && x.is(TypeKind::Tensor) && x.rankKnown && w.rankKnown) {
        if (x.dtype != w.dtype || x.dims.size() != w.dims.size()) return false;
        for (size_t i = 0; i < w.dims.size(); ++i)
          if (provablyDifferent(w.dims[i], x.dims[i])) return false;
      }
    }
    return true;
  }
  default: return true;
  }
}

TypeRef FunctionChecker::callFunction(const FunctionInfo *fnc, Args &args, SourceRange at, SourceRange calleeRange, const TypeRef &grid) {
  DiagnosticEngine &D = pc_.P.diags;
  auto *fn = const_cast<FunctionInfo *>(fnc);
  if (fn->kind == FunctionKind::Kernel && !grid) {
    D.report(DiagKind::KernelNeedsGrid, calleeRange, {fn->name});
    return T::unknown();
  }
  if (!allowedHere(fn, at)) return T::unknown();
  if (args.hasSplat) return fn->declaredReturn ? fn->declaredReturn : T::unknown();

  // Bind arguments to parameters.
  std::vector<const ParamInfo *> positional;
  for (auto &p : fn->params) if (p.kind == ParamKind::Positional) positional.push_back(&p);
  std::map<std::string, const ArgInfo *> given;
  bool ok = true;
  if (args.positional.size() > positional.size()) {
    D.report(DiagKind::TooManyArgs, args.positional[positional.size()].range,
             {fn->name, std::to_string(positional.size()), std::to_string(args.positional.size())});
    ok = false;
  }
  for (size_t i = 0; i < args.positional.size() && i < positional.size(); ++i) given[positional[i]->name] = &args.positional[i];
  for (auto &k : args.keywords) {
    const ParamInfo *p = fn->param(k.keyword);
    if (!p) {
      D.report(DiagKind::UnknownKeyword, k.keywordRange.valid() ? k.keywordRange : k.range, {fn->name, k.keyword});
      if (fn->def) D.note("`" + fn->name + "` is defined here", fn->def->nameRange);
      ok = false;
      continue;
    }
    if (given.count(k.keyword)) {
      D.report(DiagKind::DuplicateArg, k.keywordRange.valid() ? k.keywordRange : k.range, {fn->name, k.keyword});
      ok = false;
      continue;
    }
    given[k.keyword] = &k;
  }
  for (auto &p : fn->params) {
    if (given.count(p.name) || p.defaultType) continue;
    // Kernels' keyword-only parameters may come from the autotune space or schedule.
    if (fn->kind == FunctionKind::Kernel && p.compileTime()) continue;
    D.report(DiagKind::MissingArg, at, {fn->name, p.name});
    ok = false;
  }
  if (!ok) return fn->declaredReturn ? fn->declaredReturn : T::unknown();

  // Bind symbols (spec 5: a call binds the callee's symbols from its arguments).
  std::map<std::string, Dim> env;
  std::map<std::string, std::string> boundBy;
  bool needSpecialization = false;
  std::vector<std::pair<std::string, TypeRef>> paramTypes;
  std::vector<size_t> unseen; // annotated parameters given an argument of unknown type
  for (auto &p : fn->params) {
    auto it = given.find(p.name);
    const ArgInfo *a = it == given.end() ? nullptr : it->second;
    TypeRef got = a ? a->type : p.defaultType;
    if (!p.annotated) {
      if (a && !got->is(TypeKind::Unknown)) needSpecialization = true;
      paramTypes.push_back({p.name, got ? got : T::unknown()});
      continue;
    }
    // A compile-time argument with a known value compiles its own specialization.
    if (p.compileTime() && a && (got->boolValue || got->strValue || got->floatValue || (got->intValue && got->intValue->isConstant())))
      needSpecialization = true;
    const TypeRef &want = p.annotated;
    if (!a || got->is(TypeKind::Unknown)) {
      if (a && !p.compileTime()) unseen.push_back(paramTypes.size());
      paramTypes.push_back({p.name, got && p.compileTime() && !got->is(TypeKind::Unknown) ? got : want});
      continue;
    }
    auto mismatch = [&](const std::string &why) {
      D.report(DiagKind::ArgTypeMismatch, a->range, {p.name, fn->name, typeStr(got), typeStr(substitute(want, env))});
      if (!why.empty()) D.note(why);
      if (p.range.valid()) D.note("the parameter is declared here", p.range);
    };
    if (want->is(TypeKind::Tensor) || want->is(TypeKind::KVCache)) {
      if (got->isPyNumber() && want->isScalarTensor()) { paramTypes.push_back({p.name, want}); continue; }
      // (a KVCache annotation binds its four sizes as a tensor's; its window must match)
      if (!got->is(want->kind) || got->rolling != want->rolling) { mismatch(""); paramTypes.push_back({p.name, want}); continue; }
      if (got->rankKnown && want->rankKnown) {
        if (got->dims.size() != want->dims.size()) { mismatch(""); paramTypes.push_back({p.name, want}); continue; }
        for (size_t i = 0; i < want->dims.size(); ++i) {
          const Dim &wd = want->dims[i];
          if (!wd.isSymbol()) continue;
          std::string sym = wd.symbols()[0];
          auto e = env.find(sym);
          if (e == env.end()) { env[sym] = got->dims[i]; boundBy[sym] = p.name; continue; }
          // Host code runs on values: a size that is not a constant there (a `main` flag's value,
          // a loaded file's extent) is known only at run time, where the call's guard checks it
          // (spec 5). In compiled code the symbols are the program's own, and differ.
          bool runtime = isRuntimeDim(e->second) || isRuntimeDim(got->dims[i]) ||
                         (ctx_ == BodyContext::Host && (!e->second.isConstant() || !got->dims[i].isConstant()));
          if (runtime) continue;
          if (provablyDifferent(e->second, got->dims[i])) {
            D.report(DiagKind::SymbolConflict, a->range, {"\"" + sym + "\"", dimStr(e->second), boundBy[sym], dimStr(got->dims[i]), p.name});
            ok = false;
          }
        }
        for (size_t i = 0; i < want->dims.size() && ok; ++i) {
          if (want->dims[i].isSymbol()) continue;
          if (provablyDifferent(want->dims[i].substitute(env), got->dims[i])) { mismatch(""); ok = false; }
        }
      }
      if (ok && got->dtype != want->dtype) {
        mismatch("convert it with cast(x, " + std::string(dtypeName(want->dtype)) + ")");
        ok = false;
      }
      // A specialization sees annotated parameters with the sizes this call binds (and the
      // parameter's policies: spec 6, the policy governs operations inside the callee).
      paramTypes.push_back({p.name, substitute(want, env)});
      continue;
    }
    if (!compatibleScalar(want, got)) { mismatch(""); ok = false; }
    paramTypes.push_back({p.name, p.compileTime() ? got : want});
  }
  if (!ok) return fn->declaredReturn ? substitute(fn->declaredReturn, env) : T::unknown();

  // An argument whose type is unknown here (a tensor read from a file) still has one size per
  // symbol when the program runs: in a specialization its parameter has the sizes the other
  // arguments bind, and a symbol no argument binds is that run-time size, an opaque atom of the
  // symbol's name, not a universally quantified one. Otherwise `x: Tensor["N", "F"]` given a
  // loaded tensor and a weight `[13, 32]` would be E0302 "F" vs 13 although F is 13 when it runs;
  // the run-time lowering checks it instead (docs/language.md, specializations).
  if (needSpecialization && !unseen.empty()) {
    std::map<std::string, Dim> runtime = env;
    for (size_t i : unseen)
      for (const Dim &d : paramTypes[i].second->dims)
        for (const std::string &s : d.symbols())
          if (!runtime.count(s)) runtime[s] = Dim::opaque(s);
    for (size_t i : unseen) paramTypes[i].second = substitute(paramTypes[i].second, runtime);
  }

  // Compile-time ints given by keyword bind the symbols of the same name (`heads` in
  // Tensor["B", "heads", "S", "D/heads"]).
  for (auto &k : args.keywords) {
    const ParamInfo *p = fn->param(k.keyword);
    if (p && p->compileTime() && k.type->is(TypeKind::Int) && k.type->intValue && !env.count(k.keyword))
      env[k.keyword] = *k.type->intValue;
  }
  if (fn->kind == FunctionKind::Inline) needSpecialization = true; // checked in each caller's context
  if (grid) {
    // A knob of the autotune space is the configuration's to choose: a launch that also passes it
    // would be overridden by it without a word (Triton refuses the same conflict).
    for (auto &k : args.keywords)
      for (auto &[name, values] : fn->space)
        if (name == k.keyword)
          pc_.P.diags.report(DiagKind::ScheduleKnob, k.keywordRange.valid() ? k.keywordRange : k.range,
                             {"`" + name + "` is chosen by the autotune space of `" + fn->name +
                              "`; a launch cannot also pass it (remove it from the space or from the call)"});
    checkGrid(fn, grid, gridRange_.valid() ? gridRange_ : at);
    if (needSpecialization) pc_.specialize(*fn, paramTypes, env, at, ctx_);
    return T::none();
  }
  if (fn->declaredReturn) {
    if (needSpecialization) pc_.specialize(*fn, paramTypes, env, at, ctx_);
    return substitute(fn->declaredReturn, env);
  }
  if (needSpecialization) return pc_.specialize(*fn, paramTypes, env, at, ctx_);
  pc_.ensureChecked(*fn);
  return substitute(fn->inferredReturn ? fn->inferredReturn : T::unknown(), env);
}

void FunctionChecker::checkGrid(const FunctionInfo *kernel, const TypeRef &grid, SourceRange at) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef g = grid;
  if (g->is(TypeKind::Lambda)) {
    std::vector<std::pair<std::string, Dim>> knobs;
    for (auto &[k, v] : kernel->space) knobs.push_back({k, Dim::symbol(k)});
    if (kernel->schedule) for (auto &kv : kernel->schedule->knobs) knobs.push_back(kv);
    for (auto &p : kernel->params)
      if (p.compileTime()) {
        bool have = false;
        for (auto &k : knobs) have |= k.first == p.name;
        if (!have) knobs.push_back({p.name, Dim::symbol(p.name)});
      }
    for (const char *k : {"warps", "stages"}) {
      bool have = false;
      for (auto &kv : knobs) have |= kv.first == k;
      if (!have) knobs.push_back({k, Dim::symbol(k)});
    }
    g = callLambda(g->lambda, {T::config(knobs)}, at);
  }
  if (g->is(TypeKind::Unknown)) return;
  if (g->is(TypeKind::Int)) return;
  if (!(g->is(TypeKind::Tuple) || g->is(TypeKind::List)) || !g->lengthKnown) {
    D.report(DiagKind::GridRank, at, {typeStr(g)});
    return;
  }
  if (g->elems.empty() || g->elems.size() > 3) {
    D.report(DiagKind::GridRank, at, {std::to_string(g->elems.size())});
    return;
  }
  for (auto &e : g->elems)
    if (!e->is(TypeKind::Int) && !e->is(TypeKind::Unknown) && !(e->isScalarTensor() && isInteger(e->dtype)))
      D.report(DiagKind::ArgKind, at, {kernel->name, "ints", "the grid", typeStr(e)});
}

static TypeRef gradientOf(const TypeRef &t, DiagnosticEngine &D, SourceRange at, const std::string &what) {
  switch (t->kind) {
  case TypeKind::Tensor:
    if (!isFloat(t->dtype)) {
      D.report(DiagKind::GradNonFloat, at, {what + " (" + typeStr(t) + ")"});
      return T::unknown();
    }
    return t;
  case TypeKind::Float: case TypeKind::Unknown: return t;
  case TypeKind::Int: case TypeKind::Bool:
    D.report(DiagKind::GradNonFloat, at, {what + " (" + typeStr(t) + ")"});
    return T::unknown();
  case TypeKind::Tuple: case TypeKind::List: {
    Type c = *t;
    for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = gradientOf(c.elems[i], D, at, what + "[" + std::to_string(i) + "]");
    if (c.elem) c.elem = gradientOf(c.elem, D, at, what);
    return std::make_shared<const Type>(std::move(c));
  }
  case TypeKind::Dict: {
    Type c = *t;
    for (auto &f : c.fields) f.second = gradientOf(f.second, D, at, what + "[\"" + f.first + "\"]");
    if (c.elem) c.elem = gradientOf(c.elem, D, at, what);
    return std::make_shared<const Type>(std::move(c));
  }
  default:
    D.report(DiagKind::GradNonFloat, at, {what + " (" + typeStr(t) + ")"});
    return T::unknown();
  }
}

TypeRef FunctionChecker::callTransform(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange) {
  DiagnosticEngine &D = pc_.P.diags;
  TypeRef inner = callee->inner ? callee->inner : T::unknown();
  switch (callee->transform) {
  case Transform::Checkpoint: return callValue(inner, args, at, calleeRange);
  case Transform::Pullback: return T::unknown();
  case Transform::Vmap: return callVmap(callee, args, at, calleeRange);
  case Transform::Grad: case Transform::ValueAndGrad: {
    TypeRef r = callValue(inner, args, at, calleeRange);
    std::string tname = callee->transform == Transform::Grad ? "grad" : "value_and_grad";
    std::string fname = inner->fn ? inner->fn->name : "the function";
    if (inner->fn && inner->transform == Transform::None) {
      if (const FunctionInfo *k = pc_.undifferentiableKernel(*inner->fn)) {
        D.report(DiagKind::NonDifferentiable, at, {"the kernel `" + k->name + "`, which `" + fname + "` launches"});
        D.note("give the kernel a gradient with @custom_vjp(fwd=..., bwd=...) on a function that launches it");
        if (k->def) D.note("the kernel is defined here", k->def->nameRange);
        return T::unknown();
      }
    }
    // has_aux=True (JAX's): f returns a pair (scalar, aux); the scalar is differentiated and aux
    // is passed through: grad gives (gradients, aux), value_and_grad ((value, aux), gradients).
    TypeRef aux;
    if (callee->hasAux && !r->is(TypeKind::Unknown)) {
      if (!r->is(TypeKind::Tuple) || r->elem || r->elems.size() != 2) {
        D.report(DiagKind::AutodiffStructure, at, {tname + "(..., has_aux=True)", "`" + fname + "` returns " + typeStr(r) + ", not a pair (loss, aux)"});
        return T::unknown();
      }
      aux = r->elems[1];
      r = r->elems[0];
    } else if (callee->hasAux) {
      aux = T::unknown();
    }
    bool scalar = r->is(TypeKind::Unknown) || r->is(TypeKind::Float) || (r->isScalarTensor() && isFloat(r->dtype)) ||
                  (r->is(TypeKind::Tensor) && !r->rankKnown);
    if (r->is(TypeKind::Tensor) && r->rankKnown && !r->dims.empty() && product(r->dims).isOne()) scalar = true;
    if (!scalar) {
      D.report(DiagKind::GradNonScalar, at, {tname, fname, typeStr(r)});
      return T::unknown();
    }
    std::vector<TypeRef> grads;
    std::vector<int> nums = callee->argnums.empty() ? std::vector<int>{0} : callee->argnums;
    for (int n : nums) {
      if (n < 0 || static_cast<size_t>(n) >= args.positional.size()) {
        D.report(DiagKind::ArgnumsRange, at, {std::to_string(n), fname, std::to_string(args.positional.size())});
        return T::unknown();
      }
      grads.push_back(gradientOf(args.positional[static_cast<size_t>(n)].type, D, args.positional[static_cast<size_t>(n)].range, "argument " + std::to_string(n)));
    }
    TypeRef g = grads.size() == 1 && !callee->argnumsTuple ? grads[0] : T::tuple(grads);
    if (callee->transform == Transform::Grad) return aux ? T::tuple({g, aux}) : g;
    return T::tuple({aux ? T::tuple({r, aux}) : r, g});
  }
  default: return T::unknown();
  }
}

} // namespace tsr::sema
