#include "lsp/Features.h"

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

struct Doc {
  bool md;
  std::string out;
  void code(const std::string &s) {
    if (!out.empty()) out += md ? "\n\n" : "\n";
    out += md ? "```tsr\n" + s + "\n```" : s;
  }
  void para(const std::string &s) {
    if (s.empty()) return;
    if (!out.empty()) out += md ? "\n\n" : "\n";
    out += s;
  }
  // Lines of `key: value` facts, one per line.
  void facts(const std::vector<std::pair<std::string, std::string>> &kv) {
    if (kv.empty()) return;
    std::string s;
    for (auto &[k, v] : kv) {
      if (!s.empty()) s += md ? "  \n" : "\n";
      s += md ? k + ": `" + v + "`" : k + ": " + v;
    }
    para(s);
  }
};

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
  doc.para(doc.md ? "*builtin*, usable in " + contextsText(b.contexts) + " code"
                  : "builtin, usable in " + contextsText(b.contexts) + " code");
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

bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

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

// ---- completion and signature help --------------------------------------------------------------

namespace {

enum CompletionKind { kMethod = 2, kFunction = 3, kField = 5, kVariable = 6, kModule = 9, kKeyword = 14,
                      kConstant = 21, kTypeParameter = 25 };

const char *const kKeywords[] = {"def", "return", "if", "elif", "else", "for", "in", "while", "break", "continue",
                                 "pass", "import", "from", "as", "with", "and", "or", "not", "assert", "True",
                                 "False", "None", "lambda"};
const char *const kPolicies[] = {"accum", "loss_scale", "stochastic_round", "saturate"};
const char *const kDTypeNames[] = {"f64", "f32", "tf32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "i8", "i32", "i64", "bool",
                                   "fp32", "fp16", "float32", "float16", "bfloat16", "int8", "int32", "int64"};

struct Items {
  Json list = Json::array();
  std::set<std::string> seen;
  bool md;
  void add(const std::string &label, int kind, const std::string &detail, const std::string &doc = {},
           const std::string &sortGroup = "5") {
    if (label.empty() || !seen.insert(label).second) return;
    Json j = {{"label", label}, {"kind", kind}, {"sortText", sortGroup + label}};
    if (!detail.empty()) j["detail"] = detail;
    if (!doc.empty()) j["documentation"] = {{"kind", md ? "markdown" : "plaintext"}, {"value", doc}};
    list.push_back(std::move(j));
  }
};

// The line of `text` up to `off`.
std::string_view linePrefix(std::string_view text, size_t off) {
  size_t b = off;
  while (b > 0 && text[b - 1] != '\n' && text[b - 1] != '\r') --b;
  return text.substr(b, off - b);
}

// Whether the end of a line prefix is inside a string literal or a comment (one line's worth:
// enough for completion, which does not offer anything there).
bool inStringOrComment(std::string_view line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '#') {
      return true;
    } else if (c == '"' || c == '\'') {
      quote = c;
    }
  }
  return quote != 0;
}

// The dotted chain of identifiers that ends at the end of `s` ("nn.lay" -> {"nn", "lay"});
// empty if `s` does not end in one. A chain after `)` or `]` is not a name chain: returns empty.
std::vector<std::string> dottedChainBefore(std::string_view s) {
  std::vector<std::string> parts;
  size_t e = s.size();
  for (;;) {
    size_t b = e;
    while (b > 0 && isIdentChar(s[b - 1])) --b;
    parts.insert(parts.begin(), std::string(s.substr(b, e - b)));
    if (b > 0 && s[b - 1] == '.') {
      e = b - 1;
      if (e == 0 || !isIdentChar(s[e - 1])) return {};
      continue;
    }
    if (!parts.front().empty() && std::isdigit(static_cast<unsigned char>(parts.front()[0]))) return {};
    return parts;
  }
}

// The function (of the latest check) whose body holds line `line0` of the current text: the
// nearest `def` above with less indentation. Found by text, so that it works while the text
// under the cursor does not parse.
const FunctionInfo *enclosingFunction(const Analysis *a, std::string_view text, size_t off) {
  if (!a || !a->mainModule()) return nullptr;
  size_t lineStart = off;
  while (lineStart > 0 && text[lineStart - 1] != '\n') --lineStart;
  auto indentOf = [&](size_t b) {
    size_t i = b;
    while (i < text.size() && text[i] == ' ') ++i;
    return i - b;
  };
  size_t curIndent = indentOf(lineStart);
  if (curIndent > off - lineStart) curIndent = off - lineStart;
  size_t b = lineStart;
  while (b > 0) {
    size_t e = b - 1; // the '\n' ending the previous line
    b = e;
    while (b > 0 && text[b - 1] != '\n') --b;
    size_t ind = indentOf(b);
    std::string_view l = text.substr(b + ind, e - b - ind);
    if (l.empty() || l[0] == '#' || l[0] == '@') continue;
    if (ind >= curIndent && curIndent > 0) continue;
    if (l.rfind("def ", 0) == 0) {
      size_t n = 4;
      while (n < l.size() && l[n] == ' ') ++n;
      size_t ne = n;
      while (ne < l.size() && isIdentChar(l[ne])) ++ne;
      std::string name(l.substr(n, ne - n));
      for (auto &f : a->mainModule()->functions)
        if (f->name == name) return f.get();
      return nullptr;
    }
    if (ind == 0) return nullptr; // module level
    curIndent = ind;
  }
  return nullptr;
}

void addBuiltinNames(Items &items, const std::string &ns) {
  for (auto &b : allBuiltins()) {
    if (ns.empty()) {
      if (b.name.find('.') != std::string::npos) continue;
      if (b.isNamespace) items.add(b.name, kModule, "builtin namespace", "", "7");
      else items.add(b.name, kFunction, b.signature, b.doc, "7");
    } else if (b.name.rfind(ns + ".", 0) == 0) {
      items.add(b.name.substr(ns.size() + 1), kFunction, b.signature, b.doc, "5");
    }
  }
}

void addModuleMembers(Items &items, const ModuleInfo &m, const SourceManager *sm, bool includePrivate) {
  for (auto &[name, sym] : m.globals) {
    if (!includePrivate && !name.empty() && name[0] == '_') continue;
    switch (sym.kind) {
    case Symbol::Kind::Function:
      if (sym.fn) {
        std::string sig = sm ? functionSignature(*sym.fn, *sm) : sym.fn->name;
        items.add(name, kFunction, std::string(functionKindWord(sym.fn->kind)) + " " + sig,
                  sm && sym.fn->def ? docComment(*sm, sym.fn->def) : "");
      }
      break;
    case Symbol::Kind::Module: items.add(name, kModule, "module"); break;
    case Symbol::Kind::Builtin: items.add(name, kFunction, sym.type ? typeStr(sym.type) : ""); break;
    case Symbol::Kind::Constant:
      items.add(name, sym.type && sym.type->is(TypeKind::DTypeVal) ? kTypeParameter : kConstant,
                sym.type ? typeStr(sym.type) : "");
      break;
    }
  }
}

// Resolves a dotted chain (all but the part being typed) to what its members are.
struct Resolved {
  const ModuleInfo *module = nullptr;
  std::string builtinNs; // "tile", "random", "dist"; "" with allBuiltins = the tessera module
  bool allBuiltins = false;
  TypeRef value;
};

Resolved resolveChain(const Analysis *a, const FunctionInfo *fn, const std::vector<std::string> &chain) {
  Resolved r;
  if (chain.empty()) return r;
  const ModuleInfo *main = a ? a->mainModule() : nullptr;
  TypeRef t;
  // Locals of the enclosing function shadow globals.
  if (fn && a && a->program) {
    for (auto &b : a->program->bindings)
      if (b.fn == fn && b.name == chain[0]) t = b.type;
  }
  if (!t && main) {
    auto it = main->globals.find(chain[0]);
    if (it != main->globals.end()) t = it->second.type;
  }
  if (!t) {
    if (chain[0] == "tessera") t = tesseraModule();
    else if (const BuiltinInfo *b = findBuiltin(chain[0])) t = T::builtin(b);
  }
  for (size_t i = 1; t && i < chain.size(); ++i) {
    const std::string &part = chain[i];
    if (t->is(TypeKind::Module) && t->module) {
      auto it = t->module->globals.find(part);
      t = it == t->module->globals.end() ? nullptr : it->second.type;
    } else if (isTesseraModule(t)) {
      const BuiltinInfo *b = findBuiltin(part);
      t = b ? T::builtin(b) : nullptr;
    } else {
      t = nullptr; // members of values are not followed further
    }
  }
  if (!t) return r;
  if (t->is(TypeKind::Module)) r.module = t->module;
  else if (isTesseraModule(t)) r.allBuiltins = true;
  else if (t->is(TypeKind::Builtin) && t->builtin && t->builtin->isNamespace) r.builtinNs = t->builtin->name;
  else r.value = t;
  return r;
}

} // namespace

Json completion(const Analysis *a, const Document &doc, Position pos, const ClientPrefs &prefs) {
  Items items{Json::array(), {}, prefs.markdown};
  size_t off = offsetOf(doc.text, pos);
  std::string_view line = linePrefix(doc.text, off);
  if (inStringOrComment(line)) return {{"isIncomplete", false}, {"items", items.list}};
  const SourceManager *sm = a ? a->sm.get() : nullptr;
  const FunctionInfo *fn = enclosingFunction(a, doc.text, off);
  std::vector<std::string> chain = dottedChainBefore(line);
  std::string typed = chain.empty() ? "" : chain.back();

  // `@` at the start of a line: decorators. `bf16 @`: numeric policies.
  size_t at = line.rfind('@');
  if (at != std::string_view::npos && chain.size() <= 2) {
    std::string_view between = line.substr(at + 1);
    bool onlyName = std::all_of(between.begin(), between.end(), [](char c) { return isIdentChar(c) || c == '.' || c == ' '; });
    std::string_view before = line.substr(0, at);
    size_t nb = before.find_last_not_of(' ');
    if (onlyName && nb == std::string_view::npos) {
      for (const DecoratorInfo &d : allDecorators()) items.add(std::string(d.name), kKeyword, "decorator");
      return {{"isIncomplete", false}, {"items", items.list}};
    }
    if (onlyName && nb != std::string_view::npos) {
      std::vector<std::string> prev = dottedChainBefore(before.substr(0, nb + 1));
      bool afterDType = prev.size() == 1 && dtypeFromName(prev[0]);
      bool afterPolicy = before[nb] == ')' && before.find('@') != std::string_view::npos;
      if (afterDType || afterPolicy) {
        for (const char *pol : kPolicies) items.add(pol, kKeyword, "numeric policy");
        return {{"isIncomplete", false}, {"items", items.list}};
      }
    }
  }

  if (chain.size() >= 2) {
    std::vector<std::string> base(chain.begin(), chain.end() - 1);
    Resolved r = resolveChain(a, fn, base);
    if (r.module) addModuleMembers(items, *r.module, sm, !typed.empty() && typed[0] == '_');
    else if (r.allBuiltins) addBuiltinNames(items, "");
    else if (!r.builtinNs.empty()) addBuiltinNames(items, r.builtinNs);
    else if (r.value) {
      TypeKind k = r.value->kind;
      if (k == TypeKind::Tensor || k == TypeKind::Tile) {
        items.add("shape", kField, "tuple of ints", "the extents");
        items.add("dtype", kField, std::string(dtypeName(r.value->dtype)) + r.value->policies.str(), "the element type");
        items.add("ndim", kField, "int", "the rank");
        items.add("T", kField, "Tensor", "the last two axes swapped");
      }
      for (auto &[kind, b] : allMethods())
        if (kind == k) items.add(b.name, kMethod, b.signature, b.doc);
    }
    return {{"isIncomplete", false}, {"items", items.list}};
  }

  // Names in scope: the function's parameters, locals and symbols, the module's globals, then
  // builtins, dtypes and keywords.
  if (fn && a && a->program) {
    for (auto &b : a->program->bindings)
      if (b.fn == fn) items.add(b.name, kVariable, b.type ? typeStr(b.type) : "", "", "1");
    for (auto &s : fn->symbols) items.add(s, kConstant, "int (symbolic dimension)", "", "1");
  }
  if (a && a->mainModule()) addModuleMembers(items, *a->mainModule(), sm, true);
  for (const char *d : kDTypeNames) items.add(d, kTypeParameter, "dtype", "", "6");
  items.add("Tensor", kTypeParameter, "Tensor[dim, ..., dtype policy*]", "", "6");
  items.add("INF", kConstant, "float", "", "6");
  items.add("NAN", kConstant, "float", "", "6");
  addBuiltinNames(items, "");
  for (const char *k : kKeywords) items.add(k, kKeyword, "", "", "8");
  return {{"isIncomplete", false}, {"items", items.list}};
}

namespace {

// The call around a position: its callee's dotted name and the argument the cursor is in.
struct CallContext {
  std::vector<std::string> callee;
  size_t argIndex = 0;
  std::string keyword; // `name=` typed in the current argument
};

std::optional<CallContext> callAround(std::string_view text, size_t off) {
  // Scan forward from the start of the enclosing top-level statement (approximately: the last
  // unindented line at most 20,000 bytes back), tracking brackets, strings and comments.
  size_t limit = off > 20000 ? off - 20000 : 0, start = limit;
  for (size_t i = off; i > limit; --i) {
    bool lineStart = text[i - 1] == '\n';
    if (lineStart && i < text.size() && text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '#' &&
        text[i] != ')' && text[i] != ']' && text[i] != '}') {
      start = i;
      break;
    }
  }
  while (start > 0 && start < off && text[start - 1] != '\n') ++start;
  struct Open { char c; size_t pos; size_t commas; size_t argStart; };
  std::vector<Open> stack;
  size_t lastSquareOpen = std::string_view::npos, lastSquareClose = std::string_view::npos;
  for (size_t i = start; i < off; ++i) {
    char c = text[i];
    if (c == '#') {
      while (i < off && text[i] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      bool triple = i + 2 < text.size() && text[i + 1] == c && text[i + 2] == c;
      size_t j = i + (triple ? 3 : 1);
      for (; j < off; ++j) {
        if (text[j] == '\\') { ++j; continue; }
        if (!triple && text[j] == '\n') break;
        if (text[j] == c && (!triple || (j + 2 < text.size() && text[j + 1] == c && text[j + 2] == c))) {
          if (triple) j += 2;
          break;
        }
      }
      if (j >= off) return std::nullopt; // the cursor is inside the string
      i = j;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') stack.push_back({c, i, 0, i + 1});
    else if (c == ')' || c == ']' || c == '}') {
      if (!stack.empty()) {
        if (c == ']') { lastSquareOpen = stack.back().pos; lastSquareClose = i; }
        stack.pop_back();
      }
    } else if (c == ',' && !stack.empty()) {
      stack.back().commas++;
      stack.back().argStart = i + 1;
    }
  }
  // The innermost open parenthesis (the cursor may be inside a list or subscript within it).
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    if (it->c != '(') continue;
    size_t e = it->pos;
    while (e > 0 && (text[e - 1] == ' ')) --e;
    // kernel[grid](args): the callee is before the grid.
    if (e > 0 && text[e - 1] == ']' && lastSquareClose == e - 1 && lastSquareOpen != std::string_view::npos) e = lastSquareOpen;
    std::vector<std::string> chain = dottedChainBefore(text.substr(0, e));
    if (chain.empty() || chain.back().empty()) continue; // a parenthesized expression or tuple
    CallContext cc;
    cc.callee = chain;
    cc.argIndex = it->commas;
    std::string_view arg = text.substr(it->argStart, off - it->argStart);
    size_t b = arg.find_first_not_of(" \t\r\n");
    if (b != std::string_view::npos) {
      size_t e2 = b;
      while (e2 < arg.size() && isIdentChar(arg[e2])) ++e2;
      size_t eq = arg.find_first_not_of(' ', e2);
      if (e2 > b && eq != std::string_view::npos && arg[eq] == '=' && (eq + 1 >= arg.size() || arg[eq + 1] != '='))
        cc.keyword = std::string(arg.substr(b, e2 - b));
    }
    return cc;
  }
  return std::nullopt;
}

// The parameters of a signature label "name(a, b=1, *, c) -> T", as [begin, end) of each.
std::vector<std::pair<size_t, size_t>> paramSpans(const std::string &label) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t open = label.find('(');
  if (open == std::string::npos) return out;
  int depth = 0;
  char quote = 0;
  size_t b = open + 1;
  for (size_t i = open + 1; i < label.size(); ++i) {
    char c = label[i];
    if (quote) { if (c == quote) quote = 0; continue; }
    if (c == '"' || c == '\'') { quote = c; continue; }
    if (c == '(' || c == '[' || c == '{') ++depth;
    else if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    else if ((c == ',' && depth == 0) || (c == ')' && depth == 0)) {
      size_t s = b, e = i;
      while (s < e && label[s] == ' ') ++s;
      while (e > s && label[e - 1] == ' ') --e;
      if (e > s) out.push_back({s, e});
      b = i + 1;
      if (c == ')') break;
    }
  }
  return out;
}

std::string paramName(std::string_view p) {
  while (!p.empty() && p[0] == '*') p.remove_prefix(1);
  size_t e = 0;
  while (e < p.size() && isIdentChar(p[e])) ++e;
  return std::string(p.substr(0, e));
}

} // namespace

Json signatureHelp(const Analysis *a, const Document &doc, Position pos, const ClientPrefs &prefs) {
  size_t off = offsetOf(doc.text, pos);
  auto cc = callAround(doc.text, off);
  if (!cc) return nullptr;
  const FunctionInfo *enclosing = enclosingFunction(a, doc.text, off);
  std::string label, documentation;
  std::vector<std::string> chain = cc->callee;
  std::string last = chain.back();
  chain.pop_back();
  const SourceManager *sm = a ? a->sm.get() : nullptr;
  Doc d{prefs.markdown, {}};
  if (chain.empty()) {
    const ModuleInfo *main = a ? a->mainModule() : nullptr;
    const FunctionInfo *target = nullptr;
    if (main) {
      auto it = main->globals.find(last);
      if (it != main->globals.end()) target = it->second.fn;
    }
    if (target && sm) {
      label = functionSignature(*target, *sm);
      d.para(std::string(functionKindWord(target->kind)));
      if (target->def) d.para(docComment(*sm, target->def));
    } else if (const BuiltinInfo *b = findBuiltin(last); b && !b->isNamespace) {
      label = b->signature;
      d.para(b->doc);
    }
  } else {
    Resolved r = resolveChain(a, enclosing, chain);
    const BuiltinInfo *b = nullptr;
    if (r.module) {
      auto it = r.module->globals.find(last);
      if (it != r.module->globals.end() && it->second.fn && sm) {
        label = functionSignature(*it->second.fn, *sm);
        d.para(std::string(functionKindWord(it->second.fn->kind)) + " in module " + r.module->name);
        if (it->second.fn->def) d.para(docComment(*sm, it->second.fn->def));
      }
    } else if (r.allBuiltins) {
      b = findBuiltin(last);
    } else if (!r.builtinNs.empty()) {
      b = findBuiltin(r.builtinNs + "." + last);
    } else if (r.value) {
      b = findMethod(r.value->kind, last);
    }
    if (b && !b->isNamespace) {
      label = b->signature;
      d.para(b->doc);
    }
  }
  if (label.empty()) return nullptr;
  auto spans = paramSpans(label);
  Json params = Json::array();
  int active = -1;
  size_t positional = 0;
  bool keywordOnly = false;
  for (size_t i = 0; i < spans.size(); ++i) {
    std::string p = label.substr(spans[i].first, spans[i].second - spans[i].first);
    params.push_back({{"label", p}});
    if (p == "*") { keywordOnly = true; continue; }
    if (p.rfind("**", 0) == 0) continue;
    std::string name = paramName(p);
    if (!cc->keyword.empty()) {
      if (name == cc->keyword) active = static_cast<int>(i);
    } else if (!keywordOnly) {
      if (p[0] == '*') { if (active < 0 && positional <= cc->argIndex) active = static_cast<int>(i); continue; }
      if (positional == cc->argIndex) active = static_cast<int>(i);
      ++positional;
    }
  }
  Json sig = {{"label", label}, {"parameters", params}};
  if (!d.out.empty()) sig["documentation"] = {{"kind", prefs.markdown ? "markdown" : "plaintext"}, {"value", d.out}};
  if (active >= 0) sig["activeParameter"] = active;
  Json out = {{"signatures", Json::array({sig})}, {"activeSignature", 0}};
  out["activeParameter"] = active >= 0 ? active : static_cast<int>(spans.size());
  return out;
}

} // namespace tsr::lsp
