// ctest builtin_completeness: walks the builtin registry (sema/Builtins.h) and fails on any piece
// of an entry that a stage lacks, so that a forgotten piece fails CI instead of a user's program.
//
//     builtin_completeness GRAD_EXPRESSIONS [--only NAME]
//
// (builtin_completeness.py runs it, with the tsr expressions of the finite-difference checks,
// tests/autodiff/test_grad.py, one a line in GRAD_EXPRESSIONS.)
//
// For every entry (functions and methods; namespaces have only members):
// - hover: a signature that names it and a one-line doc;
// - each context the entry may be called in (host, graph, kernel) has the stage's rule: graph
//   code's is a rule of ir/lower/builtins (a composite has its body), host code's a rule of
//   exec/host (the rule "graph", a one-call graph, needs a graph rule), kernel code's a rule of
//   ir/lower/kernel; or the context is pending with a reason (BuiltinInfo::pending, listed in the
//   output), and then the checker must refuse the entry's examples there with E0131 and that
//   reason, so that no program type-checks and then fails in a later stage;
// - the entry has an example for each context, and every example runs where it is written for:
//   in host code it is evaluated by the interpreter of `tsr run` (on the reference evaluator), in
//   a graph function it is lowered to Graph IR (and the pipeline run on it), in a kernel it is
//   lowered to Tile IR;
// - a differentiable entry of graph code whose rule builds an op has that op's gradient rule
//   (ir/autodiff), and is called in the expressions of the finite-difference checks
//   (GRAD_EXPRESSIONS), which compare its gradients with torch's and with differences.
//
// TSR_TEST_BUILTIN_BREAK=NAME:PIECE removes one piece of the entry NAME before the walk (graph,
// host, kernel: the stage's rule; kernel-misnamed: a kernel rule that kernel lowering lacks; doc;
// example: its examples; diff: takes it out of the gradient cases' view; pending: its pending
// contexts, which then lack rules; refusal: its pending contexts as the checker sees them, while
// the walk still expects them refused): the negative controls in tests/CMakeLists.txt require
// the walk then to fail.
#include "exec/cpu/CpuBackend.h"
#include "exec/host/Interpreter.h"
#include "frontend/Parser.h"
#include "ir/autodiff/GradRules.h"
#include "ir/lower/LowerGraph.h"
#include "ir/lower/LowerKernel.h"
#include "ir/tile/TileIR.h"
#include "sema/Builtins.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tsr;
using sema::BuiltinInfo;

namespace {

int failures = 0;

void fail(const std::string &entry, const std::string &why) {
  ++failures;
  std::cout << "FAIL " << entry << ": " << why << "\n";
}

const char *contextWord(unsigned c) { return c == sema::InHost ? "host" : c == sema::InGraph ? "graph" : "kernel"; }

// The operands the examples name (sema/Builtins.h, BuiltinExample), in each context.
const char *kHostSetup = R"(def main():
    x = tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    y = tensor([[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]])
    v = tensor([1.0, 2.0, 3.0])
    m = tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]])
    i = tensor([[0, 1, 2], [2, 1, 0]], dtype=i64)
    c = x > 2.5
    key = random.key(0)
    d = {"w": x, "b": v}
    n = 3
)";

const char *kGraphSetup = R"(@jit
def g(x: Tensor[2, 3, f32], y: Tensor[2, 3, f32], v: Tensor[3, f32], m: Tensor[3, 4, f32], i: Tensor[2, 3, i64],
      c: Tensor[2, 3, bool], key: Key):
    d = {"w": x, "b": v}
    n = 3
)";

const char *kKernelSetup = R"(@kernel
def k(X: Tensor[16, f32], Y: Tensor[16, f32], A: Tensor[16, 16, f32]):
    x = tile.load(X[0:16])
    y = tile.load(Y[0:16]) + 1.0
    a = tile.load(A[0:16, 0:16])
    b = tile.load(A[0:16, 0:16]) * 2.0
    sh = tile.alloc_shared((16,), f32)
    n = 3
)";

const char *kKernelLaunch = R"(

def main():
    X = zeros((16,))
    Y = zeros((16,))
    A = zeros((16, 16))
    k[(1,)](X, Y, A)
)";

// The functions that examples of function transforms take.
const char *kFunctions = R"(@jit
def f(t):
    return tanh(t) * 2.0


@jit
def loss(t):
    return sum(t * t)


)";

std::string programFor(unsigned ctx, const std::vector<std::string> &calls) {
  std::string s = std::string(kFunctions) + (ctx == sema::InHost ? kHostSetup : ctx == sema::InGraph ? kGraphSetup : kKernelSetup);
  int k = 0;
  for (const std::string &c : calls) {
    if (c.rfind("for ", 0) == 0) s += "    " + c + "\n";
    else s += "    r" + std::to_string(k++) + " = " + c + "\n";
  }
  if (ctx == sema::InGraph) s += "    return x\n";
  if (ctx == sema::InKernel) s += kKernelLaunch;
  return s;
}

std::string rendered(const DiagnosticEngine &d) {
  std::ostringstream os;
  d.render(os);
  return os.str();
}

/// Checks the program and runs the context's stage on it; the empty string when it went through,
/// else what went wrong.
std::string runStage(unsigned ctx, const fs::path &file, const std::string &text) {
  { std::ofstream(file) << text; }
  SourceManager sm;
  DiagnosticEngine diags(sm);
  auto program = sema::checkProgram(sm, diags, file.string(), sema::defaultCheckOptions(TSR_SOURCE_STDLIB));
  if (diags.hasErrors() || diags.hasInternalError()) return "the checker rejects the example:\n" + rendered(diags);
  if (ctx == sema::InHost) {
    auto exec = host::makeReferenceExecutor();
    std::ostringstream out, err;
    host::Interpreter interp(*program, *exec, out, exec::cpuBackend(1));
    int rc = interp.runMain("main", {}, err);
    if (rc != 0) return "host code does not evaluate it (exit " + std::to_string(rc) + "):\n" + err.str();
    return {};
  }
  auto graphs = ir::lowerProgram(*program, diags);
  if (diags.hasErrors() || diags.hasInternalError()) return "graph lowering fails:\n" + rendered(diags);
  if (ctx == sema::InGraph) {
    if (graphs->graphs.empty()) return "graph lowering made no graph of `g`";
    return {};
  }
  auto kernels = ir::lowerProgramKernels(*program, *graphs, diags);
  if (diags.hasErrors() || diags.hasInternalError()) return "kernel lowering fails:\n" + rendered(diags);
  if (!kernels || kernels->functions.empty()) return "kernel lowering made no tile function of `k`";
  return {};
}

/// Checks the program of a pending context's examples: the checker must refuse each call with
/// E0131 naming `name` (for a method: or its receiver, when no value of the receiver's kind can
/// exist there, as a Schedule) and giving the entry's reason, and report nothing else. The empty
/// string when it did.
std::string refusedByChecker(const fs::path &file, const std::string &text, size_t calls, const std::string &name, bool method,
                             const std::string &why) {
  { std::ofstream(file) << text; }
  SourceManager sm;
  DiagnosticEngine diags(sm);
  sema::checkProgram(sm, diags, file.string(), sema::defaultCheckOptions(TSR_SOURCE_STDLIB));
  std::string out = rendered(diags);
  size_t refused = 0, others = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("error[E0131]") != std::string::npos && line.find(why) != std::string::npos &&
        (method || line.find("`" + name + "` is not implemented") != std::string::npos))
      ++refused;
    else if (line.find("error[") != std::string::npos || line.find("internal error") != std::string::npos) ++others;
  }
  if (refused >= calls && others == 0) return {};
  return "the checker does not refuse it with E0131 and the reason (\"" + why + "\"), so a program type-checks and then fails:\n" +
         (out.empty() ? std::string("(no diagnostics)\n") : out);
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool calledIn(const std::string &text, const std::string &name, bool method) {
  // `name(` as a call: after a character that cannot end an identifier (or, for a method, a dot).
  std::string pat = method ? "\\." + name + "\\(" : "(^|[^A-Za-z0-9_.])" + name + "\\(";
  return std::regex_search(text, std::regex(pat));
}

// The pending contexts the walk expects: the entry's, except for an entry broken with
// `refusal`, whose pending contexts the checker no longer sees but the walk still expects.
std::map<std::string, std::vector<std::pair<unsigned, std::string>>> expectedPending;

const std::string *pendingIn(const std::string &label, const BuiltinInfo &b, unsigned ctx) {
  auto it = expectedPending.find(label);
  for (auto &[c, why] : it == expectedPending.end() ? b.pending : it->second)
    if (c & ctx) return &why;
  return nullptr;
}

bool graphRuleGiven(const BuiltinInfo &b) {
  if (!b.graph.given()) return false;
  return b.graph.rule == "composite" ? !b.composite.empty() : ir::hasGraphBuiltinRule(b.graph.rule);
}

void walk(const std::string &label, const BuiltinInfo &b, bool method, const std::string &gradCases, const fs::path &dir) {
  std::string shortName = b.name.substr(b.name.rfind('.') == std::string::npos ? 0 : b.name.rfind('.') + 1);
  if (b.signature.empty() || b.signature.find(shortName) == std::string::npos)
    fail(label, "no signature that names it, for hover and signature help (\"" + b.signature + "\")");
  if (b.doc.empty()) fail(label, "no doc line for hover");

  for (unsigned ctx : {unsigned(sema::InHost), unsigned(sema::InGraph), unsigned(sema::InKernel)}) {
    if (!(b.contexts & ctx)) continue;
    const std::string *pending = pendingIn(label, b, ctx);
    if (pending) std::cout << "pending " << label << " in " << contextWord(ctx) << " code: " << *pending << "\n";
    bool rule = true;
    if (pending) {
    } else if (ctx == sema::InGraph) {
      rule = graphRuleGiven(b);
    } else if (ctx == sema::InHost) {
      rule = b.host.given() && host::hasHostBuiltinRule(b.host.rule);
      // The rule "graph" runs the call as a graph of the one call: graph code must lower it.
      if (rule && b.host.rule == "graph" && (!(b.contexts & sema::InGraph) || pendingIn(label, b, sema::InGraph) || !graphRuleGiven(b)))
        fail(label, "callable in host code, which runs it as a one-call graph, and graph code has no rule for it");
    } else {
      rule = b.kernel.given() && ir::hasKernelBuiltinRule(b.kernel.rule);
    }
    if (!rule)
      fail(label, std::string("callable in ") + contextWord(ctx) + " code, and " + contextWord(ctx) +
                      " code has no rule for it (" +
                      (ctx == sema::InGraph ? b.graph.rule : ctx == sema::InHost ? b.host.rule : b.kernel.rule) +
                      "); a stage that cannot do it yet lists it with notYet(context, why)");
    std::vector<std::string> calls;
    for (auto &e : b.examples)
      if (e.contexts & ctx) calls.push_back(e.call);
    if (calls.empty()) {
      fail(label, std::string("no example in ") + contextWord(ctx) + " code");
      continue;
    }
    std::string file = label;
    for (char &ch : file) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    std::string text = programFor(ctx, calls);
    fs::path path = dir / (file + "_" + contextWord(ctx) + ".tsr");
    std::string why = pending ? refusedByChecker(path, text, calls.size(), b.name, method, *pending) : runStage(ctx, path, text);
    if (!why.empty()) fail(label, std::string("in ") + contextWord(ctx) + " code: " + why + "the program:\n" + text);
  }

  // Gradients: a differentiable entry of graph code that builds an op has the op's rule, and the
  // finite-difference checks call it.
  if ((b.contexts & sema::InGraph) && b.differentiable && !pendingIn(label, b, sema::InGraph) && !b.isNamespace &&
      (!b.graph.op.empty() || b.graph.rule == "composite")) {
    if (!b.graph.op.empty()) {
      auto k = ir::opFromSpelling(b.graph.op);
      if (!k) fail(label, "its graph rule names no op of ir/Ops.def (\"" + b.graph.op + "\")");
      else if (ir::autodiff::gradRule(*k).nondiff)
        fail(label, "differentiable, but its op `" + b.graph.op + "` has no derivative rule (ir/autodiff/GradRules.cpp)");
    }
    if (!calledIn(gradCases, shortName, method))
      fail(label, "differentiable, and no case of the finite-difference checks (tests/autodiff/test_grad.py) calls it");
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << "usage: builtin_completeness GRAD_EXPRESSIONS [--only NAME]\n";
    return 2;
  }
  std::string gradCases = readFile(argv[1]);
  if (gradCases.empty()) {
    std::cerr << "builtin_completeness: cannot read " << argv[1] << "\n";
    return 2;
  }
  std::string only = argc >= 4 && std::string(argv[2]) == "--only" ? argv[3] : "";

  std::string breakName, breakPiece;
  if (const char *brk = std::getenv("TSR_TEST_BUILTIN_BREAK")) {
    std::string s = brk;
    size_t colon = s.rfind(':');
    breakName = s.substr(0, colon);
    breakPiece = colon == std::string::npos ? "" : s.substr(colon + 1);
    bool found = sema::testing::editBuiltin(breakName, [&](BuiltinInfo &b) {
      if (breakPiece == "graph") b.graph = {};
      else if (breakPiece == "host") b.host = {};
      else if (breakPiece == "kernel") b.kernel = {};
      else if (breakPiece == "kernel-misnamed") b.kernel.rule = "no_such_rule";
      else if (breakPiece == "pending") b.pending.clear();
      else if (breakPiece == "refusal") {
        if (b.pending.empty()) {
          std::cerr << "builtin_completeness: TSR_TEST_BUILTIN_BREAK: `" << breakName << "` is pending nowhere\n";
          std::exit(2);
        }
        expectedPending[breakName] = b.pending;
        b.pending.clear();
      }
      else if (breakPiece == "doc") b.doc.clear();
      else if (breakPiece == "example") b.examples.clear();
      else if (breakPiece == "diff") {} // below: the gradient cases without its calls
      else {
        std::cerr << "builtin_completeness: TSR_TEST_BUILTIN_BREAK: no piece `" << breakPiece << "`\n";
        std::exit(2);
      }
    });
    if (!found) {
      std::cerr << "builtin_completeness: TSR_TEST_BUILTIN_BREAK: no builtin `" << breakName << "`\n";
      return 2;
    }
    if (breakPiece == "diff") gradCases = std::regex_replace(gradCases, std::regex("\\b" + breakName + "\\("), "(");
    std::cout << "broken on purpose: the " << breakPiece << " of `" << breakName << "`\n";
  }

  fs::path dir = fs::temp_directory_path() / ("tsr-builtins-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // The files that examples read.
  {
    std::ofstream(dir / "rows.csv") << "1,2,3\n4,5,6\n";
    std::ofstream(dir / "make_inputs.tsr") << "def main():\n    save(\"x.npy\", tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))\n";
  }
  fs::path cwd = fs::current_path();
  fs::current_path(dir);

  int code = runWithLargeStack(size_t(512) << 20, [&]() -> int {
    if (std::string why = runStage(sema::InHost, dir / "make_inputs.tsr", readFile((dir / "make_inputs.tsr").string())); !why.empty()) {
      std::cout << "FAIL setup: " << why << "\n";
      return 1;
    }
    size_t entries = 0;
    for (const BuiltinInfo &b : sema::allBuiltins()) {
      if (b.isNamespace) continue;
      if (!only.empty() && b.name != only) continue;
      ++entries;
      walk(b.name, b, false, gradCases, dir);
    }
    for (const auto &[kind, b] : sema::allMethods()) {
      std::string label = std::string(sema::typeKindName(kind)) + "." + b.name;
      if (!only.empty() && label != only) continue;
      ++entries;
      walk(label, b, true, gradCases, dir);
    }
    std::cout << entries << " builtins walked, " << failures << " failures\n";
    return failures == 0 && entries > 0 ? 0 : 1;
  });
  fs::current_path(cwd);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return code;
}
