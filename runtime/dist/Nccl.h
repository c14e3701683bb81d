// NCCL opened with dlopen (never linked), like libcuda (runtime/cuda): collectives between the
// GPUs of a distributed run, one rank per GPU. The few entry points used are declared here from
// nccl.h (NCCL 2.18+; ABI stable since 2.0 for these). The unique id of each communicator travels
// through the run's TCP store (Store.h). Each call enqueues on the CUstream given; the caller
// orders it against compute with events (exec/dist/). Untested without GPUs: tools/gpu/dist.sh.
#pragma once

#include "runtime/dist/Dist.h"

#include <chrono>
#include <cstddef>
#include <vector>
#include <functional>
#include <string>

namespace tsr::rt::dist::nccl {

/// Whether libnccl could be opened (TSR_LIBNCCL names it; default libnccl.so.2) and, when not,
/// why, with how to install it (never throws).
bool available();
const std::string &why();

/// The collectives on device memory, over the ranks of `g`, enqueued on `stream` (a CUstream) of
/// the GPU `device` (ordinal) this rank uses. Counts are elements. Throws DistError with NCCL's
/// error string, naming the op and `what`.
void allReduce(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, ReduceOp op, void *stream, const std::string &what);
/// recv holds g.size() * count elements: the ranks' sends in group order.
void allGather(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, void *stream, const std::string &what);
/// send holds g.size() * count elements; recv gets this rank's reduced count.
void reduceScatter(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, ReduceOp op, void *stream, const std::string &what);
void broadcast(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, int root, void *stream, const std::string &what);
/// send and recv hold g.size() blocks of `count` elements; block j goes to (comes from) rank j.
void allToAll(const Group &g, int device, const void *send, void *recv, size_t count, DType dt, void *stream, const std::string &what);
/// Enqueues `enqueue`'s collectives on the communication stream of GPU `device` (its own,
/// non-blocking, made once), ordered against `computeStream` with events both ways: the
/// collective starts after the work queued there so far, and work queued there afterwards waits
/// for it. The host does not wait: a watchdog thread polls an event recorded after the collective
/// (cuEventQuery) and the communicators' asynchronous errors (ncclCommGetAsyncError); past
/// TSR_DIST_TIMEOUT_S after it was queued, or on an asynchronous error, it aborts every
/// communicator (ncclCommAbort) and ends the process with exit 1 and `error: LABEL failed on
/// rank R (group of ranks ...): ...` (watchdogVerdict), as the Gloo path's DistError does. `g`
/// and `label` (`all_reduce over mesh axis dp (all_reduce %5)`) name it there.
///
/// deferWait (data parallelism's gradient buckets inside the backward graph): the compute stream
/// does not wait for the collective now, so that the backward's later steps run beside it
/// (PyTorch DDP's overlap); joinCommStream makes it wait, before the result is read.
void onCommStream(int device, void *computeStream, const Group &g, const std::string &label, const std::function<void(void *commStream)> &enqueue,
                  bool deferWait = false);
/// Makes `computeStream` wait for every collective queued on `device`'s communication stream so
/// far (the stream is in order, so one event recorded after the latest covers all). No-op when no
/// deferred collective is outstanding.
void joinCommStream(int device, void *computeStream);
/// The watchdog's decision on the oldest unfinished collective (pure, so that a test can drive it
/// with a fake clock): "" to go on waiting, else the error. done: its event completed; cuResult:
/// cuEventQuery's (600 = not ready); ncclError: a communicator's asynchronous error (0 = none);
/// waited: since it was queued.
std::string watchdogVerdict(const std::string &label, int rank, const std::vector<int> &ranks, bool done, int cuResult, int ncclError,
                            const std::string &ncclErrorString, std::chrono::milliseconds waited, std::chrono::milliseconds limit);
/// Waits for `stream` under the run's time-out (TSR_DIST_TIMEOUT_S), polling the communicators'
/// asynchronous errors; on time-out or error aborts them (ncclCommAbort) and throws DistError.
void wait(void *stream, const std::string &what);

} // namespace tsr::rt::dist::nccl
