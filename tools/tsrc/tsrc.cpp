// tsrc: the Tessera compiler driver (spec section 13).
//
// Exit codes (spec 13): 0 success, 1 user error (diagnostics printed), 2 usage error,
// 70 internal compiler error.
#include "frontend/Parser.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "ir/lower/LowerGraph.h"
#include "ir/lower/LowerKernel.h"
#include "ir/schedule/Fusion.h"
#include "codegen/cpu/CpuKernel.h"
#include "codegen/nvptx/PtxKernel.h"
#include "ir/tile/TileText.h"
#include "sema/Program.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace tsr;
namespace fs = std::filesystem;

// --read-graph / --read-tile: parse FILE as IR text, verify it and print it back (the text
// form's round trip). A malformed or ill-formed text is a user error: `FILE:line:col: message`
// or `FILE: graph @name: problem`, exit 1.
template <class Error, class ParseVerifyPrint>
static int readIRText(const std::string &file, ParseVerifyPrint run) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << "tsrc: cannot open `" << file << "`\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    run(text.str());
    return 0;
  } catch (const Error &e) {
    std::cerr << file << ":" << e.message << "\n";
    return 1;
  }
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
                                 "  graph  the Graph IR of each graph function (and of each specialization)\n"
                                 "  tile   the Tile IR of each kernel launch (from graph functions and from main's module)\n"
                                 "  schedule  how each graph runs compiled: its fused steps, their ops and inputs\n"
                                 "  llvm   the optimized host-CPU LLVM IR of each kernel that `tile` prints\n"
                                 "  ptx    one PTX module holding every kernel that `tile` prints (--arch)")
      ->check(CLI::IsMember({"ast", "types", "graph", "tile", "schedule", "llvm", "ptx"}));
  std::string arch = "sm_90";
  app.add_option("--arch", arch, "the GPU architecture of --emit=ptx: sm_80 or sm_90 (default sm_90)")
      ->check(CLI::IsMember({"sm_80", "sm_90"}));
  app.add_flag("--check", check, "check the program and report diagnostics; produce nothing");
  bool readGraph = false;
  app.add_flag("--read-graph", readGraph, "read FILE as Graph IR text, verify it, and print it back (the IR's round trip)");
  bool readTile = false;
  app.add_flag("--read-tile", readTile, "read FILE as Tile IR text, verify it, and print it back (the IR's round trip)");
  app.add_option("--max-errors", maxErrors, "stop reporting after this many errors (default 50)")->check(CLI::Range(1, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (readGraph)
    return readIRText<ir::IRError>(file, [](const std::string &text) {
      auto m = ir::parseModuleText(text);
      for (auto &g : m->graphs)
        for (auto &problem : ir::verify(*g)) throw ir::IRError{" graph @" + g->name + ": " + problem};
      ir::printModule(std::cout, *m);
    });
  if (readTile)
    return readIRText<tile::TileError>(file, [](const std::string &text) {
      auto m = tile::parseTileModule(text);
      for (auto &fn : m->functions)
        for (auto &problem : tile::verify(*fn)) throw tile::TileError{" tile @" + fn->name + ": " + problem};
      tile::printModule(std::cout, *m);
    });
  if (!check && emit.empty()) {
    std::cerr << "tsrc: code generation is not available in this build yet; use --check or --emit=ast|types|graph|tile|schedule|llvm|ptx\n";
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
        sema::CheckOptions opts = sema::defaultCheckOptions(TSR_SOURCE_STDLIB);
        auto program = sema::checkProgram(sm, diags, file, opts);
        if (emit == "types" && !diags.hasErrors()) sema::printTypes(std::cout, *program);
        if (emit == "graph" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          if (!diags.hasErrors()) ir::printModule(std::cout, *graphs);
        }
        if (emit == "schedule" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          if (!diags.hasErrors())
            for (auto &g : graphs->graphs) ir::schedule::printSchedule(std::cout, *g, ir::schedule::planFusion(*g));
        }
        if (emit == "tile" && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          auto kernels = ir::lowerProgramKernels(*program, *graphs, diags);
          if (!diags.hasErrors()) tile::printModule(std::cout, *kernels);
        }
        if ((emit == "llvm" || emit == "ptx") && !diags.hasErrors()) {
          auto graphs = ir::lowerProgram(*program, diags);
          auto kernels = ir::lowerProgramKernels(*program, *graphs, diags);
          if (!diags.hasErrors()) {
            std::vector<const tile::Function *> fns;
            for (auto &f : kernels->functions) fns.push_back(f.get());
            try {
              if (emit == "llvm") {
                for (const tile::Function *f : fns) std::cout << codegen::hostLLVMText(*f, true) << "\n";
              } else {
                codegen::nvptx::PtxOptions po;
                po.arch = arch;
                auto pm = codegen::nvptx::compileToPtx(fns, po);
                // One line per kernel (tools/gpu/ptx_check reads them): launch shape and config.
                for (size_t q = 0; q < pm.kernels.size(); ++q) {
                  const auto &k = pm.kernels[q];
                  std::cout << "// kernel " << k.name << ": " << k.threads << " threads, " << k.sharedBytes
                            << " bytes of dynamic shared memory, " << k.params << " KernelArg params; config";
                  for (const auto &a : fns[q]->config)
                    if (auto *v = std::get_if<int64_t>(&a.value)) std::cout << " " << a.name << "=" << *v;
                  std::cout << "\n";
                }
                std::cout << pm.ptx;
              }
            } catch (const codegen::CodegenError &e) {
              std::cerr << "tsrc: " << e.what() << "\n";
              rc = 1;
            }
          }
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
