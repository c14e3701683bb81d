// The Graph IR of models that a program loads at compile time (spec 15, `onnx.load`): graph
// lowering inlines a model's graph where the program calls it (ir/lower/LowerExternal.cpp). The
// checker's half of the interface is sema/ExternalModels.h; the importer implements both and the
// tools that link it register it (onnx/Language.h).
//
// A model's graph has the model's inputs as its first parameters and the tensors it carries
// (initializers, Constant nodes' tensors) after them. Called through `onnx.load(path,
// split_params=True)`'s `apply(params, x)`, those tensors are the program's values. Called
// through `onnx.load(path)`, they are captured: the caller's graph gets a parameter named
// capturedName(model, i) for each, and whoever runs the graph passes the model's tensor for it
// (capturedConstant), after the parameters of the graph's own arguments.
#pragma once

#include "ir/IR.h"
#include "runtime/Tensor.h"
#include "sema/ExternalModels.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::ir {

struct ModelGraph {
  const Graph *graph = nullptr;
  const Module *module = nullptr;      // the module that owns `graph` (to print it)
  size_t numInputs = 0;                // graph->params[0, numInputs): the model's inputs
  std::vector<std::string> inputNames; // the model's names of those inputs
  std::vector<rt::Tensor> constants;   // the values of graph->params[numInputs, ...)
  std::vector<std::string> constantNames;
  size_t index = 0;                    // the model's number in this process (captured names)
};

class ModelGraphSource {
public:
  virtual ~ModelGraphSource() = default;
  /// The imported graph of the model at `path` (absolute, as the checker resolved it); null when
  /// it cannot be imported (the checker has reported why).
  virtual const ModelGraph *graph(const std::string &path) = 0;
  /// The model of number `index`, or null.
  virtual const ModelGraph *byIndex(size_t index) = 0;
};

ModelGraphSource *modelGraphSource();
void setModelGraphSource(ModelGraphSource *source);

/// What the checker sees of a model (sema/ExternalModels.h), read off its graph: the inputs'
/// names and types, the outputs' types, the tensors' names and types, the inputs' symbols. The
/// importer and a bundle's runner (which carries the graph, not the file) answer with it.
sema::ModelSignature signatureOf(const ModelGraph &m);

/// Writes a graph as a model file (`onnx.save` in host code; the importer's library implements
/// it: onnx/Export.h). Returns "" or why the graph cannot be written (naming the op at fault).
class ModelWriter {
public:
  virtual ~ModelWriter() = default;
  virtual std::string write(const Module &m, const Graph &g, const std::string &path) = 0;
};
ModelWriter *modelWriter();
void setModelWriter(ModelWriter *writer);

/// The name of the parameter that holds captured tensor `i` of model `index`: `onnx<index>_c<i>`
/// with a prefix no parameter of a program has ("__").
std::string capturedName(size_t index, size_t i);
/// The tensor a captured parameter stands for, or nullopt when `paramName` names none.
std::optional<rt::Tensor> capturedConstant(std::string_view paramName);

/// Appends to `inputs` the tensors of `g`'s captured parameters, which follow the parameters
/// that `inputs` already gives (the graph's arguments). Returns false when a parameter beyond
/// them is not a captured one.
bool appendCaptured(const Graph &g, std::vector<rt::Tensor> &inputs);

} // namespace tsr::ir
