// A tensor-core loop's epilogue in registers (MmaLoop.cpp): the ops after the loop that a fused
// product's schedule puts there (ir/schedule/EpilogueFusion.cpp: casts, elementwise ops, boxes of
// other tensors at the tile's place, the tile's store) found by mmaEpilogue, an analysis, and
// computed per accumulator pair by lowerMmaEpilogue, whose values are stored straight to the
// tensor or, given a staging buffer, through shared memory in whole rows.
#include "codegen/llvm/Lowering.h"
#include "codegen/llvm/MmaPlan.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace tsr::codegen::lower {

namespace {

/// Whether `st` stores the whole of tile `v` (BM x BN) as an unmasked box of two tile axes,
/// with nothing but the tile from the loop.
bool storesTile(const TOp &st, const TValue *v, int64_t BM, int64_t BN) {
  const auto *box = st.attrAs<std::vector<int64_t>>("box");
  const bool *masked = st.attrAs<bool>("masked");
  if (!box || (masked && *masked) || st.operands.size() != 2 + box->size() || st.operands[1 + box->size()] != v) return false;
  std::vector<int64_t> ext;
  for (int64_t e : *box)
    if (e > 0) ext.push_back(e);
  return ext == std::vector<int64_t>{BM, BN};
}

} // namespace

Lowering::MmaEpilogue Lowering::mmaEpilogue(const tile::Block &b, const TOp &op, const MmaPlan &p) {
  // The ops after the loop, to the end of the block, when each is one the registers can run per
  // element (a fused product's epilogue, ir/schedule/EpilogueFusion.cpp): casts, elementwise ops,
  // constants, broadcasts, boxes of other tensors at the output tile's place (loads) and the
  // tile's stores; scalars from scalars (indices). The last op is a store of the whole tile.
  MmaEpilogue e;
  const auto &ops = b.ops;
  auto at = std::find(ops.begin(), ops.end(), &op);
  if (at == ops.end() || at + 1 == ops.end()) return e;
  const TOp *last = ops.back();
  if (last->kind != OpKind::StoreBox || !storesTile(*last, last->operands.back(), p.BM, p.BN)) return e;
  const auto &box = *last->attrAs<std::vector<int64_t>>("box");
  const size_t rank = box.size();
  // Where the tile lies: the last store's start per axis (the row and column axes, the squeezed ones).
  std::vector<const TValue *> start(last->operands.begin() + 1, last->operands.begin() + 1 + long(rank));
  std::unordered_set<const TValue *> chain{op.result()};
  auto tileOk = [&](const TValue *v) {
    if (v->type.isScalar()) return true;
    if (v->type.isTensor() || v->type.shape.size() != 2) return false;
    const int64_t r = v->type.shape[0], c = v->type.shape[1];
    return (r == p.BM || r == 1) && (c == p.BN || c == 1);
  };
  auto isZero = [&](const TValue *v) {
    const TOp *d = v->def;
    if (!d || d->kind != OpKind::Constant || !v->type.isScalar()) return false;
    const auto *i = d->attrAs<int64_t>("value");
    return i && *i == 0;
  };
  for (auto it = at + 1; it != ops.end(); ++it) {
    const TOp *o = *it;
    if (!o->regions.empty()) return {};
    const bool scalarOnly = std::all_of(o->results.begin(), o->results.end(), [](const TValue *r) { return r->type.isScalar(); }) &&
                            std::all_of(o->operands.begin(), o->operands.end(), [](const TValue *v) { return v->type.isScalar() || v->type.isTensor(); });
    if (scalarOnly && !o->results.empty() && o->kind != OpKind::StoreBox) {
      e.ops.push_back(o);
      continue;
    }
    if (o->kind == OpKind::StoreBox) {
      const auto *sb = o->attrAs<std::vector<int64_t>>("box");
      if (!sb || *sb != box || !storesTile(*o, o->operands.back(), p.BM, p.BN) || !chain.count(o->operands.back())) return {};
      for (size_t d = 0; d < rank; ++d)
        if (o->operands[1 + d] != start[d]) return {};
      e.ops.push_back(o);
      continue;
    }
    if (o->kind == OpKind::LoadBox) {
      const auto *lb = o->attrAs<std::vector<int64_t>>("box");
      const bool *masked = o->attrAs<bool>("masked");
      if (!lb || lb->size() != rank || (masked && *masked) || o->operands.size() != 1 + rank || !tileOk(o->result())) return {};
      for (size_t d = 0; d < rank; ++d) {
        // Along the tile's axes, the tile's start (or 0 for a broadcast axis of extent 1); on the
        // squeezed axes, the store's index or 0 (a broadcast batch axis).
        const bool tileAxis = box[d] > 0;
        if (tileAxis && (*lb)[d] != box[d] && (*lb)[d] != 1) return {};
        if (!tileAxis && (*lb)[d] != 0) return {};
        const TValue *s0 = o->operands[1 + d];
        const bool bcast = tileAxis ? (*lb)[d] == 1 : false;
        if (!(s0 == start[d] || (isZero(s0) && (bcast || !tileAxis)))) return {};
      }
      e.ops.push_back(o);
      chain.insert(o->result());
      continue;
    }
    const tile::OpClass cls = tile::opClass(o->kind);
    const bool ew = cls == tile::OpClass::Unary || cls == tile::OpClass::Binary || cls == tile::OpClass::Compare ||
                    cls == tile::OpClass::Select || o->kind == OpKind::Cast || o->kind == OpKind::Constant ||
                    o->kind == OpKind::Broadcast;
    if (!ew || o->results.size() != 1 || !tileOk(o->result())) return {};
    for (const TValue *v : o->operands)
      if (!v->type.isScalar() && !chain.count(v)) return {};
    e.ops.push_back(o);
    chain.insert(o->result());
  }
  e.last = last;
  return e;
}

void Lowering::lowerMmaEpilogue(const MmaEpilogue &epi, const std::function<std::array<Value *, 2>(int64_t, int64_t, int)> &at,
                                const std::function<Value *(int64_t, int64_t, int)> &acc, int64_t MT, int64_t NT,
                                const EpilogueStaging *staging) {
  // Scalars first (indices the loads and stores take), lowered as anywhere.
  for (const TOp *o : epi.ops)
    if (o->kind != OpKind::StoreBox && o->kind != OpKind::LoadBox && o->results.size() == 1 && o->result()->type.isScalar() &&
        (o->operands.empty() || o->operands[0]->type.isScalar() || o->operands[0]->type.isTensor()) && !vals.count(o->result()))
      dispatch(*o);
  const TOp &last = *epi.last;
  const auto &box = *last.attrAs<std::vector<int64_t>>("box");
  int rowAxis = -1, colAxis = -1;
  for (size_t d = 0; d < box.size(); ++d)
    if (box[d] > 0) (rowAxis < 0 ? rowAxis : colAxis) = int(d);
  // The tile's place, from the last store: every store and load of the epilogue shares it.
  std::vector<Value *> start(box.size());
  for (size_t d = 0; d < box.size(); ++d) start[d] = get(last.operands[1 + d]);
  Value *r0 = start[size_t(rowAxis)], *c0 = start[size_t(colAxis)];
  struct Place {
    Value *base, *ok0, *rs, *cs, *pairs;
  };
  // A tensor's offset of the tile's element (0, 0), whether its squeezed indices are inside, its
  // row and column strides, and whether a thread's column pair is one aligned vector.
  std::unordered_map<const TOp *, Place> places;
  auto place = [&](const TOp &o) -> Place & {
    auto it = places.find(&o);
    if (it != places.end()) return it->second;
    TensorInfo &ti = tensor(o.operands[0]);
    const auto &b = *o.attrAs<std::vector<int64_t>>("box");
    Value *base = c64(0), *ok0 = B.getTrue();
    for (size_t d = 0; d < b.size(); ++d) {
      Value *s0 = get(o.operands[1 + d]);
      base = B.CreateAdd(base, B.CreateMul(s0, ti.strides[d]));
      if (b[d] == 0) ok0 = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(s0, c64(0)), B.CreateICmpSLT(s0, ti.shape[d])));
    }
    // A broadcast axis (box extent 1) reads its index 0 for every row or column of the tile.
    Value *rs = b[size_t(rowAxis)] == 1 ? c64(0) : ti.strides[size_t(rowAxis)];
    Value *cs = b[size_t(colAxis)] == 1 ? c64(0) : ti.strides[size_t(colAxis)];
    const int64_t elemBytes = int64_t(mtype(o.operands[0]->type.dtype)->getPrimitiveSizeInBits() / 8);
    Value *pairs = B.CreateAnd(B.CreateICmpEQ(cs, c64(1)), B.CreateICmpEQ(B.CreateAnd(B.CreateOr(rs, base), c64(1)), c64(0)));
    pairs = B.CreateAnd(pairs, B.CreateICmpEQ(B.CreateAnd(B.CreatePtrToInt(ti.data, i64()), c64(2 * elemBytes - 1)), c64(0)));
    return places.emplace(&o, Place{base, ok0, rs, cs, pairs}).first->second;
  };
  auto inside = [&](const TOp &o, Value *gr, Value *gc) {
    TensorInfo &ti = tensor(o.operands[0]);
    const auto &b = *o.attrAs<std::vector<int64_t>>("box");
    Value *ok = place(o).ok0;
    if (b[size_t(rowAxis)] != 1)
      ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpSGE(gr, c64(0)), B.CreateICmpSLT(gr, ti.shape[size_t(rowAxis)])));
    if (b[size_t(colAxis)] != 1)
      ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpSGE(gc, c64(0)), B.CreateICmpSLT(gc, ti.shape[size_t(colAxis)])));
    return ok;
  };
  for (const TOp *o : epi.ops)
    if (o->kind == OpKind::LoadBox || o->kind == OpKind::StoreBox) place(*o);
  const TValue *accValue = nullptr;
  for (const TOp *o : epi.ops)
    for (const TValue *v : o->operands)
      if (!accValue && v->def && v->def->kind == OpKind::For) accValue = v;
  // The thread's accumulator pairs in chunks: each chunk's loads and arithmetic first (one
  // basic block with no store, so that its loads are in flight together), then its stores.
  // Evaluated pair by pair with a store after each, every load waited for the stores before it
  // (they may alias): a product's CTA has too few warps to hide that latency.
  struct Pair {
    int64_t i, jn;
    int q;
  };
  std::vector<Pair> all;
  for (int64_t i = 0; i < MT; ++i)
    for (int64_t jn = 0; jn < NT; ++jn)
      for (int q = 0; q < 4; q += 2) all.push_back({i, jn, q});
  constexpr size_t kChunk = 8;
  std::vector<const TOp *> stores;
  for (const TOp *o : epi.ops)
    if (o->kind == OpKind::StoreBox) stores.push_back(o);
  // Per pair: its place, and per store the two elements' storage bits.
  struct Done {
    Value *r, *c, *gr, *gc;
    std::vector<std::array<Value *, 2>> bits;
  };
  // A pair's two elements as one vector store's value.
  auto pairVector = [&](Type *mt, const std::array<Value *, 2> &m) {
    Value *v = B.CreateInsertElement(PoisonValue::get(FixedVectorType::get(mt, 2)), m[0], uint64_t(0));
    return B.CreateInsertElement(v, m[1], uint64_t(1));
  };
  auto emitAll = [&](const std::function<void(const Done &, size_t)> &store) {
    for (size_t first = 0; first < all.size(); first += kChunk) {
      const size_t last = std::min(all.size(), first + kChunk);
      std::vector<Done> done;
      for (size_t k = first; k < last; ++k) {
        const Pair &pp = all[k];
        auto [r, c] = at(pp.i, pp.jn, pp.q);
        Value *gr = B.CreateAdd(r0, r), *gc = B.CreateAdd(c0, c);
        // Each op's value at the pair's two elements.
        std::unordered_map<const TValue *, std::array<Value *, 2>> x;
        if (accValue) x[accValue] = {acc(pp.i, pp.jn, pp.q), acc(pp.i, pp.jn, pp.q + 1)};
        auto val = [&](const TValue *v, int e) -> Value * {
          auto it = x.find(v);
          if (it != x.end()) return it->second[size_t(e)];
          return get(v); // a scalar
        };
        for (const TOp *o : epi.ops) {
          if (o->kind == OpKind::StoreBox || o->results.size() != 1 || o->result()->type.isScalar()) continue;
          const TValue *res = o->result();
          const DType d = res->type.dtype;
          std::array<Value *, 2> y{};
          for (int e = 0; e < 2; ++e) {
            switch (o->kind) {
            case OpKind::LoadBox: {
              // Inside the tensor, else its element (0, 0) (always there when any is): the stores
              // skip elements outside the output.
              const Place &pl = place(*o);
              Value *ok = inside(*o, gr, B.CreateAdd(gc, c64(e)));
              Value *off = B.CreateAdd(pl.base, B.CreateAdd(B.CreateMul(r, pl.rs), B.CreateMul(B.CreateAdd(c, c64(e)), pl.cs)));
              off = B.CreateSelect(ok, off, pl.base);
              TensorInfo &ti = tensor(o->operands[0]);
              Type *mt = mtype(d);
              y[size_t(e)] = fromMem(d, B.CreateLoad(mt, B.CreateInBoundsGEP(mt, ti.data, off)));
              break;
            }
            case OpKind::Constant: y[size_t(e)] = constantOf(d, *o->attr("value")); break;
            case OpKind::Broadcast: y[size_t(e)] = val(o->operands[0], e); break;
            default: {
              std::vector<Value *> xs;
              for (const TValue *v : o->operands) xs.push_back(val(v, e));
              y[size_t(e)] = elementValue(*o, xs);
              if (!y[size_t(e)]) fail(F, "an epilogue op the registers cannot compute");
            }
            }
          }
          x[res] = y;
        }
        Done dn{r, c, gr, gc, {}};
        for (const TOp *st : stores) {
          const DType to = st->operands[0]->type.dtype;
          const TValue *v = st->operands.back();
          std::array<Value *, 2> m{};
          for (int e = 0; e < 2; ++e) {
            Value *y = val(v, e);
            // The loop's f32 accumulators stored as they are into a narrower tensor round as a cast.
            if (v == accValue && to != DType::F32) y = convert(y, DType::F32, to, false);
            m[size_t(e)] = toMem(to, y);
          }
          dn.bits.push_back(m);
        }
        done.push_back(std::move(dn));
      }
      for (const Done &dn : done)
        for (size_t si = 0; si < stores.size(); ++si) store(dn, si);
    }
  };
  // Each pair straight to the tensor: both elements at once where they are inside and aligned.
  auto direct = [&](const Done &dn, size_t si) {
    const TOp *st = stores[si];
    const Place &pl = place(*st);
    TensorInfo &ti = tensor(st->operands[0]);
    Type *mt = mtype(st->operands[0]->type.dtype);
    const int64_t elemBytes = int64_t(mt->getPrimitiveSizeInBits() / 8);
    Value *ok[2] = {inside(*st, dn.gr, dn.gc), inside(*st, dn.gr, B.CreateAdd(dn.gc, c64(1)))};
    const std::array<Value *, 2> &m = dn.bits[si];
    Value *off = B.CreateAdd(pl.base, B.CreateAdd(B.CreateMul(dn.r, pl.rs), B.CreateMul(dn.c, pl.cs)));
    BasicBlock *vecBB = BasicBlock::Create(C, "epi.pair", fn), *oneBB = BasicBlock::Create(C, "epi.one", fn),
               *doneBB = BasicBlock::Create(C, "epi.done", fn);
    B.CreateCondBr(B.CreateAnd(pl.pairs, B.CreateAnd(ok[0], ok[1])), vecBB, oneBB);
    B.SetInsertPoint(vecBB);
    Value *vec = pairVector(mt, m);
    B.CreateAlignedStore(vec, B.CreateInBoundsGEP(mt, ti.data, off), Align(uint64_t(2 * elemBytes)));
    B.CreateBr(doneBB);
    B.SetInsertPoint(oneBB);
    for (int e = 0; e < 2; ++e)
      ifThen(ok[e], [&] { B.CreateStore(m[size_t(e)], B.CreateInBoundsGEP(mt, ti.data, B.CreateAdd(off, B.CreateMul(c64(e), pl.cs)))); });
    B.CreateBr(doneBB);
    B.SetInsertPoint(doneBB);
  };
  if (!staging || !staging->buffer || stores.size() != 1) {
    emitAll(direct);
    absorbed.insert(epi.ops.begin(), epi.ops.end());
    return;
  }
  // Through shared memory (CUTLASS's epilogue through shared memory, sm90 EpilogueSmem): a warp's
  // pairs are 8 rows of 16 bytes, half of each 32-byte sector its store writes (ncu: 50% of the
  // sectors of a 128 x 256 product's stores excessive). The pairs go to the staging buffer, rows
  // padded by 16 bytes (a warp's 8 rows then fall in 32 different banks), and come back as
  // 16-byte vectors along the rows, a warp's store 512 contiguous bytes. For a tile wholly inside
  // the tensor with rows aligned to 16 bytes; other tiles take the direct stores.
  const TOp &st = *stores[0];
  TensorInfo &ti = tensor(st.operands[0]);
  Type *mt = mtype(st.operands[0]->type.dtype);
  const int64_t eb = int64_t(mt->getPrimitiveSizeInBits() / 8), BM = box[size_t(rowAxis)], BN = box[size_t(colAxis)];
  const int64_t rowBytes = BN * eb, pitch = rowBytes + 16;
  if ((eb != 2 && eb != 4) || rowBytes % 16 != 0 || BM * pitch > staging->bytes) {
    emitAll(direct);
    absorbed.insert(epi.ops.begin(), epi.ops.end());
    return;
  }
  const Place &pl = place(st);
  Value *inTensor = B.CreateAnd(pl.pairs, pl.ok0);
  inTensor = B.CreateAnd(inTensor, B.CreateAnd(B.CreateICmpSGE(r0, c64(0)), B.CreateICmpSLE(B.CreateAdd(r0, c64(BM)), ti.shape[size_t(rowAxis)])));
  inTensor = B.CreateAnd(inTensor, B.CreateAnd(B.CreateICmpSGE(c0, c64(0)), B.CreateICmpSLE(B.CreateAdd(c0, c64(BN)), ti.shape[size_t(colAxis)])));
  Value *rowStart = B.CreateAdd(B.CreatePtrToInt(ti.data, i64()), B.CreateMul(pl.base, c64(eb)));
  Value *aligned = B.CreateICmpEQ(B.CreateAnd(B.CreateOr(rowStart, B.CreateMul(pl.rs, c64(eb))), c64(15)), c64(0));
  BasicBlock *stagedBB = BasicBlock::Create(C, "epi.staged", fn), *directBB = BasicBlock::Create(C, "epi.direct", fn),
             *joinBB = BasicBlock::Create(C, "epi.join", fn);
  B.CreateCondBr(B.CreateAnd(inTensor, aligned), stagedBB, directBB);
  B.SetInsertPoint(stagedBB);
  emitAll([&](const Done &dn, size_t) {
    const std::array<Value *, 2> &m = dn.bits[0];
    Value *vec = pairVector(mt, m);
    Value *off = B.CreateAdd(B.CreateMul(dn.r, c64(pitch)), B.CreateMul(dn.c, c64(eb)));
    B.CreateAlignedStore(vec, B.CreateInBoundsGEP(i8(), staging->buffer, off), Align(uint64_t(2 * eb)));
  });
  staging->sync();
  // The tile's rows back as 16-byte vectors, consecutive threads along a row.
  const int64_t rowVecs = rowBytes / 16, vecs = BM * rowVecs;
  auto *v4 = FixedVectorType::get(B.getInt32Ty(), 4);
  for (int64_t k = 0; k * threads < vecs; ++k) {
    Value *v = B.CreateAdd(tid, c64(k * threads));
    auto copy = [&] {
      Value *row = B.CreateUDiv(v, c64(rowVecs)), *cv = B.CreateURem(v, c64(rowVecs));
      Value *x = B.CreateAlignedLoad(v4, B.CreateInBoundsGEP(i8(), staging->buffer, B.CreateAdd(B.CreateMul(row, c64(pitch)), B.CreateMul(cv, c64(16)))), Align(16));
      Value *to = B.CreateAdd(B.CreateMul(B.CreateAdd(pl.base, B.CreateMul(row, pl.rs)), c64(eb)), B.CreateMul(cv, c64(16)));
      B.CreateAlignedStore(x, B.CreateInBoundsGEP(i8(), ti.data, to), Align(16));
    };
    if ((k + 1) * threads <= vecs) copy();
    else ifThen(B.CreateICmpULT(v, c64(vecs)), copy);
  }
  // The buffer is the loop's ring, which a later program of the same threads may fill again.
  staging->sync();
  B.CreateBr(joinBB);
  B.SetInsertPoint(directBB);
  emitAll(direct);
  B.CreateBr(joinBB);
  B.SetInsertPoint(joinBB);
  absorbed.insert(epi.ops.begin(), epi.ops.end());
}

} // namespace tsr::codegen::lower
