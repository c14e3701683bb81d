// tsr: runs Tessera programs and serves editors (spec section 13).
//
//   tsr lsp    the language server, on stdin/stdout
//   tsr run    runs a module's main (not in this build yet)
//
// Exit codes (spec 13): 0 success, 1 user error, 2 usage error, 70 internal error.
#include "frontend/Parser.h"
#include "lsp/Server.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

// As tsrc finds it: the installed stdlib beside the binary (<prefix>/share/tessera/stdlib), else
// the source tree's; TESSERA_STDLIB overrides both.
static std::string findStdlib() {
  if (const char *env = std::getenv("TESSERA_STDLIB")) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path installed = exe.parent_path().parent_path() / "share" / "tessera" / "stdlib";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return TSR_SOURCE_STDLIB;
}

static std::vector<std::string> searchPath() {
  std::vector<std::string> out;
  if (const char *env = std::getenv("TESSERA_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) out.push_back(item);
  }
  return out;
}

int main(int argc, char **argv) {
  CLI::App app{"tsr: run Tessera (.tsr) programs and serve editors"};
  app.set_version_flag("--version", "tsr 0.1 (Tessera)");
  app.require_subcommand(1);

  CLI::App *lsp = app.add_subcommand("lsp", "the language server (Language Server Protocol on stdin/stdout)");
  int debounceMs = 50;
  bool verbose = false;
  lsp->add_option("--debounce-ms", debounceMs, "quiet time after an edit before checking (default 50)")
      ->check(CLI::Range(0, 5000));
  lsp->add_flag("--verbose", verbose, "log checks and dropped messages to stderr");
  // Editors start servers with `--stdio`; it is the only transport, so it is accepted and ignored.
  bool stdio = true;
  lsp->add_flag("--stdio", stdio, "use stdin/stdout (the default and only transport)");

  CLI::App *run = app.add_subcommand("run", "run a module's main (not available in this build yet)");
  run->allow_extras();
  run->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (run->parsed()) {
    std::cerr << "tsr run: not available in this build yet\n";
    return 2;
  }
  tsr::lsp::ServerOptions opts;
  opts.check.stdlibDir = findStdlib();
  opts.check.searchPath = searchPath();
  opts.debounceMs = debounceMs;
  opts.verbose = verbose;
  return tsr::runWithLargeStack(size_t(64) << 20, [&] { return tsr::lsp::runServer(STDIN_FILENO, STDOUT_FILENO, opts); });
}
