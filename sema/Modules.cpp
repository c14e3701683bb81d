// Modules and imports (spec section 2), signatures and decorators (sections 3, 4, 7), and the
// driver of the whole check.
#include "frontend/Parser.h"
#include "sema/Checker.h"
#include "sema/Decorators.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <ostream>
#include <sstream>

namespace fs = std::filesystem;

namespace tsr::sema {

using namespace ast;

std::string_view functionKindWord(FunctionKind k) {
  switch (k) {
  case FunctionKind::Host: return "host function";
  case FunctionKind::Graph: return "graph function";
  case FunctionKind::Kernel: return "kernel";
  case FunctionKind::Inline: return "inline helper";
  }
  return "function";
}

// Whether every path through a block ends in `return` (or `raise`, which is reported apart).
static bool alwaysReturns(const Block &b) {
  if (b.empty()) return false;
  Stmt *last = b.back();
  switch (last->kind) {
  case Kind::Return: case Kind::Raise: return true;
  case Kind::If: {
    auto *i = static_cast<If *>(last);
    return alwaysReturns(i->body) && alwaysReturns(i->orelse);
  }
  case Kind::With: return alwaysReturns(static_cast<With *>(last)->body);
  case Kind::While: {
    auto *w = static_cast<While *>(last);
    auto *t = dyn_cast<BoolLit>(w->test);
    return t && t->value; // `while True:` ends only through a return
  }
  default: return false;
  }
}

// The range of an autotune space entry `NAME=[...]` (or of the decorator if not found).
static SourceRange spaceEntryRange(const FunctionInfo &fn, const std::string &name) {
  for (auto &d : fn.def->decorators) {
    for (auto &a : d.args) {
      auto *c = dyn_cast<Call>(a.value);
      if (c) for (auto &e : c->args) if (e.kind == ArgKind::Keyword && e.name == name) return e.range;
      if (auto *dd = dyn_cast<Dict>(a.value))
        for (size_t i = 0; i < dd->keys.size(); ++i)
          if (auto *k = dyn_cast<StrLit>(dd->keys[i]); k && k->value == name) return k->range;
    }
    if (d.dotted().find("autotune") != std::string::npos) return d.range;
  }
  return fn.def->nameRange;
}

// The range of the string `name` in an autotune key list (or of the decorator).
static SourceRange keyEntryRange(const FunctionInfo &fn, const std::string &name) {
  for (auto &d : fn.def->decorators) {
    if (d.dotted().find("autotune") == std::string::npos) continue;
    for (auto &a : d.args) {
      if (a.kind != ArgKind::Keyword || a.name != "key") continue;
      std::vector<Expr *> elts;
      if (auto *l = dyn_cast<List>(a.value)) elts = l->elts;
      if (auto *t = dyn_cast<Tuple>(a.value)) elts = t->elts;
      for (Expr *e : elts)
        if (auto *s = dyn_cast<StrLit>(e); s && s->value == name) return s->range;
    }
    return d.range;
  }
  return fn.def->nameRange;
}

static BodyContext bodyContextOf(const FunctionInfo &fn) {
  switch (fn.kind) {
  case FunctionKind::Graph: return BodyContext::Graph;
  case FunctionKind::Kernel: return BodyContext::Kernel;
  case FunctionKind::Inline: return BodyContext::Graph; // checked as it would be inlined into graph code
  default: return BodyContext::Host;
  }
}

std::string ProgramChecker::dirOf(const std::string &path) const {
  fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

static std::string joinDots(const std::vector<std::string> &p, const char *sep = ".") {
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) s += (i ? sep : "") + p[i];
  return s;
}

ModuleInfo *ProgramChecker::loadModule(const std::vector<std::string> &dotted, const std::string &fromDir, SourceRange at,
                                       ModuleInfo *importer) {
  std::vector<std::pair<std::string, bool>> dirs; // folder, is the stdlib
  std::string base = fromDir;
  if (base.empty() && importer) base = dirOf(importer->path);
  if (!base.empty()) dirs.push_back({base, importer && importer->isStdlib});
  for (auto &d : P.options.searchPath) dirs.push_back({d, false});
  if (!P.options.stdlibDir.empty()) dirs.push_back({P.options.stdlibDir, true});
  std::string rel = joinDots(dotted, "/");
  std::string name = joinDots(dotted);
  for (auto &[dir, isStd] : dirs) {
    fs::path file = fs::path(dir) / (rel + ".tsr");
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) return loadFile(file.lexically_normal().string(), name, isStd, at);
    fs::path folder = fs::path(dir) / rel;
    if (fs::is_directory(folder, ec)) {
      // A package: a folder whose .tsr files are its submodules.
      std::string key = fs::weakly_canonical(folder, ec).string() + "/";
      for (auto &m : P.modules) if (m->path == key) return m.get();
      auto m = std::make_unique<ModuleInfo>();
      m->name = name;
      m->path = key;
      m->isStdlib = isStd;
      m->state = ModuleInfo::State::Loaded;
      P.modules.push_back(std::move(m));
      return P.modules.back().get();
    }
  }
  P.diags.report(DiagKind::ModuleNotFound, at, {name});
  std::string where;
  for (auto &[dir, isStd] : dirs) where += (where.empty() ? "" : ", ") + dir;
  P.diags.note("looked for " + rel + ".tsr in " + where + " (TESSERA_PATH adds folders)");
  return nullptr;
}

ModuleInfo *ProgramChecker::loadFile(const std::string &path, const std::string &name, bool isStdlib, SourceRange at) {
  std::error_code ec;
  std::string key = fs::weakly_canonical(fs::path(path), ec).string();
  if (key.empty()) key = path;
  for (auto &m : P.modules) {
    if (m->path != key) continue;
    if (m->state == ModuleInfo::State::Loading) {
      std::string cycle;
      bool in = false;
      for (auto &n : loadingStack) {
        if (n == m->name) in = true;
        if (in) cycle += n + " imports ";
      }
      cycle += m->name;
      P.diags.report(DiagKind::ImportCycle, at, {cycle});
      return nullptr;
    }
    return m.get();
  }
  FileId id = loadSourceFile(P.sm, P.diags, path, at);
  if (!id) {
    auto owned = std::make_unique<ModuleInfo>();
    owned->name = name;
    owned->path = key;
    owned->isStdlib = isStdlib;
    owned->state = ModuleInfo::State::Loaded;
    owned->ast = std::make_unique<Module>();
    P.modules.push_back(std::move(owned));
    return P.modules.back().get();
  }
  return adoptFile(id, key, name, isStdlib);
}

ModuleInfo *ProgramChecker::adoptFile(FileId id, const std::string &key, const std::string &name, bool isStdlib) {
  auto owned = std::make_unique<ModuleInfo>();
  ModuleInfo *m = owned.get();
  m->name = name;
  m->path = key;
  m->isStdlib = isStdlib;
  P.modules.push_back(std::move(owned));
  m->ast = P.options.parse ? P.options.parse(P.sm, P.diags, id, name) : parseModule(P.sm, P.diags, id, name);
  loadingStack.push_back(name);
  checkModule(*m);
  loadingStack.pop_back();
  m->state = ModuleInfo::State::Loaded;
  return m;
}

void ProgramChecker::checkModule(ModuleInfo &m) {
  DiagnosticEngine &D = P.diags;
  // Functions first: module code may refer to a function defined below it (decorators and
  // constants are evaluated after every definition is known).
  for (Stmt *s : m.ast->body) {
    auto *f = dyn_cast<FunctionDef>(s);
    if (!f) continue;
    auto it = m.globals.find(f->name);
    if (it != m.globals.end()) {
      D.report(DiagKind::Redefinition, f->nameRange, {f->name});
      D.note("first defined here", it->second.decl);
      continue;
    }
    auto info = std::make_unique<FunctionInfo>();
    info->name = f->name;
    info->def = f;
    info->module = &m;
    Symbol sym;
    sym.kind = Symbol::Kind::Function;
    sym.fn = info.get();
    sym.decl = f->nameRange;
    m.globals[f->name] = sym;
    m.functions.push_back(std::move(info));
  }
  FunctionChecker top(*this, m, nullptr, BodyContext::Module, !m.isStdlib);
  for (Stmt *s : m.ast->body) top.checkModuleStmt(s);
  for (auto &fn : m.functions) analyzeSignature(*fn);
}

TypeRef ProgramChecker::annotationType(Expr *e, FunctionInfo *fn, ModuleInfo &m, std::vector<std::string> *symbols) {
  DiagnosticEngine &D = P.diags;
  FunctionChecker scope(*this, m, nullptr, BodyContext::Module, false);
  auto dtypeOf = [&](Expr *x) -> std::optional<TypeRef> {
    // A dtype, maybe with policies: bf16, BF16A (a module alias), bf16 @accum(f32), ts.bf16.
    if (x->kind != Kind::Name && x->kind != Kind::Binary && x->kind != Kind::Attribute) return std::nullopt;
    if (auto *b = dyn_cast<Binary>(x); b && b->op != BinOp::MatMul) return std::nullopt;
    if (auto *at = dyn_cast<Attribute>(x)) {
      // Only `ts.bf16` (an alias of the tessera module) names a dtype through an attribute.
      auto *base = dyn_cast<Name>(at->value);
      auto g = base ? m.globals.find(base->id) : m.globals.end();
      if (g == m.globals.end() || !isTesseraModule(g->second.type))
        return std::nullopt;
    }
    if (auto *n = dyn_cast<Name>(x)) {
      bool known = dtypeFromName(n->id).has_value();
      auto g = m.globals.find(n->id);
      if (!known && !(g != m.globals.end() && g->second.type && g->second.type->is(TypeKind::DTypeVal))) return std::nullopt;
    }
    TypeRef t = scope.expr(x);
    if (t->is(TypeKind::DTypeVal)) return t;
    return std::nullopt;
  };
  // KVCache[...] @rolling_window (spec 14): the cache type with a rolling window.
  if (auto *b = dyn_cast<Binary>(e); b && b->op == BinOp::MatMul) {
    auto *r = dyn_cast<Name>(b->rhs);
    auto *l = dyn_cast<Subscript>(b->lhs);
    auto *lh = l ? dyn_cast<Name>(l->value) : nullptr;
    if (r && r->id == "rolling_window" && lh && lh->id == "KVCache") {
      TypeRef t = annotationType(b->lhs, fn, m, symbols);
      if (!t->is(TypeKind::KVCache)) return t;
      return T::kvcache(t->dims, t->dtype, t->policies, true);
    }
  }
  if (auto *n = dyn_cast<Name>(e)) {
    if (n->id == "int") return T::integer();
    if (n->id == "float") return T::floating();
    if (n->id == "bool") return T::boolean();
    if (n->id == "str") return T::str();
    if (n->id == "Tensor") return T::tensorUnknownRank(DType::F32);
    if (n->id == "Key") return T::key();
    if (n->id == "Schedule") return T::schedule({});
    if (auto d = dtypeOf(e)) return T::scalar((*d)->dtype, (*d)->policies);
    if (n->id == "tuple" || n->id == "list" || n->id == "dict") return T::unknown();
    D.report(DiagKind::InvalidAnnotation, e->range, {"`" + n->id + "` is not a type"});
    return T::unknown();
  }
  if (e->kind == Kind::NoneLit) return T::none();
  if (auto d = dtypeOf(e)) return T::scalar((*d)->dtype, (*d)->policies);
  auto *s = dyn_cast<Subscript>(e);
  std::string head;
  if (s) {
    if (auto *n = dyn_cast<Name>(s->value)) head = n->id;
    else if (auto *a = dyn_cast<Attribute>(s->value)) head = a->attr;
  }
  if (s && (head == "Tensor" || head == "KVCache")) {
    std::vector<Expr *> items = s->indices;
    DType dt = DType::F32;
    Policies pol;
    if (!items.empty()) {
      if (auto d = dtypeOf(items.back())) {
        dt = (*d)->dtype;
        pol = (*d)->policies;
        items.pop_back();
      } else if (auto *n = dyn_cast<Name>(items.back())) {
        // A name in the last position that is neither a dtype nor an int constant is a
        // misspelt dtype (`fp8`, `float`), not a dimension.
        auto g = m.globals.find(n->id);
        bool intConst = g != m.globals.end() && g->second.type && g->second.type->is(TypeKind::Int);
        if (!intConst) {
          D.report(DiagKind::UnknownDType, n->range, {n->id});
          return T::unknown();
        }
      }
    }
    std::vector<Dim> dims;
    size_t errorsBefore = D.errorCount();
    for (Expr *it : items) {
      if (auto *str = dyn_cast<StrLit>(it)) {
        std::string err;
        size_t at = 0;
        auto d = Dim::parse(str->value, &err, &at);
        if (!d) {
          D.report(DiagKind::InvalidDim, it->range, {"\"" + str->value + "\"", err});
          dims.push_back(Dim::unknown());
          continue;
        }
        if (auto c = d->constantValue(); c && *c < 0) {
          D.report(DiagKind::NegativeDim, it->range, {"\"" + str->value + "\""});
        }
        if (symbols)
          for (auto &sym : d->symbols())
            if (std::find(symbols->begin(), symbols->end(), sym) == symbols->end()) symbols->push_back(sym);
        dims.push_back(*d);
      } else if (auto *i = dyn_cast<IntLit>(it)) {
        if (i->value < 0) D.report(DiagKind::NegativeDim, it->range, {std::to_string(i->value)});
        dims.push_back(Dim::constant(i->value));
      } else if (auto *n = dyn_cast<Name>(it)) {
        auto g = m.globals.find(n->id);
        TypeRef t = g != m.globals.end() && g->second.type ? g->second.type : T::unknown();
        if (t->is(TypeKind::Int) && t->intValue && t->intValue->constantValue()) dims.push_back(*t->intValue);
        else {
          D.report(DiagKind::InvalidDim, it->range, {"`" + n->id + "`", "a dimension is a string such as \"" + n->id + "\" or \"3*D\", or an integer"});
          dims.push_back(Dim::unknown());
        }
      } else if (it->kind == Kind::EllipsisLit) {
        D.report(DiagKind::InvalidDim, it->range, {"`...`", "tensor annotations list every dimension"});
        dims.push_back(Dim::unknown());
      } else {
        TypeRef t = scope.expr(it);
        if (t->is(TypeKind::Opaque) || t->is(TypeKind::Unknown) || t->is(TypeKind::Float) || t->is(TypeKind::Str) || t->isTensorLike())
          D.report(DiagKind::InvalidDim, it->range, {"here", "expected a dimension such as \"B\", 64 or \"3*D\", or a dtype as the last item"});
        else
          D.report(DiagKind::UnknownDType, it->range, {typeStr(t)});
        dims.push_back(Dim::unknown());
      }
    }
    if (dims.size() > 16) D.report(DiagKind::InvalidAnnotation, e->range, {"a tensor has at most 16 dimensions"});
    // A wrong annotation was reported; checking values against the rest of it would only report
    // the same mistake again.
    if (D.errorCount() > errorsBefore) return T::unknown();
    if (head == "KVCache") {
      // KVCache["B", "H", "S_MAX", "D", dtype]: the type KVCache(...) gives (sema/builtins/State.cpp).
      if (dims.size() != 4 || !isFloat(dt)) {
        D.report(DiagKind::InvalidAnnotation, e->range,
                 {"a KVCache annotation lists batch, heads, max_len and head_dim, then a floating-point dtype: KVCache[\"B\", \"H\", 1024, \"D\", bf16]"});
        return T::unknown();
      }
      return T::kvcache(std::move(dims), dt, pol, false);
    }
    return T::tensor(std::move(dims), dt, pol);
  }
  if (s && (head == "tuple" || head == "list" || head == "dict")) return T::unknown();
  D.report(DiagKind::InvalidAnnotation, e->range, {"expected a type such as Tensor[\"N\", f32], int, float, bool or str"});
  return T::unknown();
}

void ProgramChecker::analyzeDecorators(FunctionInfo &fn) {
  DiagnosticEngine &D = P.diags;
  scheduleBroken = false;
  ModuleInfo &m = *fn.module;
  FunctionChecker scope(*this, m, nullptr, BodyContext::Module, false);
  const Decorator *kindDecorator = nullptr;
  auto setKind = [&](FunctionKind k, const Decorator &d) {
    if (kindDecorator) {
      D.report(DiagKind::DecoratorConflict, d.range, {d.dotted(), kindDecorator->dotted()});
      fn.broken = true; // which rules the body follows is unknown: checking it would only add noise
      return;
    }
    kindDecorator = &d;
    fn.kind = k;
  };
  for (const Decorator &d : fn.def->decorators) {
    auto argNamed = [&](const std::string &n) -> const Arg * {
      for (auto &a : d.args) if (a.kind == ArgKind::Keyword && a.name == n) return &a;
      return nullptr;
    };
    const DecoratorInfo *info = findDecorator(decoratorName(m, d));
    if (!info) {
      D.report(DiagKind::UnknownDecorator, d.range, {d.dotted()});
      D.note("decorators are @jit, @inline, @kernel, @kernel.autotune(...), @kernel.schedule(...), @autodiff, @custom_vjp(...) and @distribute(...)");
      continue;
    }
    switch (info->kind) {
    case DecoratorKind::Jit: setKind(FunctionKind::Graph, d); break;
    case DecoratorKind::Inline: setKind(FunctionKind::Inline, d); break;
    case DecoratorKind::Autodiff: fn.autodiff = true; break;
    case DecoratorKind::Distribute: fn.distributed = true; for (auto &a : d.args) scope.expr(a.value); break;
    case DecoratorKind::Kernel: setKind(FunctionKind::Kernel, d); break;
    case DecoratorKind::KernelAutotune: {
      setKind(FunctionKind::Kernel, d);
      fn.autotune = true;
      const Arg *space = argNamed("space");
      if (!space && !d.args.empty() && d.args[0].kind == ArgKind::Positional) space = &d.args[0];
      if (!space) {
        D.report(DiagKind::ScheduleKnob, d.range, {"@kernel.autotune needs a search space: space=dict(BM=[64, 128], ...)"});
      } else {
        // The space: dict(NAME=[values...], ...) or {"NAME": [values...]}.
        std::vector<std::pair<std::string, Expr *>> entries;
        if (auto *c = dyn_cast<Call>(space->value); c && c->func->kind == Kind::Name && static_cast<Name *>(c->func)->id == "dict") {
          for (auto &a : c->args) if (a.kind == ArgKind::Keyword) entries.push_back({a.name, a.value});
        } else if (auto *dd = dyn_cast<Dict>(space->value)) {
          for (size_t i = 0; i < dd->keys.size(); ++i)
            if (auto *k = dyn_cast<StrLit>(dd->keys[i])) entries.push_back({k->value, dd->values[i]});
        } else {
          D.report(DiagKind::ScheduleKnob, space->value->range, {"the autotune space is a dict of lists, as dict(BM=[64, 128], warps=[4, 8])"});
        }
        for (auto &[k, v] : entries) {
          std::vector<int64_t> values;
          TypeRef t = scope.expr(v);
          if ((t->is(TypeKind::List) || t->is(TypeKind::Tuple)) && t->lengthKnown && !t->elems.empty()) {
            for (auto &e : t->elems) {
              auto c = e->intValue ? e->intValue->constantValue() : std::nullopt;
              if (!c || *c <= 0) { D.report(DiagKind::ScheduleKnob, v->range, {"the values of `" + k + "` must be positive integer constants"}); values.clear(); break; }
              values.push_back(*c);
            }
          } else {
            D.report(DiagKind::ScheduleKnob, v->range, {"`" + k + "` must list its candidate values, as " + k + "=[64, 128]"});
          }
          fn.space.push_back({k, values});
        }
      }
      if (const Arg *key = argNamed("key")) {
        TypeRef t = scope.expr(key->value);
        if ((t->is(TypeKind::List) || t->is(TypeKind::Tuple)) && t->lengthKnown) {
          for (auto &e : t->elems) {
            if (e->strValue) fn.autotuneKey.push_back(*e->strValue);
            else D.report(DiagKind::ScheduleKnob, key->value->range, {"the autotune key lists dimension names as strings, as key=[\"M\", \"N\"]"});
          }
        }
      }
      break;
    }
    case DecoratorKind::KernelSchedule:
      setKind(FunctionKind::Kernel, d);
      if (d.args.size() != 1 || d.args[0].kind != ArgKind::Positional) {
        D.report(DiagKind::ScheduleKnob, d.range, {"@kernel.schedule takes one Schedule, as @kernel.schedule(Schedule(block=(128, 128), k=64))"});
      } else {
        TypeRef t = scope.expr(d.args[0].value);
        if (t->is(TypeKind::Schedule)) fn.schedule = t;
        else {
          if (!t->is(TypeKind::Unknown)) D.report(DiagKind::ScheduleKnob, d.args[0].value->range, {"expected a Schedule, not " + typeStr(t)});
          fn.schedule = T::schedule({}); // reported: its knobs are not also reported as missing
          scheduleBroken = true;
        }
      }
      break;
    case DecoratorKind::CustomVjp:
      fn.customVjp = true;
      for (const char *which : {"fwd", "bwd"}) {
        const Arg *a = argNamed(which);
        if (!a) { D.report(DiagKind::CustomVjpSignature, d.range, {std::string("missing ") + which + "=, the " + (which[0] == 'f' ? "forward" : "backward") + " function"}); continue; }
        TypeRef t = scope.expr(a->value);
        if (!t->is(TypeKind::Function) || !t->fn) {
          if (!t->is(TypeKind::Unknown)) D.report(DiagKind::CustomVjpSignature, a->value->range, {std::string(which) + "= must name a function, not " + typeStr(t)});
          continue;
        }
        (which[0] == 'f' ? fn.vjpFwd : fn.vjpBwd) = t->fn;
      }
      break;
    }
  }
}

void ProgramChecker::analyzeSignature(FunctionInfo &fn) {
  DiagnosticEngine &D = P.diags;
  analyzeDecorators(fn);
  std::set<std::string> seen;
  bool sawDefault = false;
  FunctionChecker scope(*this, *fn.module, nullptr, BodyContext::Module, false);
  for (const Param &p : fn.def->params) {
    if (!seen.insert(p.name).second) D.report(DiagKind::DuplicateParam, p.nameRange, {p.name});
    if (p.kind == ParamKind::VarArgs || p.kind == ParamKind::VarKeywords) {
      D.report(DiagKind::Unsupported, p.range, {"a variadic parameter (`*args`, `**kwargs`)"});
      fn.variadicNames.push_back(p.name);
      continue;
    }
    if (p.kind == ParamKind::Positional) {
      if (p.defaultValue) sawDefault = true;
      else if (sawDefault) D.report(DiagKind::ParamOrder, p.range, {"parameter `" + p.name + "` without a default follows one with a default"});
    }
    ParamInfo info;
    info.name = p.name;
    info.kind = p.kind;
    info.range = p.range;
    if (p.annotation) info.annotated = annotationType(p.annotation, &fn, *fn.module, &fn.symbols);
    if (p.defaultValue) info.defaultType = scope.expr(p.defaultValue);
    if (info.annotated && info.annotated->is(TypeKind::Unknown)) info.annotated = nullptr;
    fn.params.push_back(std::move(info));
  }
  if (fn.def->returns) {
    fn.declaredReturn = annotationType(fn.def->returns, &fn, *fn.module, nullptr);
    if (fn.declaredReturn->is(TypeKind::Unknown)) fn.declaredReturn = nullptr;
  }
  // Kernel configuration: every keyword-only parameter without a default needs a value from the
  // autotune space or the schedule; the space names parameters or schedule knobs; the key names
  // dimensions of the parameters.
  if (fn.kind == FunctionKind::Kernel) {
    static const std::set<std::string> knobs = {"warps", "stages", "vector", "num_warps", "num_stages"};
    for (auto &p : fn.params) {
      if (!p.compileTime() || p.defaultType || scheduleBroken) continue;
      bool covered = false;
      for (auto &[k, v] : fn.space) covered |= k == p.name;
      if (fn.schedule) for (auto &[k, v] : fn.schedule->knobs) covered |= k == p.name;
      if (!covered) D.report(DiagKind::MissingConfig, p.range, {p.name, fn.name});
    }
    for (auto &k : fn.autotuneKey) {
      bool ok = std::find(fn.symbols.begin(), fn.symbols.end(), k) != fn.symbols.end();
      const ParamInfo *p = fn.param(k);
      ok |= p && p->compileTime();
      if (!ok) D.report(DiagKind::AutotuneKey, keyEntryRange(fn, k), {k});
    }
    if (fn.def->returns && fn.declaredReturn && !fn.declaredReturn->is(TypeKind::None))
      D.report(DiagKind::KernelReturn, fn.def->returns->range);
  }
  if (fn.customVjp && fn.vjpFwd && fn.vjpFwd->def) {
    size_t want = fn.positionalCount(), got = 0;
    for (auto &p : fn.vjpFwd->def->params) got += p.kind == ParamKind::Positional;
    if (want != got)
      D.report(DiagKind::CustomVjpSignature, fn.def->nameRange,
               {"the forward function `" + fn.vjpFwd->name + "` takes " + std::to_string(got) + " positional argument(s) but `" + fn.name + "` takes " + std::to_string(want)});
  }
  if (fn.name == "main" && fn.kind == FunctionKind::Host && !fn.module->isStdlib) {
    for (auto &p : fn.params) {
      TypeRef t = p.annotated ? p.annotated : p.defaultType;
      if (!t || !(t->is(TypeKind::Int) || t->is(TypeKind::Float) || t->is(TypeKind::Bool) || t->is(TypeKind::Str)))
        D.report(DiagKind::MainSignature, p.range, {p.name});
    }
  }
}

static void bindParams(FunctionChecker &fc, const FunctionInfo &fn, const std::unordered_set<std::string> *reassigned) {
  for (const ParamInfo &p : fn.params) {
    TypeRef t = p.annotated;
    if (!t) {
      if (p.defaultType && p.compileTime()) {
        // A keyword-only default is one value of a compile-time parameter: the generic check
        // knows its kind, not its value.
        switch (p.defaultType->kind) {
        case TypeKind::Int: t = T::integer(Dim::symbol(p.name)); break;
        case TypeKind::Float: t = T::floating(); break;
        case TypeKind::Bool: t = T::boolean(); break;
        case TypeKind::Str: t = T::str(); break;
        default: t = p.defaultType->is(TypeKind::None) ? T::unknown() : p.defaultType;
        }
      } else if (p.defaultType && fn.kind == FunctionKind::Host && p.defaultType->isPyNumber()) {
        t = p.defaultType->is(TypeKind::Int) ? T::integer() : (p.defaultType->is(TypeKind::Float) ? T::floating() : T::boolean());
      } else {
        t = T::unknown();
      }
    }
    // An int parameter that the body never reassigns names a size: `M` in `zeros((M, K))`. A
    // positional int of a kernel or graph function is a run-time scalar (like saxpy's alpha):
    // it may size a tensor, but not a tile, an axis or anything else compiled into the program.
    // A host function's ints are values of the running program (`main`'s flags): a size made
    // from one is known when the program runs, so where it meets a constant (`ones((n, 3))`
    // against `[4, 8]`) the checker cannot tell, and the operation checks it when it runs
    // (spec 5), rather than a universally quantified symbol that differs from every constant.
    if (t->is(TypeKind::Int) && !t->intValue && !(reassigned && reassigned->count(p.name))) {
      bool runtimeScalar = ((fn.kind == FunctionKind::Kernel || fn.kind == FunctionKind::Graph) && !p.compileTime()) ||
                           fn.kind == FunctionKind::Host;
      t = T::integer(runtimeScalar ? Dim::opaque(p.name) : Dim::symbol(p.name));
    }
    fc.bindParam(p.name, t, p.range);
  }
}

void ProgramChecker::ensureChecked(FunctionInfo &fn) {
  if (fn.checked || fn.checking) return;
  if (fn.broken) {
    fn.checked = true;
    fn.inferredReturn = T::unknown();
    return;
  }
  fn.checking = true;
  // The generic check does not depend on who asked for it first (maybe a loop's silent first
  // pass): its diagnostics are always reported. An inline helper's body is checked in the
  // context of each caller instead (its specializations), so its generic check is silent.
  DiagnosticEngine::Unsuppress loud(P.diags);
  std::optional<DiagnosticEngine::Suppress> quietInline;
  if (fn.kind == FunctionKind::Inline) quietInline.emplace(P.diags);
  FunctionChecker fc(*this, *fn.module, &fn, bodyContextOf(fn), !fn.module->isStdlib);
  std::unordered_set<std::string> assigned;
  {
    // Which parameters the body reassigns (they do not name fixed sizes).
    std::function<void(const Block &)> walk = [&](const Block &b) {
      for (Stmt *s : b) {
        if (auto *a = dyn_cast<Assign>(s)) for (Expr *t : a->targets) if (auto *n = dyn_cast<Name>(t)) assigned.insert(n->id);
        if (auto *a = dyn_cast<AugAssign>(s)) if (auto *n = dyn_cast<Name>(a->target)) assigned.insert(n->id);
        if (auto *f = dyn_cast<For>(s)) { if (auto *n = dyn_cast<Name>(f->target)) assigned.insert(n->id); walk(f->body); }
        if (auto *i = dyn_cast<If>(s)) { walk(i->body); walk(i->orelse); }
        if (auto *w = dyn_cast<While>(s)) walk(w->body);
      }
    };
    walk(fn.def->body);
  }
  bindParams(fc, fn, &assigned);
  for (auto &n : fn.variadicNames) fc.bindParam(n, T::unknown(), fn.def->nameRange);
  checkerStack.push_back(&fc);
  fc.checkBody(fn.def->body);
  checkerStack.pop_back();
  fn.inferredReturn = fc.sawReturn() ? fc.returnType() : T::none();
  if (fn.declaredReturn && !fn.declaredReturn->is(TypeKind::None) && fn.kind != FunctionKind::Kernel && !alwaysReturns(fn.def->body))
    P.diags.report(DiagKind::MissingReturn, fn.def->nameRange, {fn.name, typeStr(fn.declaredReturn)});
  // The autotune space names keyword-only parameters or schedule knobs, unless the kernel reads
  // its configuration through tile.context().
  if (fn.kind == FunctionKind::Kernel && fn.autotune && !fn.usesContext) {
    static const std::set<std::string> knobs = {"warps", "stages", "vector", "num_warps", "num_stages"};
    for (auto &[k, v] : fn.space) {
      const ParamInfo *p = fn.param(k);
      if ((p && p->compileTime()) || knobs.count(k)) continue;
      P.diags.report(DiagKind::AutotuneSpace, spaceEntryRange(fn, k), {k, fn.name});
    }
  }
  fn.checking = false;
  fn.checked = true;
}

// A specialization's cache key: the type with every compile-time value in it, nested ones too
// (`sizes: tuple[int, int]` with (8, 16) and with ("B", "S") are different specializations).
static std::string typeKey(const TypeRef &t) {
  std::string s;
  if ((t->is(TypeKind::Tuple) || t->is(TypeKind::List)) && t->lengthKnown) {
    s = t->is(TypeKind::Tuple) ? "tuple(" : "list(";
    for (auto &e : t->elems) s += typeKey(e) + ",";
    return s + ")";
  }
  if (t->is(TypeKind::Dict) && t->lengthKnown) {
    s = "dict(";
    for (auto &[k, v] : t->fields) s += k + ":" + typeKey(v) + ",";
    return s + ")";
  }
  s = typeStr(t);
  if (t->intValue) s += "=" + t->intValue->str();
  if (t->boolValue) s += *t->boolValue ? "=True" : "=False";
  if (t->strValue) s += "=\"" + *t->strValue + "\"";
  if (t->floatValue) s += "=" + std::to_string(*t->floatValue);
  return s;
}

TypeRef ProgramChecker::specialize(FunctionInfo &fn, const std::vector<std::pair<std::string, TypeRef>> &params,
                                   const std::map<std::string, Dim> &env, SourceRange callSite,
                                   std::optional<BodyContext> callerContext) {
  if (fn.broken) return T::unknown();
  // An inline helper takes its caller's rules (spec 3: "what its caller may contain").
  BodyContext ctx = fn.kind == FunctionKind::Inline && callerContext ? *callerContext : bodyContextOf(fn);
  // Under a silent pass (a loop's first look) the argument types are provisional: check, but
  // do not remember the result, so that the real pass checks it again and reports.
  bool provisional = P.diags.suppressed();
  std::string key = "ctx" + std::to_string(static_cast<int>(ctx)) + ";";
  for (auto &[n, t] : params) key += n + ":" + typeKey(t) + ";";
  for (auto &[n, d] : env) key += n + "=" + d.str() + ";";
  auto it = fn.specializations.find(key);
  if (it != fn.specializations.end()) return it->second;
  if (specializationDepth > 12 || fn.specializations.size() >= 64) {
    ensureChecked(fn);
    return fn.inferredReturn ? fn.inferredReturn : T::unknown();
  }
  fn.specializations[key] = T::unknown(); // recursion: a call of itself is Unknown
  fn.specializationOrder.push_back(key);
  {
    std::string text;
    for (auto &[n, t] : params) {
      text += (text.empty() ? "" : ", ") + n + ": ";
      if (t->strValue) text += "\"" + *t->strValue + "\"";
      else if (t->boolValue) text += *t->boolValue ? "True" : "False";
      else if (t->is(TypeKind::Int) && t->intValue && t->intValue->isConstant()) text += t->intValue->str();
      else if (t->floatValue) { std::ostringstream fs; fs << *t->floatValue; text += fs.str(); }
      else text += typeStr(t);
    }
    fn.specializationText[key] = text;
    fn.specializationParams[key] = params;
  }
  ++specializationDepth;
  size_t first = P.diags.diagnostics().size();
  FunctionChecker fc(*this, *fn.module, &fn, ctx, false);
  fc.setSpecialization(env);
  for (auto &n : fn.variadicNames) fc.bindParam(n, T::unknown(), fn.def->nameRange);
  for (auto &[n, t] : params) {
    const ParamInfo *p = fn.param(n);
    // An int parameter with no known value still names its size, as in the generic check.
    TypeRef bound = t->is(TypeKind::Int) && !t->intValue ? T::integer(Dim::symbol(n)) : t;
    fc.bindParam(n, bound, p ? p->range : SourceRange{});
  }
  checkerStack.push_back(&fc);
  fc.checkBody(fn.def->body);
  checkerStack.pop_back();
  --specializationDepth;
  TypeRef r = fc.sawReturn() ? fc.returnType() : T::none();
  fn.specializations[key] = r;
  if (provisional) {
    fn.specializations.erase(key);
    fn.specializationOrder.pop_back();
    fn.specializationText.erase(key);
    fn.specializationParams.erase(key);
  }
  if (P.diags.diagnostics().size() > first && callSite.valid())
    P.diags.noteSince(first, "in `" + fn.name + "` as called here", callSite);
  return r;
}

static std::unique_ptr<Program> checkFrom(std::unique_ptr<Program> P, ProgramChecker &pc, ModuleInfo *m);

const FunctionInfo *ProgramChecker::undifferentiableKernel(const FunctionInfo &root) {
  std::set<const FunctionInfo *> seen;
  std::function<const FunctionInfo *(const FunctionInfo &)> visit = [&](const FunctionInfo &fn) -> const FunctionInfo * {
    if (!seen.insert(&fn).second || fn.customVjp || !fn.def) return nullptr;
    const FunctionInfo *found = nullptr;
    // Resolve a callee expression (`f`, `kernels.f`, `k[grid]`) to a function of the program.
    auto resolve = [&](Expr *e) -> const FunctionInfo * {
      if (auto *s = dyn_cast<Subscript>(e)) e = s->value;
      const ModuleInfo *m = fn.module;
      std::string name;
      if (auto *n = dyn_cast<Name>(e)) name = n->id;
      else if (auto *a = dyn_cast<Attribute>(e); a && a->value->kind == Kind::Name) {
        auto g = m->globals.find(static_cast<Name *>(a->value)->id);
        if (g == m->globals.end() || !g->second.type || !g->second.type->is(TypeKind::Module)) return nullptr;
        m = g->second.type->module;
        name = a->attr;
      }
      if (name.empty()) return nullptr;
      auto g = m->globals.find(name);
      return g != m->globals.end() && g->second.kind == Symbol::Kind::Function ? g->second.fn : nullptr;
    };
    std::function<void(Node *)> walk = [&](Node *n) {
      if (found) return;
      if (auto *c = dyn_cast<Call>(n)) {
        if (const FunctionInfo *callee = resolve(c->func)) {
          if (callee->kind == FunctionKind::Kernel && c->func->kind == Kind::Subscript) found = callee;
          else if (callee->kind != FunctionKind::Kernel) found = visit(*callee);
        }
      }
      if (!found) forEachChild(n, walk);
    };
    for (Stmt *s : fn.def->body) walk(s);
    return found;
  };
  return visit(root);
}

void ProgramChecker::reportUnusedImports() {
  // Only the program's own module: the modules it imports are checked as its dependencies, and
  // their warnings are theirs to fix.
  for (auto &m : P.modules) {
    if (m.get() != P.main || !m->ast) continue;
    std::vector<std::pair<SourceRange, std::string>> unused;
    for (auto &[name, sym] : m->globals)
      if (sym.imported && !sym.used) unused.push_back({sym.decl, name});
    std::sort(unused.begin(), unused.end(), [](auto &a, auto &b) { return a.first.begin < b.first.begin; });
    for (auto &[r, n] : unused) P.diags.report(DiagKind::UnusedImportName, r, {n});
  }
}

CheckOptions defaultCheckOptions(const std::string &sourceStdlib) {
  CheckOptions o;
  std::error_code ec;
  if (const char *env = std::getenv("TESSERA_STDLIB")) {
    o.stdlibDir = env;
  } else {
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    fs::path installed = ec ? fs::path() : exe.parent_path().parent_path() / "share" / "tessera" / "stdlib";
    o.stdlibDir = !installed.empty() && fs::is_directory(installed, ec) ? installed.string() : sourceStdlib;
  }
  if (const char *env = std::getenv("TESSERA_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) o.searchPath.push_back(item);
  }
  return o;
}

std::unique_ptr<Program> checkProgram(SourceManager &sm, DiagnosticEngine &diags, const std::string &path,
                                      const CheckOptions &options) {
  auto P = std::make_unique<Program>(sm, diags);
  P->options = options;
  ProgramChecker pc(*P);
  std::string name = fs::path(path).stem().string();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    diags.report(DiagKind::FileNotFound, {}, {path, "it is a directory"});
    return P;
  }
  ModuleInfo *m = pc.loadFile(path, name, false, {});
  return checkFrom(std::move(P), pc, m);
}

std::unique_ptr<Program> checkLoadedFile(SourceManager &sm, DiagnosticEngine &diags, FileId file,
                                         const CheckOptions &options) {
  auto P = std::make_unique<Program>(sm, diags);
  P->options = options;
  ProgramChecker pc(*P);
  const std::string &path = sm.file(file).path();
  std::error_code ec;
  std::string key = fs::weakly_canonical(fs::path(path), ec).string();
  ModuleInfo *m = pc.adoptFile(file, key.empty() ? path : key, fs::path(path).stem().string(), false);
  return checkFrom(std::move(P), pc, m);
}

static std::unique_ptr<Program> checkFrom(std::unique_ptr<Program> P, ProgramChecker &pc, ModuleInfo *m) {
  DiagnosticEngine &diags = P->diags;
  P->main = m;
  if (!m) return P;
  if (m->ast && m->ast->file && m->ast->body.empty() && !diags.hasErrors()) {
    diags.report(DiagKind::EmptyFile, {m->ast->file, 0, 0});
    return P;
  }
  // Every function of every loaded module gets its generic check, stdlib included: an error in
  // the standard library is reported like any other (and is a bug of ours).
  for (size_t i = 0; i < P->modules.size(); ++i) {
    ModuleInfo &mod = *P->modules[i];
    for (auto &fn : mod.functions) pc.ensureChecked(*fn);
  }
  pc.reportUnusedImports();
  return P;
}

void printTypes(std::ostream &os, const Program &p) {
  for (auto &m : p.modules) {
    if (m->isStdlib || !m->ast) continue;
    os << "module " << m->name << "\n";
    // Module-level bindings, then each function's.
    for (auto &b : p.bindings) {
      if (b.fn || b.range.file != m->ast->file) continue;
      LineCol lc = p.sm.file(b.range.file).lineCol(b.range.begin);
      os << "  " << lc.line << ":" << lc.column << " " << b.name << ": " << typeStr(b.type) << "\n";
    }
    for (auto &fn : m->functions) {
      os << "  " << functionKindWord(fn->kind) << " " << fn->name << "(";
      for (size_t i = 0; i < fn->params.size(); ++i) {
        auto &prm = fn->params[i];
        if (i) os << ", ";
        if (prm.compileTime() && (i == 0 || !fn->params[i - 1].compileTime())) os << "*, ";
        os << prm.name << ": " << (prm.annotated ? typeStr(prm.annotated) : (prm.defaultType ? typeStr(prm.defaultType) : "unknown"));
      }
      os << ") -> " << typeStr(fn->declaredReturn ? fn->declaredReturn : fn->inferredReturn) << "\n";
      if (!fn->symbols.empty()) {
        os << "    symbols:";
        for (auto &s : fn->symbols) os << " " << s;
        os << "\n";
      }
      if (fn->autotune) {
        os << "    autotune:";
        for (auto &[k, v] : fn->space) {
          os << " " << k << "=[";
          for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
          os << "]";
        }
        if (!fn->autotuneKey.empty()) {
          os << " key=";
          for (size_t i = 0; i < fn->autotuneKey.size(); ++i) os << (i ? "," : "") << fn->autotuneKey[i];
        }
        os << "\n";
      }
      for (auto &b : p.bindings) {
        if (b.fn != fn.get()) continue;
        LineCol lc = p.sm.file(b.range.file).lineCol(b.range.begin);
        os << "    " << lc.line << ":" << lc.column << " " << b.name << ": " << typeStr(b.type) << "\n";
      }
      for (auto &k : fn->specializationOrder) {
        auto it = fn->specializations.find(k);
        os << "    specialization (" << fn->specializationText.at(k) << ") -> " << typeStr(it->second) << "\n";
      }
    }
  }
}

} // namespace tsr::sema
