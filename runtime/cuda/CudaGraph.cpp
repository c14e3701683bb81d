// CUDA graph capture and replay (CudaGraph.h): the optional entry points, resolved once, and the
// Stream members that use them (declared in CudaDriver.h). Signatures and values are cuda.h's
// (CUDA 13.0); cuStreamBeginCapture is cuStreamBeginCapture_v2 there, the others are unversioned.
#include "runtime/cuda/CudaGraph.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace tsr::rt::cuda {

namespace {

using CUresult = int;
constexpr int kCaptureModeThreadLocal = 1; // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL

struct GraphApi {
  CUresult (*beginCapture)(void *stream, int mode) = nullptr;            // cuStreamBeginCapture_v2
  CUresult (*endCapture)(void *stream, void **graph) = nullptr;          // cuStreamEndCapture
  CUresult (*instantiate)(void **exec, void *graph, unsigned long long flags) = nullptr; // cuGraphInstantiateWithFlags
  CUresult (*launch)(void *exec, void *stream) = nullptr;                // cuGraphLaunch
  CUresult (*execDestroy)(void *exec) = nullptr;                         // cuGraphExecDestroy
  CUresult (*graphDestroy)(void *graph) = nullptr;                       // cuGraphDestroy
  // cuMemcpyBatchAsync_v2 (optional, CUDA 13): dsts, srcs, sizes, count, attrs, attrsIdxs,
  // numAttrs, stream.
  CUresult (*copyBatch)(unsigned long long *, unsigned long long *, size_t *, size_t, void *, size_t *, size_t, void *) = nullptr;
  std::string missing; // the first entry point not found, or why none were looked up
};

// CUmemcpyAttributes: srcAccessOrder, srcLocHint {type, id}, dstLocHint {type, id}, flags.
struct CopyAttributes {
  int srcAccessOrder = 1; // CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
  int srcLocType = 0, srcLocId = 0, dstLocType = 0, dstLocId = 0; // CU_MEM_LOCATION_TYPE_INVALID: no hint
  unsigned flags = 0;
};
static_assert(sizeof(CopyAttributes) == 24, "cuda.h's CUmemcpyAttributes");

const GraphApi &graphApi() {
  static const GraphApi api = [] {
    GraphApi a;
    const Driver &d = Driver::get();
    if (!d.available()) {
      a.missing = "no GPU (" + d.why() + ")";
      return a;
    }
    auto get = [&](auto &slot, const char *name) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(d.optionalSymbol(name));
      if (!slot && a.missing.empty()) a.missing = std::string("the driver lacks ") + name;
    };
    get(a.beginCapture, "cuStreamBeginCapture_v2");
    get(a.endCapture, "cuStreamEndCapture");
    get(a.instantiate, "cuGraphInstantiateWithFlags");
    get(a.launch, "cuGraphLaunch");
    get(a.execDestroy, "cuGraphExecDestroy");
    get(a.graphDestroy, "cuGraphDestroy");
    a.copyBatch = reinterpret_cast<decltype(a.copyBatch)>(d.optionalSymbol("cuMemcpyBatchAsync_v2"));
    return a;
  }();
  return api;
}

} // namespace

bool graphsAvailable(std::string *why) {
  const GraphApi &a = graphApi();
  if (why) *why = a.missing;
  return a.missing.empty();
}

GraphExec::~GraphExec() {
  if (!exec_) return;
  try {
    ctx_.makeCurrent();
  } catch (...) {
    return; // a dead context: the driver reclaims the graph with the process
  }
  graphApi().execDestroy(exec_);
}

void Stream::beginCapture() {
  const GraphApi &a = graphApi();
  if (!a.missing.empty()) throw GpuError(kCudaNotFound, "CUDA_ERROR_NOT_FOUND", "no CUDA graphs: " + a.missing);
  if (capturing_) throw GpuError(kCudaInvalidValue, Driver::get().errorName(kCudaInvalidValue), "a capture is already under way on this stream");
  ctx_.requireUsable();
  ctx_.makeCurrent();
  if (CUresult r = a.beginCapture(stream_, kCaptureModeThreadLocal); r != 0)
    fail(r, "starting a capture of a stream (cuStreamBeginCapture_v2)");
  capturing_ = true;
  captured_ = 0;
  capturedSites_.clear();
}

std::unique_ptr<GraphExec> Stream::endCapture() {
  const GraphApi &a = graphApi();
  if (!capturing_) throw GpuError(kCudaInvalidValue, Driver::get().errorName(kCudaInvalidValue), "no capture is under way on this stream");
  ctx_.makeCurrent();
  void *graph = nullptr;
  CUresult r = a.endCapture(stream_, &graph);
  capturing_ = false;
  // An invalidated capture (a call that the capture does not allow was made) ends with an error
  // and no graph; the stream is usable again either way.
  if (r != 0) {
    if (graph) a.graphDestroy(graph);
    fail(r, "ending the capture of a stream (cuStreamEndCapture)");
  }
  void *exec = nullptr;
  r = a.instantiate(&exec, graph, 0);
  a.graphDestroy(graph); // the executable graph keeps what it needs
  if (r != 0) fail(r, "instantiating a captured graph of " + std::to_string(captured_) + " launches (cuGraphInstantiateWithFlags)");
  std::string text = std::to_string(captured_) + " kernels: ";
  for (size_t i = 0; i < capturedSites_.size(); ++i) text += (i ? ", " : "") + capturedSites_[i];
  if (captured_ > capturedSites_.size()) text += ", ...";
  text += "; TSR_CUDA_GRAPHS=0 launches them one by one";
  capturedSites_.clear();
  return std::make_unique<GraphExec>(ctx_, exec, captured_, std::move(text));
}

void Stream::abortCapture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  capturedSites_.clear();
  const GraphApi &a = graphApi();
  try {
    ctx_.makeCurrent();
  } catch (...) {
    // a context that cannot be made current has no capture left to end
  }
  void *graph = nullptr;
  if (a.endCapture && a.endCapture(stream_, &graph) == 0 && graph) a.graphDestroy(graph);
}

void Stream::copyBatchOnDevice(const DevicePtr *dst, const DevicePtr *src, const size_t *bytes, size_t n) {
  // Once a batch call fails (a driver that refuses it), copies go one by one for the process.
  static std::atomic<bool> batchFailed{false};
  const GraphApi &a = graphApi();
  if (n > 1 && a.copyBatch && !batchFailed && !capturing_) {
    ctx_.requireUsable();
    ctx_.makeCurrent();
    std::vector<unsigned long long> d(dst, dst + n), s(src, src + n);
    std::vector<size_t> b(bytes, bytes + n);
    CopyAttributes attrs;
    size_t first = 0;
    if (a.copyBatch(d.data(), s.data(), b.data(), n, &attrs, &first, 1, stream_) == 0) return;
    batchFailed = true; // (nothing was queued, or the copies below repeat what was: same bytes)
  }
  for (size_t i = 0; i < n; ++i) copyOnDevice(dst[i], src[i], bytes[i]);
}

void Stream::launchGraph(const GraphExec &g, LaunchSite site) {
  const GraphApi &a = graphApi();
  ctx_.requireUsable();
  ctx_.makeCurrent();
  if (CUresult r = a.launch(g.handle(), stream_); r != 0)
    fail(r, "launching the CUDA graph of " + std::string(site.kernelName) + " (" + std::to_string(g.kernels()) +
                " kernels; cuGraphLaunch)");
  {
    std::lock_guard<std::mutex> lock(mu_);
    LaunchRecord &slot = ring_[launches_ % ring_.size()];
    slot.sequence = ++launches_;
    slot.kernelName.assign(site.kernelName);
    slot.sourceLocation.assign(site.sourceLocation);
    slot.sourceLocation += ": ";
    slot.sourceLocation += g.kernelsText();
    slot.dims = LaunchDims{};
  }
  if (blocking_) synchronize();
}

} // namespace tsr::rt::cuda
