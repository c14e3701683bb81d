#include "ir/Text.h"
#include "ir/TextSyntax.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>

namespace tsr::ir {

// ---- printing ---------------------------------------------------------------------------------

using text::attrText;
using text::quote;

static std::string valueName(const Value *v) { return v->def ? "%" + std::to_string(v->id) : "%" + v->name; }

// A graph at an indentation: a region op's body prints nested in the op's line, its ops indented
// two spaces further, so that the text of a module is the text of its graphs, bodies included.
static void printGraphAt(std::ostream &os, const Graph &g, const Module &m, bool withLocations, const std::string &indent) {
  os << "graph @" << g.name << "(";
  for (size_t i = 0; i < g.params.size(); ++i) os << (i ? ", " : "") << "%" << g.params[i]->name << ": " << g.params[i]->type.str();
  os << ") -> (";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : "") << g.outputs[i]->type.str();
  os << ") {\n";
  for (const Op *op : g.ops) {
    os << indent << "  ";
    for (size_t i = 0; i < op->results.size(); ++i) os << (i ? ", " : "") << valueName(op->results[i]);
    if (!op->results.empty()) os << " = ";
    os << opSpelling(op->kind);
    for (size_t i = 0; i < op->operands.size(); ++i) os << (i ? ", " : " ") << valueName(op->operands[i]);
    if (!op->attrs.empty()) {
      os << " {";
      for (size_t i = 0; i < op->attrs.size(); ++i) os << (i ? ", " : "") << op->attrs[i].name << " = " << attrText(op->attrs[i].value);
      os << "}";
    }
    os << " :";
    for (size_t i = 0; i < op->results.size(); ++i) os << (i ? ", " : " ") << op->results[i]->type.str();
    if (withLocations && op->loc.valid() && op->loc.file <= m.files.size())
      os << " loc(" << quote(m.files[op->loc.file - 1]) << ":" << op->loc.line << ":" << op->loc.col << ")";
    if (op->body) {
      os << " body ";
      printGraphAt(os, *op->body, m, withLocations, indent + "  ");
    } else {
      os << "\n";
    }
  }
  os << indent << "  return";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : " ") << valueName(g.outputs[i]);
  os << "\n" << indent << "}\n";
}

void printGraph(std::ostream &os, const Graph &g, const Module &m, bool withLocations) { printGraphAt(os, g, m, withLocations, ""); }

void printModule(std::ostream &os, const Module &m, bool withLocations) {
  for (size_t i = 0; i < m.graphs.size(); ++i) {
    if (i) os << "\n";
    printGraph(os, *m.graphs[i], m, withLocations);
  }
}

std::string toString(const Module &m, bool withLocations) {
  std::ostringstream os;
  printModule(os, m, withLocations);
  return os.str();
}

uint64_t contentHash(const Graph &g, const Module &m) {
  std::ostringstream os;
  printGraph(os, g, m, false);
  return text::fnv1a(os.str());
}

uint64_t structureHash(const Graph &g, const Module &m) {
  std::ostringstream os;
  printGraph(os, g, m, false);
  std::string text = os.str();
  // "graph @NAME(" -> "graph @(": the rest of the text names no graph but region bodies' own.
  const size_t at = text.find('@'), open = text.find('(');
  if (at != std::string::npos && open != std::string::npos && at < open) text.erase(at + 1, open - at - 1);
  return text::fnv1a(text);
}

// ---- parsing ----------------------------------------------------------------------------------

namespace {

using text::Tok;

class Parser : public text::ParserBase {
public:
  explicit Parser(const std::string &text) : ParserBase(text) {}

  std::unique_ptr<Module> module() {
    auto m = std::make_unique<Module>();
    m_ = m.get();
    while (tok_.kind != Tok::End) {
      values_.clear();
      m->graphs.push_back(graph());
    }
    return m;
  }

private:
  Type type() {
    std::string k = expectIdent("a type");
    if (k == "key") return Type::key();
    if (k != "tensor") fail("expected tensor<...> or key");
    expect("<");
    std::vector<Dim> dims;
    while (tok_.kind != Tok::Ident) {
      dims.push_back(dim());
      expect(",");
    }
    DTypeAttr d = dtypeWithPolicies();
    expect(">");
    return Type::tensor(std::move(dims), d.dtype, d.policies);
  }

  Value *use() {
    if (tok_.kind != Tok::Local) fail("expected a value");
    auto it = values_.find(tok_.text);
    if (it == values_.end()) fail("use of undefined value %" + tok_.text);
    advance();
    return it->second;
  }

  std::unique_ptr<Graph> graph() {
    if (tok_.kind != Tok::Ident || tok_.text != "graph") fail("expected `graph`");
    advance();
    if (tok_.kind != Tok::Global) fail("expected @name");
    auto g = std::make_unique<Graph>(tok_.text);
    advance();
    expect("(");
    while (!isPunct(")")) {
      if (tok_.kind != Tok::Local) fail("expected a parameter");
      std::string n = tok_.text;
      advance();
      expect(":");
      Value *p = g->addParam(n, type());
      if (!values_.emplace(n, p).second) fail("parameter %" + n + " is defined twice");
      if (!isPunct(")")) expect(",");
    }
    advance();
    expect("->");
    expect("(");
    std::vector<Type> outTypes;
    while (!isPunct(")")) {
      outTypes.push_back(type());
      if (!isPunct(")")) expect(",");
    }
    advance();
    expect("{");
    for (;;) {
      if (tok_.kind == Tok::Ident && tok_.text == "return") {
        advance();
        while (tok_.kind == Tok::Local) {
          g->outputs.push_back(use());
          if (isPunct(",")) advance();
        }
        break;
      }
      op(*g);
    }
    expect("}");
    if (g->outputs.size() != outTypes.size()) fail("the return does not match the graph's result types");
    for (size_t i = 0; i < outTypes.size(); ++i)
      if (g->outputs[i]->type != outTypes[i]) fail("result " + std::to_string(i) + " has type " + g->outputs[i]->type.str() + ", not " + outTypes[i].str());
    return g;
  }

  void op(Graph &g) {
    std::vector<std::string> names;
    while (tok_.kind == Tok::Local) {
      names.push_back(tok_.text);
      advance();
      if (isPunct(",")) advance();
    }
    if (!names.empty()) expect("=");
    std::string spelling = expectIdent("an op");
    auto kind = opFromSpelling(spelling);
    if (!kind) fail("unknown op `" + spelling + "`");
    std::vector<Value *> operands;
    while (tok_.kind == Tok::Local) {
      operands.push_back(use());
      if (isPunct(",")) advance();
    }
    std::vector<Attr> attrs;
    if (isPunct("{")) attrs = this->attrs();
    expect(":");
    std::vector<Type> types;
    for (size_t i = 0; i < names.size(); ++i) {
      types.push_back(type());
      if (i + 1 < names.size()) expect(",");
    }
    Loc loc = optLoc([&](const std::string &f) { return m_->fileIndex(f); });
    Op *o = g.addWithTypes(*kind, operands, attrs, types, loc);
    if (isIdent("body")) {
      // A region op's body: a graph of its own, with its own names (it is closed).
      advance();
      auto outer = std::move(values_);
      values_.clear();
      o->body = graph();
      values_ = std::move(outer);
    }
    for (size_t i = 0; i < names.size(); ++i) {
      // A numeric name keeps its number (the printed ids); other names number from 0.
      uint32_t id = 0;
      for (char c : names[i]) id = std::isdigit(static_cast<unsigned char>(c)) ? id * 10 + static_cast<uint32_t>(c - '0') : 0;
      o->results[i]->id = id;
      if (!values_.emplace(names[i], o->results[i]).second) fail("value %" + names[i] + " is defined twice");
    }
  }

  Module *m_ = nullptr;
  std::map<std::string, Value *> values_;
};

} // namespace

std::unique_ptr<Module> parseModuleText(const std::string &text) {
  try {
    Parser p(text);
    return p.module();
  } catch (text::SyntaxError &e) {
    throw IRError{e.message};
  }
}

} // namespace tsr::ir
