"""Tessera from Python: call a bundle's or a .tsr program's functions on torch.Tensors and NumPy
arrays (docs/python.md).

    import tessera
    m = tessera.load("model.bundle")        # runtime only: no compiler in the process
    m = tessera.compile("model.tsr")        # checks the source; compiles with the host JIT or for the GPU
    y = m.layer_norm(x, w, b)               # torch in, torch out (NumPy in, NumPy out), on x's device
    f = tessera.torch.function(m.layer_norm)  # a torch.autograd.Function: backward is Tessera's VJP

A program runs on the device its tensors are on (`device=None`, the default: one runtime per
device, opened at the first call there), or on the one `device="cpu" | "cuda" | "cuda:N"` names.
Tensors cross through DLPack without copies: arguments are read where they lie when they are
contiguous and aligned (64 bytes on the CPU, 256 on a GPU; an unaligned one is copied); results
are the runtime's buffers, which the returned tensors own. On a GPU the work is queued on
PyTorch's current stream (torch.cuda.current_stream()), as a PyTorch op's would be. A
non-contiguous argument is copied with a warning. Arguments are checked against the function's annotations first: a wrong dtype is a
TypeError, a wrong rank, size or device a ValueError, each naming the function, the parameter, the
annotation and what was given, with the parameter's place in the source. Errors of the running
program raise TesseraError with Tessera's diagnostic text.
"""
import os
import sys
import warnings

# The modules are loaded with their symbols global: a bundle's CPU code and the JIT's code call
# the runtime's helpers (runtime/CodegenHelpers.h) by name, from the process.
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from . import _runtime
finally:
    sys.setdlopenflags(_flags)

TesseraError = _runtime.TesseraError
_HERE = os.path.dirname(os.path.abspath(__file__))
# GPU arguments copied here because they did not start on a 256-byte boundary (stats()).
_copied_here = 0

__all__ = ["load", "compile", "Program", "Entry", "TesseraError", "stats"]


def stats():
    """Counters: inputs wrapped without a copy, inputs copied, results handed out."""
    s = dict(_runtime.stats())
    s["copied"] += _copied_here
    return s


class _Capsule:
    """A DLPack capsule as NumPy's from_dlpack takes it (an object with __dlpack__)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _prepare(x, name, entry):
    """x as the runtime takes it: contiguous (copied with a warning otherwise), a GPU tensor on a
    256-byte boundary (copied otherwise: a view that starts inside its storage); scalars and
    containers as they are."""
    global _copied_here
    if isinstance(x, (list, tuple)):
        return type(x)(_prepare(v, name, entry) for v in x)
    if isinstance(x, dict):
        return {k: _prepare(v, name, entry) for k, v in x.items()}
    if _is_torch(x):
        if x.requires_grad:
            x = x.detach()
        if not x.is_contiguous():
            warnings.warn(f"tessera: `{entry}`, parameter `{name}`: the tensor is not contiguous; copied",
                          stacklevel=4)
            x = x.contiguous()
        if x.is_cuda and x.numel() and x.data_ptr() % 256:
            x = x.clone()
            _copied_here += 1
        return x
    if type(x).__module__ == "numpy" and hasattr(x, "flags"):
        if not x.flags["C_CONTIGUOUS"]:
            import numpy as np
            warnings.warn(f"tessera: `{entry}`, parameter `{name}`: the array is not contiguous; copied",
                          stacklevel=4)
            x = np.ascontiguousarray(x)
        return x
    return x


def _wrap(result, as_torch):
    """The runtime's result (DLPack capsules in tuples, lists, dicts) as torch or NumPy objects."""
    if isinstance(result, tuple):
        return tuple(_wrap(r, as_torch) for r in result)
    if isinstance(result, list):
        return [_wrap(r, as_torch) for r in result]
    if isinstance(result, dict):
        return {k: _wrap(v, as_torch) for k, v in result.items()}
    if type(result).__name__ == "PyCapsule":
        if as_torch:
            import torch.utils.dlpack
            return torch.utils.dlpack.from_dlpack(result)
        import numpy as np
        return np.from_dlpack(_Capsule(result))
    return result


def _device_of(args):
    """The device of the first tensor among args (pytrees searched), as Tessera names it
    ("cpu", "cuda:0"), or None when there is no tensor."""
    for a in args:
        if isinstance(a, (list, tuple)):
            d = _device_of(a)
        elif isinstance(a, dict):
            d = _device_of(list(a.values()))
        elif _is_torch(a) and hasattr(a, "device"):
            d = "cpu" if a.device.type == "cpu" else f"{a.device.type}:{a.device.index or 0}"
        elif hasattr(a, "__dlpack_device__"):
            kind, index = a.__dlpack_device__()
            d = "cpu" if kind == 1 else f"cuda:{index}" if kind == 2 else f"DLPack device type {kind}"
        else:
            d = None
        if d is not None:
            return d
    return None


def _normalize(device):
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device `{device}`: expected cpu, cuda or cuda:N")
    return "cuda:0" if device == "cuda" else device


def _current_stream(device):
    """PyTorch's current CUDA stream of `device` as a CUstream integer, or None (the device's own
    stream) where torch is not in the process or has no CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():  # a torch without CUDA has no stream
        return None
    return torch.cuda.current_stream(torch.device(device)).cuda_stream


def _on_stream(x, stream):
    """x with its CUDA torch tensors as DLPack capsules made for `stream` (the call's): torch then
    orders nothing itself. Without the stream, torch's __dlpack__ makes the legacy default stream
    wait for the current one, which ties every blocking stream to it."""
    if isinstance(x, (list, tuple)):
        return type(x)(_on_stream(v, stream) for v in x)
    if isinstance(x, dict):
        return {k: _on_stream(v, stream) for k, v in x.items()}
    if stream is not None and _is_torch(x) and getattr(x, "is_cuda", False):
        # DLPack's stream numbers: 1 is CUDA's legacy default stream (0 is not allowed).
        return x.__dlpack__(stream=stream or 1)
    return x


def _wants_torch(args):
    for a in args:
        if _is_torch(a):
            return True
        if isinstance(a, (list, tuple)) and _wants_torch(a):
            return True
        if isinstance(a, dict) and _wants_torch(list(a.values())):
            return True
    return False


class Entry:
    """One function of a Program: call it with tensors and scalars, as host code would."""

    def __init__(self, program, name, kind, params):
        self.program, self.name, self.kind = program, name, kind
        self.params = [p for p, _, compile_time in params if not compile_time]
        self.annotations = {p: a for p, a, _ in params}

    def _args(self, args):
        names = self.params + ["?"] * max(0, len(args) - len(self.params))
        return [_prepare(a, n, self.name) for a, n in zip(args, names)]

    def _native(self, args):
        """The runtime for args' device (the program's own device, when it has one), with its
        stream set to PyTorch's current one on a GPU; whether results come back as torch."""
        native = self.program._native_for(self.program.device or _device_of(args) or self.program._first_device())
        stream = None
        if native.device.startswith("cuda"):
            stream = _current_stream(native.device)
            native.set_stream(stream)
        return native, stream, stream is not None or native.device.startswith("cuda") or _wants_torch(args)

    def __call__(self, *args):
        prepared = self._args(args)
        native, stream, as_torch = self._native(prepared)
        return _wrap(native.call(self.name, *_on_stream(prepared, stream)), as_torch)

    def vjp(self, *args):
        """(result, pullback): pullback(cotangent) gives the cotangents of the arguments, a tuple
        (Tessera's vjp: the pullback's graph recomputes the function)."""
        prepared = self._args(args)
        native, stream, as_torch = self._native(prepared)
        out, handle = native.vjp(self.name, *_on_stream(prepared, stream))
        entry = self.name

        def pullback(cotangent):
            ct = _prepare(cotangent, "cotangent", entry)
            if native.device.startswith("cuda"):
                s = _current_stream(native.device)
                native.set_stream(s)
                ct = _on_stream(ct, s)
            grads = native.pullback(handle, ct)
            grads = grads if isinstance(grads, tuple) else (grads,)
            return _wrap(grads, as_torch)
        return _wrap(out, as_torch), pullback

    def __repr__(self):
        params = ", ".join(f"{p}: {self.annotations[p]}" if self.annotations[p] else p for p in self.params)
        return f"<tessera {self.kind} {self.name}({params}) of {self.program.origin}>"


class Program:
    """A loaded program: its functions are attributes (Entry objects). `device` is the device it
    runs on, or None: each call runs on its tensors' device (a runtime per device, opened at the
    first call there: a bundle without code for that device raises TesseraError naming it)."""

    def __init__(self, opener, origin, device):
        self._opener = opener
        self._natives = {}
        self.origin = origin
        self.device = None if device is None else _normalize(device)
        self._entries = None
        # Opened now, so that a bundle that cannot be opened or a program that does not check
        # raises here: on its device, or (device=None) where _all_entries opens one.
        if self.device is not None:
            self._native_for(self.device)
        else:
            self._all_entries()

    def _native_for(self, device):
        device = _normalize(device)
        native = self._natives.get(device)
        if native is None:
            native = self._natives[device] = self._opener(device)
        if self._entries is None:
            self._entries = {name: Entry(self, name, kind, params) for name, kind, params in native.entries()}
        return native

    def _first_device(self):
        """Where a call without tensors runs: a runtime already open, else the CPU."""
        return next(iter(self._natives), "cpu")

    def _all_entries(self):
        if self._entries is None:
            # The functions are the same on every device: the CPU's runtime lists them, or the
            # first GPU's for a bundle with GPU code only.
            try:
                self._native_for("cpu")
            except TesseraError:
                try:
                    self._native_for("cuda:0")
                except TesseraError:
                    pass
                if self._entries is None:
                    raise
        return self._entries

    @property
    def entries(self):
        return dict(self._all_entries())

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        entries = self._all_entries()
        if name in entries:
            return entries[name]
        raise AttributeError(f"the program {self.__dict__.get('origin', '?')} has no function `{name}` "
                             f"(its functions: {', '.join(sorted(entries)) or 'none'})")

    def __repr__(self):
        where = self.device or "the device of its tensors"
        return f"<tessera.Program {self.origin} on {where}: {', '.join(sorted(self._all_entries()))}>"


def load(path, device=None):
    """A bundle (tsrc model.tsr -o model.bundle), with no compiler: every program it runs must be
    in the bundle (make it with --trace and a run that calls what Python will call, and
    --target cuda for a GPU). device: "cpu", "cuda", "cuda:N", or None for the tensors' device."""
    path = os.fspath(path)
    return Program(lambda d: _runtime.load(path, d), path, device)


def compile(path, device=None):
    """A .tsr program checked from source; its graphs compile with the host CPU's JIT, or to PTX
    for a GPU. device: "cpu", "cuda", "cuda:N", or None for the tensors' device."""
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        from . import _compiler
    finally:
        sys.setdlopenflags(flags)
    stdlib = os.environ.get("TESSERA_STDLIB") or os.path.join(_HERE, "stdlib")
    path = os.fspath(path)
    return Program(lambda d: _compiler.compile(path, d, stdlib), path, device)


def __getattr__(name):
    # tessera.torch imports torch: only when asked for.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(name)
