// The typing rules of the builtins (sema/builtins/*.cpp), called through hand-built call sites.
// Each call is written out as a small source file, so that a diagnostic's range can be checked
// against the argument it should point at.
#include "sema/Builtins.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

using namespace tsr;
using namespace tsr::sema;

namespace {

Dim S(std::string_view n) { return Dim::symbol(n); }
Dim C(int64_t v) { return Dim::constant(v); }
TypeRef I(int64_t v) { return T::integer(C(v)); }
TypeRef Sym(std::string_view n) { return T::integer(S(n)); }
TypeRef Tup(std::vector<TypeRef> es) { return T::tuple(std::move(es)); }
TypeRef Ten(std::vector<Dim> d, DType t = DType::F32) { return T::tensor(std::move(d), t); }

/// One argument: its text as written in the call, its type, and its keyword (if any).
struct A {
  std::string text;
  TypeRef type;
  std::string keyword = {};
};

class Harness {
public:
  SourceManager sm;
  DiagnosticEngine diags{sm};
  std::function<TypeRef(const TypeRef &, const std::vector<TypeRef> &)> callValue;

  Harness() { diags.setMaxErrors(1000); }

  TypeRef call(const std::string &name, const std::vector<A> &args) { return run(findBuiltin(name), name, args, nullptr); }
  TypeRef method(TypeKind k, const std::string &name, TypeRef self, const std::vector<A> &args) {
    return run(findMethod(k, name), "x." + name, args, std::move(self));
  }

  size_t errors() const { return diags.errorCount(); }
  const Diagnostic &last() const { return diags.diagnostics().back(); }
  /// The source text under the last diagnostic's range.
  std::string lastAt() const {
    const Diagnostic &d = last();
    if (!sm.has(d.range.file)) return "";
    return sm.file(d.range.file).text().substr(d.range.begin, d.range.end - d.range.begin);
  }

private:
  TypeRef run(const BuiltinInfo *b, const std::string &callee, const std::vector<A> &args, TypeRef self) {
    REQUIRE(b != nullptr);
    std::string text = callee + "(";
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    for (size_t i = 0; i < args.size(); ++i) {
      if (i) text += ", ";
      if (!args[i].keyword.empty()) text += args[i].keyword + "=";
      uint32_t begin = static_cast<uint32_t>(text.size());
      text += args[i].text;
      spans.push_back({begin, static_cast<uint32_t>(text.size())});
    }
    text += ")";
    FileId f = sm.addFile("call" + std::to_string(++files_) + ".tsr", text);
    CallSite s;
    s.name = b->name;
    s.range = {f, 0, static_cast<uint32_t>(text.size())};
    s.calleeRange = {f, 0, static_cast<uint32_t>(callee.size())};
    for (size_t i = 0; i < args.size(); ++i) {
      ArgInfo a{args[i].type, {f, spans[i].first, spans[i].second}, nullptr, args[i].keyword};
      (args[i].keyword.empty() ? s.args : s.keywords).push_back(a);
    }
    s.self = std::move(self);
    s.context = InHost;
    s.diags = &diags;
    s.callValue = callValue;
    TypeRef r = b->rule(s);
    REQUIRE(r != nullptr);
    return r;
  }
  int files_ = 0;
};

TypeRef key() { return T::key(); }
TypeRef yes() { return T::boolean(true); }

} // namespace

TEST_CASE("the registry") {
  REQUIRE(findBuiltin("exp") != nullptr);
  CHECK(findBuiltin("exp")->contexts == Anywhere);
  CHECK(findBuiltin("reshape")->contexts == HostAndGraph);
  CHECK(findBuiltin("print")->contexts == InHost);
  CHECK(findBuiltin("random.normal") != nullptr);
  CHECK(findBuiltin("dist.all_reduce") != nullptr);
  CHECK(findBuiltin("no_such_builtin") == nullptr);
  CHECK(isBuiltinNamespace("tile"));
  CHECK(isBuiltinNamespace("random"));
  CHECK(isBuiltinNamespace("dist"));
  CHECK_FALSE(isBuiltinNamespace("exp"));
  CHECK(findMethod(TypeKind::Tensor, "astype") != nullptr);
  CHECK(findMethod(TypeKind::Schedule, "with_block") != nullptr);
  CHECK(findMethod(TypeKind::Dict, "items") != nullptr);
  CHECK(findMethod(TypeKind::List, "append") != nullptr);
  CHECK(findMethod(TypeKind::Key, "split") == nullptr);
  std::set<std::string> names;
  for (const BuiltinInfo &b : allBuiltins()) {
    INFO(b.name);
    CHECK(names.insert(b.name).second);
    if (b.name.rfind("tile.", 0) == 0) continue; // sema/builtins/Tile.cpp's entries
    CHECK(static_cast<bool>(b.rule));
    CHECK_FALSE(b.signature.empty());
    CHECK_FALSE(b.doc.empty());
  }
}

TEST_CASE("elementwise math") {
  Harness h;
  TypeRef r = h.call("exp", {{"n", Ten({S("N")}, DType::I32)}});
  CHECK(r->dtype == DType::F32); // integer tensors promote, as jnp.exp
  CHECK(r->dims == std::vector<Dim>{S("N")});

  r = h.call("exp", {{"2.0", T::floating(2.0)}});
  REQUIRE(r->is(TypeKind::Float));
  CHECK(r->floatValue.value_or(0) == doctest::Approx(std::exp(2.0)));
  CHECK(h.call("sqrt", {{"float(D)", T::floating()}})->is(TypeKind::Float));

  r = h.call("abs", {{"-3", I(-3)}});
  REQUIRE(r->is(TypeKind::Int));
  CHECK(r->intValue == C(3));
  CHECK(h.call("floor", {{"2.5", T::floating(2.5)}})->intValue == C(2));
  CHECK(h.call("relu", {{"x", Ten({C(4)}, DType::I32)}})->dtype == DType::I32);
  CHECK(h.errors() == 0);

  h.call("exp", {{"x8", Ten({C(4)}, DType::F8E4M3)}});
  CHECK(h.last().kind == DiagKind::Fp8Arithmetic);
  CHECK(h.lastAt() == "x8");

  CHECK(h.call("exp", {{"\"a\"", T::str("a")}})->is(TypeKind::Unknown));
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.last().message == "`exp` expects a tensor or a number for `x`, not str");
  CHECK(h.lastAt() == "\"a\"");
}

TEST_CASE("argument counts and keywords") {
  Harness h;
  TypeRef x = Ten({C(2)});
  h.call("exp", {{"x", x}, {"y", x}});
  CHECK(h.last().kind == DiagKind::TooManyArgs);
  CHECK(h.last().message == "`exp` takes 1 positional argument(s) but 2 were given");
  CHECK(h.lastAt() == "y");

  h.call("zeros", {{"(2,)", Tup({I(2)})}, {"1", I(1), "foo"}});
  CHECK(h.last().kind == DiagKind::UnknownKeyword);
  CHECK(h.last().message == "`zeros` has no parameter named `foo`");

  h.call("reshape", {{"x", x}});
  CHECK(h.last().kind == DiagKind::MissingArg);
  CHECK(h.last().message == "`reshape` is missing the argument `shape`");

  h.call("reshape", {{"x", x}, {"(2,)", Tup({I(2)})}, {"(2,)", Tup({I(2)}), "shape"}});
  CHECK(h.last().kind == DiagKind::DuplicateArg);
}

TEST_CASE("unknown arguments are accepted silently") {
  Harness h;
  TypeRef u = T::unknown();
  CHECK(h.call("reshape", {{"u", u}, {"(2, 3)", Tup({I(2), I(3)})}})->is(TypeKind::Unknown));
  CHECK(h.call("sum", {{"u", u}, {"5", I(5), "axis"}})->is(TypeKind::Unknown));
  CHECK(h.call("where", {{"u", u}, {"x", Ten({C(2)})}, {"0.0", T::floating(0.0)}})->is(TypeKind::Unknown));
  TypeRef z = h.call("zeros", {{"u", u}});
  CHECK(z->is(TypeKind::Tensor));
  CHECK_FALSE(z->rankKnown);
  CHECK(h.call("grad", {{"u", u}})->is(TypeKind::Unknown));
  CHECK(h.call("tree_map", {{"f", u}, {"u", u}})->is(TypeKind::Unknown));
  CHECK(h.call("random.split", {{"u", u}})->elems.size() == 2);
  CHECK(h.call("max", {{"u", u}, {"0", I(0)}})->is(TypeKind::Unknown));
  CHECK(h.errors() == 0);
}

TEST_CASE("reshape") {
  Harness h;
  TypeRef x = Ten({S("B"), S("S"), S("D")}, DType::BF16);
  // ["B", "S", "D"] -> ["B", "S", "heads", "D/heads"]: heads * (D/heads) = D.
  Dim perHead = *S("D").divide(S("heads"));
  TypeRef r = h.call("reshape", {{"x", x}, {"(B, S, heads, D // heads)", Tup({Sym("B"), Sym("S"), Sym("heads"), T::integer(perHead)})}});
  CHECK(h.errors() == 0);
  CHECK(r->dims == std::vector<Dim>{S("B"), S("S"), S("heads"), perHead});
  CHECK(r->dtype == DType::BF16);

  // -1 is inferred as count(x) / count(rest).
  r = h.call("reshape", {{"x", x}, {"(B * S, -1)", Tup({T::integer(S("B") * S("S")), I(-1)})}});
  CHECK(h.errors() == 0);
  CHECK(r->dims == std::vector<Dim>{S("B") * S("S"), S("D")});

  // The method takes the shape as separate arguments too.
  r = h.method(TypeKind::Tensor, "reshape", x, {{"B * S", T::integer(S("B") * S("S"))}, {"D", Sym("D")}});
  CHECK(h.errors() == 0);
  CHECK(r->dims == std::vector<Dim>{S("B") * S("S"), S("D")});

  h.call("reshape", {{"x", x}, {"(B, S)", Tup({Sym("B"), Sym("S")})}});
  CHECK(h.last().kind == DiagKind::ReshapeCount);
  CHECK(h.lastAt() == "(B, S)");

  h.call("reshape", {{"y", Ten({C(2), C(3)})}, {"(4,)", Tup({I(4)})}});
  CHECK(h.last().message == "cannot reshape 6 elements into a shape of 4 elements");

  h.call("reshape", {{"y", Ten({C(10)})}, {"(3, -1)", Tup({I(3), I(-1)})}});
  CHECK(h.last().kind == DiagKind::DimNotDivisible);
  CHECK(h.lastAt() == "(3, -1)");

  h.call("reshape", {{"y", Ten({C(4)})}, {"(-1, -1)", Tup({I(-1), I(-1)})}});
  CHECK(h.last().kind == DiagKind::ArgKind);

  // An unknown extent cannot prove a mismatch: a run-time guard checks it.
  size_t before = h.errors();
  h.call("reshape", {{"x", x}, {"(n, D)", Tup({T::integer(), Sym("D")})}});
  CHECK(h.errors() == before);
}

TEST_CASE("split") {
  Harness h;
  TypeRef qkv = Ten({S("B"), C(3) * S("D")}, DType::BF16);
  TypeRef r = h.call("split", {{"qkv", qkv}, {"3", I(3)}, {"-1", I(-1), "axis"}});
  CHECK(h.errors() == 0);
  REQUIRE(r->is(TypeKind::Tuple));
  REQUIRE(r->elems.size() == 3);
  for (auto &e : r->elems) {
    CHECK(e->dims == std::vector<Dim>{S("B"), S("D")});
    CHECK(e->dtype == DType::BF16);
  }

  h.call("split", {{"x", Ten({C(7)})}, {"2", I(2)}});
  CHECK(h.last().kind == DiagKind::SplitUneven);
  CHECK(h.last().message == "cannot split axis of size 7 into 2 equal parts");
  CHECK(h.lastAt() == "2");

  r = h.call("split", {{"x", Ten({C(5)})}, {"(2, 3)", Tup({I(2), I(3)})}});
  REQUIRE(r->elems.size() == 2);
  CHECK(r->elems[0]->dims == std::vector<Dim>{C(2)});
  CHECK(r->elems[1]->dims == std::vector<Dim>{C(3)});
  h.call("split", {{"x", Ten({C(5)})}, {"(2, 2)", Tup({I(2), I(2)})}});
  CHECK(h.last().kind == DiagKind::ShapeMismatch);

  // An unknown count gives a list.
  r = h.call("split", {{"x", Ten({S("N")})}, {"k", T::integer()}});
  CHECK(r->is(TypeKind::List));
  CHECK_FALSE(r->lengthKnown);
}

TEST_CASE("transpose") {
  Harness h;
  TypeRef x = Ten({S("A"), S("B"), S("C")});
  CHECK(h.call("transpose", {{"x", x}, {"(0, 2, 1)", Tup({I(0), I(2), I(1)})}})->dims == std::vector<Dim>{S("A"), S("C"), S("B")});
  CHECK(h.call("transpose", {{"x", x}})->dims == std::vector<Dim>{S("C"), S("B"), S("A")});
  CHECK(h.call("transpose", {{"x", x}, {"(0, -1, 1)", Tup({I(0), I(-1), I(1)})}})->dims == std::vector<Dim>{S("A"), S("C"), S("B")});
  CHECK(h.method(TypeKind::Tensor, "transpose", x, {{"1", I(1)}, {"0", I(0)}, {"2", I(2)}})->dims ==
        std::vector<Dim>{S("B"), S("A"), S("C")});
  CHECK(h.errors() == 0);

  h.call("transpose", {{"x", x}, {"(0, 0, 1)", Tup({I(0), I(0), I(1)})}});
  CHECK(h.last().kind == DiagKind::BadPermutation);
  CHECK(h.last().message == "`(0, 0, 1)` is not a permutation of the 3 axes");
  CHECK(h.lastAt() == "(0, 0, 1)");
  h.call("transpose", {{"x", x}, {"(0, 1)", Tup({I(0), I(1)})}});
  CHECK(h.last().kind == DiagKind::BadPermutation);
}

TEST_CASE("reductions") {
  Harness h;
  TypeRef x = Ten({S("B"), S("S"), S("D")});
  CHECK(h.call("sum", {{"x", x}, {"-1", I(-1), "axis"}, {"True", yes(), "keepdims"}})->dims ==
        std::vector<Dim>{S("B"), S("S"), C(1)});
  CHECK(h.call("mean", {{"x", x}, {"(0, -1)", Tup({I(0), I(-1)}), "axis"}})->dims == std::vector<Dim>{S("S")});
  TypeRef all = h.call("sum", {{"x", x}});
  CHECK(all->isScalarTensor());
  CHECK(h.method(TypeKind::Tensor, "max", x, {{"-1", I(-1)}})->dims == std::vector<Dim>{S("B"), S("S")});
  CHECK(h.call("max", {{"x", x}, {"1", I(1), "axis"}})->dims == std::vector<Dim>{S("B"), S("D")});

  TypeRef m = h.call("mean", {{"n", Ten({S("N")}, DType::I32)}});
  CHECK(m->dtype == DType::F32); // mean of integers is a float
  CHECK(m->isScalarTensor());
  Policies acc;
  acc.accum = DType::F32;
  TypeRef am = h.call("argmax", {{"y", T::tensor({S("B"), S("V")}, DType::BF16, acc)}, {"1", I(1), "axis"}});
  CHECK(am->dtype == DType::I64);
  CHECK(am->policies.empty());
  CHECK(am->dims == std::vector<Dim>{S("B")});
  CHECK(h.errors() == 0);

  h.call("sum", {{"x", x}, {"3", I(3), "axis"}});
  CHECK(h.last().kind == DiagKind::AxisOutOfRange);
  CHECK(h.last().message == "axis 3 is out of range for a tensor of rank 3");
  CHECK(h.lastAt() == "3");
  h.call("sum", {{"x", x}, {"(1, -2)", Tup({I(1), I(-2)}), "axis"}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "(1, -2)");
}

TEST_CASE("Python's min, max and sum") {
  Harness h;
  CHECK(h.call("max", {{"3", I(3)}, {"5", I(5)}})->intValue == C(5));
  CHECK(h.call("min", {{"N", Sym("N")}, {"64", I(64)}})->intValue == Dim::min(S("N"), C(64)));
  TypeRef f = h.call("max", {{"[1.5, 2]", T::list({T::floating(1.5), I(2)})}});
  REQUIRE(f->is(TypeKind::Float));
  CHECK(f->floatValue == std::optional<double>(2.0));
  CHECK(h.call("sum", {{"[1, 2, 3]", T::list({I(1), I(2), I(3)})}})->intValue == C(6));
  CHECK(h.call("max", {{"range(n)", h.call("range", {{"n", Sym("n")}})}})->is(TypeKind::Int));
  CHECK(h.errors() == 0);

  h.call("max", {{"2.0", T::floating(2.0)}, {"x", Ten({S("N")})}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "x");
}

TEST_CASE("maximum, where and clamp") {
  Harness h;
  TypeRef r = h.call("maximum", {{"x", Ten({S("B"), C(1)}, DType::BF16)}, {"0", I(0)}});
  CHECK(r->dtype == DType::BF16); // the Python scalar is weak
  CHECK(h.call("maximum", {{"a", Ten({S("B"), C(1)})}, {"b", Ten({S("D")})}})->dims == std::vector<Dim>{S("B"), S("D")});

  r = h.call("where", {{"c", Ten({S("B"), C(1)}, DType::Bool)}, {"a", Ten({C(1), S("D")}, DType::BF16)}, {"0.0", T::floating(0.0)}});
  CHECK(r->dims == std::vector<Dim>{S("B"), S("D")});
  CHECK(r->dtype == DType::BF16);
  r = h.call("where", {{"c", Ten({S("N")}, DType::Bool)}, {"a", Ten({S("N")}, DType::BF16)}, {"b", Ten({S("N")}, DType::F32)}});
  CHECK(r->dtype == DType::F32);
  CHECK(h.call("clamp", {{"x", Ten({S("N")}, DType::F16)}, {"0.0", T::floating(0.0), "min"}, {"6.0", T::floating(6.0), "max"}})->dtype ==
        DType::F16);
  CHECK(h.errors() == 0);

  h.call("where", {{"m", Ten({S("N")})}, {"a", Ten({S("N")})}, {"b", Ten({S("N")})}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "m");
  h.call("where", {{"c", Ten({S("B")}, DType::Bool)}, {"a", Ten({S("D")})}, {"b", Ten({S("D")})}});
  CHECK(h.last().kind == DiagKind::BroadcastMismatch);
}

TEST_CASE("casts keep dims and take the target's policies") {
  Harness h;
  Policies acc;
  acc.accum = DType::F32;
  TypeRef x = T::tensor({S("N")}, DType::BF16, acc);
  TypeRef r = h.call("cast", {{"x", x}, {"f32", T::dtypeVal(DType::F32)}});
  CHECK(r->dtype == DType::F32);
  CHECK(r->policies.empty());
  CHECK(r->dims == std::vector<Dim>{S("N")});
  r = h.call("cast", {{"y", Ten({S("N")})}, {"BF16A", T::dtypeVal(DType::BF16, acc)}});
  CHECK(r->dtype == DType::BF16);
  CHECK(r->policies == acc);
  CHECK(h.call("cast", {{"q", Ten({S("N")}, DType::F8E4M3)}, {"bf16", T::dtypeVal(DType::BF16)}})->dtype == DType::BF16);
  CHECK(h.call("cast", {{"y", Ten({S("N")})}, {"fp8_e5m2", T::dtypeVal(DType::F8E5M2)}})->dtype == DType::F8E5M2);
  r = h.method(TypeKind::Tensor, "astype", x, {{"f16", T::dtypeVal(DType::F16)}});
  CHECK(r->dtype == DType::F16);
  CHECK(r->dims == std::vector<Dim>{S("N")});
  CHECK(h.call("cast_like", {{"y", Ten({C(3)})}, {"x", x}})->policies == acc);
  CHECK(h.errors() == 0);

  h.call("cast", {{"y", Ten({C(3)})}, {"3", I(3)}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "3");
}

TEST_CASE("layout: concat, stack, squeeze, unsqueeze, broadcast_to, gather, one_hot") {
  Harness h;
  TypeRef a = Ten({S("B"), S("D")}), b = Ten({S("B"), S("H")});
  CHECK(h.call("concat", {{"(a, b)", Tup({a, b})}, {"-1", I(-1), "axis"}})->dims == std::vector<Dim>{S("B"), S("D") + S("H")});
  CHECK(h.call("stack", {{"(a, a)", Tup({a, a})}, {"1", I(1), "axis"}})->dims == std::vector<Dim>{S("B"), C(2), S("D")});
  CHECK(h.call("squeeze", {{"x", Ten({S("B"), C(1), S("D")})}, {"1", I(1), "axis"}})->dims == std::vector<Dim>{S("B"), S("D")});
  CHECK(h.call("squeeze", {{"x", Ten({C(2), C(1), C(1)})}})->dims == std::vector<Dim>{C(2)});
  CHECK(h.call("unsqueeze", {{"a", a}, {"-1", I(-1)}})->dims == std::vector<Dim>{S("B"), S("D"), C(1)});
  CHECK(h.call("broadcast_to", {{"x", Ten({S("N"), C(1)})}, {"(N, D)", Tup({Sym("N"), Sym("D")})}})->dims ==
        std::vector<Dim>{S("N"), S("D")});
  CHECK(h.call("expand", {{"x", Ten({S("N"), C(1)})}, {"(-1, D)", Tup({I(-1), Sym("D")})}})->dims == std::vector<Dim>{S("N"), S("D")});
  TypeRef g = h.call("gather", {{"t", Ten({S("B"), S("V")}, DType::BF16)}, {"i", Ten({S("B"), C(1)}, DType::I64)}, {"-1", I(-1), "axis"}});
  CHECK(g->dims == std::vector<Dim>{S("B"), C(1)});
  CHECK(g->dtype == DType::BF16);
  TypeRef oh = h.call("one_hot", {{"labels", Ten({S("B")}, DType::I32)}, {"10", I(10)}});
  CHECK(oh->dims == std::vector<Dim>{S("B"), C(10)});
  CHECK(oh->dtype == DType::F32);
  CHECK(h.call("matmul", {{"a", a}, {"w", Ten({S("D"), S("H")})}})->dims == std::vector<Dim>{S("B"), S("H")});
  CHECK(h.errors() == 0);

  h.call("concat", {{"(a, c)", Tup({a, Ten({S("C"), S("D")})})}, {"1", I(1), "axis"}});
  CHECK(h.last().kind == DiagKind::ConcatMismatch);
  CHECK(h.lastAt() == "(a, c)");
  h.call("squeeze", {{"x", Ten({S("B"), C(3)})}, {"1", I(1), "axis"}});
  CHECK(h.last().kind == DiagKind::ShapeMismatch);
  CHECK(h.lastAt() == "1");
  h.call("broadcast_to", {{"x", Ten({C(3)})}, {"(2, 4)", Tup({I(2), I(4)})}});
  CHECK(h.last().kind == DiagKind::BroadcastMismatch);
  h.call("gather", {{"t", Ten({S("B"), S("V")})}, {"i", Ten({S("B")}, DType::I32)}, {"1", I(1)}});
  CHECK(h.last().kind == DiagKind::RankMismatch);
  CHECK(h.lastAt() == "i");
  h.call("matmul", {{"a", a}, {"w", Ten({S("H"), S("N")})}});
  CHECK(h.last().kind == DiagKind::MatmulInner);
}

TEST_CASE("creation") {
  Harness h;
  TypeRef r = h.call("zeros", {{"(B, 64)", Tup({Sym("B"), I(64)})}, {"bf16", T::dtypeVal(DType::BF16)}});
  CHECK(r->dims == std::vector<Dim>{S("B"), C(64)});
  CHECK(r->dtype == DType::BF16);
  CHECK(h.call("ones", {{"N", Sym("N")}})->dims == std::vector<Dim>{S("N")});
  CHECK(h.call("full", {{"(2,)", Tup({I(2)})}, {"1", I(1)}})->dtype == DType::I32);
  CHECK(h.call("full", {{"(2,)", Tup({I(2)})}, {"1.0", T::floating(1.0)}})->dtype == DType::F32);
  CHECK(h.call("zeros_like", {{"x", Ten({S("N")}, DType::BF16)}})->dtype == DType::BF16);
  CHECK(h.call("ones_like", {{"x", Ten({S("N")}, DType::BF16)}, {"f32", T::dtypeVal(DType::F32), "dtype"}})->dtype == DType::F32);

  r = h.call("arange", {{"0", I(0)}, {"N", Sym("N")}});
  CHECK(r->dims == std::vector<Dim>{S("N")});
  CHECK(r->dtype == DType::I32);
  CHECK(h.call("arange", {{"N", Sym("N")}})->dims == std::vector<Dim>{S("N")});
  CHECK(h.call("arange", {{"0", I(0)}, {"10", I(10)}, {"3", I(3)}})->dims == std::vector<Dim>{C(4)});
  r = h.call("arange", {{"0.0", T::floating(0.0)}, {"1.0", T::floating(1.0)}, {"0.25", T::floating(0.25)}});
  CHECK(r->dims == std::vector<Dim>{C(4)});
  CHECK(r->dtype == DType::F32);
  CHECK(h.call("eye", {{"3", I(3)}})->dims == std::vector<Dim>{C(3), C(3)});

  r = h.call("tensor", {{"[[1, 2], [3, 4]]", T::list({T::list({I(1), I(2)}), T::list({I(3), I(4)})})}});
  CHECK(r->dims == std::vector<Dim>{C(2), C(2)});
  CHECK(r->dtype == DType::I32);
  r = h.call("tensor", {{"[[1, 2.5]]", T::list({T::list({I(1), T::floating(2.5)})})}});
  CHECK(r->dims == std::vector<Dim>{C(1), C(2)});
  CHECK(r->dtype == DType::F32);
  CHECK(h.errors() == 0);

  h.call("tensor", {{"[[1, 2], [3]]", T::list({T::list({I(1), I(2)}), T::list({I(3)})})}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  h.call("zeros", {{"(2, -3)", Tup({I(2), I(-3)})}});
  CHECK(h.last().kind == DiagKind::NegativeDim);
  CHECK(h.last().message == "dimension -3 is negative");
  CHECK(h.lastAt() == "(2, -3)");
  h.call("zeros", {{"(2, 3)", Tup({I(2), I(3)})}, {"\"x\"", T::floating(1.0), "dtype"}});
  CHECK(h.last().kind == DiagKind::ArgKind);
}

TEST_CASE("random") {
  Harness h;
  TypeRef k = h.call("random.key", {{"0", I(0)}});
  CHECK(k->is(TypeKind::Key));
  TypeRef two = h.call("random.split", {{"k", key()}});
  REQUIRE(two->is(TypeKind::Tuple));
  CHECK(two->elems.size() == 2);
  TypeRef three = h.call("random.split", {{"k", key()}, {"3", I(3)}});
  REQUIRE(three->elems.size() == 3);
  CHECK(three->elems[2]->is(TypeKind::Key));
  TypeRef some = h.call("random.split", {{"k", key()}, {"n", T::integer()}});
  CHECK(some->is(TypeKind::List));
  CHECK_FALSE(some->lengthKnown);

  TypeRef r = h.call("random.normal", {{"k", key()}, {"(B, D)", Tup({Sym("B"), Sym("D")})}, {"bf16", T::dtypeVal(DType::BF16)}});
  CHECK(r->dims == std::vector<Dim>{S("B"), S("D")});
  CHECK(r->dtype == DType::BF16);
  CHECK(h.call("random.uniform", {{"k", key()}, {"(4,)", Tup({I(4)})}})->dtype == DType::F32);
  CHECK(h.call("random.randint", {{"k", key()}, {"(4,)", Tup({I(4)})}, {"0", I(0)}, {"10", I(10)}})->dtype == DType::I32);
  r = h.call("random.permutation", {{"k", key()}, {"N", Sym("N")}});
  CHECK(r->dims == std::vector<Dim>{S("N")});
  CHECK(r->dtype == DType::I32);
  r = h.call("random.bernoulli", {{"k", key()}, {"0.9", T::floating(0.9)}, {"(N,)", Tup({Sym("N")})}});
  CHECK(r->dims == std::vector<Dim>{S("N")});
  CHECK(r->dtype == DType::Bool);
  CHECK(h.call("random.bernoulli", {{"k", key()}, {"p", Ten({S("B"), S("D")})}})->dims == std::vector<Dim>{S("B"), S("D")});
  CHECK(h.errors() == 0);

  h.call("random.split", {{"3", I(3)}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "3");
  h.call("random.normal", {{"k", key()}, {"(2, 3)", Tup({I(2), I(3)})}, {"i32", T::dtypeVal(DType::I32)}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "i32");
}

TEST_CASE("host builtins") {
  Harness h;
  CHECK(h.call("print", {{"\"loss\"", T::str("loss")}, {"1", I(1)}, {"\", \"", T::str(", "), "sep"}})->is(TypeKind::None));
  CHECK(h.call("len", {{"(1, 2, 3)", Tup({I(1), I(2), I(3)})}})->intValue == C(3));
  CHECK(h.call("len", {{"x", Ten({S("B"), S("D")})}})->intValue == S("B"));
  TypeRef rng = h.call("range", {{"0", I(0)}, {"10", I(10)}, {"3", I(3)}});
  CHECK(rng->is(TypeKind::Range));
  CHECK(h.call("len", {{"range(0, 10, 3)", rng}})->intValue == C(4));
  CHECK(h.call("progress", {{"range(N)", rng}, {"\"fit\"", T::str("fit"), "desc"}})->is(TypeKind::Range));
  CHECK(h.call("int", {{"2.7", T::floating(2.7)}})->intValue == C(2));
  CHECK(std::isinf(h.call("float", {{"\"inf\"", T::str("inf")}})->floatValue.value_or(0)));
  CHECK(h.call("cdiv", {{"10", I(10)}, {"3", I(3)}})->intValue == C(4));
  CHECK(h.call("cdiv", {{"-7", I(-7)}, {"2", I(2)}})->intValue == C(-3));
  CHECK(h.call("cdiv", {{"N", Sym("N")}, {"128", I(128)}})->intValue == Dim::opaque("cdiv(N, 128)"));
  CHECK(h.call("item", {{"x", Ten({C(1), C(1)})}})->is(TypeKind::Float));
  CHECK(h.call("item", {{"n", T::scalar(DType::I32)}})->is(TypeKind::Int));
  CHECK(h.call("item", {{"b", T::scalar(DType::Bool)}})->is(TypeKind::Bool));
  TypeRef d = h.call("dict", {{"[64, 128]", T::list({I(64), I(128)}), "BM"}, {"[4, 8]", T::list({I(4), I(8)}), "warps"}});
  REQUIRE(d->is(TypeKind::Dict));
  REQUIRE(d->fields.size() == 2);
  CHECK(d->fields[0].first == "BM");
  CHECK(d->fields[1].first == "warps");
  TypeRef e = h.call("enumerate", {{"(a, b)", Tup({Ten({C(2)}), Ten({C(3)})})}});
  REQUIRE(e->elems.size() == 2);
  CHECK(e->elems[1]->elems[0]->intValue == C(1));
  CHECK(e->elems[1]->elems[1]->dims == std::vector<Dim>{C(3)});
  TypeRef z = h.call("zip", {{"(1, 2)", Tup({I(1), I(2)})}, {"(1.0, 2.0)", Tup({T::floating(1.0), T::floating(2.0)})}});
  REQUIRE(z->elems.size() == 2);
  CHECK(z->elems[0]->elems[1]->is(TypeKind::Float));
  CHECK(h.errors() == 0);

  h.call("item", {{"x", Ten({C(3)})}});
  CHECK(h.last().kind == DiagKind::ShapeMismatch);
  CHECK(h.last().message == "`item` needs a tensor with one element: shape [3] does not match []");
  CHECK(h.lastAt() == "x");
  h.call("item", {{"3.0", T::floating(3.0)}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  h.call("len", {{"s", T::scalar(DType::F32)}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  h.call("cdiv", {{"N", Sym("N")}, {"0", I(0)}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "0");
  h.call("print", {{"x", I(1)}, {"1", I(1), "color"}});
  CHECK(h.last().kind == DiagKind::UnknownKeyword);
}

TEST_CASE("schedules") {
  Harness h;
  TypeRef s = h.call("Schedule", {{"(128, 128)", Tup({I(128), I(128)}), "block"}, {"64", I(64), "k"}, {"8", I(8), "warps"}, {"3", I(3), "stages"}});
  REQUIRE(s->is(TypeKind::Schedule));
  using Knobs = std::vector<std::pair<std::string, Dim>>;
  CHECK(s->knobs == Knobs{{"BM", C(128)}, {"BN", C(128)}, {"BK", C(64)}, {"warps", C(8)}, {"stages", C(3)}});
  TypeRef small = h.method(TypeKind::Schedule, "with_block", s, {{"64", I(64)}, {"64", I(64)}});
  CHECK(small->knobs == Knobs{{"BM", C(64)}, {"BN", C(64)}, {"BK", C(64)}, {"warps", C(8)}, {"stages", C(3)}});
  CHECK(h.method(TypeKind::Schedule, "with_warps", s, {{"4", I(4)}})->knobs[3].second == C(4));
  CHECK(h.errors() == 0);

  h.call("Schedule", {{"(128, 128)", Tup({I(128), I(128)}), "block"}, {"64", I(64), "k"}, {"6", I(6), "warps"}});
  CHECK(h.last().kind == DiagKind::ScheduleKnob);
  CHECK(h.last().message == "invalid schedule: warps must be a power of two from 1 to 32, not 6");
  CHECK(h.lastAt() == "6");
  h.call("Schedule", {{"(128, n)", Tup({I(128), T::integer()}), "block"}, {"64", I(64), "k"}});
  CHECK(h.last().kind == DiagKind::NotCompileTime);
}

TEST_CASE("tree_map") {
  Harness h;
  // fn turns each leaf into f16, so the result's structure and leaves can be told apart.
  h.callValue = [](const TypeRef &, const std::vector<TypeRef> &leaves) {
    return leaves[0]->is(TypeKind::Tensor) ? T::withDType(leaves[0], DType::F16, {}) : leaves[0];
  };
  TypeRef params = T::dict({{"w", Ten({S("D"), S("H")})}, {"b", Ten({S("H")})}});
  TypeRef grads = T::dict({{"b", Ten({S("H")})}, {"w", Ten({S("D"), S("H")})}});
  TypeRef fn = T::lambda(nullptr);
  TypeRef r = h.call("tree_map", {{"lambda p, g: p", fn}, {"params", params}, {"grads", grads}});
  CHECK(h.errors() == 0);
  REQUIRE(r->is(TypeKind::Dict));
  REQUIRE(r->fields.size() == 2);
  CHECK(r->fields[0].first == "w");
  CHECK(r->fields[0].second->dtype == DType::F16);
  CHECK(r->fields[1].second->dims == std::vector<Dim>{S("H")});
  TypeRef t = h.call("tree_map", {{"f", fn}, {"(a, [b])", Tup({Ten({C(2)}), T::list({Ten({C(3)})})})}});
  REQUIRE(t->is(TypeKind::Tuple));
  CHECK(t->elems[1]->is(TypeKind::List));
  CHECK(t->elems[1]->elems[0]->dtype == DType::F16);

  h.call("tree_map", {{"f", fn}, {"params", params}, {"wrong", T::dict({{"w", Ten({S("D"), S("H")})}})}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "wrong");
  h.call("tree_map", {{"f", fn}, {"(a, b)", Tup({Ten({C(2)}), Ten({C(2)})})}, {"(a,)", Tup({Ten({C(2)})})}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  h.call("tree_map", {{"3", I(3)}, {"params", params}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "3");
}

TEST_CASE("autodiff transforms") {
  Harness h;
  FunctionInfo loss;
  loss.name = "loss";
  ParamInfo p, q;
  p.name = "params";
  q.name = "batch";
  loss.params = {p, q};
  TypeRef f = T::function(&loss);

  TypeRef g = h.call("grad", {{"loss", f}});
  REQUIRE(g->is(TypeKind::Function));
  CHECK(g->transform == Transform::Grad);
  CHECK(g->inner == f);
  CHECK(g->argnums == std::vector<int>{0});
  TypeRef vg = h.call("value_and_grad", {{"loss", f}, {"(0, 1)", Tup({I(0), I(1)}), "argnums"}});
  CHECK(vg->transform == Transform::ValueAndGrad);
  CHECK(vg->argnums == std::vector<int>{0, 1});
  CHECK(vg->argnumsTuple); // a tuple of argnums gives a tuple of gradients
  TypeRef ck = h.call("checkpoint", {{"loss", f}});
  CHECK(ck->transform == Transform::Checkpoint);
  CHECK(h.errors() == 0);

  h.call("grad", {{"loss", f}, {"2", I(2), "argnums"}});
  CHECK(h.last().kind == DiagKind::ArgnumsRange);
  CHECK(h.last().message == "argnums 2 is out of range for `loss`, which takes 2 positional argument(s)");
  CHECK(h.lastAt() == "2");
  h.call("grad", {{"3", I(3)}});
  CHECK(h.last().kind == DiagKind::GradNonFunction);
  CHECK(h.last().message == "`grad` needs a function, not int");

  // vjp and jvp call the function with the primals' types.
  h.callValue = [](const TypeRef &, const std::vector<TypeRef> &args) { return args.empty() ? T::unknown() : args[0]; };
  TypeRef x = Ten({S("N")});
  TypeRef v = h.call("vjp", {{"loss", f}, {"x", x}});
  REQUIRE(v->elems.size() == 2);
  CHECK(v->elems[0] == x);
  CHECK(v->elems[1]->transform == Transform::Pullback);
  CHECK(v->elems[1]->inner == x);
  TypeRef j = h.call("jvp", {{"loss", f}, {"(x,)", Tup({x})}, {"(dx,)", Tup({x})}});
  REQUIRE(j->elems.size() == 2);
  CHECK(j->elems[1] == x);
  size_t before = h.errors();
  h.call("jvp", {{"loss", f}, {"(x,)", Tup({x})}, {"(dx,)", Tup({Ten({S("N")}, DType::BF16)})}});
  CHECK(h.errors() == before + 1);
  CHECK(h.last().kind == DiagKind::TangentMismatch);
  CHECK(h.lastAt() == "(dx,)");
  h.call("jvp", {{"loss", f}, {"(x,)", Tup({x})}, {"(dx,)", Tup({Ten({S("M")})})}});
  CHECK(h.last().kind == DiagKind::TangentMismatch);
}

TEST_CASE("distribution") {
  Harness h;
  TypeRef x = Ten({S("B"), S("D")});
  CHECK(h.call("dist.mesh", {{"(\"dp\", \"tp\")", Tup({T::str("dp"), T::str("tp")}), "axes"}, {"(4, 2)", Tup({I(4), I(2)}), "shape"}})->name ==
        "Mesh");
  CHECK(h.call("dist.all_reduce", {{"x", x}, {"\"sum\"", T::str("sum"), "op"}, {"\"dp\"", T::str("dp"), "axis"}}) == x);
  TypeRef g = h.call("dist.all_gather", {{"x", x}, {"\"dp\"", T::str("dp"), "axis"}});
  CHECK(g->dims[0].isUnknown());
  CHECK(g->dims[1] == S("D"));
  CHECK(h.call("ShardSpec", {{"(\"col\",)", Tup({T::str("col")}), "partition"}, {"(\"tp\",)", Tup({T::str("tp")}), "mesh_axes"}})->name ==
        "ShardSpec");
  CHECK(h.errors() == 0);

  h.call("dist.all_reduce", {{"x", x}, {"\"avg\"", T::str("avg"), "op"}});
  CHECK(h.last().kind == DiagKind::ArgKind);
  CHECK(h.lastAt() == "\"avg\"");
  h.call("dist.mesh", {{"(\"dp\",)", Tup({T::str("dp")}), "axes"}, {"(4, 2)", Tup({I(4), I(2)}), "shape"}});
  CHECK(h.last().kind == DiagKind::ArgKind);
}
