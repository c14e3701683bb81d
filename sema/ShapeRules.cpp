#include "sema/ShapeRules.h"

#include <algorithm>

namespace tsr::sema {

void Reporter::addNotes() const {
  if (operandNotes.empty()) return;
  std::string text;
  SourceRange first;
  for (size_t i = 0; i < operandNotes.size(); ++i) {
    const auto &[what, where] = operandNotes[i];
    if (i) text += "; ";
    text += what;
    if (where.valid() && diags.sources().has(where.file)) text += " (" + diags.sources().describe(where) + ")";
  }
  diags.note(text);
}

Dim product(const std::vector<Dim> &dims) {
  Dim p = Dim::constant(1);
  for (const Dim &d : dims) p = p * d;
  return p;
}

bool shapesProvablyDiffer(const std::vector<Dim> &a, const std::vector<Dim> &b) {
  if (a.size() != b.size()) return true;
  for (size_t i = 0; i < a.size(); ++i)
    if (provablyDifferent(a[i], b[i])) return true;
  return false;
}

std::optional<std::vector<Dim>> broadcastShapes(const std::vector<Dim> &a, const std::vector<Dim> &b, const Reporter &r) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Dim> out(n);
  for (size_t i = 0; i < n; ++i) {
    // Right-aligned positions.
    const Dim *x = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim *y = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!x) { out[i] = *y; continue; }
    if (!y) { out[i] = *x; continue; }
    if (*x == *y) out[i] = *x;
    else if (x->isOne()) out[i] = *y;
    else if (y->isOne()) out[i] = *x;
    else if (x->isUnknown() || x->hasUnknown()) out[i] = *y;
    else if (y->isUnknown() || y->hasUnknown()) out[i] = *x;
    else if (provablyDifferent(*x, *y)) {
      r.diags.report(DiagKind::BroadcastMismatch, r.range, {shapeStr(a), shapeStr(b), dimStr(*x), dimStr(*y)});
      r.addNotes();
      return std::nullopt;
    } else {
      out[i] = *x; // undecidable here: a run-time guard checks it
    }
  }
  return out;
}

std::optional<DType> arithmeticDType(DType a, DType b, const Reporter &r) {
  if (isFp8(a) || isFp8(b)) {
    r.diags.report(DiagKind::Fp8Arithmetic, r.range, {std::string(dtypeName(isFp8(a) ? a : b))});
    return std::nullopt;
  }
  auto p = promote(a, b);
  if (!p) {
    r.diags.report(DiagKind::NoPromotion, r.range, {std::string(dtypeName(a)), std::string(dtypeName(b))});
    return std::nullopt;
  }
  return p;
}

Policies mergePolicies(const Policies &a, const Policies &b, const Reporter &r) {
  Policies out = a;
  if (b.accum) {
    if (a.accum && *a.accum != *b.accum) {
      r.diags.report(DiagKind::PolicyConflict, r.range,
                     {"@accum(" + std::string(dtypeName(*a.accum)) + ")", "@accum(" + std::string(dtypeName(*b.accum)) + ")"});
      r.addNotes();
    } else {
      out.accum = b.accum;
    }
  }
  if (b.lossScale) {
    if (a.lossScale && *a.lossScale != *b.lossScale) {
      Policies pa, pb;
      pa.lossScale = a.lossScale;
      pb.lossScale = b.lossScale;
      r.diags.report(DiagKind::PolicyConflict, r.range, {pa.str().substr(1), pb.str().substr(1)});
      r.addNotes();
    } else {
      out.lossScale = b.lossScale;
    }
  }
  out.stochasticRound = a.stochasticRound || b.stochasticRound;
  out.saturate = a.saturate || b.saturate;
  return out;
}

namespace {

// The dtype of a Python number as a weak operand.
std::optional<WeakScalar> weakKind(const Type &t) {
  switch (t.kind) {
  case TypeKind::Bool: return WeakScalar::Bool;
  case TypeKind::Int: return WeakScalar::Int;
  case TypeKind::Float: return WeakScalar::Float;
  default: return std::nullopt;
  }
}

TypeRef pyNumberResult(std::string_view op, ElementwiseKind kind, const Type &a, const Type &b) {
  if (kind == ElementwiseKind::Comparison) {
    // Comparing a run-time int (or an already run-time bool) gives a run-time bool.
    bool runtime = (a.intValue && isRuntimeDim(*a.intValue)) || (b.intValue && isRuntimeDim(*b.intValue)) ||
                   a.runtime || b.runtime || (a.kind == TypeKind::Float && !a.floatValue) || (b.kind == TypeKind::Float && !b.floatValue);
    auto result = [&](std::optional<bool> v) {
      Type t = *T::boolean(v);
      t.runtime = runtime && !v;
      return std::make_shared<const Type>(std::move(t));
    };
    std::optional<bool> v;
    if (a.intValue && b.intValue && a.intValue->isConstant() && b.intValue->isConstant()) {
      int64_t x = *a.intValue->constantValue(), y = *b.intValue->constantValue();
      if (op == "<") v = x < y; else if (op == ">") v = x > y; else if (op == "<=") v = x <= y;
      else if (op == ">=") v = x >= y; else if (op == "==") v = x == y; else if (op == "!=") v = x != y;
    } else if (a.intValue && b.intValue && (op == "==" || op == "!=") && *a.intValue == *b.intValue) {
      v = op == "==";
    }
    return result(v);
  }
  if (kind == ElementwiseKind::TrueDivide) {
    if (a.floatValue && b.floatValue && *b.floatValue != 0) return T::floating(*a.floatValue / *b.floatValue);
    return T::floating();
  }
  bool anyFloat = a.kind == TypeKind::Float || b.kind == TypeKind::Float;
  if (anyFloat) {
    std::optional<double> x = a.floatValue, y = b.floatValue;
    if (!x && a.intValue && a.intValue->constantValue()) x = static_cast<double>(*a.intValue->constantValue());
    if (!y && b.intValue && b.intValue->constantValue()) y = static_cast<double>(*b.intValue->constantValue());
    if (x && y) {
      if (op == "+") return T::floating(*x + *y);
      if (op == "-") return T::floating(*x - *y);
      if (op == "*") return T::floating(*x * *y);
    }
    return T::floating();
  }
  // int (or bool) arithmetic: sizes stay symbolic.
  if (a.intValue && b.intValue) {
    const Dim &x = *a.intValue, &y = *b.intValue;
    if (op == "+") return T::integer(x + y);
    if (op == "-") return T::integer(x - y);
    if (op == "*") return T::integer(x * y);
    if (op == "//") {
      auto cx = x.constantValue(), cy = y.constantValue();
      if (cx && cy && *cy != 0) {
        int64_t q = *cx / *cy;
        if ((*cx % *cy != 0) && ((*cx < 0) != (*cy < 0))) --q; // floor, as Python
        return T::integer(Dim::constant(q));
      }
      // D // heads: exact division as far as shapes are concerned (spec 5: exact-or-error when
      // it forms a shape, checked at run time).
      if (auto q = x.divide(y)) return T::integer(*q);
      return T::integer();
    }
    if (op == "%" || op == "**" || op == "<<" || op == ">>" || op == "&" || op == "|" || op == "^") {
      auto cx = x.constantValue(), cy = y.constantValue();
      if (cx && cy) {
        if (op == "%" && *cy != 0) { int64_t m = *cx % *cy; if (m != 0 && ((m < 0) != (*cy < 0))) m += *cy; return T::integer(Dim::constant(m)); }
        if (op == "&") return T::integer(Dim::constant(*cx & *cy));
        if (op == "|") return T::integer(Dim::constant(*cx | *cy));
        if (op == "^") return T::integer(Dim::constant(*cx ^ *cy));
        if (op == "**" && *cy >= 0 && *cy < 63) {
          int64_t p = 1;
          bool overflow = false;
          for (int64_t i = 0; i < *cy && !overflow; ++i) overflow = __builtin_mul_overflow(p, *cx, &p);
          if (!overflow) return T::integer(Dim::constant(p));
        }
      }
      return T::integer();
    }
  }
  if (a.kind == TypeKind::Bool && b.kind == TypeKind::Bool && (op == "&" || op == "|" || op == "^")) return T::boolean();
  return T::integer();
}

bool isNumericLike(const Type &t) {
  return t.kind == TypeKind::Tensor || t.kind == TypeKind::Tile || t.isPyNumber();
}

} // namespace

TypeRef elementwise(std::string_view op, ElementwiseKind kind, const TypeRef &a, const TypeRef &b, const Reporter &r) {
  if (!a || !b || a->is(TypeKind::Unknown) || b->is(TypeKind::Unknown)) return T::unknown();
  const Type &x = *a, &y = *b;
  if (!isNumericLike(x) || !isNumericLike(y)) {
    r.diags.report(DiagKind::OperandTypes, r.range, {std::string(op), typeStr(a), typeStr(b)});
    return T::unknown();
  }
  if (x.isPyNumber() && y.isPyNumber()) return pyNumberResult(op, kind, x, y);

  // At least one tensor or tile. Tiles combine with tiles, with 0-d tensors (a kernel's scalar
  // parameters) and with Python numbers; a whole tensor does not meet a tile.
  bool tile = x.kind == TypeKind::Tile || y.kind == TypeKind::Tile;
  if (tile) {
    auto wholeTensor = [](const Type &t) { return t.kind == TypeKind::Tensor && !(t.rankKnown && t.dims.empty()); };
    if (wholeTensor(x) || wholeTensor(y)) {
      r.diags.report(DiagKind::OperandTypes, r.range, {std::string(op), typeStr(a), typeStr(b)});
      r.diags.note("a kernel works on tiles: load a tile of the tensor with tile.load(X[...]) first");
      return T::unknown();
    }
  }
  // Dtype.
  DType dt;
  if (x.isPyNumber() || y.isPyNumber()) {
    const Type &t = x.isPyNumber() ? y : x;
    const Type &s = x.isPyNumber() ? x : y;
    if (isFp8(t.dtype)) {
      r.diags.report(DiagKind::Fp8Arithmetic, r.range, {std::string(dtypeName(t.dtype))});
      return T::unknown();
    }
    dt = promoteWithWeak(t.dtype, *weakKind(s));
  } else {
    auto p = arithmeticDType(x.dtype, y.dtype, r);
    if (!p) return T::unknown();
    dt = *p;
  }
  // Arithmetic on two bools has no meaning users agree on (NumPy gives logical or for +, an
  // error for -): ask for a cast. Bool with a number promotes as the lattice says.
  auto isBool = [](const Type &t) { return t.kind == TypeKind::Bool || (t.isTensorLike() && t.dtype == DType::Bool); };
  if ((kind == ElementwiseKind::Arithmetic || kind == ElementwiseKind::TrueDivide) && isBool(x) && isBool(y)) {
    r.diags.report(DiagKind::BoolArithmetic, r.range);
    return T::unknown();
  }
  if (kind == ElementwiseKind::Bitwise && isFloat(dt)) {
    r.diags.report(DiagKind::IntegerOnly, r.range, {"operator `" + std::string(op) + "`", std::string(dtypeName(dt))});
    return T::unknown();
  }
  if (kind == ElementwiseKind::TrueDivide && !isFloat(dt)) dt = DType::F32;
  // Shape.
  std::vector<Dim> dims;
  bool rankKnown = true;
  auto shapeOf = [](const Type &t) -> const std::vector<Dim> * {
    static const std::vector<Dim> none;
    return t.isPyNumber() ? &none : &t.dims;
  };
  if ((x.kind == TypeKind::Tensor && !x.rankKnown) || (y.kind == TypeKind::Tensor && !y.rankKnown)) {
    rankKnown = false;
  } else {
    auto b2 = broadcastShapes(*shapeOf(x), *shapeOf(y), r);
    if (!b2) return T::unknown();
    dims = std::move(*b2);
  }
  Policies pol = mergePolicies(x.isPyNumber() ? Policies{} : x.policies, y.isPyNumber() ? Policies{} : y.policies, r);
  if (kind == ElementwiseKind::Comparison) {
    dt = DType::Bool;
    pol = {};
  }
  if (tile) return T::tile(std::move(dims), dt);
  if (!rankKnown) return T::tensorUnknownRank(dt);
  return T::tensor(std::move(dims), dt, pol);
}

TypeRef unaryElementwise(std::string_view op, const TypeRef &x, const Reporter &r, bool promoteInt) {
  if (!x || x->is(TypeKind::Unknown)) return T::unknown();
  if (x->isPyNumber()) return promoteInt ? T::floating() : x;
  if (!x->isTensorLike()) {
    r.diags.report(DiagKind::OperandType, r.range, {std::string(op), typeStr(x)});
    return T::unknown();
  }
  if (isFp8(x->dtype)) {
    r.diags.report(DiagKind::Fp8Arithmetic, r.range, {std::string(dtypeName(x->dtype))});
    return T::unknown();
  }
  if (promoteInt && !isFloat(x->dtype)) return T::withDType(x, DType::F32, {});
  return x;
}

TypeRef matmul(const TypeRef &a, const TypeRef &b, const Reporter &r) {
  if (!a || !b || a->is(TypeKind::Unknown) || b->is(TypeKind::Unknown)) return T::unknown();
  const Type &x = *a, &y = *b;
  bool tile = x.kind == TypeKind::Tile || y.kind == TypeKind::Tile;
  if (!x.isTensorLike() || !y.isTensorLike() || (tile && (x.kind != TypeKind::Tile || y.kind != TypeKind::Tile))) {
    r.diags.report(DiagKind::OperandTypes, r.range, {"@", typeStr(a), typeStr(b)});
    return T::unknown();
  }
  // Matrix products accept fp8 operands (spec 6); they promote as their storage types would.
  DType dt;
  if (x.dtype == y.dtype) dt = x.dtype;
  else if (isFp8(x.dtype) && isFp8(y.dtype)) dt = DType::F32;
  else if (isFp8(x.dtype) || isFp8(y.dtype)) {
    // fp8 operands are fine in a matrix product; mixing one with another dtype is not.
    r.diags.report(DiagKind::NoPromotion, r.range, {std::string(dtypeName(x.dtype)), std::string(dtypeName(y.dtype))});
    return T::unknown();
  } else {
    auto p = arithmeticDType(x.dtype, y.dtype, r);
    if (!p) return T::unknown();
    dt = *p;
  }
  if (isFp8(dt)) dt = DType::F32; // an fp8 product's result is f32 unless cast
  Policies pol = mergePolicies(x.policies, y.policies, r);
  if (!x.rankKnown || !y.rankKnown) return T::tensorUnknownRank(dt);
  if (x.dims.empty() || y.dims.empty()) {
    r.diags.report(DiagKind::MatmulScalar, r.range, {typeStr(x.dims.empty() ? a : b)});
    return T::unknown();
  }
  if (tile && (x.dims.size() != 2 || y.dims.size() != 2)) {
    r.diags.report(DiagKind::DotShape, r.range, {typeStr(a), typeStr(b)});
    return T::unknown();
  }
  std::vector<Dim> xa = x.dims, yb = y.dims;
  bool xVec = xa.size() == 1, yVec = yb.size() == 1;
  if (xVec) xa.insert(xa.begin(), Dim::constant(1));
  if (yVec) yb.push_back(Dim::constant(1));
  const Dim &k1 = xa.back(), &k2 = yb[yb.size() - 2];
  if (provablyDifferent(k1, k2)) {
    r.diags.report(DiagKind::MatmulInner, r.range, {dimStr(k1), dimStr(k2)});
    r.addNotes();
    return T::unknown();
  }
  std::vector<Dim> batchA(xa.begin(), xa.end() - 2), batchB(yb.begin(), yb.end() - 2);
  auto batch = broadcastShapes(batchA, batchB, r);
  if (!batch) return T::unknown();
  std::vector<Dim> out = *batch;
  if (!xVec) out.push_back(xa[xa.size() - 2]);
  if (!yVec) out.push_back(yb.back());
  if (tile) {
    // tile.dot of 16-bit or fp8 operands accumulates in f32 (tensor cores), as Triton's tl.dot.
    DType acc = isFloat(dt) && dtypeBits(dt) < 32 ? DType::F32 : dt;
    return T::tile(std::move(out), acc);
  }
  return T::tensor(std::move(out), dt, pol);
}

std::optional<size_t> normalizeAxis(int64_t axis, size_t rank, const Reporter &r) {
  int64_t n = static_cast<int64_t>(rank);
  if (axis < -n || axis >= n) {
    r.diags.report(DiagKind::AxisOutOfRange, r.range, {std::to_string(axis), std::to_string(rank)});
    return std::nullopt;
  }
  return static_cast<size_t>(axis < 0 ? axis + n : axis);
}

TypeRef reduce(const TypeRef &x, const std::vector<int64_t> &axes, bool all, bool keepdims,
               std::optional<DType> resultDType, const Reporter &r) {
  if (!x || x->is(TypeKind::Unknown)) return T::unknown();
  if (x->isPyNumber()) return x;
  if (!x->isTensorLike()) {
    r.diags.report(DiagKind::OperandType, r.range, {"reduction", typeStr(x)});
    return T::unknown();
  }
  if (isFp8(x->dtype)) {
    r.diags.report(DiagKind::Fp8Arithmetic, r.range, {std::string(dtypeName(x->dtype))});
    return T::unknown();
  }
  DType dt = resultDType ? *resultDType : x->dtype;
  if (!x->rankKnown) return all && !keepdims ? T::scalar(dt, x->policies) : T::tensorUnknownRank(dt);
  std::vector<bool> drop(x->dims.size(), all);
  for (int64_t a : axes) {
    auto n = normalizeAxis(a, x->dims.size(), r);
    if (!n) return T::unknown();
    drop[*n] = true;
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < x->dims.size(); ++i) {
    if (!drop[i]) out.push_back(x->dims[i]);
    else if (keepdims) out.push_back(Dim::constant(1));
  }
  if (x->is(TypeKind::Tile)) return T::tile(std::move(out), dt);
  return T::tensor(std::move(out), dt, x->policies);
}

Dim sliceExtent(const Dim &n, const std::optional<Dim> &lower, const std::optional<Dim> &upper, std::optional<int64_t> step) {
  int64_t s = step.value_or(1);
  auto cn = n.constantValue();
  auto resolve = [&](const std::optional<Dim> &v, bool isUpper) -> std::optional<Dim> {
    if (!v) return std::nullopt;
    auto c = v->constantValue();
    if (c && *c < 0) {
      if (cn) return Dim::constant(std::max<int64_t>(0, *cn + *c));
      return n + *v;
    }
    if (c && cn) return Dim::constant(std::min(*c, *cn));
    return v;
  };
  if (s > 0) {
    Dim lo = resolve(lower, false).value_or(Dim::constant(0));
    Dim hi = resolve(upper, true).value_or(n);
    Dim ext = hi - lo;
    if (auto c = ext.constantValue(); c && *c < 0) ext = Dim::constant(0);
    if (s == 1) return ext;
    if (auto c = ext.constantValue()) return Dim::constant((*c + s - 1) / s);
    // An extent that the step divides exactly (2*BLOCK by 2) stays a polynomial.
    if (auto q = ext.divide(Dim::constant(s)); q && q->str().find('/') == std::string::npos) return *q;
    return Dim::opaque("ceil((" + ext.str() + ")/" + std::to_string(s) + ")");
  }
  // Negative steps: x[::-1] keeps n elements; other forms with known constants fold.
  if (!lower && !upper) {
    if (s == -1) return n;
    if (cn) return Dim::constant((*cn + (-s) - 1) / (-s));
    return Dim::opaque("ceil((" + n.str() + ")/" + std::to_string(-s) + ")");
  }
  if (cn) {
    auto val = [&](const std::optional<Dim> &v, int64_t dflt) -> std::optional<int64_t> {
      if (!v) return dflt;
      auto c = v->constantValue();
      if (!c) return std::nullopt;
      return *c < 0 ? *c + *cn : *c;
    };
    auto lo = val(lower, *cn - 1), hi = val(upper, -1);
    if (lo && hi) {
      int64_t l = std::min(*lo, *cn - 1), h = std::max<int64_t>(*hi, -1);
      if (l <= h) return Dim::constant(0);
      return Dim::constant((l - h + (-s) - 1) / (-s));
    }
  }
  return Dim::unknown();
}

} // namespace tsr::sema
