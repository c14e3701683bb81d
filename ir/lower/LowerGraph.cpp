#include "ir/lower/LowerGraph.h"
#include "ir/lower/Lowering.h"

#include "ir/autodiff/Autodiff.h"
#include "ir/passes/Pipeline.h"
#include "sema/Builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_set>

namespace tsr::ir {

IRSourcePoint irSourcePoint(const sema::Program &p, SourceRange r) {
  if (!r.valid() || !p.sm.has(r.file)) return {};
  const SourceFile &f = p.sm.file(r.file);
  LineCol lc = f.lineCol(r.begin);
  std::string path = f.path();
  const std::string &std = p.options.stdlibDir;
  if (!std.empty() && path.rfind(std, 0) == 0) {
    std::string rest = path.substr(std.size());
    while (!rest.empty() && rest[0] == '/') rest.erase(0, 1);
    path = "stdlib/" + rest;
  }
  return {path, lc.line, lc.column, true};
}

using namespace lowering;

namespace {

// Turns a parameter of checker type `t` into graph parameters (pytrees flatten, leaf by leaf,
// in order) and the compile-time value the body sees.
LVRef paramValue(Graph &g, const std::string &name, const TypeRef &t, SourceRange at, bool compileTime) {
  switch (t->kind) {
  case TypeKind::Tensor:
    if (!t->rankKnown) throw CompileError{"a parameter whose rank is not known", at};
    for (const Dim &d : t->dims)
      if (d.hasUnknown()) throw CompileError{"a parameter whose shape is not known", at};
    return tensor(g.addParam(name, Type::tensor(t->dims, t->dtype, t->policies)));
  case TypeKind::Key: return tensor(g.addParam(name, Type::key()));
  case TypeKind::Int: {
    if (t->intValue && t->intValue->isConstant()) return integer(*t->intValue);
    // A compile-time int not known yet (the generic signature's `heads`) is a symbol; a
    // run-time int is a scalar parameter, and a size named after it.
    if (compileTime) return integer(t->intValue ? *t->intValue : Dim::symbol(name));
    Value *v = g.addParam(name, Type::tensor({}, DType::I64));
    return integer(Dim::symbol(name), v);
  }
  case TypeKind::Float:
    if (t->floatValue) return floating(*t->floatValue);
    return weakFloat(g.addParam(name, Type::tensor({}, DType::F32)));
  case TypeKind::Bool:
    if (t->boolValue) return boolean(*t->boolValue);
    throw CompileError{"a bool parameter whose value is known only at run time", at};
  case TypeKind::Str:
    if (t->strValue) return str(*t->strValue);
    throw CompileError{"a string parameter whose value is not known", at};
  case TypeKind::None: return none();
  case TypeKind::DTypeVal: { LV v; v.kind = LV::K::DType; v.dt = {t->dtype, t->policies}; return mk(v); }
  case TypeKind::Function: {
    // A function passed from host code (`value_and_grad(loss_fn)` called by `tsr run`).
    if (t->transform == sema::Transform::None) {
      if (!t->fn) break;
      LV v;
      v.kind = LV::K::Function;
      v.fn = t->fn;
      return mk(v);
    }
    if (!t->inner || t->transform == sema::Transform::Pullback) break;
    LV v;
    v.kind = LV::K::Transformed;
    v.transform = t->transform;
    v.inner = paramValue(g, name, t->inner, at, compileTime);
    v.argnums = t->argnums;
    v.tupleArgnums = t->argnumsTuple;
    v.hasAux = t->hasAux;
    if (t->inAxes) v.inAxes = paramValue(g, name + ".in_axes", t->inAxes, at, true);
    if (t->outAxes) v.outAxes = paramValue(g, name + ".out_axes", t->outAxes, at, true);
    return mk(v);
  }
  case TypeKind::Builtin: {
    LV v;
    v.kind = LV::K::Builtin;
    v.builtin = t->builtin;
    if (t->self) v.self = paramValue(g, name + ".self", t->self, at, compileTime);
    return mk(v);
  }
  case TypeKind::Tuple: case TypeKind::List: {
    if (!t->lengthKnown) throw CompileError{"a sequence parameter of unknown length", at};
    std::vector<LVRef> es;
    for (size_t i = 0; i < t->elems.size(); ++i) es.push_back(paramValue(g, name + "." + std::to_string(i), t->elems[i], at, compileTime));
    return tuple(es, t->is(TypeKind::List));
  }
  case TypeKind::KVCache: {
    for (const Dim &d : t->dims)
      if (d.hasUnknown()) throw CompileError{"a KVCache parameter whose shape is not known", at};
    // In the order of the record's fields (k, v, pos), which host values flatten in.
    Type storage = Type::tensor(t->dims, t->dtype, t->policies);
    Value *k = g.addParam(name + ".k", storage);
    Value *v = g.addParam(name + ".v", storage);
    Value *pos = g.addParam(name + ".pos", Type::tensor({}, DType::I32));
    return cacheValue(k, v, pos, t->rolling);
  }
  case TypeKind::Dict: {
    if (!t->lengthKnown) throw CompileError{"a dict parameter with keys not known", at};
    LV v;
    v.kind = LV::K::Dict;
    for (auto &[k, ft] : t->fields) v.fields.push_back({k, paramValue(g, name + "." + k, ft, at, compileTime)});
    return mk(v);
  }
  default: break;
  }
  throw CompileError{"a parameter of type " + sema::typeStr(t), at};
}

void collectOutputs(const LVRef &v, std::vector<Value *> &out, SourceRange at, bool keepConstants = false) {
  switch (v->kind) {
  case LV::K::Tensor: case LV::K::Key: out.push_back(v->v); return;
  case LV::K::Tuple: case LV::K::List: for (auto &e : v->elems) collectOutputs(e, out, at, keepConstants); return;
  case LV::K::Dict: for (auto &f : v->fields) collectOutputs(f.second, out, at, keepConstants); return;
  case LV::K::None: return;
  default:
    if (keepConstants) return; // an eager expression's compile-time leaves travel in its structure
    throw CompileError{"returning a compile-time " + std::string(v->kind == LV::K::Int ? "int" : "value") + " from a graph function", at};
  }
}

} // namespace

// The structure of a lowered value as a checker type: tensors in output order, other leaves
// with their compile-time values.
TypeRef lowering::structureOf(const LVRef &v, SourceRange at) {
  switch (v->kind) {
  case LV::K::Tensor: return sema::T::tensor(v->v->type.dims, v->v->type.dtype, v->v->type.policies);
  case LV::K::Key: return sema::T::key();
  case LV::K::None: return sema::T::none();
  case LV::K::Bool: return sema::T::boolean(v->b);
  case LV::K::Int:
    if (!v->i.constantValue()) throw CompileError{"a size known only at run time as a host value", at};
    return sema::T::integer(v->i);
  case LV::K::Float: return sema::T::floating(v->f);
  case LV::K::Str: return sema::T::str(v->s);
  case LV::K::DType: return sema::T::dtypeVal(v->dt.dtype, v->dt.policies);
  case LV::K::Tuple: case LV::K::List: {
    std::vector<TypeRef> es;
    for (auto &e : v->elems) es.push_back(structureOf(e, at));
    return v->kind == LV::K::Tuple ? sema::T::tuple(es) : sema::T::list(es);
  }
  case LV::K::Dict: {
    if (isCache(v)) {
      const Type &k = cacheField(v, "k")->type;
      return sema::T::kvcache(k.dims, k.dtype, k.policies, v->b);
    }
    std::vector<std::pair<std::string, TypeRef>> fs;
    for (auto &[k, e] : v->fields) fs.push_back({k, structureOf(e, at)});
    return sema::T::dict(fs);
  }
  default: throw CompileError{"a " + std::string("value that is not data") + " as the result of a tensor expression", at};
  }
}


Graph *lowerEagerExpression(Module &m, const sema::Program &p, const sema::ModuleInfo &mod, ast::Expr *e,
                            const std::vector<EagerInput> &inputs, const std::string &graphName, TypeRef *result) {
  auto graph = std::make_unique<Graph>(graphName);
  Graph &g = *graph;
  Lowering lower(m, p, g);
  std::map<std::string, LVRef> env;
  for (auto &in : inputs) env[in.name] = paramValue(g, in.name, in.type, e->range, false);
  LVRef v = lower.evalWith(mod, e, env);
  collectOutputs(v, g.outputs, e->range, true);
  if (result) *result = structureOf(v, e->range);
  m.graphs.push_back(std::move(graph));
  runGraphPipeline(*m.graphs.back(), true);
  return m.graphs.back().get();
}

Graph *lowerGraphFunction(Module &m, const sema::Program &p, const FunctionInfo &fn,
                          const std::vector<std::pair<std::string, TypeRef>> &params, const std::string &name, TypeRef *result) {
  auto graph = std::make_unique<Graph>(name);
  Graph &g = *graph;
  Lowering lower(m, p, g);
  std::vector<LVRef> args;
  std::map<std::string, LVRef> kwargs;
  for (auto &[pname, t] : params) {
    const sema::ParamInfo *pi = fn.param(pname);
    LVRef v = paramValue(g, pname, t, pi ? pi->range : fn.def->nameRange, pi && pi->compileTime());
    if (pi && pi->compileTime()) kwargs[pname] = v;
    else args.push_back(v);
  }
  LVRef value = lower.callFunction(fn, args, kwargs, fn.def->nameRange);
  collectOutputs(value, g.outputs, fn.def->nameRange);
  if (result) {
    try {
      *result = structureOf(value, fn.def->nameRange);
    } catch (CompileError &) {
      *result = nullptr;
    }
  }
  m.graphs.push_back(std::move(graph));
  return &g;
}

std::unique_ptr<Module> lowerProgram(const sema::Program &p, DiagnosticEngine &diags) {
  auto m = std::make_unique<Module>();
  if (!p.main) return m;
  for (auto &fnp : p.main->functions) {
    const FunctionInfo &fn = *fnp;
    if (fn.kind != FunctionKind::Graph) continue;
    std::vector<std::vector<std::pair<std::string, TypeRef>>> signatures;
    std::vector<std::string> names;
    bool annotated = true;
    for (auto &prm : fn.params) annotated &= prm.annotated != nullptr || prm.compileTime();
    if (annotated) {
      std::vector<std::pair<std::string, TypeRef>> sig;
      bool ok = true;
      for (auto &prm : fn.params) {
        TypeRef t = prm.annotated ? prm.annotated : prm.defaultType;
        // A compile-time parameter with a default compiles, in the signature's graph, for
        // that default.
        if (prm.compileTime() && prm.defaultType && !prm.defaultType->is(TypeKind::None)) t = prm.defaultType;
        if (!t) { ok = false; break; }
        // A compile-time int without a value in the generic signature stays symbolic.
        if (t->is(TypeKind::Int) && !t->intValue) t = sema::T::integer(Dim::symbol(prm.name));
        sig.push_back({prm.name, t});
      }
      if (ok) { signatures.push_back(sig); names.push_back(fn.name); }
    }
    size_t k = 0;
    for (auto &key : fn.specializationOrder) {
      auto it = fn.specializationParams.find(key);
      if (it == fn.specializationParams.end()) continue;
      signatures.push_back(it->second);
      names.push_back(fn.name + "$" + std::to_string(++k));
    }
    size_t generic = annotated && !signatures.empty() && names[0] == fn.name ? 1 : 0;
    for (size_t i = 0; i < signatures.size(); ++i) {
      // The signature's own graph is optional when calls compiled specializations: what it
      // cannot lower for want of compile-time values is not an error then.
      bool optional = i < generic && signatures.size() > generic;
      std::optional<DiagnosticEngine::Suppress> quiet;
      if (optional) quiet.emplace(diags);
      try {
        Graph *g = lowerGraphFunction(*m, p, fn, signatures[i], names[i]);
        runGraphPipeline(*g, true);
      } catch (CompileError &e) {
        if (e.what.rfind("internal: ", 0) == 0) diags.internalError(e.what.substr(10), e.range);
        else if (e.kind != DiagKind::NotCompilableYet) {
          diags.report(e.kind, e.range, e.args);
          for (auto &n : e.notes) diags.note(n);
        } else diags.report(DiagKind::NotCompilableYet, e.range, {e.what});
        // The partial graph is dropped.
        if (!m->graphs.empty() && m->graphs.back()->name == names[i]) m->graphs.pop_back();
      } catch (IRError &e) {
        diags.internalError(e.message, fn.def->nameRange);
        if (!m->graphs.empty() && m->graphs.back()->name == names[i]) m->graphs.pop_back();
      }
    }
  }
  return m;
}

} // namespace tsr::ir
