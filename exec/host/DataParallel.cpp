// Data parallelism in host calls (DataParallel.h).
#include "exec/host/DataParallel.h"

#include "runtime/dist/Dist.h"

#include <map>

namespace tsr::host {

namespace {

// The mean over the ranks of `t` as a one-op graph (an all_reduce op) run by the program's
// executor, so that its backend runs it (NCCL on GPUs: exec/cuda/NcclSteps.h; Gloo on the CPU).
// One graph per axes, dtype and shape, kept for the process.
rt::Tensor meanOverRanks(Interpreter::Impl &I, const rt::Tensor &t, const std::string &axes, int64_t group) {
  static ir::Module mod;
  static std::map<std::string, const ir::Graph *> graphs;
  std::string key = axes + "|" + std::string(dtypeName(t.dtype())) + "|" + rt::formatShape(t.shape());
  const ir::Graph *&g = graphs[key];
  if (!g) {
    auto made = std::make_unique<ir::Graph>("data_parallel_mean");
    std::vector<Dim> dims;
    for (int64_t d : t.shape()) dims.push_back(Dim::constant(d));
    ir::Value *x = made->addParam("x", ir::Type::tensor(dims, t.dtype()));
    made->outputs.push_back(made->add(ir::OpKind::AllReduce, {x}, {{"axes", axes}, {"group", group}, {"op", std::string("mean")}}));
    g = made.get();
    mod.graphs.push_back(std::move(made));
  }
  return I.exec.run(mod, *g, {t}).at(0);
}

} // namespace

std::optional<std::string> dataParallelAxes(const sema::FunctionInfo &fn) {
  if (!fn.distributed || !fn.def) return std::nullopt;
  std::string strategy;
  for (const ast::Decorator &d : fn.def->decorators) {
    if (d.dotted() != "distribute") continue;
    for (const ast::Arg &a : d.args)
      if (a.name == "strategy")
        if (auto *s = dyn_cast<ast::StrLit>(a.value)) strategy = s->value;
  }
  if (strategy != "data_parallel" || rt::dist::world().size == 1) return std::nullopt;
  const rt::dist::Mesh *m = rt::dist::currentMesh();
  if (m && std::find(m->axes.begin(), m->axes.end(), "dp") != m->axes.end()) return std::string("dp");
  return std::string();
}

ValueRef callDataParallel(Interpreter::Impl &I, const sema::FunctionInfo &fn, const std::string &axes, const std::vector<ValueRef> &args,
                          const std::function<ValueRef(const std::vector<ValueRef> &)> &call, SourceRange at) {
  rt::dist::Group g;
  try {
    g = rt::dist::groupOf(axes);
  } catch (const std::exception &e) {
    I.fail(e.what(), at);
  }
  const int64_t n = int64_t(g.size());
  const std::string over = axes.empty() ? "every rank" : "mesh axis " + axes;
  // The batch: this rank's rows of every tensor after the first argument (in tuples, lists and
  // dicts too).
  std::function<ValueRef(const ValueRef &, const std::string &)> shard = [&](const ValueRef &v, const std::string &name) -> ValueRef {
    if (v->k == K::Tensor) {
      if (v->t.ndim() == 0) return v;
      if (v->t.shape()[0] % n != 0)
        I.fail("data_parallel `" + fn.name + "`: the batch argument " + name + " has " + std::to_string(v->t.shape()[0]) +
                   " rows (shape " + rt::formatShape(v->t.shape()) + "), which do not divide among the " + std::to_string(n) + " ranks of " + over,
               at);
      Value out = *v;
      out.t = rt::dist::splitAlong(v->t, 0, n)[size_t(g.index)];
      return mk(out);
    }
    if (v->k == K::Tuple || v->k == K::List) {
      Value out = *v;
      for (size_t i = 0; i < out.items.size(); ++i) out.items[i] = shard(out.items[i], name + "[" + std::to_string(i) + "]");
      return mk(out);
    }
    if (v->k == K::Dict) {
      Value out = *v;
      for (auto &[k, x] : out.dict) x = shard(x, name + "[\"" + k + "\"]");
      return mk(out);
    }
    return v;
  };
  std::vector<ValueRef> local = args;
  for (size_t i = 1; i < local.size(); ++i) {
    std::string name = i < fn.params.size() ? "`" + fn.params[i].name + "`" : "#" + std::to_string(i);
    local[i] = shard(local[i], name);
  }
  ValueRef r = call(local);
  // The mean over the ranks of every float tensor of the result.
  std::function<ValueRef(const ValueRef &)> mean = [&](const ValueRef &v) -> ValueRef {
    if (v->k == K::Tensor && isFloat(v->t.dtype())) {
      Value out = *v;
      try {
        out.t = meanOverRanks(I, v->t, axes, n);
      } catch (const std::exception &e) {
        I.fail(e.what(), at);
      }
      return mk(out);
    }
    if (v->k == K::Tuple || v->k == K::List) {
      Value out = *v;
      for (auto &x : out.items) x = mean(x);
      return mk(out);
    }
    if (v->k == K::Dict) {
      Value out = *v;
      for (auto &[k, x] : out.dict) x = mean(x);
      return mk(out);
    }
    return v;
  };
  return mean(r);
}

} // namespace tsr::host
