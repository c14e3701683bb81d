// The CPU tensor of the host interpreter and of compiled CPU code: a dtype, a shape and a
// contiguous row-major buffer.
//
// Storage: one allocation aligned to 64 bytes (a cache line, and the widest vector register), its
// size rounded up to a multiple of 64 bytes and the padding zeroed, so that vector loops may read
// (never write) up to the end of the last 64-byte block. The buffer is shared: copying a Tensor
// copies a handle, as assigning an array does in NumPy; `clone()` copies the data. Elements are
// stored as:
//   bool      uint8_t, 0 or 1          i8 / i32 / i64   int8_t / int32_t / int64_t
//   fp8_*     uint8_t bit pattern       bf16 / f16       uint16_t bit pattern
//   f32, tf32 float (tf32 values have the low 13 significand bits zero)    f64   double
// in the host's byte order (Tessera runs on little-endian hosts; the file formats assume it).
//
// Device residency: the storage may also (or only) live in one device's memory (Device.h). A
// tensor made on a device (`emptyOn`) or written there by a kernel (`markDeviceWritten`) has no
// valid host copy until host code reads it: `data()` then copies it back once, waiting for the
// device's queued work. `deviceAddress` copies a host tensor to the device once and keeps that
// copy while the host side is not written. A non-const `data()` counts as a host write (the
// device copy is dropped), so keep read-only access const. Residency is per storage: tensors that
// share storage (copies, reshape) share it. Not thread-safe (as the interpreter that uses it).
#pragma once

#include "runtime/Device.h"
#include "runtime/Numeric.h"
#include "support/DType.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace tsr::rt {

/// Whether C++ type T is the storage type of dtype t (table in the file comment; `bool` is also
/// accepted for bool tensors, since it is one byte holding 0 or 1).
template <class T> constexpr bool isStorageType(DType t) {
  switch (t) {
  case DType::Bool: return std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>;
  case DType::I8: return std::is_same_v<T, int8_t>;
  case DType::I32: return std::is_same_v<T, int32_t>;
  case DType::I64: return std::is_same_v<T, int64_t>;
  case DType::F8E4M3:
  case DType::F8E5M2: return std::is_same_v<T, uint8_t>;
  case DType::BF16:
  case DType::F16: return std::is_same_v<T, uint16_t>;
  case DType::TF32:
  case DType::F32: return std::is_same_v<T, float>;
  case DType::F64: return std::is_same_v<T, double>;
  }
  return false;
}

class Tensor {
public:
  /// A 0-d f32 tensor holding 0.0.
  Tensor();

  /// Uninitialized elements. Throws std::invalid_argument for a negative dimension and
  /// std::length_error when the element count or byte size overflows int64.
  static Tensor empty(std::vector<int64_t> shape, DType dtype);
  static Tensor zeros(std::vector<int64_t> shape, DType dtype);
  /// Every element `value`, rounded into the dtype by the rules of Numeric.h.
  static Tensor full(std::vector<int64_t> shape, DType dtype, double value);
  /// A 0-d tensor.
  static Tensor scalar(double value, DType dtype = DType::F32);
  /// Elements from `values` in row-major order, each rounded into the dtype (nearest-even).
  /// Throws std::invalid_argument when values.size() differs from the element count.
  static Tensor fromF64(std::vector<int64_t> shape, DType dtype, std::span<const double> values);
  static Tensor fromI64(std::vector<int64_t> shape, DType dtype, std::span<const int64_t> values);
  /// A tensor over contiguous row-major host memory that the caller owns, without a copy (the
  /// Python package's DLPack inputs): `owner` is released with the last handle. `data` must be
  /// 64-byte aligned (compiled code may read, never write, to the end of the 64-byte block that
  /// holds the last element, which then stays on the last element's page); std::invalid_argument
  /// otherwise.
  static Tensor wrapHost(void *data, std::vector<int64_t> shape, DType dtype, std::shared_ptr<void> owner);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t ndim() const { return int64_t(shape_.size()); }
  int64_t numel() const { return numel_; }
  /// Bytes per element (dtypeSize).
  size_t itemsize() const { return dtypeSize(dtype_); }
  size_t nbytes() const { return size_t(numel_) * itemsize(); }
  /// Row-major strides in elements (the last is 1).
  std::vector<int64_t> strides() const;

  /// The elements in host memory (copied back from the device first when only the device holds
  /// them). The non-const overloads also drop the device copy: the caller may write.
  void *data() { return hostForWrite(); }
  const void *data() const { return host(); }
  /// Typed pointer; throws std::invalid_argument unless T is the dtype's storage type.
  template <class T> T *data() {
    checkStorage(isStorageType<T>(dtype_), sizeof(T));
    return reinterpret_cast<T *>(hostForWrite());
  }
  template <class T> const T *data() const {
    checkStorage(isStorageType<T>(dtype_), sizeof(T));
    return reinterpret_cast<const T *>(host());
  }

  /// Uninitialized elements in `dev`'s memory only (no host copy until one is read).
  static Tensor emptyOn(DeviceMemory &dev, std::vector<int64_t> shape, DType dtype, const char *forWhat);
  /// A tensor over contiguous row-major memory of `dev` that the caller owns (the Python package's
  /// DLPack inputs on a GPU), without a copy: the device holds the only copy, at `ptr` (0 only for
  /// an empty tensor). The memory is borrowed: never handed to dev.release; `owner` is released
  /// (the DLPack deleter) with the last handle, or when the storage stops using the device copy (a
  /// host write, a move to another device), after which the tensor has storage of its own.
  static Tensor wrapDevice(DeviceMemory &dev, uint64_t ptr, std::vector<int64_t> shape, DType dtype, std::shared_ptr<void> owner);
  /// The storage's address on `dev`, copying the host elements there first if the device has no
  /// current copy (from another device: through the host). 0 for an empty tensor.
  uint64_t deviceAddress(DeviceMemory &dev, const char *forWhat) const;
  /// The device copy on `dev` (deviceAddress) was written by device work: the host copy is stale.
  void markDeviceWritten(DeviceMemory &dev) const;
  /// The device whose memory holds a current copy, or null.
  DeviceMemory *device() const;
  /// Whether host memory holds a current copy (false: data() will copy from the device).
  bool onHost() const;

  /// Row-major flat index of a multi-index; throws std::out_of_range naming the axis when an
  /// index is outside [0, extent) or the rank differs.
  int64_t flatIndex(std::span<const int64_t> index) const;

  /// Element i (flat, row-major) as f64: exact for every dtype except i64 beyond 2^53.
  /// Throws std::out_of_range for i outside [0, numel).
  double toF64(int64_t i) const;
  /// Rounds v into the dtype (Numeric.h: nearest-even, saturating float -> int, NaN -> 0).
  /// Stochastic rounding needs a random word: it throws std::invalid_argument here (use storeF64).
  void fromF64(int64_t i, double v, Rounding r = {});
  /// Element i as an integer (floats truncate toward zero and saturate).
  int64_t toI64(int64_t i) const;
  /// Integers wrap into narrower integer dtypes and round once into floats.
  void fromI64(int64_t i, int64_t v);

  /// A copy with its own buffer.
  Tensor clone() const;
  /// The same buffer with another shape of equal element count; one dimension may be -1 (inferred).
  /// Throws std::invalid_argument otherwise.
  Tensor reshape(std::vector<int64_t> shape) const;
  /// A new tensor of dtype `to` (a clone when it is the same dtype), rounded by `r`; stochastic
  /// rounding needs random words: see Random.h's stochasticCast.
  Tensor cast(DType to, Rounding r = {}) const;
  bool sharesStorageWith(const Tensor &o) const { return st_ == o.st_; }

  struct Storage;

private:
  Tensor(DType dtype, std::vector<int64_t> shape, int64_t numel, std::shared_ptr<Storage> st)
      : dtype_(dtype), shape_(std::move(shape)), numel_(numel), st_(std::move(st)) {}
  void checkStorage(bool ok, size_t size) const;
  void checkIndex(int64_t i) const;
  const std::byte *host() const;
  std::byte *hostForWrite();

  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 1;
  std::shared_ptr<Storage> st_;
};

/// Number of elements of a shape; throws as Tensor::empty does.
int64_t shapeNumel(std::span<const int64_t> shape);
/// Python's tuple spelling: "()", "(3,)", "(2, 3)".
std::string formatShape(std::span<const int64_t> shape);

/// Equal shapes and dtypes.
bool sameShapeAndDtype(const Tensor &a, const Tensor &b);
/// Equal shapes, dtypes and bytes (so NaNs with equal bits are equal, and 0.0 differs from -0.0).
bool identical(const Tensor &a, const Tensor &b);

/// Options of `format`, with NumPy's defaults (numpy.set_printoptions).
struct FormatOptions {
  int64_t threshold = 1000; ///< summarise tensors with more elements than this
  int64_t edgeItems = 3;    ///< elements kept at each end of a summarised axis
  int64_t lineWidth = 75;   ///< wrap lines longer than this
  int precision = 8;        ///< at most this many digits after the point
};

/// What `print(x)` shows for a tensor, modelled on NumPy's repr:
///   tensor([[1.0, 2.0], [3.0, 4.0]], dtype=f32)
///   tensor(3, dtype=i32)                      (0-d)
///   tensor([], shape=(0, 3), dtype=f32)       (empty; the shape is shown when ndim > 1)
/// - The whole tensor is on one line when that fits in `lineWidth`; otherwise NumPy's layout:
///   each row of the last axis on its own line, one more blank line per higher axis, rows wrapped
///   at `lineWidth`, continuation lines indented under the first element.
/// - Summarisation: a tensor with more than `threshold` elements shows only the first and last
///   `edgeItems` entries of every axis longer than 2*edgeItems, with `...` between.
/// - Floats: every shown element gets the same number of digits after the point, the fewest (at
///   least 1, at most `precision`) with which each element reads back as itself in its own dtype
///   (so a bf16 0.1 prints as 0.1, not 0.10009765625). Scientific notation (`1.5e-05`) is used
///   for all elements when the largest finite magnitude is >= 1e8, the smallest nonzero one is
///   < 1e-4, or their ratio is > 1000 (NumPy's rule). Non-finite values are nan, inf, -inf.
/// - Integers in decimal; bools as True/False. Elements are right-aligned to a common width.
std::string format(const Tensor &t, const FormatOptions &opts = {});

} // namespace tsr::rt
