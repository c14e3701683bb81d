// Which tile programs keep every tile in registers, and in which layout (an analysis: it
// changes nothing; lower/RegisterTiles.cpp lowers by it).
//
// The general lowering (TileToLLVM.h) keeps a GPU program's tiles in shared memory: every op is
// a loop over a buffer split over the CTA's threads, between two barriers. A normalization then
// passes its row through shared memory about a dozen times. Most graph programs (elementwise
// steps, reduction stages, row steps, copies) are made of tiles of one 2-d shape [BR, N] and of
// its row and column slices, which a *blocked layout* spreads over the threads so that each op
// is a few instructions on registers that the thread owns (Triton's BlockedLayout and
// SliceLayout, triton/lib/Dialect/TritonGPU/IR/Dialect.cpp; CUTLASS's thread-value layouts):
//
//   - each thread holds vectors of `vec` consecutive columns (16 bytes of the narrowest tensor
//     dtype, so that loads and stores are ld/st.global.v4);
//   - `threadsPerRow` consecutive threads share a row, thread l of them taking vectors l,
//     l + threadsPerRow, ... (`colVectors` of them); consecutive threads touch consecutive
//     addresses;
//   - the CTA covers `rowsPerSweep` = threads / threadsPerRow rows at once, and a thread holds
//     rows g, g + rowsPerSweep, ... (`rowsPerThread` of them), g = tid / threadsPerRow.
//
// A value of the program's shape is Full (rowsPerThread x colVectors x vec registers); a value of
// shape [BR, 1] or [BR] is Rows (one register per row the thread holds; the threads of a row hold
// copies), of shape [1, N] or [N] Cols (one register per column the thread holds), and of shape
// [1, 1] or [1] Uniform (one register, the same in every thread). Reductions along the row are a
// thread's own registers, then butterfly shuffles among the threads of the row, then shared
// memory across warps; along the column the same over the row groups. Their results are in every
// thread that holds the row (or column), so broadcasts back are free.
//
// A program qualifies when each of its tiles has rank at most 2 and one of those four shapes,
// its ops are elementwise, constants, arange, broadcasts, reshapes between equal slots,
// reductions (not argmax/argmin), boxes (not atomic) and `for` loops, and a thread holds at most
// kMaxSlots registers of a Full value. Anything else (dot, gathers, transposes, `if`, argmax)
// keeps the general lowering.
#pragma once

#include "ir/tile/TileIR.h"

#include <cstdint>
#include <optional>
#include <unordered_map>

namespace tsr::codegen {

struct RegisterLayout {
  int64_t rows = 1, cols = 1;        // the program's tile shape [BR, N] ([1, N] for a 1-d program)
  int rank = 2;                      // the rank of the program's tiles (1 or 2)
  int threads = 1;                   // threads of one program
  int64_t vec = 1;                   // consecutive columns per vector
  int64_t threadsPerRow = 1;         // a power of two dividing threads
  int64_t rowsPerSweep = 1;          // threads / threadsPerRow
  int64_t rowsPerThread = 1;         // ceil(rows / rowsPerSweep)
  int64_t colVectors = 1;            // ceil(cols / vec / threadsPerRow)
  /// Whether every register a thread holds is an element of the tile: otherwise a row index or
  /// a column vector can fall outside it (tested at run time where it matters).
  bool exactRows() const { return rowsPerSweep * rowsPerThread == rows; }
  bool exactCols() const { return threadsPerRow * colVectors * vec == cols; }
  int64_t fullSlots() const { return rowsPerThread * colVectors * vec; }
};

enum class Frag : uint8_t { Full, Rows, Cols, Uniform };

struct RegisterPlan {
  RegisterLayout layout;
  /// The fragment kind of every tile value (not scalars or tensors).
  std::unordered_map<const tile::Value *, Frag> frag;
  /// Registers per thread of a value of kind `f`.
  int64_t slots(Frag f) const {
    switch (f) {
    case Frag::Full: return layout.fullSlots();
    case Frag::Rows: return layout.rowsPerThread;
    case Frag::Cols: return layout.colVectors * layout.vec;
    case Frag::Uniform: return 1;
    }
    return 1;
  }
};

/// The most registers a thread may hold of one Full value (a row of 8192 over 128 threads).
constexpr int64_t kMaxSlots = 64;

/// The plan for `f` run by `threads` threads, or nothing when `f` does not qualify (or a thread
/// would hold more than `maxSlots` registers of a Full value).
std::optional<RegisterPlan> planRegisterTiles(const tile::Function &f, int threads, int64_t maxSlots = kMaxSlots);

} // namespace tsr::codegen
