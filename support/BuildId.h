// The compiler's version and build identity: what a persistent cache entry or a bundle records of
// the compiler that made it.
#pragma once

namespace tsr {

/// "0.1": the language and compiler version (tsrc --version).
const char *compilerVersion();
/// 16 hex digits: a hash of the sources of the code generator and runtime (cmake/BuildId.cmake),
/// so two builds from different sources never share compiled code.
const char *buildId();

} // namespace tsr
