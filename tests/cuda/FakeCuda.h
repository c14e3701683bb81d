// What the fake driver (fake_libcuda.cpp) shows its tests: counters of the calls it received and
// the last launch. The test binary dlopen's the same library Driver opened (RTLD_NOLOAD) and
// reads these through the extern "C" accessors.
#pragma once

#include <cstddef>

extern "C" {

struct FakeCudaCounters {
  int ptxLoads[3];        // cuModuleLoadDataEx that succeeded, per device
  int cubinLoads[3];      // cuModuleLoadData that succeeded, per device
  int memAllocs, memFrees;
  int hostAllocs, hostFrees;
  int setSharedCalls;     // cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)
  int launches;           // cuLaunchKernel that succeeded
  int streamSyncs, streamQueries, ctxSyncs;
  int asyncCopies, memsets;
  int eventsCreated, eventRecords;
  // CUDA graphs: captures begun and ended with a graph, captures invalidated by a call a capture
  // does not allow (cuMemAlloc, a synchronize, a host copy), those calls refused, launches recorded
  // into a capture (not run), graphs instantiated and destroyed, graph launches and the kernels
  // they ran.
  int captureBegins, captureEnds, captureInvalidated, unsafeDuringCapture, capturedLaunches;
  int graphsInstantiated, graphExecsDestroyed, graphLaunches, graphKernels;
  int batchCopies;        // cuMemcpyBatchAsync_v2 calls that succeeded
};

struct FakeCudaLaunch {
  char name[64];
  unsigned grid[3], block[3], shared;
  void *stream;
  int viaExtra;                 // parameters came through `extra` (1) or kernelParams (0)
  size_t paramBytes;            // the entry's parameter size, from its PTX
  unsigned char params[16384];  // the parameter bytes as the kernel would see them (a row step of many operands takes several KiB)
};

/// The last cuTensorMapEncodeTiled the fake accepted (it writes no real map: the map's first
/// bytes are the rank and the dims, so that a test sees which call filled a slot).
struct FakeCudaTensorMap {
  int calls;                    // accepted calls
  int dataType, swizzle, l2Promotion, oobFill;
  unsigned rank;
  void *address;
  unsigned long long dims[5], strides[4];
  unsigned box[5];
};

FakeCudaCounters *fakecuda_counters();
/// FAKECUDA_SIMULATE=1: a launch of a kernel whose parameter block is a KernelArg array
/// (runtime/KernelArg.h) "computes" its first argument: from its data pointer to the end of that
/// allocation, the bytes of a hash of the kernel's name, its scalar arguments and the first 8
/// bytes of every other tensor argument. Not the kernel's arithmetic, but a function of exactly
/// what it reads, so two runs that launch the same kernels on the same data in the same order
/// (a replayed graph and the uncaptured walk) give the same bytes, and a stale input does not.
/// FAKECUDA_SIMULATE=zero: the first argument is zeroed instead (every kernel result 0, so that
/// whole programs run past their value checks: tests/cuda/fake_decode.sh).
FakeCudaLaunch *fakecuda_last_launch();
FakeCudaTensorMap *fakecuda_last_tensor_map();
}
