// tsrc: the Tessera compiler driver (spec section 13).
#include "frontend/Parser.h"

#include <CLI/CLI.hpp>
#include <iostream>

using namespace tsr;

int main(int argc, char **argv) {
  CLI::App app{"tsrc: compile a Tessera (.tsr) module"};
  std::string file, emit;
  bool check = false;
  app.add_option("file", file, "the .tsr file to compile")->required();
  app.add_option("--emit", emit, "print an intermediate form instead of compiling")->check(CLI::IsMember({"ast"}));
  app.add_flag("--check", check, "check the program and report diagnostics; produce nothing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return runWithLargeStack(512u << 20, [&]() -> int {
    SourceManager sm;
    DiagnosticEngine diags(sm);
    FileId id = loadSourceFile(sm, diags, file);
    std::unique_ptr<ast::Module> mod;
    if (id) mod = parseModule(sm, diags, id, "main");
    diags.render(std::cerr);
    if (diags.hasInternalError()) return 70;
    if (diags.hasErrors()) return 1;
    if (emit == "ast") ast::printAst(std::cout, *mod, sm);
    return 0;
  });
}
