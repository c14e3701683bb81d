// The reference evaluator of Graph IR: every op of ir/Ops.def on CPU tensors, plainly, as the
// numeric oracle of the compiled pipeline (docs/design.md).
//
// One room (over 1,000 lines): evalOp dispatches every op kind to one plain implementation each
// (unary, binary, select, reduce, matmul, layout, creation, random, kernel calls), all over the
// same helpers at the top (exact dim arithmetic, broadcasting, dtype rounding), so that a reader
// checks an op against the compiled pipeline's in one place.
#include "ir/eval/Evaluator.h"
#include "runtime/dist/Dist.h"
#include "ir/eval/ConvPool.h"
#include "ir/Scan.h"

#include "runtime/Numeric.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace tsr::ir {

EvalError::EvalError(const std::string &where, const std::string &problem)
    : std::runtime_error(where + ": " + problem), where_(where), problem_(problem) {}

namespace {

using rt::Tensor;
using Shape = std::vector<int64_t>;

// The failure of one op; the op loop turns it into an EvalError with the op's location.
struct OpFailure {
  std::string message;
  bool programError = false; // the program's own error (ProgramEvalError), not the evaluator's
};
[[noreturn]] void fail(std::string message) { throw OpFailure{std::move(message)}; }
[[noreturn]] void failProgram(std::string message) { throw OpFailure{std::move(message), true}; }

std::string shapeText(const Shape &s) { return rt::formatShape(s); }
std::string dtypeText(DType t) { return std::string(dtypeName(t)); }

// ---- dims: exact rational evaluation ------------------------------------------------------------

// A rational p/q, q > 0, in 128-bit integers so that products do not overflow before they are
// reduced; a magnitude beyond 2^62 is reported rather than wrapped.
struct Q {
  __int128 num = 0, den = 1;
};

__int128 gcd128(__int128 a, __int128 b) {
  if (a < 0) a = -a;
  while (b != 0) {
    __int128 t = a % b;
    a = b;
    b = t < 0 ? -t : t;
  }
  return a;
}

Q makeQ(__int128 n, __int128 d) {
  if (d == 0) throw std::invalid_argument("a division by zero");
  if (d < 0) { n = -n; d = -d; }
  __int128 g = gcd128(n, d);
  if (g > 1) { n /= g; d /= g; }
  // Bounded so that the products of two such numbers stay within 128 bits.
  const __int128 limit = __int128(1) << 62;
  if (n > limit || n < -limit || d > limit) throw std::invalid_argument("a size beyond 2^62");
  return {n, d};
}
Q operator+(Q a, Q b) { return makeQ(a.num * b.den + b.num * a.den, a.den * b.den); }
Q operator-(Q a, Q b) { return makeQ(a.num * b.den - b.num * a.den, a.den * b.den); }
Q operator*(Q a, Q b) { return makeQ(a.num * b.num, a.den * b.den); }
Q operator/(Q a, Q b) { return makeQ(a.num * b.den, a.den * b.num); }
bool operator<(Q a, Q b) { return a.num * b.den < b.num * a.den; }
bool operator==(Q a, Q b) { return a.num == b.num && a.den == b.den; }

int64_t floorQ(Q q) {
  __int128 f = q.num / q.den;
  if (q.num % q.den != 0 && q.num < 0) --f;
  if (f > std::numeric_limits<int64_t>::max() || f < std::numeric_limits<int64_t>::min())
    throw std::invalid_argument("a size beyond int64");
  return static_cast<int64_t>(f);
}

// Evaluates the surface text of a Dim (Dim::str()): integers, names, + - * / // ^, parentheses,
// min(a, b) and max(a, b). `/` and `//` are exact division, as in Dim::parse; opaque atoms that
// the algebra keeps whole (quotients by sums, min/max) are evaluated from their text too.
class DimText {
public:
  DimText(std::string_view text, const SymbolSizes &sizes) : s_(text), sizes_(sizes) {}
  Q parse() {
    Q v = sum();
    skip();
    if (i_ != s_.size()) bad("unexpected `" + std::string(s_.substr(i_)) + "`");
    return v;
  }

private:
  [[noreturn]] void bad(const std::string &why) {
    throw std::invalid_argument("cannot evaluate the dim \"" + std::string(s_) + "\": " + why);
  }
  void skip() { while (i_ < s_.size() && s_[i_] == ' ') ++i_; }
  bool eat(std::string_view t) {
    skip();
    if (s_.substr(i_, t.size()) != t) return false;
    i_ += t.size();
    return true;
  }
  Q sum() {
    Q v = product();
    for (;;) {
      if (eat("+")) v = v + product();
      else if (eat("-")) v = v - product();
      else return v;
    }
  }
  Q product() {
    Q v = unary();
    for (;;) {
      if (eat("*")) v = v * unary();
      else if (eat("//") || eat("/")) {
        Q d = unary();
        if (d.num == 0) bad("a division by zero");
        v = v / d;
      } else return v;
    }
  }
  Q unary() {
    if (eat("-")) return Q{} - unary();
    Q base = atom();
    if (eat("^")) {
      Q e = unary();
      if (e.den != 1 || e.num < 0 || e.num > 64) bad("an exponent that is not a small integer");
      Q r{1, 1};
      for (__int128 k = 0; k < e.num; ++k) r = r * base;
      return r;
    }
    return base;
  }
  Q atom() {
    skip();
    if (i_ >= s_.size()) bad("it ends early");
    char c = s_[i_];
    if (c == '(') {
      ++i_;
      Q v = sum();
      if (!eat(")")) bad("a missing `)`");
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      __int128 v = 0;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) {
        if (s_[i_] != '_') v = v * 10 + (s_[i_] - '0');
        if (v > (__int128(1) << 62)) bad("a number beyond 2^62");
        ++i_;
      }
      return {v, 1};
    }
    if (c == '?') bad("an unknown dim (`?`) has no value");
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
      std::string name(s_.substr(b, i_ - b));
      if ((name == "min" || name == "max") && eat("(")) {
        Q a = sum();
        if (!eat(",")) bad("min/max without a `,`");
        Q b2 = sum();
        if (!eat(")")) bad("a missing `)`");
        return (name == "min") == (a < b2) ? a : b2;
      }
      auto it = sizes_.find(name);
      if (it == sizes_.end()) bad("the symbol `" + name + "` has no size");
      return {it->second, 1};
    }
    bad(std::string("unexpected `") + c + "`");
  }

  std::string_view s_;
  size_t i_ = 0;
  const SymbolSizes &sizes_;
};

Q evaluateDimQ(const Dim &d, const SymbolSizes &sizes) {
  if (d.hasUnknown()) throw std::invalid_argument("an unknown dim (`?`) has no value");
  if (auto c = d.constantValue()) return {*c, 1};
  // Substituting first lets the algebra normalise (and so print) the dim with constants; the text
  // evaluator then handles rational constants ("163/64") and opaque atoms alike.
  std::map<std::string, Dim> env;
  for (const std::string &s : d.symbols()) {
    auto it = sizes.find(s);
    if (it != sizes.end()) env[s] = Dim::constant(it->second);
  }
  Dim s = env.empty() ? d : d.substitute(env);
  if (auto c = s.constantValue()) return {*c, 1};
  return DimText(s.str(), sizes).parse();
}

// ---- shapes and element index maps --------------------------------------------------------------

int64_t numelOf(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape stridesOf(const Shape &s) {
  Shape st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// For each element of a row-major tensor of shape `out`, the source index
// base + sum(index[d] * strides[d]). Transposes, slices, reversals and broadcasts are all such maps.
std::vector<int64_t> affineIndex(const Shape &out, int64_t base, const std::vector<int64_t> &strides) {
  const int64_t n = numelOf(out);
  std::vector<int64_t> res(static_cast<size_t>(n));
  if (n == 0) return res;
  std::vector<int64_t> idx(out.size(), 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    res[static_cast<size_t>(i)] = off;
    for (size_t d = out.size(); d-- > 0;) {
      if (++idx[d] < out[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
  return res;
}

// A tensor of shape `out` whose element i is element index[i] of `in` (bytes copied: any dtype).
Tensor gatherElements(const Tensor &in, const Shape &out, const std::vector<int64_t> &index) {
  Tensor t = Tensor::empty(out, in.dtype());
  const size_t w = in.itemsize();
  const auto *src = static_cast<const unsigned char *>(in.data());
  auto *dst = static_cast<unsigned char *>(t.data());
  for (size_t i = 0; i < index.size(); ++i) std::memcpy(dst + i * w, src + size_t(index[i]) * w, w);
  return t;
}

// NumPy broadcasting of two shapes (aligned on the right; equal extents, or 1 stretches).
std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x == y || y == 1) out[i] = x;
    else if (x == 1) out[i] = y;
    else return std::nullopt;
  }
  return out;
}

// The strides that read a row-major tensor of shape `in` as if broadcast to `out` (0 along
// stretched axes), or nullopt when `in` does not broadcast to `out`.
std::optional<std::vector<int64_t>> broadcastStrides(const Shape &in, const Shape &out) {
  if (in.size() > out.size()) return std::nullopt;
  Shape st = stridesOf(in);
  std::vector<int64_t> res(out.size(), 0);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == out[lead + i]) res[lead + i] = in[i] == 1 ? 0 : st[i];
    else if (in[i] != 1) return std::nullopt;
  }
  return res;
}

std::vector<int64_t> broadcastIndex(const Shape &in, const Shape &out) {
  auto st = broadcastStrides(in, out);
  if (!st) fail("shape " + shapeText(in) + " does not broadcast to " + shapeText(out));
  return affineIndex(out, 0, *st);
}

size_t normalizeAxis(int64_t a, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (a < -r || a >= r) fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return static_cast<size_t>(a < 0 ? a + r : a);
}

// ---- element values -----------------------------------------------------------------------------

// The elements of `t` converted to dtype `dt` (nearest-even; integers wrap) and then, exactly, to f64.
std::vector<double> valuesF64(const Tensor &t, DType dt) {
  Tensor c = t.dtype() == dt ? t : t.cast(dt);
  std::vector<double> v(static_cast<size_t>(c.numel()));
  rt::convert(c.data(), dt, v.data(), DType::F64, c.numel());
  return v;
}

// The elements of `t` converted to integer or bool dtype `dt`, then to i64.
std::vector<int64_t> valuesI64(const Tensor &t, DType dt) {
  Tensor c = t.dtype() == dt ? t : t.cast(dt);
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  rt::convert(c.data(), dt, v.data(), DType::I64, c.numel());
  return v;
}

rt::Rounding roundingOf(const Policies &p) {
  rt::Rounding r;
  r.saturate = p.saturate;
  return r;
}

// f64 values rounded once into `dt` (nearest-even, saturating under @saturate).
Tensor tensorFromF64(const Shape &s, DType dt, const std::vector<double> &v, const Policies &p) {
  Tensor t = Tensor::empty(s, dt);
  rt::convert(v.data(), DType::F64, t.data(), dt, t.numel(), roundingOf(p));
  return t;
}

// i64 values into `dt`: integers wrap modulo 2^bits, bool is v != 0, floats round once.
Tensor tensorFromI64(const Shape &s, DType dt, const std::vector<int64_t> &v, const Policies &p) {
  Tensor t = Tensor::empty(s, dt);
  rt::convert(v.data(), DType::I64, t.data(), dt, t.numel(), roundingOf(p));
  return t;
}

// Two's-complement arithmetic on i64 without undefined behaviour: the results wrap.
int64_t wrapAdd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrapSub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wrapMul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

// The dtype matmuls and reductions accumulate in: @accum(T), else f32 for the 16-bit floats, fp8
// and tf32 (whose storage is f32), else the dtype itself.
DType accumulatorOf(const Type &t) {
  if (t.policies.accum) return *t.policies.accum;
  if (isFloat(t.dtype) && (dtypeBits(t.dtype) <= 16 || t.dtype == DType::TF32)) return DType::F32;
  return t.dtype;
}

// Calls f with the function that rounds an f64 into float dtype `t` and back: the value an
// accumulator of dtype t holds. Specialised for f64 and f32 so that inner loops stay tight.
template <class F> void withRounder(DType t, F &&f) {
  switch (t) {
  case DType::F64: f([](double x) { return x; }); return;
  case DType::F32: f([](double x) { return static_cast<double>(static_cast<float>(x)); }); return;
  default:
    f([t](double x) {
      unsigned char b[8];
      rt::storeF64(t, b, x);
      return rt::loadF64(t, b);
    });
    return;
  }
}

// ---- elementwise math ---------------------------------------------------------------------------

// Python's float `//` (CPython's float_divmod), which NumPy's floor_divide follows: exact where
// floor(x / y) would round x / y first.
double pyFloorDiv(double x, double y) {
  if (y == 0) return x / y;
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, x / y);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return fl;
}

// Python's float `%`: the sign of the divisor (NumPy's remainder).
double pyMod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

double unaryF64(OpKind k, double x, bool tanhGelu) {
  switch (k) {
  case OpKind::Neg: return -x;
  case OpKind::Abs: return std::fabs(x);
  case OpKind::Exp: return std::exp(x);
  case OpKind::Log: return std::log(x);
  case OpKind::Log1p: return std::log1p(x);
  case OpKind::Expm1: return std::expm1(x);
  case OpKind::Exp2: return std::exp2(x);
  case OpKind::Log2: return std::log2(x);
  case OpKind::Sqrt: return std::sqrt(x);
  case OpKind::Rsqrt: return 1.0 / std::sqrt(x);
  case OpKind::Tanh: return std::tanh(x);
  case OpKind::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
  case OpKind::Relu: return x < 0 ? 0.0 : x; // NaN stays NaN, as in PyTorch
  case OpKind::Gelu:
    if (tanhGelu) return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476));
  case OpKind::Silu: return x / (1.0 + std::exp(-x));
  case OpKind::Sin: return std::sin(x);
  case OpKind::Cos: return std::cos(x);
  case OpKind::Erf: return std::erf(x);
  case OpKind::Floor: return std::floor(x);
  case OpKind::Ceil: return std::ceil(x);
  case OpKind::Round: return std::nearbyint(x); // half to even, as NumPy and PyTorch
  case OpKind::Sign: return std::isnan(x) || x == 0 ? x : (x > 0 ? 1.0 : -1.0);
  case OpKind::Not: fail("`not` of a float tensor (it is logical for bool and bitwise for integers)");
  default: fail("no elementwise rule");
  }
}

int64_t unaryI64(OpKind k, int64_t x, bool isBool) {
  switch (k) {
  case OpKind::Neg: return wrapSub(0, x);
  case OpKind::Abs: return x < 0 ? wrapSub(0, x) : x;
  case OpKind::Relu: return x < 0 ? 0 : x;
  case OpKind::Floor: case OpKind::Ceil: case OpKind::Round: return x;
  case OpKind::Sign: return (x > 0) - (x < 0);
  case OpKind::Not: return isBool ? !x : ~x;
  default: fail("no integer rule (its result type should be a float)");
  }
}

double binaryF64(OpKind k, double x, double y) {
  switch (k) {
  case OpKind::Add: return x + y;
  case OpKind::Sub: return x - y;
  case OpKind::Mul: return x * y;
  case OpKind::Div: return x / y;
  case OpKind::FloorDiv: return pyFloorDiv(x, y);
  case OpKind::Mod: return pyMod(x, y);
  case OpKind::Pow: return std::pow(x, y);
  // NaN propagates, as numpy.maximum and torch.maximum.
  case OpKind::Max: return std::isnan(x) ? x : std::isnan(y) ? y : (y > x ? y : x);
  case OpKind::Min: return std::isnan(x) ? x : std::isnan(y) ? y : (y < x ? y : x);
  case OpKind::Eq: return x == y;
  case OpKind::Ne: return x != y;
  case OpKind::Lt: return x < y;
  case OpKind::Le: return x <= y;
  case OpKind::Gt: return x > y;
  case OpKind::Ge: return x >= y;
  default: fail(std::string("`") + std::string(opSpelling(k)) + "` of float tensors (it needs integers or bools)");
  }
}

// x ** y for integers, wrapping. A negative exponent gives the truncated quotient 1 / x^-y
// (1 for x = 1, ±1 for x = -1, else 0); 0 to a negative power is an error.
int64_t intPow(int64_t x, int64_t y) {
  if (y < 0) {
    if (x == 1) return 1;
    if (x == -1) return (y & 1) ? -1 : 1;
    if (x == 0) failProgram("integer 0 raised to a negative power");
    return 0;
  }
  int64_t r = 1, b = x;
  for (uint64_t e = static_cast<uint64_t>(y); e != 0; e >>= 1) {
    if (e & 1) r = wrapMul(r, b);
    b = wrapMul(b, b);
  }
  return r;
}

int64_t binaryI64(OpKind k, int64_t x, int64_t y) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  switch (k) {
  case OpKind::Add: return wrapAdd(x, y);
  case OpKind::Sub: return wrapSub(x, y);
  case OpKind::Mul: return wrapMul(x, y);
  case OpKind::FloorDiv: {
    // Python's floor division; i64 min // -1 wraps to itself.
    if (y == 0) failProgram("integer division by zero");
    if (x == kMin && y == -1) return kMin;
    int64_t q = x / y;
    if (x % y != 0 && ((x < 0) != (y < 0))) --q;
    return q;
  }
  case OpKind::Mod: {
    // Python's `%`: the sign of the divisor.
    if (y == 0) failProgram("integer modulo by zero");
    if (y == -1) return 0;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
  }
  case OpKind::Pow: return intPow(x, y);
  case OpKind::Max: return std::max(x, y);
  case OpKind::Min: return std::min(x, y);
  case OpKind::And: return x & y;
  case OpKind::Or: return x | y;
  case OpKind::Xor: return x ^ y;
  // Shift counts outside [0, 64) shift every bit out (NumPy's rule): 0, or the sign for `shr`.
  // Narrower dtypes give the same results after the wrap into them.
  case OpKind::Shl: return y < 0 || y >= 64 ? 0 : static_cast<int64_t>(static_cast<uint64_t>(x) << y);
  case OpKind::Shr: return y < 0 || y >= 64 ? (x < 0 ? -1 : 0) : x >> y;
  case OpKind::Eq: return x == y;
  case OpKind::Ne: return x != y;
  case OpKind::Lt: return x < y;
  case OpKind::Le: return x <= y;
  case OpKind::Gt: return x > y;
  case OpKind::Ge: return x >= y;
  default: fail("no integer rule");
  }
}

// ---- attributes ---------------------------------------------------------------------------------

template <class T> const T &attrOf(const Op &op, const char *name, const char *what) {
  const T *v = op.attrAs<T>(name);
  if (!v) fail(std::string("the attribute `") + name + "` (" + what + ") is missing");
  return *v;
}
const std::vector<Dim> &dimsAttr(const Op &op, const char *n) { return attrOf<std::vector<Dim>>(op, n, "a shape"); }
const std::vector<int64_t> &intsAttr(const Op &op, const char *n) { return attrOf<std::vector<int64_t>>(op, n, "an int list"); }
int64_t intAttr(const Op &op, const char *n) { return attrOf<int64_t>(op, n, "an integer"); }
const DTypeAttr &dtypeAttr(const Op &op, const char *n) { return attrOf<DTypeAttr>(op, n, "a dtype"); }

// ---- the evaluator ------------------------------------------------------------------------------

class Evaluator {
public:
  Evaluator(const Module &m, const Graph &g, const KernelRunner *kernels, SymbolSizes sizes)
      : m_(m), g_(g), kernels_(kernels), sizes_(std::move(sizes)) {}

  /// Parameter `p`'s input is the evaluator's to write (evaluate's `donated`).
  void donate(const Value *p) { donated_.insert(p); }

  std::vector<Tensor> run(const std::vector<Tensor> &inputs) {
    // The last op that reads each value, so that intermediates are freed as soon as possible.
    std::unordered_map<const Value *, size_t> &lastUse = lastUse_;
    for (size_t i = 0; i < g_.ops.size(); ++i)
      for (const Value *v : g_.ops[i]->operands) lastUse[v] = i;
    for (const Value *v : g_.outputs) lastUse[v] = g_.ops.size();

    for (size_t i = 0; i < g_.params.size(); ++i) values_[g_.params[i]] = inputs[i];
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      const Op &op = *g_.ops[i];
      std::vector<Tensor> in;
      try {
        for (const Value *v : op.operands) {
          auto it = values_.find(v);
          if (it == values_.end()) fail("operand %" + std::to_string(v->id) + " is not defined before this op");
          in.push_back(it->second);
        }
        std::vector<Tensor> out = evalOp(op, in);
        if (out.size() != op.results.size())
          fail("gave " + std::to_string(out.size()) + " results for " + std::to_string(op.results.size()) + " result types");
        for (size_t r = 0; r < out.size(); ++r) checkResult(*op.results[r], out[r]);
        for (size_t r = 0; r < out.size(); ++r) values_[op.results[r]] = std::move(out[r]);
      } catch (const OpFailure &f) {
        if (f.programError) throw ProgramEvalError(where(op), describe(op), f.message);
        throw EvalError(where(op), describe(op) + ": " + f.message);
      } catch (const EvalError &) {
        throw;
      } catch (const ProgramCheckError &) {
        throw;
      } catch (const std::exception &e) {
        throw EvalError(where(op), describe(op) + ": " + e.what());
      }
      for (const Value *v : op.operands) {
        auto lu = lastUse.find(v);
        if (lu != lastUse.end() && lu->second == i) values_.erase(v);
      }
    }
    std::vector<Tensor> outs;
    for (const Value *v : g_.outputs) {
      auto it = values_.find(v);
      if (it == values_.end())
        throw EvalError("graph @" + g_.name, "the output %" + std::to_string(v->id) + " is never defined");
      outs.push_back(it->second);
    }
    return outs;
  }

private:
  std::string where(const Op &op) const {
    if (op.loc.valid() && op.loc.file <= m_.files.size())
      return m_.files[op.loc.file - 1] + ":" + std::to_string(op.loc.line) + ":" + std::to_string(op.loc.col);
    return "graph @" + g_.name;
  }
  static std::string describe(const Op &op) {
    std::string s(opSpelling(op.kind));
    if (!op.results.empty()) s += " %" + std::to_string(op.results[0]->id);
    return s;
  }

  int64_t dim(const Dim &d) const {
    try {
      return floorQ(evaluateDimQ(d, sizes_));
    } catch (const std::invalid_argument &e) {
      fail("the dim \"" + d.str() + "\": " + e.what());
    }
  }
  Shape shape(const std::vector<Dim> &dims) const {
    Shape s;
    for (const Dim &d : dims) {
      int64_t v = dim(d);
      if (v < 0) fail("the dim \"" + d.str() + "\" is " + std::to_string(v) + ", a negative extent");
      s.push_back(v);
    }
    return s;
  }

  // The result of an op has its type's dtype and, where the type's dims are known, its extents:
  // a mismatch is a bug of lowering or of shape inference, caught at the op that shows it.
  void checkResult(const Value &v, const Tensor &t) const {
    const Type &ty = v.type;
    if (ty.isKey()) {
      (void)keyOf(t);
      return;
    }
    if (t.dtype() != ty.dtype)
      fail("computed a " + dtypeText(t.dtype()) + " tensor for the result type " + ty.str());
    if (static_cast<size_t>(t.ndim()) != ty.rank())
      fail("computed shape " + shapeText(t.shape()) + " for the result type " + ty.str());
    for (size_t d = 0; d < ty.rank(); ++d) {
      if (ty.dims[d].hasUnknown()) continue;
      int64_t want = dim(ty.dims[d]);
      if (want != t.shape()[d])
        fail("computed shape " + shapeText(t.shape()) + ", but the result type " + ty.str() + " says " + std::to_string(want) +
             " for axis " + std::to_string(d) + sizesNote(ty.dims[d]));
    }
  }
  std::string sizesNote(const Dim &d) const {
    std::string s;
    for (const std::string &n : d.symbols()) {
      auto it = sizes_.find(n);
      if (it != sizes_.end()) s += (s.empty() ? " (with " : ", ") + n + " = " + std::to_string(it->second);
    }
    return s.empty() ? s : s + ")";
  }

  std::vector<Tensor> evalOp(const Op &op, const std::vector<Tensor> &in) {
    const Type *ty = op.results.empty() ? nullptr : &op.results[0]->type;
    auto arity = [&](size_t n) {
      if (in.size() != n) fail("takes " + std::to_string(n) + " operand(s), not " + std::to_string(in.size()));
    };
    switch (opClass(op.kind)) {
    case OpClass::Unary:
      arity(1);
      return {unary(op, in[0], *ty)};
    case OpClass::Binary: case OpClass::Compare:
      arity(2);
      return {binary(op, in[0], in[1], *ty)};
    case OpClass::Ternary:
      arity(3);
      return {select(in[0], in[1], in[2], *ty)};
    case OpClass::Reduce:
      arity(1);
      return {reduce(op, in[0], *ty)};
    case OpClass::Special: break;
    }
    switch (op.kind) {
    case OpKind::Cast: {
      arity(1);
      const DTypeAttr &d = dtypeAttr(op, "dtype");
      // Float -> integer truncates toward zero and saturates; integers wrap; x -> bool is x != 0.
      return {in[0].cast(d.dtype, roundingOf(d.policies))};
    }
    case OpKind::MatMul: arity(2); return {matmul(in[0], in[1], *ty)};
    case OpKind::Conv: case OpKind::ConvTranspose: case OpKind::MaxPool: case OpKind::MaxPoolGrad: case OpKind::AvgPool:
    case OpKind::AvgPoolGrad:
      return {windowOp(op, in, *ty)};
    case OpKind::Reshape: {
      arity(1);
      Shape s = shape(dimsAttr(op, "shape"));
      if (numelOf(s) != in[0].numel())
        fail("cannot reshape " + shapeText(in[0].shape()) + " (" + std::to_string(in[0].numel()) + " elements) to " + shapeText(s));
      return {in[0].reshape(s)};
    }
    case OpKind::Transpose: arity(1); return {transpose(in[0], intsAttr(op, "perm"))};
    case OpKind::BroadcastTo: {
      arity(1);
      Shape s = shape(dimsAttr(op, "shape"));
      return {gatherElements(in[0], s, broadcastIndex(in[0].shape(), s))};
    }
    case OpKind::Slice: arity(1); return {slice(op, in[0])};
    case OpKind::Reverse: arity(1); return {reverse(in[0], intsAttr(op, "axes"))};
    case OpKind::Concat: return {concat(in, intAttr(op, "axis"), *ty)};
    case OpKind::Gather: arity(2); return {gather(in[0], in[1], intAttr(op, "axis"))};
    case OpKind::Take: arity(2); return {take(in[0], in[1], intAttr(op, "axis"))};
    case OpKind::Constant: arity(0); return {constant(op)};
    case OpKind::Iota: arity(0); return {iota(op)};
    case OpKind::DimValue: {
      arity(0);
      const std::vector<Dim> &d = dimsAttr(op, "dim");
      if (d.size() != 1) fail("dim_value needs exactly one dim");
      return {Tensor::fromI64({}, DType::I64, std::vector<int64_t>{dim(d[0])})};
    }
    case OpKind::RandomBits: case OpKind::RandomNormal: case OpKind::RandomUniform: return {random(op, in)};
    case OpKind::KeySplit: {
      arity(1);
      int64_t index = intAttr(op, "index"), count = intAttr(op, "count");
      if (count < 1 || index < 0 || index >= count)
        fail("key " + std::to_string(index) + " of a split into " + std::to_string(count));
      return {keyTensor(rt::split(keyOf(in[0]), count)[static_cast<size_t>(index)])};
    }
    case OpKind::KernelCall: return kernelCall(op, in);
    case OpKind::Scan: return scan(op, in);
    case OpKind::AllReduce: case OpKind::AllGather: case OpKind::ReduceScatter: case OpKind::DistBroadcast:
    case OpKind::DistReduce: case OpKind::AllToAll: {
      arity(1);
      try {
        return {runCollective(op, in[0])};
      } catch (const rt::dist::DistError &e) {
        failProgram(e.what());
      }
    }
    case OpKind::CheckLe: {
      // A run-time check (KVCache.append past max_len): a, unless an element of a exceeds b's.
      if (in.size() < 2) fail("check_le takes at least two operands");
      for (int64_t i = 0; i < in[0].numel(); ++i) {
        if (in[0].toI64(i) <= in[1].toI64(i)) continue;
        const std::string *m = op.attrAs<std::string>("message");
        std::string msg = m ? *m : "check_le: {0} > {1}";
        for (size_t k = 0; k < in.size(); ++k) {
          const std::string hole = "{" + std::to_string(k) + "}";
          for (size_t at = msg.find(hole); at != std::string::npos; at = msg.find(hole, at))
            msg.replace(at, hole.size(), std::to_string(in[k].toI64(in[k].numel() == in[0].numel() ? i : 0)));
        }
        failProgram(msg);
      }
      return {in[0]};
    }
    default: fail("no evaluation rule");
    }
  }

  // Elementwise unary: x converted to the result dtype (exact except int -> float), the function
  // in f64 (floats) or i64 (integers, bool), one rounding into the result dtype.
  Tensor unary(const Op &op, const Tensor &x, const Type &ty) {
    const DType r = ty.dtype;
    if (isFloat(r)) {
      bool tanhGelu = false;
      if (op.kind == OpKind::Gelu) {
        const std::string *a = op.attrAs<std::string>("approximate");
        if (a && *a != "none" && *a != "tanh") fail("approximate = \"" + *a + "\" (it is \"none\" or \"tanh\")");
        tanhGelu = a && *a == "tanh";
      }
      std::vector<double> v = valuesF64(x, r);
      for (double &e : v) e = unaryF64(op.kind, e, tanhGelu);
      return tensorFromF64(x.shape(), r, v, ty.policies);
    }
    std::vector<int64_t> v = valuesI64(x, r);
    for (int64_t &e : v) e = unaryI64(op.kind, e, r == DType::Bool);
    return tensorFromI64(x.shape(), r, v, ty.policies);
  }

  // Elementwise binary and comparisons, NumPy broadcasting. Operands are converted to the
  // computation dtype (the result dtype; for comparisons the operands' promoted dtype) first.
  Tensor binary(const Op &op, const Tensor &a, const Tensor &b, const Type &ty) {
    auto out = broadcastShapes(a.shape(), b.shape());
    if (!out) fail("shapes " + shapeText(a.shape()) + " and " + shapeText(b.shape()) + " do not broadcast");
    const bool compare = opClass(op.kind) == OpClass::Compare;
    DType c = ty.dtype;
    if (compare) {
      auto p = a.dtype() == b.dtype() ? std::optional<DType>(a.dtype()) : promote(a.dtype(), b.dtype());
      if (!p) fail("dtypes " + dtypeText(a.dtype()) + " and " + dtypeText(b.dtype()) + " do not promote");
      c = *p;
    }
    const std::vector<int64_t> ia = broadcastIndex(a.shape(), *out), ib = broadcastIndex(b.shape(), *out);
    const size_t n = ia.size();
    if (isFloat(c)) {
      const std::vector<double> va = valuesF64(a, c), vb = valuesF64(b, c);
      std::vector<double> r(n);
      for (size_t i = 0; i < n; ++i) r[i] = binaryF64(op.kind, va[size_t(ia[i])], vb[size_t(ib[i])]);
      return tensorFromF64(*out, ty.dtype, r, ty.policies);
    }
    const std::vector<int64_t> va = valuesI64(a, c), vb = valuesI64(b, c);
    std::vector<int64_t> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = binaryI64(op.kind, va[size_t(ia[i])], vb[size_t(ib[i])]);
    return tensorFromI64(*out, ty.dtype, r, ty.policies);
  }

  // where(cond, a, b): a and b converted to the result dtype, then each element chosen.
  Tensor select(const Tensor &cond, const Tensor &a, const Tensor &b, const Type &ty) {
    if (cond.dtype() != DType::Bool) fail("the condition is " + dtypeText(cond.dtype()) + ", not bool");
    auto ab = broadcastShapes(a.shape(), b.shape());
    auto out = ab ? broadcastShapes(cond.shape(), *ab) : std::nullopt;
    if (!out)
      fail("shapes " + shapeText(cond.shape()) + ", " + shapeText(a.shape()) + " and " + shapeText(b.shape()) + " do not broadcast");
    const Tensor ca = a.dtype() == ty.dtype ? a : a.cast(ty.dtype, roundingOf(ty.policies));
    const Tensor cb = b.dtype() == ty.dtype ? b : b.cast(ty.dtype, roundingOf(ty.policies));
    const std::vector<int64_t> ic = broadcastIndex(cond.shape(), *out), ia = broadcastIndex(a.shape(), *out),
                               ib = broadcastIndex(b.shape(), *out);
    Tensor t = Tensor::empty(*out, ty.dtype);
    const size_t w = t.itemsize();
    const auto *pc = static_cast<const uint8_t *>(cond.data());
    const auto *pa = static_cast<const unsigned char *>(ca.data());
    const auto *pb = static_cast<const unsigned char *>(cb.data());
    auto *dst = static_cast<unsigned char *>(t.data());
    for (size_t i = 0; i < ic.size(); ++i) {
      const unsigned char *src = pc[ic[i]] ? pa + size_t(ia[i]) * w : pb + size_t(ib[i]) * w;
      std::memcpy(dst + i * w, src, w);
    }
    return t;
  }

  // Reductions over `axes` (all axes when absent), in row-major order of the reduced elements.
  Tensor reduce(const Op &op, const Tensor &x, const Type &ty) {
    const size_t rank = static_cast<size_t>(x.ndim());
    std::vector<bool> reduced(rank, false);
    if (const auto *axes = op.attrAs<std::vector<int64_t>>("axes")) {
      for (int64_t a : *axes) reduced[normalizeAxis(a, rank)] = true;
    } else {
      reduced.assign(rank, true);
    }
    const bool keep = op.attrAs<bool>("keepdims") ? *op.attrAs<bool>("keepdims") : false;
    // Kept axes outside, reduced axes inside: row i of this order is output element i.
    Shape order, ordStrides, outShape;
    const Shape st = stridesOf(x.shape());
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < rank; ++d)
      if (!reduced[d]) { order.push_back(x.shape()[d]); ordStrides.push_back(st[d]); outer *= x.shape()[d]; }
    for (size_t d = 0; d < rank; ++d)
      if (reduced[d]) { order.push_back(x.shape()[d]); ordStrides.push_back(st[d]); inner *= x.shape()[d]; }
    for (size_t d = 0; d < rank; ++d) {
      if (!reduced[d]) outShape.push_back(x.shape()[d]);
      else if (keep) outShape.push_back(1);
    }
    const std::vector<int64_t> idx = affineIndex(order, 0, ordStrides);
    const OpKind k = op.kind;
    const bool arg = k == OpKind::ArgMax || k == OpKind::ArgMin;
    if ((arg || k == OpKind::ReduceMax || k == OpKind::ReduceMin) && inner == 0 && outer > 0)
      failProgram(std::string(opSpelling(k)) + " over an empty axis has no value");
    const bool floats = isFloat(x.dtype());

    if (arg) {
      // The first index of the extreme value; NaN counts as the extreme (NumPy, PyTorch).
      std::vector<int64_t> r(static_cast<size_t>(outer));
      if (floats) {
        const std::vector<double> v = valuesF64(x, x.dtype());
        for (int64_t o = 0; o < outer; ++o) {
          int64_t best = 0;
          double bv = v[size_t(idx[size_t(o * inner)])];
          for (int64_t j = 1; j < inner && !std::isnan(bv); ++j) {
            double e = v[size_t(idx[size_t(o * inner + j)])];
            if (std::isnan(e) || (k == OpKind::ArgMax ? e > bv : e < bv)) { bv = e; best = j; }
          }
          r[size_t(o)] = best;
        }
      } else {
        const std::vector<int64_t> v = valuesI64(x, x.dtype());
        for (int64_t o = 0; o < outer; ++o) {
          int64_t best = 0, bv = v[size_t(idx[size_t(o * inner)])];
          for (int64_t j = 1; j < inner; ++j) {
            int64_t e = v[size_t(idx[size_t(o * inner + j)])];
            if (k == OpKind::ArgMax ? e > bv : e < bv) { bv = e; best = j; }
          }
          r[size_t(o)] = best;
        }
      }
      return tensorFromI64(outShape, DType::I64, r, {});
    }

    if (floats) {
      const std::vector<double> v = valuesF64(x, x.dtype());
      std::vector<double> r(static_cast<size_t>(outer));
      if (k == OpKind::ReduceMax || k == OpKind::ReduceMin) {
        for (int64_t o = 0; o < outer; ++o) {
          double acc = v[size_t(idx[size_t(o * inner)])];
          for (int64_t j = 1; j < inner; ++j) acc = binaryF64(k == OpKind::ReduceMax ? OpKind::Max : OpKind::Min, acc, v[size_t(idx[size_t(o * inner + j)])]);
          r[size_t(o)] = acc;
        }
      } else {
        const DType acc = accumulatorOf(ty);
        if (!isFloat(acc)) fail("@accum(" + dtypeText(acc) + ") on a float tensor");
        const bool sum = k == OpKind::ReduceSum;
        withRounder(acc, [&](auto round) {
          for (int64_t o = 0; o < outer; ++o) {
            double a = sum ? 0.0 : 1.0;
            const int64_t *p = idx.data() + o * inner;
            for (int64_t j = 0; j < inner; ++j) a = round(sum ? a + v[size_t(p[j])] : a * v[size_t(p[j])]);
            r[size_t(o)] = a;
          }
        });
      }
      return tensorFromF64(outShape, ty.dtype, r, ty.policies);
    }
    const std::vector<int64_t> v = valuesI64(x, x.dtype());
    std::vector<int64_t> r(static_cast<size_t>(outer));
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t *p = idx.data() + o * inner;
      int64_t a = k == OpKind::ReduceSum ? 0 : k == OpKind::ReduceProd ? 1 : v[size_t(p[0])];
      for (int64_t j = 0; j < inner; ++j) {
        int64_t e = v[size_t(p[j])];
        switch (k) {
        case OpKind::ReduceSum: a = wrapAdd(a, e); break;
        case OpKind::ReduceProd: a = wrapMul(a, e); break;
        case OpKind::ReduceMax: a = std::max(a, e); break;
        case OpKind::ReduceMin: a = std::min(a, e); break;
        default: fail("no reduction rule");
        }
      }
      r[size_t(o)] = a;
    }
    return tensorFromI64(outShape, ty.dtype, r, ty.policies);
  }

  // Convolution and pooling (ConvPool.cpp): operands as f64, one rounding into the result.
  Tensor windowOp(const Op &op, const std::vector<Tensor> &in, const Type &ty) {
    auto ints = [&](const char *n, std::vector<int64_t> dflt) {
      const auto *v = op.attrAs<std::vector<int64_t>>(n);
      return v ? *v : dflt;
    };
    const bool conv = op.kind == OpKind::Conv || op.kind == OpKind::ConvTranspose;
    eval::WindowSpec s;
    s.out = shape(ty.dims);
    s.x = op.kind == OpKind::AvgPoolGrad ? s.out : in.at(0).shape();
    if (op.kind == OpKind::MaxPoolGrad || op.kind == OpKind::AvgPoolGrad) s.out = in.back().shape();
    if (s.x.size() < 3 || s.x.size() > 5) fail("needs an input of rank 3 to 5, not " + shapeText(s.x));
    const size_t n = s.x.size() - 2;
    if (conv) s.kernel.assign(in.at(1).shape().begin() + 2, in.at(1).shape().end());
    else s.kernel = ints("kernel", {});
    s.strides = ints("strides", std::vector<int64_t>(n, 1));
    s.dilations = ints("dilations", std::vector<int64_t>(n, 1));
    s.pads = ints("pads", std::vector<int64_t>(2 * n, 0));
    if (s.kernel.size() != n || s.strides.size() != n || s.dilations.size() != n || s.pads.size() != 2 * n)
      fail("the window attributes do not match " + std::to_string(n) + " spatial axes");
    const DType r = ty.dtype;
    const int64_t groups = op.attrAs<int64_t>("groups") ? *op.attrAs<int64_t>("groups") : 1;
    const bool includePad = op.attrAs<bool>("count_include_pad") && *op.attrAs<bool>("count_include_pad");
    std::vector<double> res(size_t(numelOf(shape(ty.dims))));
    switch (op.kind) {
    case OpKind::Conv: case OpKind::ConvTranspose: {
      if (!isFloat(r)) fail("needs float operands");
      const std::vector<double> x = valuesF64(in[0], r), w = valuesF64(in[1], r);
      if (groups < 1 || s.x[1] % groups || s.out[1] % groups) fail("the channels do not divide into the groups");
      (op.kind == OpKind::Conv ? eval::conv : eval::convTranspose)(s, groups, x.data(), w.data(), res.data());
      break;
    }
    case OpKind::MaxPool: {
      const std::vector<double> x = valuesF64(in[0], in[0].dtype());
      std::vector<double> t;
      if (in.size() == 2) t = valuesF64(in[1], r);
      eval::maxPool(s, x.data(), in.size() == 2 ? t.data() : nullptr, res.data());
      if (!isFloat(r)) {
        std::vector<int64_t> iv(res.size());
        // A window wholly in the padding has no maximum (-inf): the dtype's lowest value, as a
        // padding of the lowest integer would give (and no undefined float-to-int conversion).
        const int64_t lowest = r == DType::Bool ? 0 : dtypeBits(r) >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (dtypeBits(r) - 1));
        for (size_t i = 0; i < res.size(); ++i) iv[i] = std::isfinite(res[i]) ? static_cast<int64_t>(res[i]) : lowest;
        return tensorFromI64(shape(ty.dims), r, iv, ty.policies);
      }
      break;
    }
    case OpKind::MaxPoolGrad: {
      const std::vector<double> x = valuesF64(in[0], in[0].dtype()), g = valuesF64(in[1], r);
      eval::maxPoolGrad(s, x.data(), g.data(), res.data());
      break;
    }
    case OpKind::AvgPool: eval::avgPool(s, includePad, valuesF64(in[0], r).data(), res.data()); break;
    case OpKind::AvgPoolGrad: eval::avgPoolGrad(s, includePad, valuesF64(in[0], r).data(), res.data()); break;
    default: fail("not a window op");
    }
    return tensorFromF64(shape(ty.dims), r, res, ty.policies);
  }

  // NumPy's matmul: 1-d operands gain an axis of 1 that the result drops, batch axes broadcast.
  // Each output element accumulates its K products in index order (see accumulatorOf).
  Tensor matmul(const Tensor &a, const Tensor &b, const Type &ty) {
    if (a.ndim() == 0 || b.ndim() == 0) fail("matmul of a 0-d tensor");
    Shape as = a.shape(), bs = b.shape();
    const bool av = as.size() == 1, bv = bs.size() == 1;
    if (av) as.insert(as.begin(), 1);
    if (bv) bs.push_back(1);
    const int64_t M = as[as.size() - 2], K = as.back(), K2 = bs[bs.size() - 2], N = bs.back();
    if (K != K2) fail("the inner dims differ: " + shapeText(a.shape()) + " @ " + shapeText(b.shape()));
    const Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    auto batch = broadcastShapes(ba, bb);
    if (!batch) fail("the batch dims of " + shapeText(a.shape()) + " and " + shapeText(b.shape()) + " do not broadcast");
    Shape out = *batch;
    if (!av) out.push_back(M);
    if (!bv) out.push_back(N);
    // Offsets of each batch's matrices, in matrices.
    const std::vector<int64_t> oa = broadcastIndex(ba, *batch), ob = broadcastIndex(bb, *batch);
    const size_t nb = oa.size();
    const DType r = ty.dtype;
    if (isFloat(r)) {
      const DType accT = accumulatorOf(ty);
      if (!isFloat(accT)) fail("@accum(" + dtypeText(accT) + ") on a float product");
      // Operands in the result dtype (fp8 operands of an f32 product convert exactly).
      const std::vector<double> va = valuesF64(a, r), vb = valuesF64(b, r);
      std::vector<double> res(nb * size_t(M * N));
      withRounder(accT, [&](auto round) {
        std::vector<double> acc(static_cast<size_t>(N));
        for (size_t q = 0; q < nb; ++q) {
          const double *A = va.data() + oa[q] * M * K, *B = vb.data() + ob[q] * K * N;
          for (int64_t i = 0; i < M; ++i) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t k = 0; k < K; ++k) {
              const double aik = A[i * K + k];
              const double *row = B + k * N;
              for (int64_t j = 0; j < N; ++j) acc[size_t(j)] = round(acc[size_t(j)] + aik * row[j]);
            }
            std::copy(acc.begin(), acc.end(), res.begin() + std::ptrdiff_t((q * size_t(M) + size_t(i)) * size_t(N)));
          }
        }
      });
      return tensorFromF64(out, r, res, ty.policies);
    }
    const std::vector<int64_t> va = valuesI64(a, r), vb = valuesI64(b, r);
    std::vector<int64_t> res(nb * size_t(M * N), 0);
    for (size_t q = 0; q < nb; ++q) {
      const int64_t *A = va.data() + oa[q] * M * K, *B = vb.data() + ob[q] * K * N;
      int64_t *C = res.data() + q * size_t(M * N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t j = 0; j < N; ++j) C[i * N + j] = wrapAdd(C[i * N + j], wrapMul(A[i * K + k], B[k * N + j]));
    }
    return tensorFromI64(out, r, res, ty.policies);
  }

  Tensor transpose(const Tensor &x, const std::vector<int64_t> &perm) {
    const size_t rank = static_cast<size_t>(x.ndim());
    if (perm.size() != rank) fail("a perm of length " + std::to_string(perm.size()) + " for rank " + std::to_string(rank));
    std::vector<bool> seen(rank, false);
    const Shape st = stridesOf(x.shape());
    Shape out, strides;
    for (int64_t p : perm) {
      if (p < 0 || static_cast<size_t>(p) >= rank || seen[size_t(p)]) fail("the perm is not a permutation");
      seen[size_t(p)] = true;
      out.push_back(x.shape()[size_t(p)]);
      strides.push_back(st[size_t(p)]);
    }
    return gatherElements(x, out, affineIndex(out, 0, strides));
  }

  // start/stop clipped as Python's slice.indices for a positive step.
  Tensor slice(const Op &op, const Tensor &x) {
    const std::vector<Dim> &start = dimsAttr(op, "start"), &stop = dimsAttr(op, "stop");
    const std::vector<int64_t> &step = intsAttr(op, "step");
    const size_t rank = static_cast<size_t>(x.ndim());
    if (start.size() != rank || stop.size() != rank || step.size() != rank) fail("start, stop and step are not one per axis");
    const Shape st = stridesOf(x.shape());
    Shape out, strides;
    int64_t base = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = x.shape()[d], s = step[d];
      if (s <= 0) fail("step " + std::to_string(s) + " on axis " + std::to_string(d) + " (steps are positive)");
      auto clip = [n](int64_t v) {
        if (v < 0) v += n;
        return std::clamp<int64_t>(v, 0, n);
      };
      const int64_t lo = clip(dim(start[d])), hi = clip(dim(stop[d]));
      out.push_back(hi > lo ? (hi - lo + s - 1) / s : 0);
      base += lo * st[d];
      strides.push_back(s * st[d]);
    }
    return gatherElements(x, out, affineIndex(out, base, strides));
  }

  Tensor reverse(const Tensor &x, const std::vector<int64_t> &axes) {
    const size_t rank = static_cast<size_t>(x.ndim());
    Shape strides = stridesOf(x.shape());
    std::vector<bool> flip(rank, false);
    for (int64_t a : axes) flip[normalizeAxis(a, rank)] = true;
    int64_t base = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (!flip[d] || x.shape()[d] == 0) continue;
      base += (x.shape()[d] - 1) * strides[d];
      strides[d] = -strides[d];
    }
    return gatherElements(x, x.shape(), affineIndex(x.shape(), base, strides));
  }

  // Operands converted to the result dtype, then joined along the axis.
  Tensor concat(const std::vector<Tensor> &xs, int64_t axis, const Type &ty) {
    if (xs.empty()) fail("concat of nothing");
    const size_t rank = static_cast<size_t>(xs[0].ndim());
    const size_t ax = normalizeAxis(axis, rank);
    Shape out = xs[0].shape();
    out[ax] = 0;
    for (const Tensor &x : xs) {
      bool fits = static_cast<size_t>(x.ndim()) == rank;
      for (size_t d = 0; fits && d < rank; ++d) fits = d == ax || x.shape()[d] == out[d];
      if (!fits) fail("cannot concatenate " + shapeText(x.shape()) + " with " + shapeText(xs[0].shape()) + " along axis " + std::to_string(ax));
      out[ax] += x.shape()[ax];
    }
    Tensor t = Tensor::empty(out, ty.dtype);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < ax; ++d) outer *= out[d];
    for (size_t d = ax + 1; d < rank; ++d) inner *= out[d];
    const size_t w = t.itemsize();
    auto *dst = static_cast<unsigned char *>(t.data());
    int64_t offset = 0; // along the axis
    for (const Tensor &x : xs) {
      const Tensor c = x.dtype() == ty.dtype ? x : x.cast(ty.dtype, roundingOf(ty.policies));
      const auto *src = static_cast<const unsigned char *>(c.data());
      const int64_t chunk = x.shape()[ax] * inner;
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + size_t(o * out[ax] * inner + offset * inner) * w, src + size_t(o * chunk) * w, size_t(chunk) * w);
      offset += x.shape()[ax];
    }
    return t;
  }

  // torch.gather: out[p] = x[p with p[axis] = indices[p]]; indices has x's rank, its extents at
  // most x's off the axis, and every index lies in [0, x.shape[axis]).
  Tensor gather(const Tensor &x, const Tensor &indices, int64_t axis) {
    const size_t rank = static_cast<size_t>(x.ndim());
    if (static_cast<size_t>(indices.ndim()) != rank) fail("indices of rank " + std::to_string(indices.ndim()) + " for rank " + std::to_string(rank));
    if (!isInteger(indices.dtype())) fail("indices of dtype " + dtypeText(indices.dtype()));
    const size_t ax = normalizeAxis(axis, rank);
    for (size_t d = 0; d < rank; ++d)
      if (d != ax && indices.shape()[d] > x.shape()[d])
        fail("indices of shape " + shapeText(indices.shape()) + " exceed x's shape " + shapeText(x.shape()) + " on axis " + std::to_string(d));
    const std::vector<int64_t> iv = valuesI64(indices, indices.dtype());
    Shape xs = stridesOf(x.shape());
    const int64_t axisStride = xs[ax];
    xs[ax] = 0; // the index supplies this axis
    std::vector<int64_t> src = affineIndex(indices.shape(), 0, xs);
    const int64_t n = x.shape()[ax];
    for (size_t i = 0; i < src.size(); ++i) {
      if (iv[i] < 0 || iv[i] >= n)
        failProgram("index " + std::to_string(iv[i]) + " is out of range for axis " + std::to_string(ax) + " of size " + std::to_string(n));
      src[i] += iv[i] * axisStride;
    }
    return gatherElements(x, indices.shape(), src);
  }

  // numpy.take along an axis: out = x[..., indices, ...]; negative indices count from the end.
  Tensor take(const Tensor &x, const Tensor &indices, int64_t axis) {
    const size_t rank = static_cast<size_t>(x.ndim());
    const size_t ax = normalizeAxis(axis, rank);
    if (!isInteger(indices.dtype())) fail("indices of dtype " + dtypeText(indices.dtype()));
    const std::vector<int64_t> iv = valuesI64(indices, indices.dtype());
    Shape out(x.shape().begin(), x.shape().begin() + std::ptrdiff_t(ax));
    out.insert(out.end(), indices.shape().begin(), indices.shape().end());
    out.insert(out.end(), x.shape().begin() + std::ptrdiff_t(ax) + 1, x.shape().end());
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < ax; ++d) outer *= x.shape()[d];
    for (size_t d = ax + 1; d < rank; ++d) inner *= x.shape()[d];
    const int64_t n = x.shape()[ax];
    std::vector<int64_t> src;
    src.reserve(size_t(numelOf(out)));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : iv) {
        int64_t j = i < 0 ? i + n : i;
        if (j < 0 || j >= n) failProgram("index " + std::to_string(i) + " is out of range for axis " + std::to_string(ax) + " of size " + std::to_string(n));
        for (int64_t e = 0; e < inner; ++e) src.push_back((o * n + j) * inner + e);
      }
    return gatherElements(x, out, src);
  }

  Tensor constant(const Op &op) {
    const DTypeAttr &d = dtypeAttr(op, "dtype");
    Shape s = shape(dimsAttr(op, "shape"));
    const AttrValue *v = op.attr("value");
    if (!v) fail("the attribute `value` is missing");
    unsigned char one[8] = {};
    const rt::Rounding r = roundingOf(d.policies);
    if (auto *i = std::get_if<int64_t>(v)) rt::storeI64(d.dtype, one, *i, r);
    else if (auto *f = std::get_if<double>(v)) rt::storeF64(d.dtype, one, *f, r);
    else if (auto *b = std::get_if<bool>(v)) rt::storeI64(d.dtype, one, *b ? 1 : 0, r);
    else fail("the value is not a number");
    Tensor t = Tensor::empty(s, d.dtype);
    const size_t w = t.itemsize();
    auto *dst = static_cast<unsigned char *>(t.data());
    for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(dst + size_t(i) * w, one, w);
    return t;
  }

  Tensor iota(const Op &op) {
    const DTypeAttr &d = dtypeAttr(op, "dtype");
    Shape s = shape(dimsAttr(op, "shape"));
    const size_t ax = normalizeAxis(intAttr(op, "axis"), s.size());
    Shape strides(s.size(), 0);
    strides[ax] = 1;
    return tensorFromI64(s, d.dtype, affineIndex(s, 0, strides), d.policies);
  }

  // Random draws by rt's Philox scheme (runtime/Random.h): element i of the result is a function
  // of the key and i only.
  Tensor random(const Op &op, const std::vector<Tensor> &in) {
    if (in.empty()) fail("takes a key first");
    const rt::Key key = keyOf(in[0]);
    Shape s = shape(dimsAttr(op, "shape"));
    const DTypeAttr *d = op.attrAs<DTypeAttr>("dtype");
    const DType dt = d ? d->dtype : DType::F32;
    switch (op.kind) {
    case OpKind::RandomBits: {
      if (in.size() != 1) fail("takes one operand, the key");
      std::vector<uint32_t> words(static_cast<size_t>(numelOf(s)));
      rt::randomWords(key, words.data(), static_cast<int64_t>(words.size()));
      return tensorFromI64(s, DType::I64, std::vector<int64_t>(words.begin(), words.end()), {});
    }
    case OpKind::RandomNormal:
      if (in.size() != 1) fail("takes one operand, the key");
      return rt::normal(key, s, dt);
    default: {
      if (in.size() != 1 && in.size() != 3) fail("takes a key, or a key, minval and maxval");
      double lo = 0, hi = 1;
      if (in.size() == 3) {
        if (in[1].numel() != 1 || in[2].numel() != 1) fail("minval and maxval are not scalars");
        lo = in[1].toF64(0);
        hi = in[2].toF64(0);
      }
      return rt::uniform(key, s, dt, lo, hi);
    }
    }
  }

  // scan (ir/Scan.h): the body graph evaluated once per step on the consts, the carries and
  // step i's row of each xs; the carries pass from step to step and each step's ys are copied
  // into row i of the stacked results (steps from the last row down with reverse).
  std::vector<Tensor> scan(const Op &op, const std::vector<Tensor> &in) {
    auto s = scanShape(op);
    if (!s || !op.body) fail("a scan without its body or its attributes");
    const int64_t n = dim(s->length);
    std::vector<Tensor> state(in.begin(), in.begin() + long(s->consts + s->carries));
    std::vector<Tensor> ys;
    for (size_t k = s->carries; k < op.results.size(); ++k) ys.push_back(Tensor::empty(shape(op.results[k]->type.dims), op.results[k]->type.dtype));
    for (int64_t step = 0; step < n; ++step) {
      const int64_t i = s->reverse ? n - 1 - step : step;
      std::vector<Tensor> args = state;
      for (size_t x = 0; x < s->xs; ++x) {
        const Tensor &xs = in[s->consts + s->carries + x];
        if (xs.ndim() == 0 || xs.shape()[0] != n) fail("xs " + std::to_string(x) + " has no row " + std::to_string(i));
        Tensor row = Tensor::empty(std::vector<int64_t>(xs.shape().begin() + 1, xs.shape().end()), xs.dtype());
        std::memcpy(row.data(), static_cast<const std::byte *>(xs.data()) + size_t(i) * row.nbytes(), row.nbytes());
        args.push_back(std::move(row));
      }
      std::vector<Tensor> out = evaluate(m_, *op.body, args, kernels_, sizes_);
      for (size_t c = 0; c < s->carries; ++c) state[s->consts + c] = out[c];
      for (size_t y = 0; y < ys.size(); ++y) {
        const Tensor &r = out[s->carries + y];
        std::memcpy(static_cast<std::byte *>(ys[y].data()) + size_t(i) * r.nbytes(), r.data(), r.nbytes());
      }
    }
    std::vector<Tensor> results(state.begin() + long(s->consts), state.end());
    results.insert(results.end(), ys.begin(), ys.end());
    return results;
  }

  std::vector<Tensor> kernelCall(const Op &op, const std::vector<Tensor> &in) {
    const std::string *callee = op.attrAs<std::string>("callee");
    const std::string name = callee ? *callee : "?";
    if (!kernels_) fail("kernel `" + name + "` cannot run: no kernel runner");
    const KernelCallGrids grids = kernelCallGrids(op, [&](const Dim &d) { return dim(d); });
    // Copies of the operands the kernel writes, so that the graph's values stay unchanged (on
    // the device where only the device holds them: Tensor::clone).
    // A donated parameter read last here and nowhere else in the operands is written in place.
    std::vector<Tensor> operands(in);
    for (size_t i : kernels_->writtenOperands(op)) {
      if (i >= operands.size()) continue;
      const Value *v = op.operands[i];
      const bool once = std::count(op.operands.begin(), op.operands.end(), v) == 1;
      auto lu = lastUse_.find(v);
      const bool last = lu != lastUse_.end() && lu->second < g_.ops.size() && g_.ops[lu->second] == &op;
      if (!(donated_.count(v) && once && last)) operands[i] = in[i].clone();
    }
    if (!grids.space.empty()) return kernels_->runTuned(op, operands, grids.grid, grids.space);
    return kernels_->run(op, operands, grids.grid);
  }

  const Module &m_;
  const Graph &g_;
  const KernelRunner *kernels_;
  SymbolSizes sizes_;
  std::unordered_map<const Value *, Tensor> values_;
  std::unordered_map<const Value *, size_t> lastUse_;
  std::unordered_set<const Value *> donated_;
};

bool isIdentifier(const std::string &s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

} // namespace

rt::Tensor keyTensor(rt::Key key) {
  return Tensor::fromI64({2}, DType::I64, std::vector<int64_t>{int64_t(key.k0), int64_t(key.k1)});
}

rt::Key keyOf(const rt::Tensor &t) {
  if (t.dtype() != DType::I64 || t.shape() != Shape{2})
    throw std::invalid_argument("a key is an i64 tensor of shape (2,), not a " + dtypeText(t.dtype()) + " tensor of shape " + shapeText(t.shape()));
  const int64_t *w = t.data<int64_t>();
  for (int i = 0; i < 2; ++i)
    if (w[i] < 0 || w[i] > int64_t(UINT32_MAX)) throw std::invalid_argument("a key word " + std::to_string(w[i]) + " outside [0, 2^32)");
  return rt::Key{uint32_t(w[0]), uint32_t(w[1])};
}

int64_t evaluateDim(const Dim &d, const SymbolSizes &sizes) { return floorQ(evaluateDimQ(d, sizes)); }

KernelCallGrids kernelCallGrids(const Op &op, const std::function<int64_t(const Dim &)> &dim) {
  KernelCallGrids out;
  if (const auto *grid = op.attrAs<std::vector<Dim>>("grid"))
    for (const Dim &d : *grid) out.grid.push_back(dim(d));
  const size_t rank = out.grid.size();
  if (const auto *space = op.attrAs<std::vector<Dim>>("grid_space"); space && rank && space->size() % rank == 0)
    for (size_t at = 0; at < space->size(); at += rank) {
      out.space.emplace_back();
      for (size_t i = 0; i < rank; ++i) out.space.back().push_back(dim((*space)[at + i]));
    }
  return out;
}

SymbolSizes bindSymbols(const Module &m, const Graph &g, const std::vector<Tensor> &inputs, const SymbolSizes &given) {
  const std::string where = "graph @" + g.name;
  if (inputs.size() != g.params.size())
    throw EvalError(where, "takes " + std::to_string(g.params.size()) + " inputs, not " + std::to_string(inputs.size()));
  SymbolSizes sizes;
  std::map<std::string, std::string> from; // symbol -> where its size came from
  for (const auto &[sym, n] : given) {
    if (n < 0) throw EvalError(where, "the given size of symbol `" + sym + "` is negative (" + std::to_string(n) + ")");
    sizes[sym] = n;
    from[sym] = "the given sizes";
  }
  auto input = [&](size_t i) { return "input " + std::to_string(i) + " (%" + g.params[i]->name + ")"; };
  auto bind = [&](const std::string &sym, int64_t n, const std::string &source) {
    auto it = sizes.find(sym);
    if (it == sizes.end()) {
      sizes[sym] = n;
      from[sym] = source;
    } else if (it->second != n) {
      throw EvalError(where, "symbol `" + sym + "` is " + std::to_string(it->second) + " (from " + from[sym] + ") and " +
                                 std::to_string(n) + " (from " + source + ")");
    }
  };
  struct Pending {
    size_t input, axis;
    Dim dim;
    int64_t size;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Type &ty = g.params[i]->type;
    const Tensor &t = inputs[i];
    if (ty.isKey()) {
      try {
        (void)keyOf(t);
      } catch (const std::invalid_argument &e) {
        throw EvalError(where, input(i) + " is a key parameter: " + e.what());
      }
      continue;
    }
    if (t.dtype() != ty.dtype)
      throw EvalError(where, input(i) + " is " + dtypeText(t.dtype()) + ", but the parameter's type is " + ty.str());
    if (static_cast<size_t>(t.ndim()) != ty.rank())
      throw EvalError(where, input(i) + " has shape " + shapeText(t.shape()) + ", but the parameter's type is " + ty.str());
    for (size_t d = 0; d < ty.rank(); ++d) {
      const Dim &dm = ty.dims[d];
      const int64_t n = t.shape()[d];
      const std::string src = input(i) + " axis " + std::to_string(d);
      if (dm.hasUnknown()) continue;
      if (auto c = dm.constantValue()) {
        if (*c != n) throw EvalError(where, src + " has size " + std::to_string(n) + ", but the parameter's type is " + ty.str());
      } else if (dm.isSymbol()) {
        bind(dm.str(), n, src);
      } else {
        pending.push_back({i, d, dm, n});
      }
    }
    // A run-time int parameter names the size of its own name (lowering's rule).
    if (ty.rank() == 0 && ty.dtype == DType::I64 && isIdentifier(g.params[i]->name))
      bind(g.params[i]->name, t.toI64(0), input(i) + "'s value");
  }
  // Compound dims: checked once their symbols are bound; a dim linear in its one unbound symbol
  // determines it ("2*N" of size 8 gives N = 4).
  for (bool progress = true; progress && !pending.empty();) {
    progress = false;
    for (size_t p = 0; p < pending.size(); ++p) {
      const Pending &q = pending[p];
      const std::string src = input(q.input) + " axis " + std::to_string(q.axis);
      std::vector<std::string> unbound;
      for (const std::string &s : q.dim.symbols())
        if (!sizes.count(s)) unbound.push_back(s);
      std::optional<int64_t> value;
      if (unbound.empty()) {
        try {
          value = evaluateDim(q.dim, sizes);
        } catch (const std::invalid_argument &) {
          continue; // an opaque atom mentions a symbol not bound yet
        }
        if (*value != q.size)
          throw EvalError(where, src + " has size " + std::to_string(q.size) + ", but its dim \"" + q.dim.str() + "\" is " +
                                     std::to_string(*value) + " for the sizes bound so far");
      } else if (unbound.size() == 1) {
        try {
          SymbolSizes trial = sizes;
          auto at = [&](int64_t v) {
            trial[unbound[0]] = v;
            return evaluateDimQ(q.dim, trial);
          };
          Q f1 = at(1), f2 = at(2), slope = f2 - f1, icept = f1 - slope;
          if (slope.num == 0) continue;
          Q sol = (Q{q.size, 1} - icept) / slope;
          if (sol.den != 1 || sol.num < 1 || !(at(int64_t(sol.num)) == Q{q.size, 1}))
            throw EvalError(where, src + " has size " + std::to_string(q.size) + ", which no positive `" + unbound[0] +
                                       "` gives to its dim \"" + q.dim.str() + "\"");
          bind(unbound[0], int64_t(sol.num), src + " (solving \"" + q.dim.str() + "\")");
        } catch (const std::invalid_argument &) {
          continue;
        }
      } else {
        continue;
      }
      pending.erase(pending.begin() + std::ptrdiff_t(p));
      progress = true;
      break;
    }
  }
  if (!pending.empty()) {
    const Pending &q = pending[0];
    std::string missing;
    for (const std::string &s : q.dim.symbols())
      if (!sizes.count(s)) missing += (missing.empty() ? "`" : ", `") + s + "`";
    throw EvalError(where, "the size" + std::string(missing.find(',') != std::string::npos ? "s of " : " of ") +
                               (missing.empty() ? "the dim" : missing) + " cannot be determined from the inputs (input " +
                               std::to_string(q.input) + " axis " + std::to_string(q.axis) + " is \"" + q.dim.str() + "\")");
  }
  // A symbol that only ops mention (a compile-time int of the generic signature, such as
  // `heads` in "D/heads") has to be given; say so before running anything.
  for (const Op *op : g.ops) {
    std::vector<const Dim *> dims;
    for (const Value *r : op->results)
      for (const Dim &d : r->type.dims) dims.push_back(&d);
    for (const Attr &a : op->attrs)
      if (const auto *ds = std::get_if<std::vector<Dim>>(&a.value))
        for (const Dim &d : *ds) dims.push_back(&d);
    for (const Dim *d : dims)
      for (const std::string &s : d->symbols()) {
        if (sizes.count(s)) continue;
        std::string at = op->loc.valid() && op->loc.file <= m.files.size()
                             ? m.files[op->loc.file - 1] + ":" + std::to_string(op->loc.line) + ":" + std::to_string(op->loc.col)
                             : "graph @" + g.name;
        throw EvalError(where, "the size of symbol `" + s + "` is not determined by the inputs; give it with the symbol sizes (" +
                                   std::string(opSpelling(op->kind)) + (op->results.empty() ? "" : " %" + std::to_string(op->results[0]->id)) +
                                   " at " + at + " uses it)");
      }
  }
  return sizes;
}

std::vector<rt::Tensor> evaluate(const Module &m, const Graph &g, const std::vector<rt::Tensor> &inputs,
                                 const KernelRunner *kernels, const SymbolSizes &given, const std::vector<bool> &donated) {
  SymbolSizes sizes = bindSymbols(m, g, inputs, given);
  Evaluator e(m, g, kernels, std::move(sizes));
  for (size_t i = 0; i < donated.size() && i < g.params.size(); ++i)
    if (donated[i]) e.donate(g.params[i]);
  return e.run(inputs);
}

rt::Tensor runCollective(const Op &op, const rt::Tensor &x) {
  namespace d = rt::dist;
  auto str = [&](const char *n) { const std::string *v = op.attrAs<std::string>(n); return v ? *v : std::string(); };
  auto num = [&](const char *n) { const int64_t *v = op.attrAs<int64_t>(n); return v ? *v : int64_t(0); };
  const std::string axes = str("axes");
  const std::string what = std::string(opSpelling(op.kind)) + " %" + std::to_string(op.result() ? op.result()->id : 0);
  auto red = [&] {
    auto r = d::reduceOpFromName(str("op"));
    if (!r) throw d::DistError(what + ": no reduction `" + str("op") + "`");
    return *r;
  };
  // The group the graph was lowered for must be the run's: a graph lowered without the mesh
  // (tsrc) would otherwise compute with other shapes.
  const int64_t group = num("group");
  const int64_t have = int64_t(d::groupOf(axes).size());
  if (group != have)
    throw d::DistError(what + " was lowered for a group of " + std::to_string(group) + " ranks over " + (axes.empty() ? "every rank" : "mesh axis " + axes) +
                       ", but the run has " + std::to_string(have));
  d::countCollective(std::string(opSpelling(op.kind)));
  switch (op.kind) {
  case OpKind::AllReduce: return d::allReduce(x, red(), axes, what);
  case OpKind::AllGather: return d::allGather(x, axes, num("dim"), what);
  case OpKind::ReduceScatter: return d::reduceScatter(x, red(), axes, num("dim"), what);
  case OpKind::DistBroadcast: return d::broadcast(x, num("src"), axes, what);
  case OpKind::DistReduce: return d::reduceTo(x, num("dst"), axes, what);
  case OpKind::AllToAll: return d::allToAll(x, num("split_dim"), num("concat_dim"), axes, what);
  default: throw d::DistError(what + ": not a collective");
  }
}

} // namespace tsr::ir
