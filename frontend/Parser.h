// The front end's entry point: source text in, AST and diagnostics out.
#pragma once

#include "frontend/Ast.h"
#include "support/Diagnostics.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace tsr {

/// Limits that keep malformed or hostile input from exhausting the stack (docs/diagnostics.md).
struct ParseLimits {
  uint32_t maxBracketDepth = 200;   // as CPython's parser
  uint32_t maxIndentDepth = 100;    // as CPython's tokenizer
  uint32_t maxExprDepth = 1000;     // nested operators in one expression
  size_t maxParserStackBytes = 64u << 20;
};

/// Parses the file `file` (already in `sm`) as module `moduleName`. Always returns a module; on
/// syntax errors it holds what could be recovered and the errors are in `diags`.
std::unique_ptr<ast::Module> parseModule(const SourceManager &sm, DiagnosticEngine &diags, FileId file,
                                         std::string moduleName, const ParseLimits &limits = {});

/// Reads a file from disk into `sm`, reporting FileNotFound / InvalidUtf8 / EmptyFile as needed.
/// `from` is where the request came from (an import statement), or an invalid range for the
/// command line. Returns 0 if the file cannot be read or is not UTF-8.
FileId loadSourceFile(SourceManager &sm, DiagnosticEngine &diags, const std::string &path,
                      SourceRange from = {});

/// Runs `fn` on a thread with a stack of `bytes` (the compiler's recursion over user programs is
/// bounded by ParseLimits, and this gives those bounds generous room). Returns fn's result.
int runWithLargeStack(size_t bytes, const std::function<int()> &fn);

} // namespace tsr
