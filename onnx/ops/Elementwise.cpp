// ONNX's elementwise operators as Graph IR: unary math and activations, broadcasting binary
// arithmetic and comparisons, variadic Max/Min/Sum/Mean, casts. ONNX broadcasts as NumPy, as
// Graph IR's binary ops do. Formulas follow the operator definitions of ONNX 1.12
// (onnx/defs/math/defs.cc); where ONNX states no formula the one used is given.
#include "onnx/Importer.h"

#include <cmath>

namespace tsr::onnxio {

using ir::OpKind;

namespace {

V in0(Importer &I, Node &n) {
  if (!n.has(0)) throw BadModel("the input 0 is missing");
  return I.v(n.in[0]);
}
V in1(Importer &I, Node &n) {
  if (!n.has(1)) throw BadModel("the input 1 is missing");
  return I.v(n.in[1]);
}
std::vector<Val> unary(Importer &I, Node &n, OpKind k) { return one(I.op(k, {in0(I, n)})); }
/// A binary op whose result keeps the first operand's dtype (ONNX's operands share it).
std::vector<Val> binary(Importer &I, Node &n, OpKind k) { return one(I.op(k, {in0(I, n), in1(I, n)})); }
V add(Importer &I, V a, V b) { return I.op(OpKind::Add, {a, b}); }
V sub(Importer &I, V a, V b) { return I.op(OpKind::Sub, {a, b}); }
V mul(Importer &I, V a, V b) { return I.op(OpKind::Mul, {a, b}); }
V div(Importer &I, V a, V b) { return I.op(OpKind::Div, {a, b}); }
V exp(Importer &I, V a) { return I.op(OpKind::Exp, {a}); }
V log(Importer &I, V a) { return I.op(OpKind::Log, {a}); }
V sqrt(Importer &I, V a) { return I.op(OpKind::Sqrt, {a}); }

/// atan(x) by argument halving, atan(x) = 2 atan(x / (1 + sqrt(1 + x^2))), twice (|x| < tan(pi/8)
/// after the first, < tan(pi/16) = 0.199 after the second), then the Taylor series to x^17
/// (truncation error below 0.199^19/19 < 3e-15). Graph IR has no atan op.
V atan(Importer &I, V x) {
  V y = x;
  for (int h = 0; h < 2; ++h) y = div(I, y, add(I, c(I, y, 1), sqrt(I, add(I, c(I, y, 1), mul(I, y, y)))));
  V y2 = mul(I, y, y);
  V sum = c(I, y, 0), term = y;
  for (int k = 0; k <= 8; ++k) {
    V t = mul(I, term, c(I, y, (k % 2 ? -1.0 : 1.0) / double(2 * k + 1)));
    sum = add(I, sum, t);
    term = mul(I, term, y2);
  }
  return mul(I, sum, c(I, y, 4));
}

} // namespace

std::vector<Val> ruleAbs(Importer &I, Node &n) { return unary(I, n, OpKind::Abs); }
std::vector<Val> ruleNeg(Importer &I, Node &n) { return unary(I, n, OpKind::Neg); }
std::vector<Val> ruleExp(Importer &I, Node &n) { return unary(I, n, OpKind::Exp); }
std::vector<Val> ruleLog(Importer &I, Node &n) { return unary(I, n, OpKind::Log); }
std::vector<Val> ruleSqrt(Importer &I, Node &n) { return unary(I, n, OpKind::Sqrt); }
std::vector<Val> ruleTanh(Importer &I, Node &n) { return unary(I, n, OpKind::Tanh); }
std::vector<Val> ruleSigmoid(Importer &I, Node &n) { return unary(I, n, OpKind::Sigmoid); }
std::vector<Val> ruleRelu(Importer &I, Node &n) { return unary(I, n, OpKind::Relu); }
std::vector<Val> ruleSin(Importer &I, Node &n) { return unary(I, n, OpKind::Sin); }
std::vector<Val> ruleCos(Importer &I, Node &n) { return unary(I, n, OpKind::Cos); }
std::vector<Val> ruleErf(Importer &I, Node &n) { return unary(I, n, OpKind::Erf); }
std::vector<Val> ruleFloor(Importer &I, Node &n) { return unary(I, n, OpKind::Floor); }
std::vector<Val> ruleCeil(Importer &I, Node &n) { return unary(I, n, OpKind::Ceil); }
std::vector<Val> ruleRound(Importer &I, Node &n) { return unary(I, n, OpKind::Round); }
std::vector<Val> ruleSign(Importer &I, Node &n) { return unary(I, n, OpKind::Sign); }
std::vector<Val> ruleNot(Importer &I, Node &n) { return unary(I, n, OpKind::Not); }
std::vector<Val> ruleIdentity(Importer &I, Node &n) {
  if (!n.has(0)) throw BadModel("the input 0 is missing");
  return {n.in[0]};
}
std::vector<Val> ruleReciprocal(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(div(I, c(I, x, 1), x));
}
std::vector<Val> ruleTan(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(div(I, I.op(OpKind::Sin, {x}), I.op(OpKind::Cos, {x})));
}
std::vector<Val> ruleSinh(Importer &I, Node &n) { // (e^x - e^-x) / 2
  V x = in0(I, n);
  return one(mul(I, sub(I, exp(I, x), exp(I, I.op(OpKind::Neg, {x}))), c(I, x, 0.5)));
}
std::vector<Val> ruleCosh(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(mul(I, add(I, exp(I, x), exp(I, I.op(OpKind::Neg, {x}))), c(I, x, 0.5)));
}
std::vector<Val> ruleAsinh(Importer &I, Node &n) { // log(x + sqrt(x^2 + 1))
  V x = in0(I, n);
  return one(log(I, add(I, x, sqrt(I, add(I, mul(I, x, x), c(I, x, 1))))));
}
std::vector<Val> ruleAcosh(Importer &I, Node &n) { // log(x + sqrt(x^2 - 1))
  V x = in0(I, n);
  return one(log(I, add(I, x, sqrt(I, sub(I, mul(I, x, x), c(I, x, 1))))));
}
std::vector<Val> ruleAtanh(Importer &I, Node &n) { // log((1 + x) / (1 - x)) / 2
  V x = in0(I, n);
  return one(mul(I, log(I, div(I, add(I, c(I, x, 1), x), sub(I, c(I, x, 1), x))), c(I, x, 0.5)));
}
std::vector<Val> ruleAtan(Importer &I, Node &n) { return one(atan(I, in0(I, n))); }
std::vector<Val> ruleAsin(Importer &I, Node &n) { // 2 atan(x / (1 + sqrt(1 - x^2)))
  V x = in0(I, n);
  return one(mul(I, atan(I, div(I, x, add(I, c(I, x, 1), sqrt(I, sub(I, c(I, x, 1), mul(I, x, x)))))), c(I, x, 2)));
}
std::vector<Val> ruleAcos(Importer &I, Node &n) { // pi/2 - asin(x)
  V x = in0(I, n);
  V asin = mul(I, atan(I, div(I, x, add(I, c(I, x, 1), sqrt(I, sub(I, c(I, x, 1), mul(I, x, x)))))), c(I, x, 2));
  return one(sub(I, c(I, x, M_PI / 2), asin));
}
std::vector<Val> ruleIsNaN(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(I.op(OpKind::Ne, {x, x}));
}
std::vector<Val> ruleIsInf(Importer &I, Node &n) {
  V x = in0(I, n);
  const bool pos = n.i("detect_positive", 1), neg = n.i("detect_negative", 1);
  V p = I.op(OpKind::Eq, {x, c(I, x, INFINITY)}), m = I.op(OpKind::Eq, {x, c(I, x, -INFINITY)});
  if (pos && neg) return one(I.op(OpKind::Or, {p, m}));
  if (pos) return one(p);
  if (neg) return one(m);
  return one(I.op(OpKind::And, {p, m})); // neither: all false
}
std::vector<Val> ruleSoftplus(Importer &I, Node &n) { // log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
  V x = in0(I, n);
  V t = I.op(OpKind::Log1p, {exp(I, I.op(OpKind::Neg, {I.op(OpKind::Abs, {x})}))});
  return one(add(I, I.op(OpKind::Max, {x, c(I, x, 0)}), t));
}
std::vector<Val> ruleSoftsign(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(div(I, x, add(I, c(I, x, 1), I.op(OpKind::Abs, {x}))));
}
namespace {
V negativePart(Importer &I, V x, V neg) { return I.op(OpKind::Where, {I.op(OpKind::Lt, {x, c(I, x, 0)}), neg, x}); }
} // namespace
std::vector<Val> ruleElu(Importer &I, Node &n) { // x < 0: alpha (e^x - 1)
  V x = in0(I, n);
  return one(negativePart(I, x, mul(I, c(I, x, n.f("alpha", 1.0)), I.op(OpKind::Expm1, {x}))));
}
std::vector<Val> ruleSelu(Importer &I, Node &n) { // gamma (x <= 0: alpha (e^x - 1); x)
  V x = in0(I, n);
  const double alpha = n.f("alpha", 1.67326319217681884765625), gamma = n.f("gamma", 1.05070102214813232421875);
  V e = mul(I, c(I, x, alpha), I.op(OpKind::Expm1, {x}));
  return one(mul(I, c(I, x, gamma), I.op(OpKind::Where, {I.op(OpKind::Le, {x, c(I, x, 0)}), e, x})));
}
std::vector<Val> ruleCelu(Importer &I, Node &n) { // max(0, x) + min(0, alpha (e^(x/alpha) - 1))
  V x = in0(I, n);
  const double alpha = n.f("alpha", 1.0);
  V e = mul(I, c(I, x, alpha), I.op(OpKind::Expm1, {div(I, x, c(I, x, alpha))}));
  return one(add(I, I.op(OpKind::Max, {x, c(I, x, 0)}), I.op(OpKind::Min, {e, c(I, x, 0)})));
}
std::vector<Val> ruleLeakyRelu(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(negativePart(I, x, mul(I, x, c(I, x, n.f("alpha", 0.01)))));
}
std::vector<Val> ruleThresholdedRelu(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(I.op(OpKind::Where, {I.op(OpKind::Gt, {x, c(I, x, n.f("alpha", 1.0))}), x, c(I, x, 0)}));
}
namespace {
V hardSigmoid(Importer &I, V x, double alpha, double beta) {
  V y = add(I, mul(I, x, c(I, x, alpha)), c(I, x, beta));
  return I.op(OpKind::Max, {I.op(OpKind::Min, {y, c(I, x, 1)}), c(I, x, 0)});
}
} // namespace
std::vector<Val> ruleHardSigmoid(Importer &I, Node &n) {
  return one(hardSigmoid(I, in0(I, n), n.f("alpha", 0.2), n.f("beta", 0.5)));
}
std::vector<Val> ruleHardSwish(Importer &I, Node &n) {
  V x = in0(I, n);
  return one(mul(I, x, hardSigmoid(I, x, 1.0 / 6, 0.5)));
}
std::vector<Val> ruleMish(Importer &I, Node &n) { // x tanh(softplus(x))
  V x = in0(I, n);
  V sp = add(I, I.op(OpKind::Max, {x, c(I, x, 0)}), I.op(OpKind::Log1p, {exp(I, I.op(OpKind::Neg, {I.op(OpKind::Abs, {x})}))}));
  return one(mul(I, x, I.op(OpKind::Tanh, {sp})));
}
std::vector<Val> rulePRelu(Importer &I, Node &n) {
  V x = in0(I, n), slope = in1(I, n);
  // A 1-d slope of the channel count that does not broadcast from the right is per channel
  // (axis 1), as PRelu before opset 7 and PyTorch's exporter of that time meant it.
  const auto &xd = Importer::dims(x), &sd = Importer::dims(slope);
  if (sd.size() == 1 && xd.size() > 2 && sd[0] != xd.back() && !sd[0].isOne() && sd[0] == xd[1]) {
    std::vector<Dim> d(xd.size() - 1, Dim::constant(1));
    d[0] = sd[0];
    slope = I.reshape(slope, d);
  }
  return one(negativePart(I, x, mul(I, x, slope)));
}
std::vector<Val> ruleShrink(Importer &I, Node &n) { // x < -lambd: x + bias; x > lambd: x - bias; else 0
  V x = in0(I, n);
  const double l = n.f("lambd", 0.5), b = n.f("bias", 0.0);
  V lo = I.op(OpKind::Lt, {x, c(I, x, -l)}), hi = I.op(OpKind::Gt, {x, c(I, x, l)});
  V y = I.op(OpKind::Where, {hi, sub(I, x, c(I, x, b)), c(I, x, 0)});
  return one(I.op(OpKind::Where, {lo, add(I, x, c(I, x, b)), y}));
}
std::vector<Val> ruleClip(Importer &I, Node &n) { // NumPy's clip: min(max(x, lo), hi)
  V x = in0(I, n);
  V lo = nullptr, hi = nullptr;
  if (n.opset < 11) {
    if (n.attr("min")) lo = c(I, x, n.f("min", 0));
    if (n.attr("max")) hi = c(I, x, n.f("max", 0));
  } else {
    if (n.has(1)) lo = I.cast(I.v(n.in[1]), Importer::dtype(x));
    if (n.has(2)) hi = I.cast(I.v(n.in[2]), Importer::dtype(x));
  }
  if (lo) x = I.op(OpKind::Max, {x, lo});
  if (hi) x = I.op(OpKind::Min, {x, hi});
  return one(x);
}

std::vector<Val> ruleAdd(Importer &I, Node &n) { return binary(I, n, OpKind::Add); }
std::vector<Val> ruleSub(Importer &I, Node &n) { return binary(I, n, OpKind::Sub); }
std::vector<Val> ruleMul(Importer &I, Node &n) { return binary(I, n, OpKind::Mul); }
std::vector<Val> ruleDiv(Importer &I, Node &n) {
  V a = in0(I, n), b = in1(I, n);
  if (isFloat(Importer::dtype(a))) return one(div(I, a, b));
  // Integer division truncates toward zero (C's, not Python's floor): floor + 1 where the
  // remainder is nonzero and the signs differ.
  V q = I.op(OpKind::FloorDiv, {a, b}), r = I.op(OpKind::Mod, {a, b});
  V zero = c(I, a, 0);
  V fix = I.op(OpKind::And, {I.op(OpKind::Ne, {r, zero}), I.op(OpKind::Xor, {I.op(OpKind::Lt, {a, zero}), I.op(OpKind::Lt, {b, zero})})});
  return one(I.op(OpKind::Where, {fix, add(I, q, c(I, q, 1)), q}));
}
std::vector<Val> rulePow(Importer &I, Node &n) {
  V a = in0(I, n), b = in1(I, n);
  // The result has the base's dtype: compute in the promoted dtype and cast back.
  return one(I.cast(I.op(OpKind::Pow, {a, b}), Importer::dtype(a)));
}
std::vector<Val> ruleMod(Importer &I, Node &n) {
  V a = in0(I, n), b = in1(I, n);
  if (!n.i("fmod", 0)) {
    if (isFloat(Importer::dtype(a))) throw BadModel("Mod of floats needs fmod = 1");
    return one(I.op(OpKind::Mod, {a, b})); // the divisor's sign, as Python's
  }
  // C's fmod: the dividend's sign. a - b trunc(a / b).
  if (!isFloat(Importer::dtype(a))) {
    V r = I.op(OpKind::Mod, {a, b}), zero = c(I, a, 0);
    V fix = I.op(OpKind::And, {I.op(OpKind::Ne, {r, zero}), I.op(OpKind::Xor, {I.op(OpKind::Lt, {a, zero}), I.op(OpKind::Lt, {b, zero})})});
    return one(I.op(OpKind::Where, {fix, sub(I, r, b), r}));
  }
  V q = div(I, a, b);
  V t = I.op(OpKind::Where, {I.op(OpKind::Lt, {q, c(I, q, 0)}), I.op(OpKind::Ceil, {q}), I.op(OpKind::Floor, {q})});
  return one(sub(I, a, mul(I, b, t)));
}
std::vector<Val> ruleAnd(Importer &I, Node &n) { return binary(I, n, OpKind::And); }
std::vector<Val> ruleOr(Importer &I, Node &n) { return binary(I, n, OpKind::Or); }
std::vector<Val> ruleXor(Importer &I, Node &n) { return binary(I, n, OpKind::Xor); }
std::vector<Val> ruleEqual(Importer &I, Node &n) { return binary(I, n, OpKind::Eq); }
std::vector<Val> ruleLess(Importer &I, Node &n) { return binary(I, n, OpKind::Lt); }
std::vector<Val> ruleLessOrEqual(Importer &I, Node &n) { return binary(I, n, OpKind::Le); }
std::vector<Val> ruleGreater(Importer &I, Node &n) { return binary(I, n, OpKind::Gt); }
std::vector<Val> ruleGreaterOrEqual(Importer &I, Node &n) { return binary(I, n, OpKind::Ge); }
std::vector<Val> ruleWhere(Importer &I, Node &n) {
  if (!n.has(2)) throw BadModel("Where takes 3 inputs");
  return one(I.op(OpKind::Where, {in0(I, n), in1(I, n), I.v(n.in[2])}));
}
namespace {
V variadic(Importer &I, Node &n, OpKind k) {
  V acc = nullptr;
  for (auto &x : n.in) {
    if (!x.present()) continue;
    V y = I.v(x);
    acc = acc ? I.op(k, {acc, y}) : y;
  }
  if (!acc) throw BadModel("no inputs");
  return acc;
}
} // namespace
std::vector<Val> ruleMax(Importer &I, Node &n) { return one(variadic(I, n, OpKind::Max)); }
std::vector<Val> ruleMin(Importer &I, Node &n) { return one(variadic(I, n, OpKind::Min)); }
std::vector<Val> ruleSum(Importer &I, Node &n) { return one(variadic(I, n, OpKind::Add)); }
std::vector<Val> ruleMean(Importer &I, Node &n) {
  V s = variadic(I, n, OpKind::Add);
  size_t count = 0;
  for (auto &x : n.in) count += x.present();
  return one(div(I, s, c(I, s, double(count))));
}
std::vector<Val> ruleCast(Importer &I, Node &n) {
  auto *to = n.attr("to");
  if (!to) throw BadModel("Cast needs the attribute `to`");
  if (n.has(0) && n.in[0].str) return {castStrings(*n.in[0].str, dtypeOfElem(int32_t(to->i())))};
  return one(I.cast(in0(I, n), dtypeOfElem(int32_t(to->i()))));
}
std::vector<Val> ruleCastLike(Importer &I, Node &n) {
  if (n.has(1) && n.in[1].str) throw Unsupported("a cast to strings is not supported (Tessera has no string dtype)");
  if (n.has(0) && n.in[0].str) return {castStrings(*n.in[0].str, Importer::dtype(in1(I, n)))};
  return one(I.cast(in0(I, n), Importer::dtype(in1(I, n))));
}
std::vector<Val> ruleDropout(Importer &I, Node &n) {
  // Inference: the identity, and a mask of ones. Training mode draws random numbers: refused.
  if (n.opset >= 12 && n.has(2) && n.in[2].k && n.in[2].k->toI64(0) != 0)
    throw Unsupported("Dropout in training mode (random) is not supported");
  if (n.opset >= 12 && n.has(2) && !n.in[2].k) throw Unsupported("Dropout with a training_mode known only at run time");
  if (n.opset < 7 && !n.i("is_test", 0)) throw Unsupported("Dropout in training mode (random) is not supported");
  V x = in0(I, n);
  std::vector<Val> out = one(x);
  if (n.numOutputs > 1) out.push_back(Importer::of(I.full(Importer::dims(x), 1, DType::Bool)));
  return out;
}

} // namespace tsr::onnxio
