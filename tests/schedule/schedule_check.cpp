// Compiled CPU execution (exec/CompiledExecutor.h) against the reference evaluator on
// every graph of Graph IR text files.
//
//   schedule_check FILE.graph... [--sizes A=7,B=5;A=8,B=8] [--only NAME] [--jit-threshold N] [--device cuda[:N]]
//                  [--launches N]
//
// --launches: the whole run must launch exactly N programs (a check on what runs without a copy:
// views, reshapes of views).
//
// --device: the compiled side runs on that GPU (exec/cuda/CudaBackend.h; tools/gpu/suite.sh).
//
// --jit-threshold: the executor's (default 0, every step compiled at its first call); with a
// middle value, small steps of a graph run interpreted and large ones compiled, side by side.
//
// For each graph and each size assignment (symbols not named get distinct defaults; several
// assignments give odd, unit and power-of-two sizes), inputs are seeded random values: floats
// uniform in [-2, 2) rounded into their dtype, integers in [1, 3] (valid divisors and indices),
// bools at random, keys fixed. Both executors run; an assignment for which the reference fails
// (sizes that do not divide, say) is skipped, unless the compiled path succeeds there, which is a
// failure, as is any other disagreement: an error on one side only, a dtype or shape that
// differs, or an element outside tolerance. Tolerances, relative to the element and to the
// largest magnitude of the output (sums cancel): f32 1e-4 (f32 arithmetic against the
// evaluator's f64), f64 1e-10, tf32 and f16 4e-3, bf16 2^-6 (an op's rounding may land one bf16
// step apart), fp8 one step of the format; integers, bools and keys exactly; NaN matches NaN.
// Prints one line per graph and assignment and ends with "N passed, N failed".
//
// That compiled code ran is asserted, not assumed (a run on the evaluator alone would compare it
// with itself): per graph, with --jit-threshold 0 every kernel step must run compiled (a step that
// falls back to the evaluator fails the graph) and a graph with kernel steps must launch
// programs; with a middle threshold (--mixed) the whole run must have both compiled and
// interpreted steps. With --jit-threshold 0 a graph's programs are compiled as one batch before
// its first run (CompiledExecutor's compileAhead): a graph whose steps compiled programs only as
// the run reached them, none ahead, fails (--no-compile-ahead turns the batch off: the check's
// negative control). A graph on which the reference fails at every size prints
// `note FILE @GRAPH: no size assignment ran` (run_schedule_tests.py holds the list of expected
// ones). Each line ends with the graph's counts: launches, compiled/interpreted/library steps.
#include "ir/Text.h"
#include "ir/eval/Evaluator.h"
#include "exec/CompiledExecutor.h"
#include "exec/cpu/CpuBackend.h"
#include "exec/cuda/NvptxCompiler.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

using namespace tsr;

namespace {

std::vector<std::string> symbolsOf(const ir::Graph &g) {
  std::set<std::string> s;
  auto addDims = [&](const std::vector<Dim> &dims) {
    for (const Dim &d : dims)
      for (const std::string &n : d.symbols()) s.insert(n);
  };
  for (const ir::Value *p : g.params) addDims(p->type.dims);
  for (const ir::Op *op : g.ops) {
    for (const ir::Value *r : op->results) addDims(r->type.dims);
    for (const ir::Attr &a : op->attrs)
      if (auto *d = std::get_if<std::vector<Dim>>(&a.value)) addDims(*d);
  }
  return {s.begin(), s.end()};
}

bool isIdentifier(const std::string &s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

double tolerance(DType t) {
  switch (t) {
  case DType::F32: return 1e-4;
  case DType::F64: return 1e-10;
  case DType::TF32: case DType::F16: return 4e-3;
  case DType::BF16: return 1.0 / 64;
  case DType::F8E4M3: return 0.13;
  case DType::F8E5M2: return 0.26;
  default: return 0;
  }
}

// "" when equal within tolerance, else the first difference.
std::string compare(const rt::Tensor &got, const rt::Tensor &want) {
  if (got.dtype() != want.dtype()) return "dtype " + std::string(dtypeName(got.dtype())) + " vs " + std::string(dtypeName(want.dtype()));
  if (got.shape() != want.shape()) return "shape " + rt::formatShape(got.shape()) + " vs " + rt::formatShape(want.shape());
  const int64_t n = want.numel();
  if (!isFloat(want.dtype())) {
    for (int64_t i = 0; i < n; ++i)
      if (got.toI64(i) != want.toI64(i))
        return "element " + std::to_string(i) + ": " + std::to_string(got.toI64(i)) + " vs " + std::to_string(want.toI64(i));
    return "";
  }
  const double tol = tolerance(want.dtype());
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    double w = want.toF64(i);
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  }
  for (int64_t i = 0; i < n; ++i) {
    double a = got.toF64(i), b = want.toF64(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(b) || std::isinf(a)) {
      if (a == b) continue;
      // A finite result of the f64 reference may overflow f32 arithmetic's intermediates.
      if (!(std::isfinite(b) && std::fabs(b) > 1e30)) return "element " + std::to_string(i) + ": " + std::to_string(a) + " vs " + std::to_string(b);
      continue;
    }
    if (std::fabs(a - b) > tol * (std::fabs(b) + scale) + 1e-30)
      return "element " + std::to_string(i) + ": " + std::to_string(a) + " vs " + std::to_string(b) + " (scale " + std::to_string(scale) + ")";
  }
  return "";
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> files, sizeSets;
  std::string only;
  int64_t jitThreshold = 0;
  bool mixed = false, compileAhead = true;
  int64_t wantLaunches = -1; // --launches N: the run's kernel launches must be exactly N
  std::string device;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      std::string part;
      while (std::getline(ss, part, ';')) sizeSets.push_back(part);
    } else if (a == "--jit-threshold" && i + 1 < argc) {
      jitThreshold = std::stoll(argv[++i]);
    } else if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--mixed") {
      mixed = true;
    } else if (a == "--no-compile-ahead") {
      compileAhead = false;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--launches" && i + 1 < argc) {
      wantLaunches = std::stoll(argv[++i]);
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::cerr << "usage: schedule_check FILE.graph... [--sizes A=7,B=5;A=1] [--only NAME]\n";
    return 2;
  }
  // Default assignments: distinct odd sizes, unit sizes, powers of two.
  if (sizeSets.empty()) sizeSets = {"*=odd", "*=1", "*=8", "*=16"};

  int passed = 0, failed = 0;
  std::shared_ptr<exec::StepBackend> backend;
  if (!device.empty() && device != "cpu") {
    try {
      backend = exec::cudaBackend(device);
    } catch (const std::exception &e) {
      std::cout << "FAIL --device " << device << ": " << e.what() << "\n0 passed, 1 failed\n";
      return 1;
    }
  }
  if (!backend) backend = exec::cpuBackend();
  exec::CompiledExecutor exec(backend, nullptr, jitThreshold, compileAhead);
  for (const std::string &file : files) {
    std::ifstream in(file);
    std::stringstream buf;
    buf << in.rdbuf();
    std::unique_ptr<ir::Module> m;
    try {
      m = ir::parseModuleText(buf.str());
    } catch (const ir::IRError &e) {
      std::cout << "FAIL " << file << ": " << e.message << "\n";
      ++failed;
      continue;
    }
    for (auto &gp : m->graphs) {
      const ir::Graph &g = *gp;
      if (!only.empty() && g.name != only) continue;
      const std::vector<std::string> syms = symbolsOf(g);
      int ran = 0;
      bool bad = false;
      std::string lastRefErr;
      const exec::CompiledExecutor::Stats before = exec.stats();
      for (const std::string &set : sizeSets) {
        ir::SymbolSizes sizes;
        const int64_t odd[] = {7, 5, 11, 13, 3, 9, 17, 19, 23};
        for (size_t i = 0; i < syms.size(); ++i) {
          if (set == "*=odd") sizes[syms[i]] = odd[i % 9];
          else if (set.rfind("*=", 0) == 0) sizes[syms[i]] = std::stoll(set.substr(2));
          else sizes[syms[i]] = odd[i % 9];
        }
        if (set.rfind("*=", 0) != 0) {
          std::stringstream ss(set);
          std::string kv;
          while (std::getline(ss, kv, ',')) {
            auto eq = kv.find('=');
            if (eq != std::string::npos) sizes[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
          }
        }
        std::mt19937_64 rng(1234);
        std::vector<rt::Tensor> inputs;
        bool shapeOk = true;
        for (const ir::Value *p : g.params) {
          if (p->type.isKey()) { inputs.push_back(ir::keyTensor(rt::Key{12345, 678})); continue; }
          std::vector<int64_t> shape;
          for (const Dim &d : p->type.dims) {
            int64_t v = -1;
            try { v = ir::evaluateDim(d, sizes); } catch (const std::exception &) {}
            if (v < 0) shapeOk = false;
            shape.push_back(std::max<int64_t>(v, 0));
          }
          if (!shapeOk) break;
          const DType dt = p->type.dtype;
          const int64_t n = rt::shapeNumel(shape);
          if (shape.empty() && dt == DType::I64 && isIdentifier(p->name) && sizes.count(p->name)) {
            inputs.push_back(rt::Tensor::fromI64({}, dt, std::vector<int64_t>{sizes[p->name]}));
            continue;
          }
          if (isFloat(dt)) {
            std::uniform_real_distribution<double> u(-2, 2);
            std::vector<double> v(static_cast<size_t>(n));
            for (double &x : v) x = u(rng);
            inputs.push_back(rt::Tensor::fromF64(shape, dt, v));
          } else {
            std::uniform_int_distribution<int64_t> u(dt == DType::Bool ? 0 : 1, dt == DType::Bool ? 1 : 3);
            std::vector<int64_t> v(static_cast<size_t>(n));
            for (int64_t &x : v) x = u(rng);
            inputs.push_back(rt::Tensor::fromI64(shape, dt, v));
          }
        }
        if (!shapeOk) continue;
        std::vector<rt::Tensor> want, got;
        std::string refErr, compErr;
        try { want = ir::evaluate(*m, g, inputs, nullptr, sizes); } catch (const std::exception &e) { refErr = e.what(); }
        try { got = exec.run(*m, g, inputs, sizes); } catch (const std::exception &e) { compErr = e.what(); }
        std::string label = file + " @" + g.name + " [" + set + "]";
        if (!refErr.empty()) {
          lastRefErr = refErr;
          if (compErr.empty()) { std::cout << "FAIL " << label << ": the reference fails (" << refErr << ") but compiled code runs\n"; bad = true; }
          continue;
        }
        ++ran;
        if (!compErr.empty()) { std::cout << "FAIL " << label << ": " << compErr << "\n"; bad = true; continue; }
        for (size_t i = 0; i < want.size(); ++i) {
          std::string d = i < got.size() ? compare(got[i], want[i]) : "missing";
          if (!d.empty()) { std::cout << "FAIL " << label << ": output " << i << ": " << d << "\n"; bad = true; }
        }
        if (!bad) std::cout << "ok   " << label << "\n";
      }
      const exec::CompiledExecutor::Stats after = exec.stats();
      const uint64_t launched = after.launches - before.launches, compiled = after.compiledSteps - before.compiledSteps,
                     interpreted = after.interpretedSteps - before.interpretedSteps,
                     unknown = after.unknownDimSteps - before.unknownDimSteps, library = after.librarySteps - before.librarySteps,
                     ahead = after.compiledAhead - before.compiledAhead, lazily = after.compiledLazily - before.compiledLazily;
      const std::string counts = " (" + std::to_string(launched) + " launches; steps: " + std::to_string(compiled) + " compiled, " +
                                 std::to_string(interpreted) + " interpreted, " + std::to_string(unknown) + " with unknown dims, " +
                                 std::to_string(library) + " library; programs: " + std::to_string(ahead) + " compiled ahead, " +
                                 std::to_string(lazily) + " as reached)";
      if (ran == 0)
        std::cout << "note " << file << " @" << g.name << ": no size assignment ran on the reference: "
                  << (lastRefErr.empty() ? "no assignment gave every input a shape" : lastRefErr) << "\n";
      if (ran > 0 && !mixed && jitThreshold == 0 && interpreted > 0) {
        std::cout << "FAIL " << file << " @" << g.name << ": " << interpreted << " kernel steps fell back to the evaluator at JIT threshold 0" << counts << "\n";
        bad = true;
      }
      if (ran > 0 && !mixed && jitThreshold == 0 && compiled > 0 && ahead == 0 && lazily > 0) {
        std::cout << "FAIL " << file << " @" << g.name << ": programs compiled only as the run reached them, none ahead" << counts << "\n";
        bad = true;
      }
      if (ran > 0 && !mixed && compiled + interpreted > 0 && launched == 0) {
        std::cout << "FAIL " << file << " @" << g.name << ": kernel steps but no compiled program launched" << counts << "\n";
        bad = true;
      }
      if (ran > 0) std::cout << (bad ? "fail " : "done ") << file << " @" << g.name << counts << "\n";
      if (bad) ++failed; else if (ran > 0) ++passed;
    }
  }
  const exec::CompiledExecutor::Stats st = exec.stats();
  if (mixed && (st.compiledSteps == 0 || st.interpretedSteps == 0)) {
    std::cout << "FAIL --mixed: expected both compiled and interpreted steps, got " << st.compiledSteps << " compiled and "
              << st.interpretedSteps << " interpreted\n";
    ++failed;
  }
  std::cout << "totals: " << st.launches << " kernel launches; steps: " << st.compiledSteps << " compiled, " << st.interpretedSteps
            << " interpreted, " << st.unknownDimSteps << " with unknown dims, " << st.librarySteps << " library\n";
  if (wantLaunches >= 0 && int64_t(st.launches) != wantLaunches) {
    std::cout << "FAIL the run launched " << st.launches << " programs, not the " << wantLaunches << " expected\n";
    ++failed;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
