// Kernel lowering's entry points (LowerKernel.h): one launch of a kernel lowered by KernelLowering
// (ir/lower/kernel/, whose run() binds the launch's parameters and configuration here), the
// launches a program makes (tsrc --emit=tile), and what a kernel writes.
#include "ir/lower/LowerKernel.h"
#include "ir/lower/kernel/KernelLowering.h"

namespace tsr::ir {

using namespace tsr::ast;
using sema::FunctionInfo;
using sema::FunctionKind;
using sema::ModuleInfo;

namespace kernel_lowering {

void KernelLowering::run(const FunctionInfo &k, const std::vector<Type> &operandTypes, const std::vector<Attr> &attrs) {
  kernel_ = &k;
  f_.loc = loc(k.def->nameRange);
  Frame frame{&k, k.module, {}};
  frames_.push_back(&frame);
  cur_ = f_.body;
  for (const Attr &a : attrs) {
    if (a.name == "callee" || a.name == "grid_space") continue;
    if (a.name == "grid") {
      if (auto *g = std::get_if<std::vector<Dim>>(&a.value)) f_.gridRank = static_cast<uint32_t>(std::clamp<size_t>(g->size(), 1, 3));
      continue;
    }
    f_.config.push_back(a);
    if (auto *i = std::get_if<int64_t>(&a.value)) config_.push_back({a.name, integer(*i)});
    else if (auto *b = std::get_if<bool>(&a.value)) config_.push_back({a.name, boolean(*b)});
    else if (auto *d = std::get_if<double>(&a.value)) config_.push_back({a.name, floating(*d)});
  }
  // Parameters: run-time ones from the operands, compile-time ones from the configuration or
  // their defaults.
  size_t oi = 0;
  for (const Param &prm : k.def->params) {
    if (prm.kind == ParamKind::KeywordOnly) {
      KVRef v;
      for (auto &[n, x] : config_) if (n == prm.name) v = x;
      if (!v && prm.defaultValue) {
        // A default is part of the configuration the function was specialized for.
        v = expr(prm.defaultValue);
        if (v->kind == KV::K::Int) f_.config.push_back({prm.name, v->i});
        else if (v->kind == KV::K::Bool) f_.config.push_back({prm.name, v->b});
        else if (v->kind == KV::K::Float) f_.config.push_back({prm.name, v->f});
      }
      if (!v) throw CompileError{"a launch without the compile-time argument `" + prm.name + "`", prm.range};
      env()[prm.name] = v;
      continue;
    }
    if (prm.kind != ParamKind::Positional) throw CompileError{"`*` and `**` parameters of a kernel", prm.range};
    if (oi >= operandTypes.size()) throw CompileError{"a launch without the argument `" + prm.name + "`", prm.range};
    const Type &t = operandTypes[oi++];
    if (t.isKey()) throw CompileError{"a random key passed to a kernel", prm.range};
    if (t.rank() == 0 && !isTensorAnnotation(prm)) {
      // A scalar parameter has its annotation's dtype (`alpha: f32`) whatever number the
      // launch passes; unannotated, the operand's.
      // `int`, `float` and `bool` parameters are Python numbers: weak, as i64, f32 and bool.
      DType d = t.dtype;
      bool weak = false;
      if (auto *n = prm.annotation ? dyn_cast<Name>(prm.annotation) : nullptr) {
        if (auto a = dtypeFromName(n->id)) d = *a;
        else if (n->id == "int") { d = DType::I64; weak = true; }
        else if (n->id == "float") { d = DType::F32; weak = true; }
        else if (n->id == "bool") { d = DType::Bool; weak = true; }
      }
      env()[prm.name] = tileOf(f_.addParam(prm.name, tile::Type::scalar(d)), weak);
    } else {
      if (t.rank() > static_cast<size_t>(8)) throw CompileError{"a tensor of rank above 8 passed to a kernel", prm.range};
      KV v;
      v.kind = KV::K::Tensor;
      v.v = f_.addParam(prm.name, tile::Type::tensor(static_cast<uint32_t>(t.rank()), t.dtype));
      v.dims = t.dims;
      v.dt = t.dtype;
      env()[prm.name] = mk(v);
      bindSymbols(prm, v.v, t);
    }
  }
  if (oi != operandTypes.size()) throw CompileError{"a launch with more arguments than `" + k.name + "` has", k.def->nameRange};
  try {
    block(k.def->body);
  } catch (Returned &) {
  }
  frames_.pop_back();
  finishDebugChecks();
  finishAtomicOrder();
}

Loc KernelLowering::loc(SourceRange r) {
  IRSourcePoint sp = irSourcePoint(p_, r);
  return sp.valid ? Loc{m_.fileIndex(sp.path), sp.line, sp.col} : Loc{};
}

bool KernelLowering::isTensorAnnotation(const Param &prm) {
  auto *sub = prm.annotation ? dyn_cast<Subscript>(prm.annotation) : nullptr;
  auto *n = sub ? dyn_cast<Name>(sub->value) : nullptr;
  return n && n->id == "Tensor";
}

void KernelLowering::bindSymbols(const Param &prm, tile::Value *tensor, const Type &t) {
  auto *sub = prm.annotation ? dyn_cast<Subscript>(prm.annotation) : nullptr;
  if (!sub) return;
  int64_t d = 0;
  for (Expr *it : sub->indices) {
    if (auto *s = dyn_cast<StrLit>(it)) {
      auto dim = Dim::parse(s->value);
      if (dim && dim->isSymbol() && !symbols_.count(s->value) && d < static_cast<int64_t>(t.rank()))
        symbols_[s->value] = {tensor, d, t.dims[d].constantValue()};
    }
    if (it->kind == Kind::StrLit || it->kind == Kind::IntLit) ++d;
  }
}

} // namespace kernel_lowering

using kernel_lowering::KernelLowering;

tile::Function *lowerKernel(tile::Module &m, const sema::Program &p, const FunctionInfo &k,
                            const std::vector<Type> &operandTypes, const std::vector<Attr> &attrs,
                            const std::string &name) {
  if (k.kind != FunctionKind::Kernel || !k.def) throw CompileError{"lowering `" + k.name + "` as a kernel", k.def ? k.def->nameRange : SourceRange{}};
  auto f = std::make_unique<tile::Function>(name);
  try {
    KernelLowering(m, p, *f).run(k, operandTypes, attrs);
  } catch (const tile::TileError &e) {
    // The builder's own checks: lowering made an op its operands do not fit.
    throw CompileError{"this kernel (its Tile IR is malformed: " + e.message + ")", k.def->nameRange};
  }
  f->renumber();
  auto problems = tile::verify(*f);
  if (!problems.empty()) throw CompileError{"this kernel (its Tile IR is malformed: " + problems[0] + ")", k.def->nameRange};
  m.functions.push_back(std::move(f));
  return m.functions.back().get();
}

std::vector<Attr> launchConfig(const FunctionInfo &k) {
  std::vector<Attr> attrs{{"callee", (k.module->name.empty() ? "" : k.module->name + ".") + k.name}};
  for (auto &[name, values] : k.space)
    if (!values.empty()) attrs.push_back({name, values[0]});
  if (k.schedule && k.schedule->is(sema::TypeKind::Schedule))
    for (auto &[name, d] : k.schedule->knobs)
      if (auto v = d.constantValue()) attrs.push_back({name, *v});
  return attrs;
}

std::vector<std::vector<std::pair<std::string, int64_t>>> autotuneConfigurations(const FunctionInfo &k) {
  std::vector<std::vector<std::pair<std::string, int64_t>>> out;
  const auto &space = k.space;
  if (space.empty()) return out;
  for (auto &[name, values] : space)
    if (values.empty()) return out;
  std::vector<size_t> at(space.size(), 0);
  while (true) {
    std::vector<std::pair<std::string, int64_t>> c;
    for (size_t i = 0; i < space.size(); ++i) c.push_back({space[i].first, space[i].second[at[i]]});
    out.push_back(std::move(c));
    size_t i = space.size();
    while (true) {
      --i;
      if (++at[i] < space[i].second.size()) break;
      at[i] = 0;
      if (i == 0) return out;
    }
  }
}

namespace {

// The Graph IR type of a launch argument as the checker typed it (host code).
std::optional<Type> argType(const sema::TypeRef &t) {
  if (!t) return std::nullopt;
  switch (t->kind) {
  case sema::TypeKind::Tensor:
    if (!t->rankKnown) return std::nullopt;
    return Type::tensor(t->dims, t->dtype, t->policies);
  case sema::TypeKind::Float: return Type::tensor({}, DType::F32);
  case sema::TypeKind::Int: return Type::tensor({}, DType::I64);
  case sema::TypeKind::Bool: return Type::tensor({}, DType::Bool);
  default: return std::nullopt;
  }
}

std::string launchKey(const std::string &callee, const std::vector<Type> &types, const std::vector<Attr> &attrs) {
  std::string k = callee + "|";
  for (const Type &t : types) k += t.str() + ";";
  for (const Attr &a : attrs) {
    if (a.name == "callee" || a.name == "grid_space") continue;
    k += a.name + "=";
    if (auto *i = std::get_if<int64_t>(&a.value)) k += std::to_string(*i);
    else if (auto *b = std::get_if<bool>(&a.value)) k += *b ? "true" : "false";
    else if (auto *d = std::get_if<double>(&a.value)) k += std::to_string(*d);
    else if (auto *g = std::get_if<std::vector<Dim>>(&a.value)) k += "grid" + std::to_string(g->size());
    k += ",";
  }
  return k;
}

class ProgramKernels {
public:
  ProgramKernels(const sema::Program &p, DiagnosticEngine &diags) : p_(p), diags_(diags), m_(std::make_unique<tile::Module>()) {}

  void lower(const FunctionInfo &k, const std::vector<Type> &types, const std::vector<Attr> &attrs, SourceRange launch) {
    launched_.insert(&k);
    std::string callee = launchConfig(k)[0].name == "callee" ? std::get<std::string>(launchConfig(k)[0].value) : k.name;
    std::string key = launchKey(callee, types, attrs);
    if (!seen_.insert(key).second) return;
    std::string name = callee;
    for (int i = 2; m_->find(name); ++i) name = callee + "." + std::to_string(i);
    try {
      lowerKernel(*m_, p_, k, types, attrs, name);
    } catch (CompileError &e) {
      diags_.report(DiagKind::NotCompilableYet, e.range.valid() ? e.range : launch, {e.what});
      if (launch.valid()) diags_.note("in the launch of `" + k.name + "` here", launch);
    } catch (tile::TileError &e) {
      diags_.internalError(e.message, launch);
    }
  }

  // Launches written in host code: k[grid](args), with the checker's types.
  void hostLaunches(const ModuleInfo &mod) {
    for (const auto &fn : mod.functions) {
      if (fn->kind != FunctionKind::Host || !fn->def) continue;
      std::function<void(Node *)> walk = [&](Node *n) {
        if (auto *c = dyn_cast<Call>(n)) hostLaunch(mod, c);
        forEachChild(n, walk);
      };
      for (Stmt *s : fn->def->body) walk(s);
    }
  }

  // The kernels of `mod` that nothing launched, each lowered once from its signature: tensor
  // parameters as annotated, with `sizes` for their symbols (the others stay symbolic, read when
  // it runs); compile-time parameters from `sizes`, else the configuration, else their defaults.
  // A kernel that its signature does not determine (an unannotated parameter) or that does not
  // lower for it gets warning W0133 naming why.
  void neverLaunched(const ModuleInfo &mod, const std::map<std::string, int64_t> &sizes) {
    std::map<std::string, Dim> env;
    for (auto &[s, v] : sizes) env[s] = Dim::constant(v);
    for (const auto &fn : mod.functions) {
      if (fn->kind != FunctionKind::Kernel || !fn->def || launched_.count(fn.get())) continue;
      std::vector<Type> types;
      std::vector<Attr> attrs = launchConfig(*fn);
      std::string missing;
      for (const sema::ParamInfo &prm : fn->params) {
        if (prm.compileTime()) {
          if (auto it = sizes.find(prm.name); it != sizes.end()) {
            std::erase_if(attrs, [&](const Attr &a) { return a.name == prm.name; });
            attrs.push_back({prm.name, it->second});
          }
          continue;
        }
        sema::TypeRef t = prm.annotated;
        if (t && t->is(sema::TypeKind::Tensor)) {
          std::vector<Dim> dims;
          for (const Dim &d : t->dims) dims.push_back(d.substitute(env));
          t = sema::T::withDims(t, std::move(dims));
        }
        auto ty = argType(t);
        if (!ty) {
          missing = "its parameter `" + prm.name + "` has no " + (prm.annotated ? "tensor or scalar type" : "annotation");
          break;
        }
        types.push_back(*ty);
      }
      // (A compile-time parameter always has a value here: the checker requires a default, an
      // autotune space or a schedule, E0507.)
      if (missing.empty()) {
        attrs.push_back({"grid", std::vector<Dim>(3, Dim::unknown())});
        try {
          lowerKernel(*m_, p_, *fn, types, attrs, attrs[0].name == "callee" ? std::get<std::string>(attrs[0].value) : fn->name);
          continue;
        } catch (CompileError &e) {
          missing = e.what + " cannot be compiled yet";
        } catch (tile::TileError &e) {
          diags_.internalError(e.message, fn->def->nameRange);
          continue;
        }
      }
      diags_.report(DiagKind::NeverLaunched, fn->def->nameRange, {fn->name, missing});
    }
  }

  std::unique_ptr<tile::Module> take() { return std::move(m_); }

private:
  void hostLaunch(const ModuleInfo &mod, Call *c) {
    auto *sub = dyn_cast<Subscript>(c->func);
    if (!sub) return;
    const FunctionInfo *k = nullptr;
    if (auto *n = dyn_cast<Name>(sub->value)) {
      auto g = mod.globals.find(n->id);
      if (g != mod.globals.end() && g->second.kind == sema::Symbol::Kind::Function) k = g->second.fn;
    } else if (auto *a = dyn_cast<Attribute>(sub->value)) {
      auto it = p_.exprTypes.find(a);
      if (it != p_.exprTypes.end() && it->second && it->second->is(sema::TypeKind::Function)) k = it->second->fn;
    }
    if (!k || k->kind != FunctionKind::Kernel) return;
    std::vector<Attr> attrs = launchConfig(*k);
    // The grid's rank: its indices, or the tuple a grid lambda returns.
    size_t gridRank = sub->indices.size();
    if (gridRank == 1) {
      Expr *g = sub->indices[0];
      if (auto *l = dyn_cast<Lambda>(g)) g = l->body;
      if (auto *t = dyn_cast<Tuple>(g)) gridRank = t->elts.size();
    }
    std::vector<Expr *> positional;
    for (const Arg &a : c->args) if (a.kind == ArgKind::Positional) positional.push_back(a.value);
    std::vector<Type> types;
    std::set<std::string> passed; // the compile-time ints the launch passes
    size_t ai = 0;
    for (const sema::ParamInfo &prm : k->params) {
      Expr *e = nullptr;
      if (prm.kind == ParamKind::Positional && ai < positional.size()) e = positional[ai++];
      for (const Arg &a : c->args) if (a.kind == ArgKind::Keyword && a.name == prm.name) e = a.value;
      if (!e) {
        if (!prm.compileTime()) return; // the checker reported it
        continue;                       // the configuration's value or the default
      }
      auto it = p_.exprTypes.find(e);
      sema::TypeRef t = it == p_.exprTypes.end() ? nullptr : it->second;
      if (prm.compileTime()) {
        bool configured = false;
        for (auto &a : attrs) configured |= a.name == prm.name;
        if (configured) continue;
        if (t && t->is(sema::TypeKind::Int) && t->intValue && t->intValue->constantValue()) {
          attrs.push_back({prm.name, *t->intValue->constantValue()});
          passed.insert(prm.name);
        }
        else if (t && t->is(sema::TypeKind::Bool) && t->boolValue) attrs.push_back({prm.name, *t->boolValue});
        else if (t && t->is(sema::TypeKind::Float) && t->floatValue) attrs.push_back({prm.name, *t->floatValue});
        else {
          // Known when the program runs: the launcher compiles it then (W0132 says so).
          diags_.report(DiagKind::NotSpecializedAhead, e->range, {k->name, "its compile-time argument `" + prm.name + "` is known only at run time"});
          return;
        }
        continue;
      }
      auto ty = argType(t);
      if (!ty) {
        diags_.report(DiagKind::NotSpecializedAhead, e->range, {k->name, "the type of its argument `" + prm.name + "` is known only at run time"});
        return;
      }
      types.push_back(*ty);
    }
    attrs.push_back({"grid", std::vector<Dim>(std::max<size_t>(gridRank, 1), Dim::unknown())});
    if (sizes_ && conflicts_) specializeConflicts(*k, types, attrs, passed, c->range);
    lower(*k, types, attrs, c->range);
  }

  // `--specialize` values that contradict what a launch itself fixes: a compile-time argument it
  // passes (`passed`), or a size its arguments' types bind to a symbol of the kernel's signature.
  // Each is described in conflicts_ ("BLOCK=64: ..."): a usage error of tsrc.
  void specializeConflicts(const FunctionInfo &k, const std::vector<Type> &types, const std::vector<Attr> &attrs,
                           const std::set<std::string> &passed, SourceRange at) {
    IRSourcePoint sp = irSourcePoint(p_, at);
    const std::string launch = "the launch of `" + k.name + "`" + (sp.valid ? " at " + sp.path + ":" + std::to_string(sp.line) + ":" + std::to_string(sp.col) : "");
    auto check = [&](const std::string &name, int64_t own, const std::string &how) {
      auto it = sizes_->find(name);
      if (it != sizes_->end() && it->second != own)
        conflicts_->push_back(name + "=" + std::to_string(it->second) + ": " + launch + " " + how + " " + std::to_string(own));
    };
    for (const Attr &a : attrs)
      if (auto *v = std::get_if<int64_t>(&a.value))
        check(a.name, *v, passed.count(a.name) ? "passes `" + a.name + "` =" : "configures `" + a.name + "` =");
    size_t ti = 0;
    for (const sema::ParamInfo &prm : k.params) {
      if (prm.compileTime()) {
        // Neither passed nor configured: the launch takes the default.
        bool given = false;
        for (const Attr &a : attrs) given |= a.name == prm.name;
        const sema::TypeRef &d = prm.defaultType;
        if (!given && d && d->is(sema::TypeKind::Int) && d->intValue && d->intValue->constantValue())
          check(prm.name, *d->intValue->constantValue(), "takes the default `" + prm.name + "` =");
        continue;
      }
      if (ti >= types.size()) break;
      const Type &t = types[ti++];
      if (!prm.annotated || !prm.annotated->is(sema::TypeKind::Tensor) || !prm.annotated->rankKnown) continue;
      const auto &want = prm.annotated->dims;
      for (size_t d = 0; d < want.size() && d < t.dims.size(); ++d)
        if (want[d].isSymbol())
          if (auto own = t.dims[d].constantValue())
            check(want[d].symbols()[0], *own, "binds \"" + want[d].symbols()[0] + "\" (axis " + std::to_string(d) + " of `" + prm.name + "`) to");
    }
  }

public:
  const std::map<std::string, int64_t> *sizes_ = nullptr;
  std::vector<std::string> *conflicts_ = nullptr;

private:

  const sema::Program &p_;
  DiagnosticEngine &diags_;
  std::unique_ptr<tile::Module> m_;
  std::set<std::string> seen_;
  std::set<const FunctionInfo *> launched_;
};

} // namespace

std::unique_ptr<tile::Module> lowerProgramKernels(const sema::Program &p, const Module &graphs, DiagnosticEngine &diags,
                                                  const std::map<std::string, int64_t> *signatureSizes,
                                                  std::vector<std::string> *specializeConflicts) {
  ProgramKernels pk(p, diags);
  pk.sizes_ = signatureSizes;
  pk.conflicts_ = specializeConflicts;
  for (const auto &g : graphs.graphs)
    for (const Op *op : g->ops) {
      if (op->kind != OpKind::KernelCall) continue;
      const std::string *callee = op->attrAs<std::string>("callee");
      const FunctionInfo *k = callee ? findKernel(p, *callee) : nullptr;
      if (!k) {
        diags.internalError("kernel_call of an unknown kernel" + (callee ? " `" + *callee + "`" : std::string()));
        continue;
      }
      std::vector<Type> types;
      for (const Value *v : op->operands) types.push_back(v->type);
      pk.lower(*k, types, op->attrs, {});
    }
  if (p.main) pk.hostLaunches(*p.main);
  if (p.main && signatureSizes) pk.neverLaunched(*p.main, *signatureSizes);
  return pk.take();
}

const FunctionInfo *findKernel(const sema::Program &p, const std::string &callee) {
  size_t dot = callee.rfind('.');
  std::string mod = dot == std::string::npos ? "" : callee.substr(0, dot);
  std::string name = dot == std::string::npos ? callee : callee.substr(dot + 1);
  for (const auto &m : p.modules) {
    if (m->name != mod && !(mod.empty() && m.get() == p.main)) continue;
    for (const auto &f : m->functions)
      if (f->name == name && f->kind == FunctionKind::Kernel) return f.get();
  }
  return nullptr;
}

std::vector<std::string> kernelWrittenParams(const FunctionInfo &k) {
  std::vector<std::string> out;
  std::function<void(Node *)> walk = [&](Node *n) {
    if (auto *c = dyn_cast<Call>(n)) {
      // A call of a builtin whose kernel rule writes through its first argument, a view
      // (tile.store, tile.atomic_add).
      auto *at = dyn_cast<Attribute>(c->func);
      auto *ns = at ? dyn_cast<Name>(at->value) : nullptr;
      const sema::BuiltinInfo *b = ns && sema::isBuiltinNamespace(ns->id) ? sema::findBuiltin(ns->id + "." + at->attr) : nullptr;
      if (b && b->kernel.rule == "store" && !c->args.empty()) {
        Expr *v = c->args[0].value;
        while (auto *s = dyn_cast<Subscript>(v)) v = s->value;
        if (auto *nm = dyn_cast<Name>(v))
          if (std::find(out.begin(), out.end(), nm->id) == out.end()) out.push_back(nm->id);
      }
    }
    forEachChild(n, walk);
  };
  for (Stmt *st : k.def->body) walk(st);
  return out;
}

} // namespace tsr::ir
