// The host interpreter of `tsr run` (spec section 9): runs a checked program's `main` statement
// by statement. Host values are Python-like (numbers, strings, lists, tuples, dicts, functions)
// and tensors. Tensor work leaves the interpreter as graphs: a call of a graph function compiles
// one graph per argument signature (cached); a tensor operation written in host code (`2.5 * x +
// y`, `sum(x)`, `x[0:4]`) is lowered as a one-expression graph with its operands as parameters
// (cached by operand types), and both run on the graph executor.
#pragma once

#include "ir/IR.h"
#include "runtime/Random.h"
#include "runtime/Tensor.h"
#include "sema/Program.h"

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::ir { class KernelRunner; }
namespace tsr::exec { class KernelLauncher; class StepBackend; }

namespace tsr::host {

struct Value;
using ValueRef = std::shared_ptr<Value>;
struct Env;

struct Value {
  enum class K : uint8_t { None, Bool, Int, Float, Str, Tensor, Key, List, Tuple, Dict, Function, Builtin, Module, Lambda, Range, DType, Transform };
  K k = K::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  rt::Tensor t;
  rt::Key key{};
  std::vector<ValueRef> items;                        // List, Tuple
  std::vector<std::pair<std::string, ValueRef>> dict; // Dict (string keys, in insertion order)
  const sema::FunctionInfo *fn = nullptr;
  const sema::BuiltinInfo *builtin = nullptr;
  ValueRef self;                                      // a method's receiver
  const sema::ModuleInfo *module = nullptr;
  const ast::Lambda *lambda = nullptr;
  std::shared_ptr<Env> closure;
  int64_t start = 0, stop = 0, step = 1;              // Range
  DType dtype = DType::F32;                           // DType
  std::string progress;                               // progress(xs, desc=...): a loop reports its progress
  Policies policies;
  // Transform: grad, value_and_grad or checkpoint of `inner` (argnums as given, `argnumsTuple`
  // when given as a tuple), or vjp's pullback of `inner` at the primals in `items`.
  sema::Transform transform = sema::Transform::None;
  ValueRef inner;
  std::vector<int> argnums;
  bool argnumsTuple = false;
  bool hasAux = false; // has_aux=True
  ValueRef inAxes, outAxes; // vmap's axes (ints, None and their tuples, lists and dicts); null: 0
  // Tensor: the mesh axes whose ranks hold different data of it (a dist.tensor shard, or a graph's
  // result computed from one: exec/host/TensorParallel.h); empty: the same on every rank there.
  std::set<std::string> varying;
};

/// Runs graphs: the reference evaluator today, compiled code as it lands.
class GraphExecutor {
public:
  virtual ~GraphExecutor() = default;
  virtual std::vector<rt::Tensor> run(const ir::Module &m, const ir::Graph &g, const std::vector<rt::Tensor> &inputs) = 0;
  /// Runs the graphs' kernel_call ops; the interpreter sets it (to its kernel launcher) when a
  /// caller has not.
  const ir::KernelRunner *kernels = nullptr;
};
std::unique_ptr<GraphExecutor> makeReferenceExecutor();

/// Whether host code has the rule that a registry entry names (sema::BuiltinInfo::host.rule):
/// what the completeness test of the registry asks (tests/builtins).
bool hasHostBuiltinRule(std::string_view rule);

/// A failure of the running program: a message and where it happened. `exitCode` is the spec's
/// (1 for errors of the program, 3 for errors on the device). An error the checker also reports
/// where it can see it (a shape mismatch first met when the program runs) has its stable `code`
/// (E0302) and notes, printed after the source line as the checker prints them.
struct RuntimeError {
  std::string message;
  SourceRange range;
  int exitCode = 1;
  std::string code;
  std::vector<std::string> notes;
};

class Interpreter {
public:
  /// `kernelBackend`: where `@kernel` launches run (required; tsr run passes the device its
  /// graphs run on).
  Interpreter(const sema::Program &p, GraphExecutor &exec, std::ostream &out,
              std::shared_ptr<exec::StepBackend> kernelBackend);
  ~Interpreter();
  /// Runs `entry` (main) with command-line flags for its parameters (`--steps 200`, `--lr=1e-3`,
  /// `--help`). Returns the exit code; errors are printed as diagnostics to `err`.
  int runMain(const std::string &entry, const std::vector<std::string> &flags, std::ostream &err);

  // For embedders (python/: the `tessera` package, exec/host/Embed.cpp).
  /// The main module's function `name` as a value call() takes; null when it has none.
  ValueRef function(const std::string &name) const;
  /// Calls `callee` with positional `args` as host code would (a graph function compiles and runs
  /// its graph for the arguments' shapes). Throws RuntimeError.
  ValueRef call(const ValueRef &callee, const std::vector<ValueRef> &args);
  /// vjp(callee, *args): the pair (result, pullback); call(pullback, {cotangent}) gives the
  /// cotangents of the arguments. Throws RuntimeError.
  ValueRef vjp(const ValueRef &callee, const std::vector<ValueRef> &args);
  /// `e` as runMain prints it: the location, `error[CODE]: message`, the source line, the notes.
  std::string describe(const RuntimeError &e) const;

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace tsr::host
