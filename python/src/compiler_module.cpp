// tessera._compiler: compile(path, device) checks a .tsr program from source and runs it on the
// host CPU's compiling backend (the LLVM JIT) or a GPU's (codegen/nvptx's PTX, loaded by the
// driver). The module holds its own copy of the Program code
// (src/exports.map keeps the two modules apart).
#include "python/src/Program.h"

#include "exec/CompiledExecutor.h"
#include "exec/cpu/CpuBackend.h"
#include "exec/cuda/NvptxCompiler.h"
#include "frontend/Parser.h"

#include <iostream>
#include <sstream>

namespace py = pybind11;
using namespace tsr;

PYBIND11_MODULE(_compiler, m) {
  m.doc() = "Tessera's compiler: compile a .tsr program for calls from Python (docs/python.md)";
  // The same TesseraError as tessera._runtime's; the Program class is this module's own.
  // (A reference held for the life of the process: never released at exit, after Python is gone.)
  static PyObject *tesseraError = py::object(py::module_::import("tessera._runtime").attr("TesseraError")).release().ptr();
  python::bindProgram(m, tesseraError);
  m.def("compile", [](const std::string &path, const std::string &device, const std::string &stdlib) {
    if (device != "cpu" && device != "cuda" && device.rfind("cuda:", 0) != 0)
      throw py::value_error("device `" + device + "`: expected cpu, cuda or cuda:N");
    // The GPU first: without a usable one (no driver, no such device) nothing is checked.
    std::shared_ptr<exec::StepBackend> backend;
    try {
      backend = device == "cpu" ? exec::cpuBackend() : std::shared_ptr<exec::StepBackend>(exec::cudaBackend(device));
    } catch (const std::invalid_argument &e) {
      throw py::value_error("device `" + device + "`: " + e.what());
    } catch (const std::exception &e) {
      PyErr_SetString(tesseraError, (path + ": device " + (device == "cuda" ? std::string("cuda:0") : device) + ": " + e.what()).c_str());
      throw py::error_already_set();
    }
    auto parts = std::make_unique<bundle::OpenedBundle>();
    parts->sm = std::make_unique<SourceManager>();
    parts->diags = std::make_unique<DiagnosticEngine>(*parts->sm);
    std::string diagnostics;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = runWithLargeStack(size_t(512) << 20, [&]() -> int {
        sema::CheckOptions opts = sema::defaultCheckOptions(stdlib);
        parts->program = sema::checkProgram(*parts->sm, *parts->diags, path, opts);
        std::ostringstream out;
        parts->diags->render(out);
        diagnostics = out.str();
        return parts->diags->hasErrors() || parts->diags->hasInternalError() || !parts->program ? 1 : 0;
      });
    }
    if (rc != 0) {
      while (!diagnostics.empty() && diagnostics.back() == '\n') diagnostics.pop_back();
      PyErr_SetString(tesseraError, diagnostics.c_str());
      throw py::error_already_set();
    }
    parts->backend = backend;
    parts->executor = exec::makeCompiledExecutor(nullptr, parts->backend);
    parts->interpreter = std::make_unique<host::Interpreter>(*parts->program, *parts->executor, std::cout, parts->backend);
    return std::make_shared<python::Program>(std::move(parts), device, path);
  }, py::arg("path"), py::arg("device") = "cpu", py::arg("stdlib") = "");
}
