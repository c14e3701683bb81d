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

struct BuiltinInfo {
  std::string name;      // "exp", "tile.load", "random.normal", "astype" (methods: receiver in self)
  unsigned contexts = Anywhere;
  BuiltinRule rule;
  std::string signature; // "exp(x) -> Tensor"
  std::string doc;       // one line
  bool isNamespace = false; // `tile`, `random`, `dist`: only their members are callable
  bool differentiable = true;
};

/// An elementwise math builtin (exp, cos, floor, abs, ...) applied to a Python number, as host
/// code and the checker's constant folding compute it: the value, and whether it is an int (floor
/// and ceil give ints; abs, relu and sign keep the number's kind; the others give floats).
/// nullopt when `name` is not such a builtin.
struct NumberResult {
  double value;
  bool isInt;
};
std::optional<NumberResult> unaryOnNumber(std::string_view name, double x, bool xIsInt);

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
/// Names of the builtin namespaces available without import: tile, random, dist.
bool isBuiltinNamespace(std::string_view name);
/// Appends the kernel-side tile operations (sema/builtins/Tile.cpp) to the registry.
void registerTileBuiltins(std::vector<BuiltinInfo> &out);

} // namespace tsr::sema
