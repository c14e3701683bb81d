// Lowering of graph functions (`@jit`) into Graph IR by compile-time evaluation: the body runs
// over a mix of compile-time values (ints and sizes, strings, bools, dtypes, tuples, dicts,
// functions) and tensors (IR values). Compile-time `if`s take one branch, loops over
// compile-time ranges unroll, calls to graph functions and @inline helpers are inlined, and
// every tensor operation becomes an op carrying its source location.
#pragma once

#include "ir/IR.h"
#include "sema/Program.h"

#include <memory>
#include <string_view>

namespace tsr::ir {

/// A source range as IR text locates it: the file (the standard library's as `stdlib/...`
/// wherever it is installed, so that printed IR is the same on every machine), line and column.
/// `valid` is false for a range outside the program's files.
struct IRSourcePoint {
  std::string path;
  uint32_t line = 0, col = 0;
  bool valid = false;
};
IRSourcePoint irSourcePoint(const sema::Program &p, SourceRange r);

/// Lowers `fn` for parameters of the given types into a graph named `name`, added to `m`.
/// Throws CompileError for what lowering does not support yet.
struct CompileError {
  std::string what; // "a `while` loop", used as "{what} cannot be compiled yet"
  SourceRange range;
  /// Errors of the program that only lowering can see (autodiff's, docs/diagnostics.md) have a
  /// kind of their own, its arguments, and notes; `what` is then the formatted message.
  DiagKind kind = DiagKind::NotCompilableYet;
  std::vector<std::string> args;
  std::vector<std::string> notes;
};
/// `result`, when given, receives the structure of the function's value (as lowerEagerExpression's),
/// or null when it has none that host code can rebuild.
Graph *lowerGraphFunction(Module &m, const sema::Program &p, const sema::FunctionInfo &fn,
                          const std::vector<std::pair<std::string, sema::TypeRef>> &params, const std::string &name,
                          sema::TypeRef *result = nullptr);

/// Eager host operations (`tsr run`): one graph for an expression of host code whose free names
/// have the given types. Tensors become the graph's parameters, in the order given; Python
/// numbers, strings, dtypes, None and tuples of them (types carrying their values) are
/// compile-time values folded in. `result` receives the structure of the expression's value: a
/// type whose tensors are the graph's outputs in order and whose other leaves carry their values.
/// Throws CompileError when the expression is not something a graph computes.
struct EagerInput {
  std::string name;
  sema::TypeRef type;
};
Graph *lowerEagerExpression(Module &m, const sema::Program &p, const sema::ModuleInfo &mod, ast::Expr *e,
                            const std::vector<EagerInput> &inputs, const std::string &graphName,
                            sema::TypeRef *result);

/// Lowers the graph functions of the program's main module: once for the signature when every
/// parameter is annotated, and once per specialization the checker recorded. What cannot be
/// lowered yet is reported as NotCompilableYet. Runs the Graph IR pipeline on each graph.
std::unique_ptr<Module> lowerProgram(const sema::Program &p, DiagnosticEngine &diags);

/// Whether graph lowering has the rule that a registry entry names (sema::BuiltinInfo::graph.rule):
/// what the completeness test of the registry asks (tests/builtins).
bool hasGraphBuiltinRule(std::string_view rule);

} // namespace tsr::ir
