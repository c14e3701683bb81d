// ONNX's reductions, matrix products (MatMul, Gemm, Einsum), the softmax family and TopK as
// Graph IR. Semantics: ONNX 1.12's operator definitions (onnx/defs/reduction, math/defs.cc).
#include "onnx/Importer.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tsr::onnxio {

using ir::OpKind;

namespace {


struct Axes {
  std::vector<int64_t> axes; // normalized, sorted
  bool keep;
  bool noop; // empty axes with noop_with_empty_axes: the identity
};
Axes reduceAxes(Importer &I, Node &n, V x) {
  const size_t r = x->type.rank();
  std::optional<std::vector<int64_t>> a;
  // ReduceSum takes its axes as an input from opset 13; the others from opset 18.
  const bool asInput = n.proto.op_type() == "ReduceSum" ? n.opset >= 13 : n.opset >= 18;
  if (asInput) {
    if (n.has(1)) a = I.knownInts(n.in[1], "axes");
  } else {
    a = n.ints("axes");
  }
  Axes out{{}, n.i("keepdims", 1) != 0, false};
  if (!a || a->empty()) {
    if (asInput && n.i("noop_with_empty_axes", 0)) out.noop = true;
    for (size_t i = 0; i < r; ++i) out.axes.push_back(int64_t(i));
    return out;
  }
  for (int64_t v : *a) out.axes.push_back(int64_t(Importer::axis(v, r)));
  std::sort(out.axes.begin(), out.axes.end());
  out.axes.erase(std::unique(out.axes.begin(), out.axes.end()), out.axes.end());
  return out;
}
/// The number of elements the axes cover, as a scalar of x's dtype.
V countOf(Importer &I, V x, const std::vector<int64_t> &axes) {
  Dim p = Dim::constant(1);
  for (int64_t a : axes) p = p * x->type.dims[size_t(a)];
  if (auto c = p.constantValue()) return I.scalar(double(*c), Importer::dtype(x));
  return I.cast(I.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{p}}}), Importer::dtype(x));
}
std::vector<Val> reduceWith(Importer &I, Node &n, OpKind k, V (*pre)(Importer &, V), V (*post)(Importer &, V, V, const Axes &)) {
  V x = in(I, n, 0);
  Axes a = reduceAxes(I, n, x);
  if (a.noop) return one(x);
  V y = pre ? pre(I, x) : x;
  V s = I.reduce(k, y, a.axes, a.keep);
  return one(post ? post(I, s, x, a) : s);
}

} // namespace

std::vector<Val> ruleReduceSum(Importer &I, Node &n) { return reduceWith(I, n, OpKind::ReduceSum, nullptr, nullptr); }
std::vector<Val> ruleReduceMax(Importer &I, Node &n) { return reduceWith(I, n, OpKind::ReduceMax, nullptr, nullptr); }
std::vector<Val> ruleReduceMin(Importer &I, Node &n) { return reduceWith(I, n, OpKind::ReduceMin, nullptr, nullptr); }
std::vector<Val> ruleReduceProd(Importer &I, Node &n) { return reduceWith(I, n, OpKind::ReduceProd, nullptr, nullptr); }
std::vector<Val> ruleReduceMean(Importer &I, Node &n) {
  return reduceWith(I, n, OpKind::ReduceSum, nullptr,
                    [](Importer &I, V s, V x, const Axes &a) { return I.op(OpKind::Div, {s, countOf(I, x, a.axes)}); });
}
std::vector<Val> ruleReduceL1(Importer &I, Node &n) {
  return reduceWith(I, n, OpKind::ReduceSum, [](Importer &I, V x) { return I.op(OpKind::Abs, {x}); }, nullptr);
}
std::vector<Val> ruleReduceL2(Importer &I, Node &n) {
  return reduceWith(I, n, OpKind::ReduceSum, [](Importer &I, V x) { return I.op(OpKind::Mul, {x, x}); },
                    [](Importer &I, V s, V x, const Axes &) { return I.cast(I.op(OpKind::Sqrt, {s}), Importer::dtype(x)); });
}
std::vector<Val> ruleReduceSumSquare(Importer &I, Node &n) {
  return reduceWith(I, n, OpKind::ReduceSum, [](Importer &I, V x) { return I.op(OpKind::Mul, {x, x}); }, nullptr);
}
std::vector<Val> ruleReduceLogSum(Importer &I, Node &n) {
  return reduceWith(I, n, OpKind::ReduceSum, nullptr,
                    [](Importer &I, V s, V x, const Axes &) { return I.cast(I.op(OpKind::Log, {s}), Importer::dtype(x)); });
}
std::vector<Val> ruleReduceLogSumExp(Importer &I, Node &n) {
  // m + log(sum(exp(x - m))), m the maximum (kept finite so that all -inf rows give -inf).
  V x = in(I, n, 0);
  Axes a = reduceAxes(I, n, x);
  if (a.noop) return one(x);
  V m = I.reduce(OpKind::ReduceMax, x, a.axes, true);
  V finite = I.op(OpKind::Where, {I.op(OpKind::Eq, {I.op(OpKind::Abs, {m}), c(I, m, INFINITY)}), c(I, m, 0), m});
  V s = I.reduce(OpKind::ReduceSum, I.op(OpKind::Exp, {I.op(OpKind::Sub, {x, finite})}), a.axes, a.keep);
  V mk = a.keep ? finite : I.reduce(OpKind::ReduceMax, finite, a.axes, false);
  return one(I.cast(I.op(OpKind::Add, {I.op(OpKind::Log, {s}), mk}), Importer::dtype(x)));
}

namespace {
std::vector<Val> argExtreme(Importer &I, Node &n, OpKind k) {
  V x = in(I, n, 0);
  const size_t ax = Importer::axis(n.i("axis", 0), x->type.rank());
  const bool keep = n.i("keepdims", 1) != 0;
  if (!n.i("select_last_index", 0)) return one(I.op(k, {x}, {{"axes", std::vector<int64_t>{int64_t(ax)}}, {"keepdims", keep}}));
  // The last extreme: the first in the reversed axis, counted back from the end.
  V r = I.op(OpKind::Reverse, {x}, {{"axes", std::vector<int64_t>{int64_t(ax)}}});
  V i = I.op(k, {r}, {{"axes", std::vector<int64_t>{int64_t(ax)}}, {"keepdims", keep}});
  const Dim &N = x->type.dims[ax];
  V last = N.constantValue() ? I.scalar(double(*N.constantValue() - 1), DType::I64)
                             : I.op(OpKind::Sub, {I.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{N}}}), I.scalar(1, DType::I64)});
  return one(I.op(OpKind::Sub, {last, i}));
}
} // namespace
std::vector<Val> ruleArgMax(Importer &I, Node &n) { return argExtreme(I, n, OpKind::ArgMax); }
std::vector<Val> ruleArgMin(Importer &I, Node &n) { return argExtreme(I, n, OpKind::ArgMin); }

std::vector<Val> ruleMatMul(Importer &I, Node &n) { return one(I.op(OpKind::MatMul, {in(I, n, 0), in(I, n, 1)})); }

std::vector<Val> ruleGemm(Importer &I, Node &n) {
  // alpha * A' B' + beta * C, A' = A^T if transA, B' = B^T if transB; C broadcasts.
  V a = in(I, n, 0), b = in(I, n, 1);
  if (a->type.rank() != 2 || b->type.rank() != 2) throw BadModel("Gemm takes 2-d A and B");
  if (n.i("transA", 0)) a = I.transpose(a, {1, 0});
  if (n.i("transB", 0)) b = I.transpose(b, {1, 0});
  V y = I.op(OpKind::MatMul, {a, b});
  const double alpha = n.f("alpha", 1.0), beta = n.f("beta", 1.0);
  if (alpha != 1.0) y = I.op(OpKind::Mul, {y, c(I, y, alpha)});
  if (n.has(2)) {
    V cc = I.v(n.in[2]);
    if (beta != 1.0) cc = I.op(OpKind::Mul, {cc, c(I, cc, beta)});
    y = I.op(OpKind::Add, {y, cc});
  }
  return one(y);
}

std::vector<Val> ruleEinsum(Importer &I, Node &n) {
  // Each operand is laid out over all the equation's labels (transpose, then size-1 dims for the
  // labels it lacks), the operands multiplied with broadcasting, the labels not in the output
  // summed, and the rest transposed into the output's order. Repeated labels in one operand
  // (diagonals) and ellipses are not supported.
  std::string eq = n.s("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  if (eq.find("...") != std::string::npos) throw Unsupported("Einsum with an ellipsis is not supported");
  std::string lhs = eq, rhs;
  const bool explicitOut = eq.find("->") != std::string::npos;
  if (explicitOut) {
    lhs = eq.substr(0, eq.find("->"));
    rhs = eq.substr(eq.find("->") + 2);
  }
  std::vector<std::string> terms;
  for (size_t p = 0;;) {
    size_t q = lhs.find(',', p);
    terms.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  std::vector<V> xs;
  for (auto &x : n.in)
    if (x.present()) xs.push_back(I.v(x));
  if (xs.size() != terms.size()) throw BadModel("Einsum's equation names " + std::to_string(terms.size()) + " operands");
  std::string labels;
  std::map<char, Dim> size;
  std::map<char, int> count;
  for (size_t t = 0; t < terms.size(); ++t) {
    if (terms[t].size() != xs[t]->type.rank()) throw BadModel("Einsum's term `" + terms[t] + "` does not match its operand's rank");
    for (size_t i = 0; i < terms[t].size(); ++i) {
      char l = terms[t][i];
      if (terms[t].find(l) != i) throw Unsupported("Einsum with a repeated label in one operand (a diagonal) is not supported");
      if (labels.find(l) == std::string::npos) labels += l;
      if (!size.count(l) || size[l].isOne()) size[l] = xs[t]->type.dims[i];
      count[l]++;
    }
  }
  if (!explicitOut) {
    for (char l : labels)
      if (count[l] == 1) rhs += l;
    std::sort(rhs.begin(), rhs.end());
  }
  V prod = nullptr;
  for (size_t t = 0; t < terms.size(); ++t) {
    std::vector<int64_t> perm;
    std::vector<Dim> shape;
    for (char l : labels) {
      size_t p = terms[t].find(l);
      if (p != std::string::npos) {
        perm.push_back(int64_t(p));
        shape.push_back(xs[t]->type.dims[p]);
      } else {
        shape.push_back(Dim::constant(1));
      }
    }
    V y = I.reshape(I.transpose(xs[t], perm), shape);
    prod = prod ? I.op(OpKind::Mul, {prod, y}) : y;
  }
  std::vector<int64_t> sum;
  std::string kept;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (rhs.find(labels[i]) == std::string::npos) sum.push_back(int64_t(i));
    else kept += labels[i];
  }
  if (!sum.empty()) prod = I.reduce(OpKind::ReduceSum, prod, sum, false);
  std::vector<int64_t> perm;
  for (char l : rhs) {
    size_t p = kept.find(l);
    if (p == std::string::npos) throw BadModel("Einsum's output label `" + std::string(1, l) + "` is in no operand");
    perm.push_back(int64_t(p));
  }
  return one(I.transpose(prod, perm));
}

namespace {
/// Softmax-family operands: before opset 13 the input is seen as 2-d, [prod(d[:axis]),
/// prod(d[axis:])], and the operation runs along its second axis; from 13 along `axis` alone.
/// Returns the operand to work on, the axis, and the shape to restore.
struct SoftmaxView {
  V x;
  int64_t axis;
  std::vector<Dim> shape;
};
SoftmaxView softmaxView(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t r = x->type.rank();
  std::vector<Dim> shape = x->type.dims;
  if (n.opset >= 13) return {x, int64_t(Importer::axis(n.i("axis", -1), r)), shape};
  const size_t ax = Importer::axis(n.i("axis", 1), r);
  Dim a = Dim::constant(1), b = Dim::constant(1);
  for (size_t i = 0; i < r; ++i) (i < ax ? a : b) = (i < ax ? a : b) * shape[i];
  return {I.reshape(x, {a, b}), 1, shape};
}
} // namespace

std::vector<Val> ruleSoftmax(Importer &I, Node &n) {
  SoftmaxView s = softmaxView(I, n);
  V m = I.reduce(OpKind::ReduceMax, s.x, {s.axis}, true);
  V e = I.op(OpKind::Exp, {I.op(OpKind::Sub, {s.x, m})});
  V y = I.op(OpKind::Div, {e, I.reduce(OpKind::ReduceSum, e, {s.axis}, true)});
  return one(I.reshape(y, s.shape));
}
std::vector<Val> ruleLogSoftmax(Importer &I, Node &n) {
  SoftmaxView s = softmaxView(I, n);
  V m = I.reduce(OpKind::ReduceMax, s.x, {s.axis}, true);
  V d = I.op(OpKind::Sub, {s.x, m});
  V l = I.op(OpKind::Log, {I.reduce(OpKind::ReduceSum, I.op(OpKind::Exp, {d}), {s.axis}, true)});
  return one(I.reshape(I.op(OpKind::Sub, {d, l}), s.shape));
}
std::vector<Val> ruleHardmax(Importer &I, Node &n) {
  SoftmaxView s = softmaxView(I, n);
  V i = I.op(OpKind::ArgMax, {s.x}, {{"axes", std::vector<int64_t>{s.axis}}, {"keepdims", true}});
  V hot = I.op(OpKind::Eq, {I.iota(s.x->type.dims, s.axis, DType::I64), i});
  return one(I.reshape(I.cast(hot, Importer::dtype(s.x)), s.shape));
}

std::vector<Val> ruleTopK(Importer &I, Node &n) {
  // k rounds of argmax (the first index among equals, as ONNX orders ties), each taking the
  // extreme and masking it out. Smallest: the same on the negated input.
  V x = in(I, n, 0);
  const int64_t k = n.opset < 10 ? n.i("k", 0) : I.knownInts(n.in.at(1), "K").at(0);
  const size_t ax = Importer::axis(n.i("axis", -1), x->type.rank());
  if (k < 0) throw BadModel("TopK's k is negative");
  if (k > 64) throw Unsupported("TopK with k above 64 is not supported");
  if (!n.i("sorted", 1)) {
    // Unsorted order is unspecified: the sorted one is a valid answer.
  }
  const bool largest = n.i("largest", 1) != 0;
  const DType dt = Importer::dtype(x);
  V work = largest ? x : I.op(OpKind::Neg, {x});
  const double lowest = isFloat(dt) ? -INFINITY : double(std::numeric_limits<int32_t>::min());
  V iota = I.iota(x->type.dims, int64_t(ax), DType::I64);
  std::vector<V> vals, idxs;
  for (int64_t t = 0; t < k; ++t) {
    V i = I.op(OpKind::ArgMax, {work}, {{"axes", std::vector<int64_t>{int64_t(ax)}}, {"keepdims", true}});
    idxs.push_back(i);
    vals.push_back(I.op(OpKind::Gather, {x, i}, {{"axis", int64_t(ax)}}));
    work = I.op(OpKind::Where, {I.op(OpKind::Eq, {iota, i}), I.scalar(lowest, dt), work});
  }
  if (k == 0) throw Unsupported("TopK with k = 0");
  return {Importer::of(I.concat(vals, int64_t(ax))), Importer::of(I.concat(idxs, int64_t(ax)))};
}

} // namespace tsr::onnxio
