#include "ir/ExternalModels.h"

#include <algorithm>
#include <charconv>

namespace tsr::ir {

namespace {
ModelGraphSource *g_source = nullptr;
ModelWriter *g_writer = nullptr;
constexpr std::string_view kPrefix = "__onnx";
} // namespace

ModelGraphSource *modelGraphSource() { return g_source; }
void setModelGraphSource(ModelGraphSource *source) { g_source = source; }
ModelWriter *modelWriter() { return g_writer; }
void setModelWriter(ModelWriter *writer) { g_writer = writer; }

sema::ModelSignature signatureOf(const ModelGraph &m) {
  const Graph &g = *m.graph;
  sema::ModelSignature sig;
  auto typeOf = [](const Type &t) { return sema::T::tensor(t.dims, t.dtype, t.policies); };
  for (size_t i = 0; i < m.numInputs; ++i) {
    sig.inputs.push_back({i < m.inputNames.size() ? m.inputNames[i] : g.params[i]->name, typeOf(g.params[i]->type)});
    for (const Dim &d : g.params[i]->type.dims)
      for (const std::string &s : d.symbols())
        if (std::find(sig.symbols.begin(), sig.symbols.end(), s) == sig.symbols.end()) sig.symbols.push_back(s);
  }
  for (size_t i = 0; i < m.constants.size(); ++i) sig.params.push_back({m.constantNames[i], typeOf(g.params[m.numInputs + i]->type)});
  for (const Value *o : g.outputs) sig.outputs.push_back(typeOf(o->type));
  return sig;
}

std::string capturedName(size_t index, size_t i) {
  return std::string(kPrefix) + std::to_string(index) + "_c" + std::to_string(i);
}

std::optional<rt::Tensor> capturedConstant(std::string_view name) {
  if (!g_source || name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  size_t sep = name.find("_c");
  if (sep == std::string_view::npos) return std::nullopt;
  size_t index = 0, i = 0;
  auto a = std::from_chars(name.data(), name.data() + sep, index);
  auto b = std::from_chars(name.data() + sep + 2, name.data() + name.size(), i);
  if (a.ec != std::errc() || a.ptr != name.data() + sep || b.ec != std::errc() || b.ptr != name.data() + name.size())
    return std::nullopt;
  const ModelGraph *m = g_source->byIndex(index);
  if (!m || i >= m->constants.size()) return std::nullopt;
  return m->constants[i];
}

bool appendCaptured(const Graph &g, std::vector<rt::Tensor> &inputs) {
  for (size_t i = inputs.size(); i < g.params.size(); ++i) {
    auto t = capturedConstant(g.params[i]->name);
    if (!t) return false;
    inputs.push_back(*t);
  }
  return true;
}

} // namespace tsr::ir
