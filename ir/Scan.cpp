#include "ir/Scan.h"

namespace tsr::ir {

std::optional<ScanShape> scanShape(const Op &op) {
  const int64_t *c = op.attrAs<int64_t>("consts"), *k = op.attrAs<int64_t>("carries");
  const std::vector<Dim> *len = op.attrAs<std::vector<Dim>>("length");
  const bool *rev = op.attrAs<bool>("reverse");
  if (!c || !k || !len || len->size() != 1 || *c < 0 || *k < 0 || size_t(*c + *k) > op.operands.size()) return std::nullopt;
  ScanShape s;
  s.consts = size_t(*c);
  s.carries = size_t(*k);
  s.xs = op.operands.size() - s.consts - s.carries;
  s.length = (*len)[0];
  s.reverse = rev && *rev;
  const bool *ck = op.attrAs<bool>("checkpoint");
  s.checkpoint = ck && *ck;
  return s;
}

Type sliceType(const Type &stacked) {
  Type t = stacked;
  t.dims.erase(t.dims.begin());
  return t;
}

Type stackedType(const Type &step, const Dim &length) {
  Type t = step;
  t.dims.insert(t.dims.begin(), length);
  return t;
}

std::variant<std::vector<Type>, std::string> scanResultTypes(const Graph &body, const std::vector<const Type *> &operands,
                                                              const ScanShape &s) {
  if (body.params.size() != operands.size())
    return "the body has " + std::to_string(body.params.size()) + " parameters for " + std::to_string(operands.size()) + " operands";
  if (body.outputs.size() < s.carries) return std::string("the body returns fewer values than there are carries");
  for (size_t i = 0; i < operands.size(); ++i) {
    const Type &o = *operands[i];
    const Type &p = body.params[i]->type;
    if (i < s.consts + s.carries) {
      if (o != p) return "operand " + std::to_string(i) + " is " + o.str() + " but the body's parameter %" + body.params[i]->name + " is " + p.str();
      continue;
    }
    // An xs: stacked along axis 0, of the scan's length.
    if (o.isKey() || o.rank() == 0) return "operand " + std::to_string(i) + " (" + o.str() + ") has no axis to scan over";
    if (!(o.dims[0] == s.length)) return "operand " + std::to_string(i) + " has " + o.dims[0].str() + " rows for a scan of length " + s.length.str();
    if (sliceType(o) != p) return "operand " + std::to_string(i) + "'s slice is " + sliceType(o).str() + " but the body's parameter %" + body.params[i]->name + " is " + p.str();
  }
  std::vector<Type> out;
  for (size_t k = 0; k < body.outputs.size(); ++k) {
    const Type &t = body.outputs[k]->type;
    if (k < s.carries) {
      const Type &in = *operands[s.consts + k];
      if (t != in) return "the body returns carry " + std::to_string(k) + " as " + t.str() + " but it enters as " + in.str();
      out.push_back(t);
    } else {
      if (t.isKey()) return "the body returns a key as a y (keys are not stacked)";
      out.push_back(stackedType(t, s.length));
    }
  }
  return out;
}

Op *addScan(Graph &g, std::shared_ptr<Graph> body, const std::vector<Value *> &consts, const std::vector<Value *> &inits,
            const std::vector<Value *> &xs, const Dim &length, bool reverse, Loc loc, bool checkpoint) {
  std::vector<Value *> operands = consts;
  operands.insert(operands.end(), inits.begin(), inits.end());
  operands.insert(operands.end(), xs.begin(), xs.end());
  ScanShape s{consts.size(), inits.size(), xs.size(), length, reverse, checkpoint};
  std::vector<const Type *> types;
  for (Value *v : operands) types.push_back(&v->type);
  auto r = scanResultTypes(*body, types, s);
  if (auto *e = std::get_if<std::string>(&r)) throw IRError{"scan: " + *e};
  std::vector<Attr> attrs{{"consts", int64_t(consts.size())}, {"carries", int64_t(inits.size())},
                          {"length", std::vector<Dim>{length}}, {"reverse", reverse}};
  if (checkpoint) attrs.push_back({"checkpoint", true});
  Op *op = g.addWithTypes(OpKind::Scan, std::move(operands), std::move(attrs), std::get<std::vector<Type>>(std::move(r)), loc);
  op->body = std::move(body);
  return op;
}

} // namespace tsr::ir
