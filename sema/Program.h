// What the checker knows about a program: its modules, their functions and constants, and the
// type of every expression and binding. The entry point is checkProgram.
#pragma once

#include "frontend/Ast.h"
#include "sema/Types.h"
#include "support/Diagnostics.h"

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tsr::sema {

/// The four kinds of function (spec section 3), told apart by decorator.
enum class FunctionKind : uint8_t { Host, Graph, Kernel, Inline };
/// "host function", "graph function", "kernel", "inline helper".
std::string_view functionKindWord(FunctionKind k);

struct ParamInfo {
  std::string name;
  ast::ParamKind kind = ast::ParamKind::Positional;
  TypeRef annotated;   // the annotation's type; null if the parameter has none
  TypeRef defaultType; // the default's type; null if no default
  SourceRange range;
  bool compileTime() const { return kind == ast::ParamKind::KeywordOnly; }
};

struct ModuleInfo;

struct FunctionInfo {
  std::string name;
  FunctionKind kind = FunctionKind::Host;
  const ast::FunctionDef *def = nullptr;
  ModuleInfo *module = nullptr;
  std::vector<ParamInfo> params;
  TypeRef declaredReturn;               // null if the signature has no return annotation
  std::vector<std::string> symbols;     // symbolic dims of the signature, in order of appearance

  // Decorators.
  bool autodiff = false;
  bool distributed = false;
  bool customVjp = false;
  const FunctionInfo *vjpFwd = nullptr, *vjpBwd = nullptr;
  bool autotune = false;
  std::vector<std::pair<std::string, std::vector<int64_t>>> space; // autotune space, in order
  std::vector<std::string> autotuneKey;
  TypeRef schedule;                      // @kernel.schedule(...)
  bool usesContext = false;              // calls tile.context()
  bool broken = false;                   // its decorators are contradictory: the body is not checked
  std::vector<std::string> variadicNames; // *args / **kwargs (rejected; bound so uses are quiet)
  // A model loaded by `onnx.load` (spec 15): its resolved path. `def` is then a synthetic
  // signature (parameter names, the call's range, an empty body) and graph lowering inlines the
  // model's Graph IR in place of a body (ir/ExternalModels.h). `externalSplit`: the
  // split_params=True form, whose first parameter is the dict of the model's tensors.
  std::string externalModel;
  bool externalSplit = false;

  // Checking state.
  bool checking = false, checked = false;
  TypeRef inferredReturn;                // of the generic check
  std::map<std::string, TypeRef> specializations; // argument-type signature -> return type
  std::vector<std::string> specializationOrder;
  std::map<std::string, std::string> specializationText; // key -> "x: Tensor[...], act: \"relu\""
  std::map<std::string, std::vector<std::pair<std::string, TypeRef>>> specializationParams; // key -> parameter types

  size_t positionalCount() const {
    size_t n = 0;
    for (auto &p : params) n += p.kind == ast::ParamKind::Positional;
    return n;
  }
  const ParamInfo *param(std::string_view n) const {
    for (auto &p : params) if (p.name == n) return &p;
    return nullptr;
  }
};

struct Symbol {
  enum class Kind : uint8_t { Function, Constant, Module, Builtin } kind = Kind::Constant;
  TypeRef type;
  SourceRange decl;
  const FunctionInfo *fn = nullptr;
  bool imported = false;      // bound by an import statement
  mutable bool used = false;  // referred to by the module's code
  /// A module constant made with a builtin that some stage does not implement yet (a Schedule,
  /// a mesh): the checker computes it for decorators, and refuses functions that use it where
  /// that builtin is pending (BuiltinInfo::pending).
  const BuiltinInfo *pendingBuiltin = nullptr;
};

struct ModuleInfo {
  std::string name;  // dotted: "optim.adamw"
  std::string path;
  bool isStdlib = false;
  std::unique_ptr<ast::Module> ast;
  std::map<std::string, Symbol> globals;
  std::vector<std::unique_ptr<FunctionInfo>> functions;
  enum class State : uint8_t { Loading, Loaded } state = State::Loading;
};

/// One name bound to a value, for `tsrc --emit=types` and the language server.
struct BindingRecord {
  SourceRange range;
  std::string name;
  TypeRef type;
  const FunctionInfo *fn = nullptr; // the enclosing function; null at module level
};

struct CheckOptions {
  std::vector<std::string> searchPath; // TESSERA_PATH folders
  std::string stdlibDir;               // the installed stdlib
  /// Builds the syntax tree of a file in the source manager; parseModule when unset. (The
  /// language server reuses the trees of the text that did not change between two checks.)
  std::function<std::unique_ptr<ast::Module>(const SourceManager &, DiagnosticEngine &, FileId,
                                             const std::string &moduleName)> parse;
};

class Program {
public:
  Program(SourceManager &sm, DiagnosticEngine &diags) : sm(sm), diags(diags) {}
  SourceManager &sm;
  DiagnosticEngine &diags;
  CheckOptions options;
  std::vector<std::unique_ptr<ModuleInfo>> modules;
  ModuleInfo *main = nullptr;
  /// Types of expressions in generic checks (what an editor shows on hover).
  std::unordered_map<const ast::Expr *, TypeRef> exprTypes;
  std::vector<BindingRecord> bindings;
  /// Where each name use resolves to (for go-to-definition).
  std::unordered_map<const ast::Expr *, SourceRange> definitions;
  /// The functions of models loaded by `onnx.load`, by resolved path and form ("PATH" or
  /// "PATH|split"); their synthetic signatures live in `externalAst`.
  std::map<std::string, std::unique_ptr<FunctionInfo>> externalFunctions;
  ast::AstContext externalAst;
  /// Each `onnx.load` call the checker accepted: where it is, the path as written and as
  /// resolved. The interpreter and graph lowering find the call's function here rather than by
  /// resolving the path again (a bundle's runner checks its modules in a folder that is gone when
  /// they run), and the bundle writer names each model as the runner's checker will resolve it.
  struct ExternalLoad {
    const ModuleInfo *module = nullptr;
    std::string written, path; // `path`: the resolved path (externalFunctions' key without "|split")
    bool split = false;
    std::string key() const { return path + (split ? "|split" : ""); }
  };
  std::unordered_map<const ast::Call *, ExternalLoad> externalLoads;
};

/// The options the drivers use: the stdlib installed beside the running binary
/// (<prefix>/share/tessera/stdlib), else `sourceStdlib` (a build tree's); TESSERA_STDLIB overrides
/// both. TESSERA_PATH's folders (colon-separated) are searched before the stdlib.
CheckOptions defaultCheckOptions(const std::string &sourceStdlib);

/// Loads `path` and everything it imports, and checks it all.
std::unique_ptr<Program> checkProgram(SourceManager &sm, DiagnosticEngine &diags, const std::string &path,
                                      const CheckOptions &options);

/// Checks a file that is already in `sm` (the fuzzer and the language server check text that is
/// not on disk). Imports are still resolved from the file's folder, TESSERA_PATH and the stdlib.
std::unique_ptr<Program> checkLoadedFile(SourceManager &sm, DiagnosticEngine &diags, FileId file,
                                         const CheckOptions &options);

/// `tsrc --emit=types`: every function with its kind and signature, and every binding with its
/// inferred type, module by module.
void printTypes(std::ostream &os, const Program &p);

} // namespace tsr::sema
