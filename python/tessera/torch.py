"""tessera.torch.function(entry): a Tessera function as a torch.autograd.Function.

    ln = tessera.torch.function(m.layer_norm)
    y = ln(x, w, b)          # forward: the function, with its VJP's pullback kept
    y.sum().backward()       # backward: the pullback (Tessera's vjp), gradients for every tensor

The forward runs Tessera's vjp(f, *args), which returns the result and a pullback; the backward
calls the pullback with the result's cotangent and hands PyTorch one gradient per argument
(None for non-tensor arguments). Results may be a tensor or a tuple of tensors.
"""
import torch

__all__ = ["function"]


def function(entry):
    """Wraps `entry` (a tessera Entry: program.NAME) as a callable running a torch.autograd.Function."""

    class TesseraFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            out, pullback = entry.vjp(*args)
            ctx.pullback = pullback
            ctx.tensor_args = [isinstance(a, torch.Tensor) for a in args]
            ctx.single = not isinstance(out, tuple)
            return out

        @staticmethod
        def backward(ctx, *grads):
            cot = grads[0] if ctx.single else tuple(grads)
            cot = cot.contiguous() if isinstance(cot, torch.Tensor) else tuple(g.contiguous() for g in cot)
            gs = ctx.pullback(cot)
            return tuple(g if is_t else None for g, is_t in zip(gs, ctx.tensor_args))

    TesseraFunction.__name__ = f"tessera_{entry.name}"

    def call(*args):
        return TesseraFunction.apply(*args)
    call.__name__ = entry.name
    call.__doc__ = f"{entry!r} as a torch.autograd.Function"
    return call
