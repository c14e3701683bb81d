// ONNX in the language (spec 15): the importer as the checker's and graph lowering's source of
// models loaded by `onnx.load` (sema/ExternalModels.h, ir/ExternalModels.h). sema/ and ir/
// cannot depend on onnx/ (ctest layering), so the tools that link the importer call
// installLanguageHooks() at start-up (tsrc, tsr).
#pragma once

namespace tsr::onnxio {

/// Registers the importer with the checker and graph lowering, and the exporter for onnx.save
/// (ir::ModelWriter), once per process. Each model is
/// imported once (by resolved path) and kept for the process's life.
void installLanguageHooks();

} // namespace tsr::onnxio
