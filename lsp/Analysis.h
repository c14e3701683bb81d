// One check of one version of a document: the sources, diagnostics and checked program that the
// request handlers read. An Analysis is immutable once built and shared (shared_ptr) between the
// checker thread that made it and the thread answering requests.
#pragma once

#include "sema/Program.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tsr::lsp {

struct Analysis {
  std::string uri;
  std::string path;
  int64_t version = 0;
  // Declared in this order so that the program goes before what it points into.
  std::unique_ptr<SourceManager> sm;
  std::unique_ptr<DiagnosticEngine> diags;
  std::unique_ptr<sema::Program> program;
  FileId file = 0;
  double checkMs = 0; // how long the check took

  /// The text that was checked.
  const std::string &text() const { return sm->file(file).text(); }
  const sema::ModuleInfo *mainModule() const { return program ? program->main : nullptr; }
  const ast::Module *mainAst() const {
    auto *m = mainModule();
    return m && m->ast ? m->ast.get() : nullptr;
  }
};

/// Checks `text` as the module at `path` (its imports resolve from that folder, TESSERA_PATH and
/// the stdlib, as tsrc resolves them). An exception in the checker becomes an internal-error
/// diagnostic, as tsrc reports it; only `options.parse` may stop the check by throwing something
/// else (the language server's cancellation), which propagates.
std::shared_ptr<Analysis> analyze(const std::string &uri, const std::string &path, std::string text,
                                  int64_t version, const sema::CheckOptions &options);

} // namespace tsr::lsp
