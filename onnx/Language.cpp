#include "onnx/Language.h"

#include "ir/ExternalModels.h"
#include "onnx/Export.h"
#include "onnx/Import.h"
#include "sema/ExternalModels.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

namespace tsr::onnxio {

namespace {

struct Entry {
  ir::Module module; // owns the imported graph
  std::optional<ImportedModel> model;
  std::optional<ImportError> error;
  ir::ModelGraph graph;
};

class Hooks final : public sema::ModelImporter, public ir::ModelGraphSource, public ir::ModelWriter {
public:
  std::string write(const ir::Module &m, const ir::Graph &g, const std::string &path) override { return exportGraph(m, g, path); }

  std::variant<sema::ModelSignature, sema::ModelLoadError> signature(const std::string &path) override {
    std::lock_guard<std::mutex> lock(mu_);
    Entry &e = load(path);
    if (e.error) {
      // The diagnostic names the model as the program wrote it: the message without the file.
      std::string s = e.error->str(), prefix = e.error->file + ": ";
      if (s.rfind(prefix, 0) == 0) s = s.substr(prefix.size());
      return sema::ModelLoadError{s, e.error->unsupported};
    }
    return ir::signatureOf(e.graph);
  }

  const ir::ModelGraph *graph(const std::string &path) override {
    std::lock_guard<std::mutex> lock(mu_);
    Entry &e = load(path);
    return e.model ? &e.graph : nullptr;
  }

  const ir::ModelGraph *byIndex(size_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    return index < order_.size() && order_[index]->model ? &order_[index]->graph : nullptr;
  }

private:
  Entry &load(const std::string &path) {
    auto it = entries_.find(path);
    if (it != entries_.end()) return *it->second;
    auto e = std::make_unique<Entry>();
    ImportOptions options;
    options.graphName = "onnx_model";
    auto r = importModel(path, e->module, options);
    if (auto *err = std::get_if<ImportError>(&r)) {
      e->error = *err;
    } else if (std::any_of(std::get<ImportedModel>(r).stringOutputs.begin(), std::get<ImportedModel>(r).stringOutputs.end(),
                           [](auto &s) { return s.has_value(); })) {
      // Only an import given string inputs computes string outputs, and a program gives none.
      e->error = ImportError{path, "", "", std::get<ImportedModel>(r).opset, "a string output has no Tessera dtype", true, {}, {}};
    } else {
      e->model = std::get<ImportedModel>(std::move(r));
      e->graph.graph = e->model->graph;
      e->graph.module = &e->module;
      e->graph.numInputs = e->model->numInputs;
      e->graph.inputNames = e->model->inputNames;
      e->graph.constants = e->model->constants;
      e->graph.constantNames = e->model->constantNames;
    }
    e->graph.index = order_.size();
    order_.push_back(e.get());
    return *(entries_[path] = std::move(e));
  }

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  std::vector<Entry *> order_;
};

} // namespace

void installLanguageHooks() {
  static Hooks hooks;
  sema::setModelImporter(&hooks);
  ir::setModelGraphSource(&hooks);
  ir::setModelWriter(&hooks);
}

} // namespace tsr::onnxio
