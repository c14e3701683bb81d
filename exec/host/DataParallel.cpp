// Data parallelism in host calls (DataParallel.h).
#include "exec/host/DataParallel.h"

#include "runtime/dist/Dist.h"

#include <cstdio>
#include <cstdlib>
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

// The means over the ranks of several tensors of one dtype with one all-reduce (a bucket, as
// PyTorch DDP's): a graph that flattens and concatenates them, all-reduces the concatenation and
// slices it back into their shapes. One graph per axes, dtype and shapes, kept for the process.
std::vector<rt::Tensor> meanOverRanksBucket(Interpreter::Impl &I, const std::vector<rt::Tensor> &ts, const std::string &axes, int64_t group) {
  if (ts.size() == 1) return {meanOverRanks(I, ts[0], axes, group)};
  static ir::Module mod;
  static std::map<std::string, const ir::Graph *> graphs;
  std::string key = axes + "|" + std::string(dtypeName(ts[0].dtype()));
  for (const rt::Tensor &t : ts) key += "|" + rt::formatShape(t.shape());
  const ir::Graph *&g = graphs[key];
  if (!g) {
    auto made = std::make_unique<ir::Graph>("data_parallel_mean_bucket");
    std::vector<ir::Value *> flat;
    for (size_t i = 0; i < ts.size(); ++i) {
      std::vector<Dim> dims;
      for (int64_t d : ts[i].shape()) dims.push_back(Dim::constant(d));
      ir::Value *x = made->addParam("x" + std::to_string(i), ir::Type::tensor(dims, ts[i].dtype()));
      flat.push_back(made->add(ir::OpKind::Reshape, {x}, {{"shape", std::vector<Dim>{Dim::constant(ts[i].numel())}}}));
    }
    ir::Value *cat = made->add(ir::OpKind::Concat, flat, {{"axis", int64_t(0)}});
    ir::Value *avg = made->add(ir::OpKind::AllReduce, {cat}, {{"axes", axes}, {"group", group}, {"op", std::string("mean")}});
    int64_t off = 0;
    for (const rt::Tensor &t : ts) {
      ir::Value *part = made->add(ir::OpKind::Slice, {avg},
                                  {{"start", std::vector<Dim>{Dim::constant(off)}}, {"stop", std::vector<Dim>{Dim::constant(off + t.numel())}},
                                   {"step", std::vector<int64_t>{1}}});
      std::vector<Dim> dims;
      for (int64_t d : t.shape()) dims.push_back(Dim::constant(d));
      made->outputs.push_back(made->add(ir::OpKind::Reshape, {part}, {{"shape", dims}}));
      off += t.numel();
    }
    g = made.get();
    mod.graphs.push_back(std::move(made));
  }
  return I.exec.run(mod, *g, ts);
}

// The bucket size: TSR_DP_BUCKET_MB (default 25, PyTorch DDP's bucket_cap_mb); 0: one all-reduce
// per tensor.
size_t bucketBytes() {
  static const size_t b = [] {
    const char *e = std::getenv("TSR_DP_BUCKET_MB");
    if (!e || !*e) return size_t(25) << 20;
    char *end = nullptr;
    double mb = std::strtod(e, &end);
    if (*end || mb < 0) return size_t(25) << 20;
    return size_t(mb * double(1 << 20));
  }();
  return b;
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
  // The mean over the ranks of every float tensor of the result, in buckets: the tensors in the
  // result's order (tuples, lists, dicts), consecutive ones of one dtype joined while the bucket
  // stays within bucketBytes(), one all-reduce per bucket.
  std::vector<rt::Tensor> leaves;
  std::function<void(const ValueRef &)> collect = [&](const ValueRef &v) {
    if (v->k == K::Tensor && isFloat(v->t.dtype())) leaves.push_back(v->t);
    if (v->k == K::Tuple || v->k == K::List)
      for (auto &x : v->items) collect(x);
    if (v->k == K::Dict)
      for (auto &[k, x] : v->dict) collect(x);
  };
  collect(r);
  std::vector<rt::Tensor> means;
  means.reserve(leaves.size());
  const size_t cap = bucketBytes();
  size_t buckets = 0;
  try {
    for (size_t i = 0; i < leaves.size();) {
      size_t j = i + 1, bytes = size_t(leaves[i].numel()) * size_t(dtypeBits(leaves[i].dtype()) / 8);
      while (cap > 0 && j < leaves.size() && leaves[j].dtype() == leaves[i].dtype()) {
        size_t b = size_t(leaves[j].numel()) * size_t(dtypeBits(leaves[j].dtype()) / 8);
        if (bytes + b > cap) break;
        bytes += b;
        ++j;
      }
      std::vector<rt::Tensor> bucket(leaves.begin() + long(i), leaves.begin() + long(j));
      for (rt::Tensor &m : meanOverRanksBucket(I, bucket, axes, n)) means.push_back(std::move(m));
      ++buckets;
      i = j;
    }
  } catch (const std::exception &e) {
    I.fail(e.what(), at);
  }
  if (const char *rep = std::getenv("TSR_DP_REPORT"); rep && *rep == '1')
    std::fprintf(stderr, "data_parallel `%s`: %zu tensor(s) in %zu all-reduce(s)\n", fn.name.c_str(), leaves.size(), buckets);
  size_t next = 0;
  std::function<ValueRef(const ValueRef &)> mean = [&](const ValueRef &v) -> ValueRef {
    if (v->k == K::Tensor && isFloat(v->t.dtype())) {
      Value out = *v;
      out.t = means.at(next++);
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
