// The bundle's StepBackend (BundleBackend.h).
#include "exec/bundle/BundleBackend.h"

#include "exec/cuda/CudaBackend.h"
#include "ir/tile/TileText.h"
#include "runtime/GridLauncher.h"
#include "runtime/bundle/HostCode.h"
#include "runtime/cuda/CudaDriver.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <ostream>
#include <stdexcept>

namespace tsr::bundle {
namespace {

namespace rb = rt::bundle;

// What compile() returns: the bundle's CPU entry, or the wrapped backend's program (a GPU's
// program from the bundle's code, or one compiled here).
struct Program final : exec::BackendProgram {
  std::shared_ptr<const exec::BackendProgram> inner;
  rt::HostEntry entry = nullptr;
  size_t params = 0;
  std::string name;
};

// The arch number of "sm_NN".
int archNumber(const std::string &arch) { return arch.rfind("sm_", 0) == 0 ? std::atoi(arch.c_str() + 3) : 0; }

// The program of `target` whose text is `text`, or null (the key finds a candidate; the texts
// must be equal, so a hash collision is a miss).
const rb::Program *findProgram(const rb::Bundle &b, const char *target, const std::string &text, const std::string &key) {
  const rb::Program *p = b.find(target, key);
  return p && rb::programBody(b.programText(*p)) == rb::programBody(text) ? p : nullptr;
}

class Backend final : public BundleBackend {
public:
  Backend(std::shared_ptr<exec::StepBackend> inner, std::shared_ptr<const rb::Bundle> bundle, const BackendOptions &opts, std::ostream &log)
      : inner_(std::move(inner)), bundle_(std::move(bundle)), opts_(opts), log_(log) {
    if (!inner_ && opts_.compileMissing) throw std::invalid_argument("bundleBackend: no backend to compile what the bundle lacks");
    cuda_ = std::dynamic_pointer_cast<exec::CudaBackend>(inner_);
    if (cuda_) {
      // The bundle's arch for this device: the one the GPU backend compiles for; without a
      // compiler, else the newest the bundle has that runs on the device (PTX is forward compatible).
      archs_.push_back(cuda_->arch());
      if (!opts_.compileMissing) {
        const auto &info = rt::cuda::Context::get(cuda_->ordinal()).info();
        const int device = info.ccMajor * 10 + info.ccMinor;
        std::vector<std::string> others;
        for (const rb::CudaArch &a : bundle_->cuda)
          if (a.arch != cuda_->arch() && archNumber(a.arch) <= device) others.push_back(a.arch);
        std::sort(others.begin(), others.end(), [](const std::string &a, const std::string &b) { return archNumber(a) > archNumber(b); });
        archs_.insert(archs_.end(), others.begin(), others.end());
      }
    } else if (!opts_.ignoreCode && bundle_->cpu && bundle_->cpu->section) {
      object_ = std::make_unique<rb::SharedObject>(bundle_->sectionBytes(*bundle_->cpu->section), "tsr-bundle-cpu");
    }
  }

  std::string name() const override { return inner_ ? inner_->name() : "cpu"; }
  const ir::schedule::TileTarget &tileTarget() const override { return inner_ ? inner_->tileTarget() : cpuTiles_; }
  bool interpretsSmallSteps() const override { return inner_ ? inner_->interpretsSmallSteps() : true; }
  rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *forWhat) override {
    return inner_ ? inner_->allocate(shape, dtype, forWhat) : rt::Tensor::empty(shape, dtype);
  }
  char *address(const rt::Tensor &t, bool write, const char *forWhat) override {
    if (inner_) return inner_->address(t, write, forWhat);
    if (!write) return static_cast<char *>(const_cast<void *>(t.data()));
    rt::Tensor w = t; // the same storage; the non-const data() marks a host write
    return static_cast<char *>(w.data());
  }

  std::shared_ptr<const exec::BackendProgram> compile(const tile::Function &fn, const exec::CompileHints &hints) override {
    const std::string text = tile::toString(fn);
    const std::string key = rb::programKey(text);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    auto p = std::make_shared<Program>();
    p->name = fn.name;
    p->params = fn.params.size();
    const rb::Program *bp = opts_.ignoreCode ? nullptr : findProgram(*bundle_, cuda_ ? "cuda" : "cpu", text, key);
    std::string why = "not in the bundle";
    if (bp && !cuda_) {
      if (!object_ || !bp->cpu || bp->cpu->params != p->params) {
        bp = nullptr;
        why = "the bundle's entry does not fit it";
      } else {
        p->entry = object_->entry(bp->cpu->symbol);
      }
    } else if (bp && cuda_) {
      bool loaded = false;
      for (const std::string &arch : archs_) {
        auto code = bp->cuda.find(arch);
        const auto sec = std::find_if(bundle_->cuda.begin(), bundle_->cuda.end(), [&](const rb::CudaArch &a) { return a.arch == arch; });
        if (code == bp->cuda.end() || sec == bundle_->cuda.end()) continue;
        exec::PtxCode c;
        c.ptx = bundle_->sectionBytes(sec->ptx).substr(size_t(code->second.ptx.offset), size_t(code->second.ptx.size));
        if (code->second.cubin && sec->cubin)
          c.cubin = bundle_->sectionBytes(*sec->cubin).substr(size_t(code->second.cubin->offset), size_t(code->second.cubin->size));
        c.entry = code->second.entry;
        c.threads = code->second.threads;
        c.sharedBytes = unsigned(code->second.sharedBytes);
        c.tensorMaps = code->second.tensorMaps;
        c.persistent = code->second.persistent;
        p->inner = cuda_->load(c);
        loaded = true;
        break;
      }
      if (!loaded) {
        bp = nullptr;
        why = "the bundle has no " + cuda_->arch() + " code for it";
      }
    }
    if (bp) {
      ++stats_.fromBundle;
    } else {
      if (!opts_.compileMissing)
        throw exec::NoCodeError("the program `" + fn.name + "` (key " + key + ") is not in the bundle for " + name() +
                                 (why == "not in the bundle" ? "" : " (" + why + ")") +
                                 ", and this runner compiles nothing: make the bundle with --trace and the flags of this run");
      ++stats_.compiled;
      if (opts_.verbose)
        log_ << "tsr: bundle: compiling program `" << fn.name << "` (key " << key << ") for " << inner_->name() << ": " << why << "\n";
      p->inner = inner_->compile(fn, hints);
    }
    cache_.emplace(key, p);
    return p;
  }

  void launch(const exec::BackendProgram &prog, const std::vector<rt::KernelArg> &args, const std::array<int64_t, 3> &grid,
              const exec::LaunchSite &site) override {
    const auto &p = static_cast<const Program &>(prog);
    if (p.inner) return inner_->launch(*p.inner, args, grid, site);
    if (args.size() != p.params)
      throw std::runtime_error("the bundle's program `" + p.name + "` takes " + std::to_string(p.params) + " arguments, got " +
                               std::to_string(args.size()));
    rt::launchGrid(p.entry, args.data(), grid);
  }

  BackendStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

private:
  std::shared_ptr<exec::StepBackend> inner_;
  std::shared_ptr<const rb::Bundle> bundle_;
  BackendOptions opts_;
  std::ostream &log_;
  std::shared_ptr<exec::CudaBackend> cuda_;
  std::vector<std::string> archs_; // the bundle's archs a GPU program's code is taken from, in order
  std::unique_ptr<rb::SharedObject> object_;
  ir::schedule::TileTarget cpuTiles_ = ir::schedule::TileTarget::cpu();
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Program>> cache_;
  BackendStats stats_;
};

} // namespace

std::shared_ptr<BundleBackend> bundleBackend(std::shared_ptr<exec::StepBackend> inner, std::shared_ptr<const rt::bundle::Bundle> bundle,
                                             const BackendOptions &opts, std::ostream &log) {
  return std::make_shared<Backend>(std::move(inner), std::move(bundle), opts, log);
}

std::function<int64_t(const tile::Function &)> bundleSharedMeasure(std::shared_ptr<const rt::bundle::Bundle> bundle,
                                                                   std::function<int64_t(const tile::Function &)> fallback) {
  return [bundle = std::move(bundle), fallback = std::move(fallback)](const tile::Function &fn) -> int64_t {
    const std::string text = tile::toString(fn);
    if (const rb::Program *p = findProgram(*bundle, "cuda", text, rb::programKey(text)); p && !p->cuda.empty())
      return int64_t(p->cuda.begin()->second.sharedBytes); // the same for every arch (codegen/nvptx)
    return fallback ? fallback(fn) : ir::schedule::TileTarget::kUnavailable;
  };
}

} // namespace tsr::bundle
