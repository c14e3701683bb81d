// tessera._runtime: bundles run without a compiler (no LLVM in this module: ctest
// python_layering checks its libraries). Program.h says what it binds.
#include "python/src/Program.h"

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "Tessera's runtime: load a bundle and call its functions (docs/python.md)";
  static pybind11::exception<std::runtime_error> error(m, "TesseraError", PyExc_RuntimeError);
  tsr::python::bindProgram(m, error.ptr());
  tsr::python::bindLoad(m);
}
