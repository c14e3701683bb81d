// tessera._runtime's Program (Program.h): argument checks, DLPack in and out, calls through the
// host interpreter.
#include "python/src/Program.h"

#include "exec/cuda/CudaBackend.h"
#include "exec/host/Interpreter.h"
#include "frontend/Parser.h"
#include "runtime/Tensor.h"
#include "sema/Types.h"

#include <dlpack/dlpack.h>

#include <map>
#include <mutex>
#include <optional>
#include <sstream>

namespace tsr::python {

namespace {

using host::Value;
using host::ValueRef;
using K = host::Value::K;

// The exception for errors of the running program (tessera.TesseraError, made in
// runtime_module.cpp).
PyObject *&tesseraError() {
  static PyObject *e = nullptr;
  return e;
}

struct ProgramError {
  std::string text;
};

std::optional<DType> dtypeOf(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
  case kDLFloat:
    if (t.bits == 32) return DType::F32;
    if (t.bits == 64) return DType::F64;
    if (t.bits == 16) return DType::F16;
    break;
  case kDLBfloat:
    if (t.bits == 16) return DType::BF16;
    break;
  case kDLInt:
    if (t.bits == 8) return DType::I8;
    if (t.bits == 32) return DType::I32;
    if (t.bits == 64) return DType::I64;
    break;
  case kDLUInt:
    if (t.bits == 8) return DType::Bool; // torch's and NumPy's bool (DLPack 0.6 has no bool code)
    break;
  case 6: // kDLBool (DLPack 0.8 and later, which newer torch and NumPy export)
    if (t.bits == 8) return DType::Bool;
    break;
  default: break;
  }
  return std::nullopt;
}

DLDataType dlpackOf(DType d) {
  switch (d) {
  case DType::F64: return {kDLFloat, 64, 1};
  case DType::F16: return {kDLFloat, 16, 1};
  case DType::BF16: return {kDLBfloat, 16, 1};
  case DType::I8: return {kDLInt, 8, 1};
  case DType::I32: return {kDLInt, 32, 1};
  case DType::I64: return {kDLInt, 64, 1};
  case DType::Bool: return {kDLUInt, 8, 1};
  default: return {kDLFloat, 32, 1};
  }
}

std::string dlDeviceName(DLDevice d) {
  switch (d.device_type) {
  case kDLCPU: return "cpu";
  case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
  default: return "DLPack device type " + std::to_string(int(d.device_type));
  }
}

std::string shapeText(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// A tensor argument as DLPack hands it over: its managed tensor, released (with the GIL: NumPy's
// deleter touches Python objects) when the last rt::Tensor over it goes.
struct DlpackIn {
  DLManagedTensor *managed = nullptr;
  DLTensor &t() const { return managed->dl_tensor; }
  std::vector<int64_t> shape() const { return std::vector<int64_t>(t().shape, t().shape + t().ndim); }
};

std::shared_ptr<void> ownerOf(DLManagedTensor *m) {
  return std::shared_ptr<void>(m, [](void *p) {
    auto *mt = static_cast<DLManagedTensor *>(p);
    if (!mt->deleter) return;
    if (!Py_IsInitialized()) return; // at exit: the framework's memory goes with the process
    py::gil_scoped_acquire gil;
    mt->deleter(mt);
  });
}

// The object's DLPack capsule (x.__dlpack__(), or a capsule itself), taken over: the capsule is
// renamed "used_dltensor" as the protocol asks, and the caller owns the managed tensor.
std::optional<DlpackIn> takeDlpack(const py::handle &x) {
  py::object cap;
  if (py::hasattr(x, "__dlpack__")) cap = x.attr("__dlpack__")();
  else if (PyCapsule_CheckExact(x.ptr())) cap = py::reinterpret_borrow<py::object>(x);
  else return std::nullopt;
  auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (!m) {
    PyErr_Clear();
    throw py::value_error("a DLPack capsule that was already consumed");
  }
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  return DlpackIn{m};
}

bool rowMajor(const DLTensor &t) {
  if (!t.strides) return true;
  int64_t expect = 1;
  for (int i = t.ndim; i-- > 0;) {
    if (t.shape[i] != 1 && t.strides[i] != expect) return false;
    expect *= t.shape[i];
  }
  return true;
}

// Results: a DLPack capsule over the runtime tensor's buffer (the tensor kept alive by it).
struct DlpackOut {
  rt::Tensor t;
  std::vector<int64_t> shape;
  DLManagedTensor m{};
};

// `gpu`: the device memory of the program's GPU (the tensor is there already: placeResults), and
// its ordinal; null for a CPU program, whose results are host memory.
py::capsule toCapsule(const rt::Tensor &t, rt::DeviceMemory *gpu, int ordinal) {
  auto *o = new DlpackOut{t, t.shape(), {}};
  DLTensor &d = o->m.dl_tensor;
  if (gpu) {
    const rt::Tensor &ct = o->t;
    d.data = reinterpret_cast<void *>(uintptr_t(ct.deviceAddress(*gpu, "a result")));
    d.device = {kDLCUDA, ordinal};
  } else {
    d.data = const_cast<void *>(static_cast<const rt::Tensor &>(o->t).data());
    d.device = {kDLCPU, 0};
  }
  d.ndim = int(o->shape.size());
  d.dtype = dlpackOf(t.dtype());
  d.shape = o->shape.data();
  d.strides = nullptr;
  d.byte_offset = 0;
  o->m.manager_ctx = o;
  o->m.deleter = [](DLManagedTensor *m) { delete static_cast<DlpackOut *>(m->manager_ctx); };
  ++stats().results;
  // A capsule nobody consumed deletes its tensor; a consumed one ("used_dltensor") is the
  // consumer's to delete.
  return py::capsule(&o->m, "dltensor", [](PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }
  });
}

} // namespace

Stats &stats() {
  static Stats s;
  return s;
}

// One call at a time on the GPUs: the device's current stream (exec::setCudaStream) is set for
// the length of a call. Taken without the GIL (a DLPack deleter run inside a call takes the GIL).
std::mutex &gpuCalls() {
  static std::mutex m;
  return m;
}

struct Program::Impl {
  std::unique_ptr<bundle::OpenedBundle> parts;
  std::string device;
  int ordinal = -1;               // cuda:N's N; -1 on the CPU
  rt::DeviceMemory *gpu = nullptr; // the GPU's memory (exec::cudaDeviceMemory)
  void *stream = nullptr;         // the caller's CUstream for the next calls (PyTorch's current)
  bool hasStream = false;         // false: the device's own stream

  host::Interpreter &interp() { return *parts->interpreter; }
  SourceManager &sm() { return *parts->sm; }

  const sema::FunctionInfo &function(const std::string &name) {
    const sema::ModuleInfo &m = *parts->program->main;
    auto g = m.globals.find(name);
    if (g == m.globals.end() || g->second.kind != sema::Symbol::Kind::Function)
      throw py::attribute_error("the program `" + m.path + "` has no function `" + name + "`");
    return *g->second.fn;
  }

  std::string where(const sema::ParamInfo &p) {
    return p.range.valid() && sm().has(p.range.file) ? sm().describe(p.range) + ": " : "";
  }

  // One positional argument as an interpreter value, checked against parameter `p` of `fn`;
  // `bound` collects the sizes the annotations' symbols take, for the later parameters.
  ValueRef argument(const sema::FunctionInfo &fn, const sema::ParamInfo *p, const py::handle &x,
                    std::map<std::string, std::pair<int64_t, std::string>> &bound) {
    const std::string pname = p ? p->name : "?";
    const sema::TypeRef ann = p ? p->annotated : nullptr;
    const std::string head = (p ? where(*p) : std::string()) + "error: `" + fn.name + "`, parameter `" + pname + "`: ";
    if (py::isinstance<py::bool_>(x)) {
      Value v;
      v.k = K::Bool;
      v.b = x.cast<bool>();
      return std::make_shared<Value>(v);
    }
    if (py::isinstance<py::int_>(x)) {
      Value v;
      v.k = K::Int;
      v.i = x.cast<int64_t>();
      return std::make_shared<Value>(v);
    }
    if (py::isinstance<py::float_>(x)) {
      Value v;
      v.k = K::Float;
      v.f = x.cast<double>();
      return std::make_shared<Value>(v);
    }
    if (py::isinstance<py::tuple>(x) || py::isinstance<py::list>(x)) {
      Value v;
      v.k = py::isinstance<py::list>(x) ? K::List : K::Tuple;
      for (const py::handle &e : x) v.items.push_back(argument(fn, p, e, bound));
      return std::make_shared<Value>(v);
    }
    if (py::isinstance<py::dict>(x)) {
      Value v;
      v.k = K::Dict;
      for (auto [k, e] : x.cast<py::dict>()) v.dict.push_back({py::str(k).cast<std::string>(), argument(fn, p, e, bound)});
      return std::make_shared<Value>(v);
    }
    std::optional<DlpackIn> in = takeDlpack(x);
    if (!in) throw py::type_error(head + "expects " + (ann ? sema::typeStr(ann) : "a value") + ", given a " +
                                  py::str(py::type::of(x).attr("__name__")).cast<std::string>());
    std::shared_ptr<void> owner = ownerOf(in->managed);
    const DLTensor &t = in->t();
    const std::vector<int64_t> shape = in->shape();
    const std::string given = "a tensor of shape " + shapeText(shape) + ", dtype ";
    std::optional<DType> dt = dtypeOf(t.dtype);
    const std::string dtName = dt ? std::string(dtypeName(*dt)) : "code " + std::to_string(t.dtype.code) + "/" + std::to_string(t.dtype.bits);
    const bool here = gpu ? t.device.device_type == kDLCUDA && t.device.device_id == ordinal : t.device.device_type == kDLCPU;
    // TSR_TEST_NO_DEVICE_CHECK=1: the check off, for ctest negative_python_device only (the test
    // that a tensor on another device is refused must then fail).
    static const bool unchecked = [] {
      const char *e = std::getenv("TSR_TEST_NO_DEVICE_CHECK");
      return e && std::string(e) == "1";
    }();
    if (!here && !unchecked)
      throw py::value_error(head + "the tensor is on " + dlDeviceName(t.device) + "; this program runs on " + device +
                            " (move it there, or load the program for its device)");
    if (!dt) throw py::type_error(head + "expects " + (ann ? sema::typeStr(ann) : "a tensor") + ", given " + given + dtName + ", which Tessera has no dtype for");
    if (ann && ann->kind == sema::TypeKind::Tensor) {
      const std::string expects = "expects " + sema::typeStr(ann) + ", given " + given + dtName;
      if (ann->dtype != *dt) throw py::type_error(head + expects + ": the dtype differs (" + std::string(dtypeName(ann->dtype)) + " expected)");
      if (ann->rankKnown && ann->dims.size() != shape.size())
        throw py::value_error(head + expects + ": " + std::to_string(ann->dims.size()) + " dimensions expected, " + std::to_string(shape.size()) + " given");
      if (ann->rankKnown)
        for (size_t i = 0; i < shape.size(); ++i) {
          const auto &d = ann->dims[i];
          if (auto c = d.constantValue()) {
            if (*c != shape[i])
              throw py::value_error(head + expects + ": dimension " + std::to_string(i) + " is " + std::to_string(shape[i]) + ", not " + std::to_string(*c));
          } else if (d.isSymbol()) {
            auto [it, fresh] = bound.emplace(d.str(), std::make_pair(shape[i], pname));
            if (!fresh && it->second.first != shape[i])
              throw py::value_error(head + expects + ": `" + d.str() + "` is " + std::to_string(shape[i]) + " here but " +
                                    std::to_string(it->second.first) + " in parameter `" + it->second.second + "`");
          }
        }
    }
    if (!rowMajor(t)) throw py::value_error(head + "the tensor is not contiguous (row-major); pass x.contiguous()");
    char *data = static_cast<char *>(t.data) + t.byte_offset;
    Value v;
    v.k = K::Tensor;
    const int64_t numel = [&] {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      return n;
    }();
    if (gpu) {
      // Device memory is borrowed as it lies, on the caller's stream. Programs take their buffers
      // 256-byte aligned (cuMemAlloc's alignment, and the caching allocator's): the package
      // copies a tensor that starts elsewhere (a view's offset) before it gets here.
      if (numel && reinterpret_cast<uintptr_t>(data) % 256 != 0)
        throw py::value_error(head + "the tensor's memory on " + device + " is not 256-byte aligned; pass x.clone()");
      v.t = rt::Tensor::wrapDevice(*gpu, numel ? reinterpret_cast<uintptr_t>(data) : 0, shape, *dt, owner);
      ++stats().wrapped;
    } else if (numel == 0 || reinterpret_cast<uintptr_t>(data) % 64 == 0) {
      v.t = rt::Tensor::wrapHost(numel ? data : nullptr, shape, *dt, owner);
      ++stats().wrapped;
    } else {
      v.t = rt::Tensor::empty(shape, *dt);
      std::memcpy(v.t.data(), data, v.t.nbytes());
      ++stats().copied;
    }
    return std::make_shared<Value>(v);
  }

  std::vector<ValueRef> arguments(const sema::FunctionInfo &fn, const py::args &args) {
    std::vector<const sema::ParamInfo *> positional;
    for (const sema::ParamInfo &p : fn.params)
      if (!p.compileTime()) positional.push_back(&p);
    if (args.size() > positional.size())
      throw py::type_error("`" + fn.name + "` takes " + std::to_string(positional.size()) + " positional arguments, given " + std::to_string(args.size()));
    std::map<std::string, std::pair<int64_t, std::string>> bound;
    std::vector<ValueRef> out;
    for (size_t i = 0; i < args.size(); ++i) out.push_back(argument(fn, positional[i], args[i], bound));
    return out;
  }

  py::object toPython(const ValueRef &v) {
    switch (v->k) {
    case K::None: return py::none();
    case K::Bool: return py::bool_(v->b);
    case K::Int: return py::int_(v->i);
    case K::Float: return py::float_(v->f);
    case K::Str: return py::str(v->s);
    case K::Tensor: return toCapsule(v->t, gpu, ordinal);
    case K::List: {
      py::list l;
      for (auto &e : v->items) l.append(toPython(e));
      return l;
    }
    case K::Tuple: {
      py::tuple t(v->items.size());
      for (size_t i = 0; i < v->items.size(); ++i) t[i] = toPython(v->items[i]);
      return t;
    }
    case K::Dict: {
      py::dict d;
      for (auto &[k, e] : v->dict) d[py::str(k)] = toPython(e);
      return d;
    }
    default: throw py::type_error("the function returned a " + std::string(v->k == K::Function ? "function" : "value") + " that Python cannot take");
    }
  }

  // A GPU program's results in the device's memory, queued on the call's stream (a result the
  // host computed is copied there), so that toPython hands out device pointers only.
  void placeResults(const ValueRef &v) {
    if (!v) return;
    if (v->k == K::Tensor) static_cast<const rt::Tensor &>(v->t).deviceAddress(*gpu, "a result");
    for (auto &e : v->items) placeResults(e);
    for (auto &[k, e] : v->dict) placeResults(e);
  }

  // Runs fn on a thread with a large stack (the interpreter and the checker recurse as deep as
  // the program nests), without the GIL; the program's errors come back as ProgramError. On a GPU
  // the call's work is queued on the caller's stream (set_stream), one call at a time.
  ValueRef run(const std::function<ValueRef()> &fn) {
    ValueRef result;
    std::optional<ProgramError> failed;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(gpuCalls(), std::defer_lock);
      if (gpu) lock.lock();
      runWithLargeStack(size_t(512) << 20, [&]() -> int {
        try {
          if (gpu) exec::setCudaStream(ordinal, stream, !hasStream);
          result = fn();
          if (gpu) placeResults(result);
        } catch (const host::RuntimeError &e) {
          failed = ProgramError{interp().describe(e)};
        } catch (const std::exception &e) {
          failed = ProgramError{std::string("error: ") + e.what()};
        }
        if (gpu) {
          try {
            exec::setCudaStream(ordinal, nullptr, true);
          } catch (...) {
            // the device's own stream exists already: setting it back does not fail
          }
        }
        return 0;
      });
    }
    if (failed) {
      std::string text = failed->text;
      while (!text.empty() && text.back() == '\n') text.pop_back();
      PyErr_SetString(tesseraError(), text.c_str());
      throw py::error_already_set();
    }
    return result;
  }
};

Program::Program(std::unique_ptr<bundle::OpenedBundle> parts, std::string device, std::string origin)
    : impl_(std::make_unique<Impl>()), device_(std::move(device)), origin_(std::move(origin)) {
  impl_->parts = std::move(parts);
  if (device_ == "cuda") device_ = "cuda:0";
  impl_->device = device_;
  if (device_.rfind("cuda:", 0) == 0) {
    impl_->ordinal = std::atoi(device_.c_str() + 5);
    impl_->gpu = &exec::cudaDeviceMemory(impl_->ordinal);
  }
}

void Program::setStream(const py::object &handle) {
  if (handle.is_none()) {
    impl_->hasStream = false;
    impl_->stream = nullptr;
    return;
  }
  impl_->hasStream = true;
  impl_->stream = reinterpret_cast<void *>(uintptr_t(handle.cast<uint64_t>()));
}

Program::~Program() = default;

py::list Program::entries() const {
  py::list out;
  for (auto &[name, sym] : impl_->parts->program->main->globals) {
    if (sym.kind != sema::Symbol::Kind::Function || !sym.fn) continue;
    py::list params;
    for (const sema::ParamInfo &p : sym.fn->params)
      params.append(py::make_tuple(p.name, p.annotated ? sema::typeStr(p.annotated) : "", p.compileTime()));
    out.append(py::make_tuple(name, std::string(sema::functionKindWord(sym.fn->kind)), params));
  }
  return out;
}

py::object Program::call(const std::string &name, const py::args &args) {
  const sema::FunctionInfo &fn = impl_->function(name);
  std::vector<ValueRef> values = impl_->arguments(fn, args);
  ValueRef callee = impl_->interp().function(name);
  ValueRef r = impl_->run([&] { return impl_->interp().call(callee, values); });
  return impl_->toPython(r);
}

py::tuple Program::vjp(const std::string &name, const py::args &args) {
  const sema::FunctionInfo &fn = impl_->function(name);
  std::vector<ValueRef> values = impl_->arguments(fn, args);
  ValueRef callee = impl_->interp().function(name);
  ValueRef r = impl_->run([&] { return impl_->interp().vjp(callee, values); });
  ValueRef pb = r->items.at(1);
  // The handle keeps the pullback (and through it the primals) until Python drops it.
  auto *held = new ValueRef(pb);
  py::capsule handle(held, "tessera.pullback", [](PyObject *cap) {
    delete static_cast<ValueRef *>(PyCapsule_GetPointer(cap, "tessera.pullback"));
  });
  return py::make_tuple(impl_->toPython(r->items.at(0)), handle);
}

py::object Program::pullback(const py::capsule &handle, const py::object &cotangent) {
  auto *pb = static_cast<ValueRef *>(PyCapsule_GetPointer(handle.ptr(), "tessera.pullback"));
  if (!pb) throw py::error_already_set();
  // The cotangent has the result's structure; it is checked by the pullback's own graph.
  std::map<std::string, std::pair<int64_t, std::string>> bound;
  static const sema::FunctionInfo anon = [] {
    sema::FunctionInfo f;
    f.name = "pullback";
    return f;
  }();
  ValueRef ct = impl_->argument(anon, nullptr, cotangent, bound);
  ValueRef r = impl_->run([&] { return impl_->interp().call(*pb, {ct}); });
  return impl_->toPython(r);
}

void bindProgram(py::module_ &m, PyObject *error) {
  tesseraError() = error;
  py::class_<Program, std::shared_ptr<Program>>(m, "Program", py::module_local())
      .def_property_readonly("device", &Program::device)
      .def_property_readonly("origin", &Program::origin)
      .def("entries", &Program::entries)
      .def("call", &Program::call)
      .def("vjp", &Program::vjp)
      .def("pullback", &Program::pullback)
      .def("set_stream", &Program::setStream);
  m.def("stats", [] {
    const Stats &s = stats();
    py::dict d;
    d["wrapped"] = s.wrapped;
    d["copied"] = s.copied;
    d["results"] = s.results;
    return d;
  });
}

void bindLoad(py::module_ &m) {
  m.def("load", [](const std::string &path, const std::string &device) {
    std::unique_ptr<bundle::OpenedBundle> parts;
    try {
      parts = bundle::openBundle(path, device, {});
    } catch (const std::invalid_argument &e) {
      throw py::value_error(e.what());
    } catch (const std::exception &e) {
      PyErr_SetString(tesseraError(), e.what());
      throw py::error_already_set();
    }
    return std::make_shared<Program>(std::move(parts), device, path);
  }, py::arg("path"), py::arg("device") = "cpu");
}

} // namespace tsr::python
