// tsrc: the Tessera compiler driver (spec section 13).
//
// Exit codes (spec 13): 0 success, 1 user error (diagnostics printed), 2 usage error,
// 70 internal compiler error.
#include "frontend/Parser.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "ir/lower/LowerGraph.h"
#include "sema/Program.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace tsr;
namespace fs = std::filesystem;

// The installed stdlib sits beside the binary (<prefix>/share/tessera/stdlib); a build tree uses
// the source tree's. TESSERA_STDLIB overrides both.
static std::string findStdlib(const char *argv0) {
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
    while (std::getline(ss, item, ':')) if (!item.empty()) out.push_back(item);
  }
  return out;
}

int main(int argc, char **argv) {
  CLI::App app{"tsrc: check and compile a Tessera (.tsr) module"};
  app.set_version_flag("--version", "tsrc 0.1 (Tessera)");
  std::string file, emit, output;
  bool check = false;
  size_t maxErrors = 50;
  app.add_option("file", file, "the .tsr file to compile")->required();
  app.add_option("-o,--output", output, "where to write the compiled bundle");
  app.add_option("--emit", emit, "print a form of the program instead of compiling it:\n"
                                 "  ast    the syntax tree, with source ranges\n"
                                 "  types  every function's signature and every binding's inferred type\n"
                                 "  graph  the Graph IR of each graph function (and of each specialization)")
      ->check(CLI::IsMember({"ast", "types", "graph"}));
  app.add_flag("--check", check, "check the program and report diagnostics; produce nothing");
  bool readGraph = false;
  app.add_flag("--read-graph", readGraph, "read FILE as Graph IR text, verify it, and print it back (the IR's round trip)");
  app.add_option("--max-errors", maxErrors, "stop reporting after this many errors (default 50)")->check(CLI::Range(1, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (readGraph) {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "tsrc: cannot open `" << file << "`\n";
      return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
      auto m = ir::parseModuleText(text.str());
      for (auto &g : m->graphs)
        for (auto &problem : ir::verify(*g)) {
          std::cerr << file << ": graph @" << g->name << ": " << problem << "\n";
          return 1;
        }
      ir::printModule(std::cout, *m);
      return 0;
    } catch (const ir::IRError &e) {
      std::cerr << file << ":" << e.message << "\n";
      return 1;
    }
  }
  if (!check && emit.empty()) {
    std::cerr << "tsrc: code generation is not available in this build yet; use --check or --emit=ast|types|graph\n";
    return 2;
  }
  return runWithLargeStack(512u << 20, [&]() -> int {
    SourceManager sm;
    DiagnosticEngine diags(sm);
    diags.setMaxErrors(maxErrors);
    int rc = 0;
    try {
      if (emit == "ast") {
        FileId id = loadSourceFile(sm, diags, file);
        std::unique_ptr<ast::Module> mod;
        if (id) mod = parseModule(sm, diags, id, fs::path(file).stem().string());
        if (mod && !diags.hasErrors()) ast::printAst(std::cout, *mod, sm);
      } else {
        sema::CheckOptions opts;
        opts.stdlibDir = findStdlib(argv[0]);
        opts.searchPath = searchPath();
        auto program = sema::checkProgram(sm, diags, file, opts);
        if (emit == "types" && !diags.hasErrors()) sema::printTypes(std::cout, *program);
        if (emit == "graph" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          if (!diags.hasErrors()) ir::printModule(std::cout, *graphs);
        }
      }
    } catch (const std::exception &e) {
      diags.internalError(e.what());
    }
    diags.render(std::cerr);
    if (diags.hasInternalError()) rc = 70;
    else if (diags.hasErrors()) rc = 1;
    return rc;
  });
}
