// The typing rules of the tile operations of spec section 7 (`tile.load`, `tile.dot`, ...): the
// operations a kernel body is written in. Every entry is registered as "tile.<op>" and is callable
// only inside a kernel.
//
// Types inside a kernel:
// - A slice of a kernel's tensor parameter is a View (the checker builds it); its dims are the
//   slice extents. tile.load turns a View into a Tile, tile.store writes a Tile through a View.
// - A Tile is a block of values whose extents are fixed at compile time: constants and symbols
//   (the kernel's keyword-only parameters and its tensors' symbolic dims) are compile-time; a value
//   that depends on the grid point (tile.program_id) or that the checker cannot see (an unknown)
//   is not, and cannot be a tile extent.
// - Scalars are Python numbers or 0-d tensors (a kernel parameter `alpha: f32`).
//
// As everywhere in the checker, an error is reported only where it is provable: an Unknown
// argument passes silently and usually makes the result Unknown (gradual typing), and a dim the
// algebra cannot compare is a run-time guard, not an error. An argument that is wrong on its own is
// reported at its own range; a disagreement between arguments at the whole call.
#include "sema/Builtins.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace tsr::sema {

namespace {

// Tiles are register blocks; three dimensions cover every kernel of the stdlib and of the
// examples (batch-head, rows, columns), and the code generator lays out at most three.
constexpr size_t kMaxTileRank = 3;

bool isUnknown(const TypeRef &t) { return !t || t->is(TypeKind::Unknown); }
bool isNone(const TypeRef &t) { return t && t->is(TypeKind::None); }
bool absent(const ArgInfo *a) { return !a || isNone(a->type); }

/// A scalar inside a kernel: a Python number, a 0-d tensor (a scalar kernel parameter) or a 0-d
/// tile (a cast Python number).
bool isScalarValue(const Type &t) {
  return t.isPyNumber() || t.isScalarTensor() || (t.is(TypeKind::Tile) && t.dims.empty());
}

/// The element type a scalar value contributes when it fills a tile of its own.
DType scalarDType(const Type &t) {
  switch (t.kind) {
  case TypeKind::Bool: return DType::Bool;
  case TypeKind::Int: return DType::I32; // kernel integers are 32-bit, as tile.arange's
  case TypeKind::Float: return DType::F32;
  default: return t.dtype;
  }
}

std::string dtypeStr(DType d) { return std::string(dtypeName(d)); }

/// Whether a dim mentions a grid coordinate. Such a value differs from one program to the next,
/// so it is provably not a compile-time extent. The atoms are the ones programIdRule makes.
bool mentionsProgramId(const Dim &d) {
  std::string s = d.str();
  return s.find("program_id(") != std::string::npos || s.find("num_programs(") != std::string::npos;
}

/// Whether a dim can be a tile extent: constants and symbols can; unknowns and grid coordinates
/// cannot.
bool isStaticDim(const Dim &d) { return !d.hasUnknown() && !mentionsProgramId(d); }

bool allStatic(const std::vector<Dim> &dims) {
  return std::all_of(dims.begin(), dims.end(), isStaticDim);
}

/// Whether `from` provably cannot broadcast to exactly `to` (NumPy's broadcast_to: `from` is
/// right-aligned against `to`, and each of its dims is 1 or equal to the target's).
bool cannotBroadcastTo(const std::vector<Dim> &from, const std::vector<Dim> &to) {
  if (from.size() > to.size()) return true;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].isOne()) continue;
    if (provablyDifferent(from[i], to[off + i])) return true;
  }
  return false;
}

std::string quoted(std::string_view name) { return "`" + std::string(name) + "`"; }

/// What a note says about an operand: its name if the user wrote a name, else its parameter.
std::string describeOperand(const ArgInfo &a, std::string_view param) {
  if (a.expr)
    if (const auto *n = ast::dyn_cast<ast::Name>(a.expr)) return quoted(n->id) + " is " + typeStr(a.type);
  return "argument " + quoted(param) + " is " + typeStr(a.type);
}

/// An argument that must be a tile. `type` is null when the argument is absent or Unknown
/// (gradual: nothing to check); `bad` when it was reported.
struct Operand {
  TypeRef type;
  bool bad = false;
};

/// Reports a non-tile where a tile belongs; a view or a whole tensor there usually means a
/// forgotten tile.load, which the note says.
Operand notATile(CallSite &site, const ArgInfo *a, std::string_view expected, std::string_view what) {
  site.wrongKind(a, expected, what);
  if (a->type->is(TypeKind::View))
    site.diags->note("read the view into a tile first: tile.load(...)");
  else if (a->type->is(TypeKind::Tensor) && !a->type->isScalarTensor())
    site.diags->note("a kernel works on tiles: load a tile of the tensor with tile.load(X[...]) first");
  return {nullptr, true};
}

Operand tileArg(CallSite &site, const ArgInfo *a, std::string_view what) {
  if (!a || isUnknown(a->type)) return {};
  if (a->type->is(TypeKind::Tile)) return {a->type};
  return notATile(site, a, "a tile", what);
}

/// An argument that may be a tile or a scalar (elementwise operands, stored values).
Operand tileOrScalarArg(CallSite &site, const ArgInfo *a, std::string_view what) {
  if (!a || isUnknown(a->type)) return {};
  if (a->type->is(TypeKind::Tile) || isScalarValue(*a->type)) return {a->type};
  return notATile(site, a, "a tile or a number", what);
}

/// An argument that must be a view of a kernel parameter (ViewNotGlobal otherwise).
Operand viewArg(CallSite &site, const ArgInfo *a, std::string_view op) {
  if (!a || isUnknown(a->type)) return {};
  if (a->type->is(TypeKind::View)) return {a->type};
  site.diags->report(DiagKind::ViewNotGlobal, a->range, {std::string(op), typeStr(a->type)});
  return {nullptr, true};
}

/// A view's extents become a tile's: they must be compile-time and at most kMaxTileRank. Dims
/// the checker could not work out (unknowns) pass: the view was built by the checker, and an
/// unknown there says nothing about the program. Returns false after a report.
bool checkViewShape(CallSite &site, const ArgInfo *a, const Type &view) {
  if (!view.rankKnown) return true;
  if (std::any_of(view.dims.begin(), view.dims.end(), mentionsProgramId)) {
    site.diags->report(DiagKind::TileShapeNotStatic, a->range, {shapeStr(view.dims)});
    site.diags->note("the extent of each slice of the view must not depend on tile.program_id");
    return false;
  }
  if (view.dims.size() > kMaxTileRank) {
    site.diags->report(DiagKind::TileRankLimit, a->range,
                       {std::to_string(kMaxTileRank), std::to_string(view.dims.size())});
    return false;
  }
  return true;
}

/// An integer argument of a kernel (an index, a bound, a step): a Python int, maybe symbolic, or
/// a 0-d integer tensor or tile (known only at run time). `value` is the int's value where the
/// checker knows it. Unknown passes.
struct IntArg {
  bool bad = false;
  bool gradual = false;           // Unknown: nothing known, nothing to check
  std::optional<Dim> value;
};

IntArg intArg(CallSite &site, const ArgInfo *a, std::string_view what) {
  IntArg r;
  if (!a) return r;
  if (isUnknown(a->type)) {
    r.gradual = true;
    return r;
  }
  const Type &t = *a->type;
  if (t.is(TypeKind::Int)) {
    r.value = site.intDim(a, what);
    return r;
  }
  if ((t.isScalarTensor() || (t.is(TypeKind::Tile) && t.dims.empty())) && isInteger(t.dtype)) return r;
  site.wrongKind(a, "an int", what);
  r.bad = true;
  return r;
}

/// Whether a shape argument still holds Unknown parts (an element whose type is not known yet):
/// then an unknown extent is the checker's ignorance, not the program's.
bool isGradualShape(const Type &t) {
  if (t.is(TypeKind::Unknown)) return true;
  if (t.is(TypeKind::Tuple) || t.is(TypeKind::List)) {
    if (!t.lengthKnown) return isUnknown(t.elem);
    return std::any_of(t.elems.begin(), t.elems.end(), [](const TypeRef &e) { return isUnknown(e); });
  }
  return false;
}

/// The text of a shape argument made of ints whose values are not all known: `[?, "BN"]`.
/// nullopt when the argument is not such a shape (site.shape() judged its kind already).
std::optional<std::string> unknownShapeText(const Type &t) {
  auto one = [](const TypeRef &e) -> std::optional<Dim> {
    if (e && e->is(TypeKind::Int)) return e->intValue ? *e->intValue : Dim::unknown();
    if (e && e->isScalarTensor() && isInteger(e->dtype)) return Dim::unknown();
    return std::nullopt;
  };
  std::vector<Dim> dims;
  if (t.is(TypeKind::Int)) {
    dims.push_back(t.intValue ? *t.intValue : Dim::unknown());
  } else if ((t.is(TypeKind::Tuple) || t.is(TypeKind::List)) && t.lengthKnown) {
    for (const TypeRef &e : t.elems) {
      auto d = one(e);
      if (!d) return std::nullopt;
      dims.push_back(*d);
    }
  } else {
    return std::nullopt;
  }
  if (allStatic(dims)) return std::nullopt;
  return shapeStr(dims);
}

/// After site.shape() gave nullopt: it reports a wrong kind itself, and gives nullopt without a
/// report for ints of unknown value, which for a tile is a shape decided only at run time.
void reportUnreadShape(CallSite &site, const ArgInfo *a, size_t errorsBefore) {
  if (site.diags->errorCount() != errorsBefore || isGradualShape(*a->type)) return;
  if (auto text = unknownShapeText(*a->type)) site.diags->report(DiagKind::TileShapeNotStatic, a->range, {*text});
}

/// The rules every tile shape obeys: compile-time extents, at most kMaxTileRank of them. Returns
/// false after a report.
bool checkTileShape(CallSite &site, const ArgInfo *a, const std::vector<Dim> &dims) {
  if (!isGradualShape(*a->type) && !allStatic(dims)) {
    site.diags->report(DiagKind::TileShapeNotStatic, a->range, {shapeStr(dims)});
    return false;
  }
  if (dims.size() > kMaxTileRank) {
    site.diags->report(DiagKind::TileRankLimit, a->range, {std::to_string(kMaxTileRank), std::to_string(dims.size())});
    return false;
  }
  return true;
}

/// The shape argument of a tile creation (`(BM, BN)`): a tuple of compile-time ints. nullopt when
/// absent, Unknown or reported.
std::optional<std::vector<Dim>> tileShapeArg(CallSite &site, const ArgInfo *a, std::string_view what) {
  if (!a || isUnknown(a->type)) return std::nullopt;
  size_t before = site.diags->errorCount();
  auto dims = site.shape(a, what);
  if (!dims) {
    reportUnreadShape(site, a, before);
    return std::nullopt;
  }
  if (!checkTileShape(site, a, *dims)) return std::nullopt;
  return dims;
}

/// A dtype argument; `fallback` when the argument is absent. nullopt when Unknown or reported.
std::optional<DType> dtypeArg(CallSite &site, const ArgInfo *a, std::string_view what, std::optional<DType> fallback) {
  if (absent(a)) return fallback;
  if (isUnknown(a->type)) return std::nullopt;
  return site.dtype(a, what);
}

/// A scalar argument such as `other=` or full's `value`.
bool checkScalarArg(CallSite &site, const ArgInfo *a, std::string_view what) {
  if (absent(a) || isUnknown(a->type) || isScalarValue(*a->type)) return true;
  site.wrongKind(a, "a number", what);
  return false;
}

/// The `mask=` of a load or store: a bool tile (or a Python bool) broadcastable to the view.
bool checkMask(CallSite &site, const ArgInfo *m, const TypeRef &view, std::string_view op) {
  if (absent(m) || isUnknown(m->type)) return true;
  const Type &t = *m->type;
  if (t.is(TypeKind::Bool)) return true;
  if (!t.is(TypeKind::Tile) || t.dtype != DType::Bool) {
    site.wrongKind(m, "a bool tile", "mask");
    return false;
  }
  if (view && view->rankKnown && cannotBroadcastTo(t.dims, view->dims)) {
    site.diags->report(DiagKind::ShapeMismatch, m->range,
                       {"the mask of `tile." + std::string(op) + "`", shapeStr(t.dims), shapeStr(view->dims)});
    return false;
  }
  return true;
}

/// The value written by tile.store / tile.atomic_add: its dims broadcast to the view's and its
/// dtype is the view's (writes never convert implicitly: a silent rounding to bf16 is a common
/// source of accuracy bugs, so the cast must be written). A Python number takes the view's dtype.
bool checkStoredValue(CallSite &site, const ArgInfo *v, const TypeRef &view, std::string_view op) {
  Operand val = tileOrScalarArg(site, v, "value");
  if (val.bad) return false;
  if (!val.type || !view || val.type->isPyNumber()) return true;
  const Type &t = *val.type;
  if (view->rankKnown && cannotBroadcastTo(t.dims, view->dims)) {
    site.diags->report(DiagKind::ShapeMismatch, v->range,
                       {"the value given to `tile." + std::string(op) + "` for a view of " + quoted(view->name),
                        shapeStr(t.dims), shapeStr(view->dims)});
    return false;
  }
  if (t.dtype != view->dtype) {
    site.diags->report(DiagKind::StoreDType, v->range, {dtypeStr(t.dtype), dtypeStr(view->dtype)});
    return false;
  }
  return true;
}

// ---- ids and ranges ----------------------------------------------------------------------------

/// program_id(axis), num_programs(axis). The value is not known before the launch, but it is the
/// same value at every use in one program: an opaque atom lets `(q0 + BM) - q0` simplify to BM,
/// which is how a view `X[q0:q0 + BM]` gets the static extent BM.
TypeRef programIdRule(CallSite &site, const std::string &fn) {
  if (!site.expect({"axis"}, 1)) return T::unknown();
  const ArgInfo *a = site.arg(0, "axis");
  auto axis = site.constInt(a, "axis", /*required=*/true);
  if (!axis) return T::unknown();
  if (*axis < 0 || *axis > 2) {
    site.diags->report(DiagKind::ProgramAxis, a->range, {std::to_string(*axis)});
    return T::unknown();
  }
  return T::integer(Dim::opaque(fn + "(" + std::to_string(*axis) + ")"));
}

TypeRef arangeRule(CallSite &site) {
  if (!site.expect({"start", "end"}, 2)) return T::unknown();
  IntArg start = intArg(site, site.arg(0, "start"), "start");
  IntArg end = intArg(site, site.arg(1, "end"), "end");
  if (start.bad || end.bad) return T::unknown();
  if (start.gradual || end.gradual) return T::tile({Dim::unknown()}, DType::I32);
  Dim extent = end.value && start.value ? *end.value - *start.value : Dim::unknown();
  if (!isStaticDim(extent)) {
    site.diags->report(DiagKind::TileShapeNotStatic, site.range, {shapeStr({extent})});
    site.diags->note("the extent of tile.arange(start, end) is end - start");
    return T::unknown();
  }
  if (auto c = extent.constantValue(); c && *c < 0) {
    site.diags->report(DiagKind::NegativeDim, site.range, {std::to_string(*c)});
    return T::unknown();
  }
  return T::tile({extent}, DType::I32);
}

TypeRef rangeRule(CallSite &site) {
  if (!site.expect({"start", "end", "step"}, 2, {"stages"})) return T::unknown();
  // A range is a range even after an error in one of its bounds: nothing to propagate.
  intArg(site, site.arg(0, "start"), "start");
  intArg(site, site.arg(1, "end"), "end");
  intArg(site, site.arg(2, "step"), "step");
  const ArgInfo *stages = site.kwarg("stages");
  if (!absent(stages) && !isUnknown(stages->type)) {
    // The stages of a software pipeline are a code-generation decision: a compile-time int.
    if (auto n = site.constInt(stages, "stages", /*required=*/true); n && *n < 1)
      site.diags->report(DiagKind::ScheduleKnob, stages->range,
                         {"`stages` must be at least 1, not " + std::to_string(*n)});
  }
  return T::range(true);
}

// ---- creation ----------------------------------------------------------------------------------

TypeRef zerosRule(CallSite &site) {
  if (!site.expect({"shape", "dtype"}, 1)) return T::unknown();
  auto dims = tileShapeArg(site, site.arg(0, "shape"), "shape");
  auto dt = dtypeArg(site, site.arg(1, "dtype"), "dtype", DType::F32);
  if (!dims || !dt) return T::unknown();
  return T::tile(std::move(*dims), *dt);
}

TypeRef fullRule(CallSite &site) {
  if (!site.expect({"shape", "value", "dtype"}, 2)) return T::unknown();
  auto dims = tileShapeArg(site, site.arg(0, "shape"), "shape");
  bool valueOk = checkScalarArg(site, site.arg(1, "value"), "value");
  auto dt = dtypeArg(site, site.arg(2, "dtype"), "dtype", DType::F32);
  if (!dims || !dt || !valueOk) return T::unknown();
  return T::tile(std::move(*dims), *dt);
}

// ---- memory ------------------------------------------------------------------------------------

// A strided slice is not a view that tile memory operations take (ViewNotGlobal, before anything
// else about the call).
bool stridedView(CallSite &site, const char *op) {
  if (site.args.empty() || !site.args[0].type || !site.args[0].type->is(TypeKind::View) || !site.args[0].type->strided) return false;
  site.diags->report(DiagKind::ViewNotGlobal, site.args[0].range, {op, "a strided slice"});
  return true;
}

TypeRef loadRule(CallSite &site) {
  if (stridedView(site, "load")) return T::unknown();
  if (!site.expect({"view", "other", "mask"}, 1)) return T::unknown();
  const ArgInfo *va = site.arg(0, "view");
  Operand view = viewArg(site, va, "load");
  bool ok = !view.bad && (!view.type || checkViewShape(site, va, *view.type));
  ok &= checkScalarArg(site, site.arg(1, "other"), "other");
  ok &= checkMask(site, site.arg(2, "mask"), view.type, "load");
  if (!ok || !view.type || !view.type->rankKnown) return T::unknown();
  return T::tile(view.type->dims, view.type->dtype);
}

TypeRef storeRule(CallSite &site) {
  if (stridedView(site, "store")) return T::none();
  if (!site.expect({"view", "value", "mask"}, 2)) return T::unknown();
  const ArgInfo *va = site.arg(0, "view");
  Operand view = viewArg(site, va, "store");
  if (view.type) checkViewShape(site, va, *view.type);
  checkStoredValue(site, site.arg(1, "value"), view.type, "store");
  checkMask(site, site.arg(2, "mask"), view.type, "store");
  return T::none();
}

TypeRef atomicAddRule(CallSite &site) {
  if (stridedView(site, "atomic_add")) return T::none();
  if (!site.expect({"view", "value"}, 2)) return T::unknown();
  const ArgInfo *va = site.arg(0, "view");
  Operand view = viewArg(site, va, "atomic_add");
  if (view.type) {
    // The targets have atomic adds for these types only (fp8 and i8/i64/bool have none).
    DType d = view.type->dtype;
    bool supported = (isFloat(d) && !isFp8(d)) || d == DType::I32;
    if (!supported) {
      site.wrongKind(va, "a view of floating-point or i32 values", "view");
      return T::none();
    }
    if (!checkViewShape(site, va, *view.type)) return T::none();
  }
  checkStoredValue(site, site.arg(1, "value"), view.type, "atomic_add");
  return T::none();
}

TypeRef allocSharedRule(CallSite &site) {
  if (!site.expect({"shape", "dtype"}, 2)) return T::unknown();
  auto dims = tileShapeArg(site, site.arg(0, "shape"), "shape");
  auto dt = dtypeArg(site, site.arg(1, "dtype"), "dtype", std::nullopt);
  if (!dims || !dt) return T::unknown();
  return T::tile(std::move(*dims), *dt);
}

TypeRef cpAsyncRule(CallSite &site) {
  if (!site.expect({"dst", "src"}, 2)) return T::unknown();
  Operand dst = tileArg(site, site.arg(0, "dst"), "dst");
  const ArgInfo *sa = site.arg(1, "src");
  Operand src = viewArg(site, sa, "cp_async");
  if (src.type && !checkViewShape(site, sa, *src.type)) return T::none();
  if (!dst.type || !src.type || !src.type->rankKnown) return T::none();
  if (shapesProvablyDiffer(src.type->dims, dst.type->dims)) {
    site.diags->report(DiagKind::ShapeMismatch, sa->range,
                       {"the source of `tile.cp_async`", shapeStr(src.type->dims), shapeStr(dst.type->dims)});
    return T::none();
  }
  if (src.type->dtype != dst.type->dtype) {
    site.diags->report(DiagKind::ArgTypeMismatch, sa->range,
                       {"src", "tile.cp_async", typeStr(src.type), "a view of " + dtypeStr(dst.type->dtype) + " values"});
  }
  return T::none();
}

TypeRef barrierRule(CallSite &site) {
  site.expect({}, 0);
  return T::none();
}

// ---- compute -----------------------------------------------------------------------------------

TypeRef dotRule(CallSite &site, const std::string &op) {
  if (!site.expect({"a", "b", "acc"}, 2)) return T::unknown();
  const ArgInfo *aa = site.arg(0, "a"), *ba = site.arg(1, "b"), *ca = site.arg(2, "acc");
  Operand a = tileArg(site, aa, "a");
  Operand b = tileArg(site, ba, "b");
  Operand acc = absent(ca) ? Operand{} : tileArg(site, ca, "acc");
  if (a.bad || b.bad || acc.bad) return T::unknown();
  bool accGiven = !absent(ca);

  TypeRef prod = T::unknown();
  if (a.type && b.type) {
    Reporter r = site.reporter();
    r.operandNotes.push_back({describeOperand(*aa, "a"), aa->range});
    r.operandNotes.push_back({describeOperand(*ba, "b"), ba->range});
    prod = matmul(a.type, b.type, r);
    if (isUnknown(prod)) return T::unknown(); // matmul reported
  }
  if (!accGiven) return prod;
  // The product accumulates into acc: the result has acc's dtype (Unknown with acc).
  if (!acc.type) return T::unknown();
  if (isUnknown(prod)) return acc.type;
  if (shapesProvablyDiffer(acc.type->dims, prod->dims)) {
    site.diags->report(DiagKind::ShapeMismatch, ca->range,
                       {"the accumulator of " + quoted(op), shapeStr(acc.type->dims), shapeStr(prod->dims)});
    return T::unknown();
  }
  std::vector<Dim> dims = prod->dims;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i].hasUnknown()) dims[i] = acc.type->dims[i];
  return T::tile(std::move(dims), acc.type->dtype);
}

TypeRef transposeRule(CallSite &site) {
  if (!site.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *xa = site.arg(0, "x");
  Operand x = tileArg(site, xa, "x");
  if (!x.type) return T::unknown();
  if (x.type->rank() != 2) {
    site.diags->report(DiagKind::RankMismatch, xa->range,
                       {"`tile.transpose`", "2", std::to_string(x.type->rank())});
    return T::unknown();
  }
  return T::tile({x.type->dims[1], x.type->dims[0]}, x.type->dtype);
}

TypeRef broadcastRule(CallSite &site) {
  if (!site.expect({"x", "shape"}, 2)) return T::unknown();
  const ArgInfo *xa = site.arg(0, "x");
  Operand x = tileOrScalarArg(site, xa, "x");
  auto dims = tileShapeArg(site, site.arg(1, "shape"), "shape");
  if (x.bad || !x.type || !dims) return T::unknown();
  const std::vector<Dim> &from = x.type->dims; // empty for a Python number
  if (!x.type->isPyNumber() && cannotBroadcastTo(from, *dims)) {
    if (from.size() > dims->size()) {
      site.diags->report(DiagKind::ShapeMismatch, site.range,
                         {"`tile.broadcast` cannot remove dimensions", shapeStr(from), shapeStr(*dims)});
      return T::unknown();
    }
    // Name the first position (from the right, as NumPy aligns) that does not fit.
    for (size_t i = 1; i <= from.size(); ++i) {
      const Dim &f = from[from.size() - i], &t = (*dims)[dims->size() - i];
      if (!f.isOne() && provablyDifferent(f, t)) {
        site.diags->report(DiagKind::BroadcastMismatch, site.range, {shapeStr(from), shapeStr(*dims), dimStr(f), dimStr(t)});
        break;
      }
    }
    return T::unknown();
  }
  return T::tile(std::move(*dims), scalarDType(*x.type));
}

TypeRef reshapeRule(CallSite &site) {
  if (!site.expect({"x", "shape"}, 2)) return T::unknown();
  const ArgInfo *xa = site.arg(0, "x"), *sa = site.arg(1, "shape");
  Operand x = tileArg(site, xa, "x");
  if (x.bad || !sa || isUnknown(sa->type)) return T::unknown();
  size_t before = site.diags->errorCount();
  auto dims = site.shape(sa, "shape");
  if (!dims) {
    reportUnreadShape(site, sa, before);
    return T::unknown();
  }
  // One extent may be -1, inferred from the element count as NumPy infers it; that happens
  // before the tile-shape rules, which would take -1 for an extent.
  std::optional<size_t> inferred;
  for (size_t i = 0; i < dims->size(); ++i) {
    if ((*dims)[i].constantValue() != std::optional<int64_t>(-1)) continue;
    if (inferred) {
      site.diags->report(DiagKind::InvalidDim, sa->range, {"-1", "only one extent of a reshape can be -1"});
      return T::unknown();
    }
    inferred = i;
  }
  if (inferred) {
    if (!x.type) return T::unknown();
    std::vector<Dim> rest;
    for (size_t i = 0; i < dims->size(); ++i)
      if (i != *inferred) rest.push_back((*dims)[i]);
    auto q = product(x.type->dims).divide(product(rest));
    if (!q) { // the other extents multiply to 0
      site.diags->report(DiagKind::ReshapeCount, site.range, {dimStr(product(x.type->dims)), "0"});
      return T::unknown();
    }
    (*dims)[*inferred] = *q;
  }
  if (!checkTileShape(site, sa, *dims) || !x.type) return T::unknown();
  Dim have = product(x.type->dims), want = product(*dims);
  if (provablyDifferent(have, want)) {
    site.diags->report(DiagKind::ReshapeCount, site.range, {dimStr(have), dimStr(want)});
    return T::unknown();
  }
  return T::tile(std::move(*dims), x.type->dtype);
}

TypeRef castRule(CallSite &site) {
  if (!site.expect({"x", "dtype"}, 2)) return T::unknown();
  Operand x = tileOrScalarArg(site, site.arg(0, "x"), "x");
  auto dt = dtypeArg(site, site.arg(1, "dtype"), "dtype", std::nullopt);
  if (x.bad || !x.type || !dt) return T::unknown();
  const Type &t = *x.type;
  if (t.isPyNumber()) return T::tile({}, *dt); // a typed scalar of the kernel
  if (t.is(TypeKind::Tensor)) return T::scalar(*dt);
  return T::tile(t.dims, *dt);
}

TypeRef whereRule(CallSite &site) {
  if (!site.expect({"c", "a", "b"}, 3)) return T::unknown();
  const ArgInfo *ca = site.arg(0, "c");
  TypeRef cond;
  bool bad = false;
  if (ca && !isUnknown(ca->type)) {
    const Type &c = *ca->type;
    if (c.is(TypeKind::Bool) || (c.isScalarTensor() && c.dtype == DType::Bool)) cond = T::tile({}, DType::Bool);
    else if (c.is(TypeKind::Tile) && c.dtype == DType::Bool) cond = ca->type;
    else {
      site.wrongKind(ca, "a bool tile", "c");
      bad = true;
    }
  }
  Operand a = tileOrScalarArg(site, site.arg(1, "a"), "a");
  Operand b = tileOrScalarArg(site, site.arg(2, "b"), "b");
  if (bad || a.bad || b.bad || !cond || !a.type || !b.type) return T::unknown();

  // The dtype: choosing between values converts nothing but weak Python numbers (as jnp.where),
  // so two typed operands join in the lattice; fp8 values may be selected as they are.
  Reporter r = site.reporter();
  const Type &x = *a.type, &y = *b.type;
  DType dt;
  auto weak = [](const Type &t) {
    return t.kind == TypeKind::Float ? WeakScalar::Float : t.kind == TypeKind::Int ? WeakScalar::Int : WeakScalar::Bool;
  };
  if (!x.isPyNumber() && !y.isPyNumber()) {
    if (x.dtype == y.dtype) dt = x.dtype;
    else if (auto p = arithmeticDType(x.dtype, y.dtype, r)) dt = *p;
    else return T::unknown();
  } else if (!x.isPyNumber()) {
    dt = promoteWithWeak(x.dtype, weak(y));
  } else if (!y.isPyNumber()) {
    dt = promoteWithWeak(y.dtype, weak(x));
  } else {
    dt = x.kind == TypeKind::Float || y.kind == TypeKind::Float ? DType::F32
         : x.kind == TypeKind::Int || y.kind == TypeKind::Int   ? DType::I32
                                                                : DType::Bool;
  }
  static const std::vector<Dim> kScalar;
  auto dimsOf = [](const Type &t) -> const std::vector<Dim> & { return t.isPyNumber() ? kScalar : t.dims; };
  auto ab = broadcastShapes(dimsOf(x), dimsOf(y), r);
  if (!ab) return T::unknown();
  auto all = broadcastShapes(cond->dims, *ab, r);
  if (!all) return T::unknown();
  return T::tile(std::move(*all), dt);
}

/// exp, log, ...: `floatOnly` ops compute on integer tiles in f32, as jnp.exp does.
TypeRef unaryRule(CallSite &site, const std::string &op, bool floatOnly) {
  if (!site.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *xa = site.arg(0, "x");
  Operand x = tileOrScalarArg(site, xa, "x");
  if (!x.type) return T::unknown();
  return unaryElementwise(op, x.type, site.reporterAt(xa->range), floatOnly);
}

TypeRef binaryRule(CallSite &site, const std::string &op) {
  if (!site.expect({"a", "b"}, 2)) return T::unknown();
  Operand a = tileOrScalarArg(site, site.arg(0, "a"), "a");
  Operand b = tileOrScalarArg(site, site.arg(1, "b"), "b");
  if (!a.type || !b.type) return T::unknown();
  return elementwise(op, ElementwiseKind::Arithmetic, a.type, b.type, site.reporter());
}

// ---- reductions --------------------------------------------------------------------------------

TypeRef reduceRule(CallSite &site) {
  if (!site.expect({"x", "axis"}, 2)) return T::unknown();
  const ArgInfo *xa = site.arg(0, "x"), *aa = site.arg(1, "axis");
  Operand x = tileArg(site, xa, "x");
  auto axis = site.constInt(aa, "axis", /*required=*/true);
  if (!x.type || !axis) return T::unknown();
  auto n = normalizeAxis(*axis, x.type->rank(), site.reporterAt(aa->range));
  if (!n) return T::unknown();
  return reduce(x.type, {static_cast<int64_t>(*n)}, false, false, std::nullopt, site.reporterAt(xa->range));
}

/// A 2-d tile argument (the attention helpers and row reductions work on [rows, columns]).
Operand matrixArg(CallSite &site, const ArgInfo *a, std::string_view what, std::string_view op, bool floatOnly) {
  Operand x = tileArg(site, a, what);
  if (!x.type) return x;
  if (x.type->rank() != 2) {
    site.diags->report(DiagKind::RankMismatch, a->range, {quoted(op), "2", std::to_string(x.type->rank())});
    return {nullptr, true};
  }
  if (floatOnly && !isFloat(x.type->dtype)) {
    site.diags->report(DiagKind::FloatOnly, a->range, {quoted(op), dtypeStr(x.type->dtype)});
    return {nullptr, true};
  }
  return x;
}

TypeRef rowReduceRule(CallSite &site, const std::string &op) {
  if (!site.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *xa = site.arg(0, "x");
  Operand x = matrixArg(site, xa, "x", op, false);
  if (!x.type) return T::unknown();
  return reduce(x.type, {1}, false, false, std::nullopt, site.reporterAt(xa->range));
}

// ---- attention helpers -------------------------------------------------------------------------

TypeRef maskCausalRule(CallSite &site) {
  if (!site.expect({"S", "row0", "col0"}, 3)) return T::unknown();
  Operand s = matrixArg(site, site.arg(0, "S"), "S", "tile.mask_causal", true);
  bool ok = !intArg(site, site.arg(1, "row0"), "row0").bad;
  ok &= !intArg(site, site.arg(2, "col0"), "col0").bad;
  if (!s.type || !ok) return T::unknown();
  return s.type;
}

/// One step of the online softmax (Milakov & Gimelshein 2018, as FlashAttention's Algorithm 1
/// uses it): the running row maximum `m` and row sum `l` are 1-d f32 tiles over S's rows.
TypeRef softmaxOnlineRule(CallSite &site) {
  if (!site.expect({"S", "m", "l"}, 3)) return T::unknown();
  Operand s = matrixArg(site, site.arg(0, "S"), "S", "tile.softmax_online", true);
  std::optional<Dim> rows;
  if (s.type) rows = s.type->dims[0];
  bool ok = !s.bad;
  auto stat = [&](const ArgInfo *a, const char *what) -> TypeRef {
    Operand v = tileArg(site, a, what);
    if (v.bad) { ok = false; return nullptr; }
    if (!v.type) return nullptr;
    std::string which = "argument `" + std::string(what) + "` of `tile.softmax_online`";
    if (v.type->rank() != 1) {
      site.diags->report(DiagKind::RankMismatch, a->range, {which, "1", std::to_string(v.type->rank())});
      ok = false;
      return nullptr;
    }
    if (rows && provablyDifferent(v.type->dims[0], *rows)) {
      site.diags->report(DiagKind::ShapeMismatch, a->range, {which, shapeStr(v.type->dims), shapeStr({*rows})});
      ok = false;
      return nullptr;
    }
    if (v.type->dtype != DType::F32) {
      // The running statistics are f32: a row sum of exponentials in bf16 (8 significant bits)
      // stops growing after a few hundred terms.
      site.diags->report(DiagKind::ArgTypeMismatch, a->range,
                         {what, "tile.softmax_online", typeStr(v.type), typeStr(T::tile({rows ? *rows : v.type->dims[0]}, DType::F32))});
      ok = false;
      return nullptr;
    }
    return v.type;
  };
  TypeRef m = stat(site.arg(1, "m"), "m");
  if (!rows && m) rows = m->dims[0]; // S Unknown: l must still agree with m
  TypeRef l = stat(site.arg(2, "l"), "l");
  if (!rows && l) rows = l->dims[0];
  if (!ok) return T::unknown();
  // Always a 4-tuple, so that `p, m, l, alpha = ...` unpacks even when an operand is Unknown.
  TypeRef p = s.type ? T::tile(s.type->dims, s.type->dtype) : T::unknown();
  TypeRef stats = rows ? T::tile({*rows}, DType::F32) : T::unknown();
  return T::tuple({p, stats, stats, stats});
}

// ---- configuration -----------------------------------------------------------------------------

/// The chosen configuration of the enclosing kernel: each autotune-space entry and schedule knob
/// by name, plus warps and stages, which every launch has. A knob's value differs per chosen
/// configuration, so it is the knob's symbol (the same symbol as a keyword-only parameter of that
/// name), unless a fixed schedule gives it a value.
TypeRef contextRule(CallSite &site) {
  if (!site.expect({}, 0)) return T::unknown();
  // The kernel reads its configuration: each configuration is a specialization of it.
  if (site.enclosing) const_cast<FunctionInfo *>(site.enclosing)->usesContext = true;
  std::vector<std::pair<std::string, Dim>> knobs;
  auto put = [&](const std::string &name, const Dim &d) {
    for (const auto &k : knobs)
      if (k.first == name) return;
    knobs.emplace_back(name, d);
  };
  if (const FunctionInfo *fn = site.enclosing) {
    for (const auto &entry : fn->space) put(entry.first, Dim::symbol(entry.first));
    if (fn->schedule && fn->schedule->is(TypeKind::Schedule))
      for (const auto &[name, d] : fn->schedule->knobs) put(name, d);
  }
  put("warps", Dim::symbol("warps"));
  put("stages", Dim::symbol("stages"));
  return T::config(std::move(knobs));
}

/// row_index() and col_index(col0) stand for indices along the rows and columns of a tile that
/// is not among their arguments: their extents come from the tile they are combined with, which
/// a rule that sees only this call cannot know. Unknown lets that combination be checked
/// gradually instead of guessing an extent that could then be reported as a false mismatch.
TypeRef rowIndexRule(CallSite &site) {
  site.expect({}, 0);
  return T::unknown();
}

TypeRef colIndexRule(CallSite &site) {
  if (site.expect({"col0"}, 1)) intArg(site, site.arg(0, "col0"), "col0");
  return T::unknown();
}

BuiltinInfo &add(std::vector<BuiltinInfo> &out, std::string op, std::string signature, std::string doc, BuiltinRule rule) {
  BuiltinInfo b;
  b.name = "tile." + op;
  b.contexts = InKernel;
  b.rule = std::move(rule);
  b.signature = std::move(signature);
  b.doc = std::move(doc);
  // Autodiff never looks inside a kernel: kernels are made differentiable with @custom_vjp.
  b.differentiable = false;
  out.push_back(std::move(b));
  return out.back();
}

} // namespace

// Each tile operation lowers to Tile IR by a rule of ir/lower/kernel/ (most to one op of
// ir/tile/TileOps.def); an example is a statement of a kernel whose operands are those BuiltinExample
// names.
void registerTileBuiltins(std::vector<BuiltinInfo> &out) {
  // ids and ranges
  add(out, "program_id", "tile.program_id(axis) -> int", "the index of this program along grid axis 0, 1 or 2",
      [](CallSite &s) { return programIdRule(s, "program_id"); })
      .inKernel("program_id", "program_id").example("tile.program_id(0)");
  add(out, "num_programs", "tile.num_programs(axis) -> int", "the number of programs along grid axis 0, 1 or 2",
      [](CallSite &s) { return programIdRule(s, "num_programs"); })
      .inKernel("program_id", "num_programs").example("tile.num_programs(0)");
  add(out, "arange", "tile.arange(start, end) -> Tile[end - start, i32]",
      "the integers start, ..., end - 1 as a 1-d tile; end - start must be known at compile time", arangeRule)
      .inKernel("arange", "arange").example("tile.arange(0, 16)").example("tile.arange(n, n + 4)");
  add(out, "range", "tile.range(start, end, step=1, *, stages=None) -> range",
      "a loop range whose iterations the schedule may pipeline over `stages` stages", rangeRule)
      .inKernel("range").example("for t in tile.range(0, n): x = x + t").example("for t in tile.range(0, 16, 4, stages=2): x = x * 2.0");
  // creation
  add(out, "zeros", "tile.zeros(shape, dtype=f32) -> Tile", "a tile of zeros of a compile-time shape", zerosRule)
      .inKernel("fill", "constant", {{"value", "0"}}).example("tile.zeros((16,))").example("tile.zeros((16, 16), dtype=bf16)");
  add(out, "full", "tile.full(shape, value, dtype=f32) -> Tile", "a tile of a compile-time shape filled with `value`", fullRule)
      .inKernel("fill", "constant").example("tile.full((16,), 2.0)").example("tile.full((16,), n, dtype=f16)");
  // memory
  add(out, "load", "tile.load(view, other=0, mask=None) -> Tile",
      "reads a view into a tile; elements outside the tensor or masked off read as `other`", loadRule)
      .inKernel("load").example("tile.load(X[0:16])").example("tile.load(A[0:16, 0:8], other=1.0)")
      .example("tile.load(X[0:16], mask=x > 1.0)");
  add(out, "store", "tile.store(view, value, mask=None) -> None",
      "writes a tile through a view; elements outside the tensor or masked off are not written", storeRule)
      .inKernel("store", "store").example("tile.store(Y[0:16], x)").example("tile.store(Y[0:16], x, mask=x > 1.0)");
  add(out, "atomic_add", "tile.atomic_add(view, value) -> None",
      "adds a tile into a view atomically (float or i32 views)", atomicAddRule)
      .inKernel("store", "atomic_add").example("tile.atomic_add(Y[0:16], x)");
  add(out, "alloc_shared", "tile.alloc_shared(shape, dtype) -> Tile", "a tile in shared memory, for tile.cp_async",
      allocSharedRule)
      .inKernel("fill", "constant", {{"value", "0"}}).example("tile.alloc_shared((16,), f32)");
  add(out, "cp_async", "tile.cp_async(dst, src) -> None", "copies a view into a shared-memory tile asynchronously",
      cpAsyncRule)
      .inKernel("cp_async").example("tile.cp_async(sh, X[0:16])");
  add(out, "barrier", "tile.barrier() -> None", "orders shared memory: writes before the barrier are seen by every read after it",
      barrierRule)
      .inKernel("barrier", "barrier").example("tile.barrier()");
  // compute
  add(out, "dot", "tile.dot(a, b, acc=None) -> Tile",
      "the matrix product of [M, K] and [K, N] tiles, added into `acc` if given (f32 for 16-bit operands)",
      [](CallSite &s) { return dotRule(s, "tile.dot"); })
      .inKernel("dot", "dot").example("tile.dot(a, b)").example("tile.dot(a, b, acc=a)");
  add(out, "mma", "tile.mma(a, b, acc=None) -> Tile", "the same as tile.dot",
      [](CallSite &s) { return dotRule(s, "tile.mma"); })
      .inKernel("dot", "dot").example("tile.mma(a, b)");
  add(out, "transpose", "tile.transpose(x) -> Tile", "swaps the two axes of a 2-d tile", transposeRule)
      .inKernel("transpose", "transpose").example("tile.transpose(a)");
  add(out, "broadcast", "tile.broadcast(x, shape) -> Tile", "broadcasts a tile or a number to a shape, as NumPy",
      broadcastRule)
      .inKernel("broadcast", "broadcast").example("tile.broadcast(x, (16, 16))").example("tile.broadcast(1.0, (16,))");
  add(out, "reshape", "tile.reshape(x, shape) -> Tile", "the same elements in another shape", reshapeRule)
      .inKernel("reshape", "reshape").example("tile.reshape(a, (256,))").example("tile.reshape(a, (8, -1))");
  add(out, "cast", "tile.cast(x, dtype) -> Tile", "converts a tile's elements to `dtype`", castRule)
      .inKernel("cast", "cast").example("tile.cast(x, bf16)").example("tile.cast(2, f32)");
  add(out, "where", "tile.where(c, a, b) -> Tile", "elements of `a` where `c` holds, else of `b`, with broadcasting",
      whereRule)
      .inKernel("where", "select").example("tile.where(x > y, x, y)").example("tile.where(x > 1.0, x, 0.0)");
  struct Unary { const char *op; bool floatOnly; double (*f)(double); const char *doc; };
  for (const Unary &u : {Unary{"exp", true, [](double v) { return std::exp(v); }, "e to the power of each element"},
                         Unary{"exp2", true, [](double v) { return std::exp2(v); }, "2 to the power of each element"},
                         Unary{"log", true, [](double v) { return std::log(v); }, "the natural logarithm of each element"},
                         Unary{"sqrt", true, [](double v) { return std::sqrt(v); }, "the square root of each element"},
                         Unary{"rsqrt", true, [](double v) { return 1.0 / std::sqrt(v); }, "1 / sqrt of each element"},
                         Unary{"abs", false, [](double v) { return std::fabs(v); }, "the absolute value of each element"}}) {
    std::string op = u.op;
    add(out, op, "tile." + op + "(x) -> Tile", u.doc,
        [name = "tile." + op, fo = u.floatOnly](CallSite &s) { return unaryRule(s, name, fo); })
        .inKernel("unary", op).onNumbers(u.f, u.floatOnly ? NumberRule::Result::Float : NumberRule::Result::KeepKind)
        .example("tile." + op + "(x)");
  }
  add(out, "maximum", "tile.maximum(a, b) -> Tile", "the elementwise maximum, with broadcasting",
      [](CallSite &s) { return binaryRule(s, "maximum"); })
      .inKernel("minmax", "max").example("tile.maximum(x, y)").example("tile.maximum(x, 0.0)");
  add(out, "minimum", "tile.minimum(a, b) -> Tile", "the elementwise minimum, with broadcasting",
      [](CallSite &s) { return binaryRule(s, "minimum"); })
      .inKernel("minmax", "min").example("tile.minimum(a, b)");
  // reductions
  add(out, "max", "tile.max(x, axis) -> Tile", "the maximum along `axis`, which is dropped", reduceRule)
      .inKernel("reduce", "reduce_max").example("tile.max(a, 1)");
  add(out, "sum", "tile.sum(x, axis) -> Tile", "the sum along `axis`, which is dropped", reduceRule)
      .inKernel("reduce", "reduce_sum").example("tile.sum(a, 0)").example("tile.sum(x, 0)");
  add(out, "min", "tile.min(x, axis) -> Tile", "the minimum along `axis`, which is dropped", reduceRule)
      .inKernel("reduce", "reduce_min").example("tile.min(a, 1)");
  add(out, "row_max", "tile.row_max(x) -> Tile", "the maximum of each row of a 2-d tile",
      [](CallSite &s) { return rowReduceRule(s, "tile.row_max"); })
      .inKernel("row_reduce", "reduce_max").example("tile.row_max(a)");
  add(out, "row_sum", "tile.row_sum(x) -> Tile", "the sum of each row of a 2-d tile",
      [](CallSite &s) { return rowReduceRule(s, "tile.row_sum"); })
      .inKernel("row_reduce", "reduce_sum").example("tile.row_sum(a)");
  // attention helpers
  add(out, "mask_causal", "tile.mask_causal(S, row0, col0) -> Tile",
      "sets S[i, j] to -inf where col0 + j > row0 + i (query i sees keys 0..i)", maskCausalRule)
      .inKernel("mask_causal").example("tile.mask_causal(a, 0, 0)").example("tile.mask_causal(a, tile.program_id(0) * 16, 0)");
  add(out, "softmax_online", "tile.softmax_online(S, m, l) -> (P, m_new, l_new, alpha)",
      "one step of the online softmax over the rows of S, with running row maxima m and sums l", softmaxOnlineRule)
      .inKernel("softmax_online").example("tile.softmax_online(a, tile.row_max(a), tile.row_sum(a))");
  add(out, "row_index", "tile.row_index() -> Tile", "the row index of each element of the tile it is combined with",
      rowIndexRule)
      .inKernel("row_index").example("tile.row_index() + a");
  add(out, "col_index", "tile.col_index(col0) -> Tile",
      "col0 plus the column index of each element of the tile it is combined with", colIndexRule)
      .inKernel("col_index").example("tile.col_index(0) + a");
  // configuration
  add(out, "context", "tile.context() -> Config",
      "the chosen configuration of this kernel (ctx.BM, ctx.warps, ...)", contextRule)
      .inKernel("context").example("tile.context()");
}

} // namespace tsr::sema
