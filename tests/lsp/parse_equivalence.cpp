// The language server's incremental parse (lsp/ParseCache) must give exactly the tree and the
// diagnostics that parseModule gives for the whole text. Checks that for every .tsr file under
// the given paths, and for random edits of them (characters deleted, inserted, lines swapped),
// with the cache cold and warm. Ends with `N passed, N failed`.
#include "frontend/Parser.h"
#include "lsp/ParseCache.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

using namespace tsr;
namespace fs = std::filesystem;

namespace {

struct Result {
  std::string tree, diags;
};

Result full(const std::string &path, const std::string &text) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  FileId id = sm.addFile(path, text);
  auto m = parseModule(sm, diags, id, "m");
  std::ostringstream t, d;
  ast::printAst(t, *m, sm);
  diags.render(d);
  return {t.str(), d.str()};
}

Result incremental(lsp::ParseCache &cache, const std::string &path, const std::string &text) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  FileId id = sm.addFile(path, text);
  cache.beginCheck("test");
  auto m = cache.parse(sm, diags, id, "m");
  cache.endCheck();
  std::ostringstream t, d;
  ast::printAst(t, *m, sm);
  diags.render(d);
  return {t.str(), d.str()};
}

std::string mutate(const std::string &s, std::mt19937 &rng) {
  if (s.empty()) return s;
  std::string out = s;
  std::uniform_int_distribution<size_t> at(0, out.size() - 1);
  static const std::string pieces[] = {"(", ")", ":", "\n", "    ", "x", "\"", "'''", "[", "]", "@", "#", ",", "\\\n", "def f():\n", "\n  y = 1\n"};
  switch (rng() % 4) {
  case 0: out.erase(at(rng), 1 + rng() % 3); break;
  case 1: out.insert(at(rng), pieces[rng() % std::size(pieces)]); break;
  case 2: { size_t p = at(rng); out.replace(p, 1, pieces[rng() % std::size(pieces)]); break; }
  case 3: {
    size_t a = at(rng), b = at(rng);
    if (a > b) std::swap(a, b);
    out = out.substr(0, a) + out.substr(b) ;
    break;
  }
  }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> files;
  int mutations = 20;
  unsigned seed = 12345;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--mutations=", 0) == 0) { mutations = std::stoi(a.substr(12)); continue; }
    if (a.rfind("--seed=", 0) == 0) { seed = static_cast<unsigned>(std::stoul(a.substr(7))); continue; }
    if (fs::is_directory(a)) {
      for (auto &e : fs::recursive_directory_iterator(a))
        if (e.path().extension() == ".tsr") files.push_back(e.path().string());
    } else {
      files.push_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  size_t passed = 0, failed = 0;
  std::mt19937 rng(seed);
  return runWithLargeStack(size_t(512) << 20, [&] {
    lsp::ParseCache cache;
    auto compare = [&](const std::string &what, const std::string &path, const std::string &text) {
      Result a = full(path, text);
      Result b = incremental(cache, path, text); // cold for new statements
      Result c = incremental(cache, path, text); // warm
      if (a.tree == b.tree && a.diags == b.diags && a.tree == c.tree && a.diags == c.diags) {
        ++passed;
        return;
      }
      ++failed;
      std::cout << "FAIL " << what << "\n";
      if (failed <= 3) {
        std::ofstream(fs::path("parse_equivalence_failure_" + std::to_string(failed) + ".tsr")) << text;
        std::cout << "--- full diags:\n" << a.diags << "--- incremental diags:\n" << b.diags;
        if (a.tree != b.tree) {
          std::cout << "(trees differ: parse_equivalence_failure_" << failed << ".full / .incremental)\n";
          std::ofstream(fs::path("parse_equivalence_failure_" + std::to_string(failed) + ".full")) << a.tree;
          std::ofstream(fs::path("parse_equivalence_failure_" + std::to_string(failed) + ".incremental")) << b.tree;
        }
      }
    };
    for (const std::string &f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string text = ss.str();
      compare(f, f, text);
      for (int k = 0; k < mutations; ++k) {
        std::string t = text;
        int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits; ++e) t = mutate(t, rng);
        compare(f + " (edit " + std::to_string(k) + ")", f, t);
      }
    }
    std::cout << passed << " passed, " << failed << " failed\n";
    return failed ? 1 : 0;
  });
}
