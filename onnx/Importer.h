// The importer's private interface: the builder that the operators' rules (onnx/ops/, by family)
// use to turn one ONNX node into Graph IR ops, and the table of rules (onnx/Ops.def).
#pragma once

#include "onnx/Import.h"

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace tsr::onnxio {

/// Thrown by a rule: the node uses something the importer does not support (an attribute value,
/// a dtype, a data-dependent shape). Becomes an ImportError with unsupported = true.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Thrown by a rule: the model is not valid (a missing input, a shape that does not fit).
struct BadModel : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An ONNX value during import: a Graph IR value, a tensor known at import time, or both.
/// A known tensor becomes a graph parameter (or a `constant` op when it is a scalar) the first
/// time a rule needs it as an IR value.
struct Val {
  ir::Value *v = nullptr;
  std::optional<rt::Tensor> k;
  std::string name; // the ONNX name (for parameters made of known tensors)
  /// A sequence (ops/Sequence.cpp): its elements, known in number at import; then v and k are empty.
  std::shared_ptr<const std::vector<Val>> seq;
  /// A tensor of strings (ops/Strings.cpp), always known at import; then v and k are empty.
  std::shared_ptr<const StringTensor> str;
  bool present() const { return v || k || seq || str; }
};

class Importer;

/// One node being converted: its inputs (absent optional inputs are empty Vals), attributes and
/// the number of outputs the model uses.
struct Node {
  const onnx::NodeProto &proto;
  std::vector<Val> in;
  size_t numOutputs;
  int64_t opset;

  bool has(size_t i) const { return i < in.size() && in[i].present(); }
  const onnx::AttributeProto *attr(const std::string &name) const;
  int64_t i(const std::string &name, int64_t dflt) const;
  double f(const std::string &name, double dflt) const;
  std::string s(const std::string &name, const std::string &dflt) const;
  std::optional<std::vector<int64_t>> ints(const std::string &name) const;
  std::optional<std::vector<double>> floats(const std::string &name) const;
};

using Rule = std::function<std::vector<Val>(Importer &, Node &)>;

class Importer {
public:
  Importer(ir::Module &m, ir::Graph *g, std::string baseDir) : m_(m), g_(g), root_(g), baseDir_(std::move(baseDir)) {}

  // ---- values ----
  /// The IR value of `x`, making a parameter (or a scalar constant op) of a known tensor.
  ir::Value *v(Val &x);
  /// The known tensor of an input, or Unsupported naming `what` (an input that must be constant).
  const rt::Tensor &known(const Val &x, const char *what);
  std::vector<int64_t> knownInts(const Val &x, const char *what);
  std::vector<double> knownFloats(const Val &x, const char *what);
  static Val of(ir::Value *x) { return Val{x, std::nullopt, ""}; }
  static Val ofKnown(rt::Tensor t) { return Val{nullptr, std::move(t), ""}; }

  // ---- building ops ----
  ir::Value *op(ir::OpKind k, std::vector<ir::Value *> operands, std::vector<ir::Attr> attrs = {});
  ir::Value *scalar(double value, DType dt);
  ir::Value *full(const std::vector<Dim> &shape, double value, DType dt);
  ir::Value *cast(ir::Value *x, DType dt);
  ir::Value *reshape(ir::Value *x, std::vector<Dim> shape);
  ir::Value *transpose(ir::Value *x, std::vector<int64_t> perm);
  ir::Value *broadcastTo(ir::Value *x, std::vector<Dim> shape);
  ir::Value *reduce(ir::OpKind k, ir::Value *x, std::vector<int64_t> axes, bool keepdims);
  /// x[start:stop:step] along one axis (step > 0; start and stop within the axis).
  ir::Value *sliceAxis(ir::Value *x, size_t axis, Dim start, Dim stop, int64_t step = 1);
  ir::Value *concat(std::vector<ir::Value *> xs, int64_t axis);
  ir::Value *iota(std::vector<Dim> shape, int64_t axis, DType dt);
  /// A known tensor as an IR value (a parameter; a scalar: a constant op).
  ir::Value *tensor(rt::Tensor t, const std::string &name = "");

  static const std::vector<Dim> &dims(ir::Value *x) { return x->type.dims; }
  static DType dtype(ir::Value *x) { return x->type.dtype; }
  /// The static sizes of `x`, or Unsupported when a dim is symbolic.
  static std::vector<int64_t> staticShape(ir::Value *x, const char *what);
  static size_t axis(int64_t a, size_t rank);

  /// Builds a scan op (ir/Scan.h) whose body is `step(carries, x slices)` -> (next carries, ys),
  /// written with this builder's ops as any rule: values of the enclosing graph that the step uses
  /// become the scan's consts. Returns the final carries, then the stacked ys. Tensors known at
  /// import must be made IR values (v()) before, outside the step.
  using Step = std::function<std::vector<ir::Value *>(const std::vector<ir::Value *> &carries, const std::vector<ir::Value *> &xs)>;
  std::vector<ir::Value *> scan(const std::vector<ir::Value *> &inits, const std::vector<ir::Value *> &xs, Dim length, bool reverse,
                                const Step &step);

  /// Converts a subgraph (a branch of If, the body of Loop or Scan; ops/Control.cpp) where the
  /// builder stands: its inputs bound to `inputs` by position, its nodes converted with the
  /// enclosing graphs' values in scope (ONNX's outer-scope references). Returns its outputs; the
  /// enclosing names, node and location are restored after, also when a rule throws.
  std::vector<Val> subgraph(const onnx::GraphProto &g, const std::vector<Val> &inputs, int64_t opset);

  // ---- import driving (Import.cpp) ----
  void setLoc(ir::Loc l) { loc_ = l; }
  ir::Graph *graph() { return g_; }
  ir::Module &module() { return m_; }
  const std::string &baseDir() const { return baseDir_; }
  /// Converts a whole graph (the model's, or a subgraph of If), binding its outputs' names.
  void convertNodes(const onnx::GraphProto &gp, int64_t opset);
  std::map<std::string, Val> env;
  /// The parameters made of known tensors, in order, with their values and names.
  std::vector<rt::Tensor> constants;
  std::vector<std::string> constantNames;
  std::string currentFile, currentNode, currentOp; // for locations and errors
  std::set<std::string> modelInputs, needKnown; // inputs; those a rule needed the value of
  /// The model inputs each value not known at import is computed from (by ONNX name), so that a
  /// rule needing the value (a Range's limit computed from an input) names the inputs to
  /// specialize on.
  std::map<std::string, std::set<std::string>> inputsOf;
  bool folding = false; // converting onto a scratch graph to evaluate a node at import time
  /// Loop bodies converted by unrolling so far (ops/Control.cpp): bounded, so that nested loops
  /// cannot make an import take exponential time.
  int64_t unrolled = 0;

private:
  std::vector<Val> convertNode(const onnx::NodeProto &n, int64_t opset);
  ir::Module &m_;
  ir::Graph *g_;    // where ops go: the model's graph, a scan's body, or a scratch graph when folding
  ir::Graph *root_; // where known tensors become parameters: the model's graph, or the scratch graph
  std::string baseDir_;
  ir::Loc loc_;
  std::map<std::string, ir::Value *> materialized_; // named known tensors made parameters, by name
};

// Helpers shared by the rules (the families compile as one translation unit).
using V = ir::Value *;
inline std::vector<Val> one(V x) { return {Importer::of(x)}; }
/// Input i as an IR value; BadModel when it is absent.
inline V in(Importer &I, Node &n, size_t i) {
  if (!n.has(i)) throw BadModel("the input " + std::to_string(i) + " is missing");
  return I.v(n.in[i]);
}
inline Dim D(int64_t c) { return Dim::constant(c); }
/// A scalar of `like`'s dtype.
inline V c(Importer &I, V like, double value) { return I.scalar(value, like->type.dtype); }

/// The rule of an ONNX operator (default domain), or null.
const Rule *findRule(const std::string &opType);

/// ONNX's element type -> Tessera's dtype, or Unsupported.
DType dtypeOfElem(int32_t elemType);
/// A TensorProto's data as a tensor (external data relative to `baseDir`); throws Unsupported or
/// BadModel.
rt::Tensor tensorOfProto(const onnx::TensorProto &t, const std::string &baseDir);

/// Whether the operator's rule takes tensors of strings (ops/Strings.cpp); every other rule is
/// refused a string input before it runs.
bool takesStrings(const std::string &opType);
/// Cast of a tensor of strings to a numeric dtype: each string read as a number (ops/Strings.cpp).
Val castStrings(const StringTensor &x, DType to);

/// ai.onnx.preview.training's Gradient (ops/Training.cpp).
std::vector<Val> ruleGradient(Importer &I, Node &n);

// The rules, by family (onnx/ops/*.cpp); Ops.def names them.
#define TSR_ONNX_OP(Name, Family) std::vector<Val> rule##Name(Importer &I, Node &n);
#include "onnx/Ops.def"

} // namespace tsr::onnxio
