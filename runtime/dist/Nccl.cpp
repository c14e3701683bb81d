// NCCL through dlopen/dlsym (Nccl.h). Types and enum values are nccl.h's, written out so that the
// runtime builds without NCCL's headers.
#include "runtime/dist/Nccl.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace tsr::rt::dist::nccl {

namespace {

using ncclResult_t = int;        // ncclSuccess = 0, ncclInProgress = 7
using ncclComm_t = void *;
using ncclDataType_t = int;
using ncclRedOp_t = int;
struct ncclUniqueId { char internal[128]; }; // NCCL_UNIQUE_ID_BYTES
using CUresult = int;
using CUstream = void *;

constexpr ncclResult_t kSuccess = 0, kInProgress = 7;
// ncclRedOp_t
constexpr ncclRedOp_t kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4;
// ncclDataType_t
constexpr ncclDataType_t kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9,
                         kFloat8e4m3 = 10, kFloat8e5m2 = 11;

struct Api {
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*ncclAllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream);
  ncclResult_t (*ncclAllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, CUstream);
  ncclResult_t (*ncclReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, CUstream);
  ncclResult_t (*ncclBroadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
  ncclResult_t (*ncclSend)(const void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
  ncclResult_t (*ncclRecv)(void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  const char *(*ncclGetErrorString)(ncclResult_t);
  // From libcuda (the stream poll of wait, and the device of the communicator).
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuCtxSetCurrent)(void *);
  CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuInit)(unsigned);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuEventCreate)(void **, unsigned);
  CUresult (*cuEventRecord)(void *, CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, void *, unsigned);
  CUresult (*cuEventQuery)(void *);
};

struct Lib {
  void *h = nullptr;
  Api api{};
  std::string why;
  Lib() {
    const char *name = std::getenv("TSR_LIBNCCL");
    if (!name || !*name) name = "libnccl.so.2";
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      why = std::string("cannot open NCCL's library ") + name + " (" + (e ? e : "unknown error") +
            "): install NCCL (Debian: `apt-get install libnccl2` from NVIDIA's CUDA repository, or pip's nvidia-nccl-cu12), "
            "or set TSR_LIBNCCL to its libnccl.so";
      return;
    }
    struct Sym { void **slot; const char *name; };
    const Sym syms[] = {
#define TSR_SYM(n) {reinterpret_cast<void **>(&api.n), #n}
        TSR_SYM(ncclGetUniqueId), TSR_SYM(ncclCommInitRank), TSR_SYM(ncclAllReduce), TSR_SYM(ncclAllGather),
        TSR_SYM(ncclReduceScatter), TSR_SYM(ncclBroadcast), TSR_SYM(ncclSend), TSR_SYM(ncclRecv), TSR_SYM(ncclGroupStart),
        TSR_SYM(ncclGroupEnd), TSR_SYM(ncclCommGetAsyncError), TSR_SYM(ncclCommAbort), TSR_SYM(ncclCommDestroy),
        TSR_SYM(ncclGetErrorString),
#undef TSR_SYM
    };
    for (const Sym &s : syms) {
      *s.slot = dlsym(h, s.name);
      if (!*s.slot) { why = std::string(name) + " lacks `" + s.name + "` (NCCL 2.18 or newer is needed)"; h = nullptr; return; }
    }
    const char *cudaName = std::getenv("TSR_LIBCUDA");
    void *cu = dlopen(cudaName && *cudaName ? cudaName : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu) { why = "NCCL needs the NVIDIA driver (libcuda.so.1), which cannot be opened"; h = nullptr; return; }
    api.cuStreamQuery = reinterpret_cast<decltype(api.cuStreamQuery)>(dlsym(cu, "cuStreamQuery"));
    api.cuCtxSetCurrent = reinterpret_cast<decltype(api.cuCtxSetCurrent)>(dlsym(cu, "cuCtxSetCurrent"));
    api.cuDevicePrimaryCtxRetain = reinterpret_cast<decltype(api.cuDevicePrimaryCtxRetain)>(dlsym(cu, "cuDevicePrimaryCtxRetain"));
    api.cuDeviceGet = reinterpret_cast<decltype(api.cuDeviceGet)>(dlsym(cu, "cuDeviceGet"));
    api.cuInit = reinterpret_cast<decltype(api.cuInit)>(dlsym(cu, "cuInit"));
    api.cuStreamCreate = reinterpret_cast<decltype(api.cuStreamCreate)>(dlsym(cu, "cuStreamCreate"));
    api.cuEventCreate = reinterpret_cast<decltype(api.cuEventCreate)>(dlsym(cu, "cuEventCreate"));
    api.cuEventRecord = reinterpret_cast<decltype(api.cuEventRecord)>(dlsym(cu, "cuEventRecord"));
    api.cuStreamWaitEvent = reinterpret_cast<decltype(api.cuStreamWaitEvent)>(dlsym(cu, "cuStreamWaitEvent"));
    api.cuEventQuery = reinterpret_cast<decltype(api.cuEventQuery)>(dlsym(cu, "cuEventQuery"));
    if (!api.cuEventQuery ||!api.cuStreamQuery || !api.cuCtxSetCurrent || !api.cuDevicePrimaryCtxRetain || !api.cuDeviceGet || !api.cuInit ||
        !api.cuStreamCreate || !api.cuEventCreate || !api.cuEventRecord || !api.cuStreamWaitEvent) {
      why = "libcuda.so.1 lacks the stream and context entry points NCCL's path uses";
      h = nullptr;
    }
  }
};

Lib &lib() {
  static Lib l;
  return l;
}

const Api &api() {
  Lib &l = lib();
  if (!l.h) throw DistError(l.why);
  return l.api;
}

void check(ncclResult_t r, const char *op, const std::string &what) {
  if (r == kSuccess || r == kInProgress) return;
  const char *s = api().ncclGetErrorString ? api().ncclGetErrorString(r) : "unknown";
  throw DistError(std::string("NCCL ") + op + (what.empty() ? "" : " (" + what + ")") + " failed on rank " + std::to_string(world().rank) +
                  ": " + s + " (error " + std::to_string(r) + ")");
}

std::mutex &mu() {
  static std::mutex m;
  return m;
}
// The communicators the watchdog polls and aborts (its own lock: commFor holds mu() while
// ncclCommInitRank waits for the peers).
std::mutex &watchMu() {
  static std::mutex m;
  return m;
}
std::vector<ncclComm_t> &watched() {
  static std::vector<ncclComm_t> c;
  return c;
}
std::map<std::vector<int>, ncclComm_t> &comms() {
  static std::map<std::vector<int>, ncclComm_t> c;
  return c;
}

// The communicator of a group, made at its first collective: the group's first rank makes the
// unique id and sets it in the store under a key naming the group; the others read it.
ncclComm_t commFor(const Group &g, int device) {
  const Api &a = api();
  std::lock_guard<std::mutex> l(mu());
  auto it = comms().find(g.ranks);
  if (it != comms().end()) return it->second;
  std::string key = "nccl/group";
  for (int r : g.ranks) key += "." + std::to_string(r);
  ncclUniqueId id{};
  if (g.index == 0) {
    check(a.ncclGetUniqueId(&id), "ncclGetUniqueId", key);
    store().set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
  } else {
    std::vector<char> v = store().get(key);
    if (v.size() != sizeof id.internal) throw DistError("the rendezvous: `" + key + "` is not an NCCL unique id");
    std::memcpy(id.internal, v.data(), v.size());
  }
  // Every rank of the group announces itself and waits for the others (up to the time-out) before
  // ncclCommInitRank, whose bootstrap would wait for a dead peer without end.
  {
    std::vector<std::string> ready;
    for (int r : g.ranks) ready.push_back(key + "/ready." + std::to_string(r));
    store().set(ready[size_t(g.index)], {'1'});
    store().wait(ready, timeout());
  }
  a.cuInit(0);
  int dev = 0;
  void *ctx = nullptr;
  if (a.cuDeviceGet(&dev, device) != 0 || a.cuDevicePrimaryCtxRetain(&ctx, dev) != 0 || a.cuCtxSetCurrent(ctx) != 0)
    throw DistError("NCCL: cannot make cuda:" + std::to_string(device) + " current for rank " + std::to_string(world().rank));
  ncclComm_t c = nullptr;
  check(a.ncclCommInitRank(&c, int(g.size()), id, g.index), "ncclCommInitRank", key);
  comms()[g.ranks] = c;
  {
    std::lock_guard<std::mutex> w(watchMu());
    watched().push_back(c);
  }
  return c;
}

ncclDataType_t dtypeOf(DType d) {
  switch (d) {
  case DType::F32: return kFloat32;
  case DType::F64: return kFloat64;
  case DType::F16: return kFloat16;
  case DType::BF16: return kBfloat16;
  case DType::I32: return kInt32;
  case DType::I64: return kInt64;
  case DType::I8: return kInt8;
  case DType::Bool: return kUint8;
  case DType::F8E4M3: return kFloat8e4m3;
  case DType::F8E5M2: return kFloat8e5m2;
  case DType::TF32: return kFloat32;
  }
  return kFloat32;
}

ncclRedOp_t redOf(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return kSum;
  case ReduceOp::Mean: return kAvg;
  case ReduceOp::Max: return kMax;
  case ReduceOp::Min: return kMin;
  case ReduceOp::Prod: return kProd;
  }
  return kSum;
}

// The watchdog (PyTorch's ProcessGroupNCCL watchdog, in small): each collective records an event
// on the communication stream after it and is queued here with its label; a thread polls the
// oldest one's event (cuEventQuery) and every communicator's asynchronous error
// (ncclCommGetAsyncError) every 200 us. A collective unfinished `timeout()` after it was queued, or
// an asynchronous error, aborts every communicator (ncclCommAbort) and ends the process with exit 1
// and the error (watchdogVerdict's words): the host thread may by then be blocked in a launch or a
// copy behind the stuck collective, so no exception can reach it. The host never waits for a
// collective itself: the overlap of onCommStream stays.
struct Watch {
  void *event = nullptr;
  std::string label;
  std::vector<int> ranks;
  std::chrono::steady_clock::time_point queued;
};

struct Watchdog {
  std::mutex m;
  std::deque<Watch> q;
  std::vector<void *> spare; // events whose collective finished, to record again
  Watch last;                // the latest queued, which an asynchronous error names when none waits
  void *ctx = nullptr;       // the device's primary context, made current on the thread
  bool started = false;
  // At exit (an atexit handler registered when the thread starts, so it runs before the driver's
  // and NCCL's own teardown and the statics made before it): the thread stops touching them.
  std::atomic<bool> stopping{false}, stopped{false};

  void run() {
    const Api &a = api();
    if (ctx) a.cuCtxSetCurrent(ctx);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (stopping.load()) {
        stopped = true;
        return;
      }
      Watch front;
      bool done = true;
      int cu = 0;
      {
        std::lock_guard<std::mutex> l(m);
        while (!q.empty()) {
          cu = a.cuEventQuery(q.front().event);
          if (cu != 0) break;
          spare.push_back(q.front().event);
          q.pop_front();
        }
        if (!q.empty()) { front = q.front(); done = false; }
        else front = last;
      }
      int err = kSuccess;
      {
        std::lock_guard<std::mutex> l(watchMu());
        for (ncclComm_t c : watched()) {
          ncclResult_t e = kSuccess;
          a.ncclCommGetAsyncError(c, &e);
          if (e != kSuccess && e != kInProgress) { err = e; break; }
        }
      }
      const auto now = std::chrono::steady_clock::now();
      std::string msg = watchdogVerdict(front.label.empty() ? "a collective" : front.label, world().rank, front.ranks, done, done ? 0 : cu, err,
                                        err ? a.ncclGetErrorString(err) : "",
                                        std::chrono::duration_cast<std::chrono::milliseconds>(now - front.queued), timeout());
      if (msg.empty()) continue;
      std::fprintf(stderr, "error: %s\n", msg.c_str());
      std::fflush(stderr);
      // The abort on its own thread, waited for at most 10 s: an abort that itself hangs (a
      // proxy thread stuck on the dead peer) must not keep the process alive.
      auto aborted = std::make_shared<std::atomic<bool>>(false);
      std::thread([aborted, &a] {
        std::lock_guard<std::mutex> l(watchMu());
        for (ncclComm_t c : watched()) a.ncclCommAbort(c);
        *aborted = true;
      }).detach();
      for (int i = 0; i < 1000 && !*aborted; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::_Exit(1);
    }
  }
};

Watchdog &watchdog() {
  static Watchdog *w = new Watchdog; // never destroyed: its thread runs until the process ends
  return *w;
}

// Queues the watch of the collective just enqueued on `comm` (the host thread, its context current).
void watch(void *comm, const Group &g, const std::string &label) {
  const Api &a = api();
  Watchdog &w = watchdog();
  void *ev = nullptr;
  {
    std::lock_guard<std::mutex> l(w.m);
    if (!w.spare.empty()) { ev = w.spare.back(); w.spare.pop_back(); }
  }
  constexpr unsigned kDisableTiming = 2;
  if (!ev && a.cuEventCreate(&ev, kDisableTiming) != 0) throw DistError("NCCL: cannot make the event that watches " + label);
  if (a.cuEventRecord(ev, comm) != 0) throw DistError("NCCL: cannot record the event that watches " + label);
  std::lock_guard<std::mutex> l(w.m);
  w.q.push_back(Watch{ev, label, g.ranks, std::chrono::steady_clock::now()});
  w.last = w.q.back();
  if (!w.started) {
    w.started = true;
    std::thread([&w] { w.run(); }).detach();
    // A detached thread still polling while the process exits would call into a driver and an
    // NCCL being torn down (it crashed there, SIGSEGV at every rank's exit): stop it first.
    std::atexit([] {
      Watchdog &d = watchdog();
      d.stopping = true;
      for (int i = 0; i < 200 && !d.stopped; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
}

} // namespace

std::string watchdogVerdict(const std::string &label, int rank, const std::vector<int> &ranks, bool done, int cuResult, int ncclError,
                            const std::string &ncclErrorString, std::chrono::milliseconds waited, std::chrono::milliseconds limit) {
  std::string peers;
  for (int r : ranks) peers += (peers.empty() ? "" : ", ") + std::to_string(r);
  const std::string head = label + " failed on rank " + std::to_string(rank) + (peers.empty() ? "" : " (group of ranks " + peers + ")") + ": ";
  const std::string tail = "; the NCCL communicators were aborted";
  if (ncclError != 0)
    return head + "NCCL reports " + ncclErrorString + " (error " + std::to_string(ncclError) + "; a peer rank ended?)" + tail;
  if (done) return "";
  if (cuResult != 0 && cuResult != 600) // CUDA_ERROR_NOT_READY
    return head + "its stream failed (CUresult " + std::to_string(cuResult) + ")" + tail;
  if (waited > limit)
    return head + "it did not finish within " + std::to_string(limit.count() / 1000) +
           " s (a peer rank ended or did not reach this collective; TSR_DIST_TIMEOUT_S sets the limit)" + tail;
  return "";
}

bool available() { return lib().h != nullptr; }
const std::string &why() { return lib().why; }

void allReduce(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, ReduceOp op, void *stream, const std::string &what) {
  ncclComm_t c = commFor(g, device);
  check(api().ncclAllReduce(send, recv, count, dtypeOf(dt), redOf(op), c, stream), "all_reduce", what);
}

void allGather(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, void *stream, const std::string &what) {
  ncclComm_t c = commFor(g, device);
  check(api().ncclAllGather(send, recv, count, dtypeOf(dt), c, stream), "all_gather", what);
}

void reduceScatter(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, ReduceOp op, void *stream, const std::string &what) {
  ncclComm_t c = commFor(g, device);
  check(api().ncclReduceScatter(send, recv, count, dtypeOf(dt), redOf(op), c, stream), "reduce_scatter", what);
}

void broadcast(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, int root, void *stream, const std::string &what) {
  ncclComm_t c = commFor(g, device);
  check(api().ncclBroadcast(send, recv, count, dtypeOf(dt), root, c, stream), "broadcast", what);
}

void allToAll(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, void *stream, const std::string &what) {
  ncclComm_t c = commFor(g, device);
  const Api &a = api();
  const size_t bytes = count * size_t(dtypeBits(dt) / 8);
  check(a.ncclGroupStart(), "all_to_all", what);
  for (size_t j = 0; j < g.size(); ++j) {
    check(a.ncclSend(static_cast<const char *>(send) + j * bytes, count, dtypeOf(dt), int(j), c, stream), "all_to_all (send)", what);
    check(a.ncclRecv(static_cast<char *>(recv) + j * bytes, count, dtypeOf(dt), int(j), c, stream), "all_to_all (recv)", what);
  }
  check(a.ncclGroupEnd(), "all_to_all", what);
}

namespace {
// Per device: the communication stream and two events (CU_EVENT_DISABLE_TIMING = 2), reused:
// an event recorded again replaces its earlier capture, and the waits were queued before.
// `deferred`: a collective queued with deferWait whose end the compute stream has not waited for.
struct CommSide { void *comm = nullptr; void *ready = nullptr, *done = nullptr; bool deferred = false; };
std::map<int, CommSide> &commSides() {
  static std::map<int, CommSide> sides;
  return sides;
}
} // namespace

void joinCommStream(int device, void *computeStream) {
  auto it = commSides().find(device);
  if (it == commSides().end() || !it->second.deferred) return;
  it->second.deferred = false;
  if (api().cuStreamWaitEvent(computeStream, it->second.done, 0) != 0)
    throw DistError("NCCL: cannot order the compute of cuda:" + std::to_string(device) + " after its collectives");
}

void onCommStream(int device, void *computeStream, const Group &g, const std::string &label, const std::function<void(void *commStream)> &enqueue,
                  bool deferWait) {
  const Api &a = api();
  CommSide &sd = commSides()[device];
  if (!sd.comm) {
    constexpr unsigned kNonBlocking = 1, kDisableTiming = 2;
    if (a.cuStreamCreate(reinterpret_cast<CUstream *>(&sd.comm), kNonBlocking) != 0 || a.cuEventCreate(&sd.ready, kDisableTiming) != 0 ||
        a.cuEventCreate(&sd.done, kDisableTiming) != 0)
      throw DistError("NCCL: cannot make the communication stream of cuda:" + std::to_string(device));
  }
  if (a.cuEventRecord(sd.ready, computeStream) != 0 || a.cuStreamWaitEvent(sd.comm, sd.ready, 0) != 0)
    throw DistError("NCCL: cannot order the communication stream of cuda:" + std::to_string(device) + " after its compute");
  enqueue(sd.comm);
  {
    Watchdog &w = watchdog();
    std::lock_guard<std::mutex> l(w.m);
    if (!w.ctx) {
      int dev = 0;
      if (a.cuDeviceGet(&dev, device) == 0) a.cuDevicePrimaryCtxRetain(&w.ctx, dev);
    }
  }
  watch(sd.comm, g, label);
  if (a.cuEventRecord(sd.done, sd.comm) != 0)
    throw DistError("NCCL: cannot order the compute of cuda:" + std::to_string(device) + " after its collective");
  if (deferWait) {
    sd.deferred = true;
    return;
  }
  sd.deferred = false;
  if (a.cuStreamWaitEvent(computeStream, sd.done, 0) != 0)
    throw DistError("NCCL: cannot order the compute of cuda:" + std::to_string(device) + " after its collective");
}

void wait(void *stream, const std::string &what) {
  const Api &a = api();
  auto deadline = std::chrono::steady_clock::now() + timeout();
  for (;;) {
    CUresult r = a.cuStreamQuery(stream);
    if (r == 0) return;
    if (r != 600) // CUDA_ERROR_NOT_READY
      throw DistError("NCCL (" + what + "): the collective's stream failed on rank " + std::to_string(world().rank) + " (CUresult " + std::to_string(r) + ")");
    std::lock_guard<std::mutex> l(mu());
    for (auto &[ranks, c] : comms()) {
      ncclResult_t e = kSuccess;
      a.ncclCommGetAsyncError(c, &e);
      if (e != kSuccess && e != kInProgress) {
        a.ncclCommAbort(c);
        throw DistError("NCCL (" + what + ") on rank " + std::to_string(world().rank) + ": " + a.ncclGetErrorString(e) + " (a peer rank ended?)");
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto &[ranks, c] : comms()) a.ncclCommAbort(c);
      throw DistError("NCCL (" + what + ") on rank " + std::to_string(world().rank) + " did not finish within " +
                      std::to_string(timeout().count() / 1000) + " s (a peer rank ended or never reached it; TSR_DIST_TIMEOUT_S sets the limit)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

} // namespace tsr::rt::dist::nccl
