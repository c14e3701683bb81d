// tsr: runs Tessera programs and serves editors (spec section 13).
//
//   tsr lsp    the language server, on stdin/stdout
//   tsr run    runs a module's main (host code interpreted, graph work on the CPU)
//
// Exit codes (spec 13): 0 success, 1 user error, 2 usage error, 70 internal error.
#include "frontend/Parser.h"
#include "lsp/Server.h"
#include "exec/Autotune.h"
#include "exec/CompiledExecutor.h"
#include "exec/GraphReplay.h"
#include "exec/bundle/RunBundle.h"
#include "exec/cpu/CpuBackend.h"
#include "exec/cuda/NvptxCompiler.h"
#include "runtime/DiskCache.h"
#include "runtime/Profile.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/dist/Dist.h"
#include "runtime/dist/Launch.h"
#include "exec/host/Interpreter.h"
#include "onnx/Language.h"
#include "sema/Program.h"
#include "support/RunModes.h"

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <execinfo.h>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

// tsr run FILE.tsr [--entry NAME] [--device auto|cpu|cuda[:N]] [MAIN FLAGS...]: the module is
// checked, then `main` runs in the host interpreter; graph work runs compiled on the device.
// `rest`: the file, then the flags (tsr run's own --debug, --deterministic and --profile taken).
int runSource(const std::vector<std::string> &rest) {
  std::string file = rest[0], entry = "main";
  const char *envExecutor = std::getenv("TSR_EXECUTOR");
  std::string executor = envExecutor && *envExecutor ? envExecutor : "compiled";
  std::vector<std::string> flags;
  // --device auto (the default: the first GPU where the driver sees one, else the CPU), cpu,
  // cuda, cuda:N. Graphs run on it; host code always runs on the host.
  std::string device = "auto";
  bool deviceGiven = false;
  std::string devices;
  for (size_t i = 1; i < rest.size(); ++i) {
    if (rest[i] == "--entry" && i + 1 < rest.size()) { entry = rest[++i]; continue; }
    if (rest[i].rfind("--entry=", 0) == 0) { entry = rest[i].substr(8); continue; }
    // --executor compiled|reference (hidden; also TSR_EXECUTOR): graphs run compiled by
    // default; the reference evaluator stays reachable for tests and for comparisons.
    if (rest[i] == "--executor" && i + 1 < rest.size()) { executor = rest[++i]; continue; }
    if (rest[i].rfind("--executor=", 0) == 0) { executor = rest[i].substr(11); continue; }
    if (rest[i] == "--device" && i + 1 < rest.size()) { device = rest[++i]; deviceGiven = true; continue; }
    if (rest[i].rfind("--device=", 0) == 0) { device = rest[i].substr(9); deviceGiven = true; continue; }
    // --devices N: main's launcher started the ranks (runtime/dist/Launch.h); each checks its N.
    if (rest[i] == "--devices" && i + 1 < rest.size()) { devices = rest[++i]; continue; }
    if (rest[i].rfind("--devices=", 0) == 0) { devices = rest[i].substr(10); continue; }
    // --no-cache: compile everything, neither reading nor writing the persistent cache.
    if (rest[i] == "--no-cache") { tsr::rt::DiskCache::process().disable(); continue; }
    // --autotune off|cached|full, --autotune-report (exec/Autotune.h).
    std::string bad;
    if (size_t took = tsr::exec::autotune::takeFlag(rest, i, &bad)) {
      if (!bad.empty()) { std::cerr << "tsr run: " << bad << "\n"; return 2; }
      i += took - 1;
      continue;
    }
    flags.push_back(rest[i]);
  }
  if (executor != "compiled" && executor != "reference") {
    std::cerr << "tsr run: --executor " << executor << ": expected `compiled` or `reference`\n";
    return 2;
  }
  // A rank of a distributed run (docs/distributed.md): its world size must be --devices, and on
  // GPUs it takes the one LOCAL_RANK names.
  try {
    const auto &w = tsr::rt::dist::world();
    if (!devices.empty() && devices != std::to_string(w.size)) {
      std::cerr << "tsr run: --devices " << devices << " but this rank's WORLD_SIZE is " << w.size << "\n";
      return 2;
    }
    if (w.size > 1 && (device == "cuda" || (device == "auto" && tsr::rt::cuda::Driver::get().available() && executor == "compiled")))
      device = "cuda:" + std::to_string(w.localRank);
  } catch (const std::exception &e) {
    std::cerr << "tsr run: " << e.what() << "\n";
    return 2;
  }
  // The graph backend: the GPU asked for (exit 3 when none can be used), or auto's choice.
  std::shared_ptr<tsr::exec::StepBackend> backend;
  if (device != "auto" && device != "cpu" && device != "cuda" && device.rfind("cuda:", 0) != 0) {
    std::cerr << "tsr run: --device " << device << ": expected auto, cpu, cuda or cuda:N\n";
    return 2;
  }
  if (device == "auto") {
    const auto &driver = tsr::rt::cuda::Driver::get();
    if (driver.available() && executor == "compiled") device = "cuda:0";
    else if (deviceGiven)
      std::cerr << "tsr run: --device auto: running on the CPU ("
                << (driver.available() ? "the reference executor runs on the CPU only" : driver.why()) << ")\n";
  }
  if (device.rfind("cuda", 0) == 0) {
    if (executor == "reference") {
      std::cerr << "tsr run: --device " << device << ": the reference executor runs on the CPU only\n";
      return 2;
    }
    try {
      backend = tsr::exec::cudaBackend(device);
    } catch (const std::invalid_argument &e) {
      std::cerr << "tsr run: --device " << device << ": " << e.what() << "\n";
      return 2;
    } catch (const std::exception &e) {
      std::cerr << "tsr run: --device " << device << ": " << e.what() << "\n";
      return 3;
    }
  }
  const bool onGpu = backend != nullptr;
  if (!backend) backend = tsr::exec::cpuBackend();
  return tsr::runWithLargeStack(size_t(512) << 20, [&]() -> int {
    tsr::SourceManager sm;
    tsr::DiagnosticEngine diags(sm);
    tsr::sema::CheckOptions opts = tsr::sema::defaultCheckOptions(TSR_SOURCE_STDLIB);
    std::unique_ptr<tsr::sema::Program> program;
    {
      tsr::rt::profile::Scope span("compile", [&] { return "check " + file; });
      program = tsr::sema::checkProgram(sm, diags, file, opts);
    }
    diags.render(std::cerr);
    if (diags.hasInternalError()) return 70;
    if (diags.hasErrors()) return 1;
    auto exec = executor == "reference" ? tsr::host::makeReferenceExecutor() : tsr::exec::makeCompiledExecutor(nullptr, backend);
    tsr::host::Interpreter interp(*program, *exec, std::cout, backend);
    int rc = interp.runMain(entry, flags, std::cerr);
    // TSR_CACHE_STATS=1: what the persistent compilation cache did (tests, and users who wonder).
    if (const char *st = std::getenv("TSR_CACHE_STATS"); st && std::string(st) == "1")
      std::cerr << tsr::rt::DiskCache::process().describe() << "\n";
    if (onGpu && rc == 0) {
      // Work nobody read back still runs; its failure is the program's.
      try {
        tsr::exec::synchronizeCudaBackends();
      } catch (const std::exception &e) {
        std::cerr << "error: " << e.what() << "\n";
        return 3;
      }
    }
    return rc;
  });
}

} // namespace

namespace {
// A fault inside tsr itself (not the program's error: those are diagnostics) prints the stack
// before the signal's default action ends the process, so that a crash on a machine without a
// debugger can be located: each frame is the module and its offset (`tsr(+0x...)`), which
// `addr2line -Cfe tsr OFFSET` resolves against the unstripped binary of the same build.
// Only async-signal-safe calls (backtrace_symbols_fd writes, it does not allocate).
void crashed(int sig) {
  static const char head[] = "tsr: internal error: fatal signal; the stack (addr2line -Cfe tsr OFFSET):\n";
  ssize_t ignored = write(2, head, sizeof head - 1);
  (void)ignored;
  void *frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
} // namespace

int main(int argc, char **argv) {
  // backtrace() loads libgcc on its first call, which is not signal-safe: call it once now.
  void *warm[1];
  backtrace(warm, 1);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) std::signal(sig, crashed);
  tsr::onnxio::installLanguageHooks(); // onnx.load in programs (spec 15)
  CLI::App app{"tsr: run Tessera (.tsr) programs and serve editors"};
  app.set_version_flag("--version", "tsr 0.1 (Tessera)");
  app.require_subcommand(1);

  CLI::App *lsp = app.add_subcommand("lsp", "the language server (Language Server Protocol on stdin/stdout)");
  int debounceMs = 50;
  bool verbose = false;
  lsp->add_option("--debounce-ms", debounceMs, "quiet time after an edit before checking (default 50)")
      ->check(CLI::Range(0, 5000));
  lsp->add_flag("--verbose", verbose, "log checks and dropped messages to stderr");
  // Editors start servers with `--stdio`; it is the only transport, so it is accepted and ignored.
  bool stdio = true;
  lsp->add_flag("--stdio", stdio, "use stdin/stdout (the default and only transport)");

  CLI::App *run = app.add_subcommand("run", "run a module's main: tsr run FILE.tsr [--entry NAME] [MAIN FLAGS...]");
  run->allow_extras();
  run->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (run->parsed()) {
    // tsr run FILE.tsr [--entry NAME] [--device auto|cpu|cuda[:N]] [MAIN FLAGS...]: the module is
    // checked, then `main` runs in the host interpreter; graph work runs compiled on the device.
    std::vector<std::string> rest = run->remaining();
    if (rest.empty()) {
      std::cerr << "tsr run: usage: tsr run FILE.tsr [--entry NAME] [MAIN FLAGS...]\n";
      return 2;
    }
    // --devices N (before or after the file): N ranks of this command line (N > 1), unless this
    // process is one already; runSource then checks N against the rank's WORLD_SIZE.
    for (size_t i = 0; i < rest.size(); ++i) {
      std::string n;
      if (rest[i] == "--devices" && i + 1 < rest.size()) { n = rest[i + 1]; rest.erase(rest.begin() + std::ptrdiff_t(i), rest.begin() + std::ptrdiff_t(i) + 2); }
      else if (rest[i].rfind("--devices=", 0) == 0) { n = rest[i].substr(10); rest.erase(rest.begin() + std::ptrdiff_t(i)); }
      else continue;
      if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos || std::stoi(n) < 1) {
        std::cerr << "tsr run: --devices " << n << ": expected a positive number of ranks\n";
        return 2;
      }
      if (std::stoi(n) > 1 && !tsr::rt::dist::launchedAsRank())
        return tsr::rt::dist::launchRanks(std::stoi(n), fs::read_symlink("/proc/self/exe").string(),
                                          std::vector<std::string>(argv + 1, argv + argc), std::cerr);
      if (rest.empty()) break;
      rest.push_back("--devices");
      rest.push_back(n);
      break;
    }
    if (rest.empty()) {
      std::cerr << "tsr run: usage: tsr run FILE.tsr [--entry NAME] [MAIN FLAGS...]\n";
      return 2;
    }
    // --debug, --deterministic (and --cuda-graphs): the modes of support/RunModes.h, for sources and bundles alike,
    // set before anything compiles.
    for (size_t i = 1; i < rest.size();) {
      if (rest[i] == "--debug") tsr::runModes().debug = true;
      else if (rest[i] == "--deterministic") tsr::runModes().deterministic = true;
      // --cuda-graphs: capture repeated graph calls as CUDA graphs (exec/GraphReplay.h), as TSR_CUDA_GRAPHS=1.
      else if (rest[i] == "--cuda-graphs") tsr::exec::setCudaGraphsRequested(true);
      else { ++i; continue; }
      rest.erase(rest.begin() + std::ptrdiff_t(i));
    }
    // --profile FILE: a Chrome/Perfetto trace of the run (runtime/Profile.h, docs/profiling.md),
    // written when the run ends, whatever its exit code.
    std::string profilePath;
    try {
      profilePath = tsr::rt::profile::takeProfileFlag(rest, 1);
    } catch (const std::invalid_argument &e) {
      std::cerr << "tsr run: " << e.what() << "\n";
      return 2;
    }
    std::unique_ptr<tsr::rt::profile::Session> profile;
    if (!profilePath.empty()) {
      try {
        profile = std::make_unique<tsr::rt::profile::Session>(profilePath);
      } catch (const std::exception &e) {
        std::cerr << "tsr run: --profile " << e.what() << "\n";
        return 1;
      }
    }
    tsr::rt::profile::enableNvtxUnderNsight();
    auto finishProfile = [&](int rc) {
      std::string error;
      if (profile && !profile->finish(error)) {
        std::cerr << "tsr run: --profile " << error << "\n";
        return rc == 0 ? 1 : rc;
      }
      return rc;
    };
    // A bundle (docs/bundle.md) runs from its own modules and code: exec/bundle/RunBundle.h.
    // Programs the bundle lacks are compiled here, as without a bundle.
    if (tsr::bundle::isBundleFile(rest[0]))
      return finishProfile(
          tsr::bundle::runBundleCommand(rest, {[] { return tsr::exec::cpuBackend(); }, tsr::exec::nvptxSource()}));
    return finishProfile(runSource(rest));
  }
  tsr::lsp::ServerOptions opts;
  opts.check = tsr::sema::defaultCheckOptions(TSR_SOURCE_STDLIB);
  opts.debounceMs = debounceMs;
  opts.verbose = verbose;
  return tsr::runWithLargeStack(size_t(64) << 20, [&] { return tsr::lsp::runServer(STDIN_FILENO, STDOUT_FILENO, opts); });
}
