// The geometry of sliding windows over spatial axes, shared by the checker's rules of the
// convolution and pooling builtins (sema/builtins/Windows.cpp) and Graph IR's shape inference of
// the ops conv, conv_transpose, max_pool, avg_pool and their gradients (ir/ShapeInference.cpp),
// so that both give the same extents and the same words for the same mistake.
//
// Layout as ONNX and PyTorch: x [N, C, S1..Sn] (n = 1..3 spatial axes), a conv weight
// [M, C/groups, K1..Kn], a transposed conv weight [C, M/groups, K1..Kn]. `pads` holds n begins
// then n ends (ONNX's order). Extents (ONNX Conv/MaxPool/AveragePool, PyTorch's pooling):
//   out = floor((S + pb + pe - d*(K-1) - 1) / s) + 1
//   ceil_mode: the ceiling instead, less one when the last window would start past the input and
//              its begin padding (PyTorch's rule, ONNX's from opset 19; ONNX 1.12's test data
//              never reaches that case)
//   transposed: out = (S-1)*s + d*(K-1) + 1 - pb - pe
// A spatial extent must be a constant unless the stride is 1 (then `out` is S plus a constant);
// batch and channel extents may be symbolic.
#pragma once

#include "sema/Dim.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tsr::sema {

struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, pads; // pads: begins, then ends
  bool ceilMode = false;
  size_t rank() const { return kernel.size(); }
};

/// The output extent of one spatial axis, or why there is none (a message in the diagnostics'
/// words: "the window (3 with dilation 2) is larger than the padded input (4)").
std::variant<Dim, std::string> windowOut(const Dim &in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, bool ceilMode);
/// The output extent of a transposed convolution along one axis.
std::variant<Dim, std::string> transposedOut(const Dim &in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe);
/// The output spatial extents of a window geometry over the spatial extents `in`; or a message
/// naming the axis that fails. `transposed` for conv_transpose.
std::variant<std::vector<Dim>, std::string> windowOutShape(const std::vector<Dim> &in, const WindowGeometry &g, bool transposed = false);
/// The arguments of the builtins conv, conv_transpose, max_pool and avg_pool as written
/// (PyTorch's torch.nn.functional forms): each list one value for every spatial axis or one
/// per axis; padding also 2n values (ONNX's begins then ends) or the mode "same" / "valid"
/// (convolutions: PyTorch's, the odd remainder at the end); an empty stride means the kernel
/// (pools).
struct WindowArgs {
  std::vector<int64_t> kernel, stride, padding, dilation, outputPadding;
  std::string paddingMode; // "", "same" or "valid"
  bool ceilMode = false;
};
/// The geometry those arguments give for n spatial axes, or why they do not give one.
/// `transposed`: conv_transpose's padding (PyTorch's: the output shrinks by the padding and
/// grows by output_padding, which must be below the stride or the dilation).
std::variant<WindowGeometry, std::string> geometryFromArgs(size_t n, const WindowArgs &a, bool transposed);

enum class WindowOp { Conv, ConvTranspose, Pool };
/// The result dims of a window op on x (and a convolution's weight w): x of rank 3 to 5, w of
/// x's rank, the channels matching per group; or the message of the first mistake. The kernel
/// extents are g.kernel (a convolution's caller fills them from w, constants).
std::variant<std::vector<Dim>, std::string> windowResult(WindowOp op, const std::vector<Dim> &x, const std::vector<Dim> *w,
                                                         const WindowGeometry &g, int64_t groups);
/// Checks the attribute lists' lengths and signs: strides and dilations positive, kernels
/// positive, pads not negative unless `negativePads` (the gradients' internal forms). nullopt if
/// they are well formed.
std::optional<std::string> checkGeometry(const WindowGeometry &g, size_t spatial, bool negativePads);

} // namespace tsr::sema
