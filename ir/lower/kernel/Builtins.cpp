// Kernel lowering: calls of builtins in kernels, dispatched through their registry entries
// (sema/Builtins.h, the `kernel` rule).
#include "ir/lower/kernel/KernelLowering.h"

#include <string_view>
#include <unordered_map>

namespace tsr::ir::kernel_lowering {

namespace {

// The Tile IR op that an entry's kernel rule builds (`kernel.op`, a spelling of ir/tile/TileOps.def).
TOp kernelOp(const sema::BuiltinInfo &b, SourceRange at) {
  auto k = tile::opFromSpelling(b.kernel.op);
  if (!k) throw CompileError{"internal: the builtin `" + b.name + "` names no Tile IR op `" + b.kernel.op + "`", at};
  return *k;
}

} // namespace

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
  TOp k = kernelOp(b, at);
  std::vector<Attr> attrs;
  for (auto &[name, dflt] : b.kernel.attrs) {
    std::string given = dflt;
    for (auto &[kw, v] : a.kw) if (kw == name && v->kind == KV::K::Str) given = v->s;
    attrs.push_back({name, given});
  }
  tile::Value *v = value(x, at);
  bool floatMath = b.number && b.number->result == sema::NumberRule::Result::Float;
  if (floatMath && !isFloat(v->type.dtype)) v = castTo(v, DType::F32, at);
  return tileOf(op(k, {v}, attrs, at), isWeak(x));
}

// The rules that entries name (`kernel.rule`); a rule that a family shares reads the op it builds
// from the entry (`kernel.op`: program_id or num_programs, store or atomic_add, ...).
const std::unordered_map<std::string_view, KernelLowering::BuiltinRule> &KernelLowering::builtinRules() {
  using Rule = BuiltinRule;
  static const std::unordered_map<std::string_view, Rule> rules = {
      {"program_id", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         TOp k = kernelOp(b, at);
         int64_t axis = L.constInt(L.need(a, 0, "axis", at), "axis", at);
         if (axis < 0 || axis > 2) L.unsupported("a grid axis outside 0..2", at);
         if (k == TOp::ProgramId) L.f_.gridRank = std::max<uint32_t>(L.f_.gridRank, static_cast<uint32_t>(axis + 1));
         return tileOf(L.op(k, {}, {{"axis", axis}}, at), true);
       }},
      {"arange", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KVRef start = L.need(a, 0, "start", at), end = L.need(a, 1, "end", at);
         KVRef len = L.binary(BinOp::Sub, end, start, at);
         if (len->kind != KV::K::Int || len->i <= 0) L.unsupported("a tile.arange whose length is not a positive compile-time int", at);
         tile::Value *r = L.op(TOp::Arange, {}, {{"n", len->i}, dtypeAttr(DType::I32)}, at);
         if (start->kind == KV::K::Int && start->i == 0) return tileOf(r);
         return tileOf(L.op(TOp::Add, {r, L.convert(start, DType::I32, {len->i}, at)}, {}, at));
       }},
      {"range", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KV r;
         r.kind = KV::K::Range;
         KVRef lo = L.need(a, 0, "start", at), hi = a.get(1, "end"), st = a.get(2, "step");
         if (!hi) { hi = lo; lo = integer(0); }
         r.elems = {lo, hi, st ? st : integer(1)};
         if (KVRef s = a.get(99, "stages"); s && s->kind != KV::K::None) r.stages = L.constInt(s, "stages", at);
         return mk(r);
       }},
      // tile.zeros and tile.alloc_shared (shape, dtype): the entry's value; tile.full (shape,
      // value, dtype): the call's.
      {"fill", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         auto shape = L.shapeArg(L.need(a, 0, "shape", at), at);
         for (auto &[k, v] : b.kernel.attrs)
           if (k == "value") return tileOf(L.constant(integer(std::stoll(v)), L.dtypeArg(a.get(1, "dtype"), DType::F32, at), shape, at));
         DType d = L.dtypeArg(a.get(2, "dtype"), DType::F32, at);
         KVRef v = L.need(a, 1, "value", at);
         if (isNumber(v)) return tileOf(L.constant(v, d, shape, at));
         return tileOf(L.convert(v, d, shape, at));
       }},
      {"load", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         return L.load(L.need(a, 0, "view", at), a.get(1, "other"), a.get(2, "mask"), at);
       }},
      {"store", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         TOp k = kernelOp(b, at);
         L.store(k == TOp::AtomicAdd ? TOp::AtomicAddBox : TOp::StoreBox, k, L.need(a, 0, "view", at),
                 L.need(a, 1, "value", at), a.get(2, "mask"), at);
         return none();
       }},
      {"cp_async", [](KernelLowering &L, const sema::BuiltinInfo &, Call *c, const Args &a, SourceRange at) -> KVRef {
         // On the CPU a shared tile is a tile value: the copy is a load that rebinds `dst`.
         auto *dst = c->args.empty() ? nullptr : dyn_cast<Name>(c->args[0].value);
         if (!dst) L.unsupported("tile.cp_async into something other than a name", at);
         KVRef old = L.need(a, 0, "dst", at);
         KVRef loaded = L.load(L.need(a, 1, "src", at), nullptr, nullptr, at);
         if (old->kind == KV::K::Tile && old->v->type != loaded->v->type)
           L.unsupported("tile.cp_async from a view of another shape or dtype than its destination", at);
         L.env()[dst->id] = loaded;
         return none();
       }},
      {"barrier", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &, SourceRange at) -> KVRef {
         L.f_.add(L.cur_, TOp::Barrier, {}, {}, L.loc(at));
         return none();
       }},
      {"dot", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         return L.dot(L.need(a, 0, "a", at), L.need(a, 1, "b", at), a.get(2, "acc"), at);
       }},
      {"transpose", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         tile::Value *v = L.tileValue(L.need(a, 0, "x", at), "x", at);
         if (v->type.shape.size() != 2) L.unsupported("tile.transpose of a tile that is not 2-d", at);
         return tileOf(L.op(TOp::Transpose, {v}, {{"perm", std::vector<int64_t>{1, 0}}}, at));
       }},
      {"broadcast", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KVRef x = L.need(a, 0, "x", at);
         auto shape = L.shapeArg(L.need(a, 1, "shape", at), at);
         if (isNumber(x)) return tileOf(L.constant(x, weakDType(x) == DType::I64 ? DType::I32 : weakDType(x), shape, at));
         return tileOf(L.broadcastTo(L.value(x, at), shape, at), x->weak);
       }},
      {"reshape", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         tile::Value *v = L.tileValue(L.need(a, 0, "x", at), "x", at);
         KVRef s = L.need(a, 1, "shape", at);
         std::vector<KVRef> es = s->kind == KV::K::Tuple ? s->elems : std::vector<KVRef>{s};
         std::vector<int64_t> shape;
         int64_t known = 1, inferred = -1;
         for (size_t i = 0; i < es.size(); ++i) {
           if (es[i]->kind == KV::K::Int && es[i]->i == -1) { inferred = static_cast<int64_t>(i); shape.push_back(-1); continue; }
           shape.push_back(L.extent(es[i], at));
           known *= shape.back();
         }
         if (inferred >= 0) shape[inferred] = known ? v->type.numElements() / known : 0;
         return tileOf(L.op(TOp::Reshape, {v}, {{"shape", shape}}, at));
       }},
      {"cast", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KVRef x = L.need(a, 0, "x", at);
         DType d = L.dtypeArg(L.need(a, 1, "dtype", at), DType::F32, at);
         if (isNumber(x)) return tileOf(L.constant(x, d, {}, at));
         return tileOf(L.castTo(L.value(x, at), d, at));
       }},
      {"where", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KVRef c0 = L.need(a, 0, "c", at), a0 = L.need(a, 1, "a", at), b0 = L.need(a, 2, "b", at);
         KVRef cnd = L.resolveIndex(c0, {a0, b0}, at), x = L.resolveIndex(a0, {c0, b0}, at), y = L.resolveIndex(b0, {c0, a0}, at);
         if (cnd->kind == KV::K::Bool) return cnd->b ? x : y;
         if (cnd->kind != KV::K::Tile || cnd->v->type.dtype != DType::Bool) L.unsupported("a condition that is not a bool tile", at);
         DType d = L.joinDType(x, y, at);
         auto shape = L.broadcastShapes(L.broadcastShapes(shapeOf(cnd), shapeOf(x), at), shapeOf(y), at);
         return tileOf(L.op(TOp::Select, {L.convert(cnd, DType::Bool, shape, at), L.convert(x, d, shape, at), L.convert(y, d, shape, at)}, {}, at),
                       isWeak(x) && isWeak(y));
       }},
      {"unary", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         return L.unary(b, L.need(a, 0, "x", at), a, at);
       }},
      // maximum/minimum of two operands, and Python's max/min of two or more (of numbers: the
      // number; else elementwise).
      {"minmax", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         bool isMax = kernelOp(b, at) == TOp::Max;
         if (a.pos.size() < 2 && !a.get(1, "b")) L.unsupported("`" + b.name + "` of one iterable in a kernel", at);
         KVRef acc = L.need(a, 0, "a", at);
         for (size_t i = 1; i < std::max<size_t>(a.pos.size(), 2); ++i) {
           KVRef y = L.need(a, i, "b", at);
           if (isNumber(acc) && isNumber(y)) {
             KVRef gt = L.compare(CmpOp::Gt, acc, y, at);
             acc = (gt->b == isMax) ? acc : y;
           } else {
             acc = L.elementwise(isMax ? TOp::Max : TOp::Min, {acc, y}, at, L.joinDType(acc, y, at));
           }
         }
         return acc;
       }},
      {"reduce", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         int64_t axis = L.constInt(L.need(a, 1, "axis", at), "axis", at);
         return L.reduce(kernelOp(b, at), L.need(a, 0, "x", at), axis, at);
       }},
      {"row_reduce", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         KVRef x = L.need(a, 0, "x", at);
         if (x->kind == KV::K::Tile && x->v->type.shape.size() != 2) L.unsupported(b.name + " of a tile that is not 2-d", at);
         return L.reduce(kernelOp(b, at), x, 1, at);
       }},
      {"mask_causal", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         return L.maskCausal(L.need(a, 0, "S", at), L.need(a, 1, "row0", at), L.need(a, 2, "col0", at), at);
       }},
      {"softmax_online", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         return L.softmaxOnline(L.need(a, 0, "S", at), L.need(a, 1, "m", at), L.need(a, 2, "l", at), at);
       }},
      // tile.row_index() and tile.col_index(col0): indices that combine with the tile they meet.
      {"row_index", [](KernelLowering &, const sema::BuiltinInfo &, Call *, const Args &, SourceRange) -> KVRef {
         KV v;
         v.kind = KV::K::Index;
         v.b = true;
         return mk(v);
       }},
      {"col_index", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KV v;
         v.kind = KV::K::Index;
         v.elems.push_back(L.need(a, 0, "col0", at));
         return mk(v);
       }},
      {"context", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &, SourceRange) -> KVRef {
         // The configuration as docs/language.md gives it: the launch's knobs, the keyword-only
         // parameters, and warps and stages (a Schedule's defaults, 4 and 2, when nothing sets them).
         KV cfg;
         cfg.kind = KV::K::Config;
         cfg.fields = L.config_;
         auto put = [&](const std::string &name, const KVRef &v) {
           for (auto &[k, x] : cfg.fields) if (k == name) return;
           cfg.fields.push_back({name, v});
         };
         for (const Param &prm : L.kernel_->def->params)
           if (prm.kind == ParamKind::KeywordOnly) put(prm.name, L.frames_.front()->env.at(prm.name));
         put("warps", integer(4));
         put("stages", integer(2));
         return mk(cfg);
       }},
      // int(x), float(x), bool(x): Python's on numbers; a scalar tile converted (a weak result)
      // to the dtype the entry names (`kernel.op`: i64, f32, bool).
      {"convert", [](KernelLowering &L, const sema::BuiltinInfo &b, Call *, const Args &a, SourceRange at) -> KVRef {
         auto to = dtypeFromName(b.kernel.op);
         if (!to) throw CompileError{"internal: the builtin `" + b.name + "` names no dtype `" + b.kernel.op + "`", at};
         DType d = *to;
         KVRef x = L.need(a, 0, "x", at);
         if (isNumber(x)) {
           double v = x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b);
           if (isFloat(d)) return floating(v);
           if (d == DType::Bool) return boolean(v != 0);
           return integer(x->kind == KV::K::Int ? x->i : static_cast<int64_t>(v));
         }
         tile::Value *v = L.value(x, at);
         if (!v->type.isScalar()) L.unsupported(b.name + "() of a tile", at);
         if (d == DType::Bool) return tileOf(L.op(TOp::Ne, {v, L.constant(integer(0), v->type.dtype, {}, at)}, {}, at), true);
         return tileOf(L.castTo(v, d, at), true);
       }},
      {"cdiv", [](KernelLowering &L, const sema::BuiltinInfo &, Call *, const Args &a, SourceRange at) -> KVRef {
         KVRef x = L.need(a, 0, "a", at), y = L.need(a, 1, "b", at);
         KVRef sum = L.binary(BinOp::Sub, L.binary(BinOp::Add, x, y, at), integer(1), at);
         return L.binary(BinOp::FloorDiv, sum, y, at);
       }},
  };
  return rules;
}

bool KernelLowering::hasBuiltinRule(std::string_view rule) { return builtinRules().count(rule) != 0; }

KVRef KernelLowering::builtin(const sema::BuiltinInfo &b, Call *c, const Args &a) {
  const auto &rules = builtinRules();
  auto it = b.kernel.given() ? rules.find(b.kernel.rule) : rules.end();
  if (it == rules.end()) unsupported("`" + b.name + "` in a kernel", c->func->range);
  return it->second(*this, b, c, a, c->range);
}

} // namespace tsr::ir::kernel_lowering

namespace tsr::ir {

bool hasKernelBuiltinRule(std::string_view rule) { return kernel_lowering::KernelLowering::hasBuiltinRule(rule); }

} // namespace tsr::ir
