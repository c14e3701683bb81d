// The C++ side of the `tessera` Python package (docs/python.md): a loaded program whose
// functions Python calls with DLPack tensors (torch.Tensor, NumPy arrays) and Python scalars.
//
// A Program is the pieces `tsr run` builds (exec/bundle/RunBundle.h's OpenedBundle: the checked
// program, a StepBackend, the compiled executor, the host interpreter). Arguments are checked
// against the function's annotations before the call, so a wrong dtype, rank, size or device is
// an exception naming the parameter, what it expects and what it was given, with the parameter's
// place in the source; errors of the running program carry the interpreter's diagnostic text.
// Tensors cross without copies where the memory allows (contiguous; on the CPU 64-byte aligned,
// which PyTorch's and NumPy's large allocations are; on a GPU 256-byte aligned, borrowed in place
// by rt::Tensor::wrapDevice); results go out as DLPack capsules over the runtime's buffers, in
// the GPU's memory for a GPU program. A GPU program queues its work on the stream set_stream
// names (PyTorch's current stream).
#pragma once

#include "exec/bundle/RunBundle.h"

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

namespace tsr::python {

namespace py = pybind11;

/// Counters the tests read (tessera._runtime.stats()): inputs wrapped without a copy, inputs
/// copied (not 64-byte aligned), results handed out.
struct Stats {
  uint64_t wrapped = 0, copied = 0, results = 0;
};
Stats &stats();

class Program {
public:
  Program(std::unique_ptr<bundle::OpenedBundle> parts, std::string device, std::string origin);
  ~Program();

  const std::string &device() const { return device_; }
  const std::string &origin() const { return origin_; }
  /// The main module's functions: name, kind ("graph function", "host function", ...), parameter
  /// names and annotations (as the checker prints them).
  py::list entries() const;
  /// Calls function `name` with positional `args`; returns its result as Python objects (tensors
  /// as DLPack capsules). Throws py::type_error / py::value_error for arguments its annotations
  /// reject, and the exception type tessera.TesseraError for the program's own errors.
  py::object call(const std::string &name, const py::args &args);
  /// vjp(name, *args): (result, pullback handle); pullback(handle, cotangent) gives the
  /// cotangents of every argument.
  py::tuple vjp(const std::string &name, const py::args &args);
  py::object pullback(const py::capsule &handle, const py::object &cotangent);
  /// A GPU program's stream for the calls that follow: a CUstream as an integer (PyTorch's
  /// torch.cuda.current_stream().cuda_stream; 0 the legacy default stream), or None for the
  /// device's own stream.
  void setStream(const py::object &handle);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string device_, origin_;
};

/// Registers the Program class (local to the module: each extension module has its own copy of
/// the code) and stats() on `m`; `error` is tessera.TesseraError, which the program's errors
/// raise (made by tessera._runtime, imported by tessera._compiler).
void bindProgram(py::module_ &m, PyObject *error);
/// tessera._runtime's load(path, device): a bundle, no compiler.
void bindLoad(py::module_ &m);

} // namespace tsr::python
