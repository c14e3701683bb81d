#include "exec/cuda/CudaBackend.h"
#include "exec/cuda/NcclSteps.h"

#include "ir/tile/TileText.h"
#include "runtime/GridLauncher.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/DeviceAllocator.h"
#include "runtime/cuda/ModuleCache.h"
#include "runtime/cuda/TensorMap.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace tsr::exec {
namespace {

namespace cuda = rt::cuda;

static_assert(sizeof(rt::KernelArg) == 152, "the KernelArg layout is the NVPTX kernels' ABI (codegen/nvptx/README.md)");

// One device's memory and streams, for the life of the process (CudaBackend.h). Work goes on
// `*current`: the device's own stream, or a borrowed one (setCudaStream) while an embedder asks
// for it. Blocks are allocated for the stream current at the time, so the allocator reuses a
// block only on the stream whose work last used it.
struct Arena;

struct Device final : rt::DeviceMemory {
  cuda::Context &ctx;
  cuda::Stream own;
  cuda::Stream *current;
  std::unique_ptr<cuda::Stream> borrowed; // the lent stream while one is set
  cuda::DeviceAllocator &alloc;
  // CUDA graphs (GraphReplay.h): while `arena` is set, allocations come from it; `owner` maps
  // every block of a live arena to it (null once the arena is gone: the block then goes to the
  // allocator when its last tensor releases it).
  std::mutex arenaMu;
  Arena *arena = nullptr;
  bool sealed = false;
  std::unordered_map<uint64_t, Arena *> owner;

  explicit Device(cuda::Context &c) : ctx(c), own(c), current(&own), alloc(cuda::DeviceAllocator::forDevice(c.ordinal())) {}
  cuda::Stream &stream() { return *current; }
  std::string name() const override { return "cuda:" + std::to_string(ctx.ordinal()); }
  uint64_t allocate(size_t bytes, const char *forWhat) override;
  void release(uint64_t p) noexcept override;
  void freeBlock(uint64_t p) noexcept {
    try {
      alloc.free(p);
    } catch (...) {
      // A block the allocator does not know is a bug elsewhere; a destructor cannot report it.
    }
  }
  void toDevice(uint64_t dst, const void *src, size_t bytes) override { stream().copyToDevice(dst, src, bytes); }
  void toHost(void *dst, uint64_t src, size_t bytes) override {
    stream().copyToHost(dst, src, bytes);
    stream().synchronize();
    afterHostRead();
  }
  // StepBackend::setHostReadHook: CUDA graphs' lazily read checks (GraphReplay.h), run after the
  // wait of a host read (not reentrant: a hook that reads device memory runs no hook).
  std::vector<std::pair<const void *, std::function<void()>>> readHooks;
  bool inHook = false;
  void afterHostRead() {
    if (inHook || readHooks.empty()) return;
    inHook = true;
    struct Reset {
      bool &b;
      ~Reset() { b = false; }
    } reset{inHook};
    for (auto &[owner, fn] : std::vector<std::pair<const void *, std::function<void()>>>(readHooks)) fn();
  }
  void copyOnDevice(uint64_t dst, uint64_t src, size_t bytes) override { stream().copyOnDevice(dst, src, bytes); }
};

// A captured plan's memory (StepBackend::newArena): blocks from the device's allocator, kept
// while the plan lives and handed out again only to the plan's own walks. Its walks allocate and
// free in the same order each time, so the capture (sealed) finds every block the warm-up left.
struct Arena final : GraphArena {
  Device &dev;
  std::multimap<size_t, uint64_t> freeBlocks; // class size -> block
  std::unordered_map<uint64_t, size_t> blocks; // every block, with its class size
  size_t total = 0;
  explicit Arena(Device &d) : dev(d) {}
  size_t bytes() const override { return total; }
  ~Arena() override {
    std::lock_guard<std::mutex> lock(dev.arenaMu);
    if (dev.arena == this) dev.arena = nullptr;
    std::unordered_set<uint64_t> idle;
    for (const auto &[size, p] : freeBlocks) idle.insert(p);
    for (const auto &[p, size] : blocks) {
      if (idle.count(p)) {
        dev.owner.erase(p);
        dev.freeBlock(p); // into the allocator's cache for this stream: ordered after the replays
      } else {
        dev.owner[p] = nullptr; // still held by a tensor
      }
    }
  }
  // Under dev.arenaMu.
  uint64_t take(size_t bytes, const char *forWhat, bool sealedNow) {
    const size_t cls = cuda::DeviceAllocator::classSize(bytes);
    // Its own class only: then the warm-up leaves, per class, as many blocks as it ever held at
    // once, and the capture, making the same requests in the same order, always finds one.
    auto it = freeBlocks.find(cls);
    if (it != freeBlocks.end()) {
      const uint64_t p = it->second;
      freeBlocks.erase(it);
      return p;
    }
    if (sealedNow)
      throw std::runtime_error("an allocation of " + std::to_string(bytes) + " bytes" + (forWhat ? std::string(" for ") + forWhat : "") +
                               " that the warm-up run did not make (a capture may not call cuMemAlloc)");
    const uint64_t p = dev.alloc.allocate(cls, forWhat, dev.stream().handle());
    blocks[p] = cls;
    total += cls;
    dev.owner[p] = this;
    return p;
  }
};

uint64_t Device::allocate(size_t bytes, const char *forWhat) {
  {
    std::lock_guard<std::mutex> lock(arenaMu);
    if (arena) return arena->take(bytes, forWhat, sealed);
  }
  return alloc.allocate(bytes, forWhat, stream().handle());
}

void Device::release(uint64_t p) noexcept {
  {
    std::lock_guard<std::mutex> lock(arenaMu);
    auto it = owner.find(p);
    if (it != owner.end()) {
      if (Arena *a = it->second) {
        a->freeBlocks.emplace(a->blocks[p], p);
        return;
      }
      owner.erase(it);
    }
  }
  freeBlock(p);
}

// An instantiated CUDA graph of the device's stream.
struct CudaGraph final : DeviceGraph {
  std::unique_ptr<cuda::GraphExec> exec;
  size_t kernels() const override { return exec->kernels(); }
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
  std::vector<rt::TensorMapSpec> tensorMaps;
  bool persistent = false;
};

/// The parameter block of a launch of `p` with `args`: the KernelArg array, then the tensor maps
/// (runtime/TensorMaps.h), each tensor's KernelArg::i saying whether its map could be made; a
/// persistent kernel's program grid between the two. Reuses `block`'s memory.
void packParameters(const CudaProgram &p, const std::vector<rt::KernelArg> &args, const std::array<int64_t, 3> &grid,
                    std::vector<unsigned char> &block) {
  // TSR_TENSOR_MAPS=0: no maps (every kernel takes its copies without TMA), to compare the two.
  static const bool noMaps = [] {
    const char *e = std::getenv("TSR_TENSOR_MAPS");
    return e && std::string(e) == "0";
  }();
  block.assign(rt::kernelParamBytes(args.size(), p.tensorMaps.size(), p.persistent), 0);
  std::memcpy(block.data(), args.data(), args.size() * sizeof(rt::KernelArg));
  if (p.persistent) std::memcpy(block.data() + rt::persistentGridOffset(args.size()), grid.data(), sizeof grid);
  auto *packed = reinterpret_cast<rt::KernelArg *>(block.data());
  for (size_t s = 0; s < p.tensorMaps.size(); ++s) {
    const rt::TensorMapSpec &spec = p.tensorMaps[s];
    if (spec.param < 0 || size_t(spec.param) >= args.size()) continue;
    unsigned char *map = block.data() + rt::tensorMapOffset(args.size(), p.persistent) + s * rt::kTensorMapBytes;
    const bool made = !noMaps && cuda::encodeTensorMap(spec, args[size_t(spec.param)], map);
    packed[spec.param].i = made ? rt::kTensorMapPresent : 0;
  }
}

class Backend final : public CudaBackend {
public:
  Backend(Device &d, PtxSource source)
      : dev_(d), arch_(d.ctx.info().ccMajor >= 9 ? "sm_90" : "sm_80"), source_(std::move(source)),
        target_(ir::schedule::TileTarget::gpu(source_.measureShared)) {
    if (!source_.unavailable.empty()) target_.unavailable = source_.unavailable;
  }

  std::string name() const override { return dev_.name(); }
  const ir::schedule::TileTarget &tileTarget() const override { return target_; }
  bool interpretsSmallSteps() const override { return false; }
  const std::string &arch() const override { return arch_; }
  int ordinal() const override { return dev_.ctx.ordinal(); }
  // The arch, the device's model and its multiprocessors: an H100's choice is not an H200's.
  std::string tuningTarget() const override {
    const cuda::DeviceInfo &i = dev_.ctx.info();
    return "cuda " + arch_ + " " + i.name + " " + std::to_string(i.smCount) + " SMs";
  }
  double timeMs(const std::function<void()> &work) override { return dev_.stream().timeMs(work); }

  rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *forWhat) override {
    return rt::Tensor::emptyOn(dev_, shape, dtype, forWhat);
  }
  char *address(const rt::Tensor &t, bool write, const char *forWhat) override {
    const uint64_t p = t.deviceAddress(dev_, forWhat);
    if (write) t.markDeviceWritten(dev_);
    return reinterpret_cast<char *>(p);
  }
  // CUDA graphs (exec/GraphReplay.h) on the device's own stream.
  bool canCapture(std::string *why) override {
    if (!cuda::graphsAvailable(why)) return false;
    if (dev_.current != &dev_.own) {
      if (why) *why = "the work goes on a stream an embedder lends";
      return false;
    }
    if (dev_.own.blocking()) {
      if (why) *why = "TSR_CUDA_LAUNCH_BLOCKING=1 synchronizes after every launch";
      return false;
    }
    return true;
  }
  std::shared_ptr<GraphArena> newArena() override { return std::make_shared<Arena>(dev_); }
  void useArena(GraphArena *arena, bool sealed) override {
    std::lock_guard<std::mutex> lock(dev_.arenaMu);
    dev_.arena = static_cast<Arena *>(arena);
    dev_.sealed = sealed;
  }
  void beginCapture() override { dev_.stream().beginCapture(); }
  std::shared_ptr<DeviceGraph> endCapture() override {
    auto g = std::make_shared<CudaGraph>();
    g->exec = dev_.stream().endCapture();
    return g;
  }
  void abortCapture() noexcept override { dev_.stream().abortCapture(); }
  void replay(const DeviceGraph &g, const LaunchSite &site) override {
    dev_.stream().launchGraph(*static_cast<const CudaGraph &>(g).exec, cuda::LaunchSite{site.kernel, site.source});
  }
  void copyBytes(char *dst, const char *src, size_t bytes) override {
    dev_.stream().copyOnDevice(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes);
  }
  void zeroBytes(char *dst, size_t bytes) override { dev_.stream().fill(reinterpret_cast<uintptr_t>(dst), 0, bytes); }
  std::shared_ptr<void> hostBuffer(size_t bytes) override {
    auto b = std::make_shared<cuda::PinnedBuffer>(dev_.ctx, bytes);
    return std::shared_ptr<void>(b, b->data());
  }
  void copyToHostAsync(void *dst, const char *src, size_t bytes) override {
    dev_.stream().copyToHost(dst, reinterpret_cast<uintptr_t>(src), bytes);
  }
  void synchronize() override {
    dev_.stream().synchronize();
    dev_.afterHostRead();
  }
  void setHostReadHook(const void *owner, std::function<void()> fn) override {
    auto &h = dev_.readHooks;
    h.erase(std::remove_if(h.begin(), h.end(), [&](const auto &e) { return e.first == owner; }), h.end());
    if (fn) h.emplace_back(owner, std::move(fn));
  }
  rt::Tensor borrow(const rt::Tensor &t, std::shared_ptr<void> owner) override {
    return rt::Tensor::wrapDevice(dev_, t.deviceAddress(dev_, "a CUDA graph's buffer"), t.shape(), t.dtype(), std::move(owner));
  }
  void copyBatch(const std::vector<ByteCopy> &copies) override {
    std::vector<cuda::DevicePtr> d, s;
    std::vector<size_t> b;
    for (const ByteCopy &c : copies) {
      d.push_back(reinterpret_cast<uintptr_t>(c.dst));
      s.push_back(reinterpret_cast<uintptr_t>(c.src));
      b.push_back(c.bytes);
    }
    dev_.stream().copyBatchOnDevice(d.data(), s.data(), b.data(), copies.size());
  }

  // Collectives between ranks' GPUs through NCCL on a stream of their own (NcclSteps.h).
  bool runCollective(const ir::Op &op, const rt::Tensor &x, rt::Tensor &out) override {
    return ncclCollective(*this, dev_.ctx.ordinal(), dev_.stream().handle(), op, x, out);
  }
  void joinCollectives() override { ncclJoin(dev_.ctx.ordinal(), dev_.stream().handle()); }

  std::shared_ptr<const BackendProgram> compile(const tile::Function &fn, const CompileHints &) override {
    if (!source_.compile)
      throw std::runtime_error("the program `" + fn.name + "` has no code for " + dev_.name() + ", and this runner compiles no PTX");
    const CompiledPtx c = source_.compile(fn, arch_);
    return load({c.ptx, {}, c.entry, c.threads, c.sharedBytes, c.tensorMaps, c.persistent});
  }

  // The PTX of a batch on every core, as the CPU backend compiles its batches: each compilation
  // has its own LLVM context and target machine (codegen/nvptx), and the persistent cache takes
  // concurrent writers. The modules are then loaded on this thread, one after the other, into
  // the device's context. Requests of one text (the same program in several steps) compile once.
  std::vector<std::shared_ptr<const BackendProgram>> compileAll(const std::vector<CompileRequest> &requests) override {
    if (!source_.compile) return StepBackend::compileAll(requests);
    std::vector<size_t> first(requests.size()), unique;
    std::unordered_map<std::string, size_t> byText;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto [it, fresh] = byText.emplace(tile::toString(*requests[i].fn), unique.size());
      if (fresh) unique.push_back(i);
      first[i] = it->second;
    }
    std::vector<std::optional<CompiledPtx>> ptx(unique.size());
    rt::runTasks(int64_t(unique.size()), [&](int64_t u) {
      try {
        ptx[size_t(u)] = source_.compile(*requests[unique[size_t(u)]].fn, arch_);
      } catch (...) {
        // left empty: its step compiles it again and reports the error at its op
      }
    });
    std::vector<std::shared_ptr<const BackendProgram>> done(unique.size()), out(requests.size());
    for (size_t u = 0; u < unique.size(); ++u) {
      if (!ptx[u]) continue;
      try {
        const CompiledPtx &c = *ptx[u];
        done[u] = load({c.ptx, {}, c.entry, c.threads, c.sharedBytes, c.tensorMaps, c.persistent});
      } catch (...) {
        // as above: the step's own compile reports the driver's error
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) out[i] = done[first[i]];
    return out;
  }

  std::shared_ptr<const BackendProgram> load(const PtxCode &code) override {
    auto p = std::make_shared<CudaProgram>();
    p->fn = &cuda::ModuleCache::process().function(dev_.ctx.ordinal(), code.ptx, code.entry, code.cubin);
    p->threads = code.threads;
    p->sharedBytes = code.sharedBytes;
    p->tensorMaps = code.tensorMaps;
    p->persistent = code.persistent;
    return p;
  }

  void launch(const BackendProgram &prog, const std::vector<rt::KernelArg> &args, const std::array<int64_t, 3> &grid,
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
    if (p.persistent) {
      // As many CTAs as are resident at once, each looping over the grid's programs.
      const int64_t programs = grid[0] * grid[1] * grid[2];
      if (programs <= 0) return;
      const int64_t resident = int64_t(dev_.ctx.info().smCount) * dev_.stream().residentBlocksPerSM(*p.fn, dims, {site.kernel, site.source});
      dims.grid[0] = unsigned(std::clamp<int64_t>(resident, 1, programs));
      dims.grid[1] = dims.grid[2] = 1;
    }
    if (p.tensorMaps.empty() && !p.persistent) {
      dev_.stream().launchPacked(*p.fn, dims, args.data(), args.size() * sizeof(rt::KernelArg),
                               cuda::LaunchSite{site.kernel, site.source});
      return;
    }
    thread_local std::vector<unsigned char> block;
    packParameters(p, args, grid, block);
    // Through kernelParams, not a packed buffer: the block is `.align 64`, and the driver puts it
    // where the kernel reads it (a packed buffer lands at the start of the parameter bank, which
    // is only 16-byte aligned on sm_90: the kernel would read every field 48 bytes off).
    void *params[] = {block.data()};
    dev_.stream().launch(*p.fn, dims, params, cuda::LaunchSite{site.kernel, site.source});
  }

private:
  Device &dev_;
  std::string arch_;
  PtxSource source_;
  ir::schedule::TileTarget target_;
};

} // namespace

std::shared_ptr<CudaBackend> cudaBackend(const std::string &spec, PtxSource source) {
  if (!source.measureShared) throw std::invalid_argument("cudaBackend: a PtxSource without measureShared");
  const int ordinal = cuda::parseDeviceSpec(spec);
  cuda::Driver::get().requireAvailable();
  return std::make_shared<Backend>(deviceFor(ordinal), std::move(source));
}

void synchronizeCudaBackends() {
  std::vector<Device *> ds;
  {
    std::lock_guard<std::mutex> lock(devicesMutex);
    for (auto &[o, d] : devices()) ds.push_back(d);
  }
  for (Device *d : ds) d->stream().synchronize();
}

rt::DeviceMemory &cudaDeviceMemory(int ordinal) {
  cuda::Driver::get().requireAvailable();
  return deviceFor(ordinal);
}

void setCudaStream(int ordinal, void *stream, bool own) {
  Device &d = deviceFor(ordinal);
  std::lock_guard<std::mutex> lock(devicesMutex);
  d.current = &d.own;
  // A lent stream is dropped as soon as it is not current: its owner may destroy it, and the
  // context synchronizes every Stream it knows (Context::synchronize) before it frees memory.
  d.borrowed.reset();
  if (own) return;
  d.borrowed = std::make_unique<cuda::Stream>(d.ctx, stream);
  d.current = d.borrowed.get();
}

} // namespace tsr::exec
