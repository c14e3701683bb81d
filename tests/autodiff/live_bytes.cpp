// live_bytes: the peak live bytes (ir/analysis/LiveBytes.h) of each graph of a Graph IR text file,
// for the checkpoint test.
//
//   live_bytes GRAPH.txt [--size NAME=N]...
//
// Prints one line per graph: `@name peak=BYTES params=BYTES at=OP`. Exit codes: 0, 1 for a file
// that does not parse or a dim without a size, 2 for a usage error.
#include "ir/Text.h"
#include "ir/analysis/LiveBytes.h"

#include <fstream>
#include <iostream>
#include <sstream>

using namespace tsr;

int main(int argc, char **argv) {
  std::string file;
  ir::SymbolSizes sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      std::string v = argv[++i];
      size_t eq = v.find('=');
      if (eq == std::string::npos) { std::cerr << "live_bytes: --size takes NAME=N\n"; return 2; }
      sizes[v.substr(0, eq)] = std::stoll(v.substr(eq + 1));
    } else if (file.empty()) {
      file = a;
    } else {
      std::cerr << "usage: live_bytes GRAPH.txt [--size NAME=N]...\n";
      return 2;
    }
  }
  std::ifstream in(file);
  if (!in) { std::cerr << "live_bytes: cannot open `" << file << "`\n"; return 1; }
  std::stringstream text;
  text << in.rdbuf();
  try {
    auto m = ir::parseModuleText(text.str());
    for (auto &g : m->graphs) {
      ir::LiveBytes r = ir::peakLiveBytes(*g, sizes);
      std::cout << "@" << g->name << " peak=" << r.peak << " params=" << r.params << " at=" << r.peakOp << "\n";
    }
  } catch (const ir::IRError &e) {
    std::cerr << file << ": " << e.message << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << file << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
