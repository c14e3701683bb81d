// The language server's handlers of diagnostics, hover, definition and document symbols, and the
// descriptions of functions, builtins, modules and values that hover (and completion) show.
#include "lsp/Features.h"
#include "lsp/Describe.h"

#include "sema/Builtins.h"
#include "sema/Decorators.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

namespace tsr::lsp {

using namespace tsr::sema;
namespace fs = std::filesystem;

namespace {

// ---- positions and locations ----------------------------------------------------------------

Json posJson(uint32_t line, uint32_t character) { return {{"line", line}, {"character", character}}; }

Json posJson(const SourceFile &f, uint32_t off) {
  return posJson(f.lineCol(off).line - 1, f.utf16Column(off));
}

Json zeroRange() { return {{"start", posJson(0, 0)}, {"end", posJson(0, 0)}}; }

Json rangeJson(const SourceManager &sm, SourceRange r) {
  if (!r.valid() || !sm.has(r.file)) return zeroRange();
  const SourceFile &f = sm.file(r.file);
  return {{"start", posJson(f, r.begin)}, {"end", posJson(f, std::max(r.begin, r.end))}};
}

std::string uriOf(const Analysis &a, FileId id) {
  if (id == a.file || !a.sm->has(id)) return a.uri;
  std::error_code ec;
  fs::path p = fs::absolute(a.sm->file(id).path(), ec);
  return pathToUri((ec ? fs::path(a.sm->file(id).path()) : p).lexically_normal().string());
}

Json locationJson(const Analysis &a, SourceRange r) {
  return {{"uri", uriOf(a, r.valid() ? r.file : a.file)}, {"range", rangeJson(*a.sm, r)}};
}

bool contains(SourceRange r, uint32_t off) { return r.valid() && r.begin <= off && off < r.end; }

std::string_view textOf(const SourceManager &sm, SourceRange r) {
  if (!r.valid() || !sm.has(r.file)) return {};
  const std::string &t = sm.file(r.file).text();
  if (r.begin > t.size() || r.end < r.begin) return {};
  return std::string_view(t).substr(r.begin, std::min<size_t>(r.end, t.size()) - r.begin);
}

// The range a statement covers, decorators included.
SourceRange extent(const ast::Node *n) {
  SourceRange r = n->range;
  if (auto *f = ast::dyn_cast<ast::FunctionDef>(n))
    for (auto &d : f->decorators) r = r.to(d.range);
  return r;
}

// ---- descriptions ---------------------------------------------------------------------------


std::string policyText(const Policies &p) {
  std::string s = p.str();
  if (!s.empty() && s[0] == ' ') s.erase(0, 1);
  return s.empty() ? "none" : s;
}

// `label` is the name the value is shown under: a size equal to it says nothing more.
std::vector<std::pair<std::string, std::string>> typeFacts(const TypeRef &t, const std::string &label) {
  std::vector<std::pair<std::string, std::string>> kv;
  if (!t) return kv;
  switch (t->kind) {
  case TypeKind::Tensor: case TypeKind::Tile: case TypeKind::View:
    kv.push_back({"shape", t->rankKnown ? shapeStr(t->dims) : "unknown rank"});
    kv.push_back({"dtype", std::string(dtypeName(t->dtype))});
    kv.push_back({"policy", policyText(t->policies)});
    break;
  case TypeKind::DTypeVal:
    kv.push_back({"dtype", std::string(dtypeName(t->dtype))});
    kv.push_back({"policy", policyText(t->policies)});
    break;
  case TypeKind::Int:
    if (t->intValue) {
      // A size as code spells it (B*H), not as an annotation quotes it ("B*H").
      std::string v = dimStr(*t->intValue);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      if (v != label) kv.push_back({"value", v});
    }
    break;
  default: break;
  }
  return kv;
}

} // namespace

// The comment block right above a definition (its decorators included): the stdlib documents
// each function that way.
std::string docComment(const SourceManager &sm, const ast::FunctionDef *def) {
  SourceRange r = extent(def);
  if (!sm.has(r.file)) return {};
  const SourceFile &f = sm.file(r.file);
  uint32_t line = f.lineCol(r.begin).line;
  std::vector<std::string> lines;
  while (line > 1) {
    --line;
    std::string_view t = f.lineText(line);
    size_t i = t.find_first_not_of(" \t");
    if (i == std::string_view::npos || t[i] != '#') break;
    std::string_view body = t.substr(i + 1);
    if (!body.empty() && body[0] == ' ') body.remove_prefix(1);
    lines.emplace_back(body);
  }
  std::reverse(lines.begin(), lines.end());
  std::string out;
  for (auto &l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

std::string functionSignature(const FunctionInfo &fn, const SourceManager &sm) {
  std::string s = fn.name + "(";
  bool starDone = false;
  const ast::FunctionDef *def = fn.def;
  if (def) {
    for (size_t i = 0; i < def->params.size(); ++i) {
      const ast::Param &p = def->params[i];
      if (i) s += ", ";
      if (p.kind == ast::ParamKind::KeywordOnly && !starDone) {
        s += "*, ";
        starDone = true;
      }
      if (p.kind == ast::ParamKind::VarArgs) { s += "*"; starDone = true; }
      if (p.kind == ast::ParamKind::VarKeywords) s += "**";
      s += p.name;
      const ParamInfo *info = fn.param(p.name);
      if (info && info->annotated) s += ": " + typeStr(info->annotated);
      else if (p.annotation) s += ": " + std::string(textOf(sm, p.annotation->range));
      if (p.defaultValue) {
        bool annotated = (info && info->annotated) || p.annotation;
        s += annotated ? " = " : "=";
        s += std::string(textOf(sm, p.defaultValue->range));
      }
    }
  } else {
    for (size_t i = 0; i < fn.params.size(); ++i) s += (i ? ", " : "") + fn.params[i].name;
  }
  s += ")";
  TypeRef ret = fn.declaredReturn ? fn.declaredReturn : fn.inferredReturn;
  if (ret && !ret->is(TypeKind::Unknown)) s += " -> " + typeStr(ret);
  return s;
}

namespace {

std::string decoratorsText(const FunctionInfo &fn, const SourceManager &sm) {
  std::string s;
  if (!fn.def) return s;
  for (auto &d : fn.def->decorators) {
    std::string t(textOf(sm, d.range));
    if (t.empty()) t = d.dotted();
    if (t[0] != '@') t = "@" + t;
    if (t.size() > 160) t = t.substr(0, 157) + "...";
    s += (s.empty() ? "" : " ") + t;
  }
  return s;
}

void describeFunction(Doc &doc, const FunctionInfo &fn, const SourceManager &sm) {
  std::string kind(functionKindWord(fn.kind));
  std::string where = fn.module ? fn.module->name : "";
  doc.code(functionSignature(fn, sm));
  std::string line = doc.md ? "**" + kind + "**" : kind;
  if (!where.empty()) line += doc.md ? " in module `" + where + "`" : " in module " + where;
  std::string decos = decoratorsText(fn, sm);
  if (!decos.empty()) line += doc.md ? " · `" + decos + "`" : " · " + decos;
  doc.para(line);
  std::vector<std::pair<std::string, std::string>> kv;
  if (!fn.symbols.empty()) {
    std::string syms;
    for (auto &s : fn.symbols) syms += (syms.empty() ? "" : ", ") + s;
    kv.push_back({"symbols", syms});
  }
  if (fn.autotune && !fn.space.empty()) {
    std::string sp;
    for (auto &[k, v] : fn.space) {
      sp += (sp.empty() ? "" : " ") + k + "=[";
      for (size_t i = 0; i < v.size(); ++i) sp += (i ? ", " : "") + std::to_string(v[i]);
      sp += "]";
    }
    kv.push_back({"autotune", sp});
  }
  doc.facts(kv);
  // The calls checked so far, each with the types it gave the parameters.
  if (!fn.specializationOrder.empty()) {
    std::string calls;
    size_t shown = 0;
    for (const std::string &key : fn.specializationOrder) {
      auto text = fn.specializationText.find(key);
      auto result = fn.specializations.find(key);
      if (text == fn.specializationText.end() || result == fn.specializations.end()) continue;
      if (shown++ == 3) {
        calls += "\n... (" + std::to_string(fn.specializationOrder.size()) + " in all)";
        break;
      }
      calls += (calls.empty() ? "" : "\n") + fn.name + "(" + text->second + ") -> " + typeStr(result->second);
    }
    if (!calls.empty()) {
      doc.para("specializations:");
      doc.code(calls);
    }
  }
  if (fn.def) doc.para(docComment(sm, fn.def));
}

std::string contextsText(unsigned c) {
  std::vector<std::string> w;
  if (c & InHost) w.push_back("host");
  if (c & InGraph) w.push_back("graph");
  if (c & InKernel) w.push_back("kernel");
  std::string s;
  for (size_t i = 0; i < w.size(); ++i) s += (i ? (i + 1 == w.size() ? " and " : ", ") : "") + w[i];
  return s;
}

void describeBuiltin(Doc &doc, const BuiltinInfo &b) {
  if (b.isNamespace) {
    doc.code(b.name);
    size_t n = 0;
    for (auto &x : allBuiltins()) n += x.name.rfind(b.name + ".", 0) == 0;
    doc.para(doc.md ? "**builtin namespace** `" + b.name + "` (" + std::to_string(n) + " operations)"
                    : "builtin namespace " + b.name + " (" + std::to_string(n) + " operations)");
    return;
  }
  doc.code(b.signature.empty() ? b.name : b.signature);
  doc.para(b.doc);
  // Where the checker accepts it: its contexts but those still pending, which the hover names
  // with the reason the checker's E0131 gives.
  unsigned usable = b.contexts;
  for (auto &[ctx, why] : b.pending) usable &= ~ctx;
  if (usable)
    doc.para(doc.md ? "*builtin*, usable in " + contextsText(usable) + " code" : "builtin, usable in " + contextsText(usable) + " code");
  for (unsigned ctx : {unsigned(InHost), unsigned(InGraph), unsigned(InKernel)})
    if (const std::string *why = (b.contexts & ctx) ? b.pendingIn(ctx) : nullptr)
      doc.para(std::string("not implemented in ") + contextPhrase(ctx) + " yet: " + *why);
}

void describeModule(Doc &doc, const ModuleInfo &m) {
  doc.code("import " + m.name);
  std::string where = m.path.empty() ? "" : m.path;
  doc.para((doc.md ? "**module** `" + m.name + "`" : "module " + m.name) + (m.isStdlib ? " (stdlib)" : "") +
           (where.empty() ? "" : (doc.md ? " at `" + where + "`" : " at " + where)));
}

// A value named `label` of type `t`.
void describeValue(Doc &doc, const std::string &label, const TypeRef &t, const SourceManager &sm) {
  if (!t) return;
  if (t->is(TypeKind::Function) && t->fn && t->transform == Transform::None) {
    describeFunction(doc, *t->fn, sm);
    if (t->launchGrid) doc.para("launched with grid " + typeStr(t->launchGrid));
    return;
  }
  if (t->is(TypeKind::Builtin) && t->builtin) {
    describeBuiltin(doc, *t->builtin);
    return;
  }
  if (t->is(TypeKind::Module) && t->module) {
    describeModule(doc, *t->module);
    return;
  }
  if (isTesseraModule(t)) {
    doc.code("import tessera");
    doc.para("the builtins, under another name: `ts.X` is the builtin `X`");
    return;
  }
  doc.code(label.empty() ? typeStr(t) : label + ": " + typeStr(t));
  doc.facts(typeFacts(t, label));
}

const FunctionInfo *functionOfDef(const Program &p, const ast::FunctionDef *def) {
  for (auto &m : p.modules)
    for (auto &f : m->functions)
      if (f->def == def) return f.get();
  return nullptr;
}

const BindingRecord *bindingAt(const Program &p, SourceRange r) {
  const BindingRecord *best = nullptr;
  for (auto &b : p.bindings) {
    if (b.range.file != r.file) continue;
    if (b.range.begin == r.begin && b.range.end == r.end) best = &b; // the last record: its final type
  }
  return best;
}

TypeRef typeOf(const Program &p, const ast::Expr *e) {
  auto it = p.exprTypes.find(e);
  if (it != p.exprTypes.end()) return it->second;
  if (const BindingRecord *b = bindingAt(p, e->range)) return b->type;
  return nullptr;
}

const ModuleInfo *moduleNamed(const Program &p, const std::string &name) {
  for (auto &m : p.modules)
    if (m->name == name) return m.get();
  return nullptr;
}

// The module an import alias of the main module loads (or, for `from M import n`, what n is).
struct ImportTarget {
  const ModuleInfo *module = nullptr;
  const Symbol *symbol = nullptr; // `from M import n` where n is not a module
};
ImportTarget importTarget(const Program &p, const ast::Stmt *s, const ast::ImportAlias &a) {
  ImportTarget t;
  if (ast::isa<ast::Import>(s)) {
    t.module = moduleNamed(p, a.dotted());
    return t;
  }
  auto *from = static_cast<const ast::ImportFrom *>(s);
  std::string base = from->module.dotted();
  if (&a == &from->module) {
    t.module = moduleNamed(p, base);
    return t;
  }
  std::string name = a.path.empty() ? "" : a.path[0];
  if ((t.module = moduleNamed(p, base + "." + name))) return t;
  if (const ModuleInfo *m = moduleNamed(p, base)) {
    auto it = m->globals.find(name);
    if (it != m->globals.end()) {
      if (it->second.kind == Symbol::Kind::Module && it->second.type && it->second.type->module) t.module = it->second.type->module;
      else t.symbol = &it->second;
    }
  }
  return t;
}

SourceRange moduleStart(const ModuleInfo *m) {
  if (!m || !m->ast || !m->ast->file) return {};
  return {m->ast->file, 0, 0};
}

// Where the main module reaches `file` through an import, for diagnostics located in that file.
SourceRange importSiteOf(const Analysis &a, FileId file) {
  const Program &p = *a.program;
  std::string name;
  for (auto &m : p.modules)
    if (m->ast && m->ast->file == file) name = m->name;
  const ast::Module *main = a.mainAst();
  if (!main || name.empty()) return {};
  SourceRange prefix;
  for (ast::Stmt *s : main->body) {
    std::vector<std::pair<std::string, SourceRange>> names;
    if (auto *imp = ast::dyn_cast<ast::Import>(s)) {
      for (auto &al : imp->names) names.push_back({al.dotted(), al.range});
    } else if (auto *from = ast::dyn_cast<ast::ImportFrom>(s)) {
      names.push_back({from->module.dotted(), from->module.range});
      for (auto &al : from->names) names.push_back({from->module.dotted() + "." + (al.path.empty() ? "" : al.path[0]), al.range});
    }
    for (auto &[n, r] : names) {
      if (n == name) return r.valid() ? r : s->range;
      if (!prefix.valid() && (name.rfind(n + ".", 0) == 0 || n.rfind(name + ".", 0) == 0)) prefix = r.valid() ? r : s->range;
    }
  }
  return prefix;
}

int severityCode(Severity s) {
  switch (s) {
  case Severity::Error: case Severity::Fatal: return 1;
  case Severity::Warning: return 2;
  case Severity::Note: return 3;
  }
  return 1;
}

std::string shortLocation(const SourceManager &sm, SourceRange r) {
  if (!r.valid() || !sm.has(r.file)) return "";
  const SourceFile &f = sm.file(r.file);
  LineCol lc = f.lineCol(r.begin);
  return fs::path(f.path()).filename().string() + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.column);
}

} // namespace

// ---- node lookup ------------------------------------------------------------------------------

std::vector<ast::Node *> nodePathAt(const ast::Module &m, uint32_t offset) {
  std::vector<ast::Node *> path;
  ast::Node *cur = nullptr;
  for (ast::Stmt *s : m.body)
    if (s && contains(extent(s), offset)) { cur = s; break; }
  while (cur) {
    path.push_back(cur);
    ast::Node *next = nullptr;
    ast::forEachChild(cur, [&](ast::Node *c) {
      if (!next && c && contains(extent(c), offset)) next = c;
    });
    cur = next;
  }
  return path;
}

// ---- diagnostics ------------------------------------------------------------------------------

Json diagnosticsJson(const Analysis &a) {
  Json out = Json::array();
  const SourceManager &sm = *a.sm;
  for (const Diagnostic &d : a.diags->diagnostics()) {
    Json j;
    j["severity"] = severityCode(d.severity());
    j["code"] = std::string(diagCode(d.kind));
    j["source"] = "tsr";
    std::string message = d.message;
    Json related = Json::array();
    SourceRange at = d.range;
    if (d.range.valid() && d.range.file != a.file) {
      // In an imported module: shown at the call that reached it (its specialization's note), or
      // at the import, with the real location as related information.
      SourceRange here;
      for (auto &n : d.notes)
        if (n.range.valid() && n.range.file == a.file) here = n.range;
      if (!here.valid() && a.program) here = importSiteOf(a, d.range.file);
      related.push_back({{"location", locationJson(a, d.range)}, {"message", d.message}});
      message = shortLocation(sm, d.range) + ": " + d.message;
      at = here;
    }
    j["range"] = at.valid() ? rangeJson(sm, at) : zeroRange();
    for (auto &n : d.notes)
      related.push_back({{"location", n.range.valid() ? locationJson(a, n.range) : locationJson(a, at)}, {"message", n.message}});
    j["message"] = message;
    if (!related.empty()) j["relatedInformation"] = related;
    if (d.kind == DiagKind::UnusedImportName) j["tags"] = Json::array({1}); // Unnecessary
    out.push_back(std::move(j));
  }
  return out;
}

// ---- hover ------------------------------------------------------------------------------------

namespace {

struct HoverHit {
  std::string text;
  SourceRange range;
};

std::optional<HoverHit> hoverAt(const Analysis &a, uint32_t off, bool md) {
  const Program &p = *a.program;
  const SourceManager &sm = *a.sm;
  auto path = nodePathAt(*a.mainAst(), off);
  if (path.empty()) return std::nullopt;
  ast::Node *n = path.back();
  Doc doc{md, {}};

  if (auto *f = ast::dyn_cast<ast::FunctionDef>(n)) {
    const FunctionInfo *fn = functionOfDef(p, f);
    if (contains(f->nameRange, off) && fn) {
      describeFunction(doc, *fn, sm);
      return HoverHit{doc.out, f->nameRange};
    }
    for (size_t i = 0; i < f->params.size(); ++i) {
      const ast::Param &prm = f->params[i];
      if (!contains(prm.nameRange, off)) continue;
      TypeRef t;
      if (const BindingRecord *b = bindingAt(p, prm.range)) t = b->type;
      if (!t && fn)
        if (const ParamInfo *pi = fn->param(prm.name)) t = pi->annotated ? pi->annotated : pi->defaultType;
      describeValue(doc, prm.name, t ? t : T::unknown(), sm);
      if (prm.kind == ast::ParamKind::KeywordOnly && fn && fn->kind != FunctionKind::Host)
        doc.para("keyword-only: a compile-time constant (each value compiles a specialization)");
      return HoverHit{doc.out, prm.nameRange};
    }
    for (auto &d : f->decorators) {
      if (!contains(d.range, off)) continue;
      std::string what = "`" + f->name + "`";
      const DecoratorInfo *info = findDecorator(decoratorName(*a.mainModule(), d));
      std::string says = info ? describeDecorator(*info, f->name) : "";
      doc.code(std::string(textOf(sm, d.range)));
      doc.para(says);
      if (fn && says.rfind("makes ", 0) != 0) doc.para(what + " is a " + std::string(functionKindWord(fn->kind)));
      return HoverHit{doc.out, d.range};
    }
    return std::nullopt;
  }
  if (ast::isa<ast::Import>(n) || ast::isa<ast::ImportFrom>(n)) {
    std::vector<const ast::ImportAlias *> aliases;
    if (auto *imp = ast::dyn_cast<ast::Import>(n)) for (auto &al : imp->names) aliases.push_back(&al);
    if (auto *from = ast::dyn_cast<ast::ImportFrom>(n)) {
      aliases.push_back(&from->module);
      for (auto &al : from->names) aliases.push_back(&al);
    }
    for (auto *al : aliases) {
      if (!contains(al->range, off)) continue;
      ImportTarget t = importTarget(p, static_cast<ast::Stmt *>(n), *al);
      if (t.module) describeModule(doc, *t.module);
      else if (t.symbol && t.symbol->fn) describeFunction(doc, *t.symbol->fn, sm);
      else if (t.symbol) describeValue(doc, al->path.empty() ? "" : al->path[0], t.symbol->type, sm);
      else return std::nullopt;
      return HoverHit{doc.out, al->range};
    }
    return std::nullopt;
  }
  if (auto *l = ast::dyn_cast<ast::Lambda>(n)) {
    for (auto &prm : l->params)
      if (contains(prm.nameRange, off)) {
        doc.code(prm.name);
        doc.para("lambda parameter");
        return HoverHit{doc.out, prm.nameRange};
      }
  }
  if (auto *nm = ast::dyn_cast<ast::Name>(n)) {
    TypeRef t = typeOf(p, nm);
    if (!t) {
      if (const BuiltinInfo *b = findBuiltin(nm->id)) t = T::builtin(b);
      else if (auto d = dtypeFromName(nm->id)) t = T::dtypeVal(*d);
      else return std::nullopt;
    }
    describeValue(doc, nm->id, t, sm);
    return HoverHit{doc.out, nm->range};
  }
  if (auto *at = ast::dyn_cast<ast::Attribute>(n)) {
    TypeRef t = typeOf(p, at);
    if (!t) return std::nullopt;
    describeValue(doc, std::string(textOf(sm, at->range)), t, sm);
    return HoverHit{doc.out, contains(at->attrRange, off) ? at->attrRange : at->range};
  }
  if (auto *call = ast::dyn_cast<ast::Call>(n)) {
    // The name of a keyword argument: the callee's signature, which has the parameter.
    for (const ast::Arg &arg : call->args) {
      if (arg.kind != ast::ArgKind::Keyword || !contains(arg.range, off)) continue;
      TypeRef callee = typeOf(p, call->func);
      if (!callee) return std::nullopt;
      describeValue(doc, std::string(textOf(sm, call->func->range)), callee, sm);
      doc.para(doc.md ? "keyword argument `" + arg.name + "`" : "keyword argument " + arg.name);
      SourceRange nameRange{arg.range.file, arg.range.begin, arg.range.begin + static_cast<uint32_t>(arg.name.size())};
      return HoverHit{doc.out, nameRange};
    }
  }
  // Inside a string there is nothing to say (an f-string's fields are expressions of their own).
  if (ast::isa<ast::StrLit>(n) || ast::isa<ast::FString>(n)) return std::nullopt;
  if (ast::isExprKind(n->kind)) {
    TypeRef t = typeOf(p, static_cast<ast::Expr *>(n));
    if (!t) return std::nullopt;
    describeValue(doc, "", t, sm);
    return HoverHit{doc.out, n->range};
  }
  return std::nullopt;
}

} // namespace

Json hover(const Analysis &a, Position pos, const ClientPrefs &prefs) {
  if (!a.program || !a.mainAst()) return nullptr;
  const SourceFile &f = a.sm->file(a.file);
  uint32_t off = f.offsetOfUtf16(pos.line, pos.character);
  auto hit = hoverAt(a, off, prefs.markdown);
  // The cursor just after a name (`x|`) means the name.
  if (!hit && off > 0 && isIdentChar(f.text()[off - 1])) hit = hoverAt(a, off - 1, prefs.markdown);
  if (!hit || hit->text.empty()) return nullptr;
  return {{"contents", {{"kind", prefs.markdown ? "markdown" : "plaintext"}, {"value", hit->text}}},
          {"range", rangeJson(*a.sm, hit->range)}};
}

// ---- definition -------------------------------------------------------------------------------

namespace {

std::optional<SourceRange> definitionAt(const Analysis &a, uint32_t off) {
  const Program &p = *a.program;
  auto path = nodePathAt(*a.mainAst(), off);
  if (path.empty()) return std::nullopt;
  ast::Node *n = path.back();
  if (ast::isa<ast::Name>(n) || ast::isa<ast::Attribute>(n)) {
    auto *e = static_cast<ast::Expr *>(n);
    if (auto *at = ast::dyn_cast<ast::Attribute>(n); at && !contains(at->attrRange, off)) return std::nullopt;
    TypeRef t = typeOf(p, e);
    // Functions and modules: their definition, not the import that bound the name.
    if (t && t->is(TypeKind::Function) && t->fn && t->fn->def && t->transform == Transform::None) return t->fn->def->nameRange;
    if (t && t->is(TypeKind::Module) && t->module) {
      SourceRange r = moduleStart(t->module);
      if (r.valid()) return r;
    }
    auto it = p.definitions.find(e);
    if (it != p.definitions.end() && it->second.valid()) return it->second;
    return std::nullopt;
  }
  if (auto *f = ast::dyn_cast<ast::FunctionDef>(n)) {
    if (contains(f->nameRange, off)) return f->nameRange;
    for (auto &prm : f->params)
      if (contains(prm.nameRange, off)) return prm.nameRange;
    return std::nullopt;
  }
  if (ast::isa<ast::Import>(n) || ast::isa<ast::ImportFrom>(n)) {
    std::vector<const ast::ImportAlias *> aliases;
    if (auto *imp = ast::dyn_cast<ast::Import>(n)) for (auto &al : imp->names) aliases.push_back(&al);
    if (auto *from = ast::dyn_cast<ast::ImportFrom>(n)) {
      aliases.push_back(&from->module);
      for (auto &al : from->names) aliases.push_back(&al);
    }
    for (auto *al : aliases) {
      if (!contains(al->range, off)) continue;
      ImportTarget t = importTarget(p, static_cast<ast::Stmt *>(n), *al);
      if (t.module) return moduleStart(t.module);
      if (t.symbol && t.symbol->fn && t.symbol->fn->def) return t.symbol->fn->def->nameRange;
      if (t.symbol && t.symbol->decl.valid()) return t.symbol->decl;
    }
  }
  return std::nullopt;
}

} // namespace

Json definition(const Analysis &a, Position pos) {
  if (!a.program || !a.mainAst()) return nullptr;
  const SourceFile &f = a.sm->file(a.file);
  uint32_t off = f.offsetOfUtf16(pos.line, pos.character);
  auto r = definitionAt(a, off);
  if (!r && off > 0 && isIdentChar(f.text()[off - 1])) r = definitionAt(a, off - 1);
  if (!r || !r->valid()) return nullptr;
  return Json::array({locationJson(a, *r)});
}

// ---- document symbols -------------------------------------------------------------------------

Json documentSymbols(const Analysis &a) {
  Json out = Json::array();
  const ast::Module *m = a.mainAst();
  if (!m || !a.program) return out;
  const Program &p = *a.program;
  const SourceManager &sm = *a.sm;
  auto symbol = [&](const std::string &name, int kind, SourceRange range, SourceRange sel, const std::string &detail) {
    if (!sel.valid()) sel = range;
    range = range.to(sel);
    Json j = {{"name", name.empty() ? "?" : name}, {"kind", kind}, {"range", rangeJson(sm, range)},
              {"selectionRange", rangeJson(sm, sel)}};
    if (!detail.empty()) j["detail"] = detail;
    return j;
  };
  for (ast::Stmt *s : m->body) {
    if (auto *f = ast::dyn_cast<ast::FunctionDef>(s)) {
      const FunctionInfo *fn = functionOfDef(p, f);
      std::string detail = fn ? std::string(functionKindWord(fn->kind)) : "function";
      if (fn) {
        std::string sig = functionSignature(*fn, sm);
        detail += " " + sig.substr(sig.find('('));
      }
      Json j = symbol(f->name, 12, extent(f), f->nameRange, detail);
      // Parameters and locals, once each, in the order first bound.
      Json children = Json::array();
      std::set<std::string> seen;
      for (auto &b : p.bindings) {
        if (b.fn != fn || !fn || b.range.file != a.file || !seen.insert(b.name).second) continue;
        bool isParam = fn->param(b.name) != nullptr;
        SourceRange sel = b.range;
        if (isParam)
          for (auto &prm : f->params)
            if (prm.name == b.name && prm.nameRange.valid()) sel = prm.nameRange;
        children.push_back(symbol(b.name, 13 /* Variable */, b.range, sel, b.type ? typeStr(b.type) : ""));
      }
      if (!children.empty()) j["children"] = children;
      out.push_back(std::move(j));
    } else if (auto *as = ast::dyn_cast<ast::Assign>(s)) {
      for (ast::Expr *t : as->targets) {
        std::vector<ast::Expr *> names;
        if (auto *tu = ast::dyn_cast<ast::Tuple>(t)) names = tu->elts;
        else names.push_back(t);
        for (ast::Expr *e : names) {
          auto *nm = ast::dyn_cast<ast::Name>(e);
          if (!nm) continue;
          const BindingRecord *b = bindingAt(p, nm->range);
          TypeRef ty = b ? b->type : nullptr;
          int kind = ty && ty->is(TypeKind::DTypeVal) ? 26 /* TypeParameter */ : 14 /* Constant */;
          out.push_back(symbol(nm->id, kind, as->range, nm->range, ty ? typeStr(ty) : ""));
        }
      }
    } else if (auto *an = ast::dyn_cast<ast::AnnAssign>(s)) {
      if (auto *nm = ast::dyn_cast<ast::Name>(an->target)) {
        const BindingRecord *b = bindingAt(p, nm->range);
        out.push_back(symbol(nm->id, 14, an->range, nm->range, b && b->type ? typeStr(b->type) : ""));
      }
    } else if (auto *imp = ast::dyn_cast<ast::Import>(s)) {
      for (auto &al : imp->names)
        out.push_back(symbol(al.asName.empty() ? al.dotted() : al.asName, 2, s->range, al.range, "import " + al.dotted()));
    }
  }
  return out;
}

} // namespace tsr::lsp
