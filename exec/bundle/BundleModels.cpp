// A bundle's models at run time (BundleModels.h).
#include "exec/bundle/BundleModels.h"

#include "ir/Text.h"
#include "ir/Verifier.h"

#include <cstring>
#include <filesystem>

namespace tsr::bundle {

namespace fs = std::filesystem;
namespace rb = rt::bundle;

std::string treeFolder(const std::string &root) {
  if (root.rfind("path:", 0) == 0) return "path" + root.substr(5);
  return root;
}

BundledModels &BundledModels::process() {
  static BundledModels models;
  return models;
}

namespace {

// Indices of the bundles' models start here, above any the importer gives, so that captured
// parameters (`__onnx<index>_c<i>`, ir/ExternalModels.h) of both never meet.
constexpr size_t kFirstIndex = size_t(1) << 20;

[[noreturn]] void corrupted(const std::string &where, const std::string &what) {
  throw rb::BundleError(rb::Refusal::Corrupted, "the manifest's " + where + " " + what);
}

} // namespace

void BundledModels::add(const rb::Bundle &b, const std::string &treeDir) {
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  // The checker may resolve paths under the folder as given or as the file system names it.
  std::vector<fs::path> dirs{fs::path(treeDir).lexically_normal()};
  if (fs::path c = fs::weakly_canonical(treeDir, ec); !ec && c != dirs[0]) dirs.push_back(c);
  for (size_t i = 0; i < b.models.size(); ++i) {
    const rb::ModelEntry &e = b.models[i];
    const std::string w = "models[" + std::to_string(i) + "]";
    auto m = std::make_unique<Model>();
    try {
      m->module = ir::parseModuleText(std::string(b.sectionBytes(e.graph)));
    } catch (const std::exception &ex) {
      corrupted(w + ".graph_ir", std::string("is not Graph IR text: ") + ex.what());
    }
    if (m->module->graphs.size() != 1) corrupted(w + ".graph_ir", "does not hold one graph");
    const ir::Graph &g = *m->module->graphs[0];
    if (auto problems = ir::verify(g); !problems.empty()) corrupted(w + ".graph_ir", "does not verify: " + problems[0]);
    if (e.inputs.size() + e.constants.size() != g.params.size())
      corrupted(w, "gives " + std::to_string(e.inputs.size()) + " inputs and " + std::to_string(e.constants.size()) +
                       " tensors for a graph of " + std::to_string(g.params.size()) + " parameters");
    m->graph.graph = &g;
    m->graph.module = m->module.get();
    m->graph.numInputs = e.inputs.size();
    m->graph.inputNames = e.inputs;
    m->graph.index = kFirstIndex + models_.size();
    for (size_t k = 0; k < e.constants.size(); ++k) {
      const rb::ModelTensor &t = e.constants[k];
      const ir::Type &want = g.params[e.inputs.size() + k]->type;
      // The reader checked that the span holds the dtype and shape; the graph must agree.
      bool same = !want.isKey() && dtypeName(want.dtype) == t.dtype && want.rank() == t.shape.size();
      for (size_t d = 0; same && d < t.shape.size(); ++d) same = want.dims[d].constantValue() == std::optional<int64_t>(t.shape[d]);
      if (!same) corrupted(w + ".constants[" + std::to_string(k) + "]", "is not of its parameter's type in the graph");
      rt::Tensor x = rt::Tensor::empty(t.shape, want.dtype);
      const std::string_view bytes = b.sectionBytes(*e.tensors).substr(size_t(t.data.offset), size_t(t.data.size));
      if (!bytes.empty()) std::memcpy(x.data(), bytes.data(), bytes.size());
      m->graph.constants.push_back(std::move(x));
      m->graph.constantNames.push_back(t.name);
    }
    for (const std::string &key : e.keys) {
      if (fs::path(key).is_absolute()) byPath_[fs::path(key).lexically_normal().string()] = m.get();
      else
        for (const fs::path &d : dirs) byPath_[(d / key).lexically_normal().string()] = m.get();
    }
    models_.push_back(std::move(m));
  }
  if (!installed_) {
    nextImporter_ = sema::modelImporter();
    nextSource_ = ir::modelGraphSource();
    sema::setModelImporter(this);
    ir::setModelGraphSource(this);
    installed_ = true;
  }
}

const BundledModels::Model *BundledModels::find(const std::string &path) const {
  auto it = byPath_.find(fs::path(path).lexically_normal().string());
  return it == byPath_.end() ? nullptr : it->second;
}

std::variant<sema::ModelSignature, sema::ModelLoadError> BundledModels::signature(const std::string &path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Model *m = find(path)) return ir::signatureOf(m->graph);
  }
  if (nextImporter_) return nextImporter_->signature(path);
  // A bundle made before models were carried (format 1.0), or a path only a run computes.
  return sema::ModelLoadError{"the bundle does not carry this model, and this runner reads no model files"};
}

const ir::ModelGraph *BundledModels::graph(const std::string &path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Model *m = find(path)) return &m->graph;
  }
  return nextSource_ ? nextSource_->graph(path) : nullptr;
}

const ir::ModelGraph *BundledModels::byIndex(size_t index) {
  if (index < kFirstIndex) return nextSource_ ? nextSource_->byIndex(index) : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  return index - kFirstIndex < models_.size() ? &models_[index - kFirstIndex]->graph : nullptr;
}

} // namespace tsr::bundle
