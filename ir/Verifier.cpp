#include "ir/Verifier.h"

#include "ir/Scan.h"

#include <unordered_set>

namespace tsr::ir {

std::vector<std::string> verify(const Graph &g) {
  std::vector<std::string> errors;
  std::unordered_set<const Value *> defined;
  std::unordered_set<uint32_t> ids;
  auto define = [&](const Value *v, const std::string &where) {
    if (!ids.insert(v->id).second) errors.push_back(where + ": value id %" + std::to_string(v->id) + " is used twice");
    defined.insert(v);
  };
  for (const Value *p : g.params) define(p, "parameter %" + p->name);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op *op = g.ops[i];
    std::string where = "op " + std::to_string(i) + " (" + std::string(opSpelling(op->kind)) + ")";
    std::vector<const Type *> types;
    for (const Value *v : op->operands) {
      if (!defined.count(v)) errors.push_back(where + ": an operand is used before it is defined");
      types.push_back(&v->type);
    }
    if (op->kind == OpKind::Scan) {
      // A region op: its body is a graph of its own, verified as one, and its result types come
      // from the body (ir/Scan.h).
      auto s = scanShape(*op);
      if (!op->body || !s) {
        errors.push_back(where + ": a scan without its body or its attributes");
      } else {
        for (const std::string &e : verify(*op->body)) errors.push_back(where + ": body: " + e);
        auto r = scanResultTypes(*op->body, types, *s);
        if (auto *e = std::get_if<std::string>(&r)) errors.push_back(where + ": " + *e);
        else if (std::get<std::vector<Type>>(r).size() != op->results.size()) errors.push_back(where + ": wrong number of results");
        else
          for (size_t k = 0; k < op->results.size(); ++k)
            if (std::get<std::vector<Type>>(r)[k] != op->results[k]->type)
              errors.push_back(where + ": result has type " + op->results[k]->type.str() + " but the body gives " + std::get<std::vector<Type>>(r)[k].str());
      }
    } else if (op->body) {
      errors.push_back(where + ": only scan has a body");
    } else if (op->kind != OpKind::KernelCall) {
      auto r = inferTypes(op->kind, types, op->attrs);
      if (auto *e = std::get_if<TypeError>(&r)) {
        errors.push_back(where + ": " + e->message);
      } else {
        auto &want = std::get<std::vector<Type>>(r);
        if (want.size() != op->results.size()) errors.push_back(where + ": wrong number of results");
        for (size_t k = 0; k < want.size() && k < op->results.size(); ++k)
          if (want[k] != op->results[k]->type)
            errors.push_back(where + ": result has type " + op->results[k]->type.str() + " but the op gives " + want[k].str());
      }
    }
    for (const Value *r : op->results) {
      if (r->def != op) errors.push_back(where + ": a result does not point back at its op");
      define(r, where);
    }
  }
  for (const Value *o : g.outputs)
    if (!defined.count(o)) errors.push_back("an output is not defined in the graph");
  return errors;
}

} // namespace tsr::ir
