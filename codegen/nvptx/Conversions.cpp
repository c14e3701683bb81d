// The conversion helpers as LLVM IR (Conversions.h): runtime/Numeric.cpp's one rounding routine,
// encodeFinite, written with selects, and the host's integer power as a loop.
#include "codegen/nvptx/Conversions.h"

#include "codegen/cpu/CpuKernel.h"
#include "support/DType.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"

#include <cmath>

namespace tsr::codegen::nvptx {

using namespace llvm;

namespace {

// A binary floating-point format: runtime/Numeric.cpp's Format (private there), the same fields
// and derived patterns. `ieee` formats reserve the all-ones exponent for inf and NaN; e4m3 only
// S.1111.111, for NaN, and has no inf.
struct Format {
  int expBits;
  int manBits;
  bool ieee;
  int64_t bias() const { return (int64_t(1) << (expBits - 1)) - 1; }
  int64_t emin() const { return 1 - bias(); }
  int64_t emax() const { return (ieee ? (int64_t(1) << expBits) - 2 : (int64_t(1) << expBits) - 1) - bias(); }
  uint64_t signBit() const { return uint64_t(1) << (expBits + manBits); }
  uint64_t manMask() const { return (uint64_t(1) << manBits) - 1; }
  uint64_t expMask() const { return ((uint64_t(1) << expBits) - 1) << manBits; }
  uint64_t maxFinite() const { return ieee ? (expMask() - (uint64_t(1) << manBits)) | manMask() : expMask() | (manMask() - 1); }
  uint64_t overflow() const { return ieee ? expMask() : expMask() | manMask(); }
  uint64_t nan() const { return ieee ? expMask() | (uint64_t(1) << (manBits - 1)) : expMask() | manMask(); }
};

Format formatOf(DType d) {
  switch (d) {
  case DType::TF32: return {8, 10, true};
  case DType::BF16: return {8, 7, true};
  case DType::F16: return {5, 10, true};
  case DType::F8E5M2: return {5, 2, true};
  case DType::F8E4M3: return {4, 3, false};
  default: throw CodegenError("NVPTX: no conversion helper rounds into " + std::string(dtypeName(d)));
  }
}

// IR for one format and saturation mode, at B's insertion point; integers are i64.
struct Encoder {
  IRBuilderBase &B;
  Format f;
  bool sat;

  Type *i64() { return B.getInt64Ty(); }
  Value *c(uint64_t v) { return B.getInt64(v); }
  Value *clamp(Value *x, int64_t lo, int64_t hi) {
    return B.CreateBinaryIntrinsic(Intrinsic::smin, B.CreateBinaryIntrinsic(Intrinsic::smax, x, c(uint64_t(lo))), c(uint64_t(hi)));
  }
  // What an overflowing magnitude (or ±inf) becomes.
  uint64_t overflowBits() const { return sat ? f.maxFinite() : f.overflow(); }

  /// The bit pattern of (-1)^neg * S * 2^e0 (S an unsigned i64, e0 an i64), rounded once to
  /// nearest-even: Numeric.cpp's encodeFinite. Shift amounts are clamped to [0, 63] (LLVM's shifts
  /// by 64 or more are poison) and the cases they stand for chosen by selects.
  Value *finite(Value *neg, Value *S, Value *e0) {
    const int64_t p = f.manBits;
    Value *sign = B.CreateSelect(neg, c(f.signBit()), c(0));
    // ctlz(0) is 64 here; the zero result is selected at the end.
    Value *lz = B.CreateBinaryIntrinsic(Intrinsic::ctlz, S, B.getFalse());
    Value *E = B.CreateAdd(B.CreateSub(c(63), lz), e0); // the exact value's unbiased exponent
    Value *tooBig = B.CreateICmpSGT(E, c(uint64_t(f.emax() + 1)));
    // The result is n * 2^qe, n of at most p+1 bits; `shift` low bits of S are discarded.
    Value *qe = B.CreateSub(B.CreateBinaryIntrinsic(Intrinsic::smax, E, c(uint64_t(f.emin()))), c(uint64_t(p)));
    Value *shift = B.CreateSub(qe, e0);
    Value *exact = B.CreateShl(S, clamp(B.CreateNeg(shift), 0, 63)); // shift <= 0
    Value *rs = clamp(shift, 1, 63);
    Value *all = B.CreateICmpSGE(shift, c(64)); // every bit of S is discarded
    Value *n = B.CreateSelect(all, c(0), B.CreateLShr(S, rs));
    Value *rem = B.CreateSelect(all, S, B.CreateAnd(S, B.CreateSub(B.CreateShl(c(1), rs), c(1))));
    Value *half = B.CreateSelect(all, c(uint64_t(1) << 63), B.CreateShl(c(1), B.CreateSub(rs, c(1))));
    Value *odd = B.CreateICmpNE(B.CreateAnd(n, c(1)), c(0));
    Value *up = B.CreateOr(B.CreateICmpUGT(rem, half), B.CreateAnd(B.CreateICmpEQ(rem, half), odd));
    // Beyond 64 discarded bits the remainder (S < 2^64) is below half a quantum.
    up = B.CreateAnd(up, B.CreateICmpSLE(shift, c(64)));
    n = B.CreateSelect(B.CreateICmpSLE(shift, c(0)), exact, B.CreateAdd(n, B.CreateZExt(up, i64())));
    // A carry out of the significand moves into the exponent field by the addition.
    Value *normal = B.CreateSub(B.CreateAdd(B.CreateShl(B.CreateAdd(E, c(uint64_t(f.bias()))), c(uint64_t(p))), n),
                                c(uint64_t(1) << p));
    Value *bits = B.CreateSelect(B.CreateICmpSLT(E, c(uint64_t(f.emin()))), n, normal);
    bits = B.CreateSelect(B.CreateOr(tooBig, B.CreateICmpUGT(bits, c(f.maxFinite()))), c(overflowBits()), bits);
    bits = B.CreateSelect(B.CreateICmpEQ(S, c(0)), c(0), bits);
    return B.CreateOr(sign, bits);
  }

  /// An IEEE float of `expBits`/`manBits` (f32 or f64) as the format's bit pattern: NaN to the
  /// canonical NaN, ±inf as an overflow, finite values through finite().
  Value *fromFloat(Value *x, unsigned expBits, unsigned manBits) {
    const unsigned width = 1 + expBits + manBits;
    Value *b = B.CreateZExt(B.CreateBitCast(x, B.getIntNTy(width)), i64());
    Value *neg = B.CreateICmpNE(B.CreateLShr(b, c(width - 1)), c(0));
    const uint64_t efMax = (uint64_t(1) << expBits) - 1;
    const int64_t bias = (int64_t(1) << (expBits - 1)) - 1;
    Value *ef = B.CreateAnd(B.CreateLShr(b, c(manBits)), c(efMax));
    Value *m = B.CreateAnd(b, c((uint64_t(1) << manBits) - 1));
    Value *sub = B.CreateICmpEQ(ef, c(0));
    Value *S = B.CreateSelect(sub, m, B.CreateOr(m, c(uint64_t(1) << manBits)));
    // value = S * 2^e0: e0 = emin - manBits for subnormals, ef - bias - manBits otherwise.
    Value *e0 = B.CreateSelect(sub, c(uint64_t(1 - bias - int64_t(manBits))), B.CreateSub(ef, c(uint64_t(bias + manBits))));
    Value *sign = B.CreateSelect(neg, c(f.signBit()), c(0));
    Value *special = B.CreateOr(sign, B.CreateSelect(B.CreateICmpNE(m, c(0)), c(f.nan()), c(overflowBits())));
    return B.CreateSelect(B.CreateICmpEQ(ef, c(efMax)), special, finite(neg, S, e0));
  }

  /// An i64 as the format's bit pattern, rounded once from the exact integer.
  Value *fromInt(Value *x) {
    Value *neg = B.CreateICmpSLT(x, c(0));
    // 0 - x as unsigned: INT64_MIN's magnitude 2^63 too.
    Value *S = B.CreateSelect(neg, B.CreateSub(c(0), x), x);
    return finite(neg, S, c(0));
  }

  /// A bit pattern of the format as the f32 of its value (exact: every value of these formats is
  /// an f32).
  Value *toF32(Value *bits) {
    Type *f32 = B.getFloatTy();
    if (f.expBits == 8) // bf16, tf32: f32's exponent field; the significand is f32's top bits
      return B.CreateBitCast(B.CreateTrunc(B.CreateShl(bits, c(23 - f.manBits)), B.getInt32Ty()), f32);
    if (f.expBits == 5 && f.manBits == 10)
      return B.CreateFPExt(B.CreateBitCast(B.CreateTrunc(bits, B.getInt16Ty()), B.getHalfTy()), f32);
    // fp8: normal values rebuilt with f32's bias, subnormals as m * 2^(emin - manBits).
    Value *neg = B.CreateICmpNE(B.CreateAnd(bits, c(f.signBit())), c(0));
    Value *ef = B.CreateLShr(B.CreateAnd(bits, c(f.expMask())), c(uint64_t(f.manBits)));
    Value *m = B.CreateAnd(bits, c(f.manMask()));
    Value *normal = B.CreateOr(B.CreateShl(B.CreateAdd(ef, c(uint64_t(127 - f.bias()))), c(23)), B.CreateShl(m, c(23 - f.manBits)));
    Value *normalF = B.CreateBitCast(B.CreateTrunc(normal, B.getInt32Ty()), f32);
    Value *subF = B.CreateFMul(B.CreateUIToFP(m, f32), ConstantFP::get(f32, std::ldexp(1.0, int(f.emin() - f.manBits))));
    Value *mag = B.CreateSelect(B.CreateICmpEQ(ef, c(0)), subF, normalF);
    const uint64_t efMax = (uint64_t(1) << f.expBits) - 1;
    Value *top = B.CreateICmpEQ(ef, c(efMax));
    Value *isNan = f.ieee ? B.CreateAnd(top, B.CreateICmpNE(m, c(0))) : B.CreateAnd(top, B.CreateICmpEQ(m, c(f.manMask())));
    mag = B.CreateSelect(isNan, ConstantFP::getNaN(f32), mag);
    if (f.ieee) mag = B.CreateSelect(B.CreateAnd(top, B.CreateICmpEQ(m, c(0))), ConstantFP::getInfinity(f32), mag);
    return B.CreateSelect(neg, B.CreateFNeg(mag), mag);
  }
};

int64_t constantArg(Value *v, const std::string &helper) {
  auto *ci = dyn_cast<ConstantInt>(v);
  if (!ci) throw CodegenError("internal error: NVPTX: " + helper + " with a run-time dtype or saturation (please report this)");
  return ci->getSExtValue();
}

// Python's integer power (the host's tsr_cg_ipow): for n < 0, 1 ** n = 1, (-1) ** n = ±1 and
// 0 otherwise (compiled code cannot raise; the program's `err` slot reports 0 ** -n); else
// square-and-multiply, wrapping modulo 2^64.
Function *ipowFunction(Module &m) {
  if (Function *f = m.getFunction("tsr.nv.ipow")) return f;
  LLVMContext &ctx = m.getContext();
  Type *i64 = Type::getInt64Ty(ctx);
  Function *f = Function::Create(FunctionType::get(i64, {i64, i64}, false), GlobalValue::InternalLinkage, "tsr.nv.ipow", m);
  f->addFnAttr(Attribute::AlwaysInline);
  f->addFnAttr(Attribute::NoUnwind);
  Value *x = f->getArg(0), *n = f->getArg(1);
  BasicBlock *entry = BasicBlock::Create(ctx, "entry", f);
  BasicBlock *negative = BasicBlock::Create(ctx, "negative", f);
  BasicBlock *loop = BasicBlock::Create(ctx, "loop", f);
  BasicBlock *done = BasicBlock::Create(ctx, "done", f);
  IRBuilder<> b(entry);
  b.CreateCondBr(b.CreateICmpSLT(n, b.getInt64(0)), negative, loop);

  b.SetInsertPoint(negative);
  Value *oddN = b.CreateICmpNE(b.CreateAnd(n, b.getInt64(1)), b.getInt64(0));
  Value *minusOne = b.CreateSelect(oddN, b.getInt64(uint64_t(-1)), b.getInt64(1));
  Value *r = b.CreateSelect(b.CreateICmpEQ(x, b.getInt64(1)), b.getInt64(1),
                            b.CreateSelect(b.CreateICmpEQ(x, b.getInt64(uint64_t(-1))), minusOne, b.getInt64(0)));
  b.CreateRet(r);

  // loop: while (e) { if (e & 1) r *= base; base *= base; e >>= 1; }
  b.SetInsertPoint(loop);
  PHINode *acc = b.CreatePHI(i64, 2), *base = b.CreatePHI(i64, 2), *e = b.CreatePHI(i64, 2);
  acc->addIncoming(b.getInt64(1), entry);
  base->addIncoming(x, entry);
  e->addIncoming(n, entry);
  Value *bit = b.CreateICmpNE(b.CreateAnd(e, b.getInt64(1)), b.getInt64(0));
  Value *acc2 = b.CreateSelect(bit, b.CreateMul(acc, base), acc);
  Value *base2 = b.CreateMul(base, base);
  Value *e2 = b.CreateLShr(e, b.getInt64(1));
  acc->addIncoming(acc2, loop);
  base->addIncoming(base2, loop);
  e->addIncoming(e2, loop);
  // The test is at the bottom: e == 0 on entry runs one iteration that changes nothing.
  b.CreateCondBr(b.CreateICmpEQ(e2, b.getInt64(0)), done, loop);
  b.SetInsertPoint(done);
  b.CreateRet(acc2);
  return f;
}

// tsr_cg_round_* / tsr_cg_encode_f32 for one (helper, dtype, saturation): an internal function of
// one argument, built once per module.
Function *conversionFunction(Module &m, const std::string &helper, DType d, bool sat, Type *argTy, Type *ret) {
  std::string name = "tsr.nv." + helper.substr(7) + "." + std::string(dtypeName(d)) + (sat ? ".sat" : "");
  if (Function *f = m.getFunction(name)) return f;
  const Format fmt = formatOf(d);
  if (helper == "tsr_cg_encode_f32" && fmt.expBits + fmt.manBits != 7)
    throw CodegenError("NVPTX: no conversion helper encodes " + std::string(dtypeName(d)) + " (fp8 only)");
  Function *f = Function::Create(FunctionType::get(ret, {argTy}, false), GlobalValue::InternalLinkage, name, m);
  f->addFnAttr(Attribute::AlwaysInline);
  f->addFnAttr(Attribute::NoUnwind);
  IRBuilder<> b(BasicBlock::Create(m.getContext(), "entry", f));
  Encoder enc{b, fmt, sat};
  Value *x = f->getArg(0), *bits;
  if (helper == "tsr_cg_round_i64") bits = enc.fromInt(x);
  else if (argTy->isDoubleTy()) bits = enc.fromFloat(x, 11, 52);
  else bits = enc.fromFloat(x, 8, 23);
  b.CreateRet(helper == "tsr_cg_encode_f32" ? b.CreateTrunc(bits, b.getInt8Ty()) : enc.toF32(bits));
  return f;
}

} // namespace

Value *conversionHelperCall(IRBuilderBase &b, const std::string &name, Type *ret, ArrayRef<Value *> args) {
  Module &m = *b.GetInsertBlock()->getModule();
  if (name == "tsr_cg_ipow") {
    if (args.size() != 2) throw CodegenError("internal error: NVPTX: tsr_cg_ipow takes 2 arguments (please report this)");
    return b.CreateCall(ipowFunction(m), {args[0], args[1]});
  }
  if (name == "tsr_cg_round_f32" || name == "tsr_cg_round_f64" || name == "tsr_cg_round_i64" || name == "tsr_cg_encode_f32") {
    if (args.size() != 3) throw CodegenError("internal error: NVPTX: " + name + " takes 3 arguments (please report this)");
    const auto d = static_cast<DType>(constantArg(args[0], name));
    const bool sat = constantArg(args[2], name) != 0;
    return b.CreateCall(conversionFunction(m, name, d, sat, args[1]->getType(), ret), {args[1]});
  }
  throw CodegenError("NVPTX: no lowering yet for the runtime helper " + name + "; the host CPU target has it");
}

} // namespace tsr::codegen::nvptx
