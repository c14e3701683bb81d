// The checker of function bodies and module-level code (private to sema/).
//
// One FunctionChecker checks one body once: the generic check of a function (its parameters
// typed by their annotations, Unknown where there are none), a specialization (parameters typed
// by one call's arguments), a module's top level, or a lambda's body inside its enclosing scope.
// Statements are checked in order with flow-sensitive local types; branches merge with `join`;
// branches whose condition is known at compile time are not checked (they are not compiled).
#pragma once

#include "sema/Builtins.h"
#include "sema/Program.h"

#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace tsr::sema {

class ProgramChecker;

struct Local {
  TypeRef type;
  SourceRange decl;
  bool defined = true; // false: assigned somewhere in the function, but not yet on this path
};

/// What encloses the code being checked: decides what a body may contain (spec section 3).
enum class BodyContext : uint8_t { Module, Host, Graph, Kernel };

class FunctionChecker {
public:
  FunctionChecker(ProgramChecker &pc, ModuleInfo &mod, const FunctionInfo *fn, BodyContext ctx, bool record);

  /// Checks a function body; parameters are bound first with `bindParam`.
  void bindParam(const std::string &name, TypeRef type, SourceRange decl);
  void checkBody(const ast::Block &body);
  TypeRef returnType() const { return returnType_ ? returnType_ : T::none(); }
  bool sawReturn() const { return sawReturn_; }

  /// Module level: checks one statement of the top level (constants, imports, definitions).
  void checkModuleStmt(ast::Stmt *s);
  bool redefinesFunction(const std::string &name, SourceRange importRange);
  /// Evaluates an expression in this scope (decorator arguments, annotations' dtypes).
  TypeRef expr(ast::Expr *e);
  /// The type of a lambda called with arguments (grid lambdas, tree_map's functions).
  TypeRef callLambda(const ast::Lambda *l, const std::vector<TypeRef> &args, SourceRange at);

  /// Makes this check a specialization: the callee's symbols have the values a call bound them
  /// to (`env`), in the body and in the declared return type.
  void setSpecialization(const std::map<std::string, Dim> &env) {
    specializing_ = true;
    env_ = env;
    for (auto &[k, v] : env) symbolValues_[k] = T::integer(v);
  }
  BodyContext context() const { return ctx_; }
  const FunctionInfo *function() const { return fn_; }
  void setParent(FunctionChecker *p) { parent_ = p; }

private:
  // statements
  void stmt(ast::Stmt *s);
  void block(const ast::Block &b);
  void assign(ast::Expr *target, const TypeRef &value, SourceRange valueRange);
  TypeRef assignedValue(ast::Expr *value);
  void bind(const std::string &name, const TypeRef &t, SourceRange at);
  void checkIf(ast::If *s);
  void checkFor(ast::For *s);
  void checkWhile(ast::While *s);
  void checkReturn(ast::Return *s);
  void checkCondition(ast::Expr *test, const TypeRef &t, std::string_view what);
  TypeRef iterElement(const TypeRef &iter, ast::Expr *iterExpr);
  void loopBody(const ast::Block &body, const std::function<void()> &bindTargets);

  // expressions
  TypeRef exprUncached(ast::Expr *e);
  TypeRef name(ast::Name *n);
  TypeRef binary(ast::Binary *b);
  TypeRef unary(ast::Unary *u);
  TypeRef compare(ast::Compare *c);
  TypeRef subscript(ast::Subscript *s);
  TypeRef indexTensor(ast::Subscript *s, const TypeRef &base, bool asView);
  TypeRef attribute(ast::Attribute *a);
  TypeRef call(ast::Call *c);
  TypeRef comprehension(ast::Comprehension *c);
  TypeRef policyType(ast::Binary *b, const TypeRef &lhs);

  // calls (CheckCalls.cpp)
  struct Args {
    std::vector<ArgInfo> positional;
    std::vector<ArgInfo> keywords;
    bool hasSplat = false; // *xs or **kw: arity cannot be checked
  };
  TypeRef callValue(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange);
  TypeRef callBuiltin(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange);
  /// Reports E0131 and returns true when the builtin's entry is pending in this context.
  bool refusedAsPending(const BuiltinInfo &b, SourceRange at);
  /// The value of a builtin used by its name (BuiltinInfo::isValue: gpu).
  TypeRef builtinValue(const BuiltinInfo &b, SourceRange at);
  /// Reports E0131 and returns true when a function uses the module constant `name`, whose value
  /// needs the builtin `b`, where `b` is pending or cannot be called.
  bool refusedModuleConstant(const std::string &name, const BuiltinInfo &b, SourceRange at);
  TypeRef callFunction(const FunctionInfo *fn, Args &args, SourceRange at, SourceRange calleeRange, const TypeRef &grid);
  TypeRef callTransform(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange);
  /// `onnx.load(...)` / `onnx.save(...)` where no name `onnx` is bound (CheckOnnx.cpp): the
  /// call's type; null when `c` is no such call.
  TypeRef onnxCall(ast::Call *c);
  TypeRef onnxSave(ast::Call *c);
  /// A call of vmap(f, in_axes, out_axes) (CheckVmap.cpp).
  TypeRef callVmap(const TypeRef &callee, Args &args, SourceRange at, SourceRange calleeRange);
  void checkGrid(const FunctionInfo *kernel, const TypeRef &grid, SourceRange at);
  bool allowedHere(const FunctionInfo *callee, SourceRange at);

  // scopes
  Local *lookupLocal(const std::string &n);
  void collectAssigned(const ast::Block &b, std::unordered_set<std::string> &out);
  void record(SourceRange r, const std::string &name, const TypeRef &t);
  std::string describeOperand(ast::Expr *e, const TypeRef &t, bool left);

  ProgramChecker &pc_;
  ModuleInfo &mod_;
  const FunctionInfo *fn_;
  BodyContext ctx_;
  bool record_;
  FunctionChecker *parent_ = nullptr;
  std::unordered_map<std::string, Local> locals_;
  std::unordered_set<std::string> assignedNames_;
  std::unordered_map<std::string, TypeRef> symbolValues_; // signature dims as ints
  TypeRef returnType_;
  bool sawReturn_ = false;
  int loopDepth_ = 0;
  int prepassDepth_ = 0;
  /// At module level: a builtin pending in some context that the current statement uses (its
  /// constants remember it: Symbol::pendingBuiltin).
  const BuiltinInfo *modulePending_ = nullptr;
  bool inLambda_ = false;
  bool specializing_ = false;
  bool noRecord_ = false; // inside the second and later copies of an unrolled loop
  SourceRange gridRange_; // the grid of the launch being checked
  std::map<std::string, Dim> env_;
};

/// Drives the check of a whole program: modules, signatures, bodies and specializations.
class ProgramChecker {
public:
  ProgramChecker(Program &p) : P(p) {}
  Program &P;

  ModuleInfo *loadModule(const std::vector<std::string> &dotted, const std::string &fromDir, SourceRange at,
                         ModuleInfo *importer);
  ModuleInfo *loadFile(const std::string &path, const std::string &name, bool isStdlib, SourceRange at);
  /// Parses and checks the top level of a file already in the source manager.
  ModuleInfo *adoptFile(FileId id, const std::string &key, const std::string &name, bool isStdlib);
  void checkModule(ModuleInfo &m);
  void analyzeSignature(FunctionInfo &fn);
  void ensureChecked(FunctionInfo &fn);
  /// The return type of a call of `fn` whose parameters have the given types; checks a
  /// specialization when the call's types say more than the signature.
  TypeRef specialize(FunctionInfo &fn, const std::vector<std::pair<std::string, TypeRef>> &params,
                     const std::map<std::string, Dim> &env, SourceRange callSite,
                     std::optional<BodyContext> callerContext = std::nullopt);
  /// The first kernel without a custom VJP that `fn` launches, directly or through the functions
  /// it calls (autodiff cannot differentiate it, spec 8); null if none.
  const FunctionInfo *undifferentiableKernel(const FunctionInfo &fn);
  /// Reports imports that nothing uses (W0124), for the modules of the user's program.
  void reportUnusedImports();
  TypeRef annotationType(ast::Expr *e, FunctionInfo *fn, ModuleInfo &m, std::vector<std::string> *symbols);

  std::vector<std::string> loadingStack; // module names being loaded, for cycle messages
  bool scheduleBroken = false;            // the function being analyzed has an invalid schedule
  std::vector<FunctionChecker *> checkerStack;
  int specializationDepth = 0;

private:
  void analyzeDecorators(FunctionInfo &fn);
  std::string dirOf(const std::string &path) const;
};

} // namespace tsr::sema
