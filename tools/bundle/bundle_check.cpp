// tsr-bundle-check: reads a bundle with runtime/bundle's reader alone (no LLVM, no IR), and prints
// what it holds, or why it is refused.
//
//   tsr-bundle-check FILE [--device cpu|cuda:sm_NN]
//
// With --device, also says whether the bundle has code for that device (rt::bundle::checkRunnable;
// cuda:sm_86 stands for a GPU of compute capability 8.6). Exit codes: 0 the bundle is valid (and
// runs on the device), 3 refused (the message on stderr: `FILE: <refusal>: <details>`), 1 the
// file cannot be read, 2 usage.
#include "runtime/bundle/Bundle.h"

#include <cstdlib>
#include <iostream>
#include <string>

namespace rb = tsr::rt::bundle;

int main(int argc, char **argv) {
  std::string file, device;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (file.empty() && a.rfind("--", 0) != 0) file = a;
    else {
      std::cerr << "usage: tsr-bundle-check FILE [--device cpu|cuda:sm_NN]\n";
      return 2;
    }
  }
  if (file.empty()) {
    std::cerr << "usage: tsr-bundle-check FILE [--device cpu|cuda:sm_NN]\n";
    return 2;
  }
  try {
    const rb::Bundle b = rb::Bundle::open(file);
    std::cout << file << ": format " << b.formatMajor << "." << b.formatMinor << ", made by " << b.compiler << ", code ABI "
              << rb::kCodeAbi << "\n";
    std::cout << "sources: " << b.modules.size() << " modules, main " << b.mainPath << ", sha256 " << b.sourceSha256 << "\n";
    for (const rb::ModuleEntry &m : b.modules)
      std::cout << "  module " << m.name << ": " << m.root << " " << m.path << " (" << b.moduleText(m).size() << " bytes)\n";
    std::cout << "graph IR: sha256 " << b.irSha256 << "\n";
    size_t cpu = 0, cuda = 0;
    for (const rb::Program &p : b.programs) (p.target == "cpu" ? cpu : cuda)++;
    if (b.cpu && b.cpu->section)
      std::cout << "target cpu: " << b.cpu->triple << ", " << b.cpu->cpu << ", " << b.cpu->features.size() << " ISA features, "
                << cpu << " programs\n";
    else if (b.cpu)
      std::cout << "target cpu: no programs\n";
    for (const rb::CudaArch &a : b.cuda)
      std::cout << "target cuda " << a.arch << ": PTX" << (a.cubin ? " and cubins" : "") << ", " << cuda << " programs\n";
    for (size_t i = 0; i < b.sections.size(); ++i) {
      const rb::Section &s = b.sections[i];
      std::cout << "  section " << i << " " << rb::sectionKindName(s.kind) << " `" << s.tag << "` at " << s.offset << ", " << s.size
                << " bytes\n";
    }
    if (!device.empty()) {
      rb::Device d;
      d.name = device;
      if (device.rfind("cuda:sm_", 0) == 0) {
        const int sm = std::atoi(device.c_str() + 8);
        d.cuda = true;
        d.name = "cuda:0";
        d.ccMajor = sm / 10;
        d.ccMinor = sm % 10;
      } else if (device != "cpu") {
        std::cerr << "tsr-bundle-check: --device " << device << ": expected cpu or cuda:sm_NN\n";
        return 2;
      }
      rb::checkRunnable(b, d);
      std::cout << "runs on " << device << "\n";
    }
    return 0;
  } catch (const rb::BundleError &e) {
    std::cerr << file << ": " << e.what() << "\n";
    return 3;
  } catch (const std::exception &e) {
    std::cerr << "tsr-bundle-check: " << e.what() << "\n";
    return 1;
  }
}
