// tsr-eval: runs one graph of a Graph IR text file (what `tsrc FILE --emit=graph` prints) on the
// reference evaluator (ir/eval/Evaluator.h), for tests that compare it with other
// implementations.
//
//   tsr-eval GRAPH.txt [--graph NAME] (--in FILE.npy | --key SEED)... [--size NAME=N]... --out-dir DIR
//
// - The graph's parameters take the inputs in command-line order: `--in` a tensor file (.npy, or
//   anything runtime/Formats.h's load reads as one tensor), `--key` a random key random.key(SEED).
//   NumPy has no bf16, fp8 or tf32, so an f32 file given for a parameter of one of those dtypes
//   is rounded into it (nearest-even); any other dtype difference is an error.
// - --graph may be left out when the file holds one graph.
// - --size gives a symbol that no input's shape determines (a compile-time int of a generic
//   signature, such as `heads` in "D/heads").
// - Outputs are written as DIR/out0.npy, DIR/out1.npy, ... (bf16, fp8 and tf32 as f32, an exact
//   widening; keys as i64 [2] = (k0, k1)), and each is listed on stdout as
//   `out0.npy bf16 (4, 8)` with its dtype in the graph.
//
// - TSR_EXECUTOR=compiled runs the graph compiled (exec/CompiledExecutor.h) instead, every
//   step compiled at its first call, and prints to stderr what ran how:
//   `compiled: L launches; steps: C compiled, I interpreted, U with unknown dims, B library`
//   (tests/ir/test_eval.py asserts from it that compiled code ran). TSR_DEVICE=cuda[:N] runs it
//   on that GPU (exec/cuda/CudaBackend.h; tools/gpu/suite.sh).
//
// Exit codes: 0 success, 1 an error of the files or of evaluation (printed), 2 a usage error.
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "ir/eval/Evaluator.h"
#include "runtime/Formats.h"
#include "exec/CompiledExecutor.h"
#include "exec/cpu/CpuBackend.h"
#include "exec/cuda/NvptxCompiler.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

using namespace tsr;
namespace fs = std::filesystem;

namespace {

constexpr const char *kUsage =
    "usage: tsr-eval GRAPH.txt [--graph NAME] (--in FILE.npy | --key SEED)... [--size NAME=N]... --out-dir DIR\n"
    "  runs a graph of Graph IR text on the reference evaluator; parameters take the inputs in\n"
    "  command-line order; --size gives a symbol that no input determines; outputs go to\n"
    "  DIR/out0.npy, DIR/out1.npy, ...\n";

struct Input {
  bool isKey = false;
  std::string file;
  int64_t seed = 0;
};

int usage(const std::string &why) {
  std::cerr << "tsr-eval: " << why << "\n" << kUsage;
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  std::string graphFile, graphName, outDir;
  std::vector<Input> inputs;
  ir::SymbolSizes sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--graph" || a == "--in" || a == "--key" || a == "--size" || a == "--out-dir") {
      if (i + 1 >= argc) return usage(a + " needs a value");
      const std::optional<std::string> v = std::string(argv[++i]);
      if (a == "--graph") graphName = *v;
      else if (a == "--out-dir") outDir = *v;
      else if (a == "--in") inputs.push_back({false, *v, 0});
      else if (a == "--size") {
        size_t eq = v->find('=');
        char *end = nullptr;
        errno = 0;
        long long n = eq == std::string::npos ? 0 : std::strtoll(v->c_str() + eq + 1, &end, 10);
        if (eq == std::string::npos || eq == 0 || eq + 1 == v->size() || *end != '\0' || errno != 0 || n < 0)
          return usage("--size takes NAME=N with N a size, not `" + *v + "`");
        sizes[v->substr(0, eq)] = n;
      } else {
        char *end = nullptr;
        errno = 0;
        long long seed = std::strtoll(v->c_str(), &end, 10);
        if (v->empty() || *end != '\0' || errno != 0) return usage("--key takes an integer seed, not `" + *v + "`");
        inputs.push_back({true, "", seed});
      }
    } else if (!a.empty() && a[0] == '-') {
      return usage("unknown option `" + a + "`");
    } else if (graphFile.empty()) {
      graphFile = a;
    } else {
      return usage("more than one graph file (`" + graphFile + "`, `" + a + "`)");
    }
  }
  if (graphFile.empty()) return usage("no graph file");
  if (outDir.empty()) return usage("no --out-dir");

  std::ifstream in(graphFile);
  if (!in) {
    std::cerr << "tsr-eval: cannot open `" << graphFile << "`\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::unique_ptr<ir::Module> m;
  try {
    m = ir::parseModuleText(text.str());
  } catch (const ir::IRError &e) {
    std::cerr << graphFile << ":" << e.message << "\n";
    return 1;
  }
  const ir::Graph *g = nullptr;
  if (graphName.empty()) {
    if (m->graphs.size() != 1) {
      std::cerr << "tsr-eval: " << graphFile << " holds " << m->graphs.size() << " graphs; choose one with --graph:";
      for (auto &x : m->graphs) std::cerr << " " << x->name;
      std::cerr << "\n";
      return 2;
    }
    g = m->graphs[0].get();
  } else if (!(g = m->find(graphName))) {
    std::cerr << "tsr-eval: " << graphFile << " has no graph @" << graphName << "; it has:";
    for (auto &x : m->graphs) std::cerr << " " << x->name;
    std::cerr << "\n";
    return 1;
  }
  for (const std::string &problem : ir::verify(*g)) {
    std::cerr << graphFile << ": graph @" << g->name << ": " << problem << "\n";
    return 1;
  }
  if (inputs.size() != g->params.size()) {
    std::cerr << "tsr-eval: graph @" << g->name << " takes " << g->params.size() << " inputs (";
    for (size_t i = 0; i < g->params.size(); ++i)
      std::cerr << (i ? ", " : "") << "%" << g->params[i]->name << ": " << g->params[i]->type.str();
    std::cerr << "), given " << inputs.size() << "\n";
    return 2;
  }

  std::vector<rt::Tensor> values;
  try {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ir::Type &ty = g->params[i]->type;
      if (inputs[i].isKey) {
        if (!ty.isKey()) {
          std::cerr << "tsr-eval: input " << i << " is a key, but %" << g->params[i]->name << " is " << ty.str() << "\n";
          return 1;
        }
        values.push_back(ir::keyTensor(rt::key(inputs[i].seed)));
        continue;
      }
      if (ty.isKey()) {
        std::cerr << "tsr-eval: %" << g->params[i]->name << " is a key: pass --key SEED for it\n";
        return 1;
      }
      rt::Loaded l = rt::load(inputs[i].file);
      if (l.isDict) {
        std::cerr << "tsr-eval: " << inputs[i].file << ": holds several tensors; give one .npy per input\n";
        return 1;
      }
      rt::Tensor t = l.tensor;
      const bool narrow = ty.dtype == DType::BF16 || ty.dtype == DType::F8E4M3 || ty.dtype == DType::F8E5M2 || ty.dtype == DType::TF32;
      if (t.dtype() != ty.dtype) {
        if (t.dtype() == DType::F32 && narrow) {
          t = t.cast(ty.dtype);
        } else {
          std::cerr << "tsr-eval: " << inputs[i].file << ": a " << dtypeName(t.dtype()) << " tensor for %" << g->params[i]->name
                    << ": " << ty.str() << "\n";
          return 1;
        }
      }
      values.push_back(t);
    }
    // TSR_EXECUTOR=compiled runs the graph on the compiled CPU path instead (the same cases
    // then test it against PyTorch: the graph_eval_compiled test).
    const char *executor = std::getenv("TSR_EXECUTOR");
    std::vector<rt::Tensor> outs;
    if (executor && std::string(executor) == "compiled") {
      const char *device = std::getenv("TSR_DEVICE");
      exec::CompiledExecutor exec(device && *device && std::string(device) != "cpu" ? exec::cudaBackend(device) : exec::cpuBackend());
      outs = exec.run(*m, *g, values, sizes);
      const exec::CompiledExecutor::Stats st = exec.stats();
      std::cerr << "compiled: " << st.launches << " launches; steps: " << st.compiledSteps << " compiled, " << st.interpretedSteps
                << " interpreted, " << st.unknownDimSteps << " with unknown dims, " << st.librarySteps << " library\n";
      // (a line of its own: tests/ir/test_eval.py matches the line above whole)
      if (st.scanSteps) std::cerr << "compiled scans: " << st.scanSteps << " (each body run by its own compiled plan)\n";
    } else {
      outs = ir::evaluate(*m, *g, values, nullptr, sizes);
    }
    fs::create_directories(outDir);
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string name = "out" + std::to_string(i) + ".npy";
      rt::writeNpy((fs::path(outDir) / name).string(), outs[i]);
      const ir::Type &ty = g->outputs[i]->type;
      std::cout << name << " " << (ty.isKey() ? std::string("key") : std::string(dtypeName(outs[i].dtype()))) << " "
                << rt::formatShape(outs[i].shape()) << "\n";
    }
  } catch (const ir::EvalError &e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << "tsr-eval: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
