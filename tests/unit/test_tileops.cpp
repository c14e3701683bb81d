// The typing rules of the tile operations (sema/builtins/Tile.cpp), called directly with hand-built
// call sites: argument types in, result type and diagnostics (kind and range) out.
#include "sema/Builtins.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace tsr::sema {
void registerTileBuiltins(std::vector<BuiltinInfo> &out);
}

using namespace tsr;
using namespace tsr::sema;

namespace {

Dim S(std::string_view name) { return Dim::symbol(name); }
Dim C(int64_t v) { return Dim::constant(v); }

TypeRef shape(std::vector<Dim> dims) {
  std::vector<TypeRef> elems;
  for (const Dim &d : dims) elems.push_back(T::integer(d));
  return T::tuple(std::move(elems));
}

const std::vector<BuiltinInfo> &registry() {
  static const std::vector<BuiltinInfo> all = [] {
    std::vector<BuiltinInfo> v;
    registerTileBuiltins(v);
    return v;
  }();
  return all;
}

const BuiltinInfo &op(std::string_view name) {
  const auto &all = registry();
  auto it = std::find_if(all.begin(), all.end(), [&](const BuiltinInfo &b) { return b.name == name; });
  INFO("looking up " << std::string(name));
  REQUIRE(it != all.end());
  return *it;
}

/// One call of a tile operation: arguments get distinct ranges (argument i at 10 + 10 * i), the
/// whole call is [0, 100).
class Call {
public:
  explicit Call(std::string name) {
    site.name = std::move(name);
    site.context = InKernel;
    site.diags = &diags;
    site.range = {1, 0, 100};
    site.calleeRange = {1, 0, 8};
  }
  static SourceRange argRange(size_t i) { return {1, uint32_t(10 + 10 * i), uint32_t(15 + 10 * i)}; }
  Call &arg(TypeRef t) {
    site.args.push_back({std::move(t), argRange(count()), nullptr, ""});
    return *this;
  }
  Call &kw(std::string name, TypeRef t) {
    site.keywords.push_back({std::move(t), argRange(count()), nullptr, std::move(name)});
    return *this;
  }
  TypeRef run() { return op(site.name).rule(site); }

  size_t errors() const { return diags.errorCount(); }
  bool has(DiagKind k) const { return find(k) != nullptr; }
  /// Whether `k` was reported at argument i (in the order they were added).
  bool at(DiagKind k, size_t i) const {
    const Diagnostic *d = find(k);
    return d && d->range == argRange(i);
  }
  bool atCall(DiagKind k) const {
    const Diagnostic *d = find(k);
    return d && d->range == site.range;
  }
  std::string message(DiagKind k) const {
    const Diagnostic *d = find(k);
    return d ? d->message : "";
  }

  SourceManager sm;
  DiagnosticEngine diags{sm};
  CallSite site;

private:
  size_t count() const { return site.args.size() + site.keywords.size(); }
  const Diagnostic *find(DiagKind k) const {
    for (const Diagnostic &d : diags.diagnostics())
      if (d.kind == k) return &d;
    return nullptr;
  }
};

bool isTile(const TypeRef &t, const std::vector<Dim> &dims, DType dt) {
  return t && t->is(TypeKind::Tile) && t->dims == dims && t->dtype == dt;
}

} // namespace

TEST_CASE("every tile operation is registered once, for kernels only") {
  const char *names[] = {"program_id", "num_programs", "arange", "range", "zeros", "full", "load", "store",
                         "atomic_add", "alloc_shared", "cp_async", "barrier", "dot", "mma", "transpose",
                         "broadcast", "reshape", "cast", "where", "exp", "exp2", "log", "sqrt", "rsqrt", "abs",
                         "maximum", "minimum", "max", "sum", "min", "row_max", "row_sum", "mask_causal",
                         "softmax_online", "row_index", "col_index", "context"};
  std::set<std::string> seen;
  for (const BuiltinInfo &b : registry()) {
    INFO(b.name);
    CHECK(seen.insert(b.name).second);
    CHECK(b.name.rfind("tile.", 0) == 0);
    CHECK(b.contexts == InKernel);
    CHECK(static_cast<bool>(b.rule));
    CHECK_FALSE(b.signature.empty());
    CHECK_FALSE(b.doc.empty());
    CHECK_FALSE(b.isNamespace);
  }
  for (const char *n : names) {
    INFO(n);
    CHECK(seen.count(std::string("tile.") + n) == 1);
  }
  CHECK(seen.size() == std::size(names));
}

TEST_CASE("load of a view gives a tile of the view's extents and dtype") {
  Call c("tile.load");
  c.arg(T::view({S("BM"), S("BK")}, DType::BF16, "A"))
      .kw("other", T::floating(0.0))
      .kw("mask", T::tile({C(1), S("BK")}, DType::Bool));
  CHECK(isTile(c.run(), {S("BM"), S("BK")}, DType::BF16));
  CHECK(c.errors() == 0);
}

TEST_CASE("load needs a view of a kernel parameter") {
  Call c("tile.load");
  c.arg(T::tensor({S("M"), S("K")}, DType::BF16));
  CHECK(c.run()->is(TypeKind::Unknown));
  CHECK(c.at(DiagKind::ViewNotGlobal, 0));
  CHECK(c.message(DiagKind::ViewNotGlobal).find("`tile.load`") != std::string::npos);

  Call m("tile.load");
  m.arg(T::view({S("BM"), S("BK")}, DType::F32, "A")).kw("mask", T::tile({S("BN")}, DType::Bool));
  m.run();
  CHECK(m.at(DiagKind::ShapeMismatch, 1));
}

TEST_CASE("store reports a value of another dtype than the view's") {
  Call c("tile.store");
  c.arg(T::view({S("BM"), S("BN")}, DType::BF16, "C")).arg(T::tile({S("BM"), S("BN")}, DType::F32));
  CHECK(c.run()->is(TypeKind::None));
  REQUIRE(c.at(DiagKind::StoreDType, 1));
  CHECK(c.message(DiagKind::StoreDType).find("f32") != std::string::npos);
  CHECK(c.message(DiagKind::StoreDType).find("bf16") != std::string::npos);

  Call ok("tile.store"); // matching dtype, broadcast row, and a Python number
  ok.arg(T::view({S("BM"), S("BN")}, DType::F32, "C")).arg(T::tile({S("BN")}, DType::F32));
  ok.run();
  Call num("tile.store");
  num.arg(T::view({S("BM")}, DType::BF16, "C")).arg(T::floating(0.0));
  num.run();
  CHECK(ok.errors() + num.errors() == 0);
}

TEST_CASE("store reports a value whose shape does not fit the view") {
  Call c("tile.store");
  c.arg(T::view({S("BM"), S("BN")}, DType::F32, "C")).arg(T::tile({S("BM"), S("BK")}, DType::F32));
  c.run();
  CHECK(c.at(DiagKind::ShapeMismatch, 1));

  Call u("tile.store"); // an unknown extent is a run-time guard, not an error
  u.arg(T::view({S("BM"), S("BN")}, DType::F32, "C")).arg(T::tile({S("BM"), Dim::unknown()}, DType::F32));
  u.run();
  CHECK(u.errors() == 0);
}

TEST_CASE("dot: [M, K] x [K, N], f32 for 16-bit operands, errors for other shapes") {
  Call c("tile.dot");
  c.arg(T::tile({S("BM"), S("BK")}, DType::BF16)).arg(T::tile({S("BK"), S("BN")}, DType::BF16));
  CHECK(isTile(c.run(), {S("BM"), S("BN")}, DType::F32));
  CHECK(c.errors() == 0);

  Call inner("tile.dot");
  inner.arg(T::tile({S("BM"), S("BK")}, DType::BF16)).arg(T::tile({S("BN"), S("BK")}, DType::BF16));
  CHECK(inner.run()->is(TypeKind::Unknown));
  CHECK(inner.atCall(DiagKind::MatmulInner));

  Call rank("tile.mma");
  rank.arg(T::tile({C(2), S("BM"), S("BK")}, DType::BF16)).arg(T::tile({S("BK"), S("BN")}, DType::BF16));
  CHECK(rank.run()->is(TypeKind::Unknown));
  CHECK(rank.has(DiagKind::DotShape));
}

TEST_CASE("dot with an accumulator takes the accumulator's type") {
  Call c("tile.dot");
  c.arg(T::tile({S("BM"), S("BK")}, DType::BF16))
      .arg(T::tile({S("BK"), S("BN")}, DType::BF16))
      .arg(T::tile({S("BM"), S("BN")}, DType::F16));
  CHECK(isTile(c.run(), {S("BM"), S("BN")}, DType::F16));
  CHECK(c.errors() == 0);

  Call bad("tile.dot");
  bad.arg(T::tile({S("BM"), S("BK")}, DType::BF16))
      .arg(T::tile({S("BK"), S("BN")}, DType::BF16))
      .kw("acc", T::tile({S("BN"), S("BM")}, DType::F32));
  CHECK(bad.run()->is(TypeKind::Unknown));
  CHECK(bad.at(DiagKind::ShapeMismatch, 2));

  Call gradual("tile.dot"); // an Unknown operand: the result is still the accumulator
  gradual.arg(T::unknown()).arg(T::tile({S("BK"), S("BN")}, DType::BF16)).arg(T::tile({S("BM"), S("BN")}, DType::F32));
  CHECK(isTile(gradual.run(), {S("BM"), S("BN")}, DType::F32));
  CHECK(gradual.errors() == 0);
}

TEST_CASE("softmax_online returns (P, m_new, l_new, alpha)") {
  Call c("tile.softmax_online");
  c.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::tile({S("BM")}, DType::F32)).arg(T::tile({S("BM")}, DType::F32));
  TypeRef r = c.run();
  CHECK(c.errors() == 0);
  REQUIRE(r->is(TypeKind::Tuple));
  REQUIRE(r->elems.size() == 4);
  CHECK(isTile(r->elems[0], {S("BM"), S("BN")}, DType::F32));
  for (size_t i = 1; i < 4; ++i) CHECK(isTile(r->elems[i], {S("BM")}, DType::F32));

  Call rows("tile.softmax_online");
  rows.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::tile({S("BN")}, DType::F32)).arg(T::tile({S("BM")}, DType::F32));
  rows.run();
  CHECK(rows.at(DiagKind::ShapeMismatch, 1));

  Call dt("tile.softmax_online");
  dt.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::tile({S("BM")}, DType::F32)).arg(T::tile({S("BM")}, DType::BF16));
  dt.run();
  CHECK(dt.at(DiagKind::ArgTypeMismatch, 2));

  Call gradual("tile.softmax_online"); // still a 4-tuple, so that unpacking checks
  TypeRef g = gradual.arg(T::unknown()).arg(T::unknown()).arg(T::unknown()).run();
  CHECK(gradual.errors() == 0);
  REQUIRE(g->is(TypeKind::Tuple));
  CHECK(g->elems.size() == 4);
}

TEST_CASE("zeros and full need compile-time shapes of at most three dims") {
  Call ok("tile.zeros");
  CHECK(isTile(ok.arg(shape({S("BM"), S("D")})).run(), {S("BM"), S("D")}, DType::F32));
  Call full("tile.full");
  CHECK(isTile(full.arg(shape({S("BM")})).arg(T::floating(-1.0)).arg(T::dtypeVal(DType::BF16)).run(), {S("BM")},
               DType::BF16));
  CHECK(ok.errors() + full.errors() == 0);

  Call dynamic("tile.zeros"); // an int whose value is known only at run time
  std::vector<TypeRef> elems = {T::integer(), T::integer(S("BN"))};
  dynamic.arg(T::tuple(elems)).arg(T::dtypeVal(DType::F32));
  CHECK(dynamic.run()->is(TypeKind::Unknown));
  CHECK(dynamic.at(DiagKind::TileShapeNotStatic, 0));

  Call pid("tile.zeros"); // a shape that depends on the grid point
  pid.arg(shape({Dim::opaque("program_id(0)") * S("BM")}));
  pid.run();
  CHECK(pid.at(DiagKind::TileShapeNotStatic, 0));

  Call rank("tile.zeros");
  rank.arg(shape({C(2), C(2), C(2), C(2)}));
  rank.run();
  CHECK(rank.at(DiagKind::TileRankLimit, 0));
}

TEST_CASE("program_id: grid axes 0 to 2, a value that simplifies") {
  Call bad("tile.program_id");
  bad.arg(T::integer(C(3)));
  bad.run();
  CHECK(bad.at(DiagKind::ProgramAxis, 0));

  Call c("tile.program_id");
  TypeRef pid = c.arg(T::integer(C(0))).run();
  REQUIRE(pid->is(TypeKind::Int));
  REQUIRE(pid->intValue.has_value());
  Dim q0 = *pid->intValue * S("BM");
  CHECK((q0 + S("BM")) - q0 == S("BM"));
  CHECK_FALSE(provablyDifferent(*pid->intValue, S("BM"))); // a run-time value, never a proven size

  Call other("tile.program_id");
  CHECK(*other.arg(T::integer(C(1))).run()->intValue != *pid->intValue);
  Call n("tile.num_programs");
  CHECK(*n.arg(T::integer(C(0))).run()->intValue != *pid->intValue);
  CHECK(c.errors() + other.errors() + n.errors() == 0);
}

TEST_CASE("arange has a compile-time extent end - start") {
  Call c("tile.arange");
  CHECK(isTile(c.arg(T::integer(C(0))).arg(T::integer(S("BN"))).run(), {S("BN")}, DType::I32));
  Call q("tile.arange");
  Dim q0 = Dim::opaque("program_id(0)") * S("BM");
  CHECK(isTile(q.arg(T::integer(q0)).arg(T::integer(q0 + S("BM"))).run(), {S("BM")}, DType::I32));
  CHECK(c.errors() + q.errors() == 0);

  Call dyn("tile.arange");
  dyn.arg(T::integer(C(0))).arg(T::integer());
  dyn.run();
  CHECK(dyn.atCall(DiagKind::TileShapeNotStatic));
}

TEST_CASE("transpose and row reductions work on 2-d tiles") {
  Call t("tile.transpose");
  CHECK(isTile(t.arg(T::tile({S("BN"), S("D")}, DType::BF16)).run(), {S("D"), S("BN")}, DType::BF16));
  Call t3("tile.transpose");
  t3.arg(T::tile({C(2), S("BN"), S("D")}, DType::BF16)).run();
  CHECK(t3.at(DiagKind::RankMismatch, 0));

  Call rs("tile.row_sum");
  CHECK(isTile(rs.arg(T::tile({S("BM"), S("BN")}, DType::F32)).run(), {S("BM")}, DType::F32));
  Call rm("tile.row_max");
  rm.arg(T::tile({S("BM")}, DType::F32)).run();
  CHECK(rm.at(DiagKind::RankMismatch, 0));
  CHECK(t.errors() + rs.errors() == 0);
}

TEST_CASE("max, sum and min drop a constant axis") {
  Call c("tile.max");
  CHECK(isTile(c.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::integer(C(1))).run(), {S("BM")}, DType::F32));
  Call neg("tile.sum");
  CHECK(isTile(neg.arg(T::tile({S("BM"), S("BN")}, DType::F32)).kw("axis", T::integer(C(-2))).run(), {S("BN")},
               DType::F32));
  CHECK(c.errors() + neg.errors() == 0);

  Call bad("tile.min");
  bad.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::integer(C(2)));
  CHECK(bad.run()->is(TypeKind::Unknown));
  CHECK(bad.at(DiagKind::AxisOutOfRange, 1));
}

TEST_CASE("cast, where, reshape, broadcast") {
  Call cast("tile.cast");
  CHECK(isTile(cast.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::dtypeVal(DType::BF16)).run(),
               {S("BM"), S("BN")}, DType::BF16));

  Call w("tile.where"); // the layer_norm kernel's column mask
  w.arg(T::tile({C(1), S("BN")}, DType::Bool)).arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(T::floating(0.0));
  CHECK(isTile(w.run(), {S("BM"), S("BN")}, DType::F32));
  Call wc("tile.where");
  wc.arg(T::tile({S("BM")}, DType::F32)).arg(T::floating(1.0)).arg(T::floating(0.0));
  wc.run();
  CHECK(wc.at(DiagKind::ArgKind, 0));

  Call r("tile.reshape");
  CHECK(isTile(r.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(shape({S("BN"), S("BM")})).run(), {S("BN"), S("BM")},
               DType::F32));
  Call rc("tile.reshape");
  rc.arg(T::tile({S("BM"), S("BN")}, DType::F32)).arg(shape({S("BM")}));
  rc.run();
  CHECK(rc.atCall(DiagKind::ReshapeCount));

  Call b("tile.broadcast");
  CHECK(isTile(b.arg(T::tile({S("BN")}, DType::F32)).arg(shape({S("BM"), S("BN")})).run(), {S("BM"), S("BN")},
               DType::F32));
  CHECK(cast.errors() + w.errors() + r.errors() + b.errors() == 0);
}

TEST_CASE("unary and binary elementwise operations") {
  Call e("tile.exp");
  CHECK(isTile(e.arg(T::tile({S("BM")}, DType::I32)).run(), {S("BM")}, DType::F32));
  Call a("tile.abs");
  CHECK(isTile(a.arg(T::tile({S("BM")}, DType::I32)).run(), {S("BM")}, DType::I32));
  Call m("tile.maximum");
  CHECK(isTile(m.arg(T::tile({S("BM"), S("BN")}, DType::BF16)).arg(T::floating(0.0)).run(), {S("BM"), S("BN")},
               DType::BF16));
  CHECK(e.errors() + a.errors() + m.errors() == 0);

  Call v("tile.exp"); // a view is read with tile.load first
  v.arg(T::view({S("BM")}, DType::F32, "X")).run();
  CHECK(v.at(DiagKind::ArgKind, 0));
}

TEST_CASE("atomic_add takes float or i32 views") {
  Call ok("tile.atomic_add");
  ok.arg(T::view({S("BM"), S("D")}, DType::F32, "dQ")).arg(T::tile({S("BM"), S("D")}, DType::F32));
  CHECK(ok.run()->is(TypeKind::None));
  CHECK(ok.errors() == 0);

  Call bad("tile.atomic_add");
  bad.arg(T::view({S("BM")}, DType::I8, "counts")).arg(T::tile({S("BM")}, DType::I8));
  bad.run();
  CHECK(bad.at(DiagKind::ArgKind, 0));
}

TEST_CASE("context exposes the autotune space, warps and stages") {
  FunctionInfo fn;
  fn.name = "gemm";
  fn.kind = FunctionKind::Kernel;
  fn.autotune = true;
  fn.space = {{"BM", {64, 128}}, {"BN", {64, 128}}, {"warps", {4, 8}}};
  Call c("tile.context");
  c.site.enclosing = &fn;
  TypeRef cfg = c.run();
  REQUIRE(cfg->is(TypeKind::Config));
  std::vector<std::string> names;
  for (const auto &[name, d] : cfg->knobs) names.push_back(name);
  CHECK(names == std::vector<std::string>{"BM", "BN", "warps", "stages"});
  CHECK(cfg->knobs[0].second == S("BM"));
  CHECK(c.errors() == 0);
}

TEST_CASE("Unknown arguments pass silently") {
  Call load("tile.load");
  CHECK(load.arg(T::unknown()).run()->is(TypeKind::Unknown));
  Call store("tile.store");
  CHECK(store.arg(T::unknown()).arg(T::unknown()).run()->is(TypeKind::None));
  Call dot("tile.dot");
  CHECK(dot.arg(T::unknown()).arg(T::tile({S("BK"), S("BN")}, DType::BF16)).run()->is(TypeKind::Unknown));
  Call zeros("tile.zeros");
  CHECK(zeros.arg(T::unknown()).run()->is(TypeKind::Unknown));
  Call exp("tile.exp");
  CHECK(exp.arg(T::unknown()).run()->is(TypeKind::Unknown));
  Call range("tile.range");
  CHECK(range.arg(T::integer(C(0))).arg(T::unknown()).arg(T::integer(S("BK"))).run()->is(TypeKind::Range));
  Call mask("tile.mask_causal");
  CHECK(mask.arg(T::unknown()).arg(T::unknown()).arg(T::unknown()).run()->is(TypeKind::Unknown));
  CHECK(load.errors() + store.errors() + dot.errors() + zeros.errors() + exp.errors() + range.errors() +
            mask.errors() ==
        0);
}
