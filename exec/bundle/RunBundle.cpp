// `tsr run FILE.bundle` (RunBundle.h).
#include "exec/bundle/RunBundle.h"

#include "exec/Autotune.h"
#include "exec/CompiledExecutor.h"
#include "exec/bundle/BundleBackend.h"
#include "exec/bundle/BundleModels.h"
#include "exec/cuda/CudaBackend.h"
#include "exec/host/Interpreter.h"
#include "frontend/Parser.h"
#include "runtime/DiskCache.h"
#include "runtime/bundle/Bundle.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/ModuleCache.h"
#include "sema/Program.h"
#include "support/BuildId.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace tsr::bundle {

namespace fs = std::filesystem;
namespace rb = rt::bundle;

bool isBundleFile(const std::string &path) {
  if (path.size() > 7 && path.compare(path.size() - 7, 7, ".bundle") == 0) return true;
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  return in.read(head, 8) && std::memcmp(head, rb::kMagic, 8) == 0;
}

namespace {

bool envIs(const char *name, const char *value) {
  const char *v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

// The bundle's modules written under a private folder, one subfolder per root; removed when
// destroyed.
class SourceTree {
public:
  explicit SourceTree(const rb::Bundle &b) {
    const char *t = std::getenv("TMPDIR");
    std::string pattern = std::string(t && *t ? t : "/tmp") + "/tsr-bundle-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot make a temporary folder " + pattern + ": " + std::strerror(errno));
    dir_ = pattern;
    std::error_code ec;
    for (const rb::ModuleEntry &m : b.modules) {
      const fs::path file = rootDir(m.root) / m.path;
      fs::create_directories(file.parent_path(), ec);
      std::ofstream out(file, std::ios::binary);
      const std::string_view text = b.moduleText(m);
      out.write(text.data(), std::streamsize(text.size()));
      if (!out) throw std::runtime_error("cannot write " + file.string());
      const std::string display = m.root == "stdlib" ? "stdlib/" + m.path : m.path;
      byPath_[fs::weakly_canonical(file, ec).string()] = {display, text};
      if (m.root == "main" && m.path == b.mainPath) main_ = file.string();
    }
  }
  ~SourceTree() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path rootDir(const std::string &root) {
    const fs::path dir = fs::path(dir_) / treeFolder(root);
    // "path:N": TESSERA_PATH's N-th folder when the bundle was made, in that order.
    if (root.rfind("path:", 0) == 0) paths_[std::atoi(root.c_str() + 5)] = dir.string();
    return dir;
  }
  const std::string &dir() const { return dir_; }
  sema::CheckOptions options(SourceManager &sm) {
    sema::CheckOptions o;
    o.stdlibDir = (fs::path(dir_) / "stdlib").string();
    for (auto &[n, p] : paths_) o.searchPath.push_back(p);
    // Every module is parsed from the bundle's bytes, under its bundle path.
    o.parse = [this, &sm](const SourceManager &, DiagnosticEngine &diags, FileId id, const std::string &name) {
      std::error_code ec;
      auto it = byPath_.find(fs::weakly_canonical(fs::path(sm.file(id).path()), ec).string());
      if (it != byPath_.end()) id = sm.addFile(it->second.first, std::string(it->second.second));
      return parseModule(sm, diags, id, name);
    };
    return o;
  }
  const std::string &mainFile() const { return main_; }

private:
  std::string dir_, main_;
  std::map<int, std::string> paths_;
  std::map<std::string, std::pair<std::string, std::string_view>> byPath_;
};

} // namespace

std::unique_ptr<OpenedBundle> openBundle(const std::string &path, const std::string &device, const Compilers &compilers) {
  if (device != "cpu" && device != "cuda" && device.rfind("cuda:", 0) != 0)
    throw std::invalid_argument("device `" + device + "`: expected cpu, cuda or cuda:N");
  auto o = std::make_unique<OpenedBundle>();
  rb::Device dev;
  dev.name = device == "cuda" ? "cuda:0" : device;
  dev.cuda = device != "cpu";
  std::shared_ptr<exec::StepBackend> inner;
  try {
    o->bundle = std::make_shared<const rb::Bundle>(rb::Bundle::open(path));
    // As `tsr run --device`: a bundle without code for the device is refused before the driver
    // is asked anything, so the refusal names the missing device even where there is no GPU.
    if (dev.cuda && o->bundle->cuda.empty()) rb::checkRunnable(*o->bundle, dev);
    if (dev.cuda) {
      exec::PtxSource source = compilers.cuda ? *compilers.cuda : exec::PtxSource{};
      source.measureShared = bundleSharedMeasure(o->bundle, source.measureShared);
      if (!compilers.cuda)
        source.unavailable = "is not in the bundle for " + dev.name +
                             ", and this runner compiles nothing: make the bundle with --trace and the flags of this run";
      try {
        inner = exec::cudaBackend(dev.name, std::move(source));
        const auto &info = rt::cuda::Context::get(dev.name).info();
        dev.ccMajor = info.ccMajor;
        dev.ccMinor = info.ccMinor;
      } catch (const std::invalid_argument &) {
        throw;
      } catch (const std::exception &e) {
        throw std::runtime_error(path + ": device " + dev.name + ": " + e.what());
      }
    } else if (compilers.cpu) {
      inner = compilers.cpu();
    }
    rb::checkRunnable(*o->bundle, dev);
  } catch (const rb::BundleError &e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  BackendOptions bo;
  bo.verbose = envIs("TSR_BUNDLE_VERBOSE", "1");
  bo.compileMissing = dev.cuda ? compilers.cuda.has_value() : bool(compilers.cpu);
  o->backend = bundleBackend(inner, o->bundle, bo, std::cerr);
  o->sm = std::make_unique<SourceManager>();
  o->diags = std::make_unique<DiagnosticEngine>(*o->sm);
  std::string diagnostics;
  const int rc = runWithLargeStack(size_t(512) << 20, [&]() -> int {
    {
      SourceTree tree(*o->bundle);
      BundledModels::process().add(*o->bundle, tree.dir());
      o->program = sema::checkProgram(*o->sm, *o->diags, tree.mainFile(), tree.options(*o->sm));
    }
    std::ostringstream out;
    o->diags->render(out);
    diagnostics = out.str();
    return o->diags->hasErrors() || o->diags->hasInternalError() ? 1 : 0;
  });
  if (rc != 0 || !o->program) throw std::runtime_error(path + ": the bundle's program does not check:\n" + diagnostics);
  if (o->program->main) o->program->main->path = path;
  int64_t threshold = 0;
  if (const char *t = std::getenv("TSR_JIT_THRESHOLD"); t && *t) threshold = std::atoll(t);
  o->executor = std::make_unique<exec::CompiledExecutor>(o->backend, nullptr, threshold);
  o->interpreter = std::make_unique<host::Interpreter>(*o->program, *o->executor, std::cout, o->backend);
  return o;
}

int runBundleCommand(const std::vector<std::string> &args, const Compilers &compilers, const std::string &prog) {
  const std::string file = args.at(0);
  std::string entry = "main", device = "auto";
  std::string executor = std::getenv("TSR_EXECUTOR") && *std::getenv("TSR_EXECUTOR") ? std::getenv("TSR_EXECUTOR") : "compiled";
  std::vector<std::string> flags;
  // The flags of `tsr run FILE.tsr` (tools/tsr/tsr.cpp), read the same way.
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--entry" && i + 1 < args.size()) { entry = args[++i]; continue; }
    if (a.rfind("--entry=", 0) == 0) { entry = a.substr(8); continue; }
    if (a == "--executor" && i + 1 < args.size()) { executor = args[++i]; continue; }
    if (a.rfind("--executor=", 0) == 0) { executor = a.substr(11); continue; }
    if (a == "--device" && i + 1 < args.size()) { device = args[++i]; continue; }
    if (a.rfind("--device=", 0) == 0) { device = a.substr(9); continue; }
    if (a == "--devices" && i + 1 < args.size()) { ++i; continue; }
    // --no-cache: compile what the bundle lacks without reading or writing the persistent cache.
    if (a == "--no-cache") { rt::DiskCache::process().disable(); continue; }
    std::string bad;
    if (size_t took = exec::autotune::takeFlag(args, i, &bad)) {
      if (!bad.empty()) { std::cerr << prog + ": " << bad << "\n"; return 2; }
      i += took - 1;
      continue;
    }
    flags.push_back(a);
  }
  if (executor != "compiled" && executor != "reference") {
    std::cerr << prog + ": --executor " << executor << ": expected `compiled` or `reference`\n";
    return 2;
  }
  if (device != "auto" && device != "cpu" && device != "cuda" && device.rfind("cuda:", 0) != 0) {
    std::cerr << prog + ": --device " << device << ": expected auto, cpu, cuda or cuda:N\n";
    return 2;
  }
  const bool verbose = envIs("TSR_BUNDLE_VERBOSE", "1");

  std::shared_ptr<const rb::Bundle> bundle;
  try {
    bundle = std::make_shared<const rb::Bundle>(rb::Bundle::open(file));
  } catch (const rb::BundleError &e) {
    std::cerr << prog + ": " << file << ": " << e.what() << "\n";
    return 3;
  } catch (const std::exception &e) {
    std::cerr << prog + ": " << e.what() << "\n";
    return 1;
  }
  // The winners the bundle carries; a deployed program does not tune unless asked to.
  for (const rb::AutotuneWinner &a : bundle->autotune)
    exec::autotune::addCarried({a.target, a.kernel, a.hash, a.shape, a.dtypes, a.fixed, a.config});
  exec::autotune::setDefaultMode(exec::autotune::Mode::Cached);
  // Another compiler's bundle runs (docs/bundle.md, versioning); the verbose log says so.
  const std::string self = std::string("tsrc ") + compilerVersion() + " (Tessera)";
  if (verbose && (bundle->compiler != self || bundle->build != buildId()))
    std::cerr << "tsr: bundle: made by " << bundle->compiler << " build " << (bundle->build.empty() ? "?" : bundle->build)
              << ", run by " << self << " build " << buildId() << " (programs are matched by their text)\n";

  // The device, and whether the bundle's code runs on it.
  if (device == "auto") {
    const auto &driver = rt::cuda::Driver::get();
    device = !bundle->cuda.empty() && driver.available() && executor == "compiled" ? "cuda:0" : "cpu";
  }
  std::shared_ptr<exec::StepBackend> inner;
  rb::Device dev;
  dev.name = device;
  try {
    if (device.rfind("cuda", 0) == 0) {
      dev.cuda = true;
      dev.name = device == "cuda" ? "cuda:0" : device;
      if (executor == "reference") {
        std::cerr << prog + ": --device " << device << ": the reference executor runs on the CPU only\n";
        return 2;
      }
      // A bundle without cuda code is refused before the driver is asked anything.
      if (bundle->cuda.empty()) rb::checkRunnable(*bundle, dev);
      try {
        // Shared memory from the bundle for its programs; from the compiler, if any, for others.
        exec::PtxSource source = compilers.cuda ? *compilers.cuda : exec::PtxSource{};
        source.measureShared = bundleSharedMeasure(bundle, source.measureShared);
        if (!compilers.cuda)
          source.unavailable = "is not in the bundle for " + dev.name +
                               ", and this runner compiles nothing: make the bundle with --trace and the flags of this run";
        inner = exec::cudaBackend(device, std::move(source));
        const auto &info = rt::cuda::Context::get(dev.name).info();
        dev.ccMajor = info.ccMajor;
        dev.ccMinor = info.ccMinor;
      } catch (const std::invalid_argument &e) {
        std::cerr << prog + ": --device " << device << ": " << e.what() << "\n";
        return 2;
      } catch (const rb::BundleError &) {
        throw;
      } catch (const std::exception &e) {
        std::cerr << prog + ": --device " << device << ": " << e.what() << "\n";
        return 3;
      }
    } else if (compilers.cpu) {
      inner = compilers.cpu();
    }
    rb::checkRunnable(*bundle, dev);
  } catch (const rb::BundleError &e) {
    std::cerr << prog + ": " << file << ": " << e.what() << "\n";
    return 3;
  }

  BackendOptions bo;
  bo.verbose = verbose;
  bo.ignoreCode = envIs("TSR_BUNDLE_TEST_IGNORE_CODE", "1");
  bo.compileMissing = dev.cuda ? compilers.cuda.has_value() : bool(compilers.cpu);
  std::shared_ptr<BundleBackend> backend;
  try {
    backend = bundleBackend(inner, bundle, bo, std::cerr);
  } catch (const std::exception &e) {
    std::cerr << prog + ": " << file << ": " << e.what() << "\n";
    return 3;
  }

  return runWithLargeStack(size_t(512) << 20, [&]() -> int {
    SourceManager sm;
    DiagnosticEngine diags(sm);
    std::unique_ptr<sema::Program> program;
    try {
      SourceTree tree(*bundle);
      // The models it loads come from the bundle (BundleModels.h), not from files.
      BundledModels::process().add(*bundle, tree.dir());
      program = sema::checkProgram(sm, diags, tree.mainFile(), tree.options(sm));
    } catch (const rb::BundleError &e) {
      std::cerr << prog + ": " << file << ": " << e.what() << "\n";
      return 3;
    } catch (const std::exception &e) {
      std::cerr << prog + ": " << file << ": " << e.what() << "\n";
      return 1;
    }
    diags.render(std::cerr);
    if (diags.hasInternalError()) return 70;
    if (diags.hasErrors()) return 1;
    // The folder the modules were checked from is gone: what the program shows of its main
    // module's path (`--help`'s usage line) is the bundle.
    if (program->main) program->main->path = file;
    // Every kernel step compiled from its first call (threshold 0): the bundle's programs cost
    // nothing to load, and one it lacks compiles at once. TSR_JIT_THRESHOLD still decides.
    int64_t threshold = 0;
    if (const char *t = std::getenv("TSR_JIT_THRESHOLD"); t && *t) threshold = std::atoll(t);
    std::unique_ptr<host::GraphExecutor> exec;
    if (executor == "reference") exec = host::makeReferenceExecutor();
    else exec = std::make_unique<exec::CompiledExecutor>(backend, nullptr, threshold);
    host::Interpreter interp(*program, *exec, std::cout, backend);
    int rc = interp.runMain(entry, flags, std::cerr);
    if (dev.cuda && rc == 0) {
      try {
        exec::synchronizeCudaBackends();
      } catch (const std::exception &e) {
        std::cerr << "error: " << e.what() << "\n";
        rc = 3;
      }
    }
    if (verbose) {
      const BackendStats s = backend->stats();
      std::cerr << "tsr: bundle: " << s.fromBundle << " programs from the bundle, " << s.compiled << " compiled here\n";
      if (dev.cuda) {
        // Whether the bundle's cubins spared the driver's JIT (ModuleCache.h).
        const rt::cuda::ModuleCacheStats m = rt::cuda::ModuleCache::process().stats();
        std::cerr << "tsr: bundle: " << m.cubinLoads << " cubins loaded, " << m.ptxJits << " PTX modules JIT-compiled on " << dev.name << "\n";
      }
    }
    return rc;
  });
}

} // namespace tsr::bundle
