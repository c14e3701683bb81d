// The language server's completion and signature help: names in scope, members of modules,
// builtin namespaces and receivers (the registry's methods), decorators, dtypes and policies; the
// signature of the function or builtin around the cursor, with the active parameter.
#include "lsp/Features.h"
#include "lsp/Describe.h"

#include "sema/Builtins.h"
#include "sema/Decorators.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace tsr::lsp {

using namespace tsr::sema;

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
