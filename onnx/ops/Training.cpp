// The training domain's Gradient (ai.onnx.preview.training, version 1): the gradient of the
// tensor named `y` with respect to the tensors named `xs`, taken where the node stands. Graph IR
// differentiates itself: the ops the import has built so far are the span, and reverse mode
// (ir/autodiff) appends the gradient's ops with the seed 1 (ONNX: y is the output of a scalar
// loss; a non-scalar y gets the gradient of its sum, as reverse mode does with a seed of ones).
// `zs` (inputs held constant) and gradients with respect to tensors known at import are not
// supported. Semantics: ONNX 1.12's onnx/defs/training/defs.cc.
#include "onnx/Importer.h"

#include "ir/autodiff/Autodiff.h"

namespace tsr::onnxio {

std::vector<Val> ruleGradient(Importer &I, Node &n) {
  const onnx::AttributeProto *xsAttr = n.attr("xs"), *yAttr = n.attr("y");
  if (!xsAttr || !yAttr) throw BadModel("Gradient needs the attributes xs and y");
  if (n.attr("zs")) throw Unsupported("Gradient with `zs` is not supported");
  if (I.folding) throw Unsupported("Gradient of tensors known at import time is not supported");
  auto valueOf = [&](const std::string &name) {
    auto it = I.env.find(name);
    if (it == I.env.end()) throw BadModel("Gradient names `" + name + "`, which is not defined before it");
    if (!it->second.v || it->second.k)
      throw Unsupported("Gradient with respect to or of `" + name + "`, a tensor known at import time, is not supported");
    return it->second.v;
  };
  ir::Graph &g = *I.graph();
  ir::autodiff::Span span;
  span.g = &g;
  span.end = g.ops.size();
  for (const std::string &x : xsAttr->strings()) {
    ir::Value *v = valueOf(x);
    span.inputs.push_back(v);
    // Ops before an input's definition are constants of the span.
    if (v->def) span.begin = std::max(span.begin, g.opIndex(v->def) + 1);
  }
  if (span.inputs.size() != n.numOutputs) throw BadModel("Gradient has " + std::to_string(n.numOutputs) + " outputs for " +
                                                          std::to_string(span.inputs.size()) + " xs");
  ir::Value *y = valueOf(yAttr->s());
  span.outputs.push_back(y);
  if (!isFloat(y->type.dtype)) throw BadModel("Gradient of a tensor that is not floating-point");
  ir::Value *seed = I.full(y->type.dims, 1.0, y->type.dtype);
  std::vector<ir::Value *> grads;
  try {
    grads = ir::autodiff::reverseMode(span, {seed});
  } catch (const ir::autodiff::AutodiffError &e) {
    throw Unsupported("Gradient: " + e.what + " is not differentiable");
  } catch (const ir::IRError &e) {
    // Not an exception class: importModel's handlers would not see it.
    throw BadModel("Gradient: " + e.message);
  }
  std::vector<Val> out;
  for (ir::Value *d : grads) out.push_back(Importer::of(d));
  return out;
}

} // namespace tsr::onnxio
