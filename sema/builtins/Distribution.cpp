// The distribution builtins (spec 10): dist.mesh, dist.tensor, the collectives, ShardSpec, device
// and gpu.
#include "sema/builtins/Rules.h"



namespace tsr::sema::builtins {

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

// ShardSpec(partition=None, mesh_axes=None): how a tensor's axes map to mesh axes.
TypeRef ruleShardSpec(CallSite &s) {
  if (!s.expect({"partition", "mesh_axes"}, 0)) return T::unknown();
  const ArgInfo *p = s.arg(0, "partition"), *m = s.arg(1, "mesh_axes");
  if (given(p) && !isUnknown(p) && !p->type->is(K::Tuple) && !p->type->is(K::List) && !p->type->is(K::Str)) {
    s.wrongKind(p, "a tuple of partition names", "partition");
    return T::unknown();
  }
  if (!meshAxisArg(s, m, "mesh_axes")) return T::unknown();
  return T::opaque("ShardSpec");
}

// dist.tensor(x, layout=None, mesh=None): x placed on a mesh with a layout; x's type.
TypeRef ruleDistTensor(CallSite &s) {
  if (!s.expect({"x", "layout", "mesh"}, 1)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *l = s.arg(1, "layout"), *m = s.arg(2, "mesh");
  TypeRef t = s.tensorArg(x, "x");
  if (given(l) && !isUnknown(l) && !isOpaque(l->type, "ShardSpec")) s.wrongKind(l, "a ShardSpec", "layout");
  if (given(m) && !isUnknown(m) && !isOpaque(m->type, "Mesh")) s.wrongKind(m, "a mesh (from dist.mesh)", "mesh");
  return t ? t : T::unknown();
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

// gpu: the devices `tsr run` was given, indexed as gpu[i]; a value (the entry's isValue), whose
// type this rule gives.
TypeRef ruleGpu(CallSite &s) {
  if (!s.expect({}, 0)) return T::unknown();
  return T::opaque("gpu list");
}

} // namespace

void addDistributionBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // Issue 15 implements the distribution builtins; until then only the checker knows them, and
  // it refuses their calls in functions with this reason (E0131). Module-level meshes stay, for
  // @distribute(mesh=...).
  const char *why = "meshes, sharded tensors and collectives do not run yet; a program runs on one device";
  const char *placement = "placement does not run yet; `tsr run --device` chooses the one device a program runs on";
  add("dist.mesh", InHost, ruleMesh, "dist.mesh(axes, shape) -> Mesh", "a device mesh with named axes", false)
      .example("dist.mesh((\"data\",), (1,))").notYet(InHost, why);
  add("dist.tensor", InHost, ruleDistTensor, "dist.tensor(x, layout=None, mesh=None) -> Tensor", "x distributed over a mesh", false)
      .example("dist.tensor(x)").notYet(InHost, why);
  add("dist.all_reduce", HostAndGraph, ruleCollective("all_reduce"), "dist.all_reduce(x, op=\"sum\", axis=None) -> Tensor",
      "x reduced over a mesh axis, on every device", false)
      .example("dist.all_reduce(x)").notYet(HostAndGraph, why);
  add("dist.all_gather", HostAndGraph, ruleCollective("all_gather"), "dist.all_gather(x, axis=None, dim=0) -> Tensor",
      "the shards of x concatenated along dim", false)
      .example("dist.all_gather(x)").notYet(HostAndGraph, why);
  add("dist.reduce_scatter", HostAndGraph, ruleCollective("reduce_scatter"),
      "dist.reduce_scatter(x, op=\"sum\", axis=None, dim=0) -> Tensor", "x reduced, each device keeping a shard along dim", false)
      .example("dist.reduce_scatter(x)").notYet(HostAndGraph, why);
  add("dist.broadcast", HostAndGraph, ruleCollective("broadcast"), "dist.broadcast(x, src=0, axis=None) -> Tensor",
      "x from device src on every device", false)
      .example("dist.broadcast(x)").notYet(HostAndGraph, why);
  add("dist.all_to_all", HostAndGraph, ruleCollective("all_to_all"),
      "dist.all_to_all(x, split_dim=0, concat_dim=0, axis=None) -> Tensor", "x split along split_dim and exchanged", false)
      .example("dist.all_to_all(x)").notYet(HostAndGraph, why);
  add("ShardSpec", InHost, ruleShardSpec, "ShardSpec(partition=None, mesh_axes=None) -> ShardSpec",
      "how a tensor's axes map to mesh axes", false)
      .example("ShardSpec()").notYet(InHost, why);
  add("device", HostAndGraph, ruleDevice, "device(spec) -> device", "a placement for `with device(...)`", false)
      .example("device(\"cpu\")").notYet(HostAndGraph, placement);
  add("gpu", HostAndGraph, ruleGpu, "gpu[i] -> device", "the GPUs that `tsr run` was given", false)
      .asValue().example("gpu[0]").notYet(HostAndGraph, placement);
}

} // namespace tsr::sema::builtins
