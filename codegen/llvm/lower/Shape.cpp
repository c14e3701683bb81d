// Creation (constant, arange), layout (broadcast, transpose) and reductions.
#include "codegen/llvm/Lowering.h"

#include <optional>

namespace tsr::codegen::lower {

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
  // A scalar result is an SSA value in every thread: each computes it (from shared inputs).
  std::optional<Redundant> red;
  if (scalarOut) red.emplace(*this);
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

} // namespace tsr::codegen::lower
