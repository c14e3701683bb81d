// Tessera's Tile IR: one program of a grid, over tiles of static shape. Both hand-written
// `@kernel`s (ir/lower/LowerKernel.cpp) and the fusion groups of Graph IR (ir/schedule/) lower
// into it, and the code generators (codegen/) turn it into LLVM IR for the host CPU or NVPTX, so
// there is one path from tiles to machine code whatever the target. Op kinds are listed once in
// ir/tile/TileOps.def; the text form is in ir/tile/TileText.h.
//
// Model (Triton's, with boxes as first-class memory ops):
// - A Function runs once per point of a grid of up to three axes (program_id / num_programs).
// - Parameters are tensors (global memory: a dtype and a rank; sizes and strides, in elements,
//   are run-time values read with `dim` / `stride`) or scalars (rank-0 tiles).
// - Every other value is a tile: a static shape (rank 0 for scalars) and a dtype. Elementwise
//   ops take operands of one shape and dtype; `broadcast`, `cast` and friends are explicit.
// - Memory is read and written through boxes (`load_box`: a rectangle of a tensor at run-time
//   starts, masked at the tensor's bounds — the language's views `X[r0:r0+BM, c0:c0+BN]`) or
//   through element offsets (`load`/`store` with an i64 offset tile and a mask, for gathers).
// - Control flow is structured: `for` with loop-carried values and `if`, each region ending in
//   `yield`. Values are SSA; a region sees the values defined before its op.
#pragma once

#include "ir/IR.h"
#include "support/DType.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tsr::tile {

using ir::Attr;
using ir::AttrValue;
using ir::Loc;

enum class OpKind : uint8_t {
#define TILE_OP(K, S, C) K,
#include "ir/tile/TileOps.def"
};
enum class OpClass : uint8_t { Unary, Binary, Compare, Select, Reduce, Special };

std::string_view opSpelling(OpKind k);
OpClass opClass(OpKind k);
std::optional<OpKind> opFromSpelling(std::string_view s);
inline bool isElementwise(OpKind k) {
  OpClass c = opClass(k);
  return c == OpClass::Unary || c == OpClass::Binary || c == OpClass::Compare || c == OpClass::Select ||
         k == OpKind::Cast;
}

/// A tile (static shape; rank 0 is a scalar) or a tensor parameter (global memory of a rank).
struct Type {
  enum class Kind : uint8_t { Tile, Tensor } kind = Kind::Tile;
  DType dtype = DType::F32;
  std::vector<int64_t> shape; // a tile's
  uint32_t rank = 0;          // a tensor's

  static Type tile(std::vector<int64_t> shape, DType dt) {
    Type t;
    t.shape = std::move(shape);
    t.dtype = dt;
    return t;
  }
  static Type scalar(DType dt) { return tile({}, dt); }
  static Type tensor(uint32_t rank, DType dt) {
    Type t;
    t.kind = Kind::Tensor;
    t.rank = rank;
    t.dtype = dt;
    return t;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isScalar() const { return kind == Kind::Tile && shape.empty(); }
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  bool operator==(const Type &o) const { return kind == o.kind && dtype == o.dtype && shape == o.shape && rank == o.rank; }
  bool operator!=(const Type &o) const { return !(*this == o); }
  /// `tile<64x32xf32>`, `f32` (a scalar) or `tensor<2, bf16>`.
  std::string str() const;
};

struct Op;
struct Block;

struct Value {
  Type type;
  Op *def = nullptr;      // null for a function parameter or a block argument
  Block *owner = nullptr; // the block whose argument this is (null otherwise)
  uint32_t index = 0;     // which result of def, or which argument of owner
  std::string name;       // a parameter's name (for printing); empty otherwise
  uint32_t id = 0;        // unique in its function
};

/// A list of ops with arguments: a function's body, a loop's body, a branch of an if.
struct Block {
  std::vector<Value *> args;
  std::vector<Op *> ops;
  Op *parent = nullptr; // the op whose region this is (null for a function's body)
};

struct Op {
  OpKind kind;
  std::vector<Value *> operands;
  std::vector<Value *> results;
  std::vector<Attr> attrs;
  std::vector<Block *> regions;
  Loc loc;

  const AttrValue *attr(std::string_view n) const {
    for (auto &a : attrs) if (a.name == n) return &a.value;
    return nullptr;
  }
  template <typename T> const T *attrAs(std::string_view n) const {
    const AttrValue *v = attr(n);
    return v ? std::get_if<T>(v) : nullptr;
  }
  int64_t intAttr(std::string_view n, int64_t fallback = 0) const {
    const int64_t *v = attrAs<int64_t>(n);
    return v ? *v : fallback;
  }
  Value *result() const { return results.empty() ? nullptr : results[0]; }
};

/// An op whose operands or attributes do not fit it. An internal error: lowering produces only
/// well-formed Tile IR for programs the checker accepts.
struct TileError {
  std::string message;
};

/// One tile program. `config` holds the compile-time configuration it was specialized for
/// (BM, BN, warps, ...), printed with the function and part of its identity.
class Function {
public:
  explicit Function(std::string name);
  std::string name;
  std::vector<Value *> params;
  std::vector<Attr> config;
  uint32_t gridRank = 1; // how many grid axes the program reads (1..3)
  Loc loc;
  Block *body;

  Value *addParam(std::string name, Type t);
  Block *newBlock(Op *parent);
  Value *addBlockArg(Block *b, Type t);
  /// Appends an op to `b`; result types come from inferTypes (throws TileError when the
  /// operands or attributes do not fit). Not for `for`/`if`, whose results are their yields'.
  Value *add(Block *b, OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs = {}, Loc loc = {});
  /// Appends an op with explicit result types (for, if, yield, stores), checking nothing.
  Op *addWithTypes(Block *b, OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs,
                   std::vector<Type> results, Loc loc = {});
  /// Which tensor parameters the program writes (store, store_box, atomic_add*), in order.
  std::vector<size_t> writtenParams() const;
  /// Renumbers values 0.. in definition order (parameters first).
  void renumber();

private:
  std::deque<std::unique_ptr<Op>> opStore_;
  std::deque<std::unique_ptr<Value>> valueStore_;
  std::deque<std::unique_ptr<Block>> blockStore_;
  uint32_t nextId_ = 0;
};

/// Tile functions of one compilation, with the file table their locations index (as
/// ir::Module's: files[0] is location file 1).
struct Module {
  std::vector<std::unique_ptr<Function>> functions;
  std::vector<std::string> files;
  uint32_t fileIndex(const std::string &path);
  Function *find(std::string_view name) const;
};

/// The result types of a non-control-flow op, or an error message.
std::variant<std::vector<Type>, std::string> inferTypes(OpKind kind, const std::vector<const Type *> &operands,
                                                        const std::vector<Attr> &attrs);

/// Checks a function's structure: operands defined before use and visible from the use's
/// block, region shapes of for/if, yields matching, types as inferTypes gives them. Returns the
/// problems found ("%7 = add: ..."), empty when well formed.
std::vector<std::string> verify(const Function &f);

} // namespace tsr::tile
