// libFuzzer target over the bundle reader (runtime/bundle/Bundle.h): container, checksums,
// versions, the manifest's validation, and the device checks. Built with
// -fsanitize=fuzzer,address,undefined (tests/fuzz/fuzz_bundle.sh); a crash, hang, leak or
// sanitizer report is a bug, and so is any exception other than BundleError.
//
// The first input byte chooses whether checksums are verified: with them on, almost every
// mutation stops at a CRC, so half of the inputs are read with them off (the test-only
// ParseOptions a negative control uses), which lets the search reach the table and manifest
// checks behind them. The reader must be memory-safe either way.
#include "runtime/bundle/Bundle.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace rb = tsr::rt::bundle;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  rb::ParseOptions opts;
  opts.verifyChecksums = (data[0] & 1) != 0;
  try {
    const rb::Bundle b = rb::Bundle::parse(std::string(reinterpret_cast<const char *>(data + 1), size - 1), opts);
    // What a runner reads next: every module's text, every program's text and lookup, and the
    // device checks.
    size_t total = 0;
    for (const rb::ModuleEntry &m : b.modules) total += b.moduleText(m).size();
    for (const rb::Program &p : b.programs) {
      total += b.programText(p).size();
      if (b.find(p.target, p.key) == nullptr) __builtin_trap(); // every program is found by its key
    }
    (void)total;
    for (const rb::Device &d : {rb::Device{false, "cpu", 0, 0}, rb::Device{true, "cuda:0", 8, 0}, rb::Device{true, "cuda:0", 9, 0}}) {
      try {
        rb::checkRunnable(b, d);
      } catch (const rb::BundleError &) {
      }
    }
  } catch (const rb::BundleError &) {
  }
  return 0;
}
