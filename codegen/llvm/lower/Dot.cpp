// dot: the register-blocked f32 micro-kernel and the plain loop nests.
#include "codegen/llvm/Lowering.h"

#include <tuple>

namespace tsr::codegen::lower {

// ---- dot ----

// f32 C[M,N] += A[M,K] @ B[K,N], row-major buffers: a register-blocked micro-kernel. Blocks of
// MR rows by NV vectors of W floats keep MR*NV accumulators in vector registers across the whole
// k loop (for each k: NV loads of B's row, MR broadcasts of A, MR*NV FMAs), as in BLIS's
// micro-kernels (Van Zee & van de Geijn, "BLIS", ACM TOMS 2015). Leftover rows take one block of
// fewer rows, leftover whole vectors one block of fewer vectors, and the last columns (fewer than
// W) a plain i-k-j loop nest.
void Lowering::microKernel(Value *out, Value *a, Value *lda, Value *bb, Value *ldb, int64_t K, int64_t N, int64_t row0,
                           int64_t rowBlocks, int64_t MR, int64_t col0, int64_t colBlocks, int64_t NV, int64_t W) {
  auto *vt = FixedVectorType::get(f32(), unsigned(W));
  // The blocks of MR x NV*W outputs: with several threads (a GPU's CTA) one loop over all of them,
  // which loop() splits over the threads; nested loops (rows, then columns) would give the
  // threads only the row blocks, a handful of them.
  auto blocks = [&](const std::function<void(Value *, Value *)> &body) {
    if (shared()) {
      loop(c64(0), c64(rowBlocks * colBlocks), [&](Value *q) {
        body(B.CreateUDiv(q, c64(colBlocks)), B.CreateURem(q, c64(colBlocks)));
      });
      return;
    }
    loop(c64(0), c64(rowBlocks), [&](Value *ib) { loop(c64(0), c64(colBlocks), [&](Value *jb) { body(ib, jb); }); });
  };
  blocks([&](Value *ib, Value *jb) {
    Value *i0 = B.CreateAdd(c64(row0), B.CreateMul(ib, c64(MR)));
    {
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
      Value *brow = B.CreateAdd(B.CreateMul(k, ldb), j0);
      for (int64_t v = 0; v < NV; ++v)
        bv[v] = B.CreateAlignedLoad(vt, B.CreateInBoundsGEP(f32(), bb, B.CreateAdd(brow, c64(v * W))), Align(4));
      std::vector<Value *> next(MR * NV);
      for (int64_t r = 0; r < MR; ++r) {
        Value *av = B.CreateLoad(f32(), B.CreateInBoundsGEP(f32(), a, B.CreateAdd(B.CreateMul(B.CreateAdd(i0, c64(r)), lda), k)));
        Value *splat = B.CreateVectorSplat(unsigned(W), av);
        for (int64_t v = 0; v < NV; ++v) next[r * NV + v] = fma(splat, bv[v], acc[r * NV + v]);
      }
      Value *kn = B.CreateAdd(k, c64(1), "", true, true);
      k->addIncoming(kn, body);
      for (size_t q = 0; q < acc.size(); ++q) acc[q]->addIncoming(next[q], body);
      B.CreateCondBr(B.CreateICmpSLT(kn, c64(K)), body, exit);
      B.SetInsertPoint(exit);
      for (size_t q = 0; q < acc.size(); ++q) B.CreateAlignedStore(next[q], cptr[q], Align(4));
    }
  });
}

void Lowering::dotF32Blocked(Value *out, Value *a, Value *lda, Value *bb, Value *ldb, int64_t M, int64_t K, int64_t N) {
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
      if (Nb > 0) microKernel(out, a, lda, bb, ldb, K, N, row0, blocks, mr, 0, Nb / (NV * W), NV, W);
      if (NV2 > 0) microKernel(out, a, lda, bb, ldb, K, N, row0, blocks, mr, Nb, 1, NV2, W);
    }
  }
  if (Ns == N) return;
  // The last columns: a plain i-k-j loop nest.
  loopN(M, [&](Value *i) {
    loopN(K, [&](Value *k) {
      Value *av = B.CreateLoad(f32(), B.CreateInBoundsGEP(f32(), a, B.CreateAdd(B.CreateMul(i, lda), k)));
      loop(c64(Ns), c64(N), [&](Value *j) {
        Value *bp = B.CreateInBoundsGEP(f32(), bb, B.CreateAdd(B.CreateMul(k, ldb), j));
        Value *cp = B.CreateInBoundsGEP(f32(), out, B.CreateAdd(B.CreateMul(i, c64(N)), j));
        B.CreateStore(fma(av, B.CreateLoad(f32(), bp), B.CreateLoad(f32(), cp)), cp);
      });
    });
  });
}

/// Whether the load_box `op` (ops[index] of `b`) may be left to the dot that is its only use: an
/// unmasked 2-d box of an f32 tensor, read by an f32-accumulating dot later in the same block with
/// nothing in between that writes memory. The dot then reads the tensor in place when the box is
/// inside it with unit inner stride (no copy into a tile), and copies the box otherwise.
bool Lowering::deferToDot(const tile::Block &b, size_t index) {
  const TOp *op = b.ops[index];
  if (op->kind != OpKind::LoadBox || op->operands[0]->type.dtype != DType::F32) return false;
  const bool *masked = op->attrAs<bool>("masked");
  if ((masked && *masked) || op->result()->type.shape.size() != 2 || uses[op->result()] != 1) return false;
  for (size_t j = index + 1; j < b.ops.size(); ++j) {
    const TOp *u = b.ops[j];
    if (u->kind == OpKind::Dot) {
      bool isOperand = u->operands[0] == op->result() || u->operands[1] == op->result();
      if (isOperand) return u->result()->type.dtype == DType::F32 && u->operands[0]->type.dtype == DType::F32;
    }
    if (!u->regions.empty() || u->kind == OpKind::Store || u->kind == OpKind::StoreBox || u->kind == OpKind::AtomicAdd ||
        u->kind == OpKind::AtomicAddBox)
      return false;
    for (const TValue *v : u->operands)
      if (v == op->result()) return false;
  }
  return false;
}

void Lowering::lowerDot(const TOp &op) {
  const TType &at = op.operands[0]->type, &bt = op.operands[1]->type, &rt = op.result()->type;
  int64_t M = at.shape[0], K = at.shape[1], N = bt.shape[1];
  // Operands whose load_box was deferred: read in place when the box allows it.
  const TOp *boxOf[2] = {nullptr, nullptr};
  for (int q = 0; q < 2; ++q)
    if (auto it = deferred.find(op.operands[q]); it != deferred.end()) boxOf[q] = it->second;
  DType rd = rt.dtype;
  Type *acct = ctype(rd);
  Value *out;
  bool hasAcc = op.operands.size() == 3;
  // Accumulate in place when the accumulator is a loop's carried tile used only here, directly
  // in the loop's body (the usual `acc = dot(a, b, acc)`; inside a nested loop the dot would run
  // more than once per iteration): the yield then has nothing to copy.
  const TValue *accV = hasAcc ? op.operands[2] : nullptr;
  if (accV && accV->owner == curBlock && carriedBuf.count(accV) && uses[accV] == 1) {
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
  if (f32Path && (boxOf[0] || boxOf[1])) {
    // In place: pointer to the box's first element and the tensor's row stride.
    Value *direct = B.getTrue();
    Value *ptr[2], *ld[2];
    for (int q = 0; q < 2; ++q) {
      if (!boxOf[q]) continue;
      const TOp &bx = *boxOf[q];
      TensorInfo &ti = tensor(bx.operands[0]);
      const auto &box = *bx.attrAs<std::vector<int64_t>>("box");
      Value *off = c64(0);
      int rowAxis = -1, colAxis = -1;
      for (size_t d = 0; d < box.size(); ++d) {
        Value *st = get(bx.operands[1 + d]);
        int64_t ext = box[d] > 0 ? box[d] : 1;
        direct = B.CreateAnd(direct, B.CreateAnd(B.CreateICmpSGE(st, c64(0)), B.CreateICmpSLE(B.CreateAdd(st, c64(ext)), ti.shape[d])));
        off = B.CreateAdd(off, B.CreateMul(st, ti.strides[d]));
        if (box[d] > 0) (rowAxis < 0 ? rowAxis : colAxis) = int(d);
      }
      direct = B.CreateAnd(direct, B.CreateICmpEQ(ti.strides[colAxis], c64(1)));
      ptr[q] = B.CreateGEP(f32(), ti.data, off);
      ld[q] = ti.strides[rowAxis];
    }
    BasicBlock *inPlace = BasicBlock::Create(C, "dot.direct", fn), *copied = BasicBlock::Create(C, "dot.copied", fn),
               *join = BasicBlock::Create(C, "dot.end", fn);
    B.CreateCondBr(direct, inPlace, copied);
    B.SetInsertPoint(inPlace);
    Value *bp = boxOf[1] ? ptr[1] : get(op.operands[1]), *ldb = boxOf[1] ? ld[1] : c64(N);
    if (boxOf[1] && !shared()) {
      // Pack B's box into a contiguous, 64-byte aligned K x N buffer (GotoBLAS/BLIS packing:
      // Goto & van de Geijn, "Anatomy of high-performance matrix multiplication", ACM TOMS
      // 2008). Read in place, B's rows lie a whole row of the tensor apart (16 KiB at N = 4096),
      // so the K rows of the box fall into the same few L1 sets and pages, and every block of
      // rows of A would read them again from L2. Packed, the box stays in L1 across the blocks
      // of rows (K x N f32: 32 KiB at the CPU's 128 x 64 x 128 tiles). A is read in place: the
      // micro-kernel streams MR of its rows at a time (packing A too measured no faster). The
      // order of the sums is unchanged, so the results are the same bits. On the 2-core build
      // machine, one core, GEMM f32 64x64x64 tiles: 89 -> 106 GFLOP/s at 1024^3, 57 -> 94 at
      // 4096^3 (docs/performance.md).
      Value *pk = alloc(bt);
      loopN(K, [&](Value *k) {
        B.CreateMemCpy(B.CreateInBoundsGEP(f32(), pk, B.CreateMul(k, c64(N))), MaybeAlign(N % 16 == 0 ? 64 : 4),
                       B.CreateGEP(f32(), ptr[1], B.CreateMul(k, ld[1])), MaybeAlign(4), c64(N * 4));
      });
      bp = pk;
      ldb = c64(N);
    }
    Value *ap = boxOf[0] ? ptr[0] : get(op.operands[0]), *lda = boxOf[0] ? ld[0] : c64(K);
    dotF32Blocked(out, ap, lda, bp, ldb, M, K, N);
    B.CreateBr(join);
    B.SetInsertPoint(copied);
    for (int q = 0; q < 2; ++q)
      if (boxOf[q]) lowerBox(*boxOf[q]);
    dotF32Blocked(out, get(op.operands[0]), c64(K), get(op.operands[1]), c64(N), M, K, N);
    B.CreateBr(join);
    B.SetInsertPoint(join);
    set(op.result(), out);
    return;
  }
  Value *a = get(op.operands[0]), *b = get(op.operands[1]);
  if (f32Path) {
    dotF32Blocked(out, a, c64(K), b, c64(N), M, K, N);
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

} // namespace tsr::codegen::lower
