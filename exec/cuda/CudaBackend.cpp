#include "exec/cuda/CudaBackend.h"

#include "codegen/nvptx/PtxKernel.h"
#include "ir/tile/TileText.h"
#include "runtime/DiskCache.h"
#include "runtime/cuda/CudaDriver.h"
#include "support/BuildId.h"
#include "runtime/cuda/DeviceAllocator.h"
#include "runtime/cuda/ModuleCache.h"

#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace tsr::exec {
namespace {

namespace cuda = rt::cuda;

static_assert(sizeof(codegen::KernelArg) == 152, "the KernelArg layout is the NVPTX kernels' ABI (codegen/nvptx/README.md)");

// One device's memory and stream, for the life of the process (CudaBackend.h).
struct Device final : rt::DeviceMemory {
  cuda::Context &ctx;
  cuda::Stream stream;
  cuda::DeviceAllocator &alloc;

  explicit Device(cuda::Context &c) : ctx(c), stream(c), alloc(cuda::DeviceAllocator::forDevice(c.ordinal())) {}
  std::string name() const override { return "cuda:" + std::to_string(ctx.ordinal()); }
  uint64_t allocate(size_t bytes, const char *forWhat) override { return alloc.allocate(bytes, forWhat, stream.handle()); }
  void release(uint64_t p) noexcept override {
    try {
      alloc.free(p);
    } catch (...) {
      // A block the allocator does not know is a bug elsewhere; a destructor cannot report it.
    }
  }
  void toDevice(uint64_t dst, const void *src, size_t bytes) override { stream.copyToDevice(dst, src, bytes); }
  void toHost(void *dst, uint64_t src, size_t bytes) override {
    stream.copyToHost(dst, src, bytes);
    stream.synchronize();
  }
};

std::mutex devicesMutex;
std::map<int, Device *> &devices() {
  static auto *m = new std::map<int, Device *>; // never destroyed: tensors may outlive main's locals
  return *m;
}

Device &deviceFor(int ordinal) {
  std::lock_guard<std::mutex> lock(devicesMutex);
  Device *&d = devices()[ordinal];
  if (!d) d = new Device(cuda::Context::get(ordinal));
  return *d;
}

struct CudaProgram final : BackendProgram {
  cuda::Function *fn = nullptr;
  unsigned threads = 128;
  unsigned sharedBytes = 0;
};

class CudaBackend final : public StepBackend {
public:
  explicit CudaBackend(Device &d)
      : dev_(d), arch_(d.ctx.info().ccMajor >= 9 ? "sm_90" : "sm_80"),
        target_(ir::schedule::TileTarget::gpu([](const tile::Function &fn) { return codegen::nvptx::sharedBytesOf(fn); })) {}

  std::string name() const override { return dev_.name(); }
  const ir::schedule::TileTarget &tileTarget() const override { return target_; }
  bool interpretsSmallSteps() const override { return false; }

  rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *forWhat) override {
    return rt::Tensor::emptyOn(dev_, shape, dtype, forWhat);
  }
  char *address(const rt::Tensor &t, bool write, const char *forWhat) override {
    const uint64_t p = t.deviceAddress(dev_, forWhat);
    if (write) t.markDeviceWritten(dev_);
    return reinterpret_cast<char *>(p);
  }

  std::shared_ptr<const BackendProgram> compile(const tile::Function &fn) override {
    // The PTX of a program depends on its text, the architecture and the compiler's build; it is
    // kept in the persistent cache (runtime/DiskCache.h) as "ENTRY THREADS SHARED\n" + PTX.
    const std::string key = std::string("ptx|") + buildId() + "|" + arch_ + "|" + tile::toString(fn);
    std::string entry, ptx;
    unsigned threads = 0, shared = 0;
    rt::DiskCache &disk = rt::DiskCache::process();
    if (std::optional<std::string> hit = disk.get("ptx", key)) {
      std::istringstream head(hit->substr(0, hit->find('\n')));
      if (head >> entry >> threads >> shared && hit->find('\n') != std::string::npos) ptx = hit->substr(hit->find('\n') + 1);
    }
    if (ptx.empty()) {
      codegen::nvptx::PtxOptions opts;
      opts.arch = arch_;
      const codegen::nvptx::PtxModule mod = codegen::nvptx::compileToPtx({&fn}, opts);
      if (mod.kernels.size() != 1) throw std::logic_error("compileToPtx of one function gave " + std::to_string(mod.kernels.size()) + " kernels");
      const codegen::nvptx::PtxKernel &k = mod.kernels[0];
      entry = k.name;
      threads = unsigned(k.threads);
      shared = unsigned(k.sharedBytes);
      ptx = mod.ptx;
      disk.put("ptx", key, entry + " " + std::to_string(threads) + " " + std::to_string(shared) + "\n" + ptx);
    }
    auto p = std::make_shared<CudaProgram>();
    p->fn = &cuda::ModuleCache::process().function(dev_.ctx.ordinal(), ptx, entry);
    p->threads = threads;
    p->sharedBytes = shared;
    return p;
  }

  void launch(const BackendProgram &prog, const std::vector<codegen::KernelArg> &args, const std::array<int64_t, 3> &grid,
              const LaunchSite &site) override {
    const auto &p = static_cast<const CudaProgram &>(prog);
    cuda::LaunchDims dims;
    // Grid limits (CUDA C Programming Guide, "Technical Specifications"): x < 2^31, y and z < 2^16.
    const int64_t limit[3] = {(int64_t(1) << 31) - 1, 65535, 65535};
    for (int i = 0; i < 3; ++i) {
      if (grid[size_t(i)] > limit[i])
        throw std::runtime_error(site.source + ": the program `" + site.kernel + "` needs " + std::to_string(grid[size_t(i)]) +
                                 " blocks along grid axis " + std::to_string(i) + ", above the GPU's " + std::to_string(limit[i]));
      dims.grid[i] = unsigned(grid[size_t(i)]);
    }
    dims.block[0] = p.threads;
    dims.sharedBytes = p.sharedBytes;
    dev_.stream.launchPacked(*p.fn, dims, args.data(), args.size() * sizeof(codegen::KernelArg),
                             cuda::LaunchSite{site.kernel, site.source});
  }

private:
  Device &dev_;
  std::string arch_;
  ir::schedule::TileTarget target_;
};

} // namespace

std::shared_ptr<StepBackend> cudaBackend(const std::string &spec) {
  const int ordinal = cuda::parseDeviceSpec(spec);
  cuda::Driver::get().requireAvailable();
  return std::make_shared<CudaBackend>(deviceFor(ordinal));
}

void synchronizeCudaBackends() {
  std::vector<Device *> ds;
  {
    std::lock_guard<std::mutex> lock(devicesMutex);
    for (auto &[o, d] : devices()) ds.push_back(d);
  }
  for (Device *d : ds) d->stream.synchronize();
}

} // namespace tsr::exec
