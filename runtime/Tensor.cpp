#include "runtime/Tensor.h"

#include "runtime/Profile.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace tsr::rt {
namespace {

constexpr size_t kAlign = 64;

// Freed host buffers of kPooledBytes and more, kept by capacity for the next buffer of that
// capacity. A fresh large buffer is a new mapping whose pages fault in at first touch (a 16 MiB
// output: about 4,000 faults, each zeroing a page), which dominated the compiled executor's
// elementwise and row steps; a reused one is mapped already. Programs allocate the same sizes
// step after step and call after call, so equal sizes are what recur. At most kPoolLimit bytes
// are kept idle; beyond that a freed buffer goes back to the system.
constexpr size_t kPooledBytes = size_t(64) << 10;
constexpr size_t kPoolLimit = size_t(1) << 30;

class BufferPool {
public:
  static BufferPool &instance() {
    static BufferPool *p = new BufferPool(); // never destroyed: tensors may outlive static destruction
    return *p;
  }
  std::byte *take(size_t cap) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = free_.find(cap);
    if (it == free_.end() || it->second.empty()) return nullptr;
    std::byte *p = it->second.back();
    it->second.pop_back();
    idle_ -= cap;
    return p;
  }
  // Keeps `p` for reuse, or returns false when the pool is full.
  bool give(std::byte *p, size_t cap) {
    std::lock_guard<std::mutex> lk(mu_);
    if (idle_ + cap > kPoolLimit) return false;
    free_[cap].push_back(p);
    idle_ += cap;
    return true;
  }

private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<std::byte *>> free_;
  size_t idle_ = 0;
};

// Bytes of host tensor storage allocated while a profile records and not freed yet: the
// profile's counter "tensor memory (host)" (runtime/Profile.h).
std::atomic<int64_t> profiledBytes{0};

void countProfiled(int64_t delta) {
  const int64_t now = profiledBytes.fetch_add(delta) + delta;
  profile::counter("host", "tensor memory (host)", profile::nowNs(), double(now));
}

// Buffers of kHugeBytes and more are aligned to 2 MiB and advised as transparent huge pages
// (madvise(MADV_HUGEPAGE): hosts whose THP setting is `madvise`, the common default, give a
// large mapping 4 KiB pages otherwise). A 4096^2 f32 operand spans 16,384 4 KiB pages, more
// than the second-level TLB holds, and a GEMM tile's rows lie a page or more apart; in 2 MiB
// pages it spans 32. TSR_HUGE_PAGES=0 turns this off (for measuring).
constexpr size_t kHugeBytes = size_t(4) << 20, kHugeAlign = size_t(2) << 20;

bool hugePages() {
  static const bool on = [] {
    const char *e = std::getenv("TSR_HUGE_PAGES");
    return !(e && e[0] == '0');
  }();
  return on;
}

size_t alignFor(size_t cap) { return cap >= kHugeBytes && hugePages() ? kHugeAlign : kAlign; }

std::shared_ptr<std::byte> allocate(size_t nbytes) {
  // Round up to whole 64-byte blocks (at least one) and zero the padding: see Tensor.h.
  const size_t cap = std::max<size_t>(kAlign, (nbytes + kAlign - 1) / kAlign * kAlign);
  const bool pooled = cap >= kPooledBytes;
  const size_t align = alignFor(cap);
  std::byte *p = pooled ? BufferPool::instance().take(cap) : nullptr;
  if (!p) {
    p = static_cast<std::byte *>(::operator new(cap, std::align_val_t{align}));
#ifdef MADV_HUGEPAGE
    if (align == kHugeAlign) ::madvise(p, cap / kHugeAlign * kHugeAlign, MADV_HUGEPAGE);
#endif
  }
  std::memset(p + nbytes, 0, cap - nbytes);
  // Only buffers made while a profile records are counted (and uncounted when freed).
  const bool counted = profile::recording();
  if (counted) countProfiled(int64_t(cap));
  if (!pooled)
    return std::shared_ptr<std::byte>(p, [cap, counted](std::byte *q) {
      if (counted) countProfiled(-int64_t(cap));
      ::operator delete(q, std::align_val_t{kAlign});
    });
  return std::shared_ptr<std::byte>(p, [cap, counted, align](std::byte *q) {
    if (counted) countProfiled(-int64_t(cap));
    if (!BufferPool::instance().give(q, cap)) ::operator delete(q, std::align_val_t{align});
  });
}

} // namespace

// One buffer's bytes, on the host, on one device, or both (Tensor.h: device residency).
struct Tensor::Storage {
  size_t bytes = 0;
  std::shared_ptr<std::byte> host; // null until the host needs it, for device-made tensors
  bool hostValid = true;
  DeviceMemory *dev = nullptr;
  uint64_t devPtr = 0;
  bool devValid = false;
  bool isBorrowed = false;        // devPtr is the caller's memory, not dev's block (wrapDevice)
  std::shared_ptr<void> borrowed; // its owner, released when the storage stops using it

  explicit Storage(size_t n) : bytes(n), host(allocate(n)) {}
  Storage(size_t n, std::shared_ptr<std::byte> external) : bytes(n), host(std::move(external)) {}
  Storage(DeviceMemory &d, size_t n, const char *forWhat) : bytes(n), hostValid(false), dev(&d), devValid(true) {
    if (n) devPtr = d.allocate(n, forWhat);
  }
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;
  ~Storage() { dropDevice(); }

  void dropDevice() noexcept {
    if (isBorrowed) borrowed.reset(); // the caller's memory: released by its owner, not by dev
    else if (dev && devPtr) dev->release(devPtr);
    isBorrowed = false;
    dev = nullptr;
    devPtr = 0;
    devValid = false;
  }
  void syncHost() {
    if (hostValid) return;
    if (!host) host = allocate(bytes);
    if (bytes) dev->toHost(host.get(), devPtr, bytes);
    hostValid = true;
  }
};

const std::byte *Tensor::host() const {
  st_->syncHost();
  return st_->host.get();
}

std::byte *Tensor::hostForWrite() {
  st_->syncHost();
  if (st_->dev) st_->dropDevice();
  return st_->host.get();
}

Tensor Tensor::emptyOn(DeviceMemory &dev, std::vector<int64_t> shape, DType dtype, const char *forWhat) {
  const int64_t n = shapeNumel(shape);
  const size_t item = dtypeSize(dtype);
  if (uint64_t(n) > (uint64_t(std::numeric_limits<int64_t>::max()) - kAlign) / item)
    throw std::length_error("tensor shape " + formatShape(shape) + " is too large");
  return Tensor(dtype, std::move(shape), n, std::make_shared<Storage>(dev, size_t(n) * item, forWhat));
}

Tensor Tensor::wrapDevice(DeviceMemory &dev, uint64_t ptr, std::vector<int64_t> shape, DType dtype, std::shared_ptr<void> owner) {
  const int64_t n = shapeNumel(shape);
  if (n > 0 && ptr == 0) throw std::invalid_argument("Tensor::wrapDevice: a null device pointer for " + formatShape(shape));
  auto st = std::make_shared<Storage>(size_t(n) * dtypeSize(dtype), std::shared_ptr<std::byte>());
  st->hostValid = false;
  st->dev = &dev;
  st->devPtr = ptr;
  st->devValid = true;
  st->isBorrowed = true;
  st->borrowed = std::move(owner);
  return Tensor(dtype, std::move(shape), n, std::move(st));
}

uint64_t Tensor::deviceAddress(DeviceMemory &dev, const char *forWhat) const {
  Storage &s = *st_;
  if (s.dev == &dev && s.devValid) return s.devPtr;
  s.syncHost(); // a copy on another device comes through the host
  if (s.dev != &dev) {
    s.dropDevice();
    if (s.bytes) s.devPtr = dev.allocate(s.bytes, forWhat);
    s.dev = &dev;
  }
  if (s.bytes) dev.toDevice(s.devPtr, s.host.get(), s.bytes);
  s.devValid = true;
  return s.devPtr;
}

void Tensor::markDeviceWritten(DeviceMemory &dev) const {
  if (st_->dev != &dev || !st_->devValid)
    throw std::logic_error("Tensor::markDeviceWritten: the tensor has no copy on " + dev.name());
  st_->hostValid = false;
}

DeviceMemory *Tensor::device() const { return st_->devValid ? st_->dev : nullptr; }
bool Tensor::onHost() const { return st_->hostValid; }

int64_t shapeNumel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("tensor shape " + formatShape(shape) + " has a negative dimension");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw std::length_error("tensor shape " + formatShape(shape) + " has too many elements");
    n *= d;
  }
  return n;
}

std::string formatShape(std::span<const int64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

Tensor::Tensor() : numel_(1), st_(std::make_shared<Storage>(4)) { std::memset(st_->host.get(), 0, 4); }

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype) {
  const int64_t n = shapeNumel(shape);
  const size_t item = dtypeSize(dtype);
  if (uint64_t(n) > (uint64_t(std::numeric_limits<int64_t>::max()) - kAlign) / item)
    throw std::length_error("tensor shape " + formatShape(shape) + " is too large");
  return Tensor(dtype, std::move(shape), n, std::make_shared<Storage>(size_t(n) * item));
}

Tensor Tensor::wrapHost(void *data, std::vector<int64_t> shape, DType dtype, std::shared_ptr<void> owner) {
  const int64_t n = shapeNumel(shape);
  if (n > 0 && reinterpret_cast<uintptr_t>(data) % kAlign != 0)
    throw std::invalid_argument("Tensor::wrapHost: the data is not " + std::to_string(kAlign) + "-byte aligned");
  std::shared_ptr<std::byte> host(std::move(owner), static_cast<std::byte *>(data));
  return Tensor(dtype, std::move(shape), n, std::make_shared<Storage>(size_t(n) * dtypeSize(dtype), std::move(host)));
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  std::memset(t.data(), 0, t.nbytes()); // all-zero bits are 0 (or false) in every dtype
  return t;
}

Tensor Tensor::full(std::vector<int64_t> shape, DType dtype, double value) {
  Tensor t = empty(std::move(shape), dtype);
  const size_t item = t.itemsize();
  std::byte one[8];
  storeF64(dtype, one, value);
  auto *p = static_cast<std::byte *>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(p + size_t(i) * item, one, item);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, dtype, value); }

Tensor Tensor::fromF64(std::vector<int64_t> shape, DType dtype, std::span<const double> values) {
  Tensor t = empty(std::move(shape), dtype);
  if (int64_t(values.size()) != t.numel())
    throw std::invalid_argument("tensor of shape " + formatShape(t.shape()) + " needs " + std::to_string(t.numel()) +
                                " values, got " + std::to_string(values.size()));
  convert(values.data(), DType::F64, t.data(), dtype, t.numel());
  return t;
}

Tensor Tensor::fromI64(std::vector<int64_t> shape, DType dtype, std::span<const int64_t> values) {
  Tensor t = empty(std::move(shape), dtype);
  if (int64_t(values.size()) != t.numel())
    throw std::invalid_argument("tensor of shape " + formatShape(t.shape()) + " needs " + std::to_string(t.numel()) +
                                " values, got " + std::to_string(values.size()));
  convert(values.data(), DType::I64, t.data(), dtype, t.numel());
  return t;
}

std::vector<int64_t> Tensor::strides() const {
  std::vector<int64_t> s(shape_.size());
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape_[i];
  }
  return s;
}

void Tensor::checkStorage(bool ok, size_t size) const {
  if (!ok)
    throw std::invalid_argument("tensor of dtype " + std::string(dtypeName(dtype_)) + " accessed as a " +
                                std::to_string(size) + "-byte element of another type");
}

void Tensor::checkIndex(int64_t i) const {
  if (i < 0 || i >= numel_)
    throw std::out_of_range("element " + std::to_string(i) + " of a tensor with " + std::to_string(numel_) + " elements");
}

int64_t Tensor::flatIndex(std::span<const int64_t> index) const {
  if (index.size() != shape_.size())
    throw std::out_of_range("an index of rank " + std::to_string(index.size()) + " into a tensor of rank " +
                            std::to_string(shape_.size()));
  int64_t flat = 0;
  for (size_t a = 0; a < index.size(); ++a) {
    if (index[a] < 0 || index[a] >= shape_[a])
      throw std::out_of_range("index " + std::to_string(index[a]) + " is out of bounds for axis " + std::to_string(a) +
                              " with size " + std::to_string(shape_[a]));
    flat = flat * shape_[a] + index[a];
  }
  return flat;
}

double Tensor::toF64(int64_t i) const {
  checkIndex(i);
  return loadF64(dtype_, static_cast<const std::byte *>(data()) + size_t(i) * itemsize());
}

void Tensor::fromF64(int64_t i, double v, Rounding r) {
  checkIndex(i);
  if (r.stochastic) throw std::invalid_argument("Tensor::fromF64: stochastic rounding needs a random word; use storeF64");
  storeF64(dtype_, static_cast<std::byte *>(data()) + size_t(i) * itemsize(), v, r);
}

int64_t Tensor::toI64(int64_t i) const {
  checkIndex(i);
  return loadI64(dtype_, static_cast<const std::byte *>(data()) + size_t(i) * itemsize());
}

void Tensor::fromI64(int64_t i, int64_t v) {
  checkIndex(i);
  storeI64(dtype_, static_cast<std::byte *>(data()) + size_t(i) * itemsize(), v);
}

Tensor Tensor::clone() const {
  // Only a device holds the elements: the copy is made there, never through the host.
  if (!st_->hostValid && st_->devValid) {
    Tensor t = emptyOn(*st_->dev, shape_, dtype_, "a copy of a tensor");
    if (nbytes()) st_->dev->copyOnDevice(t.st_->devPtr, st_->devPtr, nbytes());
    return t;
  }
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.data(), data(), nbytes());
  return t;
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  std::vector<int64_t> probe = shape;
  int64_t inferred = -1;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] != -1) continue;
    if (inferred >= 0) throw std::invalid_argument("cannot reshape to " + formatShape(shape) + ": more than one -1");
    inferred = int64_t(a);
    probe[a] = 1;
  }
  const int64_t known = shapeNumel(probe); // rejects other negative dimensions
  if (inferred >= 0) {
    if (known == 0 || numel_ % known != 0)
      throw std::invalid_argument("cannot reshape a tensor of shape " + formatShape(shape_) + " to " + formatShape(shape));
    shape[size_t(inferred)] = numel_ / known;
  } else if (known != numel_) {
    throw std::invalid_argument("cannot reshape a tensor of shape " + formatShape(shape_) + " (" + std::to_string(numel_) +
                                " elements) to " + formatShape(shape));
  }
  return Tensor(dtype_, std::move(shape), numel_, st_);
}

Tensor Tensor::cast(DType to, Rounding r) const {
  if (r.stochastic) throw std::invalid_argument("Tensor::cast: stochastic rounding needs a key; use stochasticCast");
  Tensor t = empty(shape_, to);
  convert(data(), dtype_, t.data(), to, numel_, r);
  return t;
}

bool sameShapeAndDtype(const Tensor &a, const Tensor &b) { return a.dtype() == b.dtype() && a.shape() == b.shape(); }

bool identical(const Tensor &a, const Tensor &b) {
  return sameShapeAndDtype(a, b) && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// ---- format ----------------------------------------------------------------------------------------

namespace {

struct Printer {
  const Tensor &t;
  const FormatOptions &o;
  bool summarise = false;
  std::vector<int64_t> strides;
  std::unordered_map<int64_t, std::string> cells; // by flat index, only the shown elements
  std::vector<int64_t> shownIdx;  // shown flat indices, in order
  size_t width = 0;

  bool shown(int64_t extent, int64_t i) const {
    return !summarise || extent <= 2 * o.edgeItems || i < o.edgeItems || i >= extent - o.edgeItems;
  }

  void collect(int64_t axis, int64_t base) {
    if (axis == t.ndim()) {
      shownIdx.push_back(base);
      return;
    }
    const int64_t n = t.shape()[size_t(axis)];
    for (int64_t i = 0; i < n; ++i) {
      if (!shown(n, i)) {
        i = n - o.edgeItems - 1;
        continue;
      }
      collect(axis + 1, base + i * strides[size_t(axis)]);
    }
  }

  /// Whether `text` reads back as the element's own value in its dtype.
  bool roundTrips(const char *text, double v) const {
    const double w = std::strtod(text, nullptr);
    unsigned char a[8] = {}, b[8] = {};
    storeF64(t.dtype(), a, v);
    storeF64(t.dtype(), b, w);
    return std::memcmp(a, b, 8) == 0;
  }

  std::string fmt(bool sci, int digits, double v) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", digits, v);
    return buf;
  }

  void makeFloatCells(std::vector<double> &vals) {
    double maxv = 0, minv = std::numeric_limits<double>::infinity();
    for (double v : vals) {
      if (!std::isfinite(v) || v == 0) continue;
      maxv = std::max(maxv, std::fabs(v));
      minv = std::min(minv, std::fabs(v));
    }
    const bool sci = maxv >= 1e8 || (maxv > 0 && (minv < 1e-4 || maxv / minv > 1e3));
    int digits = 1;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      int d = 1;
      while (d < o.precision && !roundTrips(fmt(sci, d, v).c_str(), v)) ++d;
      digits = std::max(digits, d);
    }
    for (size_t k = 0; k < vals.size(); ++k) {
      const double v = vals[k];
      std::string s = std::isnan(v) ? "nan" : std::isinf(v) ? (v < 0 ? "-inf" : "inf") : fmt(sci, digits, v);
      cells[shownIdx[k]] = std::move(s);
    }
  }

  void makeCells() {
    strides = t.strides();
    summarise = t.numel() > o.threshold;
    collect(0, 0);
    if (isFloat(t.dtype())) {
      std::vector<double> vals;
      vals.reserve(shownIdx.size());
      for (int64_t i : shownIdx) vals.push_back(t.toF64(i));
      makeFloatCells(vals);
    } else {
      for (int64_t i : shownIdx) {
        const int64_t v = t.toI64(i);
        cells[i] = t.dtype() == DType::Bool ? (v ? "True" : "False") : std::to_string(v);
      }
    }
    for (int64_t i : shownIdx) width = std::max(width, cells.at(i).size());
  }

  std::string cell(int64_t i) const {
    const std::string &s = cells.at(i);
    return std::string(width - s.size(), ' ') + s;
  }

  /// One line: separators are ", " at every level.
  void oneLine(std::string &out, int64_t axis, int64_t base) const {
    if (axis == t.ndim()) {
      out += cell(base);
      return;
    }
    const int64_t n = t.shape()[size_t(axis)];
    out += '[';
    bool first = true;
    for (int64_t i = 0; i < n; ++i) {
      if (!first) out += ", ";
      first = false;
      if (!shown(n, i)) {
        out += "...";
        i = n - o.edgeItems - 1;
        continue;
      }
      oneLine(out, axis + 1, base + i * strides[size_t(axis)]);
    }
    out += ']';
  }

  /// NumPy's layout (numpy.core.arrayprint._formatArray). `indent` is the column of this axis's
  /// opening bracket; `col` tracks the current line length for wrapping the last axis.
  void multiLine(std::string &out, int64_t axis, int64_t base, size_t indent) const {
    const int64_t n = t.shape()[size_t(axis)];
    const std::string pad(indent + 1, ' ');
    out += '[';
    if (axis == t.ndim() - 1) {
      size_t col = indent + 1;
      bool first = true;
      for (int64_t i = 0; i < n; ++i) {
        std::string word;
        if (!shown(n, i)) {
          word = "...";
          i = n - o.edgeItems - 1;
        } else {
          word = cell(base + i * strides[size_t(axis)]);
        }
        if (!first) {
          // ", " then the word, or ",\n" + pad when it would not fit. As NumPy, keep room for one
          // closing bracket per enclosing axis and one for the separator or bracket after it.
          if (col + 2 + word.size() > size_t(std::max<int64_t>(o.lineWidth - t.ndim(), 0))) {
            out += ",\n" + pad;
            col = pad.size();
          } else {
            out += ", ";
            col += 2;
          }
        }
        first = false;
        out += word;
        col += word.size();
      }
      out += ']';
      return;
    }
    const std::string sep = "," + std::string(size_t(t.ndim() - axis - 1), '\n') + pad;
    bool first = true;
    for (int64_t i = 0; i < n; ++i) {
      if (!first) out += sep;
      first = false;
      if (!shown(n, i)) {
        out += "...";
        i = n - o.edgeItems - 1;
        continue;
      }
      multiLine(out, axis + 1, base + i * strides[size_t(axis)], indent + 1);
    }
    out += ']';
  }
};

} // namespace

std::string format(const Tensor &t, const FormatOptions &opts) {
  const std::string prefix = "tensor(";
  const std::string suffix = ", dtype=" + std::string(dtypeName(t.dtype())) + ")";
  if (t.numel() == 0) {
    std::string shape = t.ndim() > 1 ? ", shape=" + formatShape(t.shape()) : "";
    return prefix + "[]" + shape + suffix;
  }
  Printer p{t, opts};
  p.makeCells();
  if (t.ndim() == 0) return prefix + p.cells.at(0) + suffix;
  std::string line = prefix;
  p.oneLine(line, 0, 0);
  line += suffix;
  if (int64_t(line.size()) <= opts.lineWidth) return line;
  std::string out = prefix;
  p.multiLine(out, 0, 0, prefix.size());
  return out + suffix;
}

} // namespace tsr::rt
