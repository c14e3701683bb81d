// The bundle's StepBackend (BundleBackend.h).
#include "exec/bundle/BundleBackend.h"

#include "ir/tile/TileText.h"
#include "runtime/bundle/HostCode.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/ModuleCache.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>

namespace tsr::bundle {
namespace {

namespace rb = rt::bundle;

// What compile() returns: the bundle's CPU entry, or the wrapped backend's program.
struct Program final : exec::BackendProgram {
  std::shared_ptr<const exec::BackendProgram> inner;
  rb::HostEntry entry = nullptr;
  size_t params = 0;
  std::string name;
};

class Backend final : public BundleBackend {
public:
  Backend(std::shared_ptr<exec::StepBackend> inner, std::shared_ptr<const rb::Bundle> bundle, const BackendOptions &opts, std::ostream &log)
      : inner_(std::move(inner)), bundle_(std::move(bundle)), opts_(opts), log_(log) {
    const std::string name = inner_->name();
    cuda_ = name.rfind("cuda", 0) == 0;
    if (cuda_) {
      ordinal_ = rt::cuda::parseDeviceSpec(name);
      const auto &info = rt::cuda::Context::get(ordinal_).info();
      // The architecture exec/cuda/CudaBackend compiles for on this device.
      arch_ = info.ccMajor >= 9 ? "sm_90" : "sm_80";
    } else if (!opts_.ignoreCode && bundle_->cpu && bundle_->cpu->section) {
      object_ = std::make_unique<rb::SharedObject>(bundle_->sectionBytes(*bundle_->cpu->section), "tsr-bundle-cpu");
    }
  }

  std::string name() const override { return inner_->name(); }
  const ir::schedule::TileTarget &tileTarget() const override { return inner_->tileTarget(); }
  bool interpretsSmallSteps() const override { return inner_->interpretsSmallSteps(); }
  rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *forWhat) override {
    return inner_->allocate(shape, dtype, forWhat);
  }
  char *address(const rt::Tensor &t, bool write, const char *forWhat) override { return inner_->address(t, write, forWhat); }

  std::shared_ptr<const exec::BackendProgram> compile(const tile::Function &fn) override {
    const std::string text = tile::toString(fn);
    const std::string key = rb::programKey(text);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    auto p = std::make_shared<Program>();
    p->name = fn.name;
    p->params = fn.params.size();
    const rb::Program *bp = opts_.ignoreCode ? nullptr : bundle_->find(cuda_ ? "cuda" : "cpu", key);
    // The key only finds a candidate; the program is the bundle's when the texts are equal.
    if (bp && rb::programBody(bundle_->programText(*bp)) != rb::programBody(text)) bp = nullptr;
    std::string why = "not in the bundle";
    if (bp && !cuda_) {
      if (!object_ || !bp->cpu || bp->cpu->params != p->params) {
        bp = nullptr;
        why = "the bundle's entry does not fit it";
      } else {
        p->entry = object_->entry(bp->cpu->symbol);
      }
    } else if (bp && cuda_) {
      auto code = bp->cuda.find(arch_);
      const auto arch = std::find_if(bundle_->cuda.begin(), bundle_->cuda.end(), [&](const rb::CudaArch &a) { return a.arch == arch_; });
      if (code == bp->cuda.end() || arch == bundle_->cuda.end()) {
        bp = nullptr;
        why = "the bundle has no " + arch_ + " code for it";
      } else {
        const std::string_view ptx = bundle_->sectionBytes(arch->ptx).substr(size_t(code->second.ptx.offset), size_t(code->second.ptx.size));
        std::string_view cubin;
        if (code->second.cubin && arch->cubin)
          cubin = bundle_->sectionBytes(*arch->cubin).substr(size_t(code->second.cubin->offset), size_t(code->second.cubin->size));
        auto &cache = rt::cuda::ModuleCache::process();
        cache.load(ordinal_, ptx, cubin);
        const uint64_t jits = cache.stats().ptxJits;
        p->inner = inner_->compile(fn);
        // The wrapped backend's PTX is the bundle's text, or its module was JIT-compiled anew.
        if (cache.stats().ptxJits != jits) {
          bp = nullptr;
          why = "the bundle's " + arch_ + " PTX is not the text this compiler makes for it";
        }
      }
    }
    if (bp) {
      ++stats_.fromBundle;
    } else {
      ++stats_.compiled;
      if (opts_.verbose)
        log_ << "tsr: bundle: compiling program `" << fn.name << "` (key " << key << ") for " << inner_->name() << ": " << why << "\n";
      if (!p->inner) p->inner = inner_->compile(fn);
    }
    cache_.emplace(key, p);
    return p;
  }

  void launch(const exec::BackendProgram &prog, const std::vector<codegen::KernelArg> &args, const std::array<int64_t, 3> &grid,
              const exec::LaunchSite &site) override {
    const auto &p = static_cast<const Program &>(prog);
    if (p.inner) return inner_->launch(*p.inner, args, grid, site);
    if (args.size() != p.params)
      throw std::runtime_error("the bundle's program `" + p.name + "` takes " + std::to_string(p.params) + " arguments, got " +
                               std::to_string(args.size()));
    rb::launchHost(p.entry, args.data(), grid);
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
  bool cuda_ = false;
  int ordinal_ = 0;
  std::string arch_;
  std::unique_ptr<rb::SharedObject> object_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Program>> cache_;
  BackendStats stats_;
};

} // namespace

std::shared_ptr<BundleBackend> bundleBackend(std::shared_ptr<exec::StepBackend> inner, std::shared_ptr<const rt::bundle::Bundle> bundle,
                                             const BackendOptions &opts, std::ostream &log) {
  return std::make_shared<Backend>(std::move(inner), std::move(bundle), opts, log);
}

} // namespace tsr::bundle
