// The models a program loads with `onnx.load` (spec 15), in a bundle (docs/bundle.md, format
// 1.1): the writer carries each model's imported Graph IR and tensors, so that the runner needs
// neither the model file nor the importer (onnx/, which a deployed runtime never links: ctest
// layering). At run time these answer the checker's and graph lowering's questions about a model
// (sema/ExternalModels.h, ir/ExternalModels.h) in place of the importer.
//
// A model is found by the path the runner's checker resolves an `onnx.load` call to. The runner
// checks the modules in a private folder (RunBundle.cpp's SourceTree: one subfolder per root,
// treeFolder()), so the writer records, for each call, that path relative to the folder (or the
// absolute path the program wrote), and the runner compares the checker's path, made relative to
// its folder, with them.
#pragma once

#include "ir/ExternalModels.h"
#include "runtime/bundle/Bundle.h"
#include "sema/ExternalModels.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tsr::bundle {

/// The subfolder of the runner's source folder that holds the modules of `root` ("main",
/// "stdlib", "path:N" -> "pathN").
std::string treeFolder(const std::string &root);

/// The models of the bundles this process runs: a process-wide importer and graph source that
/// answers for the bundles' models and passes every other path to the hooks installed before it
/// (the importer, in `tsr`; none in tools/tsr-run-bundle).
class BundledModels final : public sema::ModelImporter, public ir::ModelGraphSource {
public:
  static BundledModels &process();

  /// Reads `b`'s models (throws rt::bundle::BundleError, corrupted, for a model whose Graph IR
  /// does not parse or does not match its manifest entry) and answers for them where the
  /// checker resolves paths under `treeDir`, the folder the runner checks `b`'s modules in.
  /// Installs this as the process's importer and graph source on first use.
  void add(const rt::bundle::Bundle &b, const std::string &treeDir);

  std::variant<sema::ModelSignature, sema::ModelLoadError> signature(const std::string &path) override;
  const ir::ModelGraph *graph(const std::string &path) override;
  const ir::ModelGraph *byIndex(size_t index) override;

private:
  struct Model {
    std::unique_ptr<ir::Module> module;
    ir::ModelGraph graph;
  };
  const Model *find(const std::string &path) const;

  std::mutex mu_;
  std::vector<std::unique_ptr<Model>> models_;
  std::map<std::string, const Model *> byPath_; // absolute paths the checker resolves to
  sema::ModelImporter *nextImporter_ = nullptr;
  ir::ModelGraphSource *nextSource_ = nullptr;
  bool installed_ = false;
};

} // namespace tsr::bundle
