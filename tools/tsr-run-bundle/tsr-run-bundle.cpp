// tsr-run-bundle: runs a bundle (docs/bundle.md) with no compiler in the process — no LLVM, no
// codegen. It is `tsr run FILE.bundle` (exec/bundle/RunBundle.h) without the compilers: the host
// program is re-checked from the bundle's modules (frontend and sema) and interpreted (exec/host),
// graphs lower to Tile IR (ir/), and every program runs from the bundle's code — the CPU's shared
// object on the runtime's launcher, or the PTX and cubins on a GPU through runtime/cuda. A
// program the bundle lacks is an error naming it (exit 3, as code for the device that is
// missing); make such bundles with
// `tsrc FILE.tsr -o FILE.bundle --trace "FLAGS"`.
//
//   tsr-run-bundle FILE.bundle [--entry NAME] [--device auto|cpu|cuda[:N]] [MAIN FLAGS...]
//
// Exit codes as `tsr run`: 0 success, 1 an error of the program, 2 usage, 3 a refused bundle,
// an unusable device or a program not in the bundle, 70 internal error.
#include "exec/bundle/RunBundle.h"
#include "runtime/Profile.h"
#include "support/RunModes.h"

#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  const char *usage = "usage: tsr-run-bundle FILE.bundle [--entry NAME] [--device auto|cpu|cuda[:N]] [--debug] [--profile FILE] [MAIN FLAGS...]\n";
  if (argc < 2) {
    std::cerr << "tsr-run-bundle: " << usage;
    return 2;
  }
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::cout << usage << "Runs a bundle's main from the bundle's own code, compiling nothing (docs/bundle.md).\n";
    return 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::cout << "tsr-run-bundle 0.1 (Tessera)\n";
    return 0;
  }
  // --debug, --deterministic: the modes of support/RunModes.h (a bundle made with tsrc --debug
  // holds the checked kernels that --debug looks up).
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (i > 1 && std::strcmp(argv[i], "--debug") == 0) tsr::runModes().debug = true;
    else if (i > 1 && std::strcmp(argv[i], "--deterministic") == 0) tsr::runModes().deterministic = true;
    else args.push_back(argv[i]);
  }
  // --profile FILE: a Chrome/Perfetto trace of the run (runtime/Profile.h, docs/profiling.md).
  std::unique_ptr<tsr::rt::profile::Session> profile;
  try {
    const std::string path = tsr::rt::profile::takeProfileFlag(args, 1);
    if (!path.empty()) profile = std::make_unique<tsr::rt::profile::Session>(path);
  } catch (const std::invalid_argument &e) {
    std::cerr << "tsr-run-bundle: " << e.what() << "\n";
    return 2;
  } catch (const std::exception &e) {
    std::cerr << "tsr-run-bundle: --profile " << e.what() << "\n";
    return 1;
  }
  tsr::rt::profile::enableNvtxUnderNsight();
  int rc = tsr::bundle::runBundleCommand(args, tsr::bundle::Compilers{}, "tsr-run-bundle");
  std::string error;
  if (profile && !profile->finish(error)) {
    std::cerr << "tsr-run-bundle: --profile " << error << "\n";
    if (rc == 0) rc = 1;
  }
  return rc;
}
