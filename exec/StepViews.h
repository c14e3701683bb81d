// The executor's run-time values and program requests, private to exec/CompiledExecutor*.cpp:
// a value as a view (offset, shape, strides) over a buffer, the views' algebra (NumPy's
// broadcasting and no-copy reshapes), kernel arguments from views, and what a kernel step asks
// the program cache for. exec/CompiledExecutorImpl.h keeps the cache; CompiledExecutor.cpp
// walks a schedule's steps with them.
#pragma once

#include "exec/CompiledExecutor.h"
#include "exec/StepBackend.h"
#include "ir/IR.h"
#include "ir/schedule/LowerGroups.h"
#include "ir/tile/TileText.h"
#include "runtime/Tensor.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tsr::exec::steps {

using ir::Op;
using rt::Tensor;
using Shape = std::vector<int64_t>;
namespace sched = ir::schedule;


// A value at run time: elements offset + sum(i_d * strides[d]) of buf's storage.
struct View {
  Tensor buf;
  int64_t offset = 0;
  Shape shape, strides;
};

inline Shape rowMajor(const Shape &s) {
  Shape st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

inline int64_t numelOf(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline View whole(const Tensor &t) { return View{t, 0, t.shape(), rowMajor(t.shape())}; }

inline bool contiguous(const View &v) {
  if (numelOf(v.shape) == 0) return true;
  int64_t want = 1;
  for (size_t d = v.shape.size(); d-- > 0;) {
    if (v.shape[d] == 1) continue;
    if (v.strides[d] != want) return false;
    want *= v.shape[d];
  }
  return true;
}

// The strides of view `v` reshaped to `to` (same element count) without a copy, where there are
// such: each run of `v`'s axes that is contiguous in memory (stride[d-1] = extent[d] *
// stride[d]) splits or merges into axes of `to` of the same element count. A reshape that merges
// axes across runs (the heads of a transposed [B, S, H, D] into B * H) has none. The algorithm of
// NumPy's _attempt_nocopy_reshape and PyTorch's at::detail::computeStride.
inline std::optional<Shape> reshapeStrides(const View &v, const Shape &to) {
  if (numelOf(v.shape) == 0 || v.shape.empty()) return rowMajor(to);
  Shape strides(to.size(), 0);
  int64_t viewD = int64_t(to.size()) - 1;
  int64_t base = v.strides.back(), tensorNumel = 1, viewNumel = 1;
  for (int64_t d = int64_t(v.shape.size()) - 1; d >= 0; --d) {
    tensorNumel *= v.shape[size_t(d)];
    if (d == 0 || (v.shape[size_t(d - 1)] != 1 && v.strides[size_t(d - 1)] != tensorNumel * base)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || to[size_t(viewD)] == 1)) {
        strides[size_t(viewD)] = viewNumel * base;
        viewNumel *= to[size_t(viewD)];
        --viewD;
      }
      if (viewNumel != tensorNumel) return std::nullopt;
      if (d > 0) {
        base = v.strides[size_t(d - 1)];
        tensorNumel = viewNumel = 1;
      }
    }
  }
  if (viewD != -1) return std::nullopt;
  return strides;
}

// NumPy broadcasting of a view to `to` (aligned on the right; 1s stretch with stride 0).
inline View broadcastView(const View &v, const Shape &to) {
  View r{v.buf, v.offset, to, Shape(to.size(), 0)};
  const size_t lead = to.size() - v.shape.size();
  for (size_t i = 0; i < v.shape.size(); ++i)
    if (v.shape[i] == to[lead + i] && v.shape[i] != 1) r.strides[lead + i] = v.strides[i];
  return r;
}

// The KernelArg of view `v` whose storage the program addresses at `base` (StepBackend::address).
inline rt::KernelArg argOf(const View &v, char *base) {
  rt::KernelArg a;
  if (v.shape.size() > size_t(rt::kMaxRank)) throw std::runtime_error("a tensor of rank > 8 for compiled code");
  a.data = base + v.offset * int64_t(v.buf.itemsize());
  for (size_t d = 0; d < v.shape.size(); ++d) {
    a.shape[d] = v.shape[d];
    a.strides[d] = v.strides[d];
  }
  return a;
}

inline rt::KernelArg scalarArg(int64_t i) {
  rt::KernelArg a;
  a.i = i;
  return a;
}

struct OpFailure {
  std::string message;
  bool programError = false; // the program's own error (exit 1), not one of its compilation
};

struct Compiled {
  std::shared_ptr<const BackendProgram> code;
  std::array<sched::GridAxis, 3> grid;
  std::string name; // the tile function's
};

// A program that a step needs: its key in Impl::programs, its lowering, and the element-ops of
// one launch (CompileHints).
struct ProgramRequest {
  std::string key;
  std::function<sched::Kernel()> lower;
  int64_t work = -1;
};

// The stages of a reduction of an operand shaped S0: one per reduced axis, innermost first, each
// over its iteration shape `iter` into `out` (`iter` with the axis 1). No reduced axis: one stage
// over an extra leading axis of extent 1 (a rounding into the result dtype).
struct ReduceStage {
  int axis;
  Shape iter, out;
  bool last;
};

inline std::vector<ReduceStage> reduceStages(const Op &op, const Shape &S0) {
  const size_t rank = S0.size();
  std::vector<bool> reduced(rank, false);
  if (const auto *axes = op.attrAs<std::vector<int64_t>>("axes")) {
    for (int64_t a : *axes) {
      if (a < -int64_t(rank) || a >= int64_t(rank)) throw OpFailure{"axis " + std::to_string(a) + " is out of range"};
      reduced[size_t(a < 0 ? a + int64_t(rank) : a)] = true;
    }
  } else {
    reduced.assign(rank, true);
  }
  std::vector<int> order;
  for (size_t d = rank; d-- > 0;) if (reduced[d]) order.push_back(int(d));
  Shape S = S0;
  if (order.empty()) { S.insert(S.begin(), 1); order.push_back(0); }
  std::vector<ReduceStage> stages;
  for (size_t s = 0; s < order.size(); ++s) {
    Shape out = S;
    out[size_t(order[s])] = 1;
    stages.push_back({order[s], S, out, s + 1 == order.size()});
    S = out;
  }
  return stages;
}

// The shapes of a matmul of operands shaped `as` and `bs` into R: a vector operand gets a unit
// axis (a row for a, a column for b), absent from R.
struct MatMulDims {
  bool av = false, bv = false;
  int64_t M = 0, K = 0, N = 0;
  Shape batch, full; // full: [batch.., M, N]
};

inline MatMulDims matmulDims(Shape as, Shape bs, const Shape &R) {
  if (as.empty() || bs.empty()) throw OpFailure{"matmul of a 0-d tensor"};
  MatMulDims d;
  d.av = as.size() == 1;
  d.bv = bs.size() == 1;
  if (d.av) as.insert(as.begin(), 1);
  if (d.bv) bs.push_back(1);
  d.M = as[as.size() - 2];
  d.K = as.back();
  d.N = bs.back();
  if (bs[bs.size() - 2] != d.K) throw OpFailure{"the inner dims differ"};
  const size_t vectors = (d.av ? 0 : 1) + (d.bv ? 0 : 1);
  if (R.size() < vectors) throw OpFailure{"the result's rank does not fit the operands'"};
  d.batch.assign(R.begin(), R.end() - ptrdiff_t(vectors));
  d.full = d.batch;
  d.full.push_back(d.M);
  d.full.push_back(d.N);
  return d;
}

inline std::array<int64_t, 3> gridOf(const std::array<sched::GridAxis, 3> &g, const Shape &s) {
  std::array<int64_t, 3> r{1, 1, 1};
  for (size_t i = 0; i < 3; ++i) {
    if (g[i].axes.empty()) continue;
    int64_t p = 1;
    for (int a : g[i].axes) p *= s[size_t(a)];
    r[i] = (p + g[i].block - 1) / g[i].block;
  }
  return r;
}

// Throws tile::TileError when a lowered program is malformed (a bug of lowering).
inline void checkLowered(const sched::Kernel &k) {
  // TSR_DUMP_TILE=1 prints every program as it is compiled (for debugging lowering).
  if (const char *dump = std::getenv("TSR_DUMP_TILE"); dump && *dump == '1') std::cerr << tile::toString(*k.fn) << "\n";
  auto problems = tile::verify(*k.fn);
  if (!problems.empty()) throw tile::TileError{"the tile program `" + k.fn->name + "` is malformed: " + problems[0]};
}

inline Compiled compile(StepBackend &backend, sched::Kernel k, int64_t work) {
  checkLowered(k);
  return Compiled{backend.compile(*k.fn, CompileHints{work}), k.grid, k.fn->name};
}

inline std::string shapeKey(const Shape &s) {
  std::string k = "(";
  for (int64_t d : s) k += std::to_string(d) + ",";
  return k + ")";
}

} // namespace tsr::exec::steps
