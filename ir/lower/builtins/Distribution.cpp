// Graph rules of the collectives (spec 10; docs/distributed.md): dist.all_reduce, all_gather,
// reduce_scatter, broadcast and all_to_all, each one op of ir/Ops.def whose `group` attribute is
// the size of the group its mesh axes span in this run (runtime/dist/Dist.h: the mesh that
// dist.mesh registered; one rank without a mesh: every group has one rank).
#include "ir/lower/builtins/Rules.h"
#include "runtime/dist/Dist.h"
#include "sema/Builtins.h"

#include <algorithm>

namespace tsr::ir::lowering {

namespace {

// The axis argument: a name, a tuple or list of names, or None (every rank): "dp", "dp,tp", "".
std::string distAxesOf(BuiltinCall &c, const LVRef &a) {
  if (!a || a->kind == LV::K::None) return {};
  if (a->kind == LV::K::Str) return a->s;
  if (a->kind == LV::K::Tuple || a->kind == LV::K::List) {
    std::string s;
    for (auto &e : a->elems) {
      if (e->kind != LV::K::Str) c.unsupported("a mesh axis that is not a name known at compile time");
      s += (s.empty() ? "" : ",") + e->s;
    }
    return s;
  }
  c.unsupported("a mesh axis that is not a name known at compile time");
}

int64_t distIntArg(BuiltinCall &c, size_t i, const char *name, int64_t dflt) {
  LVRef v = c.arg(i, name);
  if (!v || v->kind == LV::K::None) return dflt;
  auto k = c.L.constInt(v);
  if (!k) c.unsupported(std::string("`") + name + "` not known at compile time");
  return *k;
}

LVRef distCollective(BuiltinCall &c) {
  const std::string &n = c.b.name;
  Value *x = c.tensor(0, "x");
  std::vector<Attr> attrs;
  OpKind k;
  std::string axes;
  if (n == "dist.all_reduce") {
    k = OpKind::AllReduce;
    axes = distAxesOf(c, c.arg(2, "axis"));
    LVRef op = c.arg(1, "op");
    attrs.push_back({"op", op && op->kind == LV::K::Str ? op->s : std::string("sum")});
  } else if (n == "dist.all_gather") {
    k = OpKind::AllGather;
    axes = distAxesOf(c, c.arg(1, "axis"));
    attrs.push_back({"dim", distIntArg(c, 2, "dim", 0)});
  } else if (n == "dist.reduce_scatter") {
    k = OpKind::ReduceScatter;
    axes = distAxesOf(c, c.arg(2, "axis"));
    LVRef op = c.arg(1, "op");
    attrs.push_back({"op", op && op->kind == LV::K::Str ? op->s : std::string("sum")});
    attrs.push_back({"dim", distIntArg(c, 3, "dim", 0)});
  } else if (n == "dist.broadcast") {
    k = OpKind::DistBroadcast;
    axes = distAxesOf(c, c.arg(2, "axis"));
    attrs.push_back({"src", distIntArg(c, 1, "src", 0)});
  } else if (n == "dist.all_to_all") {
    k = OpKind::AllToAll;
    axes = distAxesOf(c, c.arg(3, "axis"));
    attrs.push_back({"split_dim", distIntArg(c, 1, "split_dim", 0)});
    attrs.push_back({"concat_dim", distIntArg(c, 2, "concat_dim", 0)});
  } else {
    c.unsupported("`" + n + "`");
  }
  // The group's size: from the run's mesh (tsr run made it before main), else from the main
  // module's literal mesh (tsrc), else the run's ranks (one without a launch). An axis the mesh
  // lacks is E0701 here too, for axes only the run knows (the checker reports literal ones).
  std::vector<std::string> names;
  for (size_t p = 0; !axes.empty();) {
    size_t q = axes.find(',', p);
    names.push_back(axes.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  std::vector<std::string> meshAxes;
  std::vector<int64_t> meshShape;
  if (const rt::dist::Mesh *m = rt::dist::currentMesh()) {
    meshAxes = m->axes;
    meshShape = m->shape;
  } else if (auto fixed = c.L.program().main ? sema::staticMesh(*c.L.program().main) : std::nullopt) {
    meshAxes = fixed->axes;
    meshShape = fixed->shape;
  }
  int64_t group = 1;
  if (meshAxes.empty()) {
    group = names.empty() ? int64_t(rt::dist::world().size) : 1;
    if (!names.empty() && rt::dist::world().size > 1)
      throw CompileError{"`" + n + "` over mesh axis \"" + names[0] + "\" without a mesh: dist.mesh(...) at module level names the axes", c.at,
                         DiagKind::MeshAxis, {n, names[0], "(none)"}, {}};
  } else {
    if (names.empty()) names = meshAxes;
    for (auto &nm : names) {
      auto it = std::find(meshAxes.begin(), meshAxes.end(), nm);
      if (it == meshAxes.end()) {
        std::string shape = "(";
        for (size_t i = 0; i < meshAxes.size(); ++i) shape += (i ? ", \"" : "\"") + meshAxes[i] + "\"";
        shape += meshAxes.size() == 1 ? ",)" : ")";
        throw CompileError{"`" + n + "` over mesh axis \"" + nm + "\", which the mesh " + shape + " lacks", c.at, DiagKind::MeshAxis, {n, nm, shape}, {}};
      }
      group *= meshShape[size_t(it - meshAxes.begin())];
    }
  }
  // Dimensions that must divide among the group: a run-time error naming the tensor's shape.
  attrs.insert(attrs.begin(), {"group", group});
  attrs.insert(attrs.begin(), {"axes", axes});
  return tensor(c.L.op(k, {x}, attrs, c.at));
}

} // namespace

void addDistributionRules(GraphRules &r) { r["collective"] = distCollective; }

} // namespace tsr::ir::lowering
