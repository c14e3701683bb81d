// The ONNX exporter (spec 15: `onnx.save(path, f, x_example)`, `tsrc model.tsr --entry NAME
// --emit=onnx -o out.onnx`): one Graph IR graph as an ONNX ModelProto of opset 17, written with
// ONNX's own protobuf classes and checked with ONNX's checker before it is written.
//
// Each Graph IR op becomes the ONNX node that computes it, or a short composition where opset 17
// has no node of its own (rsqrt: Reciprocal of Sqrt; gelu: its erf or tanh formula; silu:
// x * Sigmoid(x); log1p, expm1, exp2, log2; Python's float `%` and `//`). Operands that Graph IR
// promotes (mixed dtypes, integer division) are cast first, as ONNX's nodes take one dtype. An op
// that has no ONNX form (random draws, keys, kernel calls, integer shifts, integer `//`, ...) is
// an error that names it and where the program computes it. Shapes in attributes (reshape,
// broadcast, slices, constants) must be known: a graph specialized to sizes (onnx.save's
// examples, tsrc's --specialize) has them; symbolic dims of inputs and outputs stay dim_params.
//
// Parameters named by ir::capturedName (the tensors of models that the graph's program loaded
// with onnx.load) become initializers with the model's values.
#pragma once

#include "ir/IR.h"

#include <string>

namespace tsr::onnxio {

/// The newest opset the exporter writes (and the one it declares).
constexpr int64_t kExportOpset = 17;

/// Writes `g` (of module `m`, whose file table locates errors) to `path` as an ONNX model.
/// Returns "" on success, else why it could not be exported (naming the op and its location).
std::string exportGraph(const ir::Module &m, const ir::Graph &g, const std::string &path);

} // namespace tsr::onnxio
