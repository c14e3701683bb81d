// The builtin functions of spec sections 6b, 7, 8, 9 and 10, listed in one registry: each entry
// has the contexts where it may be called, its typing rule, and its signature and one-line doc
// (which the language server shows). Typing rules see a CallSite: the argument types and their
// ranges, helpers to read constant arguments, and a way to call function values (tree_map, grad).
#pragma once

#include "sema/Program.h"
#include "sema/ShapeRules.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::sema {

/// Where a builtin may be called: bit flags.
enum Context : unsigned { InHost = 1, InGraph = 2, InKernel = 4, Anywhere = 7, HostAndGraph = 3 };

struct ArgInfo {
  TypeRef type;
  SourceRange range;
  const ast::Expr *expr = nullptr; // null for synthetic arguments (tree_map's leaves)
  std::string keyword;             // empty for positional arguments
  SourceRange keywordRange;        // `name=` of a keyword argument (for errors about the name)
};

class CallSite;
using BuiltinRule = std::function<TypeRef(CallSite &)>;

/// How a stage after the checker implements a builtin: the name of a rule in that stage's table
/// (graph code: ir/lower/builtins/; kernel code: ir/lower/kernel/Builtins.cpp; host code:
/// exec/host/HostBuiltins.cpp), and, for a rule that a family of builtins shares, the op it builds
/// (a spelling of ir/Ops.def or ir/tile/TileOps.def) and the keyword arguments that become the
/// op's string attributes, with their defaults (gelu's approximate="none"). An empty rule: the
/// stage has none.
struct StageRule {
  std::string rule;
  std::string op;
  std::vector<std::pair<std::string, std::string>> attrs;
  bool given() const { return !rule.empty(); }
};

/// A math builtin on one Python number (host code, and lowering where the value is known at
/// compile time): the function, and what it gives: a float (exp), a number of the argument's
/// kind (abs, relu, sign), or an int (floor, ceil, as Python's math module).
struct NumberRule {
  enum class Result : uint8_t { Float, KeepKind, ToInt };
  double (*f)(double) = nullptr;
  Result result = Result::Float;
};

/// A call of the builtin that the completeness test (tests/builtins/) runs in `contexts` (those of
/// the builtin's contexts it is written for; in a pending one, the checker must refuse it with
/// E0131: for a method, at its receiver where no value of that kind can exist, as a Schedule in
/// a function). Examples name the operands every context provides:
/// in host and graph code x, y (Tensor[2, 3, f32], positive), v (Tensor[3, f32]), m (Tensor[3, 4,
/// f32]), i (Tensor[2, 3, i64], values in [0, 3)), c (Tensor[2, 3, bool]), key (a Key), d (a dict
/// {"w": x, "b": v}) and n (the int 3); in kernel code x, y (f32 tiles [16]), a, b (f32 tiles
/// [16, 16]), X, Y (f32 tensors [16]), A (an f32 tensor [16, 16]), sh (a shared f32 tile [16]) and
/// n; everywhere the graph functions f(t) (tanh(t) * 2.0) and loss(t) (sum(t * t)). A file that an
/// example reads or writes is in the test's working directory ("x.npy", "rows.csv"). An example
/// is an expression, or a `for` statement on one line (a loop range: tile.range).
struct BuiltinExample {
  unsigned contexts;
  std::string call;
};

/// One builtin, declared once: everything a stage needs to check, lower, evaluate or describe a
/// call of it (as a JAX primitive carries its abstract evaluation, lowering and rules).
struct BuiltinInfo {
  std::string name;      // "exp", "tile.load", "random.normal", "astype" (methods: receiver in self)
  unsigned contexts = Anywhere;
  BuiltinRule rule;      // the checker's typing rule
  std::string signature; // "exp(x) -> Tensor"
  std::string doc;       // one line
  bool isNamespace = false; // `tile`, `random`, `dist`: only their members are callable
  /// A builtin that programs use as a value, not by calling it (gpu, indexed as gpu[i]): the name
  /// has the type the typing rule gives for no arguments, and the checker refuses the name where
  /// the entry is pending, as it refuses calls.
  bool isValue = false;
  bool differentiable = true; // in graph code: autodiff differentiates through its ops

  StageRule graph;       // a call in graph code -> Graph IR: an op, or a composite of them
  StageRule kernel;      // a call in kernel code -> Tile IR
  StageRule host;        // a call in host code, on host values ("graph": run as a one-call graph)
  std::string composite; // graph.rule "composite": an expression of other builtins over the
                         // signature's parameters (softplus), lowered as if it were written inline
  std::optional<NumberRule> number; // math builtins: on a Python number
  /// A method that adds to its receiver, a list: one element (its last argument: l.append) or
  /// the elements of its last argument (l.extend). The checker widens a local list's type by them.
  enum class Grows : uint8_t { No, Element, Elements };
  Grows grows = Grows::No;
  std::vector<BuiltinExample> examples;
  /// Contexts whose stage does not implement the builtin yet, each with the reason, which the
  /// user reads: the checker refuses a call there (E0131, at the call, with the reason), so that
  /// no program type-checks and then fails in a later stage. The completeness test requires the
  /// refusal, and a rule in every other context the builtin may be called in.
  std::vector<std::pair<unsigned, std::string>> pending;

  // Builders for the registration lines of sema/builtins/*.cpp, read as one declaration:
  //   add("exp", Anywhere, unaryRule(...), "exp(x) -> Tensor", "e raised to x, elementwise")
  //       .inGraph("unary", "exp").inKernel("unary", "exp").inHost("math").example("exp(x)");
  BuiltinInfo &inGraph(std::string rule, std::string op = {}, std::vector<std::pair<std::string, std::string>> attrs = {});
  BuiltinInfo &inKernel(std::string rule, std::string op = {}, std::vector<std::pair<std::string, std::string>> attrs = {});
  BuiltinInfo &inHost(std::string rule);
  BuiltinInfo &composes(std::string body);
  BuiltinInfo &onNumbers(double (*f)(double), NumberRule::Result result);
  BuiltinInfo &growsReceiver(Grows g);
  BuiltinInfo &example(std::string call, unsigned contexts = Anywhere);
  BuiltinInfo &notYet(unsigned contexts, std::string why);
  BuiltinInfo &asValue();
  /// The reason `context` is pending, or null.
  const std::string *pendingIn(unsigned context) const;
};

/// An elementwise math builtin (exp, cos, floor, abs, ...) applied to a Python number, as host
/// code and lowering compute it: the value, and whether it is an int. nullopt when `b` has no
/// NumberRule.
struct NumberResult {
  double value;
  bool isInt;
};
std::optional<NumberResult> applyToNumber(const BuiltinInfo &b, double x, bool xIsInt);

/// The calling context of a builtin.
class CallSite {
public:
  std::string name;              // as registered
  SourceRange range;             // the whole call
  SourceRange calleeRange;       // the callee expression
  std::vector<ArgInfo> args;     // positional, in order
  std::vector<ArgInfo> keywords; // keyword arguments, in order
  TypeRef self;                  // a method's receiver (x.astype(...)), else null
  unsigned context = InHost;     // where the call stands (one of InHost, InGraph, InKernel)
  DiagnosticEngine *diags = nullptr;
  /// Calls a function value (user function, lambda, builtin) with argument types; returns the
  /// result type. Reports errors at this call site.
  std::function<TypeRef(const TypeRef &callee, const std::vector<TypeRef> &args)> callValue;
  /// The function whose body is being checked (null at module level).
  const FunctionInfo *enclosing = nullptr;

  Reporter reporter() const { return Reporter{*diags, range, {}}; }
  Reporter reporterAt(SourceRange r) const { return Reporter{*diags, r, {}}; }

  /// Checks the argument count and keyword names: `positional` names the parameters that may be
  /// given by position (in order), `required` how many of them must be given, `keywordOnly` the
  /// names that may only be given by keyword. Reports TooManyArgs / MissingArg / UnknownKeyword /
  /// DuplicateArg and returns false on error.
  bool expect(const std::vector<std::string> &positional, size_t required,
              const std::vector<std::string> &keywordOnly = {});
  /// The argument for parameter `name` at position `pos` (by position or keyword), or null.
  const ArgInfo *arg(size_t pos, std::string_view name) const;
  const ArgInfo *kwarg(std::string_view name) const;

  /// Readers of compile-time arguments. Each reports ArgKind at the argument (naming `what`) when
  /// the argument has the wrong kind, and returns nullopt; a right-kind but unknown value gives
  /// nullopt without a report, unless `required` (then NotCompileTime).
  std::optional<int64_t> constInt(const ArgInfo *a, std::string_view what, bool required = false);
  std::optional<Dim> intDim(const ArgInfo *a, std::string_view what);          // an int (maybe symbolic)
  std::optional<std::vector<Dim>> shape(const ArgInfo *a, std::string_view what); // int or tuple/list of ints
  std::optional<std::vector<int64_t>> axes(const ArgInfo *a, std::string_view what); // int or tuple of ints
  std::optional<DType> dtype(const ArgInfo *a, std::string_view what, Policies *policies = nullptr);
  std::optional<bool> constBool(const ArgInfo *a, std::string_view what);
  std::optional<std::string> constStr(const ArgInfo *a, std::string_view what);
  /// Requires a tensor (or tile in kernels); reports ArgKind otherwise. Unknown passes as null
  /// without a report.
  TypeRef tensorArg(const ArgInfo *a, std::string_view what);

  /// Reports ArgKind: "`name` expects {expected} for `{what}`, not {actual type}".
  void wrongKind(const ArgInfo *a, std::string_view expected, std::string_view what);
};

/// Looks up a builtin by qualified name ("exp", "tile.load", "random.normal"). Null if none.
const BuiltinInfo *findBuiltin(std::string_view name);
/// Methods of builtin types: ("astype", Tensor), ("with_block", Schedule), ("items", Dict), ...
const BuiltinInfo *findMethod(TypeKind receiver, std::string_view name);
/// All builtins, for completion and documentation.
const std::vector<BuiltinInfo> &allBuiltins();
/// All methods, with their receiver kinds.
const std::vector<std::pair<TypeKind, BuiltinInfo>> &allMethods();
/// How a message names a context: "host code", "graph functions", "kernels".
const char *contextPhrase(unsigned context);
/// Names of the builtin namespaces available without import: tile, random, dist.
bool isBuiltinNamespace(std::string_view name);
/// Appends the kernel-side tile operations (sema/builtins/Tile.cpp) to the registry.
void registerTileBuiltins(std::vector<BuiltinInfo> &out);

/// The mesh a module makes at module level (`mesh = dist.mesh(("dp", "tp"), (2, 2))`, spec 10),
/// read from its literal arguments: what the checker names axes against (E0701) and what lowering
/// sizes collectives by when no run has made the mesh (tsrc). nullopt when the module makes none
/// or its arguments are not literals.
struct StaticMesh {
  std::vector<std::string> axes;
  std::vector<int64_t> shape;
  SourceRange range; // the dist.mesh call
};
std::optional<StaticMesh> staticMesh(const ModuleInfo &m);

namespace testing {
/// Test-only: changes the registry's entry `name` (a method: "Tensor.sum") in place, before any
/// stage has used it, so that a negative control can remove a piece of an entry and see the
/// completeness test fail (tests/builtins). Returns false when there is no such entry.
bool editBuiltin(std::string_view name, const std::function<void(BuiltinInfo &)> &edit);
} // namespace testing

} // namespace tsr::sema
