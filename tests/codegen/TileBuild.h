// Small helpers to build Tile IR functions by hand for the code generator's tests and benches.
#pragma once

#include "codegen/cpu/CpuKernel.h"
#include "ir/tile/TileIR.h"
#include "runtime/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tsr::cgtest {

using tile::Block;
using tile::Function;
using tile::OpKind;
using tile::Type;
using tile::Value;

inline ir::Attr A(std::string n, ir::AttrValue v) { return {std::move(n), std::move(v)}; }
inline ir::DTypeAttr DT(DType d, bool sat = false) {
  ir::DTypeAttr a{d, {}};
  a.policies.saturate = sat;
  return a;
}
inline std::vector<int64_t> S(std::initializer_list<int64_t> s) { return s; }

/// A builder bound to one block.
struct TB {
  Function &f;
  Block *b;
  Value *op(OpKind k, std::vector<Value *> xs, std::vector<ir::Attr> attrs = {}) { return f.add(b, k, std::move(xs), std::move(attrs)); }
  Value *i64(int64_t v) { return op(OpKind::Constant, {}, {A("value", v), A("dtype", DT(DType::I64))}); }
  Value *cst(double v, DType d, std::vector<int64_t> shape = {}) {
    return op(OpKind::Constant, {}, {A("value", v), A("shape", shape), A("dtype", DT(d))});
  }
  Value *pid(int axis) { return op(OpKind::ProgramId, {}, {A("axis", int64_t(axis))}); }
  Value *mul(Value *a, Value *c) { return op(OpKind::Mul, {a, c}); }
  Value *add(Value *a, Value *c) { return op(OpKind::Add, {a, c}); }
  Value *loadBox(Value *t, std::vector<Value *> starts, std::vector<int64_t> box, Value *mask = nullptr, double other = 0) {
    std::vector<Value *> ops{t};
    ops.insert(ops.end(), starts.begin(), starts.end());
    std::vector<ir::Attr> at{A("box", box), A("other", other)};
    if (mask) { ops.push_back(mask); at.push_back(A("masked", true)); }
    return op(OpKind::LoadBox, ops, at);
  }
  void storeBox(Value *t, std::vector<Value *> starts, std::vector<int64_t> box, Value *v, Value *mask = nullptr,
                OpKind k = OpKind::StoreBox) {
    std::vector<Value *> ops{t};
    ops.insert(ops.end(), starts.begin(), starts.end());
    ops.push_back(v);
    std::vector<ir::Attr> at{A("box", box)};
    if (mask) { ops.push_back(mask); at.push_back(A("masked", true)); }
    f.addWithTypes(b, k, ops, at, {});
  }
};

/// A KernelArg viewing a contiguous tensor.
inline codegen::KernelArg arg(rt::Tensor &t) {
  codegen::KernelArg a;
  a.data = t.data();
  auto st = t.strides();
  for (size_t i = 0; i < t.shape().size(); ++i) {
    a.shape[i] = t.shape()[i];
    a.strides[i] = st[i];
  }
  return a;
}
inline codegen::KernelArg scalarArg(double f, int64_t i = 0) {
  codegen::KernelArg a;
  a.f = f;
  a.i = i;
  return a;
}

/// C[M,N] = A[M,K] @ B[K,N] over tiles of BM x BN, stepping K by BK; the grid is
/// (cdiv(N, BN), cdiv(M, BM)). A and B of dtype `in`, accumulation in f32, C of dtype `out`.
/// With `dotOnly`, the tiles are loaded once before the loop (a benchmark of `dot` alone).
inline void buildGemm(Function &f, int64_t BM, int64_t BN, int64_t BK, DType in = DType::F32, DType out = DType::F32,
                      bool dotOnly = false) {
  Value *a = f.addParam("a", Type::tensor(2, in));
  Value *bt = f.addParam("b", Type::tensor(2, in));
  Value *c = f.addParam("c", Type::tensor(2, out));
  f.gridRank = 2;
  TB t{f, f.body};
  Value *col = t.mul(t.pid(0), t.i64(BN));
  Value *row = t.mul(t.pid(1), t.i64(BM));
  Value *K = t.op(OpKind::TensorDim, {a}, {A("axis", int64_t(1))});
  Value *acc0 = t.cst(0.0, DType::F32, {BM, BN});
  Value *ta = nullptr, *tb = nullptr;
  if (dotOnly) {
    ta = t.loadBox(a, {row, t.i64(0)}, {BM, BK});
    tb = t.loadBox(bt, {t.i64(0), col}, {BK, BN});
  }
  tile::Op *loop = f.addWithTypes(f.body, OpKind::For, {t.i64(0), K, t.i64(BK), acc0}, {}, {acc0->type});
  Block *body = f.newBlock(loop);
  Value *k = f.addBlockArg(body, Type::scalar(DType::I64));
  Value *acc = f.addBlockArg(body, acc0->type);
  TB l{f, body};
  if (!dotOnly) {
    ta = l.loadBox(a, {row, k}, {BM, BK});
    tb = l.loadBox(bt, {k, col}, {BK, BN});
  }
  Value *next = l.op(OpKind::Dot, {ta, tb, acc});
  f.addWithTypes(body, OpKind::Yield, {next}, {}, {});
  Value *res = loop->results[0];
  if (out != DType::F32) res = t.op(OpKind::Cast, {res}, {A("dtype", DT(out))});
  t.storeBox(c, {row, col}, {BM, BN}, res);
}

} // namespace tsr::cgtest
