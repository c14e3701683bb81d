// Tessera's Graph IR: the compiled form of a graph function (`@jit`) after compile-time
// evaluation. A Graph is a list of SSA ops over tensors with symbolic shapes, dtypes and numeric
// policies; every op carries the source location it came from. Op kinds are listed once in
// ir/Ops.def. The text form (printGraph / parseModule in ir/Text.h) parses back to an equal
// graph; `tsrc --emit=graph` prints it.
//
// Graphs are pure and straight-line: compile-time control flow was evaluated away by lowering,
// random keys are values, and kernel calls return the tensors they write.
#pragma once

#include "support/DType.h"
#include "support/Diagnostics.h"
#include "sema/Dim.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tsr::ir {

enum class OpKind : uint8_t {
#define TSR_OP(K, S, C) K,
#include "ir/Ops.def"
};
enum class OpClass : uint8_t { Unary, Binary, Compare, Ternary, Reduce, Special };

std::string_view opSpelling(OpKind k);
OpClass opClass(OpKind k);
std::optional<OpKind> opFromSpelling(std::string_view s);
/// The collectives between ranks (ir/Ops.def: all_reduce ... all_to_all; runtime/dist).
inline bool isCollective(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::AllGather || k == OpKind::ReduceScatter || k == OpKind::DistBroadcast ||
         k == OpKind::DistReduce || k == OpKind::AllToAll;
}

/// The type of a value: a tensor (dims, dtype, policies; 0-d for scalars) or a random key.
struct Type {
  enum class Kind : uint8_t { Tensor, Key } kind = Kind::Tensor;
  std::vector<Dim> dims;
  DType dtype = DType::F32;
  Policies policies;

  static Type tensor(std::vector<Dim> dims, DType dt, Policies p = {}) {
    Type t;
    t.dims = std::move(dims);
    t.dtype = dt;
    t.policies = p;
    return t;
  }
  static Type key() {
    Type t;
    t.kind = Kind::Key;
    return t;
  }
  bool isKey() const { return kind == Kind::Key; }
  size_t rank() const { return dims.size(); }
  bool operator==(const Type &o) const {
    return kind == o.kind && dims == o.dims && dtype == o.dtype && policies == o.policies;
  }
  bool operator!=(const Type &o) const { return !(*this == o); }
  /// `tensor<"B", 64, "D/H", bf16 @accum(f32)>` or `key`.
  std::string str() const;
};

/// A source location: an index into the module's file table (0: none), line and column.
struct Loc {
  uint32_t file = 0;
  uint32_t line = 0;
  uint32_t col = 0;
  bool valid() const { return file != 0; }
  bool operator==(const Loc &o) const = default;
};

/// An attribute's value. Dim lists hold shapes (symbolic); int lists hold axes and permutations.
struct DTypeAttr {
  DType dtype;
  Policies policies;
  bool operator==(const DTypeAttr &o) const { return dtype == o.dtype && policies == o.policies; }
};
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<Dim>, DTypeAttr>;
struct Attr {
  std::string name;
  AttrValue value;
  bool operator==(const Attr &o) const { return name == o.name && value == o.value; }
};

struct Op;
class Graph;

struct Value {
  Type type;
  Op *def = nullptr;      // null for a graph parameter
  uint32_t index = 0;     // which result of def
  std::string name;       // a parameter's name (for printing); empty otherwise
  uint32_t id = 0;        // unique in its graph
};

struct Op {
  OpKind kind;
  std::vector<Value *> operands;
  std::vector<Value *> results;
  std::vector<Attr> attrs;
  Loc loc;
  /// The body of a region op (scan; ir/Scan.h): a closed graph of its own (what it reads from
  /// the enclosing graph is an operand), printed nested in the op's text. Shared, not copied, by
  /// the op's clones (checkpoint recomputation, the executor's subgraphs), since no pass rewrites
  /// a body after the op is built. Null for every other op.
  std::shared_ptr<Graph> body;

  const AttrValue *attr(std::string_view n) const {
    for (auto &a : attrs) if (a.name == n) return &a.value;
    return nullptr;
  }
  template <typename T> const T *attrAs(std::string_view n) const {
    const AttrValue *v = attr(n);
    return v ? std::get_if<T>(v) : nullptr;
  }
  Value *result() const { return results.empty() ? nullptr : results[0]; }
};

/// Operands whose shapes do not fit an op: a matmul's inner or batch dims, a broadcast, a
/// reshape's element count. The checker reports these where it can see the shapes; a program whose
/// shapes it could not see (tensors read from a file, unannotated values) meets the mismatch first
/// here, with the shapes it runs with. That is the program's error, not the compiler's, so it
/// carries the diagnostic the checker gives for the same mistake (`kind`, `args`, E03xx) and
/// each operand's shape as messages show it (`[2, 3]`).
struct ShapeMismatch {
  DiagKind kind;
  std::vector<std::string> args;
  std::vector<std::string> shapes;
};

/// Why shape inference refused an op: a message for the engineer, and `mismatch` when what does
/// not fit is the operands' shapes (a user error; see ShapeMismatch). Any other refusal means
/// lowering or a pass built a wrong op: an internal error.
struct TypeError {
  TypeError(std::string m, std::optional<ShapeMismatch> mm = std::nullopt) : message(std::move(m)), mismatch(std::move(mm)) {}
  std::string message;
  std::optional<ShapeMismatch> mismatch;
};

/// The error of an op whose operands or attributes do not fit it: internal unless `mismatch` is
/// set (the checker rejects the user programs that would produce one whenever it sees the shapes).
struct IRError {
  std::string message;
  std::optional<ShapeMismatch> mismatch = std::nullopt;
};

class Graph {
public:
  explicit Graph(std::string name) : name(std::move(name)) {}
  std::string name;
  /// Unique in the process and never reused (an address can be, once a graph is freed): what
  /// caches of a graph's analyses key on, with the op count as a check that it was not rewritten.
  uint64_t serial = nextSerial();
  std::vector<Value *> params;
  std::vector<Op *> ops; // in execution order
  std::vector<Value *> outputs;

  Value *addParam(std::string name, Type t);
  /// Appends an op; its result type comes from shape inference (throws IRError if the operands
  /// or attributes do not fit the op).
  Value *add(OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs = {}, Loc loc = {});
  /// Appends an op with explicit result types (kernel calls), checking nothing.
  Op *addWithTypes(OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs, std::vector<Type> results, Loc loc = {});
  /// Gives `op` (an op of this graph) one more result of type `t`, keeping its others: a scan's
  /// residuals, which its vjp rule adds (ir/autodiff/ScanRules.cpp).
  Value *addResult(Op *op, Type t);
  /// Removes ops for which `dead` is true; they must have no remaining uses.
  void eraseOps(const std::vector<bool> &dead);
  /// Renumbers values 0.. in order (parameters first).
  void renumber();
  size_t opIndex(const Op *op) const;

private:
  static uint64_t nextSerial();
  std::deque<std::unique_ptr<Op>> opStore_;
  std::deque<std::unique_ptr<Value>> valueStore_;
  uint32_t nextId_ = 0;
};

/// Graphs of one compilation, with the file table their locations index.
struct Module {
  std::vector<std::unique_ptr<Graph>> graphs;
  std::vector<std::string> files; // files[0] is location file 1
  uint32_t fileIndex(const std::string &path);
  Graph *find(std::string_view name) const;
};

/// The result types of an op, or why it does not fit (shape inference; ir/ShapeInference.cpp).
std::variant<std::vector<Type>, TypeError> inferTypes(OpKind kind, const std::vector<const Type *> &operands,
                                                      const std::vector<Attr> &attrs);

} // namespace tsr::ir
