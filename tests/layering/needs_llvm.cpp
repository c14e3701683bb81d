// The negative control of ctest runtime_only (CMakeLists.txt, TSR_RUNTIME_ONLY_BREAK): a runtime
// source that needs LLVM, which a runtime-only build must fail to compile.
#include "llvm/IR/LLVMContext.h"

namespace tsr::rt {
void needsLlvm() { llvm::LLVMContext c; }
} // namespace tsr::rt
