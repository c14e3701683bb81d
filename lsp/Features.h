// The request handlers of the language server: what the editor shows. Each takes a checked
// Analysis (and, for completion and signature help, the document's current text, which may be
// newer than the last check) and returns the protocol's result as JSON.
#pragma once

#include "lsp/Analysis.h"
#include "lsp/Documents.h"

#include <nlohmann/json_fwd.hpp>

namespace tsr::lsp {

using Json = nlohmann::json;

struct ClientPrefs {
  bool markdown = true; // hover and documentation as markdown, else plain text
};

/// publishDiagnostics' `diagnostics` for the analysed document. Diagnostics located in another
/// file (an imported module) are shown where this document reaches that file: the call whose
/// specialization failed, or else the import.
Json diagnosticsJson(const Analysis &a);
Json hover(const Analysis &a, Position p, const ClientPrefs &prefs);
Json definition(const Analysis &a, Position p);
Json documentSymbols(const Analysis &a);
/// `latest` is the most recent check of the document (any version; may be null).
Json completion(const Analysis *latest, const Document &doc, Position p, const ClientPrefs &prefs);
Json signatureHelp(const Analysis *latest, const Document &doc, Position p, const ClientPrefs &prefs);

/// The innermost AST node of the main module whose range contains `offset`, with its ancestors
/// (outermost first). Empty if the offset is outside every statement.
std::vector<ast::Node *> nodePathAt(const ast::Module &m, uint32_t offset);

} // namespace tsr::lsp
