// State objects (spec 14): KVCache(batch=, heads=, max_len=, head_dim=, dtype=, rolling_window=),
// its append method, and isinstance(x, KVCache), which stdlib functions use to take a cache where
// they otherwise take a tensor (nn.flash_attention). The attributes of a cache (length, k, v, ...)
// are typed with the other attributes, in CheckCalls.cpp. Graph lowering:
// ir/lower/builtins/State.cpp; docs/language.md section 12.
#include "sema/builtins/Rules.h"

namespace tsr::sema::builtins {

namespace {

/// A size of the cache: an int known when the graph is compiled (a constant, a size symbol, a
/// keyword-only parameter), not a run-time value, since it shapes the cache's storage.
std::optional<Dim> kvCacheSize(CallSite &s, const ArgInfo *a, const char *what) {
  if (isUnknown(a)) return std::nullopt;
  auto d = s.intDim(a, what);
  if (!d) return std::nullopt;
  if (isRuntimeDim(*d) || d->hasUnknown()) {
    s.wrongKind(a, "an int known at compile time (a constant, a size or a keyword-only parameter)", what);
    return std::nullopt;
  }
  if (auto c = d->constantValue(); c && *c <= 0) {
    s.wrongKind(a, "a positive int", what);
    return std::nullopt;
  }
  return d;
}

// KVCache(batch, heads, max_len, head_dim, dtype=f32, *, rolling_window=False): an empty cache
// of type KVCache["batch", "heads", "max_len", "head_dim", dtype] (@rolling_window).
TypeRef kvRuleCache(CallSite &s) {
  if (!s.expect({"batch", "heads", "max_len", "head_dim", "dtype"}, 4, {"rolling_window"})) return T::unknown();
  std::vector<Dim> dims;
  bool ok = true;
  const char *names[] = {"batch", "heads", "max_len", "head_dim"};
  for (size_t i = 0; i < 4; ++i) {
    auto d = kvCacheSize(s, s.arg(i, names[i]), names[i]);
    if (d) dims.push_back(*d);
    else ok = false;
  }
  auto dt = dtypeArg(s, s.arg(4, "dtype"), DType::F32);
  bool rolling = false;
  if (const ArgInfo *r = s.kwarg("rolling_window"); given(r)) {
    auto b = s.constBool(r, "rolling_window");
    if (!b) {
      if (!isUnknown(r) && r->type->is(K::Bool)) s.diags->report(DiagKind::NotCompileTime, r->range, {"`rolling_window`"});
      return T::unknown();
    }
    rolling = *b;
  }
  if (!ok || !dt) return T::unknown();
  if (!isFloat(dt->first)) {
    s.wrongKind(s.arg(4, "dtype"), "a floating-point dtype", "dtype");
    return T::unknown();
  }
  return T::kvcache(std::move(dims), dt->first, dt->second, rolling);
}

// cache.append(k, v): k and v [batch, heads, T, head_dim] of the cache's dtype (policies aside),
// the same T; the result is the cache's type. A T known to exceed max_len without a rolling
// window can never fit: reported here rather than left to the run-time check.
TypeRef kvRuleAppend(CallSite &s) {
  if (!s.expect({"k", "v"}, 2)) return T::unknown();
  if (isUnknown(s.self) || !s.self->is(K::KVCache)) return T::unknown();
  const TypeRef &c = s.self;
  std::string receiver = sourceText(s, s.calleeRange);
  if (size_t dot = receiver.rfind(".append"); dot != std::string::npos) receiver = receiver.substr(0, dot);
  if (receiver.empty() || receiver.size() > 80 || receiver.find('\n') != std::string::npos) receiver = "cache";
  const std::string cacheType = typeStr(c);
  bool ok = true;
  TypeRef kt;
  for (size_t i = 0; i < 2; ++i) {
    const char *name = i == 0 ? "k" : "v";
    const ArgInfo *a = s.arg(i, name);
    TypeRef t = s.tensorArg(a, name);
    if (!t) { ok = ok && isUnknown(a); continue; }
    const std::string who = written(s, a, tick(name));
    auto shapeError = [&](const std::string &what) {
      s.diags->report(DiagKind::KVCacheAppendShape, a->range, {receiver, who + " " + what, cacheType});
      ok = false;
    };
    if (t->rankKnown && t->dims.size() != 4) {
      shapeError("has rank " + std::to_string(t->dims.size()) + ", not 4 ([batch, heads, T, head_dim])");
      continue;
    }
    if (t->dtype != c->dtype) {
      s.diags->report(DiagKind::KVCacheAppendDType, a->range, {receiver, who, std::string(dtypeName(t->dtype)), cacheType});
      ok = false;
      continue;
    }
    if (!t->rankKnown) continue;
    const char *axisNames[] = {"batch", "heads", nullptr, "head dimension"};
    bool fits = true;
    for (size_t ax : {size_t(0), size_t(1), size_t(3)}) {
      if (!provablyDifferent(t->dims[ax], c->dims[ax])) continue;
      const std::string n = axisNames[ax];
      shapeError(ax == 1 ? "has " + dimStr(t->dims[1]) + " heads (axis 1), not " + dimStr(c->dims[1])
                         : "has " + n + " " + dimStr(t->dims[ax]) + " (axis " + std::to_string(ax) + "), not " + dimStr(c->dims[ax]));
      fits = false;
      break;
    }
    if (!fits) continue;
    if (i == 0) {
      kt = t;
      auto n = t->dims[2].constantValue(), m = c->dims[2].constantValue();
      if (!c->rolling && n && m && *n > *m)
        shapeError("has " + std::to_string(*n) + " new positions (axis 2), more than max_len " + std::to_string(*m));
    } else if (kt && provablyDifferent(t->dims[2], kt->dims[2])) {
      shapeError("has " + dimStr(t->dims[2]) + " new positions (axis 2), not " + dimStr(kt->dims[2]) + " as `k`");
    }
  }
  return ok ? c : T::unknown();
}

// isinstance(x, KVCache): whether x is a cache, known at compile time from x's type (unknown
// in a generic check of an unannotated parameter, which then checks both branches of an `if`).
// Only the class KVCache is supported: tensors, numbers and containers have no class value.
TypeRef kvRuleIsinstance(CallSite &s) {
  if (!s.expect({"obj", "cls"}, 2)) return T::unknown();
  const ArgInfo *x = s.arg(0, "obj"), *cls = s.arg(1, "cls");
  if (isUnknown(cls)) return T::boolean();
  if (!cls->type->is(K::Builtin) || !cls->type->builtin || cls->type->builtin->name != "KVCache" || cls->type->self) {
    s.wrongKind(cls, "the class KVCache (the only class isinstance supports)", "cls");
    return T::boolean();
  }
  if (isUnknown(x)) return T::boolean();
  return T::boolean(x->type->is(K::KVCache));
}

} // namespace

void addStateBuiltins(Registrar &r) {
  r.add("KVCache", HostAndGraph, kvRuleCache,
        "KVCache(batch, heads, max_len, head_dim, dtype=f32, *, rolling_window=False) -> KVCache",
        "an empty key/value cache for autoregressive decoding (spec 14)", false)
      .inGraph("kvcache")
      .example("KVCache(batch=2, heads=3, max_len=8, head_dim=4, dtype=f32)", HostAndGraph)
      .inHost("graph");
  r.method(K::KVCache, "append", HostAndGraph, kvRuleAppend, "cache.append(k, v) -> KVCache",
           "the cache with k and v [batch, heads, T, head_dim] appended at its length (spec 14)", false)
      .inGraph("kvcache_append")
      .example("KVCache(batch=1, heads=2, max_len=4, head_dim=3, dtype=f32).append(reshape(x, (1, 2, 1, 3)), reshape(y, (1, 2, 1, 3)))", HostAndGraph)
      .inHost("graph");
  r.add("isinstance", HostAndGraph, kvRuleIsinstance, "isinstance(obj, cls) -> bool",
        "whether obj is a KVCache, decided at compile time (cls must be KVCache)", false)
      .inGraph("isinstance")
      .example("isinstance(x, KVCache)", HostAndGraph)
      .inHost("graph");
}

} // namespace tsr::sema::builtins
