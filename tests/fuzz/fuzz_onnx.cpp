// libFuzzer target over the ONNX importer (onnx/Import.h): protobuf parsing, the version
// converter, tensors, and every operator's rule, with evaluation at import time. Built with
// -fsanitize=fuzzer,address,undefined (tests/fuzz/fuzz_onnx.sh, seeded with the models of ONNX's
// backend test data); a crash, hang, leak or sanitizer report is a bug, and so is any exception:
// importModelBytes reports every problem as an ImportError.
#include "onnx/Import.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20)) return 0;
  tsr::ir::Module module;
  // A folder with no external data files: a model that refers to one gets an ImportError.
  auto r = tsr::onnxio::importModelBytes(std::string(reinterpret_cast<const char *>(data), size), "/nonexistent/fuzz.onnx", module);
  (void)r;
  return 0;
}
