// Models that a program loads at compile time (spec §15: `onnx.load(path)`). The checker reads a
// model's signature through this interface, so that calls of the loaded function are shape- and
// dtype-checked like calls of any graph function; sema/ cannot depend on the importer (onnx/
// depends on sema/ and ir/, ctest layering), so the tools that link the importer (tsrc, tsr)
// register an implementation at start-up (onnx/Language.h, onnxio::installLanguageHooks). Graph
// lowering reads the model's Graph IR through its own half of the interface (ir/ExternalModels.h).
#pragma once

#include "sema/Types.h"

#include <string>
#include <variant>
#include <vector>

namespace tsr::sema {

/// What a loaded model looks like to a program: its inputs (the model's non-initializer inputs,
/// in order, with names fit to be parameter names), its outputs, and the tensors it carries
/// (initializers: `split_params=True`'s dict, by their names in the model).
struct ModelSignature {
  std::vector<std::pair<std::string, TypeRef>> inputs;
  std::vector<TypeRef> outputs;
  std::vector<std::pair<std::string, TypeRef>> params;
  std::vector<std::string> symbols; // symbolic dims of the inputs, in order of appearance
};

/// Why a model cannot be loaded: `unsupported` when it is valid but uses an operator, attribute,
/// dtype or opset the importer does not support (E0135), else it cannot be read (E0134).
/// `message` names the node, its op type and the opset where one is at fault.
struct ModelLoadError {
  std::string message;
  bool unsupported = false;
};

class ModelImporter {
public:
  virtual ~ModelImporter() = default;
  /// The signature of the model at `path` (an absolute path); imports it on first use.
  virtual std::variant<ModelSignature, ModelLoadError> signature(const std::string &path) = 0;
};

/// The process's importer; null when the tool links none (the checker then refuses onnx.load).
ModelImporter *modelImporter();
void setModelImporter(ModelImporter *importer);

/// A model path as written in `onnx.load("...")`, resolved like an import: relative to the folder
/// of the file that names it (`fromFile`); an absolute path stays as it is.
std::string resolveModelPath(const std::string &fromFile, const std::string &written);

} // namespace tsr::sema
