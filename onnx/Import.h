// The ONNX importer: reads an ONNX model (a ModelProto, through Debian's libonnx and its protobuf
// definitions; no hand-written protobuf reader) and builds one Graph IR graph of it, the form
// `onnx.load(path)` gives a program (spec §15) and `tsrc model.onnx --emit=graph` prints.
//
// The graph's parameters are the model's non-initializer inputs, in order, then the tensors the
// model carries (its initializers and the tensor values of Constant nodes that are used as data),
// in the order the graph first uses them; an imported model is applied by passing its inputs and
// these tensors (`ImportedModel::constants`), which is `onnx.load(path, split_params=True)`'s
// (apply, params) form. Dims come from the inputs' value infos: `dim_value` is a size, `dim_param`
// a symbolic dim of that name, a missing dim a symbol named after the input and the axis.
//
// ONNX operators become compositions of Graph IR ops (onnx/Ops.def lists every operator the
// importer knows, once, with the file of its rule); values that ONNX computes from shapes and
// constants (the shape arguments of Reshape, Slice, Pad, ...) are evaluated at import time on the
// reference evaluator (ir/eval), so the graph holds only the model's tensor work. Opsets 7 to 17 of
// the default domain are read as they are; a model of an older opset is first converted to
// opset 17 by ONNX's own version converter. Tensors stored as external data are read from files
// beside the model.
//
// Errors never escape as exceptions: importModel returns an ImportError naming the file and,
// where one is at fault, the node's name, its op type and the model's opset.
#pragma once

#include "ir/IR.h"
#include "runtime/Tensor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tsr::onnxio {

/// The newest opset of the default domain the importer reads (ONNX 1.12's), and the oldest it
/// reads without ONNX's version converter.
constexpr int64_t kMaxOpset = 17;
constexpr int64_t kMinOpset = 7;

/// A tensor of strings (ONNX's STRING element type). Tessera has no string dtype: string tensors
/// exist only while a model is imported (ops/Strings.cpp), given as known inputs and computed at
/// import time, like sequences.
struct StringTensor {
  std::vector<int64_t> shape;
  std::vector<std::string> data; // row-major
};

struct ImportedModel {
  ir::Graph *graph = nullptr;          // owned by the module passed to importModel
  size_t numInputs = 0;                // graph->params[0, numInputs) are the model's inputs
  std::vector<std::string> inputNames; // the model's names of those inputs
  std::vector<size_t> inputIndices;    // and their positions among the model's non-initializer inputs
  std::vector<std::string> outputNames;
  /// Per output (as outputNames): a string output, known at import time, which is not among the
  /// graph's outputs (Graph IR has no string dtype); graph->outputs are the other outputs, in order.
  /// Only with ImportOptions::knownStrings.
  std::vector<std::optional<StringTensor>> stringOutputs;
  /// The values of graph->params[numInputs, ...), in order, and their names in the model.
  std::vector<rt::Tensor> constants;
  std::vector<std::string> constantNames;
  int64_t opset = 0;                   // the model's default-domain opset as read (before conversion)
};

/// Why a model could not be imported. `unsupported`: the model is valid ONNX but uses an operator,
/// attribute value, dtype or opset the importer does not support (the conformance runner counts
/// these apart from failures).
struct ImportError {
  std::string file;
  std::string node;     // the node's name ("" when the node has none or no node is at fault)
  std::string opType;   // "" when no node is at fault
  int64_t opset = 0;    // 0 when unknown (an unreadable file)
  std::string message;
  bool unsupported = false;
  /// The model's inputs whose values a rule needed at import time (a shape, axes, pads): the
  /// model imports once they are given (ImportOptions::knownInputs).
  std::vector<std::string> needKnown;
  /// The model's non-initializer inputs in order (empty when the model could not be read).
  std::vector<std::string> modelInputs;
  /// "FILE: node NAME (OP, opset N): MESSAGE", with the parts that apply.
  std::string str() const;
};

struct ImportOptions {
  /// The graph's name in the module.
  std::string graphName = "model";
  /// Inputs given values at import time (by the model's name): they are not parameters of the
  /// graph, and the rules see their values, as they see initializers'. This specializes a model
  /// whose inputs give shapes (Reshape's shape, Slice's starts, ...) to those values.
  std::map<std::string, rt::Tensor> knownInputs;
  /// String inputs given at import time (the only form a string input can take); a model that has
  /// a string input not given here is refused, naming it in ImportError::needKnown.
  std::map<std::string, StringTensor> knownStrings;
};

/// Reads the model at `path` and adds its graph to `module`.
std::variant<ImportedModel, ImportError> importModel(const std::string &path, ir::Module &module,
                                                     const ImportOptions &options = {});
/// The same for a model's bytes; `path` names it in errors and locations, and external data is
/// read relative to its folder.
std::variant<ImportedModel, ImportError> importModelBytes(const std::string &bytes, const std::string &path, ir::Module &module,
                                                          const ImportOptions &options = {});

/// Reads a serialized TensorProto (the `input_N.pb` / `output_N.pb` files of ONNX's backend
/// test data). Returns the tensor or why it cannot be read (a dtype without a Tessera dtype:
/// unsupported = true).
struct TensorReadError {
  std::string message;
  bool unsupported = false;
};
std::variant<rt::Tensor, TensorReadError> readTensorFile(const std::string &path);
/// The same for a tensor of strings; a TensorReadError when the file holds another element type.
std::variant<StringTensor, TensorReadError> readStringTensorFile(const std::string &path);

} // namespace tsr::onnxio
