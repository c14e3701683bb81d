// Models loaded by `onnx.load` (spec 15) in graph lowering: the call itself, in graph code, gives
// the function the checker made for the model (sema/CheckOnnx.cpp); a call of that function
// inlines the model's Graph IR (ir/ExternalModels.h) with the caller's values for its parameters:
// its ops are added again to the caller's graph, so that shape inference types them at the
// caller's sizes, the schedule fuses them with the caller's ops, and autodiff differentiates them
// as any ops (the importer builds only ops that have gradient rules).
#include "ir/lower/Lowering.h"

#include "ir/ExternalModels.h"
#include "ir/Scan.h"
#include "sema/ExternalModels.h"

#include <memory>
#include <unordered_map>

namespace tsr::ir::lowering {

namespace {

const ModelGraph &modelOf(const FunctionInfo &fn, SourceRange at) {
  ModelGraphSource *src = modelGraphSource();
  const ModelGraph *mg = src ? src->graph(fn.externalModel) : nullptr;
  // The checker refuses a model the importer cannot read, so this is a tool without an importer.
  if (!mg) throw CompileError{"an ONNX model in this tool (it does not link the importer)", at};
  return *mg;
}

// Captured tensor `i` of model `mg` as a parameter of `g`: one parameter per tensor, shared by
// every call of the model in the graph.
Value *capturedParam(Graph &g, const ModelGraph &mg, size_t i) {
  std::string name = capturedName(mg.index, i);
  for (Value *p : g.params)
    if (p->name == name) return p;
  return g.addParam(name, mg.graph->params[mg.numInputs + i]->type);
}

std::vector<Attr> substituted(std::vector<Attr> attrs, const std::map<std::string, Dim> &sizes) {
  for (Attr &a : attrs)
    if (auto *dims = std::get_if<std::vector<Dim>>(&a.value))
      for (Dim &d : *dims) d = d.substitute(sizes);
  return attrs;
}

Type substituted(Type t, const std::map<std::string, Dim> &sizes) {
  for (Dim &d : t.dims) d = d.substitute(sizes);
  return t;
}

// A region op's body at the caller's sizes: its parameters' types and its ops' shape attributes
// substituted, its ops added again (shape inference types them), nested scans likewise.
std::shared_ptr<Graph> bodyAt(const Graph &src, const std::map<std::string, Dim> &sizes, Loc loc);

// One op of a model's graph (or of a body) added to `g` with `operands`, at the caller's sizes.
Value *addAt(Graph &g, const Op &o, std::vector<Value *> operands, const std::map<std::string, Dim> &sizes, Loc loc,
             std::vector<Value *> *results) {
  if (o.kind != OpKind::Scan) {
    if (o.results.size() != 1) throw IRError{"an imported op with " + std::to_string(o.results.size()) + " results"};
    Value *r = g.add(o.kind, std::move(operands), substituted(o.attrs, sizes), loc);
    results->push_back(r);
    return r;
  }
  auto s = scanShape(o);
  if (!s || !o.body) throw IRError{"an imported scan without its counts or body"};
  std::vector<Value *> consts(operands.begin(), operands.begin() + long(s->consts));
  std::vector<Value *> inits(operands.begin() + long(s->consts), operands.begin() + long(s->consts + s->carries));
  std::vector<Value *> xs(operands.begin() + long(s->consts + s->carries), operands.end());
  Op *scan = addScan(g, bodyAt(*o.body, sizes, loc), consts, inits, xs, s->length.substitute(sizes), s->reverse, loc, s->checkpoint);
  *results = scan->results;
  return nullptr;
}

std::shared_ptr<Graph> bodyAt(const Graph &src, const std::map<std::string, Dim> &sizes, Loc loc) {
  auto g = std::make_shared<Graph>(src.name);
  std::unordered_map<const Value *, Value *> map;
  for (const Value *p : src.params) map[p] = g->addParam(p->name, substituted(p->type, sizes));
  for (const Op *o : src.ops) {
    std::vector<Value *> operands, results;
    for (const Value *x : o->operands) operands.push_back(map.at(x));
    addAt(*g, *o, std::move(operands), sizes, loc, &results);
    for (size_t i = 0; i < results.size() && i < o->results.size(); ++i) map[o->results[i]] = results[i];
  }
  for (const Value *o : src.outputs) g->outputs.push_back(map.at(o));
  g->renumber();
  return g;
}

} // namespace

LVRef Lowering::onnxLoad(Call *c) {
  auto *at = dyn_cast<Attribute>(c->func);
  auto *ns = at ? dyn_cast<Name>(at->value) : nullptr;
  if (!ns || ns->id != "onnx" || at->attr != "load") return nullptr;
  // A local or module name `onnx` is the program's own (the checker resolved it so too).
  Frame &f = *frames_.back();
  if (f.env.count("onnx") || f.module->globals.count("onnx")) return nullptr;
  // The checker recorded the call with its resolved path (sema::Program::externalLoads).
  auto load = p_.externalLoads.find(c);
  auto it = load == p_.externalLoads.end() ? p_.externalFunctions.end() : p_.externalFunctions.find(load->second.key());
  if (it == p_.externalFunctions.end()) unsupported("`onnx.load` with a path that is not a string literal", c->range);
  const bool split = load->second.split;
  const FunctionInfo &fn = *it->second;
  LV v;
  v.kind = LV::K::Function;
  v.fn = &fn;
  LVRef fnValue = mk(v);
  if (!split) return fnValue;
  // The model's tensors, in graph code: captured parameters (the host passes the model's values).
  const ModelGraph &mg = modelOf(fn, c->range);
  LV d;
  d.kind = LV::K::Dict;
  for (size_t i = 0; i < mg.constants.size(); ++i) d.fields.push_back({mg.constantNames[i], tensor(capturedParam(g_, mg, i))});
  return tuple({fnValue, mk(d)});
}

LVRef Lowering::callExternal(const FunctionInfo &fn, const std::map<std::string, LVRef> &env, SourceRange at) {
  const ModelGraph &mg = modelOf(fn, at);
  const Graph &src = *mg.graph;
  std::unordered_map<const Value *, Value *> map;
  std::map<std::string, Dim> sizes; // the model's symbolic dims -> the caller's sizes
  size_t first = fn.externalSplit ? 1 : 0;
  if (fn.params.size() != first + mg.numInputs) throw CompileError{"internal: the model's signature changed since it was checked", at};
  for (size_t i = 0; i < mg.numInputs; ++i) {
    const std::string &pname = fn.params[first + i].name;
    auto v = env.find(pname);
    Value *x = asTensor(v->second, src.params[i]->type.dtype, at);
    const Type &want = src.params[i]->type;
    if (x->type.dtype != want.dtype) x = op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{want.dtype, {}}}}, at);
    if (x->type.rank() != want.rank())
      throw CompileError{"a call of `" + fn.name + "` whose argument `" + pname + "` has rank " + std::to_string(x->type.rank()) +
                             " (the model's input has rank " + std::to_string(want.rank()) + ")",
                         at};
    for (size_t d = 0; d < want.rank(); ++d)
      if (want.dims[d].isSymbol() && !sizes.count(want.dims[d].symbols()[0])) sizes[want.dims[d].symbols()[0]] = x->type.dims[d];
    map[src.params[i]] = x;
  }
  LVRef dict = fn.externalSplit ? env.at(fn.params[0].name) : nullptr;
  for (size_t i = 0; i < mg.constants.size(); ++i) {
    const Value *p = src.params[mg.numInputs + i];
    if (!dict) {
      map[p] = capturedParam(g_, mg, i);
      continue;
    }
    // apply(params, x): the tensor of that name in the dict the program passes.
    LVRef field;
    if (dict->kind == LV::K::Dict)
      for (auto &[k, fv] : dict->fields)
        if (k == mg.constantNames[i]) field = fv;
    if (!field) throw CompileError{"a call of `" + fn.name + "` with a params dict without the model's tensor `" + mg.constantNames[i] + "`", at};
    Value *x = asTensor(field, p->type.dtype, at);
    if (x->type.rank() != p->type.rank())
      throw CompileError{"a call of `" + fn.name + "` whose params dict gives the model's tensor `" + mg.constantNames[i] + "` rank " +
                             std::to_string(x->type.rank()) + " (the model's has rank " + std::to_string(p->type.rank()) + ")",
                         at};
    map[p] = x;
  }
  // The model's ops at the caller's sizes, located at the call.
  for (const Op *o : src.ops) {
    std::vector<Value *> operands;
    for (const Value *x : o->operands) operands.push_back(map.at(x));
    if (o->kind != OpKind::Scan) {
      Value *r = op(o->kind, std::move(operands), substituted(o->attrs, sizes), at);
      if (o->results.size() != 1) throw CompileError{"internal: an imported op with " + std::to_string(o->results.size()) + " results", at};
      map[o->results[0]] = r;
      continue;
    }
    // A region op (the importer's RNN, GRU, LSTM): its body is copied at the caller's sizes.
    std::vector<Value *> results;
    try {
      addAt(g_, *o, std::move(operands), sizes, loc(at), &results);
    } catch (const IRError &e) {
      throw CompileError{"internal: an imported scan at the caller's sizes: " + e.message, at};
    }
    for (size_t i = 0; i < results.size() && i < o->results.size(); ++i) map[o->results[i]] = results[i];
  }
  std::vector<LVRef> outs;
  for (const Value *o : src.outputs) outs.push_back(tensor(map.at(o)));
  if (outs.size() == 1) return outs[0];
  return tuple(std::move(outs));
}

} // namespace tsr::ir::lowering
