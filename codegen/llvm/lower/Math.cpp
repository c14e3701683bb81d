// Elementwise ops and conversions: inline f32 math, Numeric.h's rounding, the scalar semantics of
// every unary, binary and comparison op, and the loops that apply them to tiles.
#include "codegen/llvm/Lowering.h"

namespace tsr::codegen::lower {

// ---- math (f32 inline code, branch-free, so that loops over tiles vectorize) ----

// exp(x) = 2^n * p(r) with n = round(x / ln 2), r = x - n ln 2 (Cody-Waite split of ln 2) and
// p the degree-7 polynomial of Cephes' expf (S. Moshier, Cephes Math Library 2.2, expf.c):
// relative error below 2 ulp on [-104, 89]. 2^n is built as two factors so that subnormal
// results and overflow to inf come out of the multiplications. exp2 takes r = (x - n) ln 2.
Value *Lowering::expF32(Value *x, bool base2) {
  Type *t = f32();
  Value *xc = intr(Intrinsic::minnum, {intr(Intrinsic::maxnum, {x, cf(t, base2 ? -151.0 : -104.0)}), cf(t, base2 ? 129.0 : 89.0)});
  Value *n, *r;
  if (base2) {
    n = intr(Intrinsic::roundeven, {xc});
    r = B.CreateFMul(B.CreateFSub(xc, n), cf(t, 0.693147180559945309));
  } else {
    n = intr(Intrinsic::roundeven, {B.CreateFMul(xc, cf(t, 1.44269504088896341))});
    r = fma(n, cf(t, -0.693359375), xc);
    r = fma(n, cf(t, 2.12194440e-4), r);
  }
  Value *p = cf(t, 1.9875691500E-4);
  for (double c : {1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1})
    p = fma(p, r, cf(t, c));
  Value *r2 = B.CreateFMul(r, r);
  p = B.CreateFAdd(fma(p, r2, r), cf(t, 1.0));
  Value *ni = B.CreateFPToSI(n, i32());
  Value *h = B.CreateAShr(ni, 1);
  Value *s1 = B.CreateBitCast(B.CreateShl(B.CreateAdd(h, B.getInt32(127)), 23), t);
  Value *s2 = B.CreateBitCast(B.CreateShl(B.CreateAdd(B.CreateSub(ni, h), B.getInt32(127)), 23), t);
  Value *res = B.CreateFMul(B.CreateFMul(p, s1), s2);
  return B.CreateSelect(isNan(x), x, res);
}

// tanh: Cephes' tanhf (odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) above, with
// the sign of x); relative error about 2 ulp.
// Where the target has one-instruction 2^x and 1/x (approxExp2, approxRcp: NVPTX), the upper
// branch takes them: e = 2^(2|x| log2 e) >= 3.49 there, so 2 / (e + 1) <= 0.45 and its error of a
// few ulp of itself (the exponent's rounding, ex2's and rcp's 2 ulp) is under an ulp of the
// result 1 - 2 / (e + 1) >= 0.55; e = inf gives 1. This replaces Cephes' expf (about 20
// instructions) and an IEEE division (div.rn.f32, about 15) by 2 instructions, which made the
// tanh-approximated GELU's programs instruction-bound on the GPU.
Value *Lowering::tanhF32(Value *x) {
  Type *t = f32();
  Value *ax = intr(Intrinsic::fabs, {x});
  Value *z = B.CreateFMul(x, x);
  Value *p = cf(t, -5.70498872745E-3);
  for (double c : {2.06390887954E-2, -5.37397155531E-2, 1.33314422036E-1, -3.33332819422E-1}) p = fma(p, z, cf(t, c));
  Value *small = fma(B.CreateFMul(p, z), x, x);
  Value *big;
  if (Value *e = T.approxExp2(B, B.CreateFMul(ax, cf(t, 2.0 * 1.44269504088896341)))) {
    Value *r = T.approxRcp(B, B.CreateFAdd(e, cf(t, 1.0)));
    big = r ? fma(r, cf(t, -2.0), cf(t, 1.0)) : B.CreateFSub(cf(t, 1.0), B.CreateFDiv(cf(t, 2.0), B.CreateFAdd(e, cf(t, 1.0))));
    big = B.CreateSelect(isNan(x), x, big);
  } else {
    Value *ex = expF32(B.CreateFMul(ax, cf(t, 2.0)), false);
    big = B.CreateFSub(cf(t, 1.0), B.CreateFDiv(cf(t, 2.0), B.CreateFAdd(ex, cf(t, 1.0))));
  }
  big = intr(Intrinsic::copysign, {big, x});
  return B.CreateSelect(B.CreateFCmpOLT(ax, cf(t, 0.625)), small, big);
}

/// erf of an f32 in registers: x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf is +-1 in f32
/// beyond), the rational minimax approximation of Eigen's generic_fast_erf_float (also XLA's f32
/// erf). Absolute error at most 4.2e-7 (measured in f32 against erf in f64 over [-6, 6]; near
/// |x| = 3.3, where erf is within 7 ulp of 1), so gelu's at most 2.1e-7 |x|. Inline and
/// branch-free, so that the CPU's loops over it vectorize (a libm call per element would not),
/// and about 19 instructions on a GPU against libdevice's __nv_erff's 33 and a branch (the
/// ViT-B's GELU programs were issue-bound on it: docs/performance.md). Where the target has a
/// one-instruction reciprocal (NVPTX's rcp.approx, within 1 ulp; q lies in [-2.4, -0.0142], never
/// subnormal) the quotient is p * rcp(q) instead of an IEEE division. The clamp's minnum/maxnum
/// would turn NaN into 4: it is selected back.
Value *Lowering::erfF32(Value *x) {
  Type *t = f32();
  Value *c = intr(Intrinsic::maxnum, {intr(Intrinsic::minnum, {x, cf(t, 4.0)}), cf(t, -4.0)});
  Value *z = B.CreateFMul(c, c);
  Value *p = cf(t, -2.72614225801306e-10);
  for (double a : {2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05, -7.34990630326855e-04,
                   -2.95459980854025e-03, -1.60960333262415e-02})
    p = fma(p, z, cf(t, a));
  p = B.CreateFMul(p, c);
  Value *q = cf(t, -1.45660718464996e-05);
  for (double b : {-2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02})
    q = fma(q, z, cf(t, b));
  Value *r = T.approxRcp(B, q);
  return B.CreateSelect(isNan(x), x, r ? B.CreateFMul(p, r) : B.CreateFDiv(p, q));
}

// ---- conversions ----

Value *Lowering::saturateInf(Value *r, Value *in, double maxv) {
  // Saturation: an overflowing result or an infinite input becomes ±max-finite; NaN stays.
  Value *inf = B.CreateFCmpOEQ(intr(Intrinsic::fabs, {r}), cf(r->getType(), INFINITY));
  return B.CreateSelect(inf, intr(Intrinsic::copysign, {cf(r->getType(), maxv), in}), r);
}

/// Rounds an f32 compute value into dtype `d` (bf16, f16, tf32, fp8; f32 is the identity),
/// nearest-even, saturating when `sat` (Numeric.h).
Value *Lowering::roundTo(DType d, Value *x, bool sat) {
  switch (d) {
  case DType::F32: return sat ? saturateInf(x, x, std::numeric_limits<float>::max()) : x;
  case DType::BF16:
    if (T.nativeBf16Round()) {
      // NaN made S.11111111.1000000 whatever the instruction gives for it (r | 0x7FC0, its sign
      // and low bits cleared, then x's sign), by masks rather than a select; other values keep r,
      // whose sign is x's.
      Value *r = B.CreateZExt(B.CreateBitCast(B.CreateFPTrunc(x, B.getBFloatTy()), B.getInt16Ty()), i32());
      Value *xb = B.CreateBitCast(x, i32());
      Value *m = T.nanMask(B, x);
      if (!m) m = B.CreateSExt(isNan(x), i32());
      Value *q = B.CreateAnd(B.CreateOr(r, B.CreateAnd(m, B.getInt32(0x7FC0))), B.CreateNot(B.CreateAnd(m, B.getInt32(0x803F))));
      Value *bits = B.CreateOr(q, B.CreateAnd(B.CreateLShr(xb, 16), B.getInt32(0x8000)));
      Value *res = B.CreateBitCast(B.CreateShl(bits, 16), f32());
      return sat ? saturateInf(res, x, rt::dtypeMax(d)) : res;
    }
    [[fallthrough]];
  case DType::TF32: {
    unsigned drop = d == DType::BF16 ? 16 : 13;
    uint32_t keep = ~((uint32_t(1) << drop) - 1);
    Value *b = B.CreateBitCast(x, i32());
    Value *lsb = B.CreateAnd(B.CreateLShr(b, drop), B.getInt32(1));
    Value *r = B.CreateAnd(B.CreateAdd(B.CreateAdd(b, B.getInt32((1u << (drop - 1)) - 1)), lsb), B.getInt32(keep));
    Value *nan = B.CreateOr(B.CreateAnd(b, B.getInt32(0x80000000u)), B.getInt32(0x7FC00000u));
    Value *res = B.CreateBitCast(B.CreateSelect(isNan(x), nan, r), f32());
    return sat ? saturateInf(res, x, rt::dtypeMax(d)) : res;
  }
  case DType::F16: {
    Value *h = B.CreateFPExt(B.CreateFPTrunc(x, B.getHalfTy()), f32());
    Value *nan = intr(Intrinsic::copysign, {cf(f32(), NAN), x});
    h = B.CreateSelect(isNan(x), nan, h);
    return sat ? saturateInf(h, x, 65504.0) : h;
  }
  case DType::F8E4M3:
  case DType::F8E5M2:
    return T.helperCall(B, "tsr_cg_round_f32", f32(), {B.getInt32(int(d)), x, B.getInt32(sat)});
  default: break;
  }
  fail(F, "rounding into " + std::string(dtypeName(d)));
}

/// A tensor element (storage bits) as its compute value.
Value *Lowering::fromMem(DType d, Value *raw) {
  switch (d) {
  case DType::Bool: return B.CreateICmpNE(raw, B.getInt8(0));
  case DType::BF16: return B.CreateBitCast(B.CreateShl(B.CreateZExt(raw, i32()), 16), f32());
  case DType::F16: return B.CreateFPExt(B.CreateBitCast(raw, B.getHalfTy()), f32());
  case DType::F8E4M3:
  case DType::F8E5M2: {
    // A 256-entry table of the exact values (Numeric.h's decoding).
    std::string name = d == DType::F8E4M3 ? "tsr.e4m3.table" : "tsr.e5m2.table";
    GlobalVariable *g = M.getGlobalVariable(name, true);
    if (!g) {
      std::vector<Constant *> vs;
      for (unsigned i = 0; i < 256; ++i)
        vs.push_back(ConstantFP::get(f32(), d == DType::F8E4M3 ? rt::e4m3ToF32(uint8_t(i)) : rt::e5m2ToF32(uint8_t(i))));
      auto *at = ArrayType::get(f32(), 256);
      g = new GlobalVariable(M, at, true, GlobalValue::PrivateLinkage, ConstantArray::get(at, vs), name);
    }
    Value *p = B.CreateInBoundsGEP(ArrayType::get(f32(), 256), g, {c64(0), B.CreateZExt(raw, i64())});
    return B.CreateLoad(f32(), p);
  }
  default: return raw;
  }
}

/// A compute value (already representable in `d`) as storage bits.
Value *Lowering::toMem(DType d, Value *x) {
  switch (d) {
  case DType::Bool: return B.CreateZExt(x, i8());
  case DType::BF16: return B.CreateTrunc(B.CreateLShr(B.CreateBitCast(x, i32()), 16), B.getInt16Ty());
  case DType::F16: return B.CreateBitCast(B.CreateFPTrunc(x, B.getHalfTy()), B.getInt16Ty());
  case DType::F8E4M3:
  case DType::F8E5M2: return T.helperCall(B, "tsr_cg_encode_f32", i8(), {B.getInt32(int(d)), x, B.getInt32(0)});
  default: return x;
  }
}

/// cast: Numeric.h's rules (float -> int truncates and saturates, NaN -> 0; int -> narrower int
/// wraps; x -> bool is x != 0; floats round once to nearest-even, saturating with @saturate).
Value *Lowering::convert(Value *x, DType from, DType to, bool sat) {
  bool ff = isFloat(from), tf = isFloat(to);
  if (to == DType::Bool) {
    if (from == DType::Bool) return x;
    return ff ? B.CreateFCmpUNE(x, cf(x->getType(), 0.0)) : B.CreateICmpNE(x, ConstantInt::get(x->getType(), 0));
  }
  if (from == to) {
    if (tf && sat) return saturateInf(x, x, rt::dtypeMax(to));
    return x;
  }
  if (!tf) { // to an integer
    if (ff) return B.CreateIntrinsic(Intrinsic::fptosi_sat, {ctype(to), x->getType()}, {x});
    if (from == DType::Bool) return B.CreateZExt(x, ctype(to));
    return B.CreateSExtOrTrunc(x, ctype(to));
  }
  if (!ff) { // integer or bool to a float
    if (from == DType::Bool) return B.CreateUIToFP(x, ctype(to));
    if (to == DType::F64 || to == DType::F32) return B.CreateSIToFP(x, ctype(to)); // one rounding
    if (from == DType::I8) return roundTo(to, B.CreateSIToFP(x, f32()), sat); // exact in f32
    return T.helperCall(B, "tsr_cg_round_i64", f32(), {B.getInt32(int(to)), B.CreateSExt(x, i64()), B.getInt32(sat)});
  }
  // float to float
  if (to == DType::F64) return B.CreateFPExt(x, f64());
  if (from == DType::F64) {
    if (to == DType::F32) {
      Value *r = B.CreateFPTrunc(x, f32());
      return sat ? saturateInf(r, B.CreateFPTrunc(x, f32()), std::numeric_limits<float>::max()) : r;
    }
    return T.helperCall(B, "tsr_cg_round_f64", f32(), {B.getInt32(int(to)), x, B.getInt32(sat)});
  }
  return roundTo(to, x, sat);
}

/// An attribute number as a compile-time constant of dtype `d` (rounded by Numeric.h's rules).
Value *Lowering::constantOf(DType d, const ir::AttrValue &v) {
  double dv = 0;
  int64_t iv = 0;
  bool isInt = false;
  if (auto *p = std::get_if<int64_t>(&v)) { iv = *p; isInt = true; dv = double(*p); }
  else if (auto *p = std::get_if<double>(&v)) dv = *p;
  else if (auto *p = std::get_if<bool>(&v)) { iv = *p; isInt = true; dv = *p; }
  else fail(F, "a constant must be a number or a bool");
  if (d == DType::Bool) return B.getInt1(isInt ? iv != 0 : dv != 0);
  if (!isFloat(d)) {
    if (!isInt) iv = rt::toI64(dv);
    return ConstantInt::get(ctype(d), uint64_t(iv), true);
  }
  // Round into the dtype through its storage, then widen back (exact).
  unsigned char buf[8];
  if (isInt) rt::storeI64(d, buf, iv);
  else rt::storeF64(d, buf, dv);
  return cf(ctype(d), rt::loadF64(d, buf));
}

// ---- scalar semantics ----

Value *Lowering::unary(const TOp &op, DType d, Value *x) {
  OpKind k = op.kind;
  if (!isFloat(d)) {
    Type *t = x->getType();
    Value *zero = ConstantInt::get(t, 0);
    switch (k) {
    case OpKind::Neg: return d == DType::Bool ? x : B.CreateSub(zero, x);
    case OpKind::Abs: return d == DType::Bool ? x : B.CreateIntrinsic(Intrinsic::abs, {t}, {x, B.getFalse()});
    case OpKind::Not: return B.CreateNot(x);
    case OpKind::Relu: return d == DType::Bool ? x : B.CreateBinaryIntrinsic(Intrinsic::smax, x, zero);
    case OpKind::Sign:
      if (d == DType::Bool) return x;
      return B.CreateSub(B.CreateZExt(B.CreateICmpSGT(x, zero), t), B.CreateZExt(B.CreateICmpSLT(x, zero), t));
    default: fail(F, std::string(opSpelling(k)) + " of an integer");
    }
  }
  Type *t = x->getType();
  Value *one = cf(t, 1.0);
  Value *r = nullptr;
  switch (k) {
  case OpKind::Neg: r = B.CreateFNeg(x); break;
  case OpKind::Abs: r = intr(Intrinsic::fabs, {x}); break;
  case OpKind::Exp: r = expV(x); break;
  case OpKind::Exp2: r = t->isFloatTy() ? expF32(x, true) : intr(Intrinsic::exp2, {x}); break;
  case OpKind::Log: r = intr(Intrinsic::log, {x}); break;
  case OpKind::Log2: r = intr(Intrinsic::log2, {x}); break;
  case OpKind::Log1p: r = libm("log1p", x); break;
  case OpKind::Expm1: r = libm("expm1", x); break;
  case OpKind::Sqrt: r = intr(Intrinsic::sqrt, {x}); break;
  case OpKind::Rsqrt: r = B.CreateFDiv(one, intr(Intrinsic::sqrt, {x})); break;
  case OpKind::Tanh: r = tanhV(x); break;
  case OpKind::Sigmoid: r = B.CreateFDiv(one, B.CreateFAdd(one, expV(B.CreateFNeg(x)))); break;
  case OpKind::Relu: r = B.CreateSelect(B.CreateFCmpOLT(x, cf(t, 0.0)), cf(t, 0.0), x); break; // keeps NaN
  case OpKind::Gelu: {
    const auto *approx = op.attrAs<std::string>("approximate");
    Value *half = B.CreateFMul(x, cf(t, 0.5));
    if (approx && *approx == "tanh") {
      Value *x3 = B.CreateFMul(B.CreateFMul(x, x), x);
      Value *in = B.CreateFMul(cf(t, 0.7978845608028654), fma(x3, cf(t, 0.044715), x));
      r = B.CreateFMul(half, B.CreateFAdd(one, tanhV(in)));
    } else {
      Value *u = B.CreateFMul(x, cf(t, 0.7071067811865476));
      r = B.CreateFMul(half, B.CreateFAdd(one, t->isFloatTy() ? erfF32(u) : libm("erf", u)));
    }
    break;
  }
  case OpKind::Silu: r = B.CreateFDiv(x, B.CreateFAdd(one, expV(B.CreateFNeg(x)))); break;
  case OpKind::Sin: r = intr(Intrinsic::sin, {x}); break;
  case OpKind::Cos: r = intr(Intrinsic::cos, {x}); break;
  case OpKind::Erf: r = t->isFloatTy() ? erfF32(x) : libm("erf", x); break;
  case OpKind::Floor: r = intr(Intrinsic::floor, {x}); break;
  case OpKind::Ceil: r = intr(Intrinsic::ceil, {x}); break;
  case OpKind::Round: r = intr(Intrinsic::roundeven, {x}); break;
  case OpKind::Sign: {
    // 1, -1, or x itself for ±0 and NaN.
    r = B.CreateSelect(B.CreateFCmpOGT(x, cf(t, 0.0)), one, B.CreateSelect(B.CreateFCmpOLT(x, cf(t, 0.0)), cf(t, -1.0), x));
    break;
  }
  default: fail(F, std::string(opSpelling(k)) + " of a float");
  }
  return narrowFloat(d) ? roundTo(d, r, false) : r;
}

Value *Lowering::elementValue(const TOp &op, const std::vector<Value *> &x) {
  if (op.operands.empty()) return nullptr;
  const DType d = op.operands[0]->type.dtype;
  switch (tile::opClass(op.kind)) {
  case tile::OpClass::Unary: return unary(op, d, x[0]);
  case tile::OpClass::Binary: return binary(op.kind, d, x[0], x[1]);
  case tile::OpClass::Compare: return compare(op.kind, d, x[0], x[1]);
  case tile::OpClass::Select: return B.CreateSelect(x[0], x[1], x[2]);
  default: break;
  }
  if (op.kind != OpKind::Cast) return nullptr;
  const auto *dt = op.attrAs<ir::DTypeAttr>("dtype");
  return convert(x[0], d, dt->dtype, dt->policies.saturate);
}

// Python's float floor division and modulo (CPython's float_divmod): mod takes the sign of the
// divisor, the quotient is floor((a - mod) / b) corrected to the nearest integer.
Value *Lowering::floatFloorDivMod(Value *a, Value *b, bool wantMod) {
  Type *t = a->getType();
  Value *zero = cf(t, 0.0);
  Value *mod = B.CreateFRem(a, b);
  Value *div = B.CreateFDiv(B.CreateFSub(a, mod), b);
  Value *fix = B.CreateAnd(B.CreateFCmpUNE(mod, zero), B.CreateXor(B.CreateFCmpOLT(b, zero), B.CreateFCmpOLT(mod, zero)));
  Value *modFixed = B.CreateSelect(fix, B.CreateFAdd(mod, b), B.CreateSelect(B.CreateFCmpOEQ(mod, zero), intr(Intrinsic::copysign, {zero, b}), mod));
  if (wantMod) return B.CreateSelect(B.CreateFCmpOEQ(b, zero), B.CreateFRem(a, b), modFixed);
  Value *divFixed = B.CreateSelect(fix, B.CreateFSub(div, cf(t, 1.0)), div);
  Value *fl = intr(Intrinsic::floor, {divFixed});
  fl = B.CreateSelect(B.CreateFCmpOGT(B.CreateFSub(divFixed, fl), cf(t, 0.5)), B.CreateFAdd(fl, cf(t, 1.0)), fl);
  Value *q = B.CreateSelect(B.CreateFCmpUNE(divFixed, zero), fl, intr(Intrinsic::copysign, {zero, B.CreateFDiv(a, b)}));
  return B.CreateSelect(B.CreateFCmpOEQ(b, zero), B.CreateFDiv(a, b), q);
}

// Integer div (truncating), floordiv and mod (Python's). Division by zero gives 0 and
// MIN / -1 wraps instead of trapping: compiled code has no way to raise, and must not crash.
Value *Lowering::intDivMod(OpKind k, Value *a, Value *b) {
  Type *t = a->getType();
  Value *zero = ConstantInt::get(t, 0), *one = ConstantInt::get(t, 1), *m1 = ConstantInt::getSigned(t, -1);
  Value *bz = B.CreateICmpEQ(b, zero), *bm1 = B.CreateICmpEQ(b, m1);
  Value *safe = B.CreateSelect(B.CreateOr(bz, bm1), one, b);
  Value *q = B.CreateSelect(bm1, B.CreateSub(zero, a), B.CreateSDiv(a, safe));
  Value *r = B.CreateSelect(bm1, zero, B.CreateSRem(a, safe));
  Value *adjust = B.CreateAnd(B.CreateICmpNE(r, zero), B.CreateICmpSLT(B.CreateXor(r, b), zero));
  Value *res;
  if (k == OpKind::Div) res = q;
  else if (k == OpKind::FloorDiv) res = B.CreateSelect(adjust, B.CreateSub(q, one), q);
  else res = B.CreateSelect(adjust, B.CreateAdd(r, b), r);
  return B.CreateSelect(bz, zero, res);
}

Value *Lowering::binary(OpKind k, DType d, Value *a, Value *b) {
  if (!isFloat(d)) {
    Type *t = a->getType();
    unsigned w = t->getIntegerBitWidth();
    switch (k) {
    case OpKind::Add: return d == DType::Bool ? B.CreateOr(a, b) : B.CreateAdd(a, b);
    case OpKind::Sub: return d == DType::Bool ? B.CreateXor(a, b) : B.CreateSub(a, b);
    case OpKind::Mul: return d == DType::Bool ? B.CreateAnd(a, b) : B.CreateMul(a, b);
    case OpKind::Div: case OpKind::FloorDiv: case OpKind::Mod:
      if (d == DType::Bool) break;
      return intDivMod(k, a, b);
    case OpKind::Pow:
      if (d == DType::Bool) break;
      return B.CreateTrunc(T.helperCall(B, "tsr_cg_ipow", i64(), {B.CreateSExt(a, i64()), B.CreateSExt(b, i64())}), t);
    case OpKind::Max: return d == DType::Bool ? B.CreateOr(a, b) : B.CreateBinaryIntrinsic(Intrinsic::smax, a, b);
    case OpKind::Min: return d == DType::Bool ? B.CreateAnd(a, b) : B.CreateBinaryIntrinsic(Intrinsic::smin, a, b);
    case OpKind::And: return B.CreateAnd(a, b);
    case OpKind::Or: return B.CreateOr(a, b);
    case OpKind::Xor: return B.CreateXor(a, b);
    case OpKind::Shl:
    case OpKind::Shr: {
      if (d == DType::Bool) break;
      // Counts outside [0, bits) give 0 (shl) or the sign (shr), as shifting the i64 would.
      Value *ok = B.CreateICmpULT(b, ConstantInt::get(t, w));
      Value *safeB = B.CreateSelect(ok, b, ConstantInt::get(t, 0));
      if (k == OpKind::Shl) return B.CreateSelect(ok, B.CreateShl(a, safeB), ConstantInt::get(t, 0));
      return B.CreateSelect(ok, B.CreateAShr(a, safeB), B.CreateAShr(a, ConstantInt::get(t, w - 1)));
    }
    default: break;
    }
    fail(F, std::string(opSpelling(k)) + " of " + std::string(dtypeName(d)));
  }
  Value *r = nullptr;
  switch (k) {
  case OpKind::Add: r = B.CreateFAdd(a, b); break;
  case OpKind::Sub: r = B.CreateFSub(a, b); break;
  case OpKind::Mul: r = B.CreateFMul(a, b); break;
  case OpKind::Div: r = B.CreateFDiv(a, b); break;
  case OpKind::FloorDiv: r = floatFloorDivMod(a, b, false); break;
  case OpKind::Mod: r = floatFloorDivMod(a, b, true); break;
  case OpKind::Pow: r = intr(Intrinsic::pow, {a, b}); break;
  case OpKind::Max: r = intr(Intrinsic::maximum, {a, b}); break;
  case OpKind::Min: r = intr(Intrinsic::minimum, {a, b}); break;
  default: fail(F, std::string(opSpelling(k)) + " of a float");
  }
  return narrowFloat(d) ? roundTo(d, r, false) : r;
}

Value *Lowering::compare(OpKind k, DType d, Value *a, Value *b) {
  if (isFloat(d)) {
    switch (k) {
    case OpKind::Eq: return B.CreateFCmpOEQ(a, b);
    case OpKind::Ne: return B.CreateFCmpUNE(a, b);
    case OpKind::Lt: return B.CreateFCmpOLT(a, b);
    case OpKind::Le: return B.CreateFCmpOLE(a, b);
    case OpKind::Gt: return B.CreateFCmpOGT(a, b);
    default: return B.CreateFCmpOGE(a, b);
    }
  }
  bool u = d == DType::Bool;
  switch (k) {
  case OpKind::Eq: return B.CreateICmpEQ(a, b);
  case OpKind::Ne: return B.CreateICmpNE(a, b);
  case OpKind::Lt: return u ? B.CreateICmpULT(a, b) : B.CreateICmpSLT(a, b);
  case OpKind::Le: return u ? B.CreateICmpULE(a, b) : B.CreateICmpSLE(a, b);
  case OpKind::Gt: return u ? B.CreateICmpUGT(a, b) : B.CreateICmpSGT(a, b);
  default: return u ? B.CreateICmpUGE(a, b) : B.CreateICmpSGE(a, b);
  }
}

// ---- elementwise ----

// ---- elementwise fusion on the CPU ----
//
// The general lowering writes every tile op's result to a buffer and its readers load it back:
// a row program of layer_norm ran x - mean, * rstd, * weight, + bias as four loops over 4 KiB
// tiles and then copied the last tile into the output row, softmax x - max and exp as two. On
// the CPU (one thread a program) an elementwise op read once, by a later elementwise op of its
// block, is computed inside that reader's loop instead (loop fusion of a producer into its one
// consumer), as is a broadcast of one element (a row's mean or max) read only by elementwise
// ops; and the last elementwise op before a store_box of a row inside the tensor writes the
// tensor's row directly. Each element is computed by the same operations in the same order, so
// the results are the same bits. TSR_FUSE_ELEMENTWISE=0 turns both off (for measuring;
// loweringSwitches keys it).

namespace {
bool fuseElementwise() {
  const char *e = std::getenv("TSR_FUSE_ELEMENTWISE");
  return !(e && e[0] == '0');
}
// Ops after which a tile read in place (readsInPlace) or a carried buffer may hold other data.
bool writesOrBranches(const TOp &o) {
  return !o.regions.empty() || o.kind == OpKind::Yield || o.kind == OpKind::Store || o.kind == OpKind::StoreBox ||
         o.kind == OpKind::AtomicAdd || o.kind == OpKind::AtomicAddBox;
}
} // namespace

bool Lowering::fusesIntoReaders(const TOp &op) {
  if (threads != 1 || !curBlock || !fuseElementwise() || op.results.size() != 1) return false;
  const TType &rt = op.result()->type;
  if (rt.isScalar()) return false;
  if (op.kind == OpKind::Broadcast) {
    if (op.operands[0]->type.numElements() != 1) return false; // element i would need i's source index
  } else if (!tile::isElementwise(op.kind) || uses[op.result()] != 1) {
    return false; // read twice, it would be computed twice (an exp)
  }
  const auto &ops = curBlock->ops;
  size_t at = 0;
  while (at < ops.size() && ops[at] != &op) ++at;
  int left = uses[op.result()];
  for (size_t j = at + 1; j < ops.size() && left > 0; ++j) {
    const TOp *u = ops[j];
    // Its operands are read at the last reader: nothing between may write what they point at.
    if (writesOrBranches(*u)) return false;
    for (const TValue *v : u->operands) {
      if (v != op.result()) continue;
      if (!tile::isElementwise(u->kind) || u->result()->type.numElements() != rt.numElements()) return false;
      --left;
    }
  }
  return left == 0;
}

const TOp *Lowering::storesInPlace(const TOp &op) {
  if (threads != 1 || !curBlock || !fuseElementwise() || uses[op.result()] != 1) return nullptr;
  const TType &rt = op.result()->type;
  const DType d = rt.dtype;
  if (rt.isScalar() || !(d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64)) return nullptr;
  for (size_t i = 0; i + 1 < rt.shape.size(); ++i)
    if (rt.shape[i] != 1) return nullptr; // a row: contiguous in the tensor where the box is inside it
  const auto &ops = curBlock->ops;
  size_t at = 0;
  while (at < ops.size() && ops[at] != &op) ++at;
  for (size_t j = at + 1; j < ops.size(); ++j) {
    const TOp *u = ops[j];
    if (u->kind == OpKind::StoreBox) {
      const TValue *tv = u->operands[0];
      const size_t rank = tv->type.rank;
      const bool *masked = u->attrAs<bool>("masked");
      if ((masked && *masked) || u->operands.size() < rank + 2 || u->operands[rank + 1] != op.result() ||
          tv->type.dtype != d)
        return nullptr;
      for (size_t q = 1; q <= rank; ++q)
        if (!vals.count(u->operands[q])) return nullptr; // a start computed after `op`
      return u;
    }
    // Nothing between the two may read or write memory: the row is written before the store.
    if (writesOrBranches(*u) || u->kind == OpKind::Load || u->kind == OpKind::LoadBox) return nullptr;
    for (const TValue *v : u->operands)
      if (v == op.result()) return nullptr;
  }
  return nullptr;
}

Value *Lowering::elemOf(const TValue *v, Value *i) {
  if (!vals.count(v))
    if (auto it = lazy.find(v); it != lazy.end()) return it->second(i);
  return loadElem(get(v), v->type.dtype, i);
}

Value *Lowering::materialize(const TValue *v) {
  const TType &t = v->type;
  Value *out = alloc(t);
  loopN(t.numElements(), [&](Value *i) { storeElem(out, t.dtype, i, lazy.at(v)(i)); });
  set(v, out);
  return out;
}

// ---- elementwise ----

void Lowering::elementwise(const TOp &op, const std::function<Value *(const std::vector<Value *> &)> &f) {
  const TType &rt = op.result()->type;
  if (rt.isScalar()) {
    std::vector<Value *> xs;
    for (const TValue *v : op.operands) xs.push_back(get(v));
    set(op.result(), f(xs));
    return;
  }
  if (fusesIntoReaders(op)) {
    // `f` is copied: it runs when the reader is lowered (the lowerClass lambdas copy what they use).
    lazy[op.result()] = [this, o = &op, f](Value *i) {
      std::vector<Value *> xs;
      for (const TValue *v : o->operands) xs.push_back(elemOf(v, i));
      return f(xs);
    };
    return;
  }
  Value *out = alloc(rt);
  if (const TOp *st = storesInPlace(op)) {
    // The store's row in the tensor where its box lies inside it with unit stride (lowerBox's
    // fast path, which then copies nothing), else the tile its slow path copies from.
    TensorInfo &ti = tensor(st->operands[0]);
    const auto &box = *st->attrAs<std::vector<int64_t>>("box");
    std::vector<Value *> starts;
    Value *off = c64(0);
    for (size_t q = 0; q < box.size(); ++q) {
      starts.push_back(get(st->operands[1 + q]));
      off = B.CreateAdd(off, B.CreateMul(starts.back(), ti.strides[q]));
    }
    size_t last = box.size();
    while (last > 0 && box[last - 1] == 0) --last;
    Value *fast = boxInside(ti, starts, box);
    if (last > 0) fast = B.CreateAnd(fast, B.CreateICmpEQ(ti.strides[last - 1], c64(1)));
    out = B.CreateSelect(fast, B.CreateInBoundsGEP(mtype(rt.dtype), ti.data, off), out);
    storedInPlace.insert(st);
  }
  loopN(rt.numElements(), [&](Value *i) {
    std::vector<Value *> xs;
    for (const TValue *v : op.operands) xs.push_back(elemOf(v, i));
    storeElem(out, rt.dtype, i, f(xs));
  });
  set(op.result(), out);
}

void Lowering::lowerClassUnary(const TOp &op) {
  DType d = op.operands[0]->type.dtype;
  elementwise(op, [this, o = &op, d](const std::vector<Value *> &x) { return unary(*o, d, x[0]); });
}
void Lowering::lowerClassBinary(const TOp &op) {
  DType d = op.operands[0]->type.dtype;
  elementwise(op, [this, k = op.kind, d](const std::vector<Value *> &x) { return binary(k, d, x[0], x[1]); });
}
void Lowering::lowerClassCompare(const TOp &op) {
  DType d = op.operands[0]->type.dtype;
  elementwise(op, [this, k = op.kind, d](const std::vector<Value *> &x) { return compare(k, d, x[0], x[1]); });
}
void Lowering::lowerClassSelect(const TOp &op) {
  elementwise(op, [this](const std::vector<Value *> &x) { return B.CreateSelect(x[0], x[1], x[2]); });
}
void Lowering::lowerCast(const TOp &op) {
  const auto *dt = op.attrAs<ir::DTypeAttr>("dtype");
  DType from = op.operands[0]->type.dtype;
  elementwise(op, [this, dt, from](const std::vector<Value *> &x) { return convert(x[0], from, dt->dtype, dt->policies.saturate); });
}

} // namespace tsr::codegen::lower
