// Tensor parallelism in host code (TensorParallel.h).
#include "exec/host/TensorParallel.h"

#include "runtime/dist/Dist.h"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace tsr::host {

namespace {

using ir::autodiff::AxisSet;

std::string shardMeshText(const rt::dist::Mesh &m) {
  std::string s = "(";
  for (size_t i = 0; i < m.axes.size(); ++i) s += (i ? ", \"" : "\"") + m.axes[i] + "\"";
  return s + (m.axes.size() == 1 ? ",)" : ")");
}

// The entries of a ShardSpec argument: a tuple or list, one name or None.
std::vector<ValueRef> specEntries(const ValueRef &v) {
  if (!v || v->k == K::None) return {};
  if (v->k == K::Tuple || v->k == K::List) return v->items;
  return {v};
}

ValueRef layoutField(const ValueRef &d, const char *key) {
  if (d && d->k == K::Dict)
    for (auto &[k, v] : d->dict)
      if (k == key) return v;
  return nullptr;
}

} // namespace

ValueRef shardSpecRule(HostCall &c) {
  ValueRef p = c.arg(0, "partition"), m = c.arg(1, "mesh_axes");
  Value v;
  v.k = K::Dict;
  v.dict = {{"partition", p ? p : none()}, {"mesh_axes", m ? m : none()}};
  return mk(v);
}

ValueRef distTensorRule(HostCall &c) {
  ValueRef x = c.need(0, "x"), layout = c.arg(1, "layout");
  if (x->k != K::Tensor) c.fail("dist.tensor() needs a tensor for `x`, not a " + Interpreter::Impl::kindName(x));
  std::vector<ValueRef> parts = specEntries(layoutField(layout, "partition")), axes = specEntries(layoutField(layout, "mesh_axes"));
  const rt::dist::Mesh *mesh = rt::dist::currentMesh();
  // The tensor as the program spells it (`whole["a"]`), for errors.
  std::string name = "x";
  if (c.c)
    for (const auto &a : c.c->args)
      if (a.name.empty() || a.name == "x") {
        name = "`" + c.I.statementText(a.value->range) + "`";
        break;
      }
  const std::vector<int64_t> shape = x->t.shape();
  const int64_t rank = int64_t(shape.size());
  Value out = *x;
  std::vector<int64_t> cutDims;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ValueRef &p = parts[i];
    if (p->k == K::None) continue;
    if (i >= axes.size() || axes[i]->k != K::Str)
      c.fail("dist.tensor(): the layout's partition entry " + std::to_string(i) + " has no mesh axis name in `mesh_axes`");
    const std::string &ax = axes[i]->s;
    int64_t d = 0;
    if (p->k == K::Str && (p->s == "row" || p->s == "col")) d = p->s == "row" ? rank - 2 : rank - 1;
    else if (p->k == K::Int) d = p->i < 0 ? p->i + rank : p->i;
    else c.fail("dist.tensor(): a partition entry must be \"row\", \"col\", an axis index or None");
    if (d < 0 || d >= rank)
      c.fail("dist.tensor(): the layout partitions axis " + std::to_string(d) + " of " + name + ", which has shape " + rt::formatShape(shape));
    if (std::find(cutDims.begin(), cutDims.end(), d) != cutDims.end()) c.fail("dist.tensor(): the layout partitions axis " + std::to_string(d) + " twice");
    cutDims.push_back(d);
    if (!mesh) {
      if (rt::dist::world().size == 1) continue; // one rank: every shard is the whole
      throw RuntimeError{"`dist.tensor` over mesh axis \"" + ax + "\" without a mesh: dist.mesh(...) at module level names the axes", c.at, 1, "E0701", {}};
    }
    auto it = std::find(mesh->axes.begin(), mesh->axes.end(), ax);
    if (it == mesh->axes.end())
      throw RuntimeError{"`dist.tensor` over mesh axis \"" + ax + "\", which the mesh " + shardMeshText(*mesh) + " lacks", c.at, 1, "E0701", {}};
    if (out.varying.count(ax)) c.fail("dist.tensor(): the layout cuts " + name + " over mesh axis \"" + ax + "\" twice");
    const size_t a = size_t(it - mesh->axes.begin());
    const int64_t n = mesh->shape[a];
    const int64_t extent = out.t.shape()[size_t(d)];
    if (extent % n != 0)
      c.fail("dist.tensor(): dimension " + std::to_string(d) + " of " + name + " (shape " + rt::formatShape(shape) + ") has " + std::to_string(extent) +
             ", which does not divide among the " + std::to_string(n) + " ranks of mesh axis \"" + ax + "\"");
    // This rank's coordinate on the axis: ranks are the mesh coordinates' row-major index.
    int64_t stride = 1;
    for (size_t k = a + 1; k < mesh->shape.size(); ++k) stride *= mesh->shape[k];
    const int64_t coord = (rt::dist::world().rank / stride) % n;
    out.t = rt::dist::splitAlong(out.t, d, n)[size_t(coord)];
    if (n > 1) out.varying.insert(ax);
  }
  return mk(out);
}

void leavesOf(const ValueRef &v, std::vector<const Value *> &out) {
  switch (v->k) {
  case K::Tensor: case K::Key: out.push_back(v.get()); return;
  case K::List: case K::Tuple: for (auto &e : v->items) leavesOf(e, out); return;
  case K::Dict: for (auto &[k, e] : v->dict) leavesOf(e, out); return;
  default: return;
  }
}

std::optional<ir::autodiff::VaryingParams> varyingParams(const std::vector<const Value *> &leaves) {
  bool any = false;
  for (const Value *l : leaves) any |= l && !l->varying.empty();
  const rt::dist::Mesh *mesh = rt::dist::currentMesh();
  if (!any || !mesh) return std::nullopt;
  ir::autodiff::VaryingParams vp;
  vp.meshAxes = mesh->axes;
  vp.meshShape = mesh->shape;
  for (const Value *l : leaves) vp.params.push_back(l ? AxisSet(l->varying.begin(), l->varying.end()) : AxisSet{});
  return vp;
}

std::string varyingKey(const ir::autodiff::VaryingParams &vp) {
  std::string k = "varying:";
  for (size_t i = 0; i < vp.params.size(); ++i) {
    if (vp.params[i].empty()) continue;
    k += std::to_string(i) + "=" + vp.axesAttr(vp.params[i]) + ";";
  }
  return k + "|";
}

void tagResult(const ValueRef &result, const ir::Graph &g, const ir::autodiff::VaryingParams &vp) {
  // The outputs' axes, once per graph (its cache key includes the parameters' axes, so a graph
  // always meets the same ones; the op count guards against a graph rewritten since).
  static std::map<uint64_t, std::pair<size_t, std::vector<AxisSet>>> known;
  auto &[ops, axes] = known[g.serial];
  if (ops != g.ops.size() || axes.size() != g.outputs.size()) {
    ir::autodiff::VaryingAnalysis va(g, vp);
    axes.clear();
    for (const ir::Value *o : g.outputs) axes.push_back(va.of(o));
    ops = g.ops.size();
  }
  std::vector<const Value *> leaves;
  leavesOf(result, leaves);
  // Results are fresh values of this call (rebuild made them), so tagging them in place changes
  // no value the program holds elsewhere.
  for (size_t i = 0; i < leaves.size() && i < axes.size(); ++i) const_cast<Value *>(leaves[i])->varying = axes[i];
}

void reportCollectives(const ir::Graph &g, int64_t before) {
  static const bool on = [] {
    const char *e = std::getenv("TSR_DIST_REPORT");
    return e && *e == '1';
  }();
  if (!on) return;
  const int64_t ran = rt::dist::collectivesRun() - before;
  if (ran > 0) std::fprintf(stderr, "collectives: rank %d: graph `%s` ran %lld\n", rt::dist::world().rank, g.name.c_str(), static_cast<long long>(ran));
}

} // namespace tsr::host
