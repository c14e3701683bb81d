// Graph lowering of composite builtins: a builtin whose entry gives its body as an expression of
// other builtins over its signature's parameters (softplus) is lowered as if that body were an
// @inline function written in the program: its parameters bound as Python binds them, its ops
// those of the builtins it calls, each differentiated by their own rules.
#include "ir/lower/builtins/Rules.h"

#include "frontend/Parser.h"

#include <mutex>

namespace tsr::ir::lowering {

namespace {

// The composites parsed so far, by entry: `def <signature>: return <body>` in a module of its own,
// whose names are only the builtins (a program's own `where` cannot change softplus).
struct Composite {
  std::unique_ptr<ast::Module> ast;
  sema::ModuleInfo scope;
  sema::FunctionInfo fn;
};

const sema::FunctionInfo &compositeOf(const sema::BuiltinInfo &b, SourceRange at) {
  static std::mutex mutex;
  static SourceManager sources;
  static std::map<const sema::BuiltinInfo *, std::unique_ptr<Composite>> parsed;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = parsed.find(&b);
  if (it != parsed.end()) return it->second->fn;
  std::string header = b.signature.substr(0, b.signature.find(" -> "));
  std::string text = "def " + header + ":\n    return " + b.composite + "\n";
  FileId file = sources.addFile("<builtin " + b.name + ">", text);
  DiagnosticEngine diags(sources);
  auto c = std::make_unique<Composite>();
  c->ast = parseModule(sources, diags, file, "builtins");
  auto *def = c->ast->body.size() == 1 ? dyn_cast<FunctionDef>(c->ast->body[0]) : nullptr;
  if (diags.hasErrors() || !def)
    throw CompileError{"internal: the composite of the builtin `" + b.name + "` does not parse: " + text, at};
  c->scope.name = "builtins";
  c->scope.state = sema::ModuleInfo::State::Loaded;
  c->fn.name = b.name;
  c->fn.kind = sema::FunctionKind::Inline;
  c->fn.def = def;
  c->fn.module = &c->scope;
  return parsed.emplace(&b, std::move(c)).first->second->fn;
}

LVRef composite(BuiltinCall &c) {
  const sema::FunctionInfo &fn = compositeOf(c.b, c.at);
  size_t first = c.L.g_.ops.size();
  LVRef r = c.L.callFunction(fn, c.args, c.kw, c.at);
  // The composite's source is not the program's: its ops are located at the call.
  Loc here = c.L.loc(c.at);
  for (size_t i = first; i < c.L.g_.ops.size(); ++i) c.L.g_.ops[i]->loc = here;
  return r;
}

} // namespace

void addCompositeRules(GraphRules &r) { r["composite"] = composite; }

} // namespace tsr::ir::lowering
