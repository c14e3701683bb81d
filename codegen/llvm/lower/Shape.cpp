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
  if (fusesIntoReaders(op)) { // one element, read where its readers need it (Math.cpp)
    const DType d = in.dtype;
    const bool scalar = in.isScalar();
    lazy[op.result()] = [this, src, d, scalar](Value *) { return scalar ? src : loadElem(src, d, c64(0)); };
    return;
  }
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

Value *Lowering::shuffleXor(Value *x, int laneMask) {
  Type *t = x->getType();
  if (t->isFloatTy() || t->isIntegerTy(32)) return T.shuffleXor(B, x, laneMask);
  if (t->isIntegerTy(1) || t->isIntegerTy(8)) return B.CreateTrunc(T.shuffleXor(B, B.CreateZExt(x, i32()), laneMask), t);
  // 64 bits: the two halves.
  Value *bits = t->isDoubleTy() ? B.CreateBitCast(x, i64()) : x;
  Value *lo = T.shuffleXor(B, B.CreateTrunc(bits, i32()), laneMask);
  Value *hi = T.shuffleXor(B, B.CreateTrunc(B.CreateLShr(bits, 32), i32()), laneMask);
  Value *r = B.CreateOr(B.CreateZExt(lo, i64()), B.CreateShl(B.CreateZExt(hi, i64()), 32));
  return t->isDoubleTy() ? B.CreateBitCast(r, t) : r;
}

// With T threads and `outer` outputs of R contiguous elements each, G threads (a power of two
// dividing T, at most T / outer and no more than R needs) share an output: lane l of a group
// combines elements l, l + G, ... (consecutive lanes read consecutive shared-memory words, no bank
// conflicts), the lanes of a warp combine by butterfly shuffles (log2(min(G, 32)) steps), and
// when a group spans W > 1 warps, each warp's lane 0 writes its partial to shared memory and
// every thread of the group combines the W partials. Passes over the outputs repeat until all
// are done; the pass count is the same in every thread, so every thread reaches each shuffle and
// barrier. The order of combination differs from the CPU's (sums agree to rounding). This is the
// block reduction of CUB's BlockReduce (warp-shuffle variant) and of the persistent layer norms
// of Apex and PyTorch.
bool Lowering::cooperativeReduce(const TOp &op, int64_t outer, int64_t R, const std::function<Value *()> &identity,
                                 const std::function<Value *(Value *, Value *)> &combine) {
  if (!shared() || !T.warpShuffles() || outer < 1 || R < 2) return false;
  const int64_t Tn = threads;
  int64_t G = 1;
  while (G * 2 <= Tn / outer && G < R && Tn % (G * 2) == 0) G *= 2;
  if (G < 2) return false;
  const TType &rt = op.result()->type;
  const DType d = op.operands[0]->type.dtype;
  Type *ct = ctype(d);
  const bool scalarOut = rt.isScalar();
  Value *src = get(op.operands[0]);
  Value *out = alloc(scalarOut ? TType::tile({1}, rt.dtype) : rt);
  const int64_t W = G > 32 ? G / 32 : 1;        // warps per group
  const int64_t groups = Tn / G, passes = (outer + groups - 1) / groups;
  Value *scratch = W > 1 ? alloc(TType::tile({Tn / 32}, d)) : nullptr;
  AllocaInst *accSlot;
  {
    IRBuilderBase::InsertPointGuard g(B);
    B.SetInsertPoint(entry, entry->getFirstInsertionPt());
    accSlot = B.CreateAlloca(ct);
  }
  Value *group = B.CreateUDiv(tid, c64(G)), *lane = B.CreateURem(tid, c64(G));
  T.barrier(B); // the operand's elements, written by other threads, are visible
  ++loopDepth;  // the loops below run in every thread, not split over them
  loop(c64(0), c64(passes), [&](Value *pass) {
    Value *o = B.CreateAdd(B.CreateMul(pass, c64(groups)), group);
    Value *active = B.CreateICmpSLT(o, c64(outer));
    B.CreateStore(identity(), accSlot);
    ifThen(active, [&] {
      loop(c64(0), c64((R + G - 1) / G), [&](Value *k) {
        Value *r = B.CreateAdd(B.CreateMul(k, c64(G)), lane);
        auto add = [&] {
          Value *x = loadElem(src, d, B.CreateAdd(B.CreateMul(o, c64(R)), r));
          B.CreateStore(combine(B.CreateLoad(ct, accSlot), x), accSlot);
        };
        if (R % G == 0) add();
        else ifThen(B.CreateICmpSLT(r, c64(R)), add);
      });
    });
    Value *acc = B.CreateLoad(ct, accSlot);
    for (int64_t m = std::min<int64_t>(G, 32) / 2; m >= 1; m /= 2) acc = combine(acc, shuffleXor(acc, int(m)));
    if (W > 1) {
      T.barrier(B); // the previous pass has read the partials
      Value *warp = B.CreateUDiv(tid, c64(32));
      Value *acc0 = acc;
      ifThen(B.CreateICmpEQ(B.CreateURem(tid, c64(32)), c64(0)), [&] { storeElem(scratch, d, warp, acc0); });
      T.barrier(B);
      acc = identity();
      for (int64_t w = 0; w < W; ++w) acc = combine(acc, loadElem(scratch, d, B.CreateAdd(B.CreateMul(group, c64(W)), c64(w))));
    }
    if (narrowFloat(d)) acc = roundTo(d, acc, false);
    Value *accOut = acc;
    ifThen(B.CreateAnd(active, B.CreateICmpEQ(lane, c64(0))), [&] { storeElem(out, rt.dtype, o, accOut); });
  });
  --loopDepth;
  T.barrier(B);
  if (scratch) T.releaseTileBuffer(scratch);
  if (scalarOut) {
    set(op.result(), loadElem(out, rt.dtype, c64(0)));
    T.releaseTileBuffer(out);
  } else {
    set(op.result(), out);
  }
  return true;
}

// Partial results of a float sum or product along the contiguous axis on the CPU (one AVX-512
// vector of f32, two of AVX2): enough independent accumulators that the add's latency does not
// bound a row that streams from memory.
constexpr int64_t kReduceLanes = 16;

Value *Lowering::reduceIdentity(OpKind k, DType d) {
  Type *ct = ctype(d);
  const bool fl = isFloat(d);
  switch (k) {
  case OpKind::ReduceSum: return fl ? cf(ct, 0.0) : ConstantInt::get(ct, 0);
  case OpKind::ReduceProd: return fl ? cf(ct, 1.0) : ConstantInt::get(ct, 1);
  case OpKind::ReduceMax:
  case OpKind::ArgMax:
    if (fl) return cf(ct, -INFINITY);
    return d == DType::Bool ? B.getFalse() : ConstantInt::get(ct, APInt::getSignedMinValue(ct->getIntegerBitWidth()));
  default:
    if (fl) return cf(ct, INFINITY);
    return d == DType::Bool ? B.getTrue() : ConstantInt::get(ct, APInt::getSignedMaxValue(ct->getIntegerBitWidth()));
  }
}

Value *Lowering::reduceCombine(OpKind k, DType d, Value *acc, Value *x, bool reassoc) {
  const bool fl = isFloat(d);
  Type *ct = ctype(d);
  switch (k) {
  case OpKind::ReduceSum:
    if (!fl) return d == DType::Bool ? B.CreateOr(acc, x) : B.CreateAdd(acc, x);
    {
      auto *s = cast<Instruction>(B.CreateFAdd(acc, x));
      s->setHasAllowReassoc(reassoc);
      return s;
    }
  case OpKind::ReduceProd:
    if (!fl) return d == DType::Bool ? B.CreateAnd(acc, x) : B.CreateMul(acc, x);
    {
      auto *s = cast<Instruction>(B.CreateFMul(acc, x));
      s->setHasAllowReassoc(reassoc);
      return s;
    }
  default:
    return binary(k == OpKind::ReduceMax ? OpKind::Max : OpKind::Min, fl ? (ct->isDoubleTy() ? DType::F64 : DType::F32) : d,
                  acc, x);
  }
}

// layer_norm's statistics in one pass over the row. The row program of nn.layer_norm computes
//   s = reduce_sum(x); mean = expand_dims(s) / D; xc = x - broadcast(mean); v = reduce_sum(xc * xc)
// which reads the row (and writes and reads xc * xc) a second time for v. When `sum` starts that
// pattern (f32, the CPU's fixed-lane sums, xc * xc read only by v), this returns v's op and
// lowerWelford computes s and v together: each of kWelfordLanes lanes runs Welford's update
// over its elements (Welford, "Note on a method for calculating corrected sums of squares and
// products", Technometrics 4(3), 1962), and the lanes' (count, mean, M2) are merged by the
// pairwise formula of Chan, Golub & LeVeque ("Updating formulae and a pairwise
// algorithm for computing sample variances", Stanford CS report STAN-CS-79-773, 1979) as a
// tree of six levels (lane l with lane l + 32, then l + 16, ...). s is
// then D * mean and v is M2: no E[x^2] - E[x]^2 cancellation, and the association is fixed by
// the code (the tree's), so the tiers and a bundle's llc give the same bits. One core of the
// 2-core build machine, layer_norm [4096, 1024] f32 row step: 2.02-2.25 ms with two passes,
// 1.91-1.94 ms in one. TSR_WELFORD=0 keeps the two passes (for measuring; loweringSwitches
// keys it).
// Welford's lanes: 64 (four AVX-512 vectors), so that four independent chains of its updates
// (each a subtraction and a multiply-add on the mean, then on M2) hide their latency; with 16
// lanes the row program took 1.5x the two passes' time.
constexpr int64_t kWelfordLanes = 64;

const TOp *Lowering::welfordVariance(const TOp &sum, std::vector<const TOp *> &between) {
  if (const char *e = std::getenv("TSR_WELFORD"); e && e[0] == '0') return nullptr;
  const tile::Block *b = curBlock;
  const TValue *x = sum.operands[0];
  if (!b || x->type.shape.size() != 2 || sum.intAttr("axis") != 1 || x->type.dtype != DType::F32) return nullptr;
  const double D = double(x->type.shape[1]);
  size_t i = 0;
  while (i < b->ops.size() && b->ops[i] != &sum) ++i;
  // The first op after `from` of kind k that reads v (as operand `slot`, or any with slot < 0).
  auto next = [&](size_t from, OpKind k, const TValue *v, int slot) -> std::pair<const TOp *, size_t> {
    for (size_t j = from + 1; j < b->ops.size(); ++j) {
      const TOp *o = b->ops[j];
      if (o->kind != k || o->results.size() != 1) continue;
      for (size_t q = 0; q < o->operands.size(); ++q)
        if (o->operands[q] == v && (slot < 0 || int(q) == slot)) return {o, j};
    }
    return {nullptr, 0};
  };
  auto [ex, ie] = next(i, OpKind::ExpandDims, sum.result(), 0);
  if (!ex) return nullptr;
  auto [dv, id] = next(ie, OpKind::Div, ex->result(), 0);
  if (!dv) return nullptr;
  // The divisor: a constant D.
  const TOp *c = nullptr;
  for (size_t j = 0; j < id; ++j)
    if (b->ops[j]->results.size() == 1 && b->ops[j]->result() == dv->operands[1]) c = b->ops[j];
  if (!c || c->kind != OpKind::Constant) return nullptr;
  const double *cd = c->attrAs<double>("value");
  if (!cd || *cd != D) return nullptr;
  auto [bc, ib] = next(id, OpKind::Broadcast, dv->result(), 0);
  if (!bc || bc->result()->type.shape != x->type.shape) return nullptr;
  auto [xc, ix] = next(ib, OpKind::Sub, bc->result(), 1);
  if (!xc || xc->operands[0] != x) return nullptr;
  auto [sq, iq] = next(ix, OpKind::Mul, xc->result(), -1);
  if (!sq || sq->operands[0] != xc->result() || sq->operands[1] != xc->result() || uses[sq->result()] != 1) return nullptr;
  auto [var, iv] = next(iq, OpKind::ReduceSum, sq->result(), 0);
  if (!var || var->intAttr("axis") != 1 || var->result()->type.shape != sum.result()->type.shape ||
      var->result()->type.dtype != DType::F32)
    return nullptr;
  between = {sq, var};
  return var;
}

void Lowering::lowerWelford(const TOp &sum, const TOp &var, int64_t outer, int64_t R) {
  // The lanes are one <kWelfordLanes x float> value each for the means and the M2s, updated in a
  // loop of our own with them as phis (as the dot's micro-kernel keeps its accumulators): left
  // to LLVM, arrays of lanes were unrolled into scalars and spilled.
  Type *ft = f32();
  auto *vt = FixedVectorType::get(ft, unsigned(kWelfordLanes));
  Value *src = get(sum.operands[0]);
  Value *sOut = alloc(sum.result()->type), *vOut = alloc(var.result()->type);
  const int64_t chunks = R / kWelfordLanes, rest = R % kWelfordLanes;
  loopN(outer, [&](Value *o) {
    Value *row = B.CreateMul(o, c64(R));
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *body = BasicBlock::Create(C, "welford.body", fn), *exit = BasicBlock::Create(C, "welford.exit", fn);
    B.CreateBr(body);
    B.SetInsertPoint(body);
    PHINode *c = B.CreatePHI(i64(), 2, "c");
    PHINode *m = B.CreatePHI(vt, 2, "mean"), *q = B.CreatePHI(vt, 2, "m2");
    c->addIncoming(c64(0), pre);
    m->addIncoming(ConstantAggregateZero::get(vt), pre);
    q->addIncoming(ConstantAggregateZero::get(vt), pre);
    // Welford's update of every lane with its element of chunk c (the lanes' count is c + 1).
    Value *cn = B.CreateAdd(c, c64(1), "", true, true);
    Value *inv = B.CreateVectorSplat(unsigned(kWelfordLanes), B.CreateFDiv(cf(ft, 1.0), B.CreateSIToFP(cn, ft)));
    Value *x = B.CreateAlignedLoad(vt, B.CreateInBoundsGEP(ft, src, B.CreateAdd(row, B.CreateMul(c, c64(kWelfordLanes)))), Align(4));
    Value *delta = B.CreateFSub(x, m);
    Value *mn = fma(delta, inv, m);
    Value *qn = fma(delta, B.CreateFSub(x, mn), q);
    c->addIncoming(cn, body);
    m->addIncoming(mn, body);
    q->addIncoming(qn, body);
    B.CreateCondBr(B.CreateICmpSLT(cn, c64(chunks)), body, exit);
    B.SetInsertPoint(exit);
    Value *vm = mn, *vq = qn;
    // The partial chunk: lanes [0, rest) take one more element (count chunks + 1).
    if (rest) {
      Value *inv1 = cf(ft, 1.0 / double(chunks + 1));
      for (int64_t l = 0; l < rest; ++l) {
        Value *xl = B.CreateLoad(ft, B.CreateInBoundsGEP(ft, src, B.CreateAdd(row, c64(chunks * kWelfordLanes + l))));
        Value *ml = B.CreateExtractElement(vm, uint64_t(l)), *ql = B.CreateExtractElement(vq, uint64_t(l));
        Value *d = B.CreateFSub(xl, ml);
        ml = fma(d, inv1, ml);
        ql = fma(d, B.CreateFSub(xl, ml), ql);
        vm = B.CreateInsertElement(vm, ml, uint64_t(l));
        vq = B.CreateInsertElement(vq, ql, uint64_t(l));
      }
    }
    // Chan et al.'s pairwise merge as a tree: each level merges lane l with lane l + w/2 for
    // all l < w/2 at once (vector ops with the counts' coefficients as constants), six levels
    // for 64 lanes. (Merging the lanes one after another in order was a chain of 63 dependent
    // scalar merges: about a third of a 1024-element row's time.)
    std::vector<double> cnt(static_cast<size_t>(kWelfordLanes));
    for (int64_t l = 0; l < kWelfordLanes; ++l) cnt[size_t(l)] = double(chunks + (l < rest ? 1 : 0));
    for (int64_t w = kWelfordLanes; w > 1; w /= 2) {
      const int64_t h = w / 2;
      std::vector<int> lo(static_cast<size_t>(h)), hi(static_cast<size_t>(h));
      std::vector<Constant *> fb, fab;
      for (int64_t l = 0; l < h; ++l) {
        lo[size_t(l)] = int(l);
        hi[size_t(l)] = int(l + h);
        const double na = cnt[size_t(l)], nb = cnt[size_t(l + h)], nn = na + nb;
        fb.push_back(ConstantFP::get(ft, nn > 0 ? nb / nn : 0.0));
        fab.push_back(ConstantFP::get(ft, nn > 0 ? na * nb / nn : 0.0));
        cnt[size_t(l)] = nn;
      }
      Value *ma = B.CreateShuffleVector(vm, lo), *mb = B.CreateShuffleVector(vm, hi);
      Value *qa = B.CreateShuffleVector(vq, lo), *qb = B.CreateShuffleVector(vq, hi);
      Value *d = B.CreateFSub(mb, ma);
      vm = fma(d, ConstantVector::get(fb), ma);
      vq = fma(B.CreateFMul(d, d), ConstantVector::get(fab), B.CreateFAdd(qa, qb));
    }
    Value *mean = B.CreateExtractElement(vm, uint64_t(0)), *m2 = B.CreateExtractElement(vq, uint64_t(0));
    storeElem(sOut, DType::F32, o, B.CreateFMul(mean, cf(ft, double(R))));
    storeElem(vOut, DType::F32, o, m2);
  });
  set(sum.result(), sOut);
  set(var.result(), vOut);
}

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

  // On a GPU float sums and products are reassociable, so that a reduction along the contiguous
  // axis vectorizes. On the CPU the association is fixed by the code (lanes below) and never
  // LLVM's: its choices (vector width, interleaving, unrolling) differ between the JIT's tiers
  // and a bundle's llc, and results must not.
  const bool reassoc = threads > 1;
  auto identity = [&]() { return reduceIdentity(op.kind, d); };
  auto combine = [&](Value *acc, Value *x) { return reduceCombine(op.kind, d, acc, x, reassoc); };
  // The best so far for argmax/argmin: strictly better, or NaN where the best is not (the first
  // NaN wins, as the first extreme does).
  auto better = [&](Value *x, Value *best) -> Value * {
    bool mx = op.kind == OpKind::ArgMax;
    if (!fl) return mx ? (d == DType::Bool ? B.CreateICmpUGT(x, best) : B.CreateICmpSGT(x, best))
                       : (d == DType::Bool ? B.CreateICmpULT(x, best) : B.CreateICmpSLT(x, best));
    Value *cmp = mx ? B.CreateFCmpOGT(x, best) : B.CreateFCmpOLT(x, best);
    return B.CreateOr(cmp, B.CreateAnd(isNan(x), B.CreateNot(isNan(best))));
  };

  if (!isArg && inner == 1 && cooperativeReduce(op, outer, R, identity, combine)) return;
  bool scalarOut = rt.isScalar();
  // A scalar result is an SSA value in every thread: each computes it (from shared inputs).
  std::optional<Redundant> red;
  if (scalarOut) red.emplace(*this);
  Value *out = scalarOut ? nullptr : alloc(rt);
  const bool sumOrProd = op.kind == OpKind::ReduceSum || op.kind == OpKind::ReduceProd;
  if (op.kind == OpKind::ReduceSum && inner == 1 && !reassoc && R >= kWelfordLanes && d == DType::F32 && !scalarOut) {
    std::vector<const TOp *> between;
    if (const TOp *var = welfordVariance(op, between)) {
      lowerWelford(op, *var, outer, R);
      for (const TOp *t : between) absorbed.insert(t); // xc * xc and its sum: computed here
      return;
    }
  }
  if (!isArg && inner == 1 && fl && sumOrProd && !reassoc && R >= kReduceLanes) {
    // Along the contiguous axis on the CPU, in a fixed association: kReduceLanes partial results,
    // lane l taking elements l, l + kReduceLanes, ... in order, then the lanes combined in order.
    // The lane loop is elementwise, so it vectorizes without reassociation.
    AllocaInst *lanes = nullptr;
    {
      IRBuilder<> ab(entry, entry->getFirstInsertionPt());
      lanes = ab.CreateAlloca(ArrayType::get(ct, kReduceLanes));
      lanes->setAlignment(Align(64));
    }
    auto lane = [&](Value *l) { return B.CreateInBoundsGEP(ArrayType::get(ct, kReduceLanes), lanes, {c64(0), l}); };
    Value *out = scalarOut ? nullptr : alloc(rt);
    std::optional<Redundant> red;
    if (scalarOut) red.emplace(*this);
    const int64_t chunks = R / kReduceLanes, rest = R % kReduceLanes;
    loopN(outer, [&](Value *o) {
      loopN(kReduceLanes, [&](Value *l) { B.CreateStore(identity(), lane(l)); });
      Value *row = B.CreateMul(o, c64(R));
      auto accumulate = [&](Value *first, int64_t n) {
        loopN(n, [&](Value *l) {
          Value *x = loadElem(src, d, B.CreateAdd(first, l));
          B.CreateStore(combine(B.CreateLoad(ct, lane(l)), x), lane(l));
        });
      };
      // The chunks stay a loop: fully unrolled, LLVM would forward the stores of the ops before
      // into it and keep their tiles in registers through the sum, and a tile read again after
      // it (layer_norm's x - mean, live across the variance) spilled on every row
      // (docs/performance.md, "CPU execution", has the figures).
      loopN(chunks, [&](Value *c) { accumulate(B.CreateAdd(row, B.CreateMul(c, c64(kReduceLanes))), kReduceLanes); },
            /*keepRolled=*/true);
      if (rest) accumulate(B.CreateAdd(row, c64(chunks * kReduceLanes)), rest);
      Value *acc = B.CreateLoad(ct, lane(c64(0)));
      for (int64_t l = 1; l < kReduceLanes; ++l) acc = combine(acc, B.CreateLoad(ct, lane(c64(l))));
      if (narrowFloat(d)) acc = roundTo(d, acc, false);
      if (scalarOut) B.CreateStore(acc, lane(c64(0)));
      else storeElem(out, rt.dtype, o, acc);
    });
    if (scalarOut) set(op.result(), B.CreateLoad(ct, lane(c64(0)))); // outer == 1: the result, reloaded
    else set(op.result(), out);
    return;
  }
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
