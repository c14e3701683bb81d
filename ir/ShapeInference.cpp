// Result types of Graph IR ops (spec sections 5 and 6, as the checker applies them). The checker
// has already rejected the user errors it could see, so most failures here are internal errors of
// lowering or of a pass, and their messages say what is inconsistent for the engineer who reads
// them. Operand shapes that do not fit (a broadcast, a matmul, a reshape, a concatenation) are
// the exception: where the checker could not see the shapes (tensors read from a file), they are
// the program's mistake, and they come back as a ShapeMismatch with the checker's diagnostic.
#include "ir/IR.h"
#include "sema/Types.h"
#include "sema/Windows.h"

#include <algorithm>

namespace tsr::ir {

namespace {

using Result = std::variant<std::vector<Type>, TypeError>;

// A mismatch of the operands' shapes: `message` for the IR's own text, `kind` and `args` the
// diagnostic the checker gives for the same mistake.
TypeError mismatch(std::string message, DiagKind kind, std::vector<std::string> args, const std::vector<const Type *> &operands) {
  std::vector<std::string> shapes;
  for (const Type *t : operands) shapes.push_back(sema::shapeStr(t->dims));
  return TypeError(std::move(message), ShapeMismatch{kind, std::move(args), std::move(shapes)});
}

// The first position (aligned on the right) where two shapes do not broadcast: both dims as
// messages show them. Only called when broadcast() failed, so such a position exists.
std::pair<std::string, std::string> broadcastConflict(const std::vector<Dim> &a, const std::vector<Dim> &b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 1; i <= n; ++i) {
    const Dim &x = a[a.size() - i], &y = b[b.size() - i];
    if (x != y && !x.isOne() && !y.isOne() && x.constantValue() && y.constantValue()) return {sema::dimStr(x), sema::dimStr(y)};
  }
  return {"?", "?"};
}

std::string shapeText(const std::vector<Dim> &d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + d[i].str();
  return s + "]";
}

std::optional<std::vector<Dim>> broadcast(const std::vector<Dim> &a, const std::vector<Dim> &b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Dim> out(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim *x = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim *y = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!x) out[i] = *y;
    else if (!y) out[i] = *x;
    else if (*x == *y || y->isOne()) out[i] = *x;
    else if (x->isOne()) out[i] = *y;
    else if (x->hasUnknown()) out[i] = *y;
    else if (y->hasUnknown()) out[i] = *x;
    else {
      auto cx = x->constantValue(), cy = y->constantValue();
      if (cx && cy) return std::nullopt; // two different constants
      out[i] = *x; // symbolic: equal by the checker's rules (a run-time guard checks it)
    }
  }
  return out;
}

const std::vector<int64_t> *intsAttr(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) return std::get_if<std::vector<int64_t>>(&a.value);
  return nullptr;
}
const std::vector<Dim> *dimsAttr(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) return std::get_if<std::vector<Dim>>(&a.value);
  return nullptr;
}
std::optional<int64_t> intAttr(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) if (auto *v = std::get_if<int64_t>(&a.value)) return *v;
  return std::nullopt;
}
std::optional<bool> boolAttr(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) if (auto *v = std::get_if<bool>(&a.value)) return *v;
  return std::nullopt;
}
const AttrValue *attrValue(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) return &a.value;
  return nullptr;
}
const DTypeAttr *dtypeAttr(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) return std::get_if<DTypeAttr>(&a.value);
  return nullptr;
}

Dim product(const std::vector<Dim> &d) {
  Dim p = Dim::constant(1);
  for (auto &x : d) p = p * x;
  return p;
}

std::optional<size_t> axisOf(int64_t a, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (a < -r || a >= r) return std::nullopt;
  return static_cast<size_t>(a < 0 ? a + r : a);
}

bool floatMath(OpKind k) {
  switch (k) {
  case OpKind::Exp: case OpKind::Log: case OpKind::Log1p: case OpKind::Expm1: case OpKind::Exp2: case OpKind::Log2: case OpKind::Sqrt:
  case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Gelu: case OpKind::Silu:
  case OpKind::Sin: case OpKind::Cos: case OpKind::Erf:
    return true;
  default:
    return false;
  }
}

Result unary(OpKind k, const Type &x) {
  if (x.isKey()) return std::string("a key is not a number");
  Type t = x;
  if (floatMath(k) && !isFloat(t.dtype)) {
    t.dtype = DType::F32;
    t.policies = {};
  }
  return std::vector<Type>{t};
}

Result binary(OpKind k, OpClass c, const Type &a, const Type &b) {
  if (a.isKey() || b.isKey()) return std::string("a key is not a number");
  auto dims = broadcast(a.dims, b.dims);
  if (!dims) {
    auto [x, y] = broadcastConflict(a.dims, b.dims);
    return mismatch("shapes " + shapeText(a.dims) + " and " + shapeText(b.dims) + " do not broadcast", DiagKind::BroadcastMismatch,
                    {sema::shapeStr(a.dims), sema::shapeStr(b.dims), x, y}, {&a, &b});
  }
  std::optional<DType> dt = a.dtype == b.dtype ? std::optional<DType>(a.dtype) : promote(a.dtype, b.dtype);
  if (!dt) return std::string("dtypes ") + std::string(dtypeName(a.dtype)) + " and " + std::string(dtypeName(b.dtype)) + " do not promote";
  Policies p = a.policies;
  if (!b.policies.empty()) {
    if (!p.accum) p.accum = b.policies.accum;
    if (!p.lossScale) p.lossScale = b.policies.lossScale;
    p.stochasticRound |= b.policies.stochasticRound;
    p.saturate |= b.policies.saturate;
  }
  if (c == OpClass::Compare) return std::vector<Type>{Type::tensor(std::move(*dims), DType::Bool)};
  DType r = *dt;
  if (k == OpKind::Div && !isFloat(r)) r = DType::F32;
  return std::vector<Type>{Type::tensor(std::move(*dims), r, p)};
}


// ---- convolution and pooling (sema/Windows.h has the extents) ----

// The geometry attributes of a window op (defaults: stride and dilation 1, no padding); a
// convolution's kernel extents come from its weight, which must give constants.
std::variant<sema::WindowGeometry, std::string> geometryOf(const std::vector<Attr> &attrs, size_t spatial, const std::vector<Dim> *weight) {
  sema::WindowGeometry g;
  auto ints = [&](const char *n, std::vector<int64_t> dflt) {
    const std::vector<int64_t> *v = intsAttr(attrs, n);
    return v ? *v : dflt;
  };
  g.strides = ints("strides", std::vector<int64_t>(spatial, 1));
  g.dilations = ints("dilations", std::vector<int64_t>(spatial, 1));
  g.pads = ints("pads", std::vector<int64_t>(2 * spatial, 0));
  g.ceilMode = boolAttr(attrs, "ceil_mode").value_or(false);
  if (!weight) {
    g.kernel = ints("kernel", {});
    return g;
  }
  for (size_t i = 2; i < weight->size(); ++i) {
    auto k = (*weight)[i].constantValue();
    if (!k) return std::string("the kernel extents must be known at compile time, not \"" + (*weight)[i].str() + "\"");
    g.kernel.push_back(*k);
  }
  return g;
}

// conv, conv_transpose, max_pool, max_pool_grad, avg_pool, avg_pool_grad (ir/Ops.def): the
// extents from sema/Windows.h, as the checker's rules of the builtins compute them; a mistake the
// checker could not see (sizes read at run time) is the WindowShape diagnostic.
Result windowOp(OpKind kind, const std::vector<const Type *> &ops, const std::vector<Attr> &attrs) {
  const bool conv = kind == OpKind::Conv || kind == OpKind::ConvTranspose;
  const size_t want = kind == OpKind::AvgPool || kind == OpKind::AvgPoolGrad ? 1 : kind == OpKind::MaxPool ? ops.size() : 2;
  if (ops.empty() || ops.size() != want || ops.size() > 2) return "wrong operand count " + std::to_string(ops.size());
  for (const Type *t : ops)
    if (t->isKey()) return std::string("a key operand");
  auto fail = [&](const std::string &what) -> Result {
    // Graph::add prefixes the op's spelling to the message; the diagnostic names it itself.
    return mismatch(what, DiagKind::WindowShape, {std::string(opSpelling(kind)), what}, ops);
  };
  // avg_pool_grad's input shape is an attribute; everyone else's is operand 0.
  std::vector<Dim> xd = ops[0]->dims;
  if (kind == OpKind::AvgPoolGrad) {
    const std::vector<Dim> *sh = dimsAttr(attrs, "shape");
    if (!sh) return std::string("avg_pool_grad needs a shape attribute");
    xd = *sh;
  }
  const Type &x = *ops[0];
  if (!isFloat(x.dtype) && kind != OpKind::MaxPool && kind != OpKind::MaxPoolGrad)
    return fail(std::string("needs floating-point operands, not ") + std::string(dtypeName(x.dtype)));
  if (xd.size() < 3) return fail("the input must be [N, C, 1 to 3 spatial axes], not of rank " + std::to_string(xd.size()));
  const std::vector<Dim> *wd = conv ? &ops[1]->dims : nullptr;
  auto geo = geometryOf(attrs, xd.size() - 2, wd && wd->size() == xd.size() ? wd : nullptr);
  if (auto *e = std::get_if<std::string>(&geo)) return fail(*e);
  const sema::WindowOp wop = kind == OpKind::Conv ? sema::WindowOp::Conv : kind == OpKind::ConvTranspose ? sema::WindowOp::ConvTranspose : sema::WindowOp::Pool;
  auto res = sema::windowResult(wop, xd, wd, std::get<sema::WindowGeometry>(geo), intAttr(attrs, "groups").value_or(1));
  if (auto *e = std::get_if<std::string>(&res)) return fail(*e);
  std::vector<Dim> out = std::get<std::vector<Dim>>(res);
  if (conv) {
    const Type &w = *ops[1];
    DType dt = x.dtype;
    if (w.dtype != x.dtype) {
      auto p = promote(x.dtype, w.dtype);
      if (!p || !isFloat(*p)) return std::string("operand dtypes do not promote");
      dt = *p;
    }
    return std::vector<Type>{Type::tensor(std::move(out), dt, x.policies.empty() ? w.policies : x.policies)};
  }
  if (kind == OpKind::MaxPool) {
    if (ops.size() == 2 && ops[1]->dims != x.dims) return std::string("the selected tensor must have the input's shape");
    return std::vector<Type>{Type::tensor(std::move(out), ops.back()->dtype, ops.back()->policies)};
  }
  if (kind == OpKind::AvgPool) return std::vector<Type>{Type::tensor(std::move(out), x.dtype, x.policies)};
  // The gradients: the cotangent has the pooled shape; the result the input's.
  const Type &g = *ops.back();
  if (g.dims != out) return "the cotangent " + shapeText(g.dims) + " is not the pooled shape " + shapeText(out);
  return std::vector<Type>{Type::tensor(xd, g.dtype, g.policies)};
}

} // namespace

Result inferTypes(OpKind kind, const std::vector<const Type *> &ops, const std::vector<Attr> &attrs) {
  auto arity = [&](size_t n) -> std::optional<std::string> {
    if (ops.size() != n) return std::string(opSpelling(kind)) + " takes " + std::to_string(n) + " operand(s), not " + std::to_string(ops.size());
    return std::nullopt;
  };
  OpClass c = opClass(kind);
  switch (c) {
  case OpClass::Unary:
    if (auto e = arity(1)) return *e;
    return unary(kind, *ops[0]);
  case OpClass::Binary: case OpClass::Compare:
    if (auto e = arity(2)) return *e;
    return binary(kind, c, *ops[0], *ops[1]);
  case OpClass::Ternary: {
    if (auto e = arity(3)) return *e;
    if (ops[0]->dtype != DType::Bool) return std::string("where needs a bool condition");
    Result ab = binary(OpKind::Add, OpClass::Binary, *ops[1], *ops[2]);
    if (auto *err = std::get_if<TypeError>(&ab)) return *err;
    Type t = std::get<std::vector<Type>>(ab)[0];
    auto dims = broadcast(ops[0]->dims, t.dims);
    if (!dims) {
      auto [x, y] = broadcastConflict(ops[0]->dims, t.dims);
      return mismatch("where: the condition does not broadcast", DiagKind::BroadcastMismatch,
                      {sema::shapeStr(ops[0]->dims), sema::shapeStr(t.dims), x, y}, ops);
    }
    t.dims = *dims;
    return std::vector<Type>{t};
  }
  case OpClass::Reduce: {
    if (auto e = arity(1)) return *e;
    const Type &x = *ops[0];
    const std::vector<int64_t> *axes = intsAttr(attrs, "axes");
    bool keep = boolAttr(attrs, "keepdims").value_or(false);
    std::vector<bool> drop(x.rank(), axes == nullptr);
    if (axes)
      for (int64_t a : *axes) {
        auto n = axisOf(a, x.rank());
        if (!n) return "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(x.rank());
        drop[*n] = true;
      }
    std::vector<Dim> out;
    for (size_t i = 0; i < x.rank(); ++i) {
      if (!drop[i]) out.push_back(x.dims[i]);
      else if (keep) out.push_back(Dim::constant(1));
    }
    DType dt = (kind == OpKind::ArgMax || kind == OpKind::ArgMin) ? DType::I64 : x.dtype;
    return std::vector<Type>{Type::tensor(std::move(out), dt, kind == OpKind::ArgMax || kind == OpKind::ArgMin ? Policies{} : x.policies)};
  }
  case OpClass::Special: break;
  }
  switch (kind) {
  case OpKind::Cast: {
    if (auto e = arity(1)) return *e;
    const DTypeAttr *d = dtypeAttr(attrs, "dtype");
    if (!d) return std::string("cast needs a dtype attribute");
    return std::vector<Type>{Type::tensor(ops[0]->dims, d->dtype, d->policies)};
  }
  case OpKind::MatMul: {
    if (auto e = arity(2)) return *e;
    const Type &a = *ops[0], &b = *ops[1];
    if (a.rank() == 0 || b.rank() == 0) return std::string("matmul of a scalar");
    std::vector<Dim> x = a.dims, y = b.dims;
    bool xv = x.size() == 1, yv = y.size() == 1;
    if (xv) x.insert(x.begin(), Dim::constant(1));
    if (yv) y.push_back(Dim::constant(1));
    const Dim &k1 = x.back(), &k2 = y[y.size() - 2];
    if (k1 != k2 && k1.constantValue() && k2.constantValue())
      return mismatch("matmul inner dims " + k1.str() + " and " + k2.str() + " differ", DiagKind::MatmulInner, {sema::dimStr(k1), sema::dimStr(k2)}, ops);
    std::vector<Dim> bx(x.begin(), x.end() - 2), by(y.begin(), y.end() - 2);
    auto batch = broadcast(bx, by);
    if (!batch) {
      auto [p, q] = broadcastConflict(bx, by);
      return mismatch("matmul batch dims do not broadcast", DiagKind::BroadcastMismatch, {sema::shapeStr(bx), sema::shapeStr(by), p, q}, ops);
    }
    std::vector<Dim> out = *batch;
    if (!xv) out.push_back(x[x.size() - 2]);
    if (!yv) out.push_back(y.back());
    DType dt = a.dtype;
    if (a.dtype != b.dtype) {
      if (isFp8(a.dtype) && isFp8(b.dtype)) dt = DType::F32;
      else if (auto p = promote(a.dtype, b.dtype)) dt = *p;
      else return std::string("matmul operand dtypes do not promote");
    }
    if (isFp8(dt)) dt = DType::F32;
    Policies p = a.policies.empty() ? b.policies : a.policies;
    return std::vector<Type>{Type::tensor(std::move(out), dt, p)};
  }
  case OpKind::Reshape: case OpKind::BroadcastTo: {
    if (auto e = arity(1)) return *e;
    const std::vector<Dim> *shape = dimsAttr(attrs, "shape");
    if (!shape) return std::string(opSpelling(kind)) + " needs a shape attribute";
    const Type &x = *ops[0];
    if (kind == OpKind::Reshape) {
      Dim a = product(x.dims), b = product(*shape);
      if (a != b && a.constantValue() && b.constantValue())
        return mismatch("reshape changes the element count: " + a.str() + " vs " + b.str(), DiagKind::ReshapeCount,
                        {sema::dimStr(a), sema::dimStr(b)}, ops);
    } else {
      if (shape->size() < x.rank()) return std::string("broadcast_to cannot drop dims");
      for (size_t i = 0; i < x.rank(); ++i) {
        const Dim &d = x.dims[i], &t = (*shape)[shape->size() - x.rank() + i];
        if (d != t && !d.isOne() && d.constantValue() && t.constantValue())
          return mismatch("broadcast_to: " + d.str() + " does not stretch to " + t.str(), DiagKind::BroadcastMismatch,
                          {sema::shapeStr(x.dims), sema::shapeStr(*shape), sema::dimStr(d), sema::dimStr(t)}, ops);
      }
    }
    return std::vector<Type>{Type::tensor(*shape, x.dtype, x.policies)};
  }
  case OpKind::Transpose: {
    if (auto e = arity(1)) return *e;
    const std::vector<int64_t> *perm = intsAttr(attrs, "perm");
    const Type &x = *ops[0];
    if (!perm || perm->size() != x.rank()) return std::string("transpose needs a perm of the operand's rank");
    std::vector<bool> seen(x.rank(), false);
    std::vector<Dim> out;
    for (int64_t p : *perm) {
      if (p < 0 || static_cast<size_t>(p) >= x.rank() || seen[p]) return std::string("transpose perm is not a permutation");
      seen[p] = true;
      out.push_back(x.dims[p]);
    }
    return std::vector<Type>{Type::tensor(std::move(out), x.dtype, x.policies)};
  }
  case OpKind::Slice: {
    if (auto e = arity(1)) return *e;
    const std::vector<Dim> *start = dimsAttr(attrs, "start"), *stop = dimsAttr(attrs, "stop");
    const std::vector<int64_t> *step = intsAttr(attrs, "step");
    const Type &x = *ops[0];
    if (!start || !stop || !step || start->size() != x.rank() || stop->size() != x.rank() || step->size() != x.rank())
      return std::string("slice needs start, stop and step for every axis");
    std::vector<Dim> out;
    for (size_t i = 0; i < x.rank(); ++i) {
      if ((*step)[i] <= 0) return std::string("slice steps are positive (lowering reverses with other ops)");
      Dim ext = (*stop)[i] - (*start)[i];
      if ((*step)[i] != 1) {
        // ceil(ext / step), as a rational dim that is floored where evaluated.
        int64_t st = (*step)[i];
        if (auto c = ext.constantValue()) ext = Dim::constant((*c + st - 1) / st);
        else if (auto q = (ext + Dim::constant(st - 1)).divide(Dim::constant(st))) ext = *q;
      }
      out.push_back(ext);
    }
    return std::vector<Type>{Type::tensor(std::move(out), x.dtype, x.policies)};
  }
  case OpKind::Concat: {
    if (ops.empty()) return std::string("concat needs operands");
    auto axis = intAttr(attrs, "axis");
    if (!axis) return std::string("concat needs an axis");
    auto ax = axisOf(*axis, ops[0]->rank());
    if (!ax) return std::string("concat axis out of range");
    std::vector<Dim> out = ops[0]->dims;
    DType dt = ops[0]->dtype;
    for (size_t i = 1; i < ops.size(); ++i) {
      if (ops[i]->rank() != out.size()) return std::string("concat operands differ in rank");
      for (size_t d = 0; d < out.size(); ++d) {
        const Dim &p = ops[0]->dims[d], &q = ops[i]->dims[d];
        if (d != *ax && p != q && p.constantValue() && q.constantValue())
          return mismatch("concat operands differ in axis " + std::to_string(d), DiagKind::ConcatMismatch,
                          {"shapes " + sema::shapeStr(ops[0]->dims) + " and " + sema::shapeStr(ops[i]->dims) + " differ in axis " + std::to_string(d) +
                           " (only axis " + std::to_string(*ax) + " may differ)"},
                          ops);
      }
      out[*ax] = out[*ax] + ops[i]->dims[*ax];
      if (ops[i]->dtype != dt) {
        auto p = promote(dt, ops[i]->dtype);
        if (!p) return std::string("concat dtypes do not promote");
        dt = *p;
      }
    }
    return std::vector<Type>{Type::tensor(std::move(out), dt, ops[0]->policies)};
  }
  case OpKind::Reverse: {
    if (auto e = arity(1)) return *e;
    const std::vector<int64_t> *axes = intsAttr(attrs, "axes");
    if (!axes) return std::string("reverse needs axes");
    for (int64_t a : *axes) if (!axisOf(a, ops[0]->rank())) return std::string("reverse axis out of range");
    return std::vector<Type>{*ops[0]};
  }
  case OpKind::Gather: {
    if (auto e = arity(2)) return *e;
    if (ops[0]->rank() != ops[1]->rank()) return std::string("gather indices must have the operand's rank");
    return std::vector<Type>{Type::tensor(ops[1]->dims, ops[0]->dtype, ops[0]->policies)};
  }
  case OpKind::Take: {
    if (auto e = arity(2)) return *e;
    auto axis = intAttr(attrs, "axis");
    auto ax = axis ? axisOf(*axis, ops[0]->rank()) : std::nullopt;
    if (!ax) return std::string("take needs an axis in range");
    std::vector<Dim> out(ops[0]->dims.begin(), ops[0]->dims.begin() + *ax);
    out.insert(out.end(), ops[1]->dims.begin(), ops[1]->dims.end());
    out.insert(out.end(), ops[0]->dims.begin() + *ax + 1, ops[0]->dims.end());
    return std::vector<Type>{Type::tensor(std::move(out), ops[0]->dtype, ops[0]->policies)};
  }
  case OpKind::Constant: case OpKind::Iota: {
    if (auto e = arity(0)) return *e;
    const std::vector<Dim> *shape = dimsAttr(attrs, "shape");
    const DTypeAttr *d = dtypeAttr(attrs, "dtype");
    if (!shape || !d) return std::string(opSpelling(kind)) + " needs shape and dtype attributes";
    if (kind == OpKind::Iota) {
      auto axis = intAttr(attrs, "axis");
      if (!axis || !axisOf(*axis, shape->size())) return std::string("iota needs an axis in range");
    } else if (!(attrs.size() >= 1)) {
      return std::string("constant needs a value");
    }
    return std::vector<Type>{Type::tensor(*shape, d->dtype, d->policies)};
  }
  case OpKind::RandomBits: case OpKind::RandomNormal: case OpKind::RandomUniform: {
    if (ops.empty() || !ops[0]->isKey()) return std::string(opSpelling(kind)) + " takes a key first";
    const std::vector<Dim> *shape = dimsAttr(attrs, "shape");
    if (!shape) return std::string(opSpelling(kind)) + " needs a shape";
    const DTypeAttr *d = dtypeAttr(attrs, "dtype");
    DType dt = kind == OpKind::RandomBits ? DType::I64 : (d ? d->dtype : DType::F32);
    return std::vector<Type>{Type::tensor(*shape, dt)};
  }
  case OpKind::DimValue: {
    if (auto e = arity(0)) return *e;
    const std::vector<Dim> *d = dimsAttr(attrs, "dim");
    if (!d || d->size() != 1) return std::string("dim_value needs one dim");
    return std::vector<Type>{Type::tensor({}, DType::I64)};
  }
  case OpKind::KeySplit: {
    if (auto e = arity(1)) return *e;
    if (!ops[0]->isKey()) return std::string("key_split takes a key");
    return std::vector<Type>{Type::key()};
  }
  case OpKind::KernelCall:
    return std::string("kernel_call has explicit result types");
  case OpKind::Scan:
    return std::string("scan's result types come from its body (ir/Scan.h, scanResultTypes)");
  case OpKind::Conv: case OpKind::ConvTranspose: case OpKind::MaxPool: case OpKind::MaxPoolGrad: case OpKind::AvgPool:
  case OpKind::AvgPoolGrad:
    return windowOp(kind, ops, attrs);
  case OpKind::AllReduce: case OpKind::AllGather: case OpKind::ReduceScatter: case OpKind::DistBroadcast:
  case OpKind::DistReduce: case OpKind::AllToAll: {
    // Collectives (runtime/dist): x's type, with the extents all_gather, reduce_scatter and
    // all_to_all change by the group's size.
    if (auto e = arity(1)) return *e;
    if (ops[0]->isKey()) return std::string(opSpelling(kind)) + " takes a tensor";
    const auto *axes = std::get_if<std::string>(attrValue(attrs, "axes"));
    auto group = intAttr(attrs, "group");
    if (!axes || !group || *group < 1) return std::string(opSpelling(kind)) + " needs axes and a group size";
    if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter) {
      const auto *op = std::get_if<std::string>(attrValue(attrs, "op"));
      if (!op || (*op != "sum" && *op != "mean" && *op != "max" && *op != "min" && *op != "prod"))
        return std::string(opSpelling(kind)) + " needs an op: sum, mean, max, min or prod";
    }
    std::vector<Dim> out = ops[0]->dims;
    const Dim g = Dim::constant(*group);
    auto axisNamed = [&](const char *n) -> std::optional<size_t> {
      auto a = intAttr(attrs, n);
      return a ? axisOf(*a, ops[0]->rank()) : std::nullopt;
    };
    if (kind == OpKind::AllGather || kind == OpKind::ReduceScatter) {
      auto d = axisNamed("dim");
      if (!d) return std::string(opSpelling(kind)) + " needs a dim in range";
      if (kind == OpKind::AllGather) out[*d] = out[*d] * g;
      else if (auto q = out[*d].divide(g)) out[*d] = *q;
      else return std::string("reduce_scatter: no quotient");
    } else if (kind == OpKind::AllToAll) {
      auto sd = axisNamed("split_dim"), cd = axisNamed("concat_dim");
      if (!sd || !cd) return std::string("all_to_all needs split_dim and concat_dim in range");
      if (*sd != *cd) {
        auto q = out[*sd].divide(g);
        if (!q) return std::string("all_to_all: no quotient");
        out[*sd] = *q;
        out[*cd] = out[*cd] * g;
      }
    } else if (kind == OpKind::DistBroadcast || kind == OpKind::DistReduce) {
      auto r = intAttr(attrs, kind == OpKind::DistBroadcast ? "src" : "dst");
      if (!r || *r < 0 || *r >= *group) return std::string(opSpelling(kind)) + " needs a rank of the group";
    }
    return std::vector<Type>{Type::tensor(std::move(out), ops[0]->dtype, ops[0]->policies)};
  }
  case OpKind::CheckLe: {
    if (ops.size() < 2) return std::string("check_le takes at least two operands");
    for (const Type *o : ops)
      if (o->isKey() || isFloat(o->dtype) || o->dims != ops[0]->dims) return std::string("check_le takes integer operands of one shape");
    if (!attrs.empty() && !std::any_of(attrs.begin(), attrs.end(), [](const Attr &a) { return a.name == "message"; }))
      return std::string("check_le needs a message");
    return std::vector<Type>{*ops[0]};
  }
  default:
    return std::string("no type rule for ") + std::string(opSpelling(kind));
  }
}

} // namespace tsr::ir
