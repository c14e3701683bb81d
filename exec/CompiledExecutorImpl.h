// The state of a CompiledExecutor (its pimpl), private to exec/CompiledExecutor.cpp: the program
// cache and the requests of each kind of kernel step, the JIT threshold's bookkeeping, the
// products' tile choice (autotuning), compiling a graph's programs ahead of its first run, and
// launching. CompiledExecutor.cpp walks a graph's steps with it.
#pragma once

#include "exec/Autotune.h"
#include "exec/CompiledExecutor.h"
#include "exec/GraphReplay.h"
#include "exec/MatMulTuning.h"
#include "exec/StepViews.h"
#include "ir/Text.h"
#include "ir/schedule/Fusion.h"
#include "ir/schedule/LowerGemv.h"
#include "ir/schedule/LowerGroups.h"

#include <atomic>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace tsr::exec {

using namespace steps;
using ir::Value;

struct CompiledExecutor::Impl {
  std::shared_ptr<StepBackend> backend;
  int64_t jitThreshold = 0;
  // The source position of the op being run, for launch errors (LaunchSite).
  std::string site;
  std::atomic<uint64_t> launches{0};
  CompiledExecutor::Stats stats;
  const bool forceInterpret = forceInterpretForTests();
  // CUDA-graph replay (exec/GraphReplay.h), made at the first call that wants it. `walking`: a
  // walk GraphReplay asked for is under way (its nested call must not replay again).
  // In its warm-up and capture walks, index checks count into device memory and the counters are
  // kept in `deferredChecks` to the walk's end (so both walks allocate alike); the warm-up reads
  // each at once, a capture leaves them to GraphReplay, which reads them lazily after replays.
  // `outputDest`: the walk's output destinations (GraphReplay::WalkFn), taken by the walk's
  // top-level run (not the composites' nested ones).
  std::unique_ptr<GraphReplay> replay;
  bool walking = false;
  GraphReplay::Walk walkMode = GraphReplay::Walk::Plain;
  std::vector<DeferredCheck> *deferredChecks = nullptr;
  const GraphReplay::Dests *outputDest = nullptr;
  // Library ops as graphs of device ops in those walks (DeviceComposites.h), by step and shapes.
  std::unordered_map<std::string, std::unique_ptr<ir::Graph>> composites;
  // Work (element-ops) each step has run interpreted so far, by its program key.
  std::unordered_map<std::string, int64_t> interpretedWork;

  // Whether a step of `work` element-ops per call is compiled now: once the work it has done
  // interpreted reaches the threshold (a first call that large compiles at once), so that a
  // program whose tensors are small never waits for the JIT, and a loop over them compiles
  // after its first iterations. Counted in work, not time, so that runs are reproducible.
  bool compileNow(const std::string &key, int64_t work) {
    if (forceInterpret) return false;
    if (jitThreshold <= 0 || !backend->interpretsSmallSteps() || programs.count(key)) return true;
    int64_t &done = interpretedWork[key];
    done += std::max<int64_t>(work, 1);
    return done >= jitThreshold;
  }
  // Compiled programs by (graph content, step, program, iteration shape): the plan of a graph
  // for the shapes it has been called with. Pointers into graphs are never kept, so a graph
  // freed and another allocated at its address cannot alias a plan.
  std::unordered_map<std::string, Compiled> programs;
  // A graph's fusion plan and content key, computed at its first run (planning and hashing the
  // graph's text took most of a small step's host time), by Graph::serial, which is never reused.
  struct GraphPlan {
    size_t ops = 0; // the graph's op count when planned: a graph rewritten since is planned again
    sched::Schedule plan;
    std::string key;
    std::string notCapturable; // whyNotCapturable (GraphReplay.h)
  };
  std::unordered_map<uint64_t, GraphPlan> plans;
  const GraphPlan &planOf(const ir::Module &m, const ir::Graph &g) {
    auto it = plans.find(g.serial);
    if (it != plans.end() && it->second.ops == g.ops.size()) return it->second;
    GraphPlan p{g.ops.size(), sched::planFusion(g), std::to_string(ir::structureHash(g, m)) + "/"};
    // Convolution and pooling: window programs on a GPU; on the host CPU the evaluator's
    // im2col product stays the faster code (windowStepsOnCpu).
    if (!tiles().gpuTarget() && !windowStepsOnCpu())
      for (sched::Step &st : p.plan.steps)
        if (st.kind == sched::StepKind::Window) st.kind = sched::StepKind::Library;
    p.notCapturable = whyNotCapturable(p.plan);
    return plans.insert_or_assign(g.serial, std::move(p)).first->second;
  }

  const Compiled &program(const ProgramRequest &r) {
    auto it = programs.find(r.key);
    if (it != programs.end()) return it->second;
    rt::profile::Scope span("compile", [&] { return "compile a program of " + site; });
    Compiled c = compile(*backend, r.lower(), r.work);
    span.add("program", c.name);
    ++stats.compiledLazily;
    return programs.emplace(r.key, std::move(c)).first->second;
  }

  const sched::TileTarget &tiles() const { return backend->tileTarget(); }

  // The programs of the steps (Impl::program finds them by key; `key` is the step's prefix).
  ProgramRequest elementwiseProgram(const sched::Step &st, const std::string &key, const Shape &S, int64_t work) {
    return {key + shapeKey(S), [this, &st, S] { return sched::lowerElementwise(st, S, "ew", tiles()); }, work};
  }
  ProgramRequest rowProgram(const sched::Step &st, const std::string &key, const Shape &S, int64_t work) {
    return {key + shapeKey(S), [this, &st, S] { return sched::lowerRow(st, S, "row", tiles()); }, work};
  }
  ProgramRequest gatherProgram(const Op &op, const std::string &key, const Shape &S, int64_t work) {
    return {key + shapeKey(S), [this, &op, S] { return sched::lowerGather(op, S, "gather", tiles()); }, work};
  }
  ProgramRequest randomProgram(const Op &op, const std::string &key, const Shape &S, int64_t work) {
    return {key + shapeKey(S), [this, &op, S] { return sched::lowerRandom(op, S, "random", tiles()); }, work};
  }
  // A window program reads its operands' extents at run time, so it is keyed by them as well:
  // two calls with one result shape may differ in x's (a stride's remainder).
  ProgramRequest windowProgram(const Op &op, const std::string &key, const Shape &S, const std::vector<Shape> &ins, int64_t work) {
    std::string k = key + shapeKey(S);
    for (const Shape &s : ins) k += shapeKey(s);
    return {k, [this, &op, S] { return sched::lowerWindow(op, S, "window", tiles()); }, work};
  }
  ProgramRequest reduceProgram(const sched::Step &st, const std::string &key, size_t stage, const ReduceStage &rs,
                               int64_t work) {
    return {key + std::to_string(stage) + shapeKey(rs.iter) + (rs.last ? "L" : ""),
            [this, &st, stage, rs] { return sched::lowerReduceStage(st, stage, rs.last, rs.iter, rs.axis, "reduce", tiles()); },
            work};
  }
  // A product of a few rows runs as a GEMV program (ir/schedule/LowerGemv.h), named as the
  // matmul's so that a bundle's copy of it (lowerStep's) is the same text.
  bool gemvWanted(const Op &op, const MatMulDims &d) const { return sched::gemvWanted(d.M, op.result()->type); }
  // `epi`, `storeProduct`: as matmulProgram's.
  ProgramRequest gemvProgram(const Op &op, const std::string &key, const MatMulDims &d, DType adt, DType bdt, int64_t work,
                             const sched::Step *epi = nullptr, bool storeProduct = false) {
    return {key + "gemv" + shapeKey(d.full) + "k" + std::to_string(d.K) + std::string(dtypeName(adt)) + std::string(dtypeName(bdt)) +
                (epi ? (storeProduct ? "E2" : "E1") : ""),
            [this, &op, d, adt, bdt, epi, storeProduct] {
              return sched::lowerGemv(op, d.batch.size(), adt, bdt, op.result()->type, {d.M, d.N, d.K},
                                      sched::gemvLayoutOf(op), "matmul", tiles(), epi, storeProduct);
            },
            work};
  }
  // `given`: a candidate's tiles in place of the heuristic's (exec/MatMulTuning.h).
  // `chunk` > 0: the partial products of a split-K (sched::matmulSplitK).
  // `epi`: the step's epilogue computed in the product's program (Step::epilogue), the product's
  // result stored as well when `storeProduct`.
  ProgramRequest matmulProgram(const Op &op, const std::string &key, const MatMulDims &d, DType adt, DType bdt,
                               int64_t work, const std::optional<sched::MatMulTiles> &given = std::nullopt,
                               int64_t chunk = 0, const sched::Step *epi = nullptr, bool storeProduct = false) {
    return {key + shapeKey(d.full) + "k" + std::to_string(d.K) + std::string(dtypeName(adt)) + std::string(dtypeName(bdt)) +
                (given ? "t" + autotune::tilesText(*given) : std::string()) + (chunk ? "s" + std::to_string(chunk) : std::string()) +
                (epi ? (storeProduct ? "E2" : "E1") : ""),
            [this, &op, d, adt, bdt, given, chunk, epi, storeProduct] {
              return sched::lowerMatMul(op, d.batch.size(), adt, bdt, op.result()->type, {d.M, d.N, d.K},
                                        chunk ? "matmul_parts" : "matmul", tiles(), given, chunk, epi, storeProduct);
            },
            work};
  }
  // The tiles autotuning chose for a product (nullopt: the heuristic's), by the heuristic
  // request's key (matmulTiles): a product with an epilogue runs its fused program with them.
  std::unordered_map<std::string, std::optional<sched::MatMulTiles>> matmulChoice;
  // The split of a matmul step (none for vector operands).
  sched::SplitK splitOf(const Op &op, const MatMulDims &d, DType adt, DType bdt) const {
    if (d.av || d.bv) return {};
    return sched::matmulSplitK(d.batch.size(), adt, bdt, op.result()->type, {d.M, d.N, d.K}, numelOf(d.batch), tiles());
  }
  ProgramRequest splitSumProgram(const Op &op, const std::string &key, const sched::SplitK &split, const Shape &full) {
    return {key + "sum" + std::to_string(split.parts) + shapeKey(full),
            [this, &op, split, full] { return sched::lowerSplitKSum(split, op.result()->type, full, "matmul_sum", tiles()); },
            numelOf(full) * split.parts};
  }

  // The program each matmul step runs, by the heuristic's request key: the tiles that
  // autotune::chooseMatMulTiles took at the step's first call with these sizes.
  std::unordered_map<std::string, Compiled> matmuls;

  // The tiles of a matmul step (nullopt: the heuristic's), chosen at its first call with these
  // sizes: under --autotune=full by timing the candidates into a scratch output shaped `R` (laid
  // out as `out`, whose buffer may be empty), else from the record or the heuristic, compiling
  // nothing.
  std::optional<sched::MatMulTiles> matmulTiles(const Op &op, const std::string &key, const MatMulDims &d, DType adt, DType bdt,
                                                int64_t work, const View &out, const std::vector<rt::KernelArg> &inputs,
                                                const Shape &R) {
    ProgramRequest heuristic = matmulProgram(op, key, d, adt, bdt, work);
    if (auto it = matmulChoice.find(heuristic.key); it != matmulChoice.end()) return it->second;
    const ir::Type &rt = op.result()->type;
    const std::vector<sched::MatMulTiles> cands =
        sched::matmulTileCandidates(d.batch.size(), adt, bdt, rt, {d.M, d.N, d.K}, tiles());
    auto request = [&](size_t i) { return i == 0 ? heuristic : matmulProgram(op, key, d, adt, bdt, work, cands[i]); };
    const autotune::MatMulProblem problem{d.M, d.N, d.K, numelOf(d.batch), adt, bdt, rt.dtype, rt.policies};
    auto compileAll = [&] {
      std::vector<sched::Kernel> kernels;
      std::vector<std::string> keys;
      for (size_t i = 0; i < cands.size(); ++i) {
        ProgramRequest r = request(i);
        if (programs.count(r.key)) continue;
        try {
          kernels.push_back(r.lower());
          checkLowered(kernels.back());
          keys.push_back(r.key);
        } catch (...) {
          if (kernels.size() > keys.size()) kernels.pop_back(); // reported when the candidate is prepared
        }
      }
      std::vector<CompileRequest> batch;
      for (const sched::Kernel &k : kernels) batch.push_back({k.fn.get(), CompileHints{work}});
      if (batch.size() < 2) return;
      rt::profile::Scope span("compile", [&] { return "compile " + std::to_string(batch.size()) + " tile candidates of " + site; });
      const auto codes = backend->compileAll(batch);
      for (size_t i = 0; i < codes.size(); ++i)
        if (codes[i]) programs.emplace(keys[i], Compiled{codes[i], kernels[i].grid, kernels[i].fn->name});
    };
    auto prepare = [&](size_t i) -> autotune::Launch {
      const Compiled &c = program(request(i));
      Tensor scratch = allocate(R, rt.dtype);
      View sv = out;
      sv.buf = scratch;
      std::vector<rt::KernelArg> args{arg(sv, true)};
      args.insert(args.end(), inputs.begin(), inputs.end());
      const auto grid = gridOf(c.grid, d.full);
      StepBackend *b = backend.get();
      const LaunchSite where{c.name, site};
      return [b, &c, args, grid, scratch, where] {
        if (grid[0] > 0 && grid[1] > 0 && grid[2] > 0) launchProfiled(*b, *c.code, args, grid, where);
      };
    };
    const size_t chosen = cands.size() > 1 ? autotune::chooseMatMulTiles(*backend, problem, cands, compileAll, prepare) : 0;
    return matmulChoice.emplace(heuristic.key, chosen ? std::optional<sched::MatMulTiles>(cands[chosen]) : std::nullopt)
        .first->second;
  }
  // The program of a matmul step without an epilogue into `out` (its view of the result, shaped
  // `full`) from the KernelArgs `inputs` (a and b), with matmulTiles' tiles.
  const Compiled &matmul(const Op &op, const std::string &key, const MatMulDims &d, DType adt, DType bdt, int64_t work,
                         const View &out, const std::vector<rt::KernelArg> &inputs, const Shape &R) {
    ProgramRequest heuristic = matmulProgram(op, key, d, adt, bdt, work);
    if (auto it = matmuls.find(heuristic.key); it != matmuls.end()) return it->second;
    const std::optional<sched::MatMulTiles> t = matmulTiles(op, key, d, adt, bdt, work, out, inputs, R);
    Compiled c = program(t ? matmulProgram(op, key, d, adt, bdt, work, t) : heuristic);
    // TSR_AUTOTUNE_TEST_BREAK=grid (a negative control of tests/autotune/matmul_tiles.py only):
    // the chosen program runs over the heuristic's grid.
    if (const char *b = std::getenv("TSR_AUTOTUNE_TEST_BREAK"); b && std::string(b) == "grid" && t)
      c.grid = program(heuristic).grid;
    return matmuls.emplace(heuristic.key, std::move(c)).first->second;
  }
  ProgramRequest copyProgram(const std::string &keyPrefix, size_t rank, DType from, DType to, const Policies &pol,
                             const Shape &shape) {
    return {keyPrefix + "copy/" + std::to_string(rank) + std::string(dtypeName(from)) + ">" + std::string(dtypeName(to)) +
                (pol.saturate ? "s" : "") + shapeKey(shape),
            [this, rank, from, to, pol, shape] { return sched::lowerCopy(rank, from, to, pol, shape, "copy", tiles()); },
            numelOf(shape)};
  }

  // Whether every kernel step compiles at its first call (no JIT threshold, or a backend that
  // interprets nothing): then a graph's programs are known before it runs (prepare).
  bool compilesEveryStep() const {
    return !forceInterpret && (jitThreshold <= 0 || !backend->interpretsSmallSteps());
  }
  bool compileAhead = true;
  // Graphs and sizes whose programs prepare() has compiled.
  std::unordered_set<std::string> prepared;

  // Before a graph's first run for some sizes, when every kernel step compiles at its first
  // call: lowers the programs of all its kernel steps and compiles them as one batch
  // (StepBackend::compileAll: on every core of the host CPU), instead of one at a time as the
  // run reaches them. What it cannot know or do is left to the run, which compiles lazily and
  // reports errors at their ops: a step whose shapes are not known (a `?` dim), or whose
  // lowering or compilation fails; and the copies that views need (their layouts are known
  // only when the run gets there).
  void prepare(const sched::Schedule &plan, const std::string &graphKey,
               const std::function<Shape(const Value *)> &shapeOf) {
    std::vector<ProgramRequest> requests;
    for (size_t si = 0; si < plan.steps.size(); ++si) {
      const sched::Step &st = plan.steps[si];
      const Op &op = *st.anchor;
      const std::string key = graphKey + std::to_string(si) + "/";
      try {
        switch (st.kind) {
        case sched::StepKind::Elementwise:
          requests.push_back(elementwiseProgram(st, key, shapeOf(st.outputs[0]), stepWork(st, shapeOf).second));
          break;
        case sched::StepKind::Row:
          requests.push_back(rowProgram(st, key, shapeOf(st.outputs[0]), stepWork(st, shapeOf).second));
          break;
        case sched::StepKind::Gather:
          requests.push_back(gatherProgram(op, key, shapeOf(op.result()), stepWork(st, shapeOf).second));
          break;
        case sched::StepKind::Random:
          requests.push_back(randomProgram(op, key, shapeOf(op.result()), stepWork(st, shapeOf).second));
          break;
        case sched::StepKind::Window: {
          std::vector<Shape> ins;
          for (const Value *v : op.operands) ins.push_back(shapeOf(v));
          requests.push_back(windowProgram(op, key, shapeOf(op.result()), ins, stepWork(st, shapeOf).second));
          break;
        }
        case sched::StepKind::Reduce: {
          const int64_t work = stepWork(st, shapeOf).second;
          const auto stages = reduceStages(op, shapeOf(op.operands[0]));
          for (size_t i = 0; i < stages.size(); ++i) requests.push_back(reduceProgram(st, key, i, stages[i], work));
          break;
        }
        case sched::StepKind::MatMul: {
          const MatMulDims d = matmulDims(shapeOf(op.operands[0]), shapeOf(op.operands[1]), shapeOf(op.result()));
          const DType adt = op.operands[0]->type.dtype, bdt = op.operands[1]->type.dtype;
          if (gemvWanted(op, d)) {
            const sched::Step *epi = d.av || d.bv ? nullptr : st.epilogue.get();
            requests.push_back(gemvProgram(op, key, d, adt, bdt, stepWork(st, shapeOf).second, epi, st.outputs.size() > 1));
            break;
          }
          const sched::SplitK split = splitOf(op, d, adt, bdt);
          const sched::Step *epi = split || d.av || d.bv ? nullptr : st.epilogue.get();
          requests.push_back(matmulProgram(op, key, d, adt, bdt, stepWork(st, shapeOf).second, std::nullopt, split.chunk,
                                           epi, st.outputs.size() > 1));
          if (split) requests.push_back(splitSumProgram(op, key, split, d.full));
          break;
        }
        case sched::StepKind::Concat: {
          Policies pol;
          pol.saturate = op.result()->type.policies.saturate;
          for (size_t i = 0; i < op.operands.size(); ++i) {
            const Shape src = shapeOf(op.operands[i]);
            if (numelOf(src) > 0)
              requests.push_back(copyProgram(key + std::to_string(i), src.size(), op.operands[i]->type.dtype,
                                             op.result()->type.dtype, pol, src));
          }
          break;
        }
        case sched::StepKind::View:
        case sched::StepKind::Library:
          break;
        }
      } catch (...) {
        // a shape the run reports, or one not known yet
      }
    }
    std::vector<sched::Kernel> kernels;
    std::vector<std::string> keys;
    std::vector<CompileRequest> batch;
    std::unordered_set<std::string> seen;
    for (ProgramRequest &r : requests) {
      if (programs.count(r.key) || !seen.insert(r.key).second) continue;
      try {
        sched::Kernel k = r.lower();
        checkLowered(k);
        kernels.push_back(std::move(k));
        keys.push_back(r.key);
        batch.push_back({kernels.back().fn.get(), CompileHints{r.work}});
      } catch (...) {
        // the run lowers it again and reports the error at its op
      }
    }
    if (batch.empty()) return;
    rt::profile::Scope span("compile", [&] { return "compile " + std::to_string(batch.size()) + " programs"; });
    span.add("programs", double(batch.size()));
    const auto codes = backend->compileAll(batch);
    for (size_t i = 0; i < codes.size(); ++i) {
      if (!codes[i]) continue;
      programs.emplace(keys[i], Compiled{codes[i], kernels[i].grid, kernels[i].fn->name});
      ++stats.compiledAhead;
    }
  }

  // The iteration shape of a kernel step and the element-ops of one run of it (the JIT
  // threshold's and CompileHints' measure). Throws OpFailure when a dim is not known.
  static std::pair<Shape, int64_t> stepWork(const sched::Step &st, const std::function<Shape(const Value *)> &shapeOf) {
    const Op &op = *st.anchor;
    Shape in = st.kind == sched::StepKind::Reduce ? shapeOf(op.operands[0]) : shapeOf(op.result());
    int64_t work = numelOf(in) * int64_t(std::max<size_t>(st.cone.size(), 1));
    if (st.kind == sched::StepKind::MatMul && !op.operands[0]->type.dims.empty())
      work *= std::max<int64_t>(1, shapeOf(op.operands[0]).back());
    return {in, work};
  }

  // The KernelArg of `v` for a program that reads it (or writes it: `write`).
  rt::KernelArg arg(const View &v, bool write = false) {
    return argOf(v, backend->address(v.buf, write, site.c_str()));
  }
  Tensor allocate(const Shape &shape, DType dtype) { return backend->allocate(shape, dtype, site.c_str()); }

  void launch(const Compiled &c, const std::vector<rt::KernelArg> &args, const Shape &iter) {
    auto grid = gridOf(c.grid, iter);
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;
    launchProfiled(*backend, *c.code, args, grid, LaunchSite{c.name, site});
    ++launches;
  }

  // Copies the elements of view `src` into view `dst` of equal shape (converted to dst's dtype,
  // rounded by `pol`).
  void copy(const View &dst, const View &src, const Policies &pol, const std::string &keyPrefix) {
    const size_t n = src.shape.size();
    const DType to = dst.buf.dtype();
    const Compiled &c = program(copyProgram(keyPrefix, n, src.buf.dtype(), to, pol, src.shape));
    launch(c, {arg(dst, true), arg(src)}, src.shape);
  }

  // A contiguous tensor with v's elements (v's buffer itself when it already is one): a copy
  // program, or a host loop for copies too small to be worth compiling one.
  Tensor materialize(const View &v, DType to, const Policies &pol, const std::string &keyPrefix) {
    if (v.buf.dtype() == to && v.offset == 0 && contiguous(v) && numelOf(v.shape) == v.buf.numel())
      return v.buf.reshape(v.shape);
    if (v.buf.dtype() == to && !compileNow(keyPrefix + "copy" + shapeKey(v.shape), numelOf(v.shape))) return hostCopy(v);
    Tensor out = allocate(v.shape, to);
    copy(whole(out), v, pol, keyPrefix);
    return out;
  }

  static Tensor hostCopy(const View &v) {
    Tensor out = Tensor::empty(v.shape, v.buf.dtype());
    const int64_t n = numelOf(v.shape), w = int64_t(v.buf.itemsize());
    const auto *src = static_cast<const unsigned char *>(v.buf.data());
    auto *dst = static_cast<unsigned char *>(out.data());
    Shape idx(v.shape.size(), 0);
    int64_t off = v.offset;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * w, src + off * w, size_t(w));
      for (size_t d = v.shape.size(); d-- > 0;) {
        if (++idx[d] < v.shape[d]) { off += v.strides[d]; break; }
        off -= v.strides[d] * (v.shape[d] - 1);
        idx[d] = 0;
      }
    }
    return out;
  }
};

} // namespace tsr::exec
