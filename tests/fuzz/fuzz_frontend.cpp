// libFuzzer target over the whole front end: layout, parser, AST builder and checker.
// Built with -fsanitize=fuzzer,address,undefined (tools/fuzz.sh); any crash, hang, leak or
// sanitizer report is a bug. Input is treated as the text of a module; imports resolve against
// the real stdlib, so the checker's paths through other modules are exercised too.
#include "frontend/Parser.h"
#include "sema/Program.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 16)) return 0; // larger inputs only slow the search down
  std::string text(reinterpret_cast<const char *>(data), size);
  tsr::SourceManager sm;
  tsr::DiagnosticEngine diags(sm);
  size_t bad = 0;
  if (!tsr::validateUtf8(text, &bad)) return 0; // rejected before parsing, as tsrc does
  tsr::FileId id = sm.addFile("fuzz.tsr", std::move(text));
  tsr::sema::CheckOptions opts;
  opts.stdlibDir = TSR_SOURCE_STDLIB;
  auto program = tsr::sema::checkLoadedFile(sm, diags, id, opts);
  (void)program;
  if (diags.hasInternalError()) __builtin_trap(); // an internal error is a bug, like a crash
  return 0;
}
