// Kernel lowering: calls of builtins in kernels, dispatched through their registry entries
// (sema/Builtins.h, the `kernel` rule).
#include "ir/lower/kernel/KernelLowering.h"

namespace tsr::ir::kernel_lowering {

KVRef KernelLowering::need(const Args &a, size_t i, const char *name, SourceRange at) {
  KVRef v = a.get(i, name);
  if (!v) unsupported(std::string("a call without `") + name + "`", at);
  return v;
}

KVRef KernelLowering::unary(const sema::BuiltinInfo &b, const KVRef &x, const Args &a, SourceRange at) {
  if (isNumber(x) && b.number) {
    bool isInt = x->kind != KV::K::Float;
    double v = x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b);
    if (auto r = sema::applyToNumber(b, v, isInt)) return r->isInt ? integer(static_cast<int64_t>(r->value)) : floating(r->value);
  }
  auto k = tile::opFromSpelling(b.kernel.op);
  if (!k) throw CompileError{"internal: the builtin `" + b.name + "` names no Tile IR op `" + b.kernel.op + "`", at};
  std::vector<Attr> attrs;
  for (auto &[name, dflt] : b.kernel.attrs) {
    std::string given = dflt;
    for (auto &[kw, v] : a.kw) if (kw == name && v->kind == KV::K::Str) given = v->s;
    attrs.push_back({name, given});
  }
  tile::Value *v = value(x, at);
  bool floatMath = b.number && b.number->result == sema::NumberRule::Result::Float;
  if (floatMath && !isFloat(v->type.dtype)) v = castTo(v, DType::F32, at);
  return tileOf(op(*k, {v}, attrs, at), isWeak(x));
}

KVRef KernelLowering::builtin(const sema::BuiltinInfo &b, Call *c, const Args &a) {
  const std::string &n = b.name;
  SourceRange at = c->range;
  auto x0 = [&](const char *name) { return need(a, 0, name, at); };
  if (n == "tile.program_id" || n == "tile.num_programs") {
    int64_t axis = constInt(need(a, 0, "axis", at), "axis", at);
    if (axis < 0 || axis > 2) unsupported("a grid axis outside 0..2", at);
    if (n == "tile.program_id") f_.gridRank = std::max<uint32_t>(f_.gridRank, static_cast<uint32_t>(axis + 1));
    return tileOf(op(n == "tile.program_id" ? TOp::ProgramId : TOp::NumPrograms, {}, {{"axis", axis}}, at), true);
  }
  if (n == "tile.arange") {
    KVRef start = need(a, 0, "start", at), end = need(a, 1, "end", at);
    KVRef len = binary(BinOp::Sub, end, start, at);
    if (len->kind != KV::K::Int || len->i <= 0) unsupported("a tile.arange whose length is not a positive compile-time int", at);
    tile::Value *r = op(TOp::Arange, {}, {{"n", len->i}, dtypeAttr(DType::I32)}, at);
    if (start->kind == KV::K::Int && start->i == 0) return tileOf(r);
    return tileOf(op(TOp::Add, {r, convert(start, DType::I32, {len->i}, at)}, {}, at));
  }
  if (n == "tile.range" || n == "range") {
    KV r;
    r.kind = KV::K::Range;
    KVRef lo = need(a, 0, "start", at), hi = a.get(1, "end"), st = a.get(2, "step");
    if (!hi) { hi = lo; lo = integer(0); }
    r.elems = {lo, hi, st ? st : integer(1)};
    if (KVRef s = a.get(99, "stages"); s && s->kind != KV::K::None) r.stages = constInt(s, "stages", at);
    return mk(r);
  }
  if (n == "tile.zeros" || n == "tile.alloc_shared")
    return tileOf(constant(integer(0), dtypeArg(a.get(1, "dtype"), DType::F32, at), shapeArg(x0("shape"), at), at));
  if (n == "tile.full") {
    auto shape = shapeArg(x0("shape"), at);
    DType d = dtypeArg(a.get(2, "dtype"), DType::F32, at);
    KVRef v = need(a, 1, "value", at);
    if (isNumber(v)) return tileOf(constant(v, d, shape, at));
    return tileOf(convert(v, d, shape, at));
  }
  if (n == "tile.load") return load(x0("view"), a.get(1, "other"), a.get(2, "mask"), at);
  if (n == "tile.store") {
    store(TOp::StoreBox, TOp::Store, x0("view"), need(a, 1, "value", at), a.get(2, "mask"), at);
    return none();
  }
  if (n == "tile.atomic_add") {
    store(TOp::AtomicAddBox, TOp::AtomicAdd, x0("view"), need(a, 1, "value", at), a.get(2, "mask"), at);
    return none();
  }
  if (n == "tile.cp_async") {
    // On the CPU a shared tile is a tile value: the copy is a load that rebinds `dst`.
    auto *dst = c->args.empty() ? nullptr : dyn_cast<Name>(c->args[0].value);
    if (!dst) unsupported("tile.cp_async into something other than a name", at);
    KVRef old = x0("dst");
    KVRef loaded = load(need(a, 1, "src", at), nullptr, nullptr, at);
    if (old->kind == KV::K::Tile && old->v->type != loaded->v->type)
      unsupported("tile.cp_async from a view of another shape or dtype than its destination", at);
    env()[dst->id] = loaded;
    return none();
  }
  if (n == "tile.barrier") {
    f_.add(cur_, TOp::Barrier, {}, {}, loc(at));
    return none();
  }
  if (n == "tile.dot" || n == "tile.mma") return dot(x0("a"), need(a, 1, "b", at), a.get(2, "acc"), at);
  if (n == "tile.transpose") {
    tile::Value *v = tileValue(x0("x"), "x", at);
    if (v->type.shape.size() != 2) unsupported("tile.transpose of a tile that is not 2-d", at);
    return tileOf(op(TOp::Transpose, {v}, {{"perm", std::vector<int64_t>{1, 0}}}, at));
  }
  if (n == "tile.broadcast") {
    KVRef x = x0("x");
    auto shape = shapeArg(need(a, 1, "shape", at), at);
    if (isNumber(x)) return tileOf(constant(x, weakDType(x) == DType::I64 ? DType::I32 : weakDType(x), shape, at));
    return tileOf(broadcastTo(value(x, at), shape, at), x->weak);
  }
  if (n == "tile.reshape") {
    tile::Value *v = tileValue(x0("x"), "x", at);
    KVRef s = need(a, 1, "shape", at);
    std::vector<KVRef> es = s->kind == KV::K::Tuple ? s->elems : std::vector<KVRef>{s};
    std::vector<int64_t> shape;
    int64_t known = 1, inferred = -1;
    for (size_t i = 0; i < es.size(); ++i) {
      if (es[i]->kind == KV::K::Int && es[i]->i == -1) { inferred = static_cast<int64_t>(i); shape.push_back(-1); continue; }
      shape.push_back(extent(es[i], at));
      known *= shape.back();
    }
    if (inferred >= 0) shape[inferred] = known ? v->type.numElements() / known : 0;
    return tileOf(op(TOp::Reshape, {v}, {{"shape", shape}}, at));
  }
  if (n == "tile.cast") {
    KVRef x = x0("x");
    DType d = dtypeArg(need(a, 1, "dtype", at), DType::F32, at);
    if (isNumber(x)) return tileOf(constant(x, d, {}, at));
    return tileOf(castTo(value(x, at), d, at));
  }
  if (n == "tile.where") {
    KVRef c0 = x0("c"), a0 = need(a, 1, "a", at), b0 = need(a, 2, "b", at);
    KVRef cnd = resolveIndex(c0, {a0, b0}, at), x = resolveIndex(a0, {c0, b0}, at), y = resolveIndex(b0, {c0, a0}, at);
    if (cnd->kind == KV::K::Bool) return cnd->b ? x : y;
    if (cnd->kind != KV::K::Tile || cnd->v->type.dtype != DType::Bool) unsupported("a condition that is not a bool tile", at);
    DType d = joinDType(x, y, at);
    auto shape = broadcastShapes(broadcastShapes(shapeOf(cnd), shapeOf(x), at), shapeOf(y), at);
    return tileOf(op(TOp::Select, {convert(cnd, DType::Bool, shape, at), convert(x, d, shape, at), convert(y, d, shape, at)}, {}, at),
                  isWeak(x) && isWeak(y));
  }
  if (b.kernel.rule == "unary") return unary(b, x0("x"), a, at);
  std::string base = n.rfind("tile.", 0) == 0 ? n.substr(5) : n;
  if (base == "maximum" || base == "minimum" || ((n == "max" || n == "min") && a.pos.size() >= 2)) {
    bool isMax = base == "maximum" || n == "max";
    KVRef acc = need(a, 0, "a", at);
    for (size_t i = 1; i < std::max<size_t>(a.pos.size(), 2); ++i) {
      KVRef y = need(a, i, "b", at);
      if (isNumber(acc) && isNumber(y)) {
        KVRef gt = compare(CmpOp::Gt, acc, y, at);
        acc = (gt->b == isMax) ? acc : y;
      } else {
        acc = elementwise(isMax ? TOp::Max : TOp::Min, {acc, y}, at, joinDType(acc, y, at));
      }
    }
    return acc;
  }
  if (n == "tile.max" || n == "tile.sum" || n == "tile.min") {
    int64_t axis = constInt(need(a, 1, "axis", at), "axis", at);
    return reduce(n == "tile.max" ? TOp::ReduceMax : n == "tile.sum" ? TOp::ReduceSum : TOp::ReduceMin, x0("x"), axis, at);
  }
  if (n == "tile.row_max" || n == "tile.row_sum") {
    KVRef x = x0("x");
    if (x->kind == KV::K::Tile && x->v->type.shape.size() != 2) unsupported(n + " of a tile that is not 2-d", at);
    return reduce(n == "tile.row_max" ? TOp::ReduceMax : TOp::ReduceSum, x, 1, at);
  }
  if (n == "tile.mask_causal") return maskCausal(x0("S"), need(a, 1, "row0", at), need(a, 2, "col0", at), at);
  if (n == "tile.softmax_online") return softmaxOnline(x0("S"), need(a, 1, "m", at), need(a, 2, "l", at), at);
  if (n == "tile.row_index" || n == "tile.col_index") {
    KV v;
    v.kind = KV::K::Index;
    v.b = n == "tile.row_index";
    if (!v.b) v.elems.push_back(x0("col0"));
    return mk(v);
  }
  if (n == "tile.context") {
    // The configuration as docs/language.md gives it: the launch's knobs, the keyword-only
    // parameters, and warps and stages (a Schedule's defaults, 4 and 2, when nothing sets them).
    KV cfg;
    cfg.kind = KV::K::Config;
    cfg.fields = config_;
    auto put = [&](const std::string &name, const KVRef &v) {
      for (auto &[k, x] : cfg.fields) if (k == name) return;
      cfg.fields.push_back({name, v});
    };
    for (const Param &prm : kernel_->def->params)
      if (prm.kind == ParamKind::KeywordOnly) put(prm.name, frames_.front()->env.at(prm.name));
    put("warps", integer(4));
    put("stages", integer(2));
    return mk(cfg);
  }
  if (n == "float" || n == "int" || n == "bool") {
    KVRef x = x0("x");
    if (isNumber(x)) {
      double v = x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b);
      if (n == "float") return floating(v);
      if (n == "bool") return boolean(v != 0);
      return integer(x->kind == KV::K::Int ? x->i : static_cast<int64_t>(v));
    }
    DType d = n == "float" ? DType::F32 : n == "int" ? DType::I64 : DType::Bool;
    tile::Value *v = value(x, at);
    if (!v->type.isScalar()) unsupported(n + "() of a tile", at);
    if (d == DType::Bool) return tileOf(op(TOp::Ne, {v, constant(integer(0), v->type.dtype, {}, at)}, {}, at), true);
    return tileOf(castTo(v, d, at), true);
  }
  if (n == "cdiv") {
    KVRef x = x0("a"), y = need(a, 1, "b", at);
    KVRef sum = binary(BinOp::Sub, binary(BinOp::Add, x, y, at), integer(1), at);
    return binary(BinOp::FloorDiv, sum, y, at);
  }
  unsupported("`" + n + "` in a kernel", c->func->range);
}

} // namespace tsr::ir::kernel_lowering
