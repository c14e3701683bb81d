// The lowering of Tile IR to LLVM IR, shared by its files: TileToLLVM.cpp (driver, dispatch,
// control flow) and lower/*.cpp, one per op family (Math: elementwise ops and conversions; Shape:
// creation, layout and reductions; Dot; Memory: boxes, gathers, atomics). Private to codegen/llvm.
#pragma once

#include "codegen/llvm/TileToLLVM.h"

#include "codegen/cpu/CpuKernel.h"
#include "runtime/Numeric.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tsr::codegen {
struct FlashPlan;
struct MmaPlan;
struct RegisterPlan;
}

namespace tsr::codegen::lower {

using namespace llvm;
using tile::OpKind;
using TOp = tile::Op;
using TValue = tile::Value;
using TType = tile::Type;

inline bool narrowFloat(DType d) {
  return d == DType::BF16 || d == DType::F16 || d == DType::F8E4M3 || d == DType::F8E5M2 || d == DType::TF32;
}

[[noreturn]] inline void fail(const tile::Function &f, const std::string &what) {
  throw CodegenError("internal error: codegen of tile function @" + f.name + ": " + what +
                     " (please report this)");
}

struct TensorInfo {
  Value *data = nullptr;
  std::vector<Value *> shape, strides;
};


/// Row-major strides (in elements) of a tile shape.
inline std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

/// The state of one function's lowering: the builder, the values lowered so far (an SSA value
/// for a scalar, a buffer pointer for a tile) and the tensor parameters' data, sizes and strides.
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
  const TOp *welfordVariance(const TOp &sum, std::vector<const TOp *> &between);
  void lowerWelford(const TOp &sum, const TOp &var, int64_t outer, int64_t R);
  void lowerClassSpecial(const TOp &op);

private:
  // The lowering of a program whose tiles all live in registers (RegisterPlan.h), which uses the
  // scalar semantics, conversions and memory helpers below.
  friend class RegisterTiles;
  /// Lowers op `op` by the dispatch table (its class's method), with no special cases.
  void dispatch(const TOp &op);
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
  const tile::Block *curBlock = nullptr; // the block being lowered
  // load_box results left to the dot that reads them (deferToDot), by value.
  std::unordered_map<const TValue *, const TOp *> deferred;
  // Ops a tensor-core loop lowered as its epilogue (the store of its result): skipped after it.
  std::unordered_set<const TOp *> absorbed;
  // Threads of one program (TargetDesc::threadsPerProgram) and this thread's index (i64, made in
  // the entry block); loops entered so far; above 0, ops run redundantly in every thread.
  int threads = 1;
  Value *tid = nullptr;
  int loopDepth = 0;
  int redundant = 0;
  bool shared() const { return threads > 1 && redundant == 0; }
  // Reuse of shared tile buffers (threads > 1): buffers made by the op being lowered (a stack: a
  // nested block's ops pop their own), live values per reusable buffer, and the values a yield
  // reads (an if's phi or a loop's copy reads their buffers later: never reused).
  std::vector<Value *> made;
  std::unordered_map<Value *, int> bufRefs;
  std::unordered_map<const TValue *, Value *> valueBuf;
  std::unordered_map<const TValue *, bool> pinned;
  // Tiles computed where they are read (CPU; fusesIntoReaders, Math.cpp): element i of such a
  // value, emitted at the insertion point inside its reader's loop.
  std::unordered_map<const TValue *, std::function<Value *(Value *)>> lazy;
  // store_box ops whose tile the op before them wrote into the tensor already where the box lies
  // inside it with unit stride (storesInPlace, Math.cpp): their fast path copies nothing.
  std::unordered_set<const TOp *> storedInPlace;

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
    if (it == vals.end() && lazy.count(v)) return materialize(v);
    if (it == vals.end()) fail(F, "value %" + std::to_string(v->id) + " is used before it is lowered");
    return it->second;
  }
  void set(const TValue *v, Value *x) { vals[v] = x; }
  Value *alloc(const TType &t) {
    IRBuilder<> ab(entry, entry->getFirstInsertionPt());
    if (shared()) {
      uint64_t bytes = uint64_t(t.numElements()) * (btype(t.dtype)->getPrimitiveSizeInBits() / 8);
      if (Value *p = T.tileBuffer(ab, bytes)) {
        made.push_back(p);
        return p;
      }
    }
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
  /// With `keepRolled`, the loop is marked llvm.loop.unroll.disable: full unrolling of a short
  /// inner loop would otherwise hand the loop vectorizer its outer loop, which it versions on a
  /// run-time stride being 1 (for a box's rows, never) and so leaves scalar.
  void loop(Value *lo, Value *hi, const std::function<void(Value *)> &body, bool keepRolled = false) {
    // An op's outermost loop is split over the program's threads (TargetDesc::threadsPerProgram).
    bool split = shared() && loopDepth == 0;
    if (split) {
      T.barrier(B);
      lo = B.CreateAdd(lo, tid);
    }
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
    ++loopDepth;
    body(i);
    --loopDepth;
    Value *next = B.CreateAdd(i, c64(split ? threads : 1), "", true, true);
    i->addIncoming(next, B.GetInsertBlock());
    BranchInst *back = B.CreateBr(head);
    if (keepRolled) markRolled(back);
    B.SetInsertPoint(exit);
    if (split) T.barrier(B);
  }
  /// Marks the loop whose back edge is `back` llvm.loop.unroll.disable.
  void markRolled(BranchInst *back) {
    MDNode *self = MDNode::getDistinct(C, {nullptr, MDNode::get(C, {MDString::get(C, "llvm.loop.unroll.disable")})});
    self->replaceOperandWith(0, self);
    back->setMetadata(LLVMContext::MD_loop, self);
  }
  /// for (j = 0; j < n; ++j) carrying the f32 values `carried0` (a tensor-core loop's
  /// accumulators; may be empty), at the insertion point: `body` gets j and the values at the top
  /// of the iteration and returns them at its end. Returns the values at the exit, with the
  /// insertion point there; `keepRolled` as loop()'s.
  std::vector<Value *> countedLoop(Value *n, const std::vector<Value *> &carried0, const std::string &name,
                                   const std::function<std::vector<Value *>(Value *, std::vector<Value *>)> &body,
                                   bool keepRolled = false) {
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *head = BasicBlock::Create(C, name + ".head", fn), *bodyBB = BasicBlock::Create(C, name + ".body", fn),
               *exit = BasicBlock::Create(C, name + ".exit", fn);
    B.CreateBr(head);
    B.SetInsertPoint(head);
    PHINode *j = B.CreatePHI(i64(), 2, name + ".j");
    j->addIncoming(c64(0), pre);
    std::vector<PHINode *> phis(carried0.size());
    for (size_t q = 0; q < phis.size(); ++q) {
      phis[q] = B.CreatePHI(carried0[q]->getType(), 2);
      phis[q]->addIncoming(carried0[q], pre);
    }
    B.CreateCondBr(B.CreateICmpSLT(j, n), bodyBB, exit);
    B.SetInsertPoint(bodyBB);
    std::vector<Value *> next = body(j, std::vector<Value *>(phis.begin(), phis.end()));
    BasicBlock *latch = B.GetInsertBlock();
    j->addIncoming(B.CreateAdd(j, c64(1)), latch);
    for (size_t q = 0; q < phis.size(); ++q) phis[q]->addIncoming(next[q], latch);
    BranchInst *back = B.CreateBr(head);
    if (keepRolled) markRolled(back);
    B.SetInsertPoint(exit);
    return std::vector<Value *>(phis.begin(), phis.end());
  }
  void loopN(int64_t n, const std::function<void(Value *)> &body, bool keepRolled = false) {
    loop(c64(0), c64(n), body, keepRolled);
  }
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
  }  /// The values `outs[q]` (one list per way, of equal length and types) reaching the current
  /// insertion point from the blocks `ends[q]`, merged in phis there.
  std::vector<Value *> mergeValues(const std::vector<std::vector<Value *>> &outs, const std::vector<BasicBlock *> &ends) {
    std::vector<Value *> merged;
    for (size_t i = 0; i < outs[0].size(); ++i) {
      PHINode *ph = B.CreatePHI(outs[0][i]->getType(), unsigned(outs.size()));
      for (size_t q = 0; q < outs.size(); ++q) ph->addIncoming(outs[q][i], ends[q]);
      merged.push_back(ph);
    }
    return merged;
  }
  /// A branch on `cond` whose two ways emit `emit(true)` and `emit(false)` (blocks NAME.NAMES[0],
  /// NAME.NAMES[1]), the values each returns merged after it (mergeValues): one main loop
  /// emitted once per way of copying its operands.
  std::vector<Value *> eitherWay(Value *cond, const std::string &name, const char *const names[2],
                                 const std::function<std::vector<Value *>(bool)> &emit) {
    BasicBlock *yes = BasicBlock::Create(C, name + "." + names[0], fn), *no = BasicBlock::Create(C, name + "." + names[1], fn),
               *merged = BasicBlock::Create(C, name + ".merge", fn);
    B.CreateCondBr(cond, yes, no);
    std::vector<std::vector<Value *>> outs;
    std::vector<BasicBlock *> ends;
    for (int q = 0; q < 2; ++q) {
      B.SetInsertPoint(q == 0 ? yes : no);
      outs.push_back(emit(q == 0));
      ends.push_back(B.GetInsertBlock());
      B.CreateBr(merged);
    }
    B.SetInsertPoint(merged);
    return mergeValues(outs, ends);
  }
  /// Copies the 8 16-bit elements of a row at `data` + `off` (+ e * `colStride`) to `to`, element
  /// by element, each outside [0, `nCols`) of its column (`col0` + e) or with `rowOk` false as 0,
  /// in a rolled loop: unrolled, its addresses would be hoisted out of the enclosing main loop
  /// and held in registers through it (the copies' path where cp.async's alignment fails).
  void copyEightElements(Value *to, Value *data, Value *off, Value *colStride, Value *col0, Value *nCols, Value *rowOk,
                         const std::string &name) {
    Type *i16t = B.getInt16Ty();
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *eBody = BasicBlock::Create(C, name + ".elem", fn), *eEnd = BasicBlock::Create(C, name + ".elem.end", fn);
    B.CreateBr(eBody);
    B.SetInsertPoint(eBody);
    PHINode *e = B.CreatePHI(i64(), 2);
    e->addIncoming(c64(0), pre);
    Value *col = B.CreateAdd(col0, e);
    Value *ok = B.CreateAnd(rowOk, B.CreateAnd(B.CreateICmpSGE(col, c64(0)), B.CreateICmpSLT(col, nCols)));
    Value *x = guardedValue(
        ok, [&] { return B.CreateLoad(i16t, B.CreateGEP(i16t, data, B.CreateAdd(off, B.CreateMul(e, colStride)))); },
        B.getInt16(0));
    B.CreateStore(x, B.CreateInBoundsGEP(i16t, to, e));
    Value *en = B.CreateAdd(e, c64(1));
    e->addIncoming(en, B.GetInsertBlock());
    markRolled(B.CreateCondBr(B.CreateICmpSLT(en, c64(8)), eBody, eEnd));
    B.SetInsertPoint(eEnd);
  }

  /// Copies a tile buffer (n elements of dtype d).
  void copyBuf(Value *dst, Value *src, const TType &t) {
    if (dst == src) return;
    if (shared()) {
      // Element by element, split over the threads: one memcpy per thread would race with the
      // threads already writing `dst` in place (a dot's accumulator).
      Type *et = btype(t.dtype);
      loopN(t.numElements(), [&](Value *i) {
        B.CreateStore(B.CreateLoad(et, B.CreateInBoundsGEP(et, src, i)), B.CreateInBoundsGEP(et, dst, i));
      });
      return;
    }
    uint64_t bytes = uint64_t(t.numElements()) * (t.dtype == DType::Bool ? 1 : btype(t.dtype)->getPrimitiveSizeInBits() / 8);
    B.CreateMemCpy(dst, MaybeAlign(64), src, MaybeAlign(64), bytes);
  }

  /// Whether this thread does a side effect that the program does once (a scalar store or
  /// atomic): thread 0 where the program has several threads.
  Value *oneThread() { return threads > 1 ? B.CreateICmpEQ(tid, c64(0)) : B.getTrue(); }
  /// Runs the ops lowered inside as in a single-threaded program, in every thread (private buffers).
  struct Redundant {
    Lowering &l;
    explicit Redundant(Lowering &l) : l(l) { ++l.redundant; }
    ~Redundant() { --l.redundant; }
  };

  // ---- intrinsics and math ----
  Value *intr(Intrinsic::ID id, ArrayRef<Value *> args) {
    return B.CreateIntrinsic(id, {args[0]->getType()}, args);
  }
  Value *fma(Value *a, Value *b, Value *c) { return intr(Intrinsic::fmuladd, {a, b, c}); }
  Value *isNan(Value *x) { return B.CreateFCmpUNO(x, x); }
  Value *expF32(Value *x, bool base2);
  Value *tanhF32(Value *x);
  Value *erfF32(Value *x);
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
  /// An elementwise op's value at one element (a unary, binary, comparison or select op, or a
  /// cast: tile::opClass), from its operands' values there; nullptr for any other op. The register
  /// lowerings (RegisterTiles, a product's epilogue, the attention loop) all compute through it.
  Value *elementValue(const TOp &op, const std::vector<Value *> &x);
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
  /// The identity of reduction `k` over dtype `d` (its compute type), and `acc` combined with `x`
  /// by it; float sums and products are marked reassociable when `reassoc`.
  Value *reduceIdentity(OpKind k, DType d);
  Value *reduceCombine(OpKind k, DType d, Value *acc, Value *x, bool reassoc);
  /// A reduction along the contiguous axis whose outputs are fewer than the threads, shared by
  /// groups of threads (warp shuffles, shared memory across warps); false (nothing emitted)
  /// where it does not apply. `combine` and `identity` are the reduction's.
  bool cooperativeReduce(const TOp &op, int64_t outer, int64_t R, const std::function<Value *()> &identity,
                         const std::function<Value *(Value *, Value *)> &combine);
  /// x (any scalar register type) from the lane this lane's index xor `laneMask` names.
  Value *shuffleXor(Value *x, int laneMask);
  /// A box of fewer rows than threads split over the threads by element (16-byte vectors where
  /// aligned); false where it does not apply.
  bool flatBox(const TOp &op);
  void dotF32Blocked(Value *out, Value *a, Value *lda, Value *b, Value *ldb, int64_t M, int64_t K, int64_t N);
  void microKernel(Value *out, Value *a, Value *lda, Value *b, Value *ldb, int64_t K, int64_t N, int64_t row0,
                   int64_t rowBlocks, int64_t MR, int64_t col0, int64_t colBlocks, int64_t NV, int64_t W);
  bool deferToDot(const tile::Block &b, size_t index);
  /// Whether the CPU may read the load_box `op` (of the block being lowered) from the tensor in
  /// place instead of copying it into a tile (Memory.cpp).
  bool readsInPlace(const TOp &op);
  /// Whether the elementwise op or broadcast `op` (of the block being lowered) is computed inside
  /// its readers' loops instead of into a tile (Math.cpp).
  bool fusesIntoReaders(const TOp &op);
  /// The store_box that may take the elementwise op `op`'s result where it lies in the tensor
  /// (Math.cpp); null where none may.
  const TOp *storesInPlace(const TOp &op);
  /// Element i of tile `v`: computed at the insertion point where v is lazy, else loaded.
  Value *elemOf(const TValue *v, Value *i);
  /// A lazy tile written to a buffer at the insertion point (a reader that needs its buffer).
  Value *materialize(const TValue *v);
  /// Whether the box at `starts` (extents `box`, 0 for an axis indexed by its start alone) lies
  /// inside the tensor; whether the axes indexed by their start alone are in range.
  Value *boxInside(const TensorInfo &ti, const std::vector<Value *> &starts, const std::vector<int64_t> &box);
  Value *droppedAxesInside(const TensorInfo &ti, const std::vector<Value *> &starts, const std::vector<int64_t> &box);
  void lowerBox(const TOp &op);
  void lowerGather(const TOp &op);
  void lowerFor(const TOp &op);
  /// The tensor-core main loop of MmaPlan.h; false (nothing emitted) for any other loop.
  bool lowerMmaLoop(const TOp &op);
  /// Whether ops[index] of `b` is a zero constant read only as the initial accumulator of a
  /// later tensor-core loop of `b` (which starts its registers at zero instead).
  bool zeroInitOfMmaLoop(const tile::Block &b, size_t index);
  /// MmaWarpSpecialized.cpp. Whether the wgmma loop `op` (plan `p`, its result stored by
  /// `epiStore`) is the whole of its kernel, so that it can run with a producer warpgroup of
  /// its own: if so, asks the target for the operands' tensor-map slots (into `slots`) and the
  /// extra warpgroup, and returns true.
  bool planWarpSpecialized(const TOp &op, const MmaPlan &p, const TOp *epiStore, int slots[2]);
  /// The conditions of planWarpSpecialized on `op` in block `b`, without asking the target.
  bool warpSpecializable(const tile::Block &b, const TOp &op, const MmaPlan &p, const TOp *epiStore) const;
  /// MmaEpilogue.cpp. The ops after tensor-core loop `op` of `b` that store its whole result tile
  /// (an optional cast, then the store); {null, null} when its result goes elsewhere.
  /// The ops after a tensor-core loop that its registers compute and store element by element
  /// (MmaLoop.cpp): all ops to the end of the block, the last a store of the whole tile; empty
  /// (`last` null) where another op follows, and the result then goes to a tile.
  struct MmaEpilogue {
    std::vector<const TOp *> ops;
    const TOp *last = nullptr;
  };
  MmaEpilogue mmaEpilogue(const tile::Block &b, const TOp &op, const MmaPlan &p);
  /// Shared memory the epilogue may stage its tile in (a main loop's ring, free once it ends):
  /// `bytes` at `buffer` (an address space 3 pointer), and the barrier of the threads that run
  /// the epilogue. No buffer: stores straight from the registers.
  struct EpilogueStaging {
    Value *buffer = nullptr;
    int64_t bytes = 0;
    std::function<void()> sync;
  };
  /// MmaEpilogue.cpp. Computes and stores an epilogue per accumulator pair: `at(i, jn, q)` is the
  /// pair's (row, column) in the tile, `acc(i, jn, q)` accumulator q of block (i, jn); MT x NT
  /// blocks of 4.
  void lowerMmaEpilogue(const MmaEpilogue &epi, const std::function<std::array<Value *, 2>(int64_t, int64_t, int)> &at,
                        const std::function<Value *(int64_t, int64_t, int)> &acc, int64_t MT, int64_t NT,
                        const EpilogueStaging *staging = nullptr);
  /// A persistent kernel (MmaWarpSpecialized.cpp): the kernel's loop when the whole kernel is a
  /// warp-specialized product and the target launches persistent kernels, else null.
  const TOp *persistentLoop();
  /// Lowers the kernel as persistent: the producer and the consumer warpgroups each loop over
  /// the CTA's programs, lowering the body once per role (wsRole) with the program's coordinates
  /// in place of %ctaid (pidOverride) and its place in the CTA's sequence of programs (wsSlot).
  /// A program of one warpgroup (a 64-row tile) runs ping-pong: two consumer warpgroups take
  /// alternate programs, so that one's epilogue runs while the other's products do.
  void lowerPersistent(const TOp &loop);
  /// Whether the launcher made the tensor maps of both operand boxes of `p` (KernelArg::i).
  Value *mapsMade(const MmaPlan &p);
  enum class WsRole { None, Producer, Consumer };
  WsRole wsRole = WsRole::None;
  Value *pidOverride[3] = {}, *gridOverride[3] = {};
  Value *wsFirst = nullptr; // i1: the CTA's first program (barriers are initialized then)
  /// i64: the program's index in its CTA's sequence, which the producer fills the ring in; the
  /// loop's k tiles are the same in every program, so the ring's earlier tiles are wsSlot * n.
  Value *wsSlot = nullptr;
  /// i64: the consumer warpgroup running the program (0 or 1 in a ping-pong kernel, else 0).
  Value *wsGroup = nullptr;
  int wsGroups = 1; // consumer warpgroups that run programs of their own: 2 in ping-pong
  int wsMapsPass = -1;      // the consumers' pass: 1 with tensor maps, 0 without, -1 both
  /// The loop with the producer warpgroup copying by TMA and the consumer warpgroups
  /// multiplying (`acc0`: the accumulators' first values); where the launcher made no maps, the
  /// consumers run `multistage` (the loop of lowerMmaLoop) instead. Returns the consumers'
  /// accumulators, with the insert point after the loop in the consumer threads alone.
  std::vector<Value *> lowerWarpSpecialized(const TOp &op, const MmaPlan &p, const int slots[2], Value *ringS, Value *lo,
                                            Value *n, int64_t step, const std::vector<Value *> &acc0,
                                            const std::function<std::vector<Value *>()> &multistage);
  /// lower/FlashLoop.cpp: the attention main loop of FlashPlan.h (its plan per loop, computed
  /// once; null when the loop is not one); false (nothing emitted) for any other loop.
  const FlashPlan *flashPlan(const TOp &forOp, const tile::Block &b);
  bool lowerFlashLoop(const TOp &op);
  /// Whether ops[index] of `b` is the Q box or an initial splat that only a later attention
  /// loop of `b` reads (which copies Q itself and starts its registers from the splat's value).
  bool absorbedByFlashLoop(const tile::Block &b, size_t index);
  /// Copies the 2-d 16-bit box `ld` (its loop index `iv` at `ivValue`) of `rows` x `cols` into
  /// shared `dst` in the 128-byte swizzle (MmaPlan::swizzledOffset), zero past the tensor's
  /// ends and past the box's own columns (`cols`, a multiple of 8, may be wider): cp.async
  /// where aligned (not committed), element by element otherwise.
  void copyBoxSwizzled(const TOp &ld, const TValue *iv, Value *ivValue, Value *dst, int64_t rows, int64_t cols);
  std::unordered_map<const TOp *, std::shared_ptr<FlashPlan>> flashPlans;
  void lowerIf(const TOp &op);
  void lowerBlock(const tile::Block &b);
  void lowerOp(const tile::Block &b, size_t index);
  TensorInfo &tensor(const TValue *v);
  void atomicAdd(DType d, Value *ptr, Value *x);

  // Deterministic mode's ordered atomics (OrderedAtomics.cpp), where the program takes the ticket
  // and the target orders by it: the ticket's address (null otherwise), this program's place in
  // the order (i64), and whether thread 0 holds the program's turn (an i1 alloca).
  Value *ticket = nullptr, *orderedId = nullptr, *holdsTurn = nullptr;
  /// At the program's start: takes its place in the order (or does nothing without the ticket).
  void beginOrderedAtomics();
  /// Lowers `op` when it is a float atomic of an ordered program: in thread 0 alone, in its turn.
  bool orderedAtomic(const TOp &op);
  /// At the program's end: waits for its turn if it has not had it, and passes it on.
  void endOrderedAtomics();
  /// program_id(axis) of an ordered program: its place in the order, as grid coordinates.
  Value *orderedProgramId(int axis);
  void waitForTurn();
};

/// lower/RegisterTiles.cpp: lowers the body of `f` with every tile in registers when its
/// RegisterPlan exists and the target and TSR_REGISTER_TILES allow it (GPU targets by default;
/// `0`: never; `all`: also a CPU target's single thread, for testing); false (nothing emitted)
/// otherwise.
bool lowerRegisterProgram(Lowering &l, const tile::Function &f, const TargetDesc &t, int threads);

} // namespace tsr::codegen::lower
