// Tile IR -> LLVM IR: the driver (parameters, dispatch over TileOps.def, control flow). See
// TileToLLVM.h for the shape of the generated code; the numeric rules are runtime/Numeric.h's
// (conversions) and ir/eval/Evaluator.h's (integer and NaN semantics). Op families are lowered in
// lower/*.cpp (Lowering.h).
#include "codegen/llvm/Lowering.h"

#include <algorithm>

namespace tsr::codegen {

namespace lower {

/// Byte offsets of KernelArg's fields (CpuKernel.h), checked at compile time.
static_assert(offsetof(KernelArg, data) == 0);
static_assert(offsetof(KernelArg, shape) == 8);
static_assert(offsetof(KernelArg, strides) == 8 + 8 * kMaxRank);
static_assert(offsetof(KernelArg, i) == 8 + 16 * kMaxRank);
static_assert(offsetof(KernelArg, f) == 16 + 16 * kMaxRank);
static_assert(sizeof(KernelArg) == 24 + 16 * kMaxRank);

// ---- control flow ----

void Lowering::lowerFor(const TOp &op) {
  if (lowerMmaLoop(op) || lowerFlashLoop(op)) return;
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
  case OpKind::ProgramId: {
    const int axis = int(op.intAttr("axis"));
    set(op.result(), pidOverride[axis] ? pidOverride[axis] : orderedId ? orderedProgramId(axis) : T.programId(B, fn, axis));
    return;
  }
  case OpKind::NumPrograms: {
    const int axis = int(op.intAttr("axis"));
    set(op.result(), gridOverride[axis] ? gridOverride[axis] : T.numPrograms(B, fn, axis));
    return;
  }
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

void Lowering::dispatch(const TOp &op) {
  if (ticket && orderedAtomic(op)) return;
  (this->*kLower[static_cast<size_t>(op.kind)])(op);
}

void Lowering::lowerBlock(const tile::Block &b) {
  const tile::Block *outer = curBlock;
  // With shared tile buffers: the last op of `b` that reads each value (a read inside a region
  // counts as one by the op owning the region), after which its buffer may be reused.
  std::unordered_map<const TValue *, size_t> lastUse;
  if (threads > 1) {
    std::function<void(const tile::Block &, size_t)> scan = [&](const tile::Block &blk, size_t at) {
      for (const TOp *o : blk.ops) {
        for (const TValue *v : o->operands) lastUse[v] = at;
        for (const tile::Block *r : o->regions) scan(*r, at);
      }
    };
    for (size_t j = 0; j < b.ops.size(); ++j) {
      for (const TValue *v : b.ops[j]->operands) lastUse[v] = j;
      for (const tile::Block *r : b.ops[j]->regions) scan(*r, j);
    }
  }
  for (size_t index = 0; index < b.ops.size(); ++index) {
    const TOp *op = b.ops[index];
    curBlock = &b;
    size_t madeMark = made.size();
    lowerOp(b, index);
    if (threads == 1) continue;
    // Results on a buffer this op made, or on a reusable one (reshape), hold it.
    for (const TValue *r : op->results) {
      auto it = vals.find(r);
      if (it == vals.end()) continue;
      Value *p = it->second;
      bool fresh = std::find(made.begin() + long(madeMark), made.end(), p) != made.end();
      if (fresh || bufRefs.count(p)) {
        bufRefs[p]++;
        valueBuf[r] = p;
      }
    }
    made.resize(madeMark);
    // Values of this block read for the last time by this op (or never read) let go of theirs.
    for (size_t j = 0; j <= index; ++j)
      for (const TValue *r : b.ops[j]->results) {
        auto lu = lastUse.find(r);
        size_t last = lu == lastUse.end() ? j : lu->second;
        if (last != index || pinned.count(r)) continue;
        auto vb = valueBuf.find(r);
        if (vb == valueBuf.end()) continue;
        Value *p = vb->second;
        valueBuf.erase(vb);
        if (--bufRefs[p] == 0) {
          bufRefs.erase(p);
          T.releaseTileBuffer(p);
        }
      }
  }
  curBlock = outer;
}

void Lowering::lowerOp(const tile::Block &b, size_t index) {
  {
    const TOp *op = b.ops[index];
    if (deferToDot(b, index)) {
      deferred[op->result()] = op;
      return;
    }
    // A zero tile that only starts a tensor-core loop's accumulators is never materialized, and
    // the store of its result is done from its registers.
    if (zeroInitOfMmaLoop(b, index) || absorbedByFlashLoop(b, index) || absorbed.count(op)) return;
    // Reshape/expand_dims of a scalar into a [1] tile, or the reverse, change representation.
    if ((op->kind == OpKind::Reshape || op->kind == OpKind::ExpandDims) &&
        op->operands[0]->type.isScalar() != op->result()->type.isScalar()) {
      const TType &in = op->operands[0]->type, &rt = op->result()->type;
      if (in.isScalar()) {
        Value *out = alloc(rt);
        // Every thread writes the same value; barriers keep it from racing with readers of the
        // previous iteration's value and from being read before it is written.
        if (shared()) T.barrier(B);
        storeElem(out, rt.dtype, c64(0), get(op->operands[0]));
        if (shared()) T.barrier(B);
        set(op->result(), out);
      } else {
        set(op->result(), loadElem(get(op->operands[0]), in.dtype, c64(0)));
      }
      return;
    }
    dispatch(*op);
  }
}

void Lowering::run() {
  entry = BasicBlock::Create(C, "entry", fn);
  BasicBlock *start = BasicBlock::Create(C, "start", fn);
  B.SetInsertPoint(entry);
  threads = T.threadsPerProgram();
  if (threads > 1) tid = T.threadIndex(B);
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
  std::function<void(const tile::Block &)> pin = [&](const tile::Block &b) {
    for (const TOp *op : b.ops) {
      if (op->kind == OpKind::Yield)
        for (const TValue *v : op->operands) pinned[v] = true;
      for (const tile::Block *r : op->regions) pin(*r);
    }
  };
  pin(*F.body);
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
  beginOrderedAtomics();
  if (const TOp *loop = persistentLoop()) lowerPersistent(*loop);
  else if (!lowerRegisterProgram(*this, F, T, threads)) lowerBlock(*F.body);
  endOrderedAtomics();
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

} // namespace lower

using namespace llvm;

int64_t tileFrameBytes(const tile::Function &f) { return lower::frameOf(*f.body); }

Function *lowerTileFunction(const tile::Function &f, Module &m, const TargetDesc &target, const std::string &name) {
  Function *fn = Function::Create(target.programType(m.getContext()), GlobalValue::InternalLinkage, name, m);
  fn->addFnAttr(Attribute::AlwaysInline);
  fn->addFnAttr(Attribute::NoUnwind);
  lower::Lowering l(f, m, target, fn);
  l.run();
  return fn;
}

} // namespace tsr::codegen
