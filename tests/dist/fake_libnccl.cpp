// A stand-in for libnccl.so.2 (TSR_LIBNCCL points runtime/dist/Nccl.cpp at it), with the fake
// libcuda of tests/cuda, so that the NCCL path's watchdog is tested without GPUs: the collectives
// are accepted and do nothing (their results are whatever the buffers held), communicators are
// tokens. TSR_FAKE_NCCL_ASYNC_ERROR=N: ncclCommGetAsyncError reports N (6: ncclRemoteError) once
// a collective was queued. Every ncclCommAbort is logged on standard error ("fake nccl: abort").
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace {
int queued = 0;
int token = 0;
}

extern "C" {
struct ncclUniqueId { char internal[128]; };
int ncclGetUniqueId(ncclUniqueId *id) { std::memset(id->internal, 7, sizeof id->internal); return 0; }
int ncclCommInitRank(void **comm, int, ncclUniqueId, int) { *comm = &token; return 0; }
// TSR_FAKE_TRACE=DIR: every all-reduce appended to DIR/trace.PID (with the fake libcuda's launches).
int ncclAllReduce(const void *, void *, size_t count, int, int, void *, void *) {
  ++queued;
  if (const char *dir = std::getenv("TSR_FAKE_TRACE")) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/trace.%d", dir, int(getpid()));
    if (FILE *t = std::fopen(path, "a")) {
      std::fprintf(t, "all_reduce %zu\n", count);
      std::fclose(t);
    }
  }
  return 0;
}
int ncclAllGather(const void *, void *, size_t, int, void *, void *) { ++queued; return 0; }
int ncclReduceScatter(const void *, void *, size_t, int, int, void *, void *) { ++queued; return 0; }
int ncclBroadcast(const void *, void *, size_t, int, int, void *, void *) { ++queued; return 0; }
int ncclSend(const void *, size_t, int, int, void *, void *) { ++queued; return 0; }
int ncclRecv(void *, size_t, int, int, void *, void *) { return 0; }
int ncclGroupStart() { return 0; }
int ncclGroupEnd() { return 0; }
int ncclCommGetAsyncError(void *, int *err) {
  const char *e = std::getenv("TSR_FAKE_NCCL_ASYNC_ERROR");
  *err = (e && queued > 0) ? std::atoi(e) : 0;
  return 0;
}
int ncclCommAbort(void *) { std::fprintf(stderr, "fake nccl: abort\n"); return 0; }
int ncclCommDestroy(void *) { return 0; }
const char *ncclGetErrorString(int r) { return r == 6 ? "remote process exited or there was a network error" : "fake error"; }
}
