// CompiledExecutor::run: a graph's schedule (ir/schedule/Fusion.h) walked step by step, each
// kernel step's program launched on the backend over views of its inputs (StepViews.h), steps
// below the JIT threshold or with unknown dims on the reference evaluator; the executor's state
// and program cache are CompiledExecutorImpl.h's.
#include "exec/CompiledExecutor.h"
#include "exec/CompiledExecutorImpl.h"
#include "exec/DeviceComposites.h"
#include "exec/GraphReplay.h"
#include "exec/Autotune.h"
#include "exec/MatMulTuning.h"
#include "ir/Scan.h"

#include "ir/Text.h"
#include "ir/tile/TileText.h"
#include "ir/schedule/Fusion.h"
#include "ir/schedule/LowerGemv.h"
#include "ir/schedule/LowerGroups.h"
#include "runtime/dist/Store.h"
#include "support/RunModes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace tsr::exec {

using ir::EvalError;
using ir::Op;
using ir::OpKind;
using ir::Value;
using rt::Tensor;
using Shape = std::vector<int64_t>;
namespace sched = ir::schedule;

using namespace steps;

CompiledExecutor::CompiledExecutor(std::shared_ptr<StepBackend> backend, const ir::KernelRunner *runner, int64_t jitThreshold,
                                   bool compileAhead)
    : impl_(std::make_unique<Impl>()) {
  impl_->compileAhead = compileAhead;
  kernels = runner;
  if (!backend) throw std::invalid_argument("CompiledExecutor: no StepBackend (exec/cpu/CpuBackend.h's cpuBackend() for the host CPU)");
  impl_->backend = std::move(backend);
  impl_->jitThreshold = jitThreshold;
}
CompiledExecutor::~CompiledExecutor() = default;

uint64_t CompiledExecutor::launches() const { return impl_->launches.load(); }

CompiledExecutor::Stats CompiledExecutor::stats() const {
  Stats s = impl_->stats;
  if (impl_->replay) {
    s.graphCaptures = impl_->replay->stats().captures;
    s.graphReplays = impl_->replay->stats().replays;
    s.graphKernels = impl_->replay->stats().capturedKernels;
    s.graphSlotCopies = impl_->replay->stats().slotCopies;
    s.graphFedInPlace = impl_->replay->stats().fedInPlace;
    s.graphOutputCopies = impl_->replay->stats().outputCopies;
    s.graphHostWaits = impl_->replay->stats().hostWaits;
    s.graphHeldFallbacks = impl_->replay->stats().heldFallbacks;
  }
  s.launches = impl_->launches.load();
  return s;
}

bool windowStepsOnCpu() {
  static const bool on = [] {
    const char *v = std::getenv("TSR_WINDOW_STEPS");
    return v && std::string(v) == "1";
  }();
  return on;
}

bool forceInterpretForTests() {
  const char *v = std::getenv("TSR_TEST_FORCE_INTERPRET");
  return v && std::string(v) == "1";
}

std::vector<Tensor> CompiledExecutor::run(const ir::Module &m, const ir::Graph &g, const std::vector<Tensor> &inputs) {
  return run(m, g, inputs, {});
}

namespace {

std::string whereOf(const ir::Module &m, const ir::Graph &g, const Op &op) {
  if (op.loc.valid() && op.loc.file <= m.files.size())
    return m.files[op.loc.file - 1] + ":" + std::to_string(op.loc.line) + ":" + std::to_string(op.loc.col);
  return "graph @" + g.name;
}

std::string describe(const Op &op) {
  std::string s(ir::opSpelling(op.kind));
  if (!op.results.empty()) s += " %" + std::to_string(op.results[0]->id);
  return s;
}

// An index or slice of a graph (`x[i]`, `x[a:b]` with a bound known only at run time) whose
// extent along axis `d` is not the one its type says: the index lies outside the axis (Python
// would raise IndexError), or the slice is clipped where the checker took its bounds to be in
// range (docs/language.md, slicing). The program's error, at the subscript; checked on every run,
// since the view's extent is computed on the host anyway.
void checkSliceBounds(const Op &op, size_t d, int64_t n, int64_t lo, int64_t hi, int64_t got) {
  const Value *res = op.result();
  if (!res || d >= res->type.dims.size()) return;
  const auto want = res->type.dims[d].constantValue();
  if (!want || *want == got) return;
  // A graph parameter's name; a host expression's operands are `_0`, `_1`, ... (no name of the
  // program's).
  const std::string &pn = op.operands[0]->name;
  const bool named = !pn.empty() && !(pn[0] == '_' && pn.find_first_not_of("0123456789", 1) == std::string::npos);
  const std::string name = named ? "`" + pn + "`" : "the tensor";
  std::string m;
  if (hi - lo == 1 && *want == 1)
    m = "index " + std::to_string(lo) + " is out of bounds for axis " + std::to_string(d) + " of " + name + ", whose extent is " +
        std::to_string(n);
  else
    m = "slice " + std::to_string(lo) + ":" + std::to_string(hi) + " of axis " + std::to_string(d) + " of " + name +
        " (extent " + std::to_string(n) + ") has " + std::to_string(got) + " elements where its type says " + std::to_string(*want);
  throw OpFailure{m, true};
}

// The run-time checks of a program (LowerGroups.h, checkedOps): a zeroed counter per checked op,
// passed as the program's last argument, and the error of the first op that failed.
struct Checks {
  std::vector<const Op *> ops;
  Tensor counts;
  explicit Checks(const std::vector<const Op *> &cone) : ops(sched::checkedOps(cone)) {
    if (!ops.empty()) counts = Tensor::zeros({int64_t(ops.size())}, DType::I64);
  }
  // (on a device, the zeros are copied there, and raise() reads the counts back)
  void addArg(std::vector<rt::KernelArg> &args, StepBackend &backend) const {
    if (!ops.empty()) args.push_back(argOf(whole(counts), backend.address(counts, true, "run-time checks")));
  }
  void raise(const ir::Module &m, const ir::Graph &g) const {
    for (size_t i = 0; i < ops.size(); ++i)
      if (static_cast<const Tensor &>(counts).data<int64_t>()[i] != 0)
        throw ir::ProgramEvalError(whereOf(m, g, *ops[i]), describe(*ops[i]),
                                   ops[i]->kind == OpKind::Pow   ? "integer 0 raised to a negative power"
                                   : ops[i]->kind == OpKind::Mod ? "integer modulo by zero"
                                                                 : "integer division by zero");
  }
};

} // namespace

std::vector<Tensor> CompiledExecutor::run(const ir::Module &m, const ir::Graph &g, const std::vector<Tensor> &inputs,
                                          const ir::SymbolSizes &given) {
  Impl &I = *impl_;
  const ir::SymbolSizes sizes = ir::bindSymbols(m, g, inputs, given);
  const Impl::GraphPlan &planned = I.planOf(m, g);
  const sched::Schedule &plan = planned.plan;
  const std::string &graphKey = planned.key;

  auto shapeOfDims = [&](const std::vector<Dim> &dims) {
    Shape s;
    for (const Dim &d : dims) {
      try {
        s.push_back(ir::evaluateDim(d, sizes));
      } catch (const std::invalid_argument &e) {
        throw OpFailure{"the dim \"" + d.str() + "\": " + e.what()};
      }
      if (s.back() < 0) throw OpFailure{"the dim \"" + d.str() + "\" is " + std::to_string(s.back()) + ", a negative extent"};
    }
    return s;
  };
  // The `shape` attribute of broadcast_to and reshape (what the evaluator reads too).
  auto shapeAttr = [&](const Op &o) {
    const auto *d = o.attrAs<std::vector<Dim>>("shape");
    if (!d) throw OpFailure{"the attribute `shape` is missing"};
    return shapeOfDims(*d);
  };
  auto shapeOf = [&](const Value *v) {
    Shape s;
    for (const Dim &d : v->type.dims) {
      try {
        s.push_back(ir::evaluateDim(d, sizes));
      } catch (const std::invalid_argument &e) {
        throw OpFailure{"the dim \"" + d.str() + "\": " + e.what()};
      }
    }
    return s;
  };

  // A call of a plan of device work alone may be captured once and replayed (GraphReplay.h).
  if (!I.walking && I.compilesEveryStep() && graphReplayWanted(*I.backend)) {
    if (!I.replay) I.replay = std::make_unique<GraphReplay>(*I.backend);
    std::string signature = graphKey;
    for (const auto &[name, size] : sizes) signature += name + "=" + std::to_string(size) + ",";
    for (const Tensor &t : inputs) signature += shapeKey(t.shape()) + std::string(dtypeName(t.dtype()));
    auto walk = [&](const std::vector<Tensor> &in, GraphReplay::Walk mode, std::vector<DeferredCheck> *deferred,
                    const GraphReplay::Dests *dests) {
      const uint64_t before = I.launches;
      I.walking = true;
      I.walkMode = mode;
      I.deferredChecks = deferred;
      I.outputDest = dests;
      struct Reset {
        Impl &I;
        ~Reset() { I.walking = false, I.walkMode = GraphReplay::Walk::Plain, I.deferredChecks = nullptr, I.outputDest = nullptr; }
      } reset{I};
      std::vector<Tensor> out = run(m, g, in, given);
      if (mode == GraphReplay::Walk::Capture) I.launches = before; // recorded into the graph, not launched
      return out;
    };
    return I.replay->call(signature, g.name, planned.notCapturable, inputs, walk);
  }

  if (I.compileAhead && I.compilesEveryStep()) {
    std::string signature = graphKey;
    for (const auto &[name, size] : sizes) signature += name + "=" + std::to_string(size) + ",";
    if (I.prepared.insert(signature).second) I.prepare(plan, graphKey, shapeOf);
  }

  // Output destinations of a graph-replay walk (GraphReplay::WalkFn): an elementwise step whose
  // root is such an output writes it there; any other output is copied there at the end.
  const GraphReplay::Dests *dests = I.outputDest;
  I.outputDest = nullptr;
  std::unordered_map<const Value *, Tensor> destOf;
  if (dests)
    for (size_t k = 0; k < g.outputs.size() && k < dests->size(); ++k)
      if ((*dests)[k] && std::find(g.params.begin(), g.params.end(), g.outputs[k]) == g.params.end())
        destOf.emplace(g.outputs[k], *(*dests)[k]);
  auto allocateFor = [&](const Value *v, const Shape &S) {
    auto it = destOf.find(v);
    if (it != destOf.end() && it->second.shape() == S && it->second.dtype() == v->type.dtype) return it->second;
    return I.allocate(S, v->type.dtype);
  };

  // The step after which each value is last read.
  std::unordered_map<const Value *, size_t> lastUse;
  for (size_t i = 0; i < plan.steps.size(); ++i)
    for (const Value *v : plan.steps[i].inputs) lastUse[v] = i;
  for (const Value *v : g.outputs) lastUse[v] = plan.steps.size();

  std::unordered_map<const Value *, View> views;
  for (size_t i = 0; i < g.params.size() && i < inputs.size(); ++i) views[g.params[i]] = whole(inputs[i]);
  auto viewOf = [&](const Value *v) -> const View & {
    auto it = views.find(v);
    if (it == views.end()) throw OpFailure{"operand %" + std::to_string(v->id) + " is not defined before this op"};
    return it->second;
  };

  // Copies `ops` (in graph order) into `sub`, reading their operands through `map`, which each
  // result joins; `each` sees every result with its copy.
  auto copyOps = [](ir::Graph &sub, const std::vector<const Op *> &ops, std::unordered_map<const Value *, Value *> &map,
                    const std::function<void(const Op *, size_t, Value *)> &each) {
    for (const Op *o : ops) {
      std::vector<Value *> operands;
      for (const Value *x : o->operands) operands.push_back(map.at(x));
      std::vector<ir::Type> types;
      for (const Value *r : o->results) types.push_back(r->type);
      Op *c = sub.addWithTypes(o->kind, operands, o->attrs, types, o->loc);
      c->body = o->body;
      for (size_t r = 0; r < c->results.size(); ++r) {
        map[o->results[r]] = c->results[r];
        each(o, r, c->results[r]);
      }
    }
  };

  // Runs `ops` (in graph order) on the reference evaluator as a graph of their own, whose
  // parameters are `ins` and outputs `outs`: library steps, and kernel steps not compiled yet.
  // An elementwise step's program (also a product's epilogue where the product runs without it).
  auto runElementwise = [&](const sched::Step &st, const std::string &key, int64_t work) {
    const Value *root = st.outputs[0];
    const Shape S = shapeOf(root);
    Tensor out = allocateFor(root, S);
    std::vector<rt::KernelArg> args{I.arg(whole(out), true)};
    for (const Value *in : st.inputs) args.push_back(I.arg(broadcastView(viewOf(in), S)));
    Checks checks(st.cone);
    checks.addArg(args, *I.backend);
    const Compiled &c = I.program(I.elementwiseProgram(st, key, S, work));
    I.launch(c, args, S);
    checks.raise(m, g);
    views[root] = whole(out);
  };

  // A kernel_call with operands that are strided views (the heads' transposed views of a
  // projection that the attention kernels take): the kernel reads them in place through
  // ir::KernelRunner::runViews, where interpret() would copy each into a tensor of its own.
  // Operands the kernel writes are materialized as interpret() does. False, with nothing run,
  // when no operand is such a view or the runner takes none.
  auto kernelInPlace = [&](const Op &op, const std::string &key) -> bool {
    // TSR_KERNEL_VIEWS=0 copies every view as interpret() does (ctest negative_kernel_views).
    static const bool off = [] {
      const char *e = std::getenv("TSR_KERNEL_VIEWS");
      return e && std::string(e) == "0";
    }();
    if (!kernels || off) return false;
    const std::vector<size_t> written = kernels->writtenOperands(op);
    auto writes = [&](size_t i) { return std::find(written.begin(), written.end(), i) != written.end(); };
    // A view the kernels take as it is: no broadcast or reversed axis, the last axis unit-stride
    // (their vector and tensor-map copies read rows).
    auto strided = [&](size_t i, const View &v) {
      if (writes(i) || op.operands[i]->type.isKey() || v.shape.empty() || v.strides.back() != 1) return false;
      if (v.offset == 0 && contiguous(v) && numelOf(v.shape) == v.buf.numel()) return false;
      return std::all_of(v.strides.begin(), v.strides.end(), [](int64_t st) { return st > 0; });
    };
    // A written operand made by zeros(...) (a broadcast zero constant): a buffer of its own set
    // by the backend's memset, where materializing the broadcast would run a copy program.
    auto zeros = [&](size_t i) {
      const Value *x = op.operands[i];
      if (!writes(i) || !x->def) return false;
      if (x->def->kind == OpKind::BroadcastTo) x = x->def->operands[0];
      if (!x->def || x->def->kind != OpKind::Constant) return false;
      if (const double *d = x->def->attrAs<double>("value")) return *d == 0.0 && !std::signbit(*d);
      if (const int64_t *n = x->def->attrAs<int64_t>("value")) return *n == 0;
      return false;
    };
    bool any = false;
    for (size_t i = 0; i < op.operands.size(); ++i) any |= strided(i, viewOf(op.operands[i])) || zeros(i);
    if (!any) return false;
    std::vector<Tensor> args;
    std::vector<std::optional<ir::KernelRunner::StridedView>> in(op.operands.size());
    for (size_t i = 0; i < op.operands.size(); ++i) {
      const View &v = viewOf(op.operands[i]);
      if (strided(i, v)) {
        args.push_back(v.buf);
        in[i] = ir::KernelRunner::StridedView{v.offset, v.shape, v.strides};
        continue;
      }
      if (zeros(i)) {
        args.push_back(I.allocate(v.shape, v.buf.dtype()));
        if (const int64_t n = numelOf(v.shape); n > 0)
          I.backend->zeroBytes(I.backend->address(args.back(), true, I.site.c_str()), size_t(n) * args.back().itemsize());
        continue;
      }
      args.push_back(op.operands[i]->type.isKey() ? v.buf : I.materialize(v, v.buf.dtype(), {}, key + std::to_string(i)));
      // As the evaluator: a kernel writes a graph value's own buffer only through a copy.
      if (writes(i) && args.back().sharesStorageWith(v.buf)) args.back() = args.back().clone();
    }
    std::optional<std::vector<Tensor>> res;
    try {
      const ir::KernelCallGrids grids = ir::kernelCallGrids(op, [&](const Dim &d) { return ir::evaluateDim(d, sizes); });
      res = kernels->runViews(op, args, in, grids.grid, grids.space);
    } catch (const EvalError &) {
      throw;
    } catch (const ir::ProgramCheckError &) {
      throw;
    } catch (const std::exception &e) {
      throw EvalError(whereOf(m, g, op), describe(op) + ": " + e.what());
    }
    if (!res) return false;
    for (size_t r = 0; r < res->size() && r < op.results.size(); ++r) views[op.results[r]] = whole((*res)[r]);
    return true;
  };

  auto interpret = [&](const Op &anchor, const std::vector<const Op *> &ops, const std::vector<const Value *> &ins,
                       const std::vector<const Value *> &outs, const std::string &key) {
    ir::Graph sub(g.name);
    std::unordered_map<const Value *, Value *> map;
    std::vector<Tensor> args;
    // Inputs materialized into buffers of their own (a broadcast zero, a strided view) are the
    // evaluator's: a kernel that writes one writes it in place, not a copy of it.
    std::vector<bool> donated;
    for (size_t i = 0; i < ins.size(); ++i) {
      Value *p = sub.addParam(std::to_string(i), ins[i]->type);
      // The graph's value numbers, so that errors name ops as the whole graph would.
      p->id = ins[i]->id;
      map[ins[i]] = p;
      const View &v = viewOf(ins[i]);
      args.push_back(ins[i]->type.isKey() ? v.buf : I.materialize(v, v.buf.dtype(), {}, key + std::to_string(i)));
      donated.push_back(!ins[i]->type.isKey() && !args.back().sharesStorageWith(v.buf));
    }
    copyOps(sub, ops, map, [](const Op *o, size_t r, Value *c) { c->id = o->results[r]->id; });
    for (const Value *o : outs) sub.outputs.push_back(map.at(o));
    std::vector<Tensor> res;
    try {
      res = ir::evaluate(m, sub, args, kernels, sizes, donated);
    } catch (const ir::ProgramEvalError &e) {
      // (the same, keeping it the program's error)
      if (e.where().rfind("graph @", 0) == 0) throw ir::ProgramCheckError(e.message(), {}, whereOf(m, g, anchor));
      throw;
    } catch (const EvalError &e) {
      // Without a location, the subgraph's name would stand for the op's.
      if (e.where().rfind("graph @", 0) == 0) throw EvalError(whereOf(m, g, anchor), e.problem());
      throw;
    }
    for (size_t r = 0; r < res.size() && r < outs.size(); ++r) views[outs[r]] = whole(res[r]);
  };

  // Debug mode's NaN/Inf sentinel (support/RunModes.h): after step `si`, each float value it
  // produced is read back; where one holds a NaN or an infinity, the step's ops are evaluated
  // again one by one on the reference evaluator to find the first of them that produced it, and
  // the program stops at that op's line. Steps run in order and each is checked, so that op is the
  // first of the run to produce one: its inputs were finite.
  const bool sentinels = runModes().debug;
  auto firstNonFinite = [](const Tensor &t) -> int64_t {
    if (!isFloat(t.dtype())) return -1;
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (!std::isfinite(t.toF64(i))) return i;
    return -1;
  };
  auto sentinel = [&](const sched::Step &st, size_t si, const std::string &key) {
    std::vector<const Value *> produced = st.outputs;
    if (produced.empty())
      for (const Value *r : st.anchor->results) produced.push_back(r);
    bool found = false;
    for (size_t q = 0; q < produced.size() && !found; ++q) {
      const Value *v = produced[q];
      auto it = views.find(v);
      if (it == views.end() || v->type.isKey() || !isFloat(v->type.dtype)) continue;
      found = firstNonFinite(I.materialize(it->second, v->type.dtype, {}, key + "sentinel" + std::to_string(q) + "/")) >= 0;
    }
    if (!found) return;
    // The step's ops in graph order, each result an output of a graph of their own.
    std::vector<const Op *> ops = st.cone;
    if (ops.empty() || ops.back() != st.anchor) ops.push_back(st.anchor);
    ir::Graph sub(g.name);
    std::unordered_map<const Value *, Value *> map;
    std::vector<Tensor> args;
    for (const Value *in : st.inputs) {
      Value *p = sub.addParam(std::to_string(in->id), in->type);
      map[in] = p;
      const View &w = viewOf(in);
      args.push_back(in->type.isKey() ? w.buf : I.materialize(w, w.buf.dtype(), {}, key + "sentinel-in/"));
    }
    std::vector<std::pair<const Op *, size_t>> results;
    copyOps(sub, ops, map, [&](const Op *o, size_t r, Value *c) {
      sub.outputs.push_back(c);
      results.push_back({o, r});
    });
    const std::vector<Tensor> res = ir::evaluate(m, sub, args, kernels, sizes);
    for (size_t k = 0; k < res.size() && k < results.size(); ++k) {
      const int64_t i = firstNonFinite(res[k]);
      if (i < 0) continue;
      const Op &maker = *results[k].first;
      const Tensor &t = res[k];
      const double x = t.toF64(i);
      std::string what = std::isnan(x) ? "NaN" : x > 0 ? "inf" : "-inf";
      // The graph as the program names it: a function (its specializations are `f#2`, ...) or
      // an expression of host code (`eager12`).
      const std::string fn = g.name.substr(0, g.name.find('#'));
      const bool host = fn.rfind("eager", 0) == 0 && fn.find_first_not_of("0123456789", 5) == std::string::npos;
      what += " produced by `" + std::string(ir::opSpelling(maker.kind)) + "` (step " + std::to_string(si) + " of " +
              (host ? std::string("host code") : "`" + fn + "`") + ", the first step of the run to produce a non-finite value)";
      if (!t.shape().empty()) {
        std::string idx;
        for (size_t d = t.shape().size(), rest = size_t(i); d-- > 0;) {
          idx = std::to_string(rest % size_t(t.shape()[d])) + (idx.empty() ? "" : ", ") + idx;
          rest /= size_t(t.shape()[d]);
        }
        what += ": element [" + idx + "] of its result of shape " + rt::formatShape(t.shape());
      }
      throw ir::ProgramCheckError(what, {}, whereOf(m, g, maker));
    }
    throw ir::ProgramCheckError("a non-finite value in the result of step " + std::to_string(si) + " of @" + g.name +
                                    " (its ops, evaluated again one by one, give none: the compiled step and the evaluator differ)",
                                {}, whereOf(m, g, *st.anchor));
  };

  // Results of collectives the backend left running beside later steps (an all_reduce with the
  // attribute `overlap`: data parallelism's gradient buckets, exec/host/DataParallel.cpp): the
  // first step that reads one, or the outputs, first joins them (StepBackend::joinCollectives).
  std::unordered_set<const Value *> deferred;
  for (size_t si = 0; si < plan.steps.size(); ++si) {
    const sched::Step &st = plan.steps[si];
    const Op &op = *st.anchor;
    if (!deferred.empty())
      for (const Value *v : st.inputs)
        if (deferred.count(v)) {
          I.backend->joinCollectives();
          deferred.clear();
          break;
        }
    I.site = whereOf(m, g, op);
    const std::string key = graphKey + std::to_string(si) + "/";
    // A step's span: "step 3 matmul" (its kind and anchor op), with where its op is written.
    rt::profile::Scope span("step", [&] {
      return "step " + std::to_string(si) + " " + std::string(sched::stepKindName(st.kind)) + " " +
             std::string(ir::opSpelling(op.kind));
    }, true);
    span.add("at", I.site);
    span.add("graph", g.name);
    try {
      int64_t work = -1; // element-ops of a kernel step (Impl::stepWork)
      // A kernel step that is not compiled yet runs interpreted (Impl::compileNow).
      if (st.kind == sched::StepKind::Elementwise || st.kind == sched::StepKind::Reduce ||
          st.kind == sched::StepKind::MatMul || st.kind == sched::StepKind::Concat || st.kind == sched::StepKind::Row ||
          st.kind == sched::StepKind::Gather || st.kind == sched::StepKind::Random || st.kind == sched::StepKind::Window) {
        Shape in;
        bool known = true; // a type with an unknown dim (`?`) leaves the step to the evaluator
        try {
          std::tie(in, work) = Impl::stepWork(st, shapeOf);
        } catch (const OpFailure &) {
          known = false;
        }
        if (!known || !I.compileNow(key + shapeKey(in), work)) {
          ++(known ? I.stats.interpretedSteps : I.stats.unknownDimSteps);
          std::vector<const Op *> ops = st.cone;
          if (st.epilogue) ops.insert(ops.begin(), &op); // the product, then its epilogue
          else if (st.kind != sched::StepKind::Elementwise && st.kind != sched::StepKind::Row) ops.push_back(&op);
          interpret(op, ops, st.inputs, st.outputs, key);
          if (sentinels) sentinel(st, si, key);
          for (const Value *v : st.inputs) {
            auto lu = lastUse.find(v);
            if (lu != lastUse.end() && lu->second == si) views.erase(v);
          }
          continue;
        }
        ++I.stats.compiledSteps;
      }
      switch (st.kind) {
      case sched::StepKind::Elementwise:
        runElementwise(st, key, work);
        break;
      case sched::StepKind::Row: {
        // One program per block of whole rows: the root, then the row statistics later steps read.
        const Shape S = shapeOf(st.outputs[0]);
        std::vector<Tensor> outs;
        std::vector<rt::KernelArg> args;
        for (size_t i = 0; i < st.outputs.size(); ++i) {
          Shape os = S;
          if (i > 0) os.back() = 1;
          outs.push_back(I.allocate(os, st.outputs[i]->type.dtype));
          args.push_back(I.arg(whole(outs.back()), true));
        }
        for (const Value *in : st.inputs) args.push_back(I.arg(broadcastView(viewOf(in), S)));
        const Compiled &c = I.program(I.rowProgram(st, key, S, work));
        I.launch(c, args, S);
        for (size_t i = 0; i < st.outputs.size(); ++i) views[st.outputs[i]] = whole(outs[i].reshape(shapeOf(st.outputs[i])));
        break;
      }
      case sched::StepKind::Gather: {
        // take / gather by index (LowerGather.cpp). An index out of range is counted by the
        // program; the step then runs on the evaluator, which stops at the first such index with
        // its own message.
        const Shape S = shapeOf(op.result());
        const View &x = viewOf(op.operands[0]), &idx = viewOf(op.operands[1]);
        if (op.kind == OpKind::Gather) {
          const int64_t r = int64_t(x.shape.size());
          int64_t ax = *op.attrAs<int64_t>("axis");
          if (ax < 0) ax += r;
          for (int64_t d = 0; d < r && d < int64_t(idx.shape.size()); ++d)
            if (d != ax && idx.shape[size_t(d)] > x.shape[size_t(d)])
              throw OpFailure{"indices of shape " + rt::formatShape(idx.shape) + " exceed x's shape " + rt::formatShape(x.shape) +
                              " on axis " + std::to_string(d)};
        }
        Tensor out = I.allocate(S, op.result()->type.dtype);
        const bool onDevice = I.walkMode != GraphReplay::Walk::Plain;
        Tensor bad = onDevice ? I.allocate({1}, DType::I64) : Tensor::zeros({1}, DType::I64);
        // (a device counter is zeroed by a fill, which a capture records with the launch)
        if (onDevice) I.backend->zeroBytes(I.backend->address(bad, true, "index checks"), sizeof(int64_t));
        std::vector<rt::KernelArg> args{I.arg(whole(out), true), I.arg(x), I.arg(idx),
                                        argOf(whole(bad), I.backend->address(bad, true, "index checks"))};
        const Compiled &c = I.program(I.gatherProgram(op, key, S, work));
        I.launch(c, args, S);
        if (I.deferredChecks) I.deferredChecks->push_back({bad, {}, whereOf(m, g, op), describe(op), ""});
        if (I.walkMode != GraphReplay::Walk::Capture && static_cast<const Tensor &>(bad).data<int64_t>()[0] != 0) {
          interpret(op, {&op}, {op.operands[0], op.operands[1]}, st.outputs, key);
          throw OpFailure{"an index is out of range (counted by the compiled step; the evaluator found none)"};
        }
        views[op.result()] = whole(out);
        break;
      }
      case sched::StepKind::Window: {
        // conv, conv_transpose, the pools and their gradients (LowerWindow.cpp): one program
        // over the result reading the operands' views.
        const Shape S = shapeOf(op.result());
        Tensor out = I.allocate(S, op.result()->type.dtype);
        std::vector<rt::KernelArg> args{I.arg(whole(out), true)};
        std::vector<Shape> ins;
        for (const Value *v : op.operands) {
          args.push_back(I.arg(viewOf(v)));
          ins.push_back(viewOf(v).shape);
        }
        const Compiled &c = I.program(I.windowProgram(op, key, S, ins, work));
        I.launch(c, args, S);
        views[op.result()] = whole(out);
        break;
      }
      case sched::StepKind::Random: {
        // random_bits / random_uniform over [0, 1) (LowerRandom.cpp): the evaluator's words.
        const Shape S = shapeOf(op.result());
        Tensor out = I.allocate(S, op.result()->type.dtype);
        std::vector<rt::KernelArg> args{I.arg(whole(out), true), I.arg(viewOf(op.operands[0]))};
        const Compiled &c = I.program(I.randomProgram(op, key, S, work));
        I.launch(c, args, S);
        views[op.result()] = whole(out);
        break;
      }
      case sched::StepKind::Reduce: {
        const std::vector<ReduceStage> stages = reduceStages(op, shapeOf(op.operands[0]));
        auto inputView = [&](const Value *v) { return broadcastView(viewOf(v), stages[0].iter); };
        const bool extreme = op.kind == OpKind::ReduceMax || op.kind == OpKind::ReduceMin || op.kind == OpKind::ArgMax ||
                             op.kind == OpKind::ArgMin;
        const DType carry = sched::reductionCarryDType(op);
        Tensor prev;
        for (size_t s = 0; s < stages.size(); ++s) {
          const ReduceStage &rs = stages[s];
          if (extreme && rs.iter[size_t(rs.axis)] == 0 && numelOf(rs.out) > 0)
            throw OpFailure{std::string(ir::opSpelling(op.kind)) + " over an empty axis has no value", true};
          Tensor out = I.allocate(rs.out, rs.last ? op.result()->type.dtype : carry);
          std::vector<rt::KernelArg> args{I.arg(whole(out), true)};
          if (s == 0) for (const Value *in : st.inputs) args.push_back(I.arg(inputView(in)));
          else args.push_back(I.arg(whole(prev)));
          args.push_back(scalarArg(rs.iter[size_t(rs.axis)]));
          Checks checks(s == 0 ? st.cone : std::vector<const Op *>{});
          checks.addArg(args, *I.backend);
          const Compiled &c = I.program(I.reduceProgram(st, key, s, rs, work));
          I.launch(c, args, rs.iter);
          checks.raise(m, g);
          prev = out;
        }
        views[op.result()] = whole(prev.reshape(shapeOf(op.result())));
        break;
      }
      case sched::StepKind::MatMul: {
        View a = viewOf(op.operands[0]), b = viewOf(op.operands[1]);
        const Value *res = op.result();
        const Shape R = shapeOf(res);
        const MatMulDims d = matmulDims(a.shape, b.shape, R);
        if (d.av) { a.shape.insert(a.shape.begin(), 1); a.strides.insert(a.strides.begin(), 0); }
        if (d.bv) { b.shape.push_back(1); b.strides.push_back(0); }
        const Shape &batch = d.batch, &full = d.full;
        // With an epilogue, the product's result is a buffer of its own only where later steps
        // read it or the product runs without its epilogue (a GEMV or matmul program off the
        // tensors' layouts, or split-K's sum); otherwise it is never allocated, which would
        // hold [M, N] of the allocator's pool for nothing (310 MB for a ViT-B's fc1).
        const sched::Step *epi = st.epilogue.get();
        const bool gemv = I.gemvWanted(op, d);
        const sched::SplitK split = gemv ? sched::SplitK{} : I.splitOf(op, d, a.buf.dtype(), b.buf.dtype());
        const bool fused = epi && !d.av && !d.bv;
        const bool storeProduct = st.outputs.size() > 1;
        Tensor out = !fused || storeProduct || split ? I.allocate(R, res->type.dtype) : Tensor();
        View ov{out, 0, full, Shape(full.size(), 0)};
        {
          Shape rs = rowMajor(R);
          size_t j = 0;
          for (size_t i = 0; i < batch.size(); ++i) ov.strides[i] = rs[j++];
          ov.strides[batch.size()] = d.av ? 0 : rs[j++];
          ov.strides[batch.size() + 1] = d.bv ? 0 : rs[j++];
        }
        Shape ash = batch, bsh = batch;
        ash.push_back(d.M); ash.push_back(d.K);
        bsh.push_back(d.K); bsh.push_back(d.N);
        // A GEMV program (ir/schedule/LowerGemv.h) of the k-major layout reads B as [batch.., N, K].
        View bv = broadcastView(b, bsh);
        if (gemv && sched::gemvLayoutOf(op) == sched::GemvLayout::KMajor) {
          std::swap(bv.shape[bv.shape.size() - 2], bv.shape.back());
          std::swap(bv.strides[bv.strides.size() - 2], bv.strides.back());
        }
        const std::vector<rt::KernelArg> inputs{I.arg(broadcastView(a, ash)), I.arg(bv)};
        // The product and its epilogue in one program: out (the epilogue's root), [mm,] a, b,
        // the epilogue's inputs (LowerGroups.h lowerMatMul, LowerGemv.h lowerGemv).
        Tensor rootOut;
        auto fusedArgs = [&] {
          rootOut = allocateFor(st.outputs[0], R);
          std::vector<rt::KernelArg> args{I.arg(whole(rootOut), true)};
          if (storeProduct) args.push_back(I.arg(ov, true));
          args.insert(args.end(), inputs.begin(), inputs.end());
          for (size_t i = 2; i < st.inputs.size(); ++i) args.push_back(I.arg(broadcastView(viewOf(st.inputs[i]), R)));
          return args;
        };
        auto fusedDone = [&] {
          views[st.outputs[0]] = whole(rootOut);
          if (storeProduct) views[res] = whole(out);
        };
        if (gemv) {
          if (fused) {
            I.launch(I.program(I.gemvProgram(op, key, d, a.buf.dtype(), b.buf.dtype(), work, epi, storeProduct)), fusedArgs(), full);
            fusedDone();
            break;
          }
          std::vector<rt::KernelArg> args{I.arg(ov, true)};
          args.insert(args.end(), inputs.begin(), inputs.end());
          I.launch(I.program(I.gemvProgram(op, key, d, a.buf.dtype(), b.buf.dtype(), work)), args, full);
          views[res] = whole(out);
          if (epi) runElementwise(*epi, key + "epilogue/", work);
          break;
        }
        if (split) {
          // Split-K: the parts' partial products into a workspace, then their sum into the result.
          Shape ps = full;
          ps.insert(ps.begin(), split.parts);
          Tensor partials = I.allocate(ps, split.partials);
          std::vector<rt::KernelArg> args{I.arg(whole(partials), true)};
          args.insert(args.end(), inputs.begin(), inputs.end());
          I.launch(I.program(I.matmulProgram(op, key, d, a.buf.dtype(), b.buf.dtype(), work, std::nullopt, split.chunk)), args, ps);
          I.launch(I.program(I.splitSumProgram(op, key, split, full)), {I.arg(ov, true), I.arg(whole(partials))}, full);
          views[res] = whole(out);
          if (epi) runElementwise(*epi, key + "epilogue/", work);
          break;
        }
        if (!fused) {
          const Compiled &plain = I.matmul(op, key, d, a.buf.dtype(), b.buf.dtype(), work, ov, inputs, R);
          std::vector<rt::KernelArg> args{I.arg(ov, true)};
          args.insert(args.end(), inputs.begin(), inputs.end());
          I.launch(plain, args, full);
          views[res] = whole(out);
          if (epi) runElementwise(*epi, key + "epilogue/", work);
          break;
        }
        // With the tiles the product alone would take.
        const std::optional<sched::MatMulTiles> tilesChosen = I.matmulTiles(op, key, d, a.buf.dtype(), b.buf.dtype(), work, ov, inputs, R);
        I.launch(I.program(I.matmulProgram(op, key, d, a.buf.dtype(), b.buf.dtype(), work, tilesChosen, 0, epi, storeProduct)),
                 fusedArgs(), full);
        fusedDone();
        break;
      }
      case sched::StepKind::View: {
        const View &x = viewOf(op.operands[0]);
        View r = x;
        const Value *res = op.result();
        switch (op.kind) {
        case OpKind::Transpose: {
          const auto *perm = op.attrAs<std::vector<int64_t>>("perm");
          if (!perm || perm->size() != x.shape.size()) throw OpFailure{"a perm that does not fit the rank"};
          for (size_t i = 0; i < perm->size(); ++i) {
            size_t p = size_t((*perm)[i]);
            if (p >= x.shape.size()) throw OpFailure{"the perm is not a permutation"};
            r.shape[i] = x.shape[p];
            r.strides[i] = x.strides[p];
          }
          break;
        }
        case OpKind::BroadcastTo: {
          const Shape to = shapeAttr(op);
          bool fits = to.size() >= x.shape.size();
          for (size_t i = 0; fits && i < x.shape.size(); ++i) {
            int64_t a = x.shape[i], b = to[to.size() - x.shape.size() + i];
            fits = a == b || a == 1;
          }
          if (!fits) throw OpFailure{"shape " + rt::formatShape(x.shape) + " does not broadcast to " + rt::formatShape(to)};
          r = broadcastView(x, to);
          break;
        }
        case OpKind::Slice: {
          const auto *start = op.attrAs<std::vector<Dim>>("start");
          const auto *stop = op.attrAs<std::vector<Dim>>("stop");
          const auto *step = op.attrAs<std::vector<int64_t>>("step");
          if (!start || !stop || !step || start->size() != x.shape.size() || stop->size() != x.shape.size() ||
              step->size() != x.shape.size())
            throw OpFailure{"start, stop and step are not one per axis"};
          for (size_t d = 0; d < x.shape.size(); ++d) {
            const int64_t n = x.shape[d], s = (*step)[d];
            if (s <= 0) throw OpFailure{"step " + std::to_string(s) + " on axis " + std::to_string(d) + " (steps are positive)"};
            auto clip = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
            const int64_t rawLo = ir::evaluateDim((*start)[d], sizes), rawHi = ir::evaluateDim((*stop)[d], sizes);
            const int64_t lo = clip(rawLo), hi = clip(rawHi);
            r.shape[d] = hi > lo ? (hi - lo + s - 1) / s : 0;
            r.offset += lo * x.strides[d];
            r.strides[d] = x.strides[d] * s;
            checkSliceBounds(op, d, n, rawLo, rawHi, r.shape[d]);
          }
          break;
        }
        case OpKind::Reverse: {
          const auto *axes = op.attrAs<std::vector<int64_t>>("axes");
          std::vector<bool> flip(x.shape.size(), false);
          if (axes)
            for (int64_t a : *axes) {
              int64_t rk = int64_t(x.shape.size());
              if (a < -rk || a >= rk) throw OpFailure{"axis " + std::to_string(a) + " is out of range"};
              flip[size_t(a < 0 ? a + rk : a)] = true;
            }
          for (size_t d = 0; d < x.shape.size(); ++d) {
            if (!flip[d] || x.shape[d] == 0) continue;
            r.offset += (x.shape[d] - 1) * x.strides[d];
            r.strides[d] = -x.strides[d];
          }
          break;
        }
        default: { // reshape
          const Shape s = shapeAttr(op);
          if (numelOf(s) != numelOf(x.shape)) throw OpFailure{"cannot reshape to a different element count"};
          if (contiguous(x)) r = View{x.buf, x.offset, s, rowMajor(s)};
          else if (std::optional<Shape> st = reshapeStrides(x, s)) r = View{x.buf, x.offset, s, *st};
          else r = whole(I.materialize(x, x.buf.dtype(), {}, key).reshape(s));
        }
        }
        // A view's extents are the result type's (what later steps assume), or the type is wrong.
        bool unknown = false;
        for (const Dim &d : res->type.dims) unknown = unknown || d.hasUnknown();
        const Shape want = unknown ? r.shape : shapeOf(res);
        if (r.shape != want)
          throw OpFailure{"computed shape " + rt::formatShape(r.shape) + ", but the result type " + res->type.str() + " says " +
                          rt::formatShape(want)};
        views[res] = r;
        break;
      }
      case sched::StepKind::Concat: {
        // One copy program per operand, into its slice of the output along the axis.
        const Value *res = op.result();
        const Shape R = shapeOf(res);
        const auto *axisAttr = op.attrAs<int64_t>("axis");
        const int64_t rank = int64_t(R.size());
        int64_t ax = axisAttr ? *axisAttr : 0;
        if (ax < -rank || ax >= rank) throw OpFailure{"axis " + std::to_string(ax) + " is out of range for rank " + std::to_string(rank)};
        if (ax < 0) ax += rank;
        Tensor out = I.allocate(R, res->type.dtype);
        View dst = whole(out);
        int64_t at = 0;
        Policies pol;
        pol.saturate = res->type.policies.saturate;
        for (size_t i = 0; i < op.operands.size(); ++i) {
          const View &src = viewOf(op.operands[i]);
          bool fits = int64_t(src.shape.size()) == rank;
          for (int64_t d = 0; fits && d < rank; ++d) fits = d == ax || src.shape[size_t(d)] == R[size_t(d)];
          if (!fits || at + src.shape[size_t(ax)] > R[size_t(ax)])
            throw OpFailure{"cannot concatenate " + rt::formatShape(src.shape) + " into " + rt::formatShape(R) + " along axis " + std::to_string(ax)};
          View part = dst;
          part.offset = at * dst.strides[size_t(ax)];
          part.shape[size_t(ax)] = src.shape[size_t(ax)];
          if (numelOf(part.shape) > 0) I.copy(part, src, pol, key + std::to_string(i));
          at += src.shape[size_t(ax)];
        }
        views[res] = whole(out);
        break;
      }
      case sched::StepKind::Library: {
        if (op.kind == OpKind::Scan) {
          // A scan (ir/Scan.h): its body is a graph of its own, planned and compiled once by
          // this executor (run() caches its plan and programs like any graph's), and run here
          // once per step on the backend: step i's rows of the xs are views materialized by the
          // backend's copy program, the carries pass from step to step as tensors, and each
          // step's ys are copied into row i of the stacked results. The same loop drives the
          // host CPU and a GPU (StepBackend), so the body's kernels launch on either.
          ++I.stats.scanSteps;
          auto s = ir::scanShape(op);
          if (!s || !op.body) throw OpFailure{"a scan without its body or its attributes"};
          const int64_t n = shapeOfDims({s->length})[0];
          std::vector<Tensor> state;
          for (size_t k = 0; k < s->consts + s->carries; ++k) {
            const Value *v = op.operands[k];
            const View &w = viewOf(v);
            state.push_back(v->type.isKey() ? w.buf : I.materialize(w, w.buf.dtype(), {}, key + "scan-in" + std::to_string(k) + "/"));
          }
          std::vector<Tensor> ys;
          for (size_t k = s->carries; k < op.results.size(); ++k) ys.push_back(I.allocate(shapeOf(op.results[k]), op.results[k]->type.dtype));
          for (int64_t step = 0; step < n; ++step) {
            const int64_t i = s->reverse ? n - 1 - step : step;
            std::vector<Tensor> args = state;
            for (size_t x = 0; x < s->xs; ++x) {
              View row = viewOf(op.operands[s->consts + s->carries + x]);
              if (row.shape.empty() || row.shape[0] != n) throw OpFailure{"xs " + std::to_string(x) + " has no row " + std::to_string(i)};
              row.offset += i * row.strides[0];
              row.shape.erase(row.shape.begin());
              row.strides.erase(row.strides.begin());
              args.push_back(I.materialize(row, row.buf.dtype(), {}, key + "scan-x" + std::to_string(x) + "/"));
            }
            std::vector<Tensor> out = run(m, *op.body, args, sizes);
            for (size_t c = 0; c < s->carries; ++c) state[s->consts + c] = out[c];
            for (size_t y = 0; y < ys.size(); ++y) {
              View dst = whole(ys[y]);
              dst.offset = i * dst.strides[0];
              dst.shape.erase(dst.shape.begin());
              dst.strides.erase(dst.strides.begin());
              if (numelOf(dst.shape) > 0) I.copy(dst, whole(out[s->carries + y]), {}, key + "scan-y" + std::to_string(y) + "/");
            }
          }
          for (size_t c = 0; c < s->carries; ++c) views[op.results[c]] = whole(state[s->consts + c]);
          for (size_t y = 0; y < ys.size(); ++y) views[op.results[s->carries + y]] = whole(ys[y]);
          break;
        }
        if (I.walkMode != GraphReplay::Walk::Plain && hasDeviceComposite(op)) {
          // In CUDA-graph walks, check_le runs as a graph of device ops, so that the plan has
          // no host step (DeviceComposites.h); a failed check_le runs the evaluator's rule
          // below, which raises its message.
          std::vector<Shape> shapes;
          std::vector<Tensor> args;
          std::string ck = key + "composite";
          for (size_t i = 0; i < op.operands.size(); ++i) {
            const View &w = viewOf(op.operands[i]);
            shapes.push_back(w.shape);
            args.push_back(I.materialize(w, w.buf.dtype(), {}, key + "composite" + std::to_string(i) + "/"));
            ck += shapeKey(w.shape);
          }
          std::unique_ptr<ir::Graph> &sub = I.composites[ck];
          if (!sub) sub = deviceComposite(op, shapes);
          if (sub) {
            const std::vector<Tensor> out = run(m, *sub, args, {});
            const bool check = op.kind == OpKind::CheckLe;
            if (check && I.deferredChecks) {
              const std::string *msg = op.attrAs<std::string>("message");
              I.deferredChecks->push_back({out[0], args, whereOf(m, g, op), describe(op), msg ? *msg : "check_le: {0} > {1}"});
            }
            if (!check || I.walkMode == GraphReplay::Walk::Capture || static_cast<const Tensor &>(out[0]).data<int64_t>()[0] == 0) {
              views[op.result()] = check ? viewOf(op.operands[0]) : whole(out[0]);
              break;
            }
          }
        }
        ++I.stats.librarySteps;
        if (op.kind == OpKind::KernelCall && kernelInPlace(op, key)) break;
        if (ir::isCollective(op.kind) && op.operands.size() == 1) {
          // A collective: the backend's own library where it has one (NCCL on GPUs), else Gloo
          // on host tensors through the evaluator's rule (docs/distributed.md).
          const View &v = viewOf(op.operands[0]);
          Tensor x = I.materialize(v, v.buf.dtype(), {}, key + "collective/"), out;
          bool ran = false;
          try {
            ran = I.backend->runCollective(op, x, out);
          } catch (const rt::dist::DistError &e) {
            // The program's error (a part that does not divide, a peer that ended, a time-out),
            // exit 1 as on the evaluator's Gloo path (ir::runCollective's failProgram), never
            // the device's exit 3.
            throw ir::ProgramCheckError(e.what(), {}, whereOf(m, g, op));
          }
          if (ran) {
            views[op.result()] = whole(out);
            if (const int64_t *ov = op.attrAs<int64_t>("overlap"); ov && *ov) deferred.insert(op.result());
            break;
          }
        }
        std::vector<const Value *> ins;
        for (const Value *o : op.operands)
          if (std::find(ins.begin(), ins.end(), o) == ins.end()) ins.push_back(o);
        interpret(op, {&op}, ins, st.outputs, key);
        break;
      }
      }
    } catch (const OpFailure &f) {
      if (f.programError) throw ir::ProgramCheckError(f.message, {}, whereOf(m, g, op));
      throw EvalError(whereOf(m, g, op), describe(op) + ": " + f.message);
    } catch (const EvalError &) {
      throw;
    } catch (const ir::ProgramCheckError &) {
      throw;
    } catch (const tile::TileError &e) {
      throw EvalError(whereOf(m, g, op), describe(op) + ": internal error: " + e.message);
    } catch (const std::exception &e) {
      throw EvalError(whereOf(m, g, op), describe(op) + ": " + e.what());
    }
    if (sentinels) sentinel(st, si, key);
    for (const Value *v : st.inputs) {
      auto lu = lastUse.find(v);
      if (lu != lastUse.end() && lu->second == si) views.erase(v);
    }
  }

  if (!deferred.empty()) I.backend->joinCollectives();
  std::vector<Tensor> outs;
  for (const Value *v : g.outputs) {
    auto it = views.find(v);
    if (it == views.end()) throw EvalError("graph @" + g.name, "the output %" + std::to_string(v->id) + " is never defined");
    if (v->type.isKey()) { outs.push_back(it->second.buf); continue; }
    outs.push_back(I.materialize(it->second, v->type.dtype, {}, graphKey + "out/"));
    const size_t k = outs.size() - 1;
    if (dests && k < dests->size() && (*dests)[k] && !outs[k].sharesStorageWith(*(*dests)[k])) {
      const Tensor &d = *(*dests)[k];
      if (d.shape() != outs[k].shape() || d.dtype() != outs[k].dtype())
        throw EvalError("graph @" + g.name, "output " + std::to_string(k) + "'s destination has another shape or dtype");
      I.backend->copyBytes(I.backend->address(d, true, "an output of a CUDA graph"), I.backend->address(outs[k], false, "an output of a CUDA graph"),
                           size_t(d.numel()) * d.itemsize());
      outs[k] = d;
    }
  }
  return outs;
}

std::unique_ptr<host::GraphExecutor> makeCompiledExecutor(const ir::KernelRunner *kernels, std::shared_ptr<StepBackend> backend) {
  int64_t threshold = kDefaultJitThreshold;
  if (const char *t = std::getenv("TSR_JIT_THRESHOLD"); t && *t) threshold = std::atoll(t);
  return std::make_unique<CompiledExecutor>(std::move(backend), kernels, threshold);
}

} // namespace tsr::exec
