// exec/cuda on a real GPU with memory and a stream that someone else owns, as the Python package
// hands over PyTorch's (docs/python.md): rt::Tensor::wrapDevice over a caller's cuMemAlloc block,
// exec::setCudaStream onto a caller's stream, a program launched by the CudaBackend reading the
// borrowed memory in place. Hand-written PTX (the KernelArg ABI), no code generator.
//
//   cuda_gpu_external          PASS/FAIL lines; exit 0 all passed, 1 a check failed, 77 no usable GPU
//   cuda_gpu_external --fake   the same against tests/cuda/fake_libcuda (TSR_LIBCUDA), which runs
//                              no kernel: the values are not checked, the stream of each launch
//                              is (ctest cuda_fake_external, without a GPU)
//
// Ordering: the caller's stream spins ~50 ms, then copies 7s into the borrowed input; the
// backend's launch, queued after both on that stream, must read the 7s. Its negative control: the
// same on the backend's own stream reads the input before the copy (the zeros).
#include "exec/cuda/CudaBackend.h"
#include "runtime/Tensor.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/DeviceAllocator.h"
#include "runtime/cuda/ModuleCache.h"
#include "tests/cuda/FakeCuda.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace tsr;
namespace cuda = tsr::rt::cuda;

namespace {

int failures = 0;
bool fake = false; // --fake: the fake driver, which records launches and runs none

// The stream of the fake driver's last launch.
void *fakeLastLaunchStream() {
  void *h = dlopen(cuda::Driver::get().libraryName().c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto fn = h ? reinterpret_cast<FakeCudaLaunch *(*)()>(dlsym(h, "fakecuda_last_launch")) : nullptr;
  return fn ? fn()->stream : reinterpret_cast<void *>(-1);
}

void check(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// out[i] = 2 * in[i] + 1 (f32) for i < n; parameters: the KernelArg array {in, out, n} (152 bytes
// each: data at +0, i at +136). spin(cycles): busy-waits `cycles` clock ticks.
const char *kPtx = R"(.version 7.8
.target sm_80
.address_size 64
.visible .entry twice_plus_one(.param .align 8 .b8 args[456])
{
  .reg .pred %p;
  .reg .b32 %r<6>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [args];
  ld.param.u64 %rd2, [args+152];
  ld.param.u64 %rd3, [args+440];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mul.lo.u64 %rd5, %rd4, 4;
  add.s64 %rd6, %rd1, %rd5;
  add.s64 %rd7, %rd2, %rd5;
  ld.global.f32 %f1, [%rd6];
  fma.rn.f32 %f2, %f1, 0f40000000, 0f3F800000;
  st.global.f32 [%rd7], %f2;
DONE:
  ret;
}
.visible .entry spin(.param .u64 cycles)
{
  .reg .pred %p;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [cycles];
  mov.u64 %rd2, %clock64;
LOOP:
  mov.u64 %rd3, %clock64;
  sub.u64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p, %rd4, %rd1;
  @%p bra LOOP;
  ret;
}
)";

void run() {
  const int n = 1000;
  cuda::Context &ctx = cuda::Context::get(0);
  std::printf("device cuda:0: %s\n", ctx.info().name.c_str());
  exec::PtxSource source;
  source.measureShared = [](const tile::Function &) -> int64_t { return 0; };
  std::shared_ptr<exec::CudaBackend> backend = exec::cudaBackend("cuda:0", source);
  auto prog = backend->load({kPtx, {}, "twice_plus_one", 128, 0, {}});
  cuda::Function &spin = cuda::ModuleCache::process().function(0, kPtx, "spin");
  rt::DeviceMemory &mem = exec::cudaDeviceMemory(0);
  cuda::DeviceAllocator &alloc = cuda::DeviceAllocator::forDevice(0);

  // The caller's: a stream and a block of memory that Tessera's allocator never saw.
  cuda::Stream caller(ctx);
  const cuda::DevicePtr in = ctx.tryAlloc(n * sizeof(float));
  const std::vector<float> zeros(n, 0.0f), sevens(n, 7.0f);

  for (bool onCaller : {true, false}) {
    caller.copyToDevice(in, zeros.data(), n * sizeof(float));
    caller.synchronize();
    int released = 0;
    const uint64_t allocationsBefore = alloc.stats().driverAllocations + alloc.stats().cacheHits;
    {
      std::shared_ptr<void> owner(nullptr, [&](void *) { ++released; });
      rt::Tensor x = rt::Tensor::wrapDevice(mem, in, {n}, DType::F32, owner);
      owner.reset();
      exec::setCudaStream(0, caller.handle(), !onCaller);
      check(alloc.stats().driverAllocations + alloc.stats().cacheHits == allocationsBefore,
            "wrapDevice allocates nothing (the caller's block is used in place)");
      // The result's block first: a driver allocation (cuMemAlloc) may wait for the device,
      // which would order the launch after the copy on any stream.
      rt::Tensor y = backend->allocate({n}, DType::F32, "y");
      // The caller's stream: ~50 ms of spinning, then the copy of 7s into the input.
      void *params[] = {nullptr};
      uint64_t cycles = 100'000'000;
      params[0] = &cycles;
      cuda::LaunchDims one;
      caller.launch(spin, one, params, {"spin", "gpu_external.cpp"});
      caller.copyToDevice(in, sevens.data(), n * sizeof(float));
      std::vector<rt::KernelArg> args(3);
      args[0].data = backend->address(x, false, "x");
      args[1].data = backend->address(y, true, "y");
      args[2].i = n;
      check(reinterpret_cast<uintptr_t>(args[0].data) == in, "the program reads the borrowed address");
      backend->launch(*prog, args, {(n + 127) / 128, 1, 1}, {"twice_plus_one", "gpu_external.cpp"});
      if (fake) {
        if (onCaller) check(fakeLastLaunchStream() == caller.handle(), "the launch went on the caller's stream");
        else check(fakeLastLaunchStream() != caller.handle(), "negative control: the own stream's launch is not on the caller's");
      }
      const float got = float(y.toF64(n - 1)); // the download waits on the current stream
      caller.synchronize();
      if (fake)
        ; // the fake runs no kernel
      else if (onCaller)
        check(got == 15.0f, "on the caller's stream the launch runs after the caller's copy (15 = 2*7+1; got " +
                                std::to_string(got) + ")");
      else
        check(got == 1.0f, "negative control: on the backend's own stream it does not wait for the caller's (1 = 2*0+1; got " +
                               std::to_string(got) + ")");
      exec::setCudaStream(0, nullptr, true);
    }
    check(released == 1, "the borrowed block's owner is released with the last tensor over it");
  }
  // The block is still the caller's: it reads back, and the caller frees it.
  std::vector<float> back(n);
  caller.copyToHost(back.data(), in, n * sizeof(float));
  caller.synchronize();
  check(fake || back[0] == 7.0f, "the caller's block is intact after the tensors over it are gone");
  ctx.free(in);
}

} // namespace

int main(int argc, char **argv) {
  fake = argc > 1 && std::string(argv[1]) == "--fake";
  const cuda::Driver &d = cuda::Driver::get();
  if (!d.available()) {
    std::printf("SKIPPED: no GPU: %s\n", d.why().c_str());
    return 77;
  }
  try {
    run();
  } catch (const std::exception &e) {
    check(false, std::string("unexpected error: ") + e.what());
  }
  std::printf("%s: %d failed\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
