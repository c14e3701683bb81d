// tsrc: the Tessera compiler driver (spec section 13).
//
// Exit codes (spec 13): 0 success, 1 user error (diagnostics printed), 2 usage error,
// 70 internal compiler error.
#include "frontend/Parser.h"
#include "ir/Text.h"
#include "onnx/Import.h"
#include "ir/passes/Pipeline.h"
#include "onnx/Export.h"
#include "onnx/Language.h"
#include "ir/Verifier.h"
#include "ir/lower/LowerGraph.h"
#include "ir/lower/LowerKernel.h"
#include "ir/eval/Evaluator.h"
#include "ir/schedule/Fusion.h"
#include "ir/schedule/LowerGroups.h"
#include "codegen/cpu/CpuKernel.h"
#include "codegen/nvptx/PtxKernel.h"
#include "exec/Autotune.h"
#include "exec/bundle/BundleWriter.h"
#include "ir/tile/TileText.h"
#include "sema/Program.h"
#include "support/RunModes.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>
#include <sstream>
#include <unistd.h>

using namespace tsr;
namespace fs = std::filesystem;

// --read-graph / --read-tile: parse FILE as IR text, verify it and print it back (the text
// form's round trip). A malformed or ill-formed text is a user error: `FILE:line:col: message`
// or `FILE: graph @name: problem`, exit 1.
template <class Error, class ParseVerifyPrint>
static int readIRText(const std::string &file, ParseVerifyPrint run) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << "tsrc: cannot open `" << file << "`\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    run(text.str());
    return 0;
  } catch (const Error &e) {
    std::cerr << file << ":" << e.message << "\n";
    return 1;
  }
}

// ---- graph kernels (--emit=ptx, --emit=tile --graph-kernels) ----
// The kernel steps of every graph's schedule, lowered as an executor would lower them, with the
// GPU tile policy (ir/schedule/LowerGroups.h). Programs read their extents at run time (`dim`),
// so their text depends only on ops, dtypes, ranks and tiles; tiles are chosen from a
// representative size for every symbolic dim: 1001, above every GPU bucket (so the tiles are
// those of large tensors) and odd (so no power-of-two tile divides it and a reduction keeps its
// masked last chunk: the program that serves any extent).
constexpr int64_t kRepresentativeExtent = 1001;

// The extents of `v`'s type with each symbol at kRepresentativeExtent; a dim that does not
// evaluate (unknown `?`, an opaque atom) is kRepresentativeExtent too.
static std::vector<int64_t> representativeShape(const ir::Value *v) {
  std::vector<int64_t> shape;
  for (const Dim &d : v->type.dims) {
    ir::SymbolSizes sizes;
    for (const std::string &name : d.symbols()) sizes[name] = kRepresentativeExtent;
    int64_t x = kRepresentativeExtent;
    try {
      x = ir::evaluateDim(d, sizes);
    } catch (const std::invalid_argument &) {
    }
    shape.push_back(x);
  }
  return shape;
}

// Re-points the locations of `f` (indices into `from`'s file table) at `to`'s table.
static void remapLocs(tile::Function &f, const std::vector<std::string> &from, tile::Module &to) {
  auto remap = [&](ir::Loc &l) {
    if (l.valid() && l.file <= from.size()) l.file = to.fileIndex(from[l.file - 1]);
  };
  remap(f.loc);
  std::function<void(tile::Block &)> walk = [&](tile::Block &b) {
    for (tile::Op *op : b.ops) {
      remap(op->loc);
      for (tile::Block *r : op->regions) walk(*r);
    }
  };
  walk(*f.body);
}

// Appends to `kernels` every program of every kernel step of `graphs`' schedules for a GPU of the
// default budget (TileTarget::gpu: 4 warps, 48 KiB), named `GRAPH.stepI.KIND[.stageS|.operandJ]`,
// and to `what` one description per program ("@g step 3 (reduce) stage 0 of 2, tiles BC=8 BK=128").
// A step with a construct that NVPTX cannot compile yet is an error naming the step (printed;
// returns false after trying every step). A program that does not verify is an internal error.
static bool addGraphKernels(const ir::Module &graphs, tile::Module &kernels, std::vector<std::string> &what) {
  namespace sched = ir::schedule;
  const auto target = sched::TileTarget::gpu([](const tile::Function &f) { return codegen::nvptx::sharedBytesOf(f); });
  bool ok = true;
  // A graph's steps, then those of the bodies of its region ops (a scan's: compiled once, apart).
  std::function<void(const ir::Graph *)> add = [&](const ir::Graph *g) {
    const sched::Schedule plan = sched::planFusion(*g);
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const sched::Step &st = plan.steps[i];
      if (st.anchor->body) add(st.anchor->body.get());
      const std::string kind(sched::stepKindName(st.kind));
      const std::string step = "@" + g->name + " step " + std::to_string(i) + " (" + kind + ")";
      std::vector<sched::StepProgram> programs;
      try {
        programs = sched::lowerStep(st, representativeShape, g->name + ".step" + std::to_string(i) + "." + kind, target);
      } catch (const codegen::CodegenError &e) {
        std::cerr << "tsrc: error: " << step << " cannot be compiled for the GPU yet: " << e.what() << "\n";
        ok = false;
        continue;
      } catch (const tile::TileError &e) {
        throw std::runtime_error(step + ": " + e.message);
      }
      for (auto &p : programs) {
        for (const std::string &problem : tile::verify(*p.kernel.fn))
          throw std::runtime_error(step + ": the program does not verify: " + problem);
        remapLocs(*p.kernel.fn, graphs.files, kernels);
        what.push_back(step + (p.part.empty() ? "" : " " + p.part) + ", tiles " + p.kernel.tiles);
        kernels.functions.push_back(std::move(p.kernel.fn));
      }
    }
  };
  for (const auto &g : graphs.graphs) add(g.get());
  return ok;
}

// -o FILE: the bundle of the checked program (exec/bundle/BundleWriter.h), written to a
// temporary file beside FILE and renamed into place, so a failed write leaves no partial bundle.
// What cannot be made (a tool missing or failing, a step the GPU cannot compile yet) is
// `tsrc: error: ...` and exit 1. With an empty `output` (--target alone) the same compilation,
// written nowhere.
static int writeBundleFile(const sema::Program &program, ir::Module &graphs, const bundle::WriteOptions &opts,
                           const std::string &output) {
  std::string bytes;
  bundle::WriteSummary summary;
  try {
    bytes = bundle::writeBundle(program, graphs, opts, &summary);
  } catch (const bundle::WriteError &e) {
    if (output.empty()) std::cerr << "tsrc: error: cannot compile the program for its targets: " << e.what() << "\n";
    else std::cerr << "tsrc: error: cannot make the bundle " << output << ": " << e.what() << "\n";
    return 1;
  }
  if (output.empty()) {
    // --target without -o: the compilation alone.
    auto programs = [](size_t n) { return std::to_string(n) + (n == 1 ? " program" : " programs"); };
    std::cerr << "tsrc: compiled " << (opts.cpu ? programs(summary.cpuPrograms) + " for cpu" : std::string())
              << (opts.cpu && opts.cuda ? " and " : "")
              << (opts.cuda ? programs(summary.cudaPrograms) + " for cuda (" + std::to_string(opts.archs.size()) +
                                  (opts.archs.size() == 1 ? " architecture)" : " architectures)")
                            : std::string())
              << " at -O" << opts.optLevel << "; nothing written (-o FILE.bundle writes them)\n";
    return 0;
  }
  const std::string tmp = output + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) {
      std::cerr << "tsrc: error: cannot write " << output << "\n";
      std::error_code ec;
      fs::remove(tmp, ec);
      return 1;
    }
  }
  std::error_code ec;
  fs::rename(tmp, output, ec);
  if (ec) {
    std::cerr << "tsrc: error: cannot write " << output << ": " << ec.message() << "\n";
    fs::remove(tmp, ec);
    return 1;
  }
  return 0;
}

// `--specialize SYM=INT` names a size of the program: a symbol of a signature in its own modules
// (not the stdlib's) or an int flag of `main` (the sizes the bundle's tiles are chosen for), and
// with `kernelParams` (--emit=tile|llvm|ptx) also a compile-time int parameter of a kernel (`BLOCK`
// of a kernel that nothing launches). Any other name is a usage error (exit 2) naming it, so that a
// misspelt symbol does not silently leave the default. Returns 0 when every name is one of them.
static int checkSpecializeSymbols(const sema::Program &p, const std::map<std::string, int64_t> &sizes, bool kernelParams) {
  std::set<std::string> known;
  for (const auto &m : p.modules) {
    if (m->isStdlib) continue;
    for (const auto &fn : m->functions) {
      known.insert(fn->symbols.begin(), fn->symbols.end());
      for (const sema::ParamInfo &prm : fn->params) {
        const sema::TypeRef &t = prm.annotated ? prm.annotated : prm.defaultType;
        bool integer = t && t->is(sema::TypeKind::Int);
        if (integer && m.get() == p.main && fn->name == "main") known.insert(prm.name);
        if (integer && kernelParams && fn->kind == sema::FunctionKind::Kernel && prm.compileTime()) known.insert(prm.name);
      }
    }
  }
  for (const auto &[sym, v] : sizes) {
    if (known.count(sym)) continue;
    std::string list;
    for (const std::string &k : known) list += (list.empty() ? "" : ", ") + k;
    std::cerr << "tsrc: --specialize " << sym << "=" << v << ": the program has no symbol `" << sym << "`"
              << (list.empty() ? std::string(" (it has none)") : " (its symbols: " + list + ")") << "\n";
    return 2;
  }
  return 0;
}

// A `--specialize` value that contradicts a host launch's own (a compile-time argument it passes,
// a size its arguments bind to a symbol of the kernel) is a usage error (exit 2) naming the symbol
// and the launch: the launch compiles with its own value, so the option could only mislead.
static int checkSpecializeLaunches(const sema::Program &p, const std::map<std::string, int64_t> &sizes) {
  if (sizes.empty()) return 0;
  const auto graphs = [&] {
    DiagnosticEngine quiet(p.sm);
    return ir::lowerProgram(p, quiet);
  }();
  DiagnosticEngine quiet(p.sm);
  std::vector<std::string> conflicts;
  ir::lowerProgramKernels(p, *graphs, quiet, &sizes, &conflicts);
  if (conflicts.empty()) return 0;
  std::cerr << "tsrc: --specialize " << conflicts[0] << "\n";
  return 2;
}

// After -o (or --target alone): the kernel launches the bundle does not hold because they do not
// compile before the program runs (their argument types or compile-time arguments are known only
// then, or their tile extents), one line each with its place and why (W0132's text).
static void reportRuntimeLaunches(const sema::Program &p, const ir::Module &graphs, const SourceManager &sm, const std::string &output,
                                  bool traced) {
  DiagnosticEngine d(sm);
  ir::lowerProgramKernels(p, graphs, d);
  std::vector<std::string> lines;
  for (const Diagnostic &x : d.diagnostics()) {
    if (x.kind == DiagKind::NotSpecializedAhead) lines.push_back(sm.describe(x.range) + ": " + x.message);
    else if (x.kind == DiagKind::NotCompilableYet)
      lines.push_back(sm.describe(x.range) + ": " + x.message + " ahead of time; it compiles when the program runs");
  }
  if (lines.empty()) return;
  std::cerr << "tsrc: " << (output.empty() ? std::string("the program") : output) << ": " << lines.size()
            << " kernel launch" << (lines.size() == 1 ? " is" : "es are") << " not compiled ahead of time"
            << (traced ? " (unless the --trace run launched them)" : "") << ":\n";
  for (const std::string &l : lines) std::cerr << "  " << l << "\n";
}

// --emit=onnx (spec 15): the graph function `entry` of the main module, lowered for its annotated
// signature (its symbols at the --specialize sizes, else they stay dim_params where shapes allow),
// written to `out` as an ONNX model (onnx/Export.h). Returns the exit code.
static int emitOnnx(const sema::Program &p, const std::string &entry, const std::map<std::string, int64_t> &sizes, const std::string &out,
                    DiagnosticEngine &diags) {
  const sema::FunctionInfo *fn = nullptr;
  for (auto &f : p.main->functions)
    if (f->name == entry) fn = f.get();
  if (!fn) {
    std::cerr << "tsrc: --entry " << entry << ": the module has no function `" << entry << "`\n";
    return 2;
  }
  if (fn->kind != sema::FunctionKind::Graph) {
    std::cerr << "tsrc: --entry " << entry << ": `" << entry << "` is a " << sema::functionKindWord(fn->kind)
              << "; --emit=onnx exports a graph function (@jit)\n";
    return 2;
  }
  std::map<std::string, Dim> env;
  for (auto &[k, v] : sizes) env[k] = Dim::constant(v);
  std::vector<std::pair<std::string, sema::TypeRef>> sig;
  for (const sema::ParamInfo &prm : fn->params) {
    sema::TypeRef t = prm.annotated ? prm.annotated : prm.defaultType;
    if (prm.compileTime() && prm.defaultType) t = prm.defaultType;
    if (!t) {
      std::cerr << "tsrc: error: --emit=onnx: parameter `" << prm.name << "` of `" << entry
                << "` has no annotation; annotate it, or export from host code with onnx.save(path, " << entry << ", example)\n";
      return 1;
    }
    if (t->is(sema::TypeKind::Tensor)) {
      std::vector<Dim> dims;
      for (const Dim &d : t->dims) dims.push_back(d.substitute(env));
      t = sema::T::withDims(t, dims);
    }
    sig.push_back({prm.name, t});
  }
  ir::Module m;
  try {
    ir::Graph *g = ir::lowerGraphFunction(m, p, *fn, sig, fn->name);
    ir::runGraphPipeline(*g, true);
    std::string err = onnxio::exportGraph(m, *g, out);
    if (!err.empty()) {
      std::cerr << "tsrc: error: " << err << "\n";
      return err.rfind("internal error", 0) == 0 ? 70 : 1;
    }
  } catch (ir::CompileError &e) {
    if (e.kind != DiagKind::NotCompilableYet) {
      diags.report(e.kind, e.range, e.args);
      for (auto &n : e.notes) diags.note(n);
    } else {
      diags.report(DiagKind::NotCompilableYet, e.range, {e.what});
    }
    return 1;
  } catch (ir::IRError &e) {
    diags.internalError(e.message, fn->def->nameRange);
    return 70;
  }
  return 0;
}

int main(int argc, char **argv) {
  tsr::onnxio::installLanguageHooks(); // onnx.load in programs (spec 15)
  CLI::App app{"tsrc: check and compile a Tessera (.tsr) module"};
  app.set_version_flag("--version", "tsrc 0.1 (Tessera)");
  std::string file, emit, output;
  bool check = false;
  size_t maxErrors = 50;
  app.add_option("file", file, "the .tsr file to compile")->required();
  app.add_option("-o,--output", output, "where to write the compiled bundle");
  app.add_option("--emit", emit, "print a form of the program instead of compiling it:\n"
                                 "  ast    the syntax tree, with source ranges\n"
                                 "  types  every function's signature and every binding's inferred type\n"
                                 "  graph  the Graph IR of each graph function (and of each specialization)\n"
                                 "  tile   the Tile IR of each kernel launch (from graph functions and from main's module)\n"
                                 "  schedule  how each graph runs compiled: its fused steps, their ops and inputs\n"
                                 "  llvm   the optimized host-CPU LLVM IR of each kernel that `tile` prints\n"
                                 "  ptx    one PTX module holding every kernel that `tile` prints and every kernel step\n"
                                 "         of every graph's schedule, for the GPU (--arch)")
      ->check(CLI::IsMember({"ast", "types", "graph", "tile", "schedule", "llvm", "ptx", "onnx"}));
  std::string entry;
  app.add_option("--entry", entry, "with --emit=onnx: the graph function to export (written to -o FILE.onnx)");
  std::string arch = "sm_90";
  // One architecture for --emit=ptx; a comma-separated list for a bundle (-o).
  auto *archOpt = app.add_option("--arch", arch, "the GPU architecture of --emit=ptx: sm_80 or sm_90 (default sm_90); "
                                                 "with -o, a list (default sm_80,sm_90)")
      ->check([](const std::string &v) -> std::string {
        std::stringstream ss(v);
        std::string a;
        while (std::getline(ss, a, ','))
          if (a != "sm_80" && a != "sm_90") return "`" + a + "` is not sm_80 or sm_90";
        return v.empty() || v.back() == ',' ? "an empty architecture" : "";
      });
  std::string targetList;
  app.add_option("--target", targetList, "with -o: the targets whose code the bundle holds: cpu, cuda or cpu,cuda (default both)")
      ->check([](const std::string &v) -> std::string {
        std::stringstream ss(v);
        std::string t;
        while (std::getline(ss, t, ','))
          if (t != "cpu" && t != "cuda") return "`" + t + "` is not cpu or cuda";
        return v.empty() || v.back() == ',' ? "an empty target" : "";
      });
  std::string cpuName = "host";
  app.add_option("--cpu", cpuName, "with -o: the CPU of the cpu target's code: host (this machine's, the default) or an x86-64 "
                                   "level for other machines: x86-64, x86-64-v2, x86-64-v3 (AVX2, FMA), x86-64-v4 (AVX-512)")
      ->check(CLI::IsMember({"host", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"}));
  std::string trace;
  auto *traceOpt = app.add_option("--trace", trace, "with -o: run main with these flags (one string, split at spaces; \"\" for "
                                                    "none) on the CPU first and add the programs of the graphs and kernels it runs");
  std::string autotuneMode;
  app.add_option("--autotune", autotuneMode, "with --trace: how the trace run's autotuned launches choose their configuration "
                                             "(off, cached, full; default TSR_AUTOTUNE, else cached); the bundle carries the winners")
      ->check(CLI::IsMember({"off", "cached", "full"}));
  std::vector<std::string> specialize;
  app.add_option("--specialize", specialize, "with -o: SYM=INT, the size of a symbol the bundle's tiles are chosen for "
                                             "(other symbols: 1001); with --emit=tile|llvm|ptx: a size or compile-time "
                                             "parameter of the kernels that nothing launches; repeatable");
  bool graphKernels = false;
  app.add_flag("--graph-kernels", graphKernels,
               "with --emit=tile: also print the programs of the graphs' kernel steps that --emit=ptx compiles "
               "(GPU tiles, symbolic sizes at 1001)");
  app.add_flag("--check", check, "check the program and report diagnostics; produce nothing");
  // -O0..-O3: the optimization level of the code -o writes (llc, ptxas) and of --emit=llvm.
  int optLevel = 3;
  auto *optOpt = app.add_option("-O", optLevel, "-O0..-O3: the optimization level of the code -o writes (llc and ptxas -O; at "
                                                 "-O0 the CPU's LLVM IR unoptimized) and of --emit=llvm (-O0: before LLVM's passes); "
                                                 "default 3")
                     ->check(CLI::Range(0, 3));
  // The modes of support/RunModes.h, for the kernels that --emit=tile|llvm|ptx and -o compile.
  app.add_flag("--debug", runModes().debug,
               "compile kernels with index checks (an index outside its axis is reported with the tensor, index, "
               "extent and line when the program runs)");
  app.add_flag("--deterministic", runModes().deterministic,
               "compile kernels for deterministic mode (float atomics of a launch's programs added in one order, "
               "for tsr run --deterministic)");
  bool readGraph = false;
  app.add_flag("--read-graph", readGraph, "read FILE as Graph IR text, verify it, and print it back (the IR's round trip)");
  bool readTile = false;
  app.add_flag("--read-tile", readTile, "read FILE as Tile IR text, verify it, and print it back (the IR's round trip; with --emit=llvm, its host LLVM IR)");
  app.add_option("--max-errors", maxErrors, "stop reporting after this many errors (default 50)")->check(CLI::Range(1, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (readGraph)
    return readIRText<ir::IRError>(file, [](const std::string &text) {
      auto m = ir::parseModuleText(text);
      for (auto &g : m->graphs)
        for (auto &problem : ir::verify(*g)) throw ir::IRError{" graph @" + g->name + ": " + problem};
      ir::printModule(std::cout, *m);
    });
  // With --emit=llvm, the host LLVM IR of each function instead (reading a program's code as the
  // CPU's JIT compiles it, e.g. one an executor dumped with TSR_DUMP_TILE=1).
  if (readTile)
    return readIRText<tile::TileError>(file, [&](const std::string &text) {
      auto m = tile::parseTileModule(text);
      for (auto &fn : m->functions)
        for (auto &problem : tile::verify(*fn)) throw tile::TileError{" tile @" + fn->name + ": " + problem};
      if (emit == "llvm")
        for (auto &fn : m->functions) std::cout << codegen::hostLLVMText(*fn, true) << "\n";
      else
        tile::printModule(std::cout, *m);
    });
  // --specialize SYM=INT: a positive size per symbol, each given one value.
  bundle::WriteOptions bundleOpts;
  for (const std::string &kv : specialize) {
    const size_t eq = kv.find('=');
    char *end = nullptr;
    const long long v = eq == std::string::npos ? 0 : std::strtoll(kv.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || !end || *end || eq + 1 == kv.size() || v < 1) {
      std::cerr << "tsrc: --specialize " << kv << ": expected SYM=INT with a positive INT\n";
      return 2;
    }
    const std::string sym = kv.substr(0, eq);
    if (auto [it, fresh] = bundleOpts.sizes.emplace(sym, v); !fresh && it->second != v) {
      std::cerr << "tsrc: --specialize " << kv << ": the symbol `" << sym << "` is already given as " << it->second << "\n";
      return 2;
    }
  }
  const bool kernelEmit = emit == "tile" || emit == "llvm" || emit == "ptx";
  // --emit=onnx writes the graph function --entry names to -o (spec 15), at the --specialize sizes.
  const bool onnxEmit = emit == "onnx";
  if (onnxEmit && (entry.empty() || output.empty() || check)) {
    std::cerr << "tsrc: --emit=onnx exports one graph function: --entry NAME -o FILE.onnx\n";
    return 2;
  }
  if (!onnxEmit && !entry.empty()) {
    std::cerr << "tsrc: --entry names the function --emit=onnx exports\n";
    return 2;
  }
  // --target without -o, --check or --emit: compile the program for the targets as -o would, and
  // write nothing (what cannot be compiled is an error, exit 1).
  const bool compileOnly = output.empty() && !check && emit.empty() && !targetList.empty();
  if (optOpt->count() && output.empty() && !compileOnly && emit != "llvm") {
    std::cerr << "tsrc: -O" << optLevel << " sets the optimization of the code -o writes (or --target compiles) and of --emit=llvm; "
              << (emit.empty() ? std::string(check ? "--check" : "nothing") : "--emit=" + emit) << " has no code to optimize\n";
    return 2;
  }
  if (!targetList.empty() && (emit == "llvm" || emit == "ptx")) {
    // --emit=llvm prints the host CPU's code and --emit=ptx the GPU's: --target may only agree.
    const std::string own = emit == "llvm" ? "cpu" : "cuda";
    if (targetList != own) {
      std::cerr << "tsrc: --target " << targetList << " conflicts with --emit=" << emit << ", which prints the " << own << " target's code\n";
      return 2;
    }
    targetList.clear();
  }
  // A bundle (-o), or the same compilation written nowhere (--target alone): the options it
  // takes, and none of --check and --emit.
  if ((!output.empty() && !onnxEmit) || compileOnly) {
    if (check || !emit.empty()) {
      std::cerr << "tsrc: -o writes a bundle; it does not combine with --check or --emit\n";
      return 2;
    }
    if (!targetList.empty()) {
      bundleOpts.cpu = ("," + targetList + ",").find(",cpu,") != std::string::npos;
      bundleOpts.cuda = ("," + targetList + ",").find(",cuda,") != std::string::npos;
    }
    if (archOpt->count()) {
      bundleOpts.archs.clear();
      std::stringstream ss(arch);
      for (std::string a; std::getline(ss, a, ',');)
        if (std::find(bundleOpts.archs.begin(), bundleOpts.archs.end(), a) == bundleOpts.archs.end()) bundleOpts.archs.push_back(a);
    }
    bundleOpts.cpuName = cpuName;
    bundleOpts.optLevel = optLevel;
    if (!autotuneMode.empty()) exec::autotune::setMode(*exec::autotune::parseMode(autotuneMode));
    if (traceOpt->count()) {
      std::stringstream ss(trace);
      bundleOpts.trace.emplace();
      for (std::string f; ss >> f;) bundleOpts.trace->push_back(f);
    }
  } else if (!targetList.empty() || (!specialize.empty() && !kernelEmit && !onnxEmit) || traceOpt->count() || cpuName != "host") {
    std::cerr << "tsrc: --target, --cpu, --specialize and --trace apply to a bundle: add -o FILE.bundle (--target alone compiles "
                 "without writing; with --emit=llvm or ptx it may only name that form's target)"
              << (specialize.empty() ? "" : " (--specialize also applies to --emit=tile, llvm and ptx)") << "\n";
    return 2;
  } else if (arch.find(',') != std::string::npos) {
    std::cerr << "tsrc: --emit=ptx compiles for one architecture: --arch sm_80 or --arch sm_90\n";
    return 2;
  } else if (!check && emit.empty()) {
    std::cerr << "tsrc: nothing to do: use -o FILE.bundle, --check or --emit=ast|types|graph|tile|schedule|llvm|ptx\n";
    return 2;
  }
  if (fs::path(file).extension() == ".onnx") {
    // An ONNX model: imported as `onnx.load` does (onnx/Import.h); --emit=graph prints its graph,
    // --check only imports it.
    if (emit != "graph" && !(check && emit.empty())) {
      std::cerr << "tsrc: an ONNX model takes --emit=graph or --check\n";
      return 64;
    }
    ir::Module module;
    auto imported = onnxio::importModel(file, module);
    if (auto *e = std::get_if<onnxio::ImportError>(&imported)) {
      std::cerr << "error: " << e->str() << "\n";
      return 1;
    }
    if (emit == "graph") ir::printModule(std::cout, module);
    return 0;
  }
  return runWithLargeStack(512u << 20, [&]() -> int {
    SourceManager sm;
    DiagnosticEngine diags(sm);
    diags.setMaxErrors(maxErrors);
    int rc = 0;
    try {
      if (onnxEmit) {
        sema::CheckOptions opts = sema::defaultCheckOptions(TSR_SOURCE_STDLIB);
        auto program = sema::checkProgram(sm, diags, file, opts);
        if (!diags.hasErrors()) {
          if (int usage = checkSpecializeSymbols(*program, bundleOpts.sizes, false)) return usage;
          rc = emitOnnx(*program, entry, bundleOpts.sizes, output, diags);
        }
      } else if (!output.empty() || compileOnly) {
        sema::CheckOptions opts = sema::defaultCheckOptions(TSR_SOURCE_STDLIB);
        auto program = sema::checkProgram(sm, diags, file, opts);
        if (!diags.hasErrors()) {
          if (int usage = checkSpecializeSymbols(*program, bundleOpts.sizes, false)) return usage;
          if (int usage = checkSpecializeLaunches(*program, bundleOpts.sizes)) return usage;
          // A graph that does not lower before run time (E0130: sizes or lengths known only
          // then) stays out of the bundle and compiles when it runs; an internal error is one.
          DiagnosticEngine lowering(sm);
          auto graphs = ir::lowerProgram(*program, lowering);
          if (lowering.hasInternalError()) {
            lowering.render(std::cerr);
            return 70;
          }
          rc = writeBundleFile(*program, *graphs, bundleOpts, output);
          if (rc == 0) reportRuntimeLaunches(*program, *graphs, sm, output, bundleOpts.trace.has_value());
        }
      } else if (emit == "ast") {
        FileId id = loadSourceFile(sm, diags, file);
        std::unique_ptr<ast::Module> mod;
        if (id) mod = parseModule(sm, diags, id, fs::path(file).stem().string());
        if (mod && !diags.hasErrors()) ast::printAst(std::cout, *mod, sm);
      } else {
        sema::CheckOptions opts = sema::defaultCheckOptions(TSR_SOURCE_STDLIB);
        auto program = sema::checkProgram(sm, diags, file, opts);
        if (emit == "types" && !diags.hasErrors()) sema::printTypes(std::cout, *program);
        if (emit == "graph" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          if (!diags.hasErrors()) ir::printModule(std::cout, *graphs);
        }
        if (emit == "schedule" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          if (!diags.hasErrors())
            for (auto &g : graphs->graphs) ir::schedule::printSchedule(std::cout, *g, ir::schedule::planFusion(*g));
        }
        if (kernelEmit && !diags.hasErrors()) {
          if (int usage = checkSpecializeSymbols(*program, bundleOpts.sizes, true)) return usage;
          if (int usage = checkSpecializeLaunches(*program, bundleOpts.sizes)) return usage;
        }
        if (emit == "tile" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          auto kernels = ir::lowerProgramKernels(*program, *graphs, diags, &bundleOpts.sizes);
          std::vector<std::string> what;
          if (!diags.hasErrors() && graphKernels && !addGraphKernels(*graphs, *kernels, what)) rc = 1;
          if (!diags.hasErrors() && rc == 0) tile::printModule(std::cout, *kernels);
        }
        if ((emit == "llvm" || emit == "ptx") && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          auto kernels = ir::lowerProgramKernels(*program, *graphs, diags, &bundleOpts.sizes);
          // The hand-written kernels first, then the graphs' (described by `what`).
          const size_t handWritten = diags.hasErrors() ? 0 : kernels->functions.size();
          std::vector<std::string> what;
          if (!diags.hasErrors() && emit == "ptx" && !addGraphKernels(*graphs, *kernels, what)) rc = 1;
          if (!diags.hasErrors() && rc == 0) {
            std::vector<const tile::Function *> fns;
            for (auto &f : kernels->functions) fns.push_back(f.get());
            try {
              if (emit == "llvm") {
                for (const tile::Function *f : fns) std::cout << codegen::hostLLVMText(*f, optLevel > 0) << "\n";
              } else {
                codegen::nvptx::PtxOptions po;
                po.arch = arch;
                auto pm = codegen::nvptx::compileToPtx(fns, po);
                // One line per kernel (tools/gpu/ptx_check reads them): launch shape and config,
                // and for a graph's program its graph, step and tiles.
                for (size_t q = 0; q < pm.kernels.size(); ++q) {
                  const auto &k = pm.kernels[q];
                  std::cout << "// kernel " << k.name << ": " << k.threads << " threads, " << k.sharedBytes
                            << " bytes of dynamic shared memory, " << k.params << " KernelArg params; config";
                  for (const auto &a : fns[q]->config)
                    if (auto *v = std::get_if<int64_t>(&a.value)) std::cout << " " << a.name << "=" << *v;
                  if (q >= handWritten) std::cout << "; " << what[q - handWritten];
                  std::cout << "\n";
                }
                std::cout << pm.ptx;
              }
            } catch (const codegen::CodegenError &e) {
              std::cerr << "tsrc: error: " << e.what() << "\n";
              rc = 1;
            }
          }
        }
      }
    } catch (const std::exception &e) {
      diags.internalError(e.what());
    }
    diags.render(std::cerr);
    if (diags.hasInternalError()) rc = 70;
    else if (diags.hasErrors()) rc = 1;
    return rc;
  });
}
