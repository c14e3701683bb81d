// Convolution and pooling on host arrays of doubles: the reference evaluator's implementation of
// Graph IR's conv, conv_transpose, max_pool, max_pool_grad, avg_pool and avg_pool_grad
// (ir/Ops.def), which the compiled CPU executor also runs, as library steps (docs/ir.md).
//
// conv is im2col and a matrix product per example and group (the columns of one example and
// group only, at most 64 MiB); a weight gradient's conv (long kernel rows) is dot products along
// the kernel rows; conv_transpose scatters, per input channel and kernel tap, one strided row
// whose bounds are computed once (no per-element bounds test). Tasks (output planes) run on the
// host's cores. Sums accumulate in f64 and the caller rounds once into the result dtype. Semantics are ONNX's operator definitions (Conv,
// ConvTranspose, MaxPool, AveragePool, onnx/defs/nn/defs.cc) and PyTorch's
// (torch.nn.functional.conv*d, max_pool*d, avg_pool*d): max_pool takes each window's first
// maximum in row-major window order (a NaN wins), positions in the padding take no part; avg_pool
// divides by the window's elements inside the input, or with count_include_pad inside the input
// and its pads (PyTorch's divisor, which also limits a ceil_mode window to the padded extent).
#pragma once

#include <cstdint>
#include <vector>

namespace tsr::ir::eval {

/// Shapes in elements: x [N, C, S..] with 1 to 3 spatial axes; pads begins then ends (may be
/// negative: a crop, as autodiff's transposes need).
struct WindowSpec {
  std::vector<int64_t> x, out;                           // the input's and the output's full shapes
  std::vector<int64_t> kernel, strides, dilations, pads; // per spatial axis (pads 2 per axis)
};

/// y [N, M, O..] = conv(x, w [M, C/g, K..]); y is zeroed first.
void conv(const WindowSpec &s, int64_t groups, const double *x, const double *w, double *y);
/// y [N, M, O..] = conv_transpose(x [N, C, S..], w [C, M/g, K..]): each input element scattered.
void convTranspose(const WindowSpec &s, int64_t groups, const double *x, const double *w, double *y);
/// y = each window's maximum of x, or with `t` the element of t at that maximum's position.
/// A window with no element inside the input gives -inf (0 with t).
void maxPool(const WindowSpec &s, const double *x, const double *t, double *y);
/// gx (x's shape) = g added at each window's first maximum of x.
void maxPoolGrad(const WindowSpec &s, const double *x, const double *g, double *gx);
/// y = window means (s.dilations all 1).
void avgPool(const WindowSpec &s, bool countIncludePad, const double *x, double *y);
/// gx (s.x) = avg_pool's transpose applied to g (s.out).
void avgPoolGrad(const WindowSpec &s, bool countIncludePad, const double *g, double *gx);

} // namespace tsr::ir::eval
