// Deep copies of syntax trees with their source ranges moved: the language server parses each
// top-level statement of a document once and copies its tree into every later check, at the
// statement's current offset (lsp/ParseCache).
#pragma once

#include "frontend/Ast.h"

namespace tsr::lsp {

/// A copy of `body` whose nodes are owned by `ctx`, with every range in file `file` and moved
/// by `shift` bytes (invalid ranges stay invalid).
ast::Block cloneBlock(ast::AstContext &ctx, const ast::Block &body, FileId file, int64_t shift);

} // namespace tsr::lsp
