// Memory: boxes (load_box, store_box, atomic_add_box), gathers and scatters by offsets, atomics.
#include "codegen/llvm/Lowering.h"

namespace tsr::codegen::lower {

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

// On the CPU a load_box of one row (every tile axis but the last of extent 1) whose storage is
// the tile's (f32, f64, i32, i64) is read where it lies when the box is inside the tensor with
// unit stride: the tile is then a pointer into the tensor, and a row program that reads x, the
// weight and the bias (layer_norm) copies none of them (three 4 KiB copies a row of 1024 f32).
// Only where nothing can write the tensor while the tile is read: every use is a plain op of
// the same block (no region, no yield that would carry the pointer out), and no store or atomic
// runs from the load to the last use.
bool Lowering::readsInPlace(const TOp &op) {
  if (threads != 1 || !curBlock) return false;
  const bool *masked = op.attrAs<bool>("masked");
  if (masked && *masked) return false;
  const TType &tt = op.result()->type;
  const DType d = tt.dtype;
  if (tt.isScalar() || !(d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64)) return false;
  for (size_t i = 0; i + 1 < tt.shape.size(); ++i)
    if (tt.shape[i] != 1) return false;
  const auto &ops = curBlock->ops;
  size_t at = 0;
  while (at < ops.size() && ops[at] != &op) ++at;
  if (at == ops.size()) return false;
  int left = uses[op.result()];
  for (size_t j = at + 1; j < ops.size() && left > 0; ++j) {
    const TOp *u = ops[j];
    if (!u->regions.empty() || u->kind == OpKind::Yield || u->kind == OpKind::Store || u->kind == OpKind::StoreBox ||
        u->kind == OpKind::AtomicAdd || u->kind == OpKind::AtomicAddBox)
      return false;
    for (const TValue *v : u->operands)
      if (v == op.result()) --left;
  }
  return left == 0;
}

Value *Lowering::boxInside(const TensorInfo &ti, const std::vector<Value *> &starts, const std::vector<int64_t> &box) {
  Value *inside = B.getTrue();
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t ext = box[i] > 0 ? box[i] : 1;
    inside = B.CreateAnd(inside, B.CreateAnd(B.CreateICmpSGE(starts[i], c64(0)),
                                             B.CreateICmpSLE(B.CreateAdd(starts[i], c64(ext)), ti.shape[i])));
  }
  return inside;
}

Value *Lowering::droppedAxesInside(const TensorInfo &ti, const std::vector<Value *> &starts, const std::vector<int64_t> &box) {
  Value *ok = B.getTrue();
  for (size_t ax = 0; ax < starts.size(); ++ax)
    if (box[ax] == 0)
      ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpSGE(starts[ax], c64(0)), B.CreateICmpSLT(starts[ax], ti.shape[ax])));
  return ok;
}

// load_box / store_box / atomic_add_box: nested loops over the box. A fast path without any
// per-element test runs when the box lies inside the tensor, there is no mask and the innermost
// box axis has stride 1; otherwise each element is tested against the tensor's bounds (and the
// mask) and out-of-bounds loads read `other`.
void Lowering::lowerBox(const TOp &op) {
  if (flatBox(op)) return;
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
  const bool inPlace = isLoad && !scalarTile && readsInPlace(op);
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
      ifThen(B.CreateAnd(ok, oneThread()), [&] { access(elemAt(off), nullptr, nullptr); });
    }
    return;
  }

  // Whether the whole box is inside the tensor.
  Value *inside = boxInside(ti, starts, box);
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
        loopN(innerN, [&](Value *j) { access(B.CreateInBoundsGEP(mt, rowPtr, j), B.CreateAdd(tileRow, j), nullptr); },
              !outerShape.empty());
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
      }, !outerShape.empty());
    });
  };
  B.SetInsertPoint(fastBB);
  if (storedInPlace.count(&op)) {
    // The op before wrote the row where it lies (elementwise, Math.cpp): nothing to copy.
    B.CreateBr(endBB);
    B.SetInsertPoint(slowBB);
    nest(false);
    B.CreateBr(endBB);
    B.SetInsertPoint(endBB);
    return;
  }
  if (inPlace) {
    Value *row = elemAt(baseOff);
    BasicBlock *fastEnd = B.GetInsertBlock();
    B.CreateBr(endBB);
    B.SetInsertPoint(slowBB);
    nest(false);
    BasicBlock *slowEnd = B.GetInsertBlock();
    B.CreateBr(endBB);
    B.SetInsertPoint(endBB);
    PHINode *tile = B.CreatePHI(row->getType(), 2, "box.tile");
    tile->addIncoming(row, fastEnd);
    tile->addIncoming(out, slowEnd);
    set(op.result(), tile);
    return;
  }
  nest(true);
  B.CreateBr(endBB);
  B.SetInsertPoint(slowBB);
  nest(false);
  B.CreateBr(endBB);
  B.SetInsertPoint(endBB);
  if (isLoad) set(op.result(), out);
}

// On a GPU, the rows of a box are what its loop splits over the threads; a box of fewer rows
// than threads (a row program's block of whole rows, a 1-d tile) is split by element instead:
// thread t takes elements t, t + T, ... of the tile, so that a warp touches consecutive
// addresses. Where the box is inside the tensor, contiguous, not masked, and its rows start on
// 16-byte boundaries, thread t takes 16-byte vectors t, t + T, ... (ld/st.global.v4.b32: 8 bf16
// or 4 f32 per access, as Triton's and PyTorch's row kernels do); otherwise element by element,
// each tested against the tensor's bounds and the mask.
bool Lowering::flatBox(const TOp &op) {
  if (!shared()) return false;
  const TValue *tv = op.operands[0];
  const uint32_t rank = tv->type.rank;
  const DType d = tv->type.dtype;
  const auto &box = *op.attrAs<std::vector<int64_t>>("box");
  const bool isLoad = op.kind == OpKind::LoadBox, isAtomic = op.kind == OpKind::AtomicAddBox;
  const bool *maskedAttr = op.attrAs<bool>("masked");
  const bool masked = maskedAttr && *maskedAttr;
  const size_t base = 1 + rank;
  const TValue *valueV = isLoad ? nullptr : op.operands[base];
  const TType tt = isLoad ? op.result()->type : valueV->type;
  if (tt.isScalar() || tt.shape.size() > 2) return false;
  std::vector<uint32_t> tileAxes;
  for (uint32_t i = 0; i < rank; ++i)
    if (box[i] > 0) tileAxes.push_back(i);
  if (tileAxes.size() != tt.shape.size()) return false;
  const int64_t innerN = tt.shape.back(), rows = tt.shape.size() == 2 ? tt.shape[0] : 1;
  if (rows >= threads) return false;

  TensorInfo &ti = tensor(tv);
  std::vector<Value *> starts;
  for (uint32_t i = 0; i < rank; ++i) starts.push_back(get(op.operands[1 + i]));
  const TValue *maskV = masked ? op.operands[base + (isLoad ? 0 : 1)] : nullptr;
  Value *valBuf = valueV ? get(valueV) : nullptr;
  Value *maskBuf = maskV ? get(maskV) : nullptr;
  Value *out = isLoad ? alloc(tt) : nullptr;
  Value *other = isLoad ? (op.attr("other") ? constantOf(d, *op.attr("other")) : constantOf(d, int64_t(0))) : nullptr;
  Type *mt = mtype(d);
  const uint32_t lastAxis = tileAxes.back();
  const bool twoD = tileAxes.size() == 2;
  Value *rowStride = twoD ? ti.strides[tileAxes[0]] : c64(0);
  Value *colStride = ti.strides[lastAxis];
  const int64_t total = tt.numElements();
  Value *baseOff = c64(0);
  for (uint32_t i = 0; i < rank; ++i) baseOff = B.CreateAdd(baseOff, B.CreateMul(starts[i], ti.strides[i]));

  Value *inside = boxInside(ti, starts, box);
  Value *fast = masked ? B.getFalse() : B.CreateAnd(inside, B.CreateICmpEQ(colStride, c64(1)));
  const uint64_t esz = std::max<uint64_t>(1, mt->getPrimitiveSizeInBits() / 8);
  const int64_t V = int64_t(16 / esz);
  const int64_t tileBytes = int64_t(btype(d)->getPrimitiveSizeInBits() / 8);
  const bool vectors = !masked && !isAtomic && d != DType::Bool && V > 1 && innerN % V == 0 && tileBytes >= 4 &&
                       (V * tileBytes) % 16 == 0;
  Value *vecOk = B.getFalse();
  if (vectors) {
    Value *addr = B.CreatePtrToInt(B.CreateGEP(mt, ti.data, baseOff), i64());
    Value *aligned = B.CreateICmpEQ(B.CreateAnd(addr, c64(15)), c64(0));
    if (twoD) aligned = B.CreateAnd(aligned, B.CreateICmpEQ(B.CreateAnd(B.CreateMul(rowStride, c64(int64_t(esz))), c64(15)), c64(0)));
    vecOk = B.CreateAnd(fast, aligned);
  }
  // Tile element e is row e / innerN, column e % innerN.
  auto rowCol = [&](Value *e) {
    Value *q = B.CreateUDiv(e, c64(innerN));
    return std::make_pair(q, B.CreateSub(e, B.CreateMul(q, c64(innerN))));
  };
  BasicBlock *vecBB = BasicBlock::Create(C, "fbox.vec", fn);
  BasicBlock *fastBB = BasicBlock::Create(C, "fbox.fast", fn);
  BasicBlock *slowBB = BasicBlock::Create(C, "fbox.slow", fn);
  BasicBlock *scalarBB = BasicBlock::Create(C, "fbox.scalar", fn);
  BasicBlock *endBB = BasicBlock::Create(C, "fbox.end", fn);
  B.CreateCondBr(vecOk, vecBB, scalarBB);
  B.SetInsertPoint(scalarBB);
  B.CreateCondBr(fast, fastBB, slowBB);

  B.SetInsertPoint(vecBB);
  if (vectors) {
    auto *vt = FixedVectorType::get(mt, unsigned(V));
    loopN(total / V, [&](Value *c) {
      Value *e = B.CreateMul(c, c64(V));
      auto [q, j] = rowCol(e);
      Value *ptr = B.CreateInBoundsGEP(mt, ti.data, B.CreateAdd(baseOff, B.CreateAdd(B.CreateMul(q, rowStride), j)));
      // The tile side by 16-byte vectors too (tile buffers are 16-byte aligned, and e is a
      // multiple of V): a warp's accesses then take a quarter-warp per wavefront, where a thread
      // writing V consecutive words one by one would meet other threads in the same bank.
      Type *bt = btype(d);
      auto *tv = FixedVectorType::get(bt, unsigned(16 / (bt->getPrimitiveSizeInBits() / 8)));
      const int64_t per = int64_t(tv->getNumElements());
      if (isLoad) {
        Value *v = B.CreateAlignedLoad(vt, ptr, Align(16));
        for (int64_t k0 = 0; k0 < V; k0 += per) {
          Value *t = PoisonValue::get(tv);
          for (int64_t k = 0; k < per; ++k)
            t = B.CreateInsertElement(t, fromMem(d, B.CreateExtractElement(v, uint64_t(k0 + k))), uint64_t(k));
          B.CreateAlignedStore(t, elemPtr(out, d, B.CreateAdd(e, c64(k0))), Align(16));
        }
      } else {
        Value *v = PoisonValue::get(vt);
        for (int64_t k0 = 0; k0 < V; k0 += per) {
          Value *t = B.CreateAlignedLoad(tv, elemPtr(valBuf, d, B.CreateAdd(e, c64(k0))), Align(16));
          for (int64_t k = 0; k < per; ++k)
            v = B.CreateInsertElement(v, toMem(d, B.CreateExtractElement(t, uint64_t(k))), uint64_t(k0 + k));
        }
        B.CreateAlignedStore(v, ptr, Align(16));
      }
    });
  }
  B.CreateBr(endBB);

  B.SetInsertPoint(fastBB);
  loopN(total, [&](Value *e) {
    auto [q, j] = rowCol(e);
    Value *ptr = B.CreateInBoundsGEP(mt, ti.data, B.CreateAdd(baseOff, B.CreateAdd(B.CreateMul(q, rowStride), j)));
    if (isLoad) storeElem(out, d, e, fromMem(d, B.CreateLoad(mt, ptr)));
    else if (isAtomic) atomicAdd(d, ptr, loadElem(valBuf, d, e));
    else B.CreateStore(toMem(d, loadElem(valBuf, d, e)), ptr);
  });
  B.CreateBr(endBB);

  B.SetInsertPoint(slowBB);
  Value *dropsOk = droppedAxesInside(ti, starts, box); // axes indexed by their start alone
  loopN(total, [&](Value *e) {
    auto [q, j] = rowCol(e);
    Value *ok = dropsOk;
    auto within = [&](uint32_t ax, Value *idx) {
      Value *pos = B.CreateAdd(starts[ax], idx);
      return B.CreateAnd(B.CreateICmpSGE(pos, c64(0)), B.CreateICmpSLT(pos, ti.shape[ax]));
    };
    if (twoD) ok = B.CreateAnd(ok, within(tileAxes[0], q));
    ok = B.CreateAnd(ok, within(lastAxis, j));
    if (maskBuf) ok = B.CreateAnd(ok, loadElem(maskBuf, DType::Bool, e));
    Value *ptr = B.CreateGEP(mt, ti.data, B.CreateAdd(baseOff, B.CreateAdd(B.CreateMul(q, rowStride), B.CreateMul(j, colStride))));
    if (isLoad) {
      storeElem(out, d, e, guardedValue(ok, [&] { return fromMem(d, B.CreateLoad(mt, ptr)); }, other));
    } else {
      ifThen(ok, [&] {
        Value *x = loadElem(valBuf, d, e);
        if (isAtomic) atomicAdd(d, ptr, x);
        else B.CreateStore(toMem(d, x), ptr);
      });
    }
  });
  B.CreateBr(endBB);
  B.SetInsertPoint(endBB);
  if (isLoad) set(op.result(), out);
  return true;
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
    Value *mask = maskV ? get(maskV) : nullptr;
    if (!isLoad && threads > 1) mask = mask ? B.CreateAnd(mask, oneThread()) : oneThread();
    Value *r = one(get(offV), mask, valV ? get(valV) : nullptr);
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

} // namespace tsr::codegen::lower
