// tsr_gpu_info [FILE.ptx...]: whether this machine can run Tessera's GPU code, and if not why
// (runtime/cuda/CudaDriver.h: libcuda is opened at run time, never linked). With PTX files from
// `tsrc --emit=ptx`, also loads each kernel they list (`// kernel NAME:` lines) on device 0.
// Exit status: 0 usable (and every kernel loaded), 1 a kernel failed to load, 2 no usable GPU.
#include "runtime/cuda/CudaDriver.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

int main(int argc, char **argv) {
  auto &d = tsr::rt::cuda::Driver::get();
  if (!d.available()) {
    std::printf("no GPU: %s\n", d.why().c_str());
    return 2;
  }
  std::printf("CUDA driver %d.%d\n", d.version() / 1000, d.version() % 1000 / 10);
  for (const auto &dev : d.devices())
    std::printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", dev.ordinal, dev.name.c_str(), dev.ccMajor, dev.ccMinor,
                dev.smCount, double(dev.totalBytes) / (1u << 30));
  int rc = 0;
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a]);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string ptx = ss.str();
    std::istringstream lines(ptx);
    for (std::string l; std::getline(lines, l);) {
      if (l.rfind("// kernel ", 0) != 0) continue;
      std::string name = l.substr(10, l.find(':') - 10);
      try {
        d.loadFunction(ptx, name);
        std::printf("%s: %s loaded\n", argv[a], name.c_str());
      } catch (const std::runtime_error &e) {
        std::printf("%s: %s: %s\n", argv[a], name.c_str(), e.what());
        rc = 1;
      }
    }
  }
  return rc;
}
