"""Tessera from Python: call a bundle's or a .tsr program's functions on torch.Tensors and NumPy
arrays (docs/python.md).

    import tessera
    m = tessera.load("model.bundle")        # runtime only: no compiler in the process
    m = tessera.compile("model.tsr")        # checks the source; compiles with the host JIT
    y = m.layer_norm(x, w, b)               # torch in, torch out (NumPy in, NumPy out)
    f = tessera.torch.function(m.layer_norm)  # a torch.autograd.Function: backward is Tessera's VJP

Tensors cross through DLPack without copies: arguments are read where they lie when they are
contiguous, on the CPU and 64-byte aligned (an unaligned one is copied); results are the
runtime's buffers, which the returned tensors own. A non-contiguous argument is copied with a
warning. Arguments are checked against the function's annotations first: a wrong dtype is a
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

__all__ = ["load", "compile", "Program", "Entry", "TesseraError", "stats"]


def stats():
    """Counters: inputs wrapped without a copy, inputs copied, results handed out."""
    return _runtime.stats()


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
    """x as the runtime takes it: contiguous (copied with a warning otherwise); scalars and
    containers as they are."""
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

    def __call__(self, *args):
        return _wrap(self.program._native.call(self.name, *self._args(args)), _wants_torch(args))

    def vjp(self, *args):
        """(result, pullback): pullback(cotangent) gives the cotangents of the arguments, a tuple
        (Tessera's vjp: the pullback's graph recomputes the function)."""
        as_torch = _wants_torch(args)
        out, handle = self.program._native.vjp(self.name, *self._args(args))
        native = self.program._native
        entry = self.name

        def pullback(cotangent):
            ct = _prepare(cotangent, "cotangent", entry)
            grads = native.pullback(handle, ct)
            grads = grads if isinstance(grads, tuple) else (grads,)
            return _wrap(grads, as_torch)
        return _wrap(out, as_torch), pullback

    def __repr__(self):
        params = ", ".join(f"{p}: {self.annotations[p]}" if self.annotations[p] else p for p in self.params)
        return f"<tessera {self.kind} {self.name}({params}) of {self.program.origin}>"


class Program:
    """A loaded program: its functions are attributes (Entry objects)."""

    def __init__(self, native):
        self._native = native
        self.origin = native.origin
        self.device = native.device
        self._entries = {name: Entry(self, name, kind, params) for name, kind, params in native.entries()}

    @property
    def entries(self):
        return dict(self._entries)

    def __getattr__(self, name):
        entries = self.__dict__.get("_entries", {})
        if name in entries:
            return entries[name]
        raise AttributeError(f"the program {self.__dict__.get('origin', '?')} has no function `{name}` "
                             f"(its functions: {', '.join(sorted(entries)) or 'none'})")

    def __repr__(self):
        return f"<tessera.Program {self.origin} on {self.device}: {', '.join(sorted(self._entries))}>"


def load(path, device="cpu"):
    """A bundle (tsrc model.tsr -o model.bundle), with no compiler: every program it runs must be
    in the bundle (make it with --trace and a run that calls what Python will call)."""
    return Program(_runtime.load(os.fspath(path), device))


def compile(path, device="cpu"):
    """A .tsr program checked from source; its graphs compile with the host CPU's JIT."""
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        from . import _compiler
    finally:
        sys.setdlopenflags(flags)
    stdlib = os.environ.get("TESSERA_STDLIB") or os.path.join(_HERE, "stdlib")
    return Program(_compiler.compile(os.fspath(path), device, stdlib))


def __getattr__(name):
    # tessera.torch imports torch: only when asked for.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(name)
