// `tsr lsp`: the Tessera language server (Language Server Protocol 3.17 over stdin/stdout).
// The pieces: lsp/JsonRpc (framing), lsp/Documents (open documents, incremental edits in UTF-16),
// lsp/CheckWorker (the debounced checker thread), lsp/Features (hover, definition, symbols,
// diagnostics) and lsp/Completion (completion, signature help), and lsp/Server.cpp (lifecycle and
// dispatch).
#pragma once

#include "sema/Program.h"

namespace tsr::lsp {

struct ServerOptions {
  sema::CheckOptions check;
  int debounceMs = 50; // quiet period after an edit before checking (initializationOptions.debounceMs)
  bool verbose = false; // log each check and each dropped message to stderr
};

/// Serves one client on the two descriptors until `exit` or the end of input. Returns the
/// process's exit code: 0 after shutdown and exit, 1 otherwise (as the protocol says).
int runServer(int inFd, int outFd, const ServerOptions &options);

} // namespace tsr::lsp
