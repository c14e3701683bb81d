// The ABI between compiled tile programs and whoever launches them (docs/bundle.md, "Code ABI"):
// one KernelArg per program parameter, in order. The host CPU's entries (codegen/cpu, a bundle's
// shared object) and the PTX kernels (codegen/nvptx: one `.param .b8 args[P*152]`) take the same
// array, so it lives here, below both the compilers and the runners.
#pragma once

#include <cstdint>

namespace tsr::rt {

constexpr int kMaxRank = 8;

/// One argument of a compiled tile program.
/// - Tensor parameters: `data` points at element 0 of the view (possibly inside a larger
///   buffer); shape and strides (in elements) for the parameter's rank. A stride may be 0 (a
///   broadcast axis) or negative (a reversed axis). Storage as rt::Tensor's (runtime/Tensor.h).
/// - Scalar parameters: integers and bools in `i`, floats in `f` (converted to the parameter's
///   dtype by the program: floats rounded to nearest-even, integers wrapped, bools `i != 0`).
/// 152 bytes: data at 0, shape[8] at 8, strides[8] at 72, i at 136, f at 144.
struct KernelArg {
  void *data = nullptr;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int64_t i = 0;
  double f = 0;
};
static_assert(sizeof(KernelArg) == 152, "KernelArg is the compiled code's ABI (docs/bundle.md)");

} // namespace tsr::rt
