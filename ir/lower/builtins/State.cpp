// Graph lowering of state objects (spec 14): KVCache(...), cache.append(k, v), the attributes of a
// cache, and isinstance(x, KVCache). A cache is a record of tensors (Lowering.h, cacheValue): its
// storage k and v [batch, heads, max_len, head_dim] and pos, the i32 count of positions appended.
// append is a composition of existing ops: the new rows are taken (take; one row is broadcast)
// into a [.., max_len, ..] tensor at the slots they land in, and a mask over the slots (iota,
// compares) selects them (where) over the old storage. Past max_len without a rolling window, check_le stops the program
// with the cache's name and both lengths. The result is a new value: the executor does not yet
// donate the old storage, so append copies the storage (docs/language.md section 12).
#include "ir/lower/builtins/Rules.h"

namespace tsr::ir::lowering {

namespace {

// A size as an i32 scalar: a constant, or dim_value of a symbolic size.
Value *stateSizeI32(Lowering &L, const Dim &d, SourceRange at) {
  if (auto c = d.constantValue()) return L.constant(static_cast<double>(*c), DType::I32, at);
  Value *v = L.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{d}}}, at);
  return L.op(OpKind::Cast, {v}, {{"dtype", DTypeAttr{DType::I32, {}}}}, at);
}

// The source text of a range (the receiver of cache.append, for run-time messages), or `fallback`.
std::string stateSourceText(Lowering &L, SourceRange r, const std::string &fallback) {
  if (!r.valid() || !L.p_.sm.has(r.file)) return fallback;
  const std::string &text = L.p_.sm.file(r.file).text();
  if (r.begin > r.end || r.end > text.size()) return fallback;
  std::string t = text.substr(r.begin, r.end - r.begin);
  if (t.empty() || t.size() > 80 || t.find('\n') != std::string::npos) return fallback;
  return t;
}

// A value of type `like` (dims, dtype, policies): a cast where the op's result differs.
Value *stateFit(Lowering &L, Value *x, const Type &like, SourceRange at) {
  if (x->type.dtype == like.dtype && x->type.policies == like.policies) return x;
  return L.op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{like.dtype, like.policies}}}, at);
}

// KVCache(batch, heads, max_len, head_dim, dtype=f32, *, rolling_window=False): zero storage,
// pos 0.
LVRef kvcache(BuiltinCall &c) {
  Lowering &L = c.L;
  std::vector<Dim> dims;
  const char *names[] = {"batch", "heads", "max_len", "head_dim"};
  for (size_t i = 0; i < 4; ++i) {
    LVRef a = c.arg(i, names[i]);
    if (!a) c.unsupported(std::string("KVCache without `") + names[i] + "`");
    dims.push_back(L.dimOf(a, c.at));
  }
  DTypeAttr dt = L.dtypeArg(c.arg(4, "dtype"), DTypeAttr{DType::F32, {}});
  LVRef r = c.kwarg("rolling_window");
  bool rolling = r && r->kind == LV::K::Bool && r->b;
  Value *zeros = L.op(OpKind::Constant, {}, {{"value", 0.0}, {"shape", dims}, {"dtype", dt}}, c.at);
  Value *pos = L.constant(0, DType::I32, c.at);
  return cacheValue(zeros, zeros, pos, rolling);
}

// cache.append(k, v): the slots that the T new positions land in take them; the rest keep the
// old storage. Without a rolling window position p is slot p, and pos + T must not exceed
// max_len (check_le); in a rolling window position p is slot p % max_len, and where T exceeds
// max_len the latest position of each slot wins.
LVRef kvcacheAppend(BuiltinCall &c) {
  Lowering &L = c.L;
  const SourceRange at = c.at;
  LVRef cache = c.args.empty() ? nullptr : c.args[0];
  if (!isCache(cache)) c.unsupported("append of a value that is not a KVCache");
  LVRef kArg = c.arg(1, "k"), vArg = c.arg(2, "v");
  if (!kArg || !vArg) c.unsupported("KVCache.append without `k` and `v`");
  Value *oldK = cacheField(cache, "k"), *oldV = cacheField(cache, "v"), *n = cacheField(cache, "pos");
  Value *k = L.asTensor(kArg, oldK->type.dtype, at), *v = L.asTensor(vArg, oldV->type.dtype, at);
  if (k->type.rank() != 4 || v->type.rank() != 4) c.unsupported("KVCache.append of k and v that are not [batch, heads, T, head_dim]");
  const Dim S = oldK->type.dims[2], T = k->type.dims[2];
  const bool rolling = cache->b;
  Value *Sv = stateSizeI32(L, S, at), *Tv = stateSizeI32(L, T, at);
  Value *one = L.constant(1, DType::I32, at), *zero = L.constant(0, DType::I32, at);
  Value *j = L.op(OpKind::Iota, {}, {{"shape", std::vector<Dim>{S}}, {"axis", int64_t{0}}, {"dtype", DTypeAttr{DType::I32, {}}}}, at);
  Value *end = L.op(OpKind::Add, {n, Tv}, {}, at);
  Value *inside, *index;
  if (!rolling) {
    std::string recv = stateSourceText(L, c.calleeRange, "cache.append");
    if (recv.size() > 7 && recv.compare(recv.size() - 7, 7, ".append") == 0) recv.resize(recv.size() - 7);
    const std::string message = "KVCache `" + recv + "` is full: appending {3} position(s) to its length {2} gives {0}, past max_len {1}";
    end = L.op(OpKind::CheckLe, {end, Sv, n, Tv}, {{"message", message}}, at);
    Value *start = L.op(OpKind::Sub, {end, Tv}, {}, at);
    Value *rel = L.op(OpKind::Sub, {j, start}, {}, at);
    inside = L.op(OpKind::And, {L.op(OpKind::Ge, {rel, zero}, {}, at), L.op(OpKind::Lt, {rel, Tv}, {}, at)}, {}, at);
    index = rel;
  } else {
    Value *i0 = L.op(OpKind::Mod, {L.op(OpKind::Sub, {j, n}, {}, at), Sv}, {}, at);
    inside = L.op(OpKind::Lt, {i0, Tv}, {}, at);
    Value *laps = L.op(OpKind::FloorDiv, {L.op(OpKind::Sub, {L.op(OpKind::Sub, {Tv, one}, {}, at), i0}, {}, at), Sv}, {}, at);
    index = L.op(OpKind::Add, {i0, L.op(OpKind::Mul, {Sv, laps}, {}, at)}, {}, at);
  }
  index = L.op(OpKind::Max, {L.op(OpKind::Min, {index, L.op(OpKind::Sub, {Tv, one}, {}, at)}, {}, at), zero}, {}, at);
  const std::vector<Dim> maskDims{Dim::constant(1), Dim::constant(1), S, Dim::constant(1)};
  Value *mask = L.op(OpKind::Reshape, {inside}, {{"shape", maskDims}}, at);
  // One new position (a decoding step): the row broadcast over the slots, which the mask then
  // selects, so that the update is one fused elementwise step instead of a take.
  const bool oneRow = T.constantValue() == std::optional<int64_t>(1);
  auto update = [&](Value *old, Value *rows) {
    Value *taken = oneRow ? L.op(OpKind::BroadcastTo, {rows}, {{"shape", old->type.dims}}, at)
                          : L.op(OpKind::Take, {rows, index}, {{"axis", int64_t{2}}}, at);
    return stateFit(L, L.op(OpKind::Where, {mask, taken, old}, {}, at), old->type, at);
  };
  Value *newK = update(oldK, k);
  Value *newV = update(oldV, v);
  return cacheValue(newK, newV, end, rolling);
}

// isinstance(x, KVCache): known when the graph is lowered.
LVRef isinstanceRule(BuiltinCall &c) {
  LVRef x = c.arg(0, "obj");
  return boolean(isCache(x));
}

} // namespace

LVRef Lowering::cacheAttribute(const LVRef &cache, const std::string &name, SourceRange at) {
  Value *pos = cacheField(cache, "pos");
  const Type &storage = cacheField(cache, "k")->type;
  if (name == "appended") return tensor(pos);
  if (name == "length") {
    if (!cache->b) return tensor(pos);
    Value *S = stateSizeI32(*this, storage.dims[2], at);
    return tensor(op(OpKind::Min, {pos, S}, {}, at));
  }
  if (name == "k" || name == "v") return tensor(cacheField(cache, name.c_str()));
  if (name == "max_len") return integer(storage.dims[2]);
  if (name == "rolling_window") return boolean(cache->b);
  if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::KVCache, name)) {
    LV v;
    v.kind = LV::K::Builtin;
    v.builtin = m;
    v.self = cache;
    return mk(v);
  }
  unsupported("the attribute `" + name + "` of a KVCache", at);
}

void addStateRules(GraphRules &r) {
  r["kvcache"] = kvcache;
  r["kvcache_append"] = kvcacheAppend;
  r["isinstance"] = isinstanceRule;
}

} // namespace tsr::ir::lowering
