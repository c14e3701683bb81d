// The bundle writer (BundleWriter.h): sources, Graph IR, schedules, programs and their code for
// each target, assembled by runtime/bundle's Writer with the manifest docs/bundle.md specifies.
#include "exec/bundle/BundleWriter.h"

#include "exec/Autotune.h"
#include "exec/MatMulTuning.h"

#include "codegen/cpu/CpuKernel.h"
#include "codegen/nvptx/PtxKernel.h"
#include "exec/bundle/BundleModels.h"
#include "exec/cpu/CpuBackend.h"
#include "exec/host/Interpreter.h"
#include "ir/Text.h"
#include "ir/eval/Evaluator.h"
#include "ir/lower/LowerGraph.h"
#include "ir/lower/LowerKernel.h"
#include "ir/passes/Pipeline.h"
#include "ir/schedule/Fusion.h"
#include "ir/schedule/LowerGroups.h"
#include "ir/tile/TileText.h"
#include "runtime/bundle/Bundle.h"
#include "runtime/bundle/Sha256.h"
#include "support/BuildId.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

extern char **environ;

namespace tsr::bundle {

namespace fs = std::filesystem;
namespace rb = rt::bundle;
namespace sched = ir::schedule;
using json = nlohmann::ordered_json;

namespace {

// Sizes for symbols no option gives: above every tile bucket, and odd, so that no power-of-two
// tile divides it and a reduction keeps its masked last chunk (tsrc --emit=ptx's choice).
constexpr int64_t kRepresentativeExtent = 1001;

// ---- files and tools ----

class TempDir {
public:
  TempDir() {
    const char *t = std::getenv("TMPDIR");
    std::string pattern = std::string(t && *t ? t : "/tmp") + "/tsrc-bundle-XXXXXX";
    if (!mkdtemp(pattern.data())) throw WriteError("cannot make a temporary folder " + pattern + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

void writeFile(const std::string &path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw WriteError("cannot write " + path);
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) throw WriteError("cannot read " + path);
  return std::move(ss).str();
}

// The last lines of a tool's output, for an error message.
std::string tail(const std::string &text) {
  std::string t = text.size() > 2000 ? "..." + text.substr(text.size() - 2000) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// Runs each command (argv; output to its `log` file) with up to `jobs` at once; throws
// WriteError naming the first that fails, with its output.
struct Command {
  std::vector<std::string> argv;
  std::string log;
};
void runAll(const std::vector<Command> &cmds, unsigned jobs) {
  std::vector<std::pair<pid_t, size_t>> running;
  std::string failure;
  auto reap = [&] {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) return;
    auto it = std::find_if(running.begin(), running.end(), [&](auto &r) { return r.first == pid; });
    if (it == running.end()) return;
    const Command &c = cmds[it->second];
    running.erase(it);
    if (failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::string how = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status)) : "signal " + std::to_string(WTERMSIG(status));
      std::string line;
      for (const std::string &a : c.argv) line += (line.empty() ? "" : " ") + a;
      failure = "`" + line + "` failed (" + how + "):\n" + tail(readFile(c.log));
    }
  };
  for (size_t i = 0; i < cmds.size() && failure.empty(); ++i) {
    while (running.size() >= std::max(1u, jobs)) reap();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, cmds[i].log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char *> argv;
    for (const std::string &a : cmds[i].argv) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      failure = "cannot run " + cmds[i].argv[0] + ": " + std::strerror(rc);
      break;
    }
    running.push_back({pid, i});
  }
  while (!running.empty()) reap();
  if (!failure.empty()) throw WriteError(failure);
}

std::string toolPath(const std::string &given, const char *env, const char *builtIn) {
  if (!given.empty()) return given;
  if (const char *e = std::getenv(env); e && *e) return e;
  return builtIn;
}

bool executable(const std::string &p) { return !p.empty() && p != "none" && access(p.c_str(), X_OK) == 0; }

// ---- the host program ----

struct SourceModule {
  const sema::ModuleInfo *info;
  std::string root, path, text;
};

// The folder a module was found in ("main", "path:N", "stdlib") and its path there.
std::vector<SourceModule> sourceModules(const sema::Program &p) {
  std::error_code ec;
  auto canon = [&](const std::string &s) { return fs::weakly_canonical(fs::path(s), ec); };
  const fs::path mainDir = canon(p.main->path).parent_path();
  std::vector<std::pair<std::string, fs::path>> roots;
  if (!p.options.stdlibDir.empty()) roots.push_back({"stdlib", canon(p.options.stdlibDir)});
  roots.push_back({"main", mainDir});
  for (size_t i = 0; i < p.options.searchPath.size(); ++i) roots.push_back({"path:" + std::to_string(i), canon(p.options.searchPath[i])});
  std::vector<SourceModule> out;
  for (const auto &m : p.modules) {
    if (!m->ast || !m->ast->file) continue; // a package's folder: no text of its own
    const fs::path file = canon(m->path);
    SourceModule s{m.get(), "", "", p.sm.file(m->ast->file).text()};
    for (const auto &[name, dir] : roots) {
      if (m->isStdlib != (name == "stdlib")) continue;
      const fs::path rel = file.lexically_relative(dir);
      if (rel.empty() || *rel.begin() == "..") continue;
      s.root = name;
      s.path = rel.generic_string();
      break;
    }
    if (s.root.empty()) throw WriteError("the module `" + m->name + "` (" + m->path + ") is in none of the folders modules are found in");
    out.push_back(std::move(s));
  }
  // The main module first (the runner's entry), the others in load order.
  std::stable_partition(out.begin(), out.end(), [&](const SourceModule &s) { return s.info == p.main; });
  return out;
}

// The models the program loads (`onnx.load`): each one's imported Graph IR (a Model section)
// and tensors (a Tensors section), found at run time by the paths the runner's checker resolves
// its calls to (BundleModels.h). TSR_BUNDLE_TEST_SKIP_MODELS=1 (test-only) leaves them out, so
// that a negative control shows the runner then cannot run the program without the files.
json bundleModels(const sema::Program &p, const std::vector<SourceModule> &sources, rb::Writer &w) {
  json out = json::array();
  if (const char *v = std::getenv("TSR_BUNDLE_TEST_SKIP_MODELS"); v && std::string(v) == "1") return out;
  std::map<std::string, std::set<std::string>> keys; // resolved path -> the runner's paths
  for (const auto &[call, load] : p.externalLoads) {
    fs::path written(load.written);
    if (written.is_absolute()) {
      keys[load.path].insert(written.lexically_normal().string());
      continue;
    }
    auto s = std::find_if(sources.begin(), sources.end(), [&](const SourceModule &m) { return m.info == load.module; });
    if (s == sources.end()) throw WriteError("the model " + load.written + " is loaded by a module the bundle does not hold");
    keys[load.path].insert((fs::path(treeFolder(s->root)) / fs::path(s->path).parent_path() / written).lexically_normal().generic_string());
  }
  ir::ModelGraphSource *src = ir::modelGraphSource();
  for (const auto &[path, ks] : keys) {
    const ir::ModelGraph *mg = src ? src->graph(path) : nullptr;
    if (!mg || !mg->module) throw WriteError("cannot carry the model " + path + ": this tool does not link the ONNX importer");
    std::ostringstream text;
    ir::printGraph(text, *mg->graph, *mg->module, false);
    json e;
    e["name"] = fs::path(path).filename().string();
    e["keys"] = json(std::vector<std::string>(ks.begin(), ks.end()));
    e["graph_ir"] = w.add(rb::SectionKind::Model, "model", text.str());
    e["inputs"] = mg->inputNames;
    std::string bytes;
    json constants = json::array();
    for (size_t i = 0; i < mg->constants.size(); ++i) {
      const rt::Tensor &t = mg->constants[i];
      bytes.resize((bytes.size() + rb::kAlignment - 1) / rb::kAlignment * rb::kAlignment, '\0');
      constants.push_back({{"name", mg->constantNames[i]}, {"dtype", std::string(dtypeName(t.dtype()))}, {"shape", t.shape()},
                           {"data", {bytes.size(), t.nbytes()}}});
      bytes.append(static_cast<const char *>(t.data()), t.nbytes());
    }
    if (!constants.empty()) e["tensors"] = w.add(rb::SectionKind::Tensors, "tensors", std::move(bytes));
    e["constants"] = constants;
    out.push_back(std::move(e));
  }
  return out;
}

std::string sourceText(const sema::Program &p, SourceRange r) {
  if (!r.valid() || !p.sm.has(r.file)) return "";
  const std::string &t = p.sm.file(r.file).text();
  return r.end <= t.size() && r.begin <= r.end ? t.substr(r.begin, r.end - r.begin) : "";
}

// The main module's functions: what `--entry` can run and what a caller of the graphs must pass.
json entryPoints(const sema::Program &p) {
  json out = json::array();
  for (const auto &fnp : p.main->functions) {
    const sema::FunctionInfo &fn = *fnp;
    json f;
    f["name"] = fn.name;
    f["kind"] = std::string(sema::functionKindWord(fn.kind));
    json params = json::array();
    for (size_t i = 0; i < fn.params.size(); ++i) {
      const sema::ParamInfo &prm = fn.params[i];
      json q;
      q["name"] = prm.name;
      q["keyword_only"] = prm.compileTime();
      if (prm.annotated) q["type"] = sema::typeStr(prm.annotated);
      if (fn.def && i < fn.def->params.size() && fn.def->params[i].defaultValue)
        q["default"] = sourceText(p, fn.def->params[i].defaultValue->range);
      params.push_back(q);
    }
    f["params"] = params;
    if (fn.declaredReturn) f["returns"] = sema::typeStr(fn.declaredReturn);
    else if (fn.inferredReturn) f["returns"] = sema::typeStr(fn.inferredReturn);
    f["symbols"] = fn.symbols;
    out.push_back(f);
  }
  return out;
}

// ---- programs ----

// The executor's name for the programs of a step kind (exec/CompiledExecutor.cpp): part of a
// program's text, so a PTX module made here is byte for byte the one the executor makes.
const char *executorName(sched::StepKind k) {
  switch (k) {
  case sched::StepKind::Elementwise: return "ew";
  case sched::StepKind::Reduce: return "reduce";
  case sched::StepKind::MatMul: return "matmul";
  case sched::StepKind::Concat: return "copy";
  case sched::StepKind::Row: return "row";
  case sched::StepKind::Gather: return "gather";
  case sched::StepKind::Random: return "random";
  case sched::StepKind::Window: return "window";
  default: return "";
  }
}

struct Lowered {
  std::unique_ptr<tile::Function> fn;
  std::string text, key, graph, kind, part, tiles;
  size_t step = 0;
};

// The programs of one target, once per distinct text (key).
class ProgramSet {
public:
  ProgramSet(const char *name, sched::TileTarget target) : name_(name), target_(std::move(target)) {}
  const char *name() const { return name_; }
  std::vector<Lowered> &programs() { return out_; }

  // Every program of every kernel step of `g`, for the concrete shapes `shapeOf` gives.
  void addGraph(const ir::Graph &g, const std::function<std::vector<int64_t>(const ir::Value *)> &shapeOf) {
    const sched::Schedule plan = sched::planFusion(g);
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const sched::Step &st = plan.steps[i];
      if (st.kind == sched::StepKind::View) {
        addViewCopies(g, i, st, shapeOf);
        continue;
      }
      const char *name = executorName(st.kind);
      if (!*name) continue;
      const std::string where = "@" + g.name + " step " + std::to_string(i) + " (" + std::string(sched::stepKindName(st.kind)) + ")";
      std::vector<sched::StepProgram> programs;
      try {
        programs = sched::lowerStep(st, shapeOf, name, target_);
      } catch (const codegen::CodegenError &e) {
        throw WriteError(where + " cannot be compiled for " + std::string(name_) + " yet: " + e.what());
      } catch (const tile::TileError &e) {
        throw std::runtime_error(where + ": " + e.message);
      }
      for (auto &sp : programs) {
        // lowerStep suffixes stages and operands; the executor does not, and names a split-K's
        // programs and a product's epilogue run alone as their own kinds.
        sp.kernel.fn->name = sp.part.rfind("split-K partials", 0) == 0 ? "matmul_parts"
                             : sp.part == "split-K sum"                ? "matmul_sum"
                             : sp.part == "epilogue"                   ? "ew"
                                                                       : name;
        for (const std::string &problem : tile::verify(*sp.kernel.fn))
          throw std::runtime_error(where + ": the program does not verify: " + problem);
        Lowered l;
        l.graph = g.name;
        l.step = i;
        l.kind = std::string(sched::stepKindName(st.kind));
        l.part = sp.part;
        l.tiles = sp.kernel.tiles;
        add(std::move(sp.kernel.fn), std::move(l));
      }
      if (st.kind == sched::StepKind::MatMul && std::string(name_) == "cpu") addRecordedMatMul(g, i, st, shapeOf);
    }
    // A scan's body runs as a graph of its own (ir/Scan.h): its programs too, at the same sizes.
    // TSR_BUNDLE_TEST_SKIP_SCAN_BODIES=1 leaves them out: the negative control of bundle_scan.
    const char *skipBodies = std::getenv("TSR_BUNDLE_TEST_SKIP_SCAN_BODIES");
    if (!skipBodies || std::string(skipBodies) != "1")
      for (const ir::Op *op : g.ops)
        if (op->body) addGraph(*op->body, shapeOf);
  }

  // A hand-written kernel's program (verified), named as the launcher names it.
  void addKernel(std::unique_ptr<tile::Function> fn, const std::string &what) {
    if (!tile::verify(*fn).empty()) return;
    Lowered l;
    l.graph = what;
    l.kind = "kernel";
    add(std::move(fn), std::move(l));
  }

private:
  // The executor copies a view into a tensor of its own (CompiledExecutor's materialize) when it
  // is a graph output or a library step's operand, and before reshaping it when it is not
  // contiguous: the copy programs of the view's result, and of a reshape's operand. Views that
  // turn out to be contiguous need no copy, so some of these are never looked up. A 0-d view
  // (`x[299]` of a 1-d tensor) is a graph output at an offset into its base, so it is copied too.
  void addViewCopies(const ir::Graph &g, size_t i, const sched::Step &st,
                     const std::function<std::vector<int64_t>(const ir::Value *)> &shapeOf) {
    const ir::Op &op = *st.anchor;
    std::vector<const ir::Value *> copied{op.result()};
    if (op.kind == ir::OpKind::Reshape && !op.operands.empty()) copied.push_back(op.operands[0]);
    for (const ir::Value *v : copied) {
      if (v->type.isKey()) continue;
      if (v->type.dims.empty() && skipScalarViewsForTest()) continue;
      Lowered l;
      l.graph = g.name;
      l.step = i;
      l.kind = "view";
      l.part = "copy";
      sched::Kernel k;
      try {
        k = sched::lowerCopy(v->type.rank(), v->type.dtype, v->type.dtype, {}, shapeOf(v), "copy", target_);
      } catch (const codegen::CodegenError &e) {
        throw WriteError("@" + g.name + " step " + std::to_string(i) + " (view) cannot be compiled for " + std::string(name_) + " yet: " + e.what());
      }
      l.tiles = k.tiles;
      if (tile::verify(*k.fn).empty()) add(std::move(k.fn), std::move(l));
    }
  }

  // A matmul step's program with the tiles recorded for its sizes on this host's CPU (an earlier
  // `tsr run --autotune=full`, exec/MatMulTuning.h), beside the heuristic's: the record joins the
  // manifest's `autotune` (autotune::used), so the bundle's run takes it without timing. A GPU's
  // records name its arch and model, which the writer does not know: they are not carried.
  void addRecordedMatMul(const ir::Graph &g, size_t i, const sched::Step &st,
                         const std::function<std::vector<int64_t>(const ir::Value *)> &shapeOf) {
    const ir::Op &op = *st.anchor;
    std::vector<int64_t> a = shapeOf(op.operands.at(0)), b = shapeOf(op.operands.at(1));
    const std::vector<int64_t> R = shapeOf(op.result());
    if (a.empty() || b.empty()) return;
    const bool av = a.size() == 1, bv = b.size() == 1;
    if (av) a.insert(a.begin(), 1);
    if (bv) b.push_back(1);
    const size_t vectors = (av ? 0 : 1) + (bv ? 0 : 1);
    if (R.size() < vectors) return;
    const size_t batchRank = R.size() - vectors;
    int64_t batch = 1;
    for (size_t d = 0; d < batchRank; ++d) batch *= R[d];
    const std::array<int64_t, 3> mnk{a[a.size() - 2], b.back(), a.back()};
    const DType adt = op.operands[0]->type.dtype, bdt = op.operands[1]->type.dtype;
    const ir::Type &rt = op.result()->type;
    const std::vector<sched::MatMulTiles> cands = sched::matmulTileCandidates(batchRank, adt, bdt, rt, mnk, target_);
    const exec::autotune::MatMulProblem p{mnk[0], mnk[1], mnk[2], batch, adt, bdt, rt.dtype, rt.policies};
    static const std::string cpuTarget = exec::cpuBackend()->tuningTarget();
    const std::optional<size_t> chosen = exec::autotune::recordedMatMulTiles(cpuTarget, p, cands);
    if (!chosen || *chosen == 0) return;
    // The product, with its epilogue where the step has one (the executor then runs the fused
    // program with the recorded tiles).
    auto addTuned = [&](const sched::Step *epilogue) {
      sched::Kernel k = sched::lowerMatMul(op, batchRank, adt, bdt, rt, mnk, "matmul", target_, cands[*chosen], 0, epilogue,
                                           st.outputs.size() > 1);
      if (!tile::verify(*k.fn).empty()) return;
      Lowered l;
      l.graph = g.name;
      l.step = i;
      l.kind = std::string(sched::stepKindName(st.kind));
      l.part = epilogue ? "tuned, with its epilogue" : "tuned";
      l.tiles = k.tiles;
      add(std::move(k.fn), std::move(l));
    };
    addTuned(st.epilogue && !av && !bv ? st.epilogue.get() : nullptr);
  }

  // TSR_BUNDLE_TEST_SKIP_0D_VIEWS=1 leaves the 0-d view copies out, so that a traced bundle lacks
  // the `copy` of `x[i]`: the negative control of negative_bundle_scalar_views.
  static bool skipScalarViewsForTest() {
    const char *e = std::getenv("TSR_BUNDLE_TEST_SKIP_0D_VIEWS");
    return e && std::string(e) == "1";
  }

  void add(std::unique_ptr<tile::Function> fn, Lowered l) {
    l.text = tile::toString(*fn);
    l.key = rb::programKey(l.text);
    if (!seen_.insert(l.key).second) return;
    l.fn = std::move(fn);
    out_.push_back(std::move(l));
  }
  const char *name_;
  sched::TileTarget target_;
  std::vector<Lowered> out_;
  std::set<std::string> seen_;
};

// The shapes of a graph's values for symbol sizes `sizes`, `fallback` for every other symbol
// (and for a dim that does not evaluate: `?`, an opaque atom).
std::function<std::vector<int64_t>(const ir::Value *)> shapesFor(const std::map<std::string, int64_t> &sizes, int64_t fallback) {
  return [&sizes, fallback](const ir::Value *v) {
    std::vector<int64_t> shape;
    for (const Dim &d : v->type.dims) {
      ir::SymbolSizes s;
      for (const std::string &name : d.symbols()) {
        auto it = sizes.find(name);
        s[name] = it == sizes.end() ? fallback : it->second;
      }
      int64_t x = fallback;
      try {
        x = ir::evaluateDim(d, s);
      } catch (const std::invalid_argument &) {
      }
      shape.push_back(x < 0 ? fallback : x);
    }
    return shape;
  };
}

// The programs that compile before run time: every graph of `graphs` for the sizes `sizes`
// (kRepresentativeExtent for the other symbols), and the hand-written kernels whose launches
// lower before run time (tsrc --emit=tile's; those whose tile extents or compile-time arguments
// are known only at run time are left to the runner, without an error).
void addStaticPrograms(ProgramSet &set, const sema::Program &p, const ir::Module &graphs, const std::map<std::string, int64_t> &sizes) {
  const auto shapeOf = shapesFor(sizes, kRepresentativeExtent);
  for (const auto &g : graphs.graphs) set.addGraph(*g, shapeOf);
  DiagnosticEngine quiet(p.sm);
  std::unique_ptr<tile::Module> kernels = ir::lowerProgramKernels(p, graphs, quiet);
  for (auto &fn : kernels->functions) {
    // The launcher names a kernel `module.kernel`; lowerProgramKernels adds `.2`, `.3`, ... for
    // further signatures, which is cut.
    const std::string what = fn->name;
    const size_t dot = fn->name.find_last_of('.');
    if (dot != std::string::npos && dot + 1 < fn->name.size() && fn->name.find_first_not_of("0123456789", dot + 1) == std::string::npos)
      fn->name.resize(dot);
    set.addKernel(std::move(fn), what);
  }
}

// ---- the trace run (WriteOptions::trace) ----

// Runs graphs on the reference evaluator, handing each new (graph, input shapes) to `record`
// first: the graphs a run lowers, with the sizes of their symbols in that run.
class RecordingExecutor final : public host::GraphExecutor {
public:
  using Record = std::function<void(const ir::Module &, const ir::Graph &, const ir::SymbolSizes &)>;
  explicit RecordingExecutor(Record record) : inner_(host::makeReferenceExecutor()), record_(std::move(record)) {}
  std::vector<rt::Tensor> run(const ir::Module &m, const ir::Graph &g, const std::vector<rt::Tensor> &inputs) override {
    std::string key = std::to_string(ir::contentHash(g, m));
    for (const rt::Tensor &t : inputs) key += "|" + rt::formatShape(t.shape()) + std::string(dtypeName(t.dtype()));
    if (seen_.insert(key).second) record_(m, g, ir::bindSymbols(m, g, inputs, {}));
    inner_->kernels = kernels;
    return inner_->run(m, g, inputs);
  }
private:
  std::unique_ptr<host::GraphExecutor> inner_;
  Record record_;
  std::set<std::string> seen_;
};

// The host CPU's backend, handing a copy of each program it compiles (the launches of
// hand-written kernels) to `record` first.
class RecordingBackend final : public exec::StepBackend {
public:
  using Record = std::function<void(const tile::Function &)>;
  explicit RecordingBackend(Record record) : inner_(exec::cpuBackend()), record_(std::move(record)) {}
  std::string name() const override { return inner_->name(); }
  std::string tuningTarget() const override { return inner_->tuningTarget(); }
  double timeMs(const std::function<void()> &work) override { return inner_->timeMs(work); }
  const sched::TileTarget &tileTarget() const override { return inner_->tileTarget(); }
  bool interpretsSmallSteps() const override { return inner_->interpretsSmallSteps(); }
  rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *forWhat) override {
    return inner_->allocate(shape, dtype, forWhat);
  }
  char *address(const rt::Tensor &t, bool write, const char *forWhat) override { return inner_->address(t, write, forWhat); }
  std::shared_ptr<const exec::BackendProgram> compile(const tile::Function &fn, const exec::CompileHints &hints) override {
    record_(fn);
    return inner_->compile(fn, hints);
  }
  void launch(const exec::BackendProgram &p, const std::vector<codegen::KernelArg> &args, const std::array<int64_t, 3> &grid,
              const exec::LaunchSite &site) override {
    inner_->launch(p, args, grid, site);
  }

private:
  std::shared_ptr<exec::StepBackend> inner_;
  Record record_;
};

// The interpreter names graphs `fn#N`, which the IR text's names (letters, digits, `_`, `.`, `$`)
// do not allow: `@fn#3` becomes `@fn$3`, so that the trace run's Graph IR parses back.
std::string parseableGraphNames(std::string text) {
  auto nameChar = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$'; };
  for (size_t at = text.find('@'); at != std::string::npos; at = text.find('@', at + 1)) {
    size_t i = at + 1;
    while (i < text.size() && nameChar(text[i])) ++i;
    if (i + 1 < text.size() && text[i] == '#' && std::isdigit(static_cast<unsigned char>(text[i + 1]))) text[i] = '$';
  }
  return text;
}

// Runs main with `flags` on the CPU (graphs on the reference evaluator, kernels compiled) and
// adds to every set the programs of each graph at the shapes it ran with, and each kernel
// launched. Returns the Graph IR text of the run's graphs. Throws WriteError when main fails.
std::string tracePrograms(const sema::Program &p, const std::vector<std::string> &flags, std::vector<ProgramSet> &sets) {
  std::vector<std::pair<std::string, std::unique_ptr<tile::Function>>> kernels;
  const ir::Module *runGraphs = nullptr;
  RecordingExecutor exec([&](const ir::Module &m, const ir::Graph &g, const ir::SymbolSizes &sizes) {
    runGraphs = &m;
    const std::map<std::string, int64_t> known(sizes.begin(), sizes.end());
    for (ProgramSet &set : sets) set.addGraph(g, shapesFor(known, kRepresentativeExtent));
  });
  auto backend = std::make_shared<RecordingBackend>([&](const tile::Function &fn) {
    // A copy through the text form (toString without locations parses back to the same text).
    auto m = tile::parseTileModule(tile::toString(fn));
    if (m->functions.size() == 1) kernels.push_back({fn.name, std::move(m->functions[0])});
  });
  std::ostringstream out, err;
  std::string irText;
  {
    host::Interpreter interp(p, exec, out, backend);
    const int rc = interp.runMain("main", flags, err);
    if (rc != 0) throw WriteError("the trace run of main failed (exit " + std::to_string(rc) + "):\n" + tail(err.str()));
    if (runGraphs) {
      std::ostringstream ir;
      ir::printModule(ir, *runGraphs);
      irText = parseableGraphNames(ir.str());
    }
  }
  for (auto &[name, fn] : kernels)
    for (ProgramSet &set : sets) {
      auto copy = tile::parseTileModule(tile::toString(*fn));
      set.addKernel(std::move(copy->functions[0]), name);
    }
  return irText;
}

// `"name"="value"` of an LLVM IR function attribute (the first occurrence).
std::string llvmAttribute(const std::string &ll, const std::string &name) {
  const std::string key = "\"" + name + "\"=\"";
  size_t at = ll.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  return ll.substr(at, ll.find('"', at) - at);
}

// The graph functions of the other modules (the stdlib's `nn`, `optim`, ...) at the
// specializations the checker recorded for their calls, added to `graphs` as lowerProgram adds
// the main module's (named `module.fn$N`). What does not lower before run time is left out.
void lowerImportedSpecializations(const sema::Program &p, ir::Module &graphs) {
  for (const auto &mod : p.modules) {
    if (mod.get() == p.main) continue;
    for (const auto &fnp : mod->functions) {
      const sema::FunctionInfo &fn = *fnp;
      if (fn.kind != sema::FunctionKind::Graph) continue;
      size_t k = 0;
      for (const std::string &key : fn.specializationOrder) {
        auto it = fn.specializationParams.find(key);
        if (it == fn.specializationParams.end()) continue;
        const std::string name = mod->name + "." + fn.name + "$" + std::to_string(++k);
        try {
          ir::Graph *g = ir::lowerGraphFunction(graphs, p, fn, it->second, name);
          ir::runGraphPipeline(*g, true);
        } catch (const ir::CompileError &) {
          if (!graphs.graphs.empty() && graphs.graphs.back()->name == name) graphs.graphs.pop_back();
        } catch (const ir::IRError &) {
          if (!graphs.graphs.empty() && graphs.graphs.back()->name == name) graphs.graphs.pop_back();
        }
      }
    }
  }
}

// The sizes tiles are chosen for: `--specialize`'s, then main's int parameters with a literal
// default (the checker names a size that comes from a flag after the flag: `S` for
// `main(S: int = 1000)`), so that a bundle has the programs of a run with the default flags.
std::map<std::string, int64_t> tileSizes(const sema::Program &p, const std::map<std::string, int64_t> &given) {
  std::map<std::string, int64_t> sizes = given;
  for (const auto &fnp : p.main->functions) {
    if (fnp->name != "main") continue;
    for (const sema::ParamInfo &prm : fnp->params)
      if (prm.defaultType && prm.defaultType->is(sema::TypeKind::Int) && prm.defaultType->intValue)
        if (auto v = prm.defaultType->intValue->constantValue(); v && *v > 0) sizes.emplace(prm.name, *v);
  }
  return sizes;
}

// What a program is, for messages: `@GRAPH step N (KIND)` or `kernel NAME`.
std::string describe(const Lowered &l) {
  if (l.kind == "kernel") return "kernel " + l.graph;
  return "@" + l.graph + " step " + std::to_string(l.step) + " (" + l.kind + ")";
}

unsigned jobs() { return std::max(1u, std::thread::hardware_concurrency()); }

// The x86-64 microarchitecture levels of the System V psABI (x86-64-v2: SSE4.2 and POPCNT, v3:
// AVX2, FMA, BMI, v4: AVX-512), with the ISA extensions each one guarantees, as LLVM names them:
// what a bundle made for such a level records, and what a runner checks.
const std::map<std::string, std::vector<std::string>> &x86Levels() {
  static const std::map<std::string, std::vector<std::string>> levels = [] {
    std::map<std::string, std::vector<std::string>> l;
    l["x86-64"] = {"cmov", "cx8", "fxsr", "mmx", "sse", "sse2"};
    l["x86-64-v2"] = l["x86-64"];
    for (const char *f : {"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}) l["x86-64-v2"].push_back(f);
    l["x86-64-v3"] = l["x86-64-v2"];
    for (const char *f : {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}) l["x86-64-v3"].push_back(f);
    l["x86-64-v4"] = l["x86-64-v3"];
    for (const char *f : {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512"}) l["x86-64-v4"].push_back(f);
    return l;
  }();
  return levels;
}

// Removes every `"NAME"="..."` function attribute from LLVM IR text.
std::string dropLlvmAttribute(std::string ll, const std::string &name) {
  const std::string key = " \"" + name + "\"=\"";
  for (size_t at = ll.find(key); at != std::string::npos; at = ll.find(key, at)) {
    const size_t end = ll.find('"', at + key.size());
    if (end == std::string::npos) break;
    ll.erase(at, end + 1 - at);
  }
  return ll;
}

// The cpu target: each program's optimized LLVM IR (the host JIT's, with the entry renamed
// tsr_bundle_cpu_KEY so that the programs share one object) compiled by llc, and the objects
// linked into one shared object (section CpuObject). For a CPU other than the host
// (WriteOptions::cpuName: an x86-64 level), the host's CPU and feature attributes are taken off the
// IR and llc compiles for the level: the optimized IR is target-independent (generic vector
// operations and intrinsics only; wider vectors than the level has are split), so only the
// instruction selection changes. Fills each entry's "cpu" and returns the target's manifest
// object (triple, cpu, features, section).
json cpuTarget(const std::vector<Lowered> &programs, std::vector<json> &entries, rb::Writer &w, const std::string &tmp,
               const WriteOptions &opts) {
  const std::string llc = toolPath(opts.llc, "TSR_LLC", TSR_BUNDLE_LLC);
  const std::string cc = toolPath(opts.cc, "TSR_HOST_CC", TSR_BUNDLE_CC);
  std::string triple, cpu, features;
  std::vector<Command> compile;
  std::vector<std::string> objects;
  for (size_t i = 0; i < programs.size(); ++i) {
    const Lowered &l = programs[i];
    const std::string symbol = "tsr_bundle_cpu_" + l.key;
    const std::string saved = l.fn->name;
    l.fn->name = symbol; // hostLLVMText names the entry after the function
    std::string ll;
    try {
      ll = codegen::hostLLVMText(*l.fn, opts.optLevel > 0);
    } catch (...) {
      l.fn->name = saved;
      throw;
    }
    l.fn->name = saved;
    if (triple.empty()) {
      const size_t at = ll.find("target triple = \"");
      if (at != std::string::npos) triple = ll.substr(at + 17, ll.find('"', at + 17) - at - 17);
      cpu = llvmAttribute(ll, "target-cpu");
      features = llvmAttribute(ll, "target-features");
    }
    const std::string base = tmp + "/cpu" + std::to_string(i);
    std::vector<std::string> argv{llc, "-O" + std::to_string(opts.optLevel), "-filetype=obj", "-relocation-model=pic"};
    if (opts.cpuName != "host") {
      for (const char *a : {"target-cpu", "target-features", "prefer-vector-width", "min-legal-vector-width"}) ll = dropLlvmAttribute(ll, a);
      argv.push_back("-mcpu=" + opts.cpuName);
    }
    writeFile(base + ".ll", ll);
    argv.insert(argv.end(), {base + ".ll", "-o", base + ".o"});
    compile.push_back({argv, base + ".log"});
    objects.push_back(base + ".o");
    entries[i]["cpu"] = {{"symbol", symbol}, {"params", l.fn->params.size()}};
  }
  json target = {{"triple", triple}, {"cpu", cpu}};
  json feats = json::array(); // LLVM's "+avx2,-amx-tile,...": the enabled ones
  for (size_t at = 0; at < features.size();) {
    size_t end = features.find(',', at);
    if (end == std::string::npos) end = features.size();
    if (features[at] == '+') feats.push_back(features.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  target["features"] = feats;
  if (opts.cpuName != "host") {
    auto level = x86Levels().find(opts.cpuName);
    if (level == x86Levels().end()) throw WriteError("--cpu " + opts.cpuName + ": expected host, x86-64, x86-64-v2, x86-64-v3 or x86-64-v4");
    if (!programs.empty() && triple.rfind("x86_64", 0) != 0) throw WriteError("--cpu " + opts.cpuName + " is an x86-64 level; this machine is " + triple);
    target["cpu"] = opts.cpuName;
    target["features"] = level->second;
  }
  if (programs.empty()) return target;
  if (!executable(llc)) throw WriteError("the cpu target needs LLVM 19's llc, not found at `" + llc + "` (TSR_LLC names another)");
  if (!executable(cc)) throw WriteError("the cpu target needs a C compiler driver to link, not found at `" + cc + "` (TSR_HOST_CC names another)");
  runAll(compile, jobs());
  Command link{{cc, "-shared", "-nostartfiles", "-o", tmp + "/cpu.so"}, tmp + "/link.log"};
  link.argv.insert(link.argv.end(), objects.begin(), objects.end());
  link.argv.push_back("-lm");
  runAll({link}, 1);
  target["section"] = w.add(rb::SectionKind::CpuObject, "cpu-object", readFile(tmp + "/cpu.so"));
  return target;
}

// The cuda target: per architecture one PTX module per program (section Ptx) and, where ptxas is
// found, its cubin (section Cubin). Fills each entry's "cuda" and returns the target's manifest
// object; `cubinArchs` receives the architectures that got cubins.
json cudaTarget(const std::vector<Lowered> &programs, std::vector<json> &entries, rb::Writer &w, const std::string &tmp,
                const WriteOptions &opts, std::vector<std::string> &cubinArchs) {
  const std::string ptxasTool = toolPath(opts.ptxas, "TSR_PTXAS", TSR_BUNDLE_PTXAS);
  const bool ptxas = executable(ptxasTool);
  json archs = json::array();
  for (json &e : entries) e["cuda"] = json::object();
  for (const std::string &arch : opts.archs) {
    std::string ptxAll;
    std::vector<Command> assemble;
    for (size_t i = 0; i < programs.size(); ++i) {
      codegen::nvptx::PtxOptions po;
      po.arch = arch;
      codegen::nvptx::PtxModule mod;
      try {
        mod = codegen::nvptx::compileToPtx({programs[i].fn.get()}, po);
      } catch (const codegen::CodegenError &e) {
        throw WriteError(describe(programs[i]) + " cannot be compiled for " + arch + " yet: " + e.what());
      }
      if (mod.kernels.size() != 1) throw std::runtime_error("compileToPtx of one program gave " + std::to_string(mod.kernels.size()) + " kernels");
      entries[i]["cuda"][arch] = {{"entry", mod.kernels[0].name},
                                  {"ptx", {ptxAll.size(), mod.ptx.size()}},
                                  {"threads", mod.kernels[0].threads},
                                  {"shared", mod.kernels[0].sharedBytes}};
      if (!mod.kernels[0].tensorMaps.empty())
        entries[i]["cuda"][arch]["tensor_maps"] = rt::formatTensorMaps(mod.kernels[0].tensorMaps);
      if (mod.kernels[0].persistent) entries[i]["cuda"][arch]["persistent"] = true;
      ptxAll += mod.ptx;
      if (ptxas) {
        const std::string base = tmp + "/" + arch + "_" + std::to_string(i);
        writeFile(base + ".ptx", mod.ptx);
        assemble.push_back({{ptxasTool, "-O" + std::to_string(opts.optLevel), "-arch=" + codegen::nvptx::ptxTarget(arch), "-o", base + ".cubin",
                             base + ".ptx"},
                            base + ".log"});
      }
    }
    json a = {{"arch", arch}, {"ptx", w.add(rb::SectionKind::Ptx, "ptx " + arch, ptxAll)}};
    if (ptxas && !programs.empty()) {
      runAll(assemble, jobs());
      std::string cubins;
      for (size_t i = 0; i < programs.size(); ++i) {
        std::string c = readFile(tmp + "/" + arch + "_" + std::to_string(i) + ".cubin");
        // Each cubin 8-byte aligned within the section, as the driver's loader wants ELF images.
        cubins.resize((cubins.size() + 7) / 8 * 8, '\0');
        entries[i]["cuda"][arch]["cubin"] = {cubins.size(), c.size()};
        cubins += c;
      }
      a["cubin"] = w.add(rb::SectionKind::Cubin, "cubin " + arch, cubins);
      cubinArchs.push_back(arch);
    }
    archs.push_back(a);
  }
  return {{"archs", archs}};
}

} // namespace

std::string writeBundle(const sema::Program &p, ir::Module &graphs, const WriteOptions &opts, WriteSummary *summary) {
  if (!p.main) throw WriteError("the program has no main module");
  lowerImportedSpecializations(p, graphs);
  const std::map<std::string, int64_t> sizeOf = tileSizes(p, opts.sizes);
  rb::Writer w;
  json m;
  m["format"] = std::to_string(rb::kFormatMajor) + "." + std::to_string(rb::kFormatMinor);
  m["compiler"] = opts.compiler.empty() ? std::string("tsrc ") + compilerVersion() + " (Tessera)" : opts.compiler;
  // The code generator's build (a hash of its sources): whether a runner is the same build.
  m["build"] = buildId();
  m["abi"] = rb::kCodeAbi;
  WriteSummary sum;

  // The host program.
  const std::vector<SourceModule> sources = sourceModules(p);
  rb::Sha256 sourceHash;
  json modules = json::array();
  for (const SourceModule &s : sources) {
    const uint32_t sec = w.add(rb::SectionKind::Module, "module", s.text);
    // Each module's root, path, length and text: no two programs hash alike by moving bytes
    // between modules.
    sourceHash.update(s.root + "\n" + s.path + "\n" + std::to_string(s.text.size()) + "\n");
    sourceHash.update(s.text);
    modules.push_back({{"name", s.info->name}, {"path", s.path}, {"root", s.root}, {"sha256", rb::sha256Hex(s.text)}, {"section", sec}});
  }
  m["modules"] = modules;
  m["main"] = sources.front().path;
  m["source_sha256"] = sourceHash.hex();
  sum.modules = sources.size();
  if (json models = bundleModels(p, sources, w); !models.empty()) m["models"] = std::move(models);

  // The Graph IR and its schedules.
  std::ostringstream ir;
  ir::printModule(ir, graphs);
  m["ir_sha256"] = rb::sha256Hex(ir.str());
  json graphNames = json::array();
  for (const auto &g : graphs.graphs) graphNames.push_back(g->name);
  m["graph_ir"] = {{"section", w.add(rb::SectionKind::GraphIR, "graph-ir", ir.str())}, {"graphs", graphNames}};
  sum.graphs = graphs.graphs.size();
  std::ostringstream schedules;
  for (const auto &g : graphs.graphs) sched::printSchedule(schedules, *g, sched::planFusion(*g));
  m["entry_points"] = entryPoints(p);
  json sizes = json::object();
  for (const auto &[k, v] : sizeOf) sizes[k] = v;
  m["sizes"] = sizes;
  m["default_size"] = kRepresentativeExtent;

  // Programs per target: those that compile before run time, then those of the trace run.
  std::vector<ProgramSet> targets;
  if (opts.cpu) targets.emplace_back("cpu", sched::TileTarget::cpu());
  if (opts.cuda)
    targets.emplace_back("cuda", sched::TileTarget::gpu([](const tile::Function &f) { return codegen::nvptx::sharedBytesOf(f); }));
  for (ProgramSet &t : targets) addStaticPrograms(t, p, graphs, sizeOf);
  if (opts.trace) {
    const std::string traced = tracePrograms(p, *opts.trace, targets);
    m["trace"] = {{"flags", *opts.trace}, {"graph_ir", w.add(rb::SectionKind::GraphIR, "graph-ir trace", traced)}};
    // The configurations the trace run's autotuned launches took from a record (or tuned, under
    // TSR_AUTOTUNE=full), so that a run of the bundle takes them without timing (exec/Autotune.h).
    json tuned = json::array();
    for (const exec::autotune::Carried &c : exec::autotune::used()) {
      json config = json::array();
      for (auto &[name, v] : c.winner) config.push_back(json::array({name, v}));
      tuned.push_back({{"target", c.targetKind}, {"kernel", c.kernel}, {"hash", c.hash}, {"shape", c.shape},
                       {"dtypes", c.dtypes}, {"fixed", c.fixed}, {"config", config}});
    }
    if (!tuned.empty()) m["autotune"] = tuned;
  }

  std::string tileText;
  json programs = json::array();
  json targetsJson = json::object();
  TempDir tmp;
  for (ProgramSet &t : targets) {
    schedules << "# " << t.name() << " programs (tiles for the symbols' sizes: " << sizes.dump() << ", others " << kRepresentativeExtent << ")\n";
    std::vector<json> entries;
    for (const Lowered &l : t.programs()) {
      if (l.kind == "kernel") schedules << "program " << l.key << " kernel " << l.graph << "\n";
      else
        schedules << "program " << l.key << " @" << l.graph << " step " << l.step << " (" << l.kind << ")"
                  << (l.part.empty() ? "" : " " + l.part) << ", tiles " << l.tiles << "\n";
      json e;
      e["target"] = t.name();
      e["key"] = l.key;
      e["name"] = l.fn->name;
      e["graph"] = l.graph;
      e["step"] = l.step;
      e["kind"] = l.kind;
      e["part"] = l.part;
      e["tiles"] = l.tiles;
      e["text"] = {tileText.size(), l.text.size()};
      tileText += l.text;
      entries.push_back(e);
    }

    if (std::string(t.name()) == "cpu") {
      targetsJson["cpu"] = cpuTarget(t.programs(), entries, w, tmp.path(), opts);
      sum.cpuPrograms = t.programs().size();
    } else {
      targetsJson["cuda"] = cudaTarget(t.programs(), entries, w, tmp.path(), opts, sum.cubinArchs);
      sum.cudaPrograms = t.programs().size();
    }
    for (json &e : entries) programs.push_back(std::move(e));
  }
  m["schedule"] = {{"section", w.add(rb::SectionKind::Schedule, "schedule", schedules.str())}};
  m["tile_ir"] = {{"section", w.add(rb::SectionKind::TileIR, "tile-ir", tileText)}};
  m["targets"] = targetsJson;
  m["programs"] = programs;
  if (summary) *summary = sum;
  return w.finish(m.dump(1));
}

} // namespace tsr::bundle
