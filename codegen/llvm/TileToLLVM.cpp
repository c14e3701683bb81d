// Tile IR -> LLVM IR. See TileToLLVM.h for the shape of the generated code; the numeric rules are
// runtime/Numeric.h's (conversions) and ir/eval/Evaluator.h's (integer and NaN semantics).
#include "codegen/llvm/TileToLLVM.h"

#include "codegen/cpu/CpuKernel.h"
#include "runtime/Numeric.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/MDBuilder.h"
#include "llvm/IR/Module.h"

#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <unordered_map>

namespace tsr::codegen {

using namespace llvm;
using tile::OpKind;
using TOp = tile::Op;
using TValue = tile::Value;
using TType = tile::Type;

namespace {

/// Byte offsets of KernelArg's fields (CpuKernel.h), checked at compile time.
static_assert(offsetof(KernelArg, data) == 0);
static_assert(offsetof(KernelArg, shape) == 8);
static_assert(offsetof(KernelArg, strides) == 8 + 8 * kMaxRank);
static_assert(offsetof(KernelArg, i) == 8 + 16 * kMaxRank);
static_assert(offsetof(KernelArg, f) == 16 + 16 * kMaxRank);
static_assert(sizeof(KernelArg) == 24 + 16 * kMaxRank);

bool narrowFloat(DType d) {
  return d == DType::BF16 || d == DType::F16 || d == DType::F8E4M3 || d == DType::F8E5M2 || d == DType::TF32;
}

[[noreturn]] void fail(const tile::Function &f, const std::string &what) {
  throw CodegenError("internal error: codegen of tile function @" + f.name + ": " + what +
                     " (please report this)");
}

struct TensorInfo {
  Value *data = nullptr;
  std::vector<Value *> shape, strides;
};

class Lowering {
public:
  Lowering(const tile::Function &f, Module &m, const TargetDesc &t, Function *fn)
      : F(f), M(m), C(m.getContext()), T(t), fn(fn), B(C) {}

  void run();

  // One method per op class; Special ops dispatch again on their kind.
  void lowerClassUnary(const TOp &op);
  void lowerClassBinary(const TOp &op);
  void lowerClassCompare(const TOp &op);
  void lowerClassSelect(const TOp &op);
  void lowerClassReduce(const TOp &op);
  void lowerClassSpecial(const TOp &op);

private:
  const tile::Function &F;
  Module &M;
  LLVMContext &C;
  const TargetDesc &T;
  Function *fn;
  IRBuilder<> B;
  BasicBlock *entry = nullptr;
  std::unordered_map<const TValue *, Value *> vals;
  std::unordered_map<const TValue *, TensorInfo> tensors;
  std::unordered_map<const TValue *, int> uses;
  // Tile buffers a loop carries, by the block argument: the in-place rules look them up.
  std::unordered_map<const TValue *, Value *> carriedBuf;

  // ---- types ----
  Type *i1() { return B.getInt1Ty(); }
  Type *i8() { return B.getInt8Ty(); }
  Type *i32() { return B.getInt32Ty(); }
  Type *i64() { return B.getInt64Ty(); }
  Type *f32() { return B.getFloatTy(); }
  Type *f64() { return B.getDoubleTy(); }
  /// The type a value of dtype `d` is computed in (registers).
  Type *ctype(DType d) {
    switch (d) {
    case DType::Bool: return i1();
    case DType::I8: return i8();
    case DType::I32: return i32();
    case DType::I64: return i64();
    case DType::F64: return f64();
    default: return f32();
    }
  }
  /// The element type of a tile buffer.
  Type *btype(DType d) { return d == DType::Bool ? i8() : ctype(d); }
  /// The element type of tensor storage (Tensor.h).
  Type *mtype(DType d) {
    switch (d) {
    case DType::Bool: case DType::I8: case DType::F8E4M3: case DType::F8E5M2: return i8();
    case DType::BF16: case DType::F16: return B.getInt16Ty();
    case DType::I32: return i32();
    case DType::I64: return i64();
    case DType::F64: return f64();
    default: return f32();
    }
  }
  Value *c64(int64_t v) { return B.getInt64(uint64_t(v)); }
  Value *cf(Type *t, double v) { return ConstantFP::get(t, v); }

  // ---- values ----
  Value *get(const TValue *v) {
    auto it = vals.find(v);
    if (it == vals.end()) fail(F, "value %" + std::to_string(v->id) + " is used before it is lowered");
    return it->second;
  }
  void set(const TValue *v, Value *x) { vals[v] = x; }
  Value *alloc(const TType &t) {
    IRBuilder<> ab(entry, entry->getFirstInsertionPt());
    auto *a = ab.CreateAlloca(ArrayType::get(btype(t.dtype), uint64_t(t.numElements())));
    a->setAlignment(Align(64));
    return a;
  }
  Value *elemPtr(Value *buf, DType d, Value *i) { return B.CreateInBoundsGEP(btype(d), buf, i); }
  Value *loadElem(Value *buf, DType d, Value *i) {
    Value *x = B.CreateLoad(btype(d), elemPtr(buf, d, i));
    return d == DType::Bool ? B.CreateICmpNE(x, B.getInt8(0)) : x;
  }
  void storeElem(Value *buf, DType d, Value *i, Value *x) {
    if (d == DType::Bool) x = B.CreateZExt(x, i8());
    B.CreateStore(x, elemPtr(buf, d, i));
  }

  // ---- control-flow helpers ----
  /// for (i = lo; i < hi; ++i) body(i), at the insertion point; continues after the loop.
  void loop(Value *lo, Value *hi, const std::function<void(Value *)> &body) {
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *head = BasicBlock::Create(C, "l.head", fn);
    BasicBlock *bodyBB = BasicBlock::Create(C, "l.body", fn);
    BasicBlock *exit = BasicBlock::Create(C, "l.exit", fn);
    B.CreateBr(head);
    B.SetInsertPoint(head);
    PHINode *i = B.CreatePHI(i64(), 2, "i");
    i->addIncoming(lo, pre);
    B.CreateCondBr(B.CreateICmpSLT(i, hi), bodyBB, exit);
    B.SetInsertPoint(bodyBB);
    body(i);
    Value *next = B.CreateAdd(i, c64(1), "", true, true);
    i->addIncoming(next, B.GetInsertBlock());
    B.CreateBr(head);
    B.SetInsertPoint(exit);
  }
  void loopN(int64_t n, const std::function<void(Value *)> &body) { loop(c64(0), c64(n), body); }
  /// Nested loops over `shape` (row-major, the last axis innermost).
  void loopNest(const std::vector<int64_t> &shape, const std::function<void(const std::vector<Value *> &)> &body) {
    std::vector<Value *> idx(shape.size());
    std::function<void(size_t)> rec = [&](size_t d) {
      if (d == shape.size()) { body(idx); return; }
      loopN(shape[d], [&](Value *i) { idx[d] = i; rec(d + 1); });
    };
    rec(0);
  }
  /// if (cond) then(); at the insertion point.
  void ifThen(Value *cond, const std::function<void()> &then) {
    BasicBlock *t = BasicBlock::Create(C, "if.then", fn);
    BasicBlock *j = BasicBlock::Create(C, "if.end", fn);
    B.CreateCondBr(cond, t, j);
    B.SetInsertPoint(t);
    then();
    B.CreateBr(j);
    B.SetInsertPoint(j);
  }
  /// cond ? then() : other, where then() may read memory only when cond holds.
  Value *guardedValue(Value *cond, const std::function<Value *()> &then, Value *other) {
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *t = BasicBlock::Create(C, "g.then", fn);
    BasicBlock *j = BasicBlock::Create(C, "g.end", fn);
    B.CreateCondBr(cond, t, j);
    B.SetInsertPoint(t);
    Value *v = then();
    BasicBlock *tEnd = B.GetInsertBlock();
    B.CreateBr(j);
    B.SetInsertPoint(j);
    PHINode *p = B.CreatePHI(v->getType(), 2);
    p->addIncoming(v, tEnd);
    p->addIncoming(other, pre);
    return p;
  }
  /// Copies a tile buffer (n elements of dtype d).
  void copyBuf(Value *dst, Value *src, const TType &t) {
    if (dst == src) return;
    uint64_t bytes = uint64_t(t.numElements()) * (t.dtype == DType::Bool ? 1 : btype(t.dtype)->getPrimitiveSizeInBits() / 8);
    B.CreateMemCpy(dst, MaybeAlign(64), src, MaybeAlign(64), bytes);
  }

  // ---- intrinsics and math ----
  Value *intr(Intrinsic::ID id, ArrayRef<Value *> args) {
    return B.CreateIntrinsic(id, {args[0]->getType()}, args);
  }
  Value *fma(Value *a, Value *b, Value *c) { return intr(Intrinsic::fmuladd, {a, b, c}); }
  Value *isNan(Value *x) { return B.CreateFCmpUNO(x, x); }
  Value *expF32(Value *x, bool base2);
  Value *tanhF32(Value *x);
  Value *libm(const char *name, Value *x) {
    std::string n = name;
    if (x->getType()->isFloatTy()) n += "f";
    return T.mathCall(B, n, x);
  }
  Value *expV(Value *x) { return x->getType()->isFloatTy() ? expF32(x, false) : intr(Intrinsic::exp, {x}); }
  Value *tanhV(Value *x) { return x->getType()->isFloatTy() ? tanhF32(x) : libm("tanh", x); }

  // ---- numeric conversions ----
  Value *roundTo(DType d, Value *x, bool sat);
  Value *saturateInf(Value *r, Value *in, double maxv);
  Value *fromMem(DType d, Value *raw);
  Value *toMem(DType d, Value *x);
  Value *convert(Value *x, DType from, DType to, bool sat);
  Value *constantOf(DType d, const ir::AttrValue &v);

  // ---- scalar semantics ----
  Value *unary(const TOp &op, DType d, Value *x);
  Value *binary(OpKind k, DType d, Value *a, Value *b);
  Value *compare(OpKind k, DType d, Value *a, Value *b);
  Value *floatFloorDivMod(Value *a, Value *b, bool wantMod);
  Value *intDivMod(OpKind k, Value *a, Value *b);

  // ---- op families ----
  void elementwise(const TOp &op, const std::function<Value *(const std::vector<Value *> &)> &f);
  void lowerConstant(const TOp &op);
  void lowerArange(const TOp &op);
  void lowerCast(const TOp &op);
  void lowerBroadcast(const TOp &op);
  void lowerTranspose(const TOp &op);
  void lowerDot(const TOp &op);
  void dotF32Blocked(Value *out, Value *a, Value *b, int64_t M, int64_t K, int64_t N);
  void microKernel(Value *out, Value *a, Value *b, int64_t K, int64_t N, int64_t row0, int64_t rowBlocks, int64_t MR,
                   int64_t col0, int64_t colBlocks, int64_t NV, int64_t W);
  void lowerBox(const TOp &op);
  void lowerGather(const TOp &op);
  void lowerFor(const TOp &op);
  void lowerIf(const TOp &op);
  void lowerBlock(const tile::Block &b);
  TensorInfo &tensor(const TValue *v);
  void atomicAdd(DType d, Value *ptr, Value *x);
};

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
Value *Lowering::tanhF32(Value *x) {
  Type *t = f32();
  Value *ax = intr(Intrinsic::fabs, {x});
  Value *z = B.CreateFMul(x, x);
  Value *p = cf(t, -5.70498872745E-3);
  for (double c : {2.06390887954E-2, -5.37397155531E-2, 1.33314422036E-1, -3.33332819422E-1}) p = fma(p, z, cf(t, c));
  Value *small = fma(B.CreateFMul(p, z), x, x);
  Value *e = expF32(B.CreateFMul(ax, cf(t, 2.0)), false);
  Value *big = B.CreateFSub(cf(t, 1.0), B.CreateFDiv(cf(t, 2.0), B.CreateFAdd(e, cf(t, 1.0))));
  big = intr(Intrinsic::copysign, {big, x});
  return B.CreateSelect(B.CreateFCmpOLT(ax, cf(t, 0.625)), small, big);
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
      r = B.CreateFMul(half, B.CreateFAdd(one, libm("erf", B.CreateFMul(x, cf(t, 0.7071067811865476)))));
    }
    break;
  }
  case OpKind::Silu: r = B.CreateFDiv(x, B.CreateFAdd(one, expV(B.CreateFNeg(x)))); break;
  case OpKind::Sin: r = intr(Intrinsic::sin, {x}); break;
  case OpKind::Cos: r = intr(Intrinsic::cos, {x}); break;
  case OpKind::Erf: r = libm("erf", x); break;
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

void Lowering::elementwise(const TOp &op, const std::function<Value *(const std::vector<Value *> &)> &f) {
  const TType &rt = op.result()->type;
  if (rt.isScalar()) {
    std::vector<Value *> xs;
    for (const TValue *v : op.operands) xs.push_back(get(v));
    set(op.result(), f(xs));
    return;
  }
  Value *out = alloc(rt);
  std::vector<Value *> bufs;
  for (const TValue *v : op.operands) bufs.push_back(get(v));
  loopN(rt.numElements(), [&](Value *i) {
    std::vector<Value *> xs;
    for (size_t k = 0; k < bufs.size(); ++k) xs.push_back(loadElem(bufs[k], op.operands[k]->type.dtype, i));
    storeElem(out, rt.dtype, i, f(xs));
  });
  set(op.result(), out);
}

void Lowering::lowerClassUnary(const TOp &op) {
  DType d = op.operands[0]->type.dtype;
  elementwise(op, [&](const std::vector<Value *> &x) { return unary(op, d, x[0]); });
}
void Lowering::lowerClassBinary(const TOp &op) {
  DType d = op.operands[0]->type.dtype;
  elementwise(op, [&](const std::vector<Value *> &x) { return binary(op.kind, d, x[0], x[1]); });
}
void Lowering::lowerClassCompare(const TOp &op) {
  DType d = op.operands[0]->type.dtype;
  elementwise(op, [&](const std::vector<Value *> &x) { return compare(op.kind, d, x[0], x[1]); });
}
void Lowering::lowerClassSelect(const TOp &op) {
  elementwise(op, [&](const std::vector<Value *> &x) { return B.CreateSelect(x[0], x[1], x[2]); });
}
void Lowering::lowerCast(const TOp &op) {
  const auto *dt = op.attrAs<ir::DTypeAttr>("dtype");
  DType from = op.operands[0]->type.dtype;
  elementwise(op, [&](const std::vector<Value *> &x) { return convert(x[0], from, dt->dtype, dt->policies.saturate); });
}

// ---- creation ----

void Lowering::lowerConstant(const TOp &op) {
  const TType &rt = op.result()->type;
  Value *c = constantOf(rt.dtype, *op.attr("value"));
  if (rt.isScalar()) { set(op.result(), c); return; }
  Value *out = alloc(rt);
  loopN(rt.numElements(), [&](Value *i) { storeElem(out, rt.dtype, i, c); });
  set(op.result(), out);
}

void Lowering::lowerArange(const TOp &op) {
  const TType &rt = op.result()->type;
  Value *out = alloc(rt);
  loopN(rt.numElements(), [&](Value *i) { storeElem(out, rt.dtype, i, B.CreateTrunc(i, ctype(rt.dtype))); });
  set(op.result(), out);
}

// ---- shape ----

static std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

void Lowering::lowerBroadcast(const TOp &op) {
  const TType &in = op.operands[0]->type, &rt = op.result()->type;
  Value *src = get(op.operands[0]);
  Value *out = alloc(rt);
  if (in.isScalar()) {
    loopN(rt.numElements(), [&](Value *i) { storeElem(out, rt.dtype, i, src); });
  } else {
    std::vector<int64_t> st = rowMajorStrides(in.shape);
    for (size_t d = 0; d < st.size(); ++d)
      if (in.shape[d] == 1) st[d] = 0;
    int64_t n = rt.numElements();
    std::vector<int64_t> ost = rowMajorStrides(rt.shape);
    loopNest(rt.shape, [&](const std::vector<Value *> &idx) {
      Value *so = c64(0), *oo = c64(0);
      for (size_t d = 0; d < idx.size(); ++d) {
        if (st[d]) so = B.CreateAdd(so, B.CreateMul(idx[d], c64(st[d])));
        oo = B.CreateAdd(oo, B.CreateMul(idx[d], c64(ost[d])));
      }
      storeElem(out, rt.dtype, oo, loadElem(src, in.dtype, so));
    });
    (void)n;
  }
  set(op.result(), out);
}

void Lowering::lowerTranspose(const TOp &op) {
  const TType &in = op.operands[0]->type, &rt = op.result()->type;
  const auto *perm = op.attrAs<std::vector<int64_t>>("perm");
  Value *src = get(op.operands[0]);
  Value *out = alloc(rt);
  std::vector<int64_t> ist = rowMajorStrides(in.shape), ost = rowMajorStrides(rt.shape);
  loopNest(rt.shape, [&](const std::vector<Value *> &idx) {
    Value *so = c64(0), *oo = c64(0);
    for (size_t d = 0; d < idx.size(); ++d) {
      so = B.CreateAdd(so, B.CreateMul(idx[d], c64(ist[(*perm)[d]])));
      oo = B.CreateAdd(oo, B.CreateMul(idx[d], c64(ost[d])));
    }
    storeElem(out, rt.dtype, oo, loadElem(src, in.dtype, so));
  });
  set(op.result(), out);
}

// ---- reductions ----

void Lowering::lowerClassReduce(const TOp &op) {
  const TType &in = op.operands[0]->type, &rt = op.result()->type;
  DType d = in.dtype;
  int64_t axis = op.intAttr("axis");
  int64_t outer = 1, R = in.shape[axis], inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= in.shape[i];
  for (size_t i = axis + 1; i < in.shape.size(); ++i) inner *= in.shape[i];
  Value *src = get(op.operands[0]);
  Type *ct = ctype(d);
  bool isArg = op.kind == OpKind::ArgMax || op.kind == OpKind::ArgMin;
  bool fl = isFloat(d);

  auto identity = [&]() -> Value * {
    switch (op.kind) {
    case OpKind::ReduceSum: return fl ? cf(ct, 0.0) : ConstantInt::get(ct, 0);
    case OpKind::ReduceProd: return fl ? cf(ct, 1.0) : ConstantInt::get(ct, 1);
    case OpKind::ReduceMax:
      if (fl) return cf(ct, -INFINITY);
      return d == DType::Bool ? B.getFalse() : ConstantInt::get(ct, APInt::getSignedMinValue(ct->getIntegerBitWidth()));
    default:
      if (fl) return cf(ct, INFINITY);
      return d == DType::Bool ? B.getTrue() : ConstantInt::get(ct, APInt::getSignedMaxValue(ct->getIntegerBitWidth()));
    }
  };
  auto combine = [&](Value *acc, Value *x) -> Value * {
    switch (op.kind) {
    case OpKind::ReduceSum:
      if (!fl) return d == DType::Bool ? B.CreateOr(acc, x) : B.CreateAdd(acc, x);
      {
        // Reassociable, so that a reduction along the contiguous axis vectorizes.
        auto *s = cast<Instruction>(B.CreateFAdd(acc, x));
        s->setHasAllowReassoc(true);
        return s;
      }
    case OpKind::ReduceProd:
      if (!fl) return d == DType::Bool ? B.CreateAnd(acc, x) : B.CreateMul(acc, x);
      {
        auto *s = cast<Instruction>(B.CreateFMul(acc, x));
        s->setHasAllowReassoc(true);
        return s;
      }
    default: return binary(op.kind == OpKind::ReduceMax ? OpKind::Max : OpKind::Min, fl ? (ct->isDoubleTy() ? DType::F64 : DType::F32) : d, acc, x);
    }
  };
  // The best so far for argmax/argmin: strictly better, or NaN where the best is not (the first
  // NaN wins, as the first extreme does).
  auto better = [&](Value *x, Value *best) -> Value * {
    bool mx = op.kind == OpKind::ArgMax;
    if (!fl) return mx ? (d == DType::Bool ? B.CreateICmpUGT(x, best) : B.CreateICmpSGT(x, best))
                       : (d == DType::Bool ? B.CreateICmpULT(x, best) : B.CreateICmpSLT(x, best));
    Value *cmp = mx ? B.CreateFCmpOGT(x, best) : B.CreateFCmpOLT(x, best);
    return B.CreateOr(cmp, B.CreateAnd(isNan(x), B.CreateNot(isNan(best))));
  };

  bool scalarOut = rt.isScalar();
  Value *out = scalarOut ? nullptr : alloc(rt);
  if (!isArg && inner == 1) {
    // Along the contiguous axis: a scalar accumulator per output.
    AllocaInst *accSlot = nullptr;
    {
      IRBuilder<> ab(entry, entry->getFirstInsertionPt());
      accSlot = ab.CreateAlloca(ct);
    }
    loopN(outer, [&](Value *o) {
      B.CreateStore(identity(), accSlot);
      loopN(R, [&](Value *r) {
        Value *x = loadElem(src, d, B.CreateAdd(B.CreateMul(o, c64(R)), r));
        B.CreateStore(combine(B.CreateLoad(ct, accSlot), x), accSlot);
      });
      Value *acc = B.CreateLoad(ct, accSlot);
      if (narrowFloat(d)) acc = roundTo(d, acc, false);
      if (!scalarOut) storeElem(out, rt.dtype, o, acc);
    });
    if (scalarOut) {
      // outer == 1; the value computed inside the loop does not dominate the exit: reload it.
      Value *acc = B.CreateLoad(ct, accSlot);
      set(op.result(), narrowFloat(d) ? roundTo(d, acc, false) : acc);
    } else {
      set(op.result(), out);
    }
    return;
  }
  // Along an outer axis: accumulate rows into the output (the inner loop vectorizes).
  Value *acc = scalarOut ? alloc(TType::tile({1}, isArg ? d : d)) : out;
  Value *bestBuf = isArg ? alloc(TType::tile({outer * inner}, d)) : nullptr;
  Value *idxBuf = isArg ? (scalarOut ? alloc(TType::tile({1}, DType::I64)) : out) : nullptr;
  loopN(outer, [&](Value *o) {
    Value *base = B.CreateMul(o, c64(inner));
    loopN(inner, [&](Value *j) {
      Value *oi = B.CreateAdd(base, j);
      if (isArg) {
        storeElem(bestBuf, d, oi, loadElem(src, d, B.CreateAdd(B.CreateMul(o, c64(R * inner)), j)));
        storeElem(idxBuf, DType::I64, oi, c64(0));
      } else {
        storeElem(acc, d, oi, identity());
      }
    });
    loop(c64(isArg ? 1 : 0), c64(R), [&](Value *r) {
      Value *rowBase = B.CreateAdd(B.CreateMul(o, c64(R * inner)), B.CreateMul(r, c64(inner)));
      loopN(inner, [&](Value *j) {
        Value *oi = B.CreateAdd(base, j);
        Value *x = loadElem(src, d, B.CreateAdd(rowBase, j));
        if (isArg) {
          Value *best = loadElem(bestBuf, d, oi);
          Value *bt = better(x, best);
          storeElem(bestBuf, d, oi, B.CreateSelect(bt, x, best));
          storeElem(idxBuf, DType::I64, oi, B.CreateSelect(bt, r, loadElem(idxBuf, DType::I64, oi)));
        } else {
          storeElem(acc, d, oi, combine(loadElem(acc, d, oi), x));
        }
      });
    });
    if (!isArg && narrowFloat(d))
      loopN(inner, [&](Value *j) {
        Value *oi = B.CreateAdd(base, j);
        storeElem(acc, d, oi, roundTo(d, loadElem(acc, d, oi), false));
      });
  });
  if (scalarOut) set(op.result(), isArg ? loadElem(idxBuf, DType::I64, c64(0)) : loadElem(acc, d, c64(0)));
  else set(op.result(), out);
}

// ---- dot ----

// f32 C[M,N] += A[M,K] @ B[K,N], row-major buffers: a register-blocked micro-kernel. Blocks of
// MR rows by NV vectors of W floats keep MR*NV accumulators in vector registers across the whole
// k loop (for each k: NV loads of B's row, MR broadcasts of A, MR*NV FMAs), as in BLIS's
// micro-kernels (Van Zee & van de Geijn, "BLIS", ACM TOMS 2015). Leftover rows take one block of
// fewer rows, leftover whole vectors one block of fewer vectors, and the last columns (fewer than
// W) a plain i-k-j loop nest.
void Lowering::microKernel(Value *out, Value *a, Value *bb, int64_t K, int64_t N, int64_t row0, int64_t rowBlocks,
                           int64_t MR, int64_t col0, int64_t colBlocks, int64_t NV, int64_t W) {
  auto *vt = FixedVectorType::get(f32(), unsigned(W));
  loop(c64(0), c64(rowBlocks), [&](Value *ib) {
    Value *i0 = B.CreateAdd(c64(row0), B.CreateMul(ib, c64(MR)));
    loop(c64(0), c64(colBlocks), [&](Value *jb) {
      Value *j0 = B.CreateAdd(c64(col0), B.CreateMul(jb, c64(NV * W)));
      std::vector<Value *> cptr(MR * NV), acc0(MR * NV);
      for (int64_t r = 0; r < MR; ++r)
        for (int64_t v = 0; v < NV; ++v) {
          Value *off = B.CreateAdd(B.CreateMul(B.CreateAdd(i0, c64(r)), c64(N)), B.CreateAdd(j0, c64(v * W)));
          cptr[r * NV + v] = B.CreateInBoundsGEP(f32(), out, off);
          acc0[r * NV + v] = B.CreateAlignedLoad(vt, cptr[r * NV + v], Align(4));
        }
      // The k loop, with the accumulators as phis.
      BasicBlock *pre = B.GetInsertBlock();
      BasicBlock *body = BasicBlock::Create(C, "mk.body", fn);
      BasicBlock *exit = BasicBlock::Create(C, "mk.exit", fn);
      B.CreateBr(body);
      B.SetInsertPoint(body);
      PHINode *k = B.CreatePHI(i64(), 2, "k");
      k->addIncoming(c64(0), pre);
      std::vector<PHINode *> acc(MR * NV);
      for (size_t q = 0; q < acc.size(); ++q) {
        acc[q] = B.CreatePHI(vt, 2);
        acc[q]->addIncoming(acc0[q], pre);
      }
      std::vector<Value *> bv(NV);
      Value *brow = B.CreateAdd(B.CreateMul(k, c64(N)), j0);
      for (int64_t v = 0; v < NV; ++v)
        bv[v] = B.CreateAlignedLoad(vt, B.CreateInBoundsGEP(f32(), bb, B.CreateAdd(brow, c64(v * W))), Align(4));
      std::vector<Value *> next(MR * NV);
      for (int64_t r = 0; r < MR; ++r) {
        Value *av = B.CreateLoad(f32(), B.CreateInBoundsGEP(f32(), a, B.CreateAdd(B.CreateMul(B.CreateAdd(i0, c64(r)), c64(K)), k)));
        Value *splat = B.CreateVectorSplat(unsigned(W), av);
        for (int64_t v = 0; v < NV; ++v) next[r * NV + v] = fma(splat, bv[v], acc[r * NV + v]);
      }
      Value *kn = B.CreateAdd(k, c64(1), "", true, true);
      k->addIncoming(kn, body);
      for (size_t q = 0; q < acc.size(); ++q) acc[q]->addIncoming(next[q], body);
      B.CreateCondBr(B.CreateICmpSLT(kn, c64(K)), body, exit);
      B.SetInsertPoint(exit);
      for (size_t q = 0; q < acc.size(); ++q) B.CreateAlignedStore(next[q], cptr[q], Align(4));
    });
  });
}

void Lowering::dotF32Blocked(Value *out, Value *a, Value *bb, int64_t M, int64_t K, int64_t N) {
  const int64_t W = T.vectorFloats();
  // Accumulators plus NV B vectors plus one broadcast within the register file.
  const int64_t regs = T.vectorRegisters();
  // 6 x 4 vectors measured best among 4x4, 6x4, 8x3, 12x2 and 14x2 on AVX-512 (tools/bench/gemm_cpu).
  const int64_t NV = regs >= 32 ? 4 : 2, MR = regs >= 32 ? 6 : 4;
  int64_t Mb = M / MR * MR, Nb = N / (NV * W) * (NV * W);
  int64_t NV2 = (N - Nb) / W, Ns = Nb + NV2 * W;
  if (K > 0) {
    for (auto [row0, blocks, mr] : {std::tuple<int64_t, int64_t, int64_t>{0, Mb / MR, MR}, {Mb, M > Mb ? 1 : 0, M - Mb}}) {
      if (blocks == 0 || mr == 0) continue;
      if (Nb > 0) microKernel(out, a, bb, K, N, row0, blocks, mr, 0, Nb / (NV * W), NV, W);
      if (NV2 > 0) microKernel(out, a, bb, K, N, row0, blocks, mr, Nb, 1, NV2, W);
    }
  }
  if (Ns == N) return;
  // The last columns: a plain i-k-j loop nest.
  loopN(M, [&](Value *i) {
    loopN(K, [&](Value *k) {
      Value *av = B.CreateLoad(f32(), B.CreateInBoundsGEP(f32(), a, B.CreateAdd(B.CreateMul(i, c64(K)), k)));
      loop(c64(Ns), c64(N), [&](Value *j) {
        Value *bp = B.CreateInBoundsGEP(f32(), bb, B.CreateAdd(B.CreateMul(k, c64(N)), j));
        Value *cp = B.CreateInBoundsGEP(f32(), out, B.CreateAdd(B.CreateMul(i, c64(N)), j));
        B.CreateStore(fma(av, B.CreateLoad(f32(), bp), B.CreateLoad(f32(), cp)), cp);
      });
    });
  });
}

void Lowering::lowerDot(const TOp &op) {
  const TType &at = op.operands[0]->type, &bt = op.operands[1]->type, &rt = op.result()->type;
  int64_t M = at.shape[0], K = at.shape[1], N = bt.shape[1];
  Value *a = get(op.operands[0]), *b = get(op.operands[1]);
  DType rd = rt.dtype;
  Type *acct = ctype(rd);
  Value *out;
  bool hasAcc = op.operands.size() == 3;
  // Accumulate in place when the accumulator is a loop's carried tile used only here (the
  // usual `acc = dot(a, b, acc)`): the yield then has nothing to copy.
  if (hasAcc && op.operands[2]->owner && carriedBuf.count(op.operands[2]) && uses[op.operands[2]] == 1) {
    out = get(op.operands[2]);
  } else {
    out = alloc(rt);
    if (hasAcc) copyBuf(out, get(op.operands[2]), rt);
    else {
      Value *z = isFloat(rd) ? cf(acct, 0.0) : ConstantInt::get(acct, 0);
      loopN(rt.numElements(), [&](Value *i) { storeElem(out, rd, i, z); });
    }
  }
  DType od = at.dtype;
  bool f32Path = acct->isFloatTy() && isFloat(od) && od != DType::F64 && rd != DType::Bool;
  if (f32Path) {
    dotF32Blocked(out, a, b, M, K, N);
  } else {
    // i-k-j with the j loop contiguous; operands widened to the accumulator's type.
    auto widen = [&](Value *x) -> Value * {
      if (x->getType() == acct) return x;
      if (isFloat(rd)) return isFloat(od) ? B.CreateFPCast(x, acct) : (od == DType::Bool ? B.CreateUIToFP(x, acct) : B.CreateSIToFP(x, acct));
      if (isFloat(od)) return B.CreateIntrinsic(Intrinsic::fptosi_sat, {acct, x->getType()}, {x});
      return od == DType::Bool ? B.CreateZExt(x, acct) : B.CreateSExtOrTrunc(x, acct);
    };
    loopN(M, [&](Value *i) {
      loopN(K, [&](Value *k) {
        Value *av = widen(loadElem(a, od, B.CreateAdd(B.CreateMul(i, c64(K)), k)));
        loopN(N, [&](Value *j) {
          Value *bv = widen(loadElem(b, od, B.CreateAdd(B.CreateMul(k, c64(N)), j)));
          Value *oi = B.CreateAdd(B.CreateMul(i, c64(N)), j);
          Value *cv = loadElem(out, rd, oi);
          storeElem(out, rd, oi, isFloat(rd) ? fma(av, bv, cv) : B.CreateAdd(cv, B.CreateMul(av, bv)));
        });
      });
    });
  }
  if (narrowFloat(rd))
    loopN(rt.numElements(), [&](Value *i) { storeElem(out, rd, i, roundTo(rd, loadElem(out, rd, i), false)); });
  set(op.result(), out);
}

// ---- memory ----

TensorInfo &Lowering::tensor(const TValue *v) {
  auto it = tensors.find(v);
  if (it == tensors.end()) fail(F, "a tensor operand is not a parameter");
  return it->second;
}

void Lowering::atomicAdd(DType d, Value *ptr, Value *x) {
  switch (d) {
  case DType::F32:
  case DType::F64:
  case DType::TF32:
    B.CreateAtomicRMW(AtomicRMWInst::FAdd, ptr, x, MaybeAlign(), AtomicOrdering::Monotonic);
    return;
  case DType::I8:
  case DType::I32:
  case DType::I64:
    B.CreateAtomicRMW(AtomicRMWInst::Add, ptr, x, MaybeAlign(), AtomicOrdering::Monotonic);
    return;
  case DType::Bool:
    B.CreateAtomicRMW(AtomicRMWInst::Or, ptr, toMem(d, x), MaybeAlign(), AtomicOrdering::Monotonic);
    return;
  case DType::BF16:
  case DType::F16: {
    // A compare-exchange loop: old bits -> f32, add, round back (nearest-even).
    Type *i16 = B.getInt16Ty();
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *body = BasicBlock::Create(C, "cas", fn);
    BasicBlock *exit = BasicBlock::Create(C, "cas.end", fn);
    Value *init = B.CreateLoad(i16, ptr);
    B.CreateBr(body);
    B.SetInsertPoint(body);
    PHINode *old = B.CreatePHI(i16, 2);
    old->addIncoming(init, pre);
    Value *sum = roundTo(d, B.CreateFAdd(fromMem(d, old), x), false);
    Value *pair = B.CreateAtomicCmpXchg(ptr, old, toMem(d, sum), MaybeAlign(), AtomicOrdering::Monotonic, AtomicOrdering::Monotonic);
    Value *seen = B.CreateExtractValue(pair, 0);
    old->addIncoming(seen, body);
    B.CreateCondBr(B.CreateExtractValue(pair, 1), exit, body);
    B.SetInsertPoint(exit);
    return;
  }
  default: fail(F, "atomic_add of " + std::string(dtypeName(d)));
  }
}

// load_box / store_box / atomic_add_box: nested loops over the box. A fast path without any
// per-element test runs when the box lies inside the tensor, there is no mask and the innermost
// box axis has stride 1; otherwise each element is tested against the tensor's bounds (and the
// mask) and out-of-bounds loads read `other`.
void Lowering::lowerBox(const TOp &op) {
  const TValue *tv = op.operands[0];
  TensorInfo &ti = tensor(tv);
  uint32_t rank = tv->type.rank;
  DType d = tv->type.dtype;
  const auto &box = *op.attrAs<std::vector<int64_t>>("box");
  bool isLoad = op.kind == OpKind::LoadBox;
  bool isAtomic = op.kind == OpKind::AtomicAddBox;
  const bool *maskedAttr = op.attrAs<bool>("masked");
  bool masked = maskedAttr && *maskedAttr;
  std::vector<Value *> starts;
  for (uint32_t i = 0; i < rank; ++i) starts.push_back(get(op.operands[1 + i]));
  size_t base = 1 + rank;
  const TValue *valueV = isLoad ? nullptr : op.operands[base];
  const TValue *maskV = masked ? op.operands[base + (isLoad ? 0 : 1)] : nullptr;
  TType tt = isLoad ? op.result()->type : valueV->type;
  bool scalarTile = tt.isScalar();
  Value *valBuf = valueV ? get(valueV) : nullptr;
  Value *maskBuf = maskV ? get(maskV) : nullptr;
  Value *out = isLoad && !scalarTile ? alloc(tt) : nullptr;
  Value *other = isLoad ? (op.attr("other") ? constantOf(d, *op.attr("other")) : constantOf(d, int64_t(0))) : nullptr;
  Type *mt = mtype(d);

  // Box axes that are tile axes, and the tile's row-major strides.
  std::vector<uint32_t> tileAxes;
  for (uint32_t i = 0; i < rank; ++i)
    if (box[i] > 0) tileAxes.push_back(i);
  std::vector<int64_t> tst = rowMajorStrides(tt.shape);

  auto elemAt = [&](Value *off) { return B.CreateInBoundsGEP(mt, ti.data, off); };
  auto access = [&](Value *ptr, Value *tileIdx, Value *scalarResultSlot) {
    if (isLoad) {
      Value *x = fromMem(d, B.CreateLoad(mt, ptr));
      if (scalarTile) B.CreateStore(d == DType::Bool ? B.CreateZExt(x, i8()) : x, scalarResultSlot);
      else storeElem(out, d, tileIdx, x);
    } else {
      Value *x = scalarTile ? valBuf : loadElem(valBuf, d, tileIdx);
      if (isAtomic) atomicAdd(d, ptr, x);
      else B.CreateStore(toMem(d, x), ptr);
    }
  };

  if (scalarTile) {
    // Every box axis is dropped: one element.
    Value *off = c64(0), *ok = B.getTrue();
    for (uint32_t i = 0; i < rank; ++i) {
      off = B.CreateAdd(off, B.CreateMul(starts[i], ti.strides[i]));
      ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpSGE(starts[i], c64(0)), B.CreateICmpSLT(starts[i], ti.shape[i])));
    }
    if (maskBuf) ok = B.CreateAnd(ok, maskBuf);
    if (isLoad) {
      Value *slot;
      {
        IRBuilder<> ab(entry, entry->getFirstInsertionPt());
        slot = ab.CreateAlloca(btype(d));
      }
      B.CreateStore(d == DType::Bool ? B.CreateZExt(other, i8()) : other, slot);
      ifThen(ok, [&] { access(elemAt(off), nullptr, slot); });
      Value *r = B.CreateLoad(btype(d), slot);
      set(op.result(), d == DType::Bool ? B.CreateICmpNE(r, B.getInt8(0)) : r);
    } else {
      ifThen(ok, [&] { access(elemAt(off), nullptr, nullptr); });
    }
    return;
  }

  // Whether the whole box is inside the tensor.
  Value *inside = B.getTrue();
  for (uint32_t i = 0; i < rank; ++i) {
    int64_t ext = box[i] > 0 ? box[i] : 1;
    inside = B.CreateAnd(inside, B.CreateAnd(B.CreateICmpSGE(starts[i], c64(0)),
                                             B.CreateICmpSLE(B.CreateAdd(starts[i], c64(ext)), ti.shape[i])));
  }
  uint32_t lastAxis = tileAxes.back();
  Value *fast = B.CreateAnd(inside, B.CreateICmpEQ(ti.strides[lastAxis], c64(1)));
  if (masked) fast = B.getFalse();
  Value *baseOff = c64(0);
  for (uint32_t i = 0; i < rank; ++i) baseOff = B.CreateAdd(baseOff, B.CreateMul(starts[i], ti.strides[i]));

  BasicBlock *fastBB = BasicBlock::Create(C, "box.fast", fn);
  BasicBlock *slowBB = BasicBlock::Create(C, "box.slow", fn);
  BasicBlock *endBB = BasicBlock::Create(C, "box.end", fn);
  B.CreateCondBr(fast, fastBB, slowBB);

  // Outer tile axes as a loop nest, the last one as the inner loop.
  std::vector<int64_t> outerShape(tt.shape.begin(), tt.shape.end() - 1);
  int64_t innerN = tt.shape.back();
  auto nest = [&](bool fastPath) {
    loopNest(outerShape, [&](const std::vector<Value *> &idx) {
      Value *rowOff = baseOff, *tileRow = c64(0), *rowOk = B.getTrue();
      for (size_t q = 0; q < idx.size(); ++q) {
        uint32_t ax = tileAxes[q];
        rowOff = B.CreateAdd(rowOff, B.CreateMul(idx[q], ti.strides[ax]));
        tileRow = B.CreateAdd(tileRow, B.CreateMul(idx[q], c64(tst[q])));
        if (!fastPath) {
          Value *pos = B.CreateAdd(starts[ax], idx[q]);
          rowOk = B.CreateAnd(rowOk, B.CreateAnd(B.CreateICmpSGE(pos, c64(0)), B.CreateICmpSLT(pos, ti.shape[ax])));
        }
      }
      if (!fastPath)
        for (uint32_t ax = 0; ax < rank; ++ax)
          if (box[ax] == 0)
            rowOk = B.CreateAnd(rowOk, B.CreateAnd(B.CreateICmpSGE(starts[ax], c64(0)), B.CreateICmpSLT(starts[ax], ti.shape[ax])));
      Value *rowPtr = elemAt(rowOff);
      if (fastPath) {
        loopN(innerN, [&](Value *j) { access(B.CreateInBoundsGEP(mt, rowPtr, j), B.CreateAdd(tileRow, j), nullptr); });
        return;
      }
      // Columns in bounds: j in [lo, hi) with 0 <= start + j < dim.
      Value *s = starts[lastAxis];
      Value *lo = B.CreateBinaryIntrinsic(Intrinsic::smin, B.CreateBinaryIntrinsic(Intrinsic::smax, B.CreateSub(c64(0), s), c64(0)), c64(innerN));
      Value *hi = B.CreateBinaryIntrinsic(Intrinsic::smax, B.CreateBinaryIntrinsic(Intrinsic::smin, B.CreateSub(ti.shape[lastAxis], s), c64(innerN)), lo);
      hi = B.CreateSelect(rowOk, hi, lo);
      Value *stride = ti.strides[lastAxis];
      loopN(innerN, [&](Value *j) {
        Value *ti_ = B.CreateAdd(tileRow, j);
        Value *ok = B.CreateAnd(B.CreateICmpSGE(j, lo), B.CreateICmpSLT(j, hi));
        if (maskBuf) ok = B.CreateAnd(ok, loadElem(maskBuf, DType::Bool, ti_));
        Value *ptr = B.CreateGEP(mt, rowPtr, B.CreateMul(j, stride));
        if (isLoad) {
          Value *x = guardedValue(ok, [&] { return fromMem(d, B.CreateLoad(mt, ptr)); }, other);
          storeElem(out, d, ti_, x);
        } else {
          ifThen(ok, [&] { access(ptr, ti_, nullptr); });
        }
      });
    });
  };
  B.SetInsertPoint(fastBB);
  nest(true);
  B.CreateBr(endBB);
  B.SetInsertPoint(slowBB);
  nest(false);
  B.CreateBr(endBB);
  B.SetInsertPoint(endBB);
  if (isLoad) set(op.result(), out);
}

// load / store / atomic_add by element offsets (gathers and scatters).
void Lowering::lowerGather(const TOp &op) {
  const TValue *tv = op.operands[0];
  TensorInfo &ti = tensor(tv);
  DType d = tv->type.dtype;
  Type *mt = mtype(d);
  bool isLoad = op.kind == OpKind::Load;
  const TValue *offV = op.operands[1];
  const TValue *valV = isLoad ? nullptr : op.operands[2];
  size_t maskIdx = isLoad ? 2 : 3;
  const TValue *maskV = op.operands.size() > maskIdx ? op.operands[maskIdx] : nullptr;
  Value *other = isLoad ? (op.attr("other") ? constantOf(d, *op.attr("other")) : constantOf(d, int64_t(0))) : nullptr;
  const TType &st = offV->type;
  auto one = [&](Value *off, Value *mask, Value *val) -> Value * {
    Value *ptr = B.CreateGEP(mt, ti.data, off);
    if (isLoad) {
      auto ld = [&] { return fromMem(d, B.CreateLoad(mt, ptr)); };
      return mask ? guardedValue(mask, ld, other) : ld();
    }
    auto st_ = [&] {
      if (op.kind == OpKind::AtomicAdd) atomicAdd(d, ptr, val);
      else B.CreateStore(toMem(d, val), ptr);
    };
    if (mask) ifThen(mask, st_);
    else st_();
    return nullptr;
  };
  if (st.isScalar()) {
    Value *r = one(get(offV), maskV ? get(maskV) : nullptr, valV ? get(valV) : nullptr);
    if (isLoad) set(op.result(), r);
    return;
  }
  Value *out = isLoad ? alloc(op.result()->type) : nullptr;
  Value *offB = get(offV), *maskB = maskV ? get(maskV) : nullptr, *valB = valV ? get(valV) : nullptr;
  loopN(st.numElements(), [&](Value *i) {
    Value *r = one(loadElem(offB, DType::I64, i), maskB ? loadElem(maskB, DType::Bool, i) : nullptr,
                   valB ? loadElem(valB, d, i) : nullptr);
    if (isLoad) storeElem(out, d, i, r);
  });
  if (isLoad) set(op.result(), out);
}

// ---- control flow ----

void Lowering::lowerFor(const TOp &op) {
  const tile::Block &body = *op.regions[0];
  Value *lo = get(op.operands[0]), *hi = get(op.operands[1]), *step = get(op.operands[2]);
  size_t n = op.operands.size() - 3;
  // Tiles are carried in buffers of their own, scalars in phis.
  std::vector<Value *> bufs(n, nullptr);
  for (size_t q = 0; q < n; ++q) {
    const TValue *init = op.operands[3 + q];
    if (!init->type.isScalar()) {
      bufs[q] = alloc(init->type);
      copyBuf(bufs[q], get(init), init->type);
    }
  }
  BasicBlock *pre = B.GetInsertBlock();
  BasicBlock *head = BasicBlock::Create(C, "for.head", fn);
  BasicBlock *bodyBB = BasicBlock::Create(C, "for.body", fn);
  BasicBlock *exit = BasicBlock::Create(C, "for.exit", fn);
  B.CreateBr(head);
  B.SetInsertPoint(head);
  PHINode *iv = B.CreatePHI(i64(), 2, "iv");
  iv->addIncoming(lo, pre);
  std::vector<PHINode *> phis(n, nullptr);
  for (size_t q = 0; q < n; ++q)
    if (!bufs[q]) {
      phis[q] = B.CreatePHI(ctype(op.operands[3 + q]->type.dtype), 2);
      phis[q]->addIncoming(get(op.operands[3 + q]), pre);
    }
  Value *zero = c64(0);
  Value *more = B.CreateOr(B.CreateAnd(B.CreateICmpSGT(step, zero), B.CreateICmpSLT(iv, hi)),
                           B.CreateAnd(B.CreateICmpSLT(step, zero), B.CreateICmpSGT(iv, hi)));
  B.CreateCondBr(more, bodyBB, exit);
  B.SetInsertPoint(bodyBB);
  set(body.args[0], iv);
  for (size_t q = 0; q < n; ++q) {
    const TValue *arg = body.args[1 + q];
    if (bufs[q]) { set(arg, bufs[q]); carriedBuf[arg] = bufs[q]; }
    else set(arg, phis[q]);
  }
  lowerBlock(body);
  const TOp *y = body.ops.back();
  // Tile yields are copied into the carried buffers; through temporaries when one of them reads
  // another carried buffer (a swap) or may (a branch's result).
  bool viaTemp = false;
  for (size_t q = 0; q < n; ++q)
    if (bufs[q]) {
      Value *src = get(y->operands[q]);
      for (size_t r = 0; r < n; ++r)
        if (r != q && bufs[r] && src == bufs[r]) viaTemp = true;
      if (isa<PHINode>(src) || isa<SelectInst>(src)) viaTemp = true;
    }
  std::vector<Value *> srcs(n);
  for (size_t q = 0; q < n; ++q) {
    srcs[q] = get(y->operands[q]);
    if (bufs[q] && viaTemp && srcs[q] != bufs[q]) {
      Value *tmp = alloc(y->operands[q]->type);
      copyBuf(tmp, srcs[q], y->operands[q]->type);
      srcs[q] = tmp;
    }
  }
  for (size_t q = 0; q < n; ++q)
    if (bufs[q]) copyBuf(bufs[q], srcs[q], y->operands[q]->type);
  BasicBlock *latch = B.GetInsertBlock();
  iv->addIncoming(B.CreateAdd(iv, step), latch);
  for (size_t q = 0; q < n; ++q)
    if (phis[q]) phis[q]->addIncoming(srcs[q], latch);
  B.CreateBr(head);
  B.SetInsertPoint(exit);
  for (size_t q = 0; q < n; ++q) set(op.results[q], bufs[q] ? bufs[q] : static_cast<Value *>(phis[q]));
}

void Lowering::lowerIf(const TOp &op) {
  Value *cond = get(op.operands[0]);
  BasicBlock *thenBB = BasicBlock::Create(C, "then", fn);
  BasicBlock *elseBB = BasicBlock::Create(C, "else", fn);
  BasicBlock *endBB = BasicBlock::Create(C, "endif", fn);
  B.CreateCondBr(cond, thenBB, elseBB);
  std::vector<std::pair<BasicBlock *, std::vector<Value *>>> arms;
  for (int r = 0; r < 2; ++r) {
    B.SetInsertPoint(r == 0 ? thenBB : elseBB);
    const tile::Block &blk = *op.regions[r];
    lowerBlock(blk);
    std::vector<Value *> ys;
    for (const TValue *v : blk.ops.back()->operands) ys.push_back(get(v));
    arms.push_back({B.GetInsertBlock(), ys});
    B.CreateBr(endBB);
  }
  B.SetInsertPoint(endBB);
  // Buffers are never written after they are made (except a loop's carried ones, which a branch
  // can only yield as its own value), so a tile result is a phi of the arms' buffer pointers.
  for (size_t q = 0; q < op.results.size(); ++q) {
    PHINode *p = B.CreatePHI(arms[0].second[q]->getType(), 2);
    p->addIncoming(arms[0].second[q], arms[0].first);
    p->addIncoming(arms[1].second[q], arms[1].first);
    set(op.results[q], p);
  }
}

void Lowering::lowerClassSpecial(const TOp &op) {
  switch (op.kind) {
  case OpKind::ProgramId: set(op.result(), T.programId(B, fn, int(op.intAttr("axis")))); return;
  case OpKind::NumPrograms: set(op.result(), T.numPrograms(B, fn, int(op.intAttr("axis")))); return;
  case OpKind::TensorDim: set(op.result(), tensor(op.operands[0]).shape[op.intAttr("axis")]); return;
  case OpKind::TensorStride: set(op.result(), tensor(op.operands[0]).strides[op.intAttr("axis")]); return;
  case OpKind::Constant: lowerConstant(op); return;
  case OpKind::Arange: lowerArange(op); return;
  case OpKind::Cast: lowerCast(op); return;
  case OpKind::Broadcast: lowerBroadcast(op); return;
  case OpKind::ExpandDims:
  case OpKind::Reshape: set(op.result(), get(op.operands[0])); return; // row-major: the same buffer
  case OpKind::Transpose: lowerTranspose(op); return;
  case OpKind::Dot: lowerDot(op); return;
  case OpKind::LoadBox:
  case OpKind::StoreBox:
  case OpKind::AtomicAddBox: lowerBox(op); return;
  case OpKind::Load:
  case OpKind::Store:
  case OpKind::AtomicAdd: lowerGather(op); return;
  case OpKind::Barrier: return;
  case OpKind::For: lowerFor(op); return;
  case OpKind::If: lowerIf(op); return;
  case OpKind::Yield: return; // read by the enclosing for/if
  default: break;
  }
  fail(F, "no lowering for " + std::string(opSpelling(op.kind)));
}

using LowerFn = void (Lowering::*)(const TOp &);
// The dispatch table, one entry per op of TileOps.def (by its class).
constexpr LowerFn kLower[] = {
#define TILE_OP(K, S, C) &Lowering::lowerClass##C,
#include "ir/tile/TileOps.def"
};

void Lowering::lowerBlock(const tile::Block &b) {
  for (const TOp *op : b.ops) {
    // Reshape/expand_dims of a scalar into a [1] tile, or the reverse, change representation.
    if ((op->kind == OpKind::Reshape || op->kind == OpKind::ExpandDims) &&
        op->operands[0]->type.isScalar() != op->result()->type.isScalar()) {
      const TType &in = op->operands[0]->type, &rt = op->result()->type;
      if (in.isScalar()) {
        Value *out = alloc(rt);
        storeElem(out, rt.dtype, c64(0), get(op->operands[0]));
        set(op->result(), out);
      } else {
        set(op->result(), loadElem(get(op->operands[0]), in.dtype, c64(0)));
      }
      continue;
    }
    (this->*kLower[static_cast<size_t>(op->kind)])(*op);
  }
}

void Lowering::run() {
  entry = BasicBlock::Create(C, "entry", fn);
  BasicBlock *start = BasicBlock::Create(C, "start", fn);
  B.SetInsertPoint(entry);
  B.CreateBr(start);
  B.SetInsertPoint(start);
  // Use counts (for the in-place accumulation of dot).
  std::function<void(const tile::Block &)> count = [&](const tile::Block &b) {
    for (const TOp *op : b.ops) {
      for (const TValue *v : op->operands) uses[v]++;
      for (const tile::Block *r : op->regions) count(*r);
    }
  };
  count(*F.body);
  // Parameters from the KernelArg array.
  Value *args = T.kernelArgs(B, fn);
  Type *argTy = StructType::get(C, {B.getPtrTy(), ArrayType::get(i64(), kMaxRank), ArrayType::get(i64(), kMaxRank), i64(), f64()});
  for (size_t p = 0; p < F.params.size(); ++p) {
    const TValue *pv = F.params[p];
    Value *a = B.CreateInBoundsGEP(argTy, args, c64(int64_t(p)));
    if (pv->type.isTensor()) {
      if (pv->type.rank > uint32_t(kMaxRank)) fail(F, "a tensor parameter of rank above 8");
      TensorInfo ti;
      ti.data = B.CreateLoad(B.getPtrTy(), B.CreateStructGEP(argTy, a, 0), pv->name + ".data");
      for (uint32_t d = 0; d < pv->type.rank; ++d) {
        ti.shape.push_back(B.CreateLoad(i64(), B.CreateInBoundsGEP(argTy, a, {B.getInt32(0), B.getInt32(1), B.getInt32(d)})));
        ti.strides.push_back(B.CreateLoad(i64(), B.CreateInBoundsGEP(argTy, a, {B.getInt32(0), B.getInt32(2), B.getInt32(d)})));
      }
      tensors[pv] = ti;
      continue;
    }
    if (!pv->type.isScalar()) fail(F, "parameter " + pv->name + " is a tile of rank > 0");
    DType d = pv->type.dtype;
    Value *v;
    if (isFloat(d)) {
      Value *x = B.CreateLoad(f64(), B.CreateStructGEP(argTy, a, 4));
      v = convert(x, DType::F64, d, false);
    } else {
      Value *x = B.CreateLoad(i64(), B.CreateStructGEP(argTy, a, 3));
      v = convert(x, DType::I64, d, false);
    }
    set(pv, v);
  }
  lowerBlock(*F.body);
  B.CreateRetVoid();
}

int64_t frameOf(const tile::Block &b) {
  int64_t bytes = 0;
  for (const TOp *op : b.ops) {
    for (const TValue *v : op->results)
      if (!v->type.isTensor() && !v->type.isScalar()) bytes += v->type.numElements() * 8 + 64;
    for (const tile::Block *r : op->regions) bytes += 2 * frameOf(*r);
  }
  return bytes;
}

} // namespace

int64_t tileFrameBytes(const tile::Function &f) { return frameOf(*f.body); }

Function *lowerTileFunction(const tile::Function &f, Module &m, const TargetDesc &target, const std::string &name) {
  Function *fn = Function::Create(target.programType(m.getContext()), GlobalValue::InternalLinkage, name, m);
  fn->addFnAttr(Attribute::AlwaysInline);
  fn->addFnAttr(Attribute::NoUnwind);
  Lowering l(f, m, target, fn);
  l.run();
  return fn;
}

} // namespace tsr::codegen
