// Data parallelism in host calls (DataParallel.h).
#include "exec/host/DataParallel.h"

#include "runtime/dist/Dist.h"

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <unordered_map>

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

// This rank's part of a batch argument: rows [index * rows, (index + 1) * rows) of `t` along its
// first axis, as a one-op graph (a slice) run by the program's executor, so that a batch held by
// a GPU is cut there (a copy program of the part) rather than brought to the host, cut into every
// rank's part and sent back: on 4 H200s that took about 14 ms of each ViT-B step (a 77 MB global
// batch). One graph per dtype, shape, parts and index, kept for the process.
rt::Tensor rowsOf(Interpreter::Impl &I, const rt::Tensor &t, int64_t parts, int64_t index) {
  static ir::Module mod;
  static std::map<std::string, const ir::Graph *> graphs;
  std::string key = std::string(dtypeName(t.dtype())) + "|" + rt::formatShape(t.shape()) + "|" + std::to_string(parts) + "|" +
                    std::to_string(index);
  const ir::Graph *&g = graphs[key];
  if (!g) {
    auto made = std::make_unique<ir::Graph>("data_parallel_rows");
    std::vector<Dim> dims, start, stop;
    const int64_t rows = t.shape()[0] / parts;
    for (size_t d = 0; d < t.shape().size(); ++d) {
      const int64_t n = t.shape()[d];
      dims.push_back(Dim::constant(n));
      start.push_back(Dim::constant(d == 0 ? index * rows : 0));
      stop.push_back(Dim::constant(d == 0 ? (index + 1) * rows : n));
    }
    ir::Value *x = made->addParam("x", ir::Type::tensor(dims, t.dtype()));
    ir::Value *part = made->add(ir::OpKind::Slice, {x},
                                {{"start", start}, {"stop", stop}, {"step", std::vector<int64_t>(t.shape().size(), 1)}});
    made->outputs.push_back(part);
    g = made.get();
    mod.graphs.push_back(std::move(made));
  }
  return I.exec.run(mod, *g, {t}).at(0);
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

// Where the gradient all-reduces go (TSR_DP_OVERLAP): "1" inside the backward graph, each
// bucket's right after the step that completes it; "end": inside the graph but after the whole
// backward (the overlap test's control); "0" (default): the host path after the graph call. The
// default is the host path because it measured faster: the ViT-B step on 2 H200s (dp_scaling.sh,
// 6 steps, one call) took 77.2 ms per step (mean; best 59.2) with the overlap against 63.2 (best
// 54.9) without; docs/performance.md, "Collectives".
enum class Placement { Overlap, End, Host };
Placement placement() {
  static const Placement p = [] {
    const char *e = std::getenv("TSR_DP_OVERLAP");
    std::string v = e ? e : "";
    return v == "1" ? Placement::Overlap : v == "end" ? Placement::End : Placement::Host;
  }();
  return p;
}

// The data-parallel call whose graph is being asked for (callDataParallel sets it around the
// transform's call; the first graph lowered or fetched under it takes it).
struct InGraph {
  std::string axes;
  int64_t group = 1;
  bool claimed = false; // a graph call took it
  bool averaged = false; // that graph averages its float outputs
  size_t tensors = 0, buckets = 0;
};
thread_local InGraph *current = nullptr;

// The graphs given the averages, with their (tensors, buckets).
std::map<const ir::Graph *, std::pair<size_t, size_t>> &averagedGraphs() {
  static std::map<const ir::Graph *, std::pair<size_t, size_t>> m;
  return m;
}

} // namespace

std::string dataParallelGraphKey() {
  if (!current || current->claimed) return "";
  current->claimed = true;
  return "|dp-mean:" + current->axes + ":" + std::to_string(current->group) + ":" + std::to_string(bucketBytes()) +
         (placement() == Placement::End ? ":end" : "");
}

void addDataParallelMeans(ir::Graph &g) {
  if (!current) return;
  // The float outputs, each once, in the order the graph computes them (a parameter first): the
  // backward produces the last layer's gradients first, so buckets fill in that order, as DDP's
  // buckets follow the reverse order of the parameters.
  std::unordered_map<const ir::Op *, size_t> index;
  for (size_t i = 0; i < g.ops.size(); ++i) index[g.ops[i]] = i;
  std::vector<ir::Value *> vals;
  for (ir::Value *v : g.outputs) {
    if (v->type.isKey() || !isFloat(v->type.dtype) || std::find(vals.begin(), vals.end(), v) != vals.end()) continue;
    for (const Dim &d : v->type.dims)
      if (!d.constantValue()) return; // a symbolic extent: left to the host path
    vals.push_back(v);
  }
  if (vals.empty()) return;
  auto pos = [&](const ir::Value *v) { return v->def ? int64_t(index.at(v->def)) : int64_t(-1); };
  std::stable_sort(vals.begin(), vals.end(), [&](const ir::Value *a, const ir::Value *b) { return pos(a) < pos(b); });
  auto numel = [](const ir::Value *v) {
    int64_t n = 1;
    for (const Dim &d : v->type.dims) n *= *d.constantValue();
    return n;
  };
  const size_t n0 = g.ops.size(), cap = bucketBytes();
  std::vector<std::pair<int64_t, std::vector<ir::Op *>>> early; // (after which op, the bucket's flatten, concat, all_reduce)
  std::vector<ir::Op *> tail;                                   // the slices back, after the backward
  std::map<const ir::Value *, ir::Value *> replaced;
  const std::vector<ir::Attr> reduce = {{"axes", current->axes}, {"group", current->group}, {"op", std::string("mean")}, {"overlap", int64_t(1)}};
  size_t buckets = 0;
  for (size_t i = 0; i < vals.size();) {
    const DType dt = vals[i]->type.dtype;
    size_t j = i + 1, bytes = size_t(numel(vals[i])) * size_t(dtypeBits(dt) / 8);
    while (cap > 0 && j < vals.size() && vals[j]->type.dtype == dt) {
      size_t b = size_t(numel(vals[j])) * size_t(dtypeBits(dt) / 8);
      if (bytes + b > cap) break;
      bytes += b;
      ++j;
    }
    size_t before = g.ops.size();
    if (j == i + 1) {
      replaced[vals[i]] = g.add(ir::OpKind::AllReduce, {vals[i]}, reduce);
      early.push_back({pos(vals[i]), {g.ops.begin() + long(before), g.ops.end()}});
    } else {
      std::vector<ir::Value *> flat;
      for (size_t k = i; k < j; ++k)
        flat.push_back(g.add(ir::OpKind::Reshape, {vals[k]}, {{"shape", std::vector<Dim>{Dim::constant(numel(vals[k]))}}}));
      ir::Value *cat = g.add(ir::OpKind::Concat, flat, {{"axis", int64_t(0)}});
      ir::Value *avg = g.add(ir::OpKind::AllReduce, {cat}, reduce);
      early.push_back({pos(vals[j - 1]), {g.ops.begin() + long(before), g.ops.end()}});
      before = g.ops.size();
      int64_t off = 0;
      for (size_t k = i; k < j; ++k) {
        ir::Value *part = g.add(ir::OpKind::Slice, {avg},
                                {{"start", std::vector<Dim>{Dim::constant(off)}}, {"stop", std::vector<Dim>{Dim::constant(off + numel(vals[k]))}},
                                 {"step", std::vector<int64_t>{1}}});
        replaced[vals[k]] = g.add(ir::OpKind::Reshape, {part}, {{"shape", vals[k]->type.dims}});
        off += numel(vals[k]);
      }
      tail.insert(tail.end(), g.ops.begin() + long(before), g.ops.end());
    }
    ++buckets;
    i = j;
  }
  // The new order: each bucket's all-reduce right after the op that completes it (the compute
  // stream goes on with the rest of the backward while NCCL reduces it), or, under
  // TSR_DP_OVERLAP=end, all after the backward; the slices back last.
  std::vector<ir::Op *> ops(g.ops.begin(), g.ops.begin() + long(n0)), order;
  const bool atEnd = placement() == Placement::End;
  size_t e = 0;
  for (int64_t p = -1; p < int64_t(n0); ++p) {
    if (p >= 0) order.push_back(ops[size_t(p)]);
    for (; !atEnd && e < early.size() && early[e].first == p; ++e) order.insert(order.end(), early[e].second.begin(), early[e].second.end());
  }
  for (; e < early.size(); ++e) order.insert(order.end(), early[e].second.begin(), early[e].second.end());
  order.insert(order.end(), tail.begin(), tail.end());
  g.ops = std::move(order);
  for (ir::Value *&o : g.outputs)
    if (auto it = replaced.find(o); it != replaced.end()) o = it->second;
  averagedGraphs()[&g] = {vals.size(), buckets};
}

void dataParallelGraphRan(const ir::Graph &g) {
  if (!current) return;
  auto it = averagedGraphs().find(&g);
  if (it == averagedGraphs().end()) return;
  current->averaged = true;
  current->tensors = it->second.first;
  current->buckets = it->second.second;
}

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
                          const std::function<ValueRef(const std::vector<ValueRef> &)> &call, SourceRange at, bool inGraph) {
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
      try {
        out.t = rowsOf(I, v->t, n, int64_t(g.index));
      } catch (const std::exception &e) {
        I.fail("data_parallel `" + fn.name + "`: cutting the batch argument " + name + ": " + e.what(), at);
      }
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
  // A grad / value_and_grad: the averages inside its graph (addDataParallelMeans), unless
  // TSR_DP_OVERLAP=0 or the graph could not take them (then the host path below).
  InGraph in{axes, n};
  ValueRef r;
  {
    InGraph *saved = current;
    current = (inGraph && placement() != Placement::Host) ? &in : nullptr;
    try {
      r = call(local);
    } catch (...) {
      current = saved;
      throw;
    }
    current = saved;
  }
  if (in.averaged) {
    if (const char *rep = std::getenv("TSR_DP_REPORT"); rep && *rep == '1')
      std::fprintf(stderr, "data_parallel `%s`: %zu tensor(s) in %zu all-reduce(s) (in the backward graph%s)\n", fn.name.c_str(), in.tensors,
                   in.buckets, placement() == Placement::End ? ", after it" : "");
    return r;
  }
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
