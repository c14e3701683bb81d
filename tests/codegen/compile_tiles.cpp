// Compiles every function of Tile IR text files (tsrc --emit=tile) for the host CPU: a smoke
// test of the code generator on what the kernel lowering really produces. With --llvm, prints
// the optimized LLVM IR of each function instead.
#include "codegen/cpu/CpuKernel.h"
#include "ir/tile/TileText.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

int main(int argc, char **argv) {
  bool llvm = false;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::string path = argv[i];
    if (path == "--llvm") { llvm = true; continue; }
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      auto m = tsr::tile::parseTileModule(ss.str());
      for (auto &f : m->functions) {
        try {
          auto t0 = std::chrono::steady_clock::now();
          if (llvm) {
            std::cout << tsr::codegen::hostLLVMText(*f, true);
            continue;
          }
          tsr::codegen::compileForHost(*f);
          double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          std::printf("ok   %-40s %7.1f ms\n", f->name.c_str(), ms);
        } catch (const std::exception &e) {
          std::printf("FAIL %-40s %s\n", f->name.c_str(), e.what());
          ++failures;
        }
      }
    } catch (const tsr::tile::TileError &e) {
      std::printf("FAIL %s: %s\n", path.c_str(), e.message.c_str());
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
