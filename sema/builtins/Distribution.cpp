// The distribution builtins (spec 10): dist.mesh, dist.tensor, the collectives, ShardSpec, device
// and gpu.
#include "sema/builtins/Rules.h"



namespace tsr::sema {

namespace builtins {

namespace {

// ---- distribution (spec 10) ----------------------------------------------------------------------

bool isOpaque(const TypeRef &t, std::string_view what) { return t && t->is(K::Opaque) && t->name == what; }

/// A mesh axis argument: a name or a tuple of names (None: all axes).
bool meshAxisArg(CallSite &s, const ArgInfo *a, const char *what) {
  if (!given(a) || isUnknown(a)) return true;
  const Type &t = *a->type;
  if (t.is(K::Str)) return true;
  if ((t.is(K::Tuple) || t.is(K::List)) && t.lengthKnown &&
      std::all_of(t.elems.begin(), t.elems.end(), [](auto &e) { return isUnknown(e) || e->is(K::Str); }))
    return true;
  s.wrongKind(a, "a mesh axis name or a tuple of names", what);
  return false;
}

// dist.mesh(axes, shape): a device mesh with named axes, one extent per axis.
TypeRef ruleMesh(CallSite &s) {
  if (!s.expect({"axes", "shape"}, 2)) return T::unknown();
  const ArgInfo *a = s.arg(0, "axes"), *sh = s.arg(1, "shape");
  if (!meshAxisArg(s, a, "axes")) return T::unknown();
  auto dims = s.shape(sh, "shape");
  if (dims && !checkNonNegative(s, sh, *dims)) return T::unknown();
  if (dims && !isUnknown(a) && (a->type->is(K::Str) || a->type->lengthKnown)) {
    size_t n = a->type->is(K::Str) ? 1 : a->type->elems.size();
    if (n != dims->size()) {
      s.wrongKind(sh, "one extent per mesh axis (" + std::to_string(n) + ")", "shape");
      return T::unknown();
    }
  }
  return T::opaque("Mesh");
}

// ShardSpec(partition=None, mesh_axes=None): how a tensor's axes map to mesh axes (spec 10), as
// JAX's PartitionSpec: partition[i] names a tensor axis ("row": the second-to-last, "col": the
// last, or an int index; None: replicated) and mesh_axes[i] the mesh axis it is cut over. The
// type keeps both arguments' types (their literals) as fields, for dist.tensor's shard type.
TypeRef ruleShardSpec(CallSite &s) {
  if (!s.expect({"partition", "mesh_axes"}, 0)) return T::unknown();
  const ArgInfo *p = s.arg(0, "partition"), *m = s.arg(1, "mesh_axes");
  if (given(p) && !isUnknown(p) && !p->type->is(K::Tuple) && !p->type->is(K::List) && !p->type->is(K::Str) && !p->type->is(K::None)) {
    s.wrongKind(p, "a tuple of partition names (\"row\", \"col\", an axis index or None)", "partition");
    return T::unknown();
  }
  if (given(p) && !isUnknown(p) && (p->type->is(K::Tuple) || p->type->is(K::List)))
    for (auto &e : p->type->elems)
      if (e && !isUnknown(e) && !(e->is(K::Str) && (!e->strValue || *e->strValue == "row" || *e->strValue == "col")) && !intLike(*e) && !e->is(K::None)) {
        s.wrongKind(p, "a tuple of partition names (\"row\", \"col\", an axis index or None)", "partition");
        return T::unknown();
      }
  // mesh_axes: a name, or one entry per partition entry (a name, or None where it is None).
  if (given(m) && !isUnknown(m) && !m->type->is(K::None)) {
    const Type &mt = *m->type;
    bool ok = mt.is(K::Str) || ((mt.is(K::Tuple) || mt.is(K::List)) &&
                                std::all_of(mt.elems.begin(), mt.elems.end(), [](auto &e) { return isUnknown(e) || e->is(K::Str) || e->is(K::None); }));
    if (!ok) {
      s.wrongKind(m, "a mesh axis name or a tuple of names (or None)", "mesh_axes");
      return T::unknown();
    }
    const size_t np = !given(p) || isUnknown(p) || p->type->is(K::None) ? 0 : p->type->is(K::Str) ? 1 : p->type->elems.size();
    const size_t nm = mt.is(K::Str) ? 1 : mt.elems.size();
    const bool known = given(p) && !isUnknown(p) && (p->type->is(K::Str) || p->type->lengthKnown) && (mt.is(K::Str) || mt.lengthKnown);
    if (known && np != nm) {
      s.wrongKind(m, "one mesh axis per partition entry (" + std::to_string(np) + ")", "mesh_axes");
      return T::unknown();
    }
  }
  Type t = *T::opaque("ShardSpec");
  t.fields = {{"partition", given(p) ? p->type : T::none()}, {"mesh_axes", given(m) ? m->type : T::none()}};
  return std::make_shared<const Type>(std::move(t));
}

/// The entries of a ShardSpec argument's type (a name, a tuple or list of them): their types.
std::vector<TypeRef> specItems(const TypeRef &t) {
  if (!t || t->is(K::None)) return {};
  if (t->is(K::Tuple) || t->is(K::List)) return t->elems;
  return {t};
}

// dist.tensor(x, layout=None, mesh=None): this rank's shard of x under the layout (spec 10;
// docs/distributed.md "Tensor parallelism"): each dimension the layout partitions over a mesh axis
// of n ranks has 1/n of x's extent. Where the module's mesh and the layout are literals, a mesh
// axis the mesh lacks is E0701 and an extent that n does not divide is reported here (ArgKind,
// naming the tensor, the dimension, the axis and the sizes); otherwise the run checks both.
TypeRef ruleDistTensor(CallSite &s) {
  if (!s.expect({"x", "layout", "mesh"}, 1)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *l = s.arg(1, "layout"), *m = s.arg(2, "mesh");
  TypeRef t = s.tensorArg(x, "x");
  if (given(l) && !isUnknown(l) && !isOpaque(l->type, "ShardSpec")) {
    s.wrongKind(l, "a ShardSpec", "layout");
    return T::unknown();
  }
  if (given(m) && !isUnknown(m) && !isOpaque(m->type, "Mesh")) {
    s.wrongKind(m, "a mesh (from dist.mesh)", "mesh");
    return T::unknown();
  }
  if (!t) return T::unknown();
  if (!given(l) || isUnknown(l) || l->type->fields.size() != 2) return t;
  std::vector<TypeRef> parts = specItems(l->type->fields[0].second), axes = specItems(l->type->fields[1].second);
  std::optional<StaticMesh> mesh = s.enclosing && s.enclosing->module ? staticMesh(*s.enclosing->module) : std::nullopt;
  std::vector<Dim> dims = t->dims;
  const auto *xn = x->expr ? dyn_cast<ast::Name>(x->expr) : nullptr;
  const std::string name = xn ? "`" + xn->id + "`" : "a tensor";
  for (size_t i = 0; i < parts.size(); ++i) {
    const TypeRef &p = parts[i];
    if (!p || p->is(K::None)) continue;
    if (i >= axes.size() || !axes[i] || !axes[i]->is(K::Str) || !axes[i]->strValue || !t->rankKnown) {
      if (!t->rankKnown) return t;
      dims.clear();
      break; // not literals: the run checks
    }
    std::optional<int64_t> d;
    const int64_t rank = int64_t(t->dims.size());
    if (p->is(K::Str) && p->strValue) d = *p->strValue == "row" ? rank - 2 : rank - 1;
    else if (p->intValue && p->intValue->constantValue()) d = *p->intValue->constantValue() < 0 ? *p->intValue->constantValue() + rank : *p->intValue->constantValue();
    if (!d) return reshaped(t, std::vector<Dim>(t->dims.size(), Dim::unknown()));
    if (*d < 0 || *d >= rank) {
      s.wrongKind(l, "a partition of an axis of `x` (a tensor of " + std::to_string(rank) + " axes)", "layout");
      return T::unknown();
    }
    const std::string &ax = *axes[i]->strValue;
    if (!mesh) { dims[size_t(*d)] = Dim::unknown(); continue; }
    auto it = std::find(mesh->axes.begin(), mesh->axes.end(), ax);
    if (it == mesh->axes.end()) {
      std::string shape = "(";
      for (size_t k = 0; k < mesh->axes.size(); ++k) shape += (k ? ", \"" : "\"") + mesh->axes[k] + "\"";
      shape += mesh->axes.size() == 1 ? ",)" : ")";
      s.diags->report(DiagKind::MeshAxis, l->range, {"dist.tensor", ax, shape});
      return T::unknown();
    }
    const int64_t n = mesh->shape[size_t(it - mesh->axes.begin())];
    auto extent = t->dims[size_t(*d)].constantValue();
    if (!extent || n <= 0) { dims[size_t(*d)] = Dim::unknown(); continue; }
    if (*extent % n != 0) {
      s.diags->report(DiagKind::ArgKind, x->range,
                      {"dist.tensor", "a dimension " + std::to_string(*d) + " that divides among the " + std::to_string(n) +
                                          " ranks of mesh axis \"" + ax + "\"", "x",
                       name + " of type " + typeStr(t) + " (dimension " + std::to_string(*d) + " has " + std::to_string(*extent) + ")"});
      return T::unknown();
    }
    dims[size_t(*d)] = Dim::constant(*extent / n);
  }
  if (dims.size() != t->dims.size()) return reshaped(t, std::vector<Dim>(t->dims.size(), Dim::unknown()));
  return reshaped(t, std::move(dims));
}

bool reduceOpArg(CallSite &s, const ArgInfo *a) {
  if (!given(a) || isUnknown(a)) return true;
  auto v = s.constStr(a, "op");
  if (!a->type->is(K::Str)) return false;
  if (!v || *v == "sum" || *v == "mean" || *v == "max" || *v == "min" || *v == "prod") return true;
  s.wrongKind(a, "\"sum\", \"mean\", \"max\", \"min\" or \"prod\"", "op");
  return false;
}

// Collectives over a mesh axis: all_reduce(x, op="sum", axis=None) and broadcast(x, src=0,
// axis=None) keep x's type; all_gather(x, axis=None, dim=0) and reduce_scatter(x, op="sum",
// axis=None, dim=0) change the extent of `dim` (unknown: it depends on the mesh);
// all_to_all(x, split_dim=0, concat_dim=0, axis=None) changes both dims when they differ.
BuiltinRule ruleCollective(std::string which) {
  return [which](CallSite &s) -> TypeRef {
    std::vector<std::string> params = {"x"};
    if (which == "all_reduce") params = {"x", "op", "axis"};
    else if (which == "broadcast") params = {"x", "src", "axis"};
    else if (which == "all_gather") params = {"x", "axis", "dim"};
    else if (which == "reduce_scatter") params = {"x", "op", "axis", "dim"};
    else if (which == "all_to_all") params = {"x", "split_dim", "concat_dim", "axis"};
    if (!s.expect(params, 1)) return T::unknown();
    TypeRef t = s.tensorArg(s.arg(0, "x"), "x");
    auto idx = [&](std::string_view n) {
      return static_cast<size_t>(std::find(params.begin(), params.end(), n) - params.begin());
    };
    if (!meshAxisArg(s, s.arg(idx("axis"), "axis"), "axis")) return T::unknown();
    // An axis the module's mesh lacks (E0701), where the mesh and the axis are literals.
    if (const ArgInfo *ax = s.arg(idx("axis"), "axis"); given(ax) && !isUnknown(ax) && s.enclosing && s.enclosing->module)
      if (auto m = staticMesh(*s.enclosing->module)) {
        std::vector<std::string> names;
        if (ax->type->is(K::Str) && ax->type->strValue) names.push_back(*ax->type->strValue);
        else if (ax->type->is(K::Tuple) || ax->type->is(K::List))
          for (auto &e : ax->type->elems) if (e && e->is(K::Str) && e->strValue) names.push_back(*e->strValue);
        for (auto &n : names)
          if (std::find(m->axes.begin(), m->axes.end(), n) == m->axes.end()) {
            std::string shape = "(";
            for (size_t i = 0; i < m->axes.size(); ++i) shape += (i ? ", \"" : "\"") + m->axes[i] + "\"";
            shape += m->axes.size() == 1 ? ",)" : ")";
            s.diags->report(DiagKind::MeshAxis, ax->range, {"dist." + which, n, shape});
            return T::unknown();
          }
      }
    if (std::find(params.begin(), params.end(), "op") != params.end() && !reduceOpArg(s, s.arg(idx("op"), "op"))) return T::unknown();
    if (which == "broadcast") {
      const ArgInfo *src = s.arg(idx("src"), "src");
      if (given(src) && !isUnknown(src) && !intLike(*src->type)) {
        s.wrongKind(src, "an int", "src");
        return T::unknown();
      }
    }
    if (!t) return T::unknown();
    if (which == "all_reduce" || which == "broadcast" || !t->rankKnown) return t;
    std::vector<Dim> dims = t->dims;
    if (which == "all_to_all") {
      auto sd = oneAxis(s, s.arg(idx("split_dim"), "split_dim"), 0, dims.size(), "split_dim");
      auto cd = oneAxis(s, s.arg(idx("concat_dim"), "concat_dim"), 0, dims.size(), "concat_dim");
      if (!sd || !cd) return T::unknown();
      if (*sd != *cd) dims[*sd] = dims[*cd] = Dim::unknown();
      return reshaped(t, std::move(dims));
    }
    auto d = oneAxis(s, s.arg(idx("dim"), "dim"), 0, dims.size(), "dim");
    if (!d) return T::unknown();
    dims[*d] = Dim::unknown();
    return reshaped(t, std::move(dims));
  };
}

// device(spec): a placement for `with device(...)`: a device such as gpu[1], or a string
// ("cpu", "cuda:0").
TypeRef ruleDevice(CallSite &s) {
  if (!s.expect({"spec"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "spec");
  if (!isUnknown(a) && !a->type->is(K::Str) && !a->type->is(K::Opaque) && !intLike(*a->type)) {
    s.wrongKind(a, "a device (gpu[i]) or a device string", "spec");
    return T::unknown();
  }
  return T::opaque("device");
}

// dist.rank(), dist.world_size(): this process's rank and the run's number of ranks (extensions
// of spec 10: docs/distributed.md), ints known only when the program runs.
TypeRef ruleRankQuery(CallSite &s) {
  if (!s.expect({}, 0)) return T::unknown();
  return T::integer();
}

// gpu: the devices `tsr run` was given, indexed as gpu[i]; a value (the entry's isValue), whose
// type this rule gives.
TypeRef ruleGpu(CallSite &s) {
  if (!s.expect({}, 0)) return T::unknown();
  return T::opaque("gpu list");
}

} // namespace

} // namespace builtins

std::optional<StaticMesh> staticMesh(const ModuleInfo &m) {
  if (!m.ast) return std::nullopt;
  for (const ast::Stmt *st : m.ast->body) {
    auto *as = dyn_cast<ast::Assign>(st);
    auto *c = as ? dyn_cast<ast::Call>(as->value) : nullptr;
    auto *a = c ? dyn_cast<ast::Attribute>(c->func) : nullptr;
    auto *n = a ? dyn_cast<ast::Name>(a->value) : nullptr;
    if (!n || n->id != "dist" || a->attr != "mesh") continue;
    const ast::Expr *axes = nullptr, *shape = nullptr;
    size_t pos = 0;
    for (auto &arg : c->args) {
      if (arg.name.empty()) (pos++ == 0 ? axes : shape) = arg.value;
      else if (arg.name == "axes") axes = arg.value;
      else if (arg.name == "shape") shape = arg.value;
    }
    auto items = [](const ast::Expr *e) -> std::vector<const ast::Expr *> {
      if (auto *t = dyn_cast<ast::Tuple>(e)) return {t->elts.begin(), t->elts.end()};
      if (auto *l = dyn_cast<ast::List>(e)) return {l->elts.begin(), l->elts.end()};
      return {e};
    };
    if (!axes || !shape) return std::nullopt;
    StaticMesh mesh;
    mesh.range = c->range;
    for (auto *e : items(axes)) {
      auto *sl = dyn_cast<ast::StrLit>(e);
      if (!sl) return std::nullopt;
      mesh.axes.push_back(sl->value);
    }
    for (auto *e : items(shape)) {
      auto *il = dyn_cast<ast::IntLit>(e);
      if (!il) return std::nullopt;
      mesh.shape.push_back(il->value);
    }
    if (mesh.axes.size() != mesh.shape.size()) return std::nullopt;
    return mesh;
  }
  return std::nullopt;
}

namespace builtins {

void addDistributionBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // Meshes, collectives and sharded tensors run (runtime/dist, exec/host/TensorParallel.cpp,
  // docs/distributed.md); placement does not yet, and the checker refuses it with this reason (E0131).
  const char *placement = "placement does not run yet; `tsr run --device` chooses the one device a program runs on";
  add("dist.mesh", InHost, ruleMesh, "dist.mesh(axes, shape) -> Mesh", "a device mesh with named axes (its size: the run's ranks)", false)
      .inHost("dist_mesh").example("dist.mesh((\"data\",), (1,))");
  add("dist.rank", InHost, ruleRankQuery, "dist.rank() -> int", "this process's rank in the run (0 without `tsr run --devices`)", false)
      .inHost("dist_rank").example("dist.rank()");
  add("dist.world_size", InHost, ruleRankQuery, "dist.world_size() -> int", "the run's number of ranks (`tsr run --devices N`)", false)
      .inHost("dist_world_size").example("dist.world_size()");
  add("dist.tensor", InHost, ruleDistTensor, "dist.tensor(x, layout=None, mesh=None) -> Tensor",
      "this rank's shard of x under the layout (a ShardSpec) over the mesh", false)
      .inHost("dist_tensor").example("dist.tensor(x)");
  // The collectives: one Graph IR op each (ir/Ops.def), in graph code and as one-op graphs in
  // host code; differentiable (ir/autodiff/GradRules.cpp).
  add("dist.all_reduce", HostAndGraph, ruleCollective("all_reduce"), "dist.all_reduce(x, op=\"sum\", axis=None) -> Tensor",
      "x reduced over a mesh axis, on every device")
      .inGraph("collective").inHost("graph").example("dist.all_reduce(x)");
  add("dist.all_gather", HostAndGraph, ruleCollective("all_gather"), "dist.all_gather(x, axis=None, dim=0) -> Tensor",
      "the shards of x concatenated along dim")
      .inGraph("collective").inHost("graph").example("dist.all_gather(x)");
  add("dist.reduce_scatter", HostAndGraph, ruleCollective("reduce_scatter"),
      "dist.reduce_scatter(x, op=\"sum\", axis=None, dim=0) -> Tensor", "x reduced, each device keeping a shard along dim")
      .inGraph("collective").inHost("graph").example("dist.reduce_scatter(x)");
  add("dist.broadcast", HostAndGraph, ruleCollective("broadcast"), "dist.broadcast(x, src=0, axis=None) -> Tensor",
      "x from device src on every device")
      .inGraph("collective").inHost("graph").example("dist.broadcast(x)");
  add("dist.all_to_all", HostAndGraph, ruleCollective("all_to_all"),
      "dist.all_to_all(x, split_dim=0, concat_dim=0, axis=None) -> Tensor", "x split along split_dim and exchanged")
      .inGraph("collective").inHost("graph").example("dist.all_to_all(x)");
  add("ShardSpec", InHost, ruleShardSpec, "ShardSpec(partition=None, mesh_axes=None) -> ShardSpec",
      "how a tensor's axes map to mesh axes", false)
      .inHost("shard_spec").example("ShardSpec()");
  add("device", HostAndGraph, ruleDevice, "device(spec) -> device", "a placement for `with device(...)`", false)
      .example("device(\"cpu\")").notYet(HostAndGraph, placement);
  add("gpu", HostAndGraph, ruleGpu, "gpu[i] -> device", "the GPUs that `tsr run` was given", false)
      .asValue().example("gpu[0]").notYet(HostAndGraph, placement);
}

} // namespace builtins

} // namespace tsr::sema
