#include "lsp/Analysis.h"

#include <chrono>

namespace tsr::lsp {

std::shared_ptr<Analysis> analyze(const std::string &uri, const std::string &path, std::string text,
                                  int64_t version, const sema::CheckOptions &options) {
  auto t0 = std::chrono::steady_clock::now();
  auto a = std::make_shared<Analysis>();
  a->uri = uri;
  a->path = path;
  a->version = version;
  a->sm = std::make_unique<SourceManager>();
  a->diags = std::make_unique<DiagnosticEngine>(*a->sm);
  a->file = a->sm->addFile(path, std::move(text));
  try {
    a->program = sema::checkLoadedFile(*a->sm, *a->diags, a->file, options);
  } catch (const std::exception &e) {
    a->diags->internalError(e.what());
  }
  a->checkMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

} // namespace tsr::lsp
