// tsr_gpu_info [FILE.ptx...]: whether this machine can run Tessera's GPU code, and if not why
// (runtime/cuda/CudaDriver.h: libcuda is opened at run time, never linked). With PTX files from
// `tsrc --emit=ptx`, also loads each kernel they list (`// kernel NAME:` lines) on device 0,
// through the module cache a GPU executor uses (runtime/cuda/ModuleCache.h).
// Exit status: 0 usable (and every kernel loaded), 1 a kernel failed to load, 2 no usable GPU.
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/ModuleCache.h"

#include <cstdio>
#include <fstream>
#include <sstream>

int main(int argc, char **argv) {
  using namespace tsr::rt::cuda;
  auto &d = Driver::get();
  if (!d.available()) {
    std::printf("no GPU: %s\n", d.why().c_str());
    return 2;
  }
  std::printf("CUDA driver %d.%d (%s)\n", d.version() / 1000, d.version() % 1000 / 10, d.libraryName().c_str());
  for (const auto &dev : d.devices()) {
    std::printf("%s: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %zu KiB, shared memory per block %zu KiB (%zu KiB opt-in), "
                "%d threads per block",
                dev.spec().c_str(), dev.name.c_str(), dev.ccMajor, dev.ccMinor, dev.smCount,
                double(dev.totalBytes) / (1u << 30), dev.l2Bytes / 1024, dev.sharedPerBlock / 1024,
                dev.sharedPerBlockOptin / 1024, dev.maxThreadsPerBlock);
    try {
      MemInfo m = Context::get(dev.ordinal).memInfo();
      std::printf(", %.1f GiB free\n", double(m.freeBytes) / (1u << 30));
    } catch (const GpuError &e) {
      std::printf("\n  cannot open a context: %s\n", e.what());
    }
  }
  int rc = 0;
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a]);
    if (!in) {
      std::printf("%s: cannot read the file\n", argv[a]);
      rc = 1;
      continue;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string ptx = ss.str();
    std::istringstream lines(ptx);
    for (std::string l; std::getline(lines, l);) {
      if (l.rfind("// kernel ", 0) != 0) continue;
      std::string name = l.substr(10, l.find(':') - 10);
      try {
        ModuleCache::process().function(0, ptx, name);
        std::printf("%s: %s loaded\n", argv[a], name.c_str());
      } catch (const GpuError &e) {
        std::printf("%s: %s: %s\n", argv[a], name.c_str(), e.what());
        rc = 1;
      }
    }
  }
  return rc;
}
