// Graph lowering: locations, ops, and compile-time values turned into tensors, sizes and shapes.
#include "ir/lower/Lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tsr::ir::lowering {

Loc Lowering::loc(SourceRange r) {
  IRSourcePoint sp = irSourcePoint(p_, r);
  return sp.valid ? Loc{m_.fileIndex(sp.path), sp.line, sp.col} : Loc{};
}

Value *Lowering::op(OpKind k, std::vector<Value *> operands, std::vector<Attr> attrs, SourceRange at) {
  try {
    return g_.add(k, std::move(operands), std::move(attrs), loc(at));
  } catch (IRError &e) {
    // Operand shapes that do not fit are the program's error where the checker could not see
    // them (tensors read from a file): the checker's diagnostic, with the shapes met here.
    if (e.mismatch) {
      std::string shapes;
      for (size_t i = 0; i < e.mismatch->shapes.size(); ++i)
        shapes += (i == 0 ? "" : i + 1 == e.mismatch->shapes.size() ? " and " : ", ") + e.mismatch->shapes[i];
      std::string note = "the operands of `" + std::string(opSpelling(k)) + "` have the shapes " + shapes;
      throw CompileError{formatDiag(e.mismatch->kind, e.mismatch->args), at, e.mismatch->kind, e.mismatch->args, {note}};
    }
    // Anything else means lowering built a wrong op: an internal error.
    throw CompileError{"internal: " + e.message, at};
  }
}

Value *Lowering::constant(double value, DType dt, SourceRange at) {
  AttrValue v = isFloat(dt) ? AttrValue(value) : (dt == DType::Bool ? AttrValue(value != 0) : AttrValue(static_cast<int64_t>(value)));
  return op(OpKind::Constant, {}, {{"value", v}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{dt, {}}}}, at);
}

Value *Lowering::asTensor(const LVRef &x, std::optional<DType> other, SourceRange at) {
  switch (x->kind) {
  case LV::K::Tensor: return x->v;
  case LV::K::Bool: return constant(x->b ? 1 : 0, other ? promoteWithWeak(*other, WeakScalar::Bool) : DType::Bool, at);
  case LV::K::Float: return constant(x->f, other ? promoteWithWeak(*other, WeakScalar::Float) : DType::F32, at);
  case LV::K::Int: {
    DType dt = other ? promoteWithWeak(*other, WeakScalar::Int) : DType::I32;
    if (auto c = x->i.constantValue()) return constant(static_cast<double>(*c), dt, at);
    Value *v = x->v ? x->v : op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{x->i}}}, at);
    if (v->type.dtype != dt) v = op(OpKind::Cast, {v}, {{"dtype", DTypeAttr{dt, {}}}}, at);
    return v;
  }
  default: unsupported("a " + kindName(x) + " used as a tensor", at);
  }
}

std::string Lowering::kindName(const LVRef &x) {
  static const char *names[] = {"None", "bool", "int", "float", "str", "dtype", "tensor", "key", "tuple", "list", "dict", "function", "builtin", "module", "lambda", "transformed function"};
  return names[static_cast<int>(x->kind)];
}

std::optional<int64_t> Lowering::constInt(const LVRef &x) {
  if (x->kind == LV::K::Int) return x->i.constantValue();
  if (x->kind == LV::K::Bool) return x->b ? 1 : 0;
  return std::nullopt;
}

Dim Lowering::dimOf(const LVRef &x, SourceRange at) {
  if (x->kind == LV::K::Int) return x->i;
  if (x->kind == LV::K::Bool) return Dim::constant(x->b);
  unsupported("a " + kindName(x) + " used as a size", at);
}

std::vector<Dim> Lowering::shapeOf(const LVRef &x, SourceRange at) {
  if (x->kind == LV::K::Tuple || x->kind == LV::K::List) {
    std::vector<Dim> out;
    for (auto &e : x->elems) out.push_back(dimOf(e, at));
    return out;
  }
  return {dimOf(x, at)};
}

std::vector<int64_t> Lowering::intsOf(const LVRef &x, SourceRange at) {
  std::vector<int64_t> out;
  for (const Dim &d : shapeOf(x, at)) {
    auto c = d.constantValue();
    if (!c) unsupported("a run-time axis", at);
    out.push_back(*c);
  }
  return out;
}

bool Lowering::truthy(const LVRef &x, SourceRange at) {
  switch (x->kind) {
  case LV::K::None: return false;
  case LV::K::Bool: return x->b;
  case LV::K::Int: if (auto c = x->i.constantValue()) return *c != 0; break;
  case LV::K::Float: return x->f != 0;
  case LV::K::Str: return !x->s.empty();
  case LV::K::Tuple: case LV::K::List: return !x->elems.empty();
  case LV::K::Dict: return !x->fields.empty();
  default: break;
  }
  unsupported("a condition whose value is known only at run time", at);
}

} // namespace tsr::ir::lowering
