#include "support/BuildId.h"

#include "tsr_build_id.h" // generated in the build folder (cmake/BuildId.cmake)

namespace tsr {

const char *compilerVersion() { return "0.1"; }
const char *buildId() { return TSR_BUILD_ID; }

} // namespace tsr
