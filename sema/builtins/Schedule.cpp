// Kernel schedules (spec 7): Schedule(block=(BM, BN), k=BK, ...) and its with_* methods.
#include "sema/builtins/Rules.h"

#include <algorithm>

namespace tsr::sema::builtins {

namespace {

// ---- schedules (spec 7) -------------------------------------------------------------------------

/// A compile-time knob value read from a type (a tuple element or an argument), checked by
/// `valid`, which returns a message for ScheduleKnob when the value is wrong.
std::optional<int64_t> knobValue(CallSite &s, const TypeRef &t, SourceRange r, const std::string &what,
                                 std::optional<std::string> (*valid)(int64_t)) {
  ArgInfo a{t, r, nullptr, what};
  auto v = s.constInt(&a, what, true);
  if (!v) return std::nullopt;
  if (auto msg = valid(*v)) {
    s.diags->report(DiagKind::ScheduleKnob, r, {*msg});
    return std::nullopt;
  }
  return v;
}

std::optional<std::string> validBlock(int64_t v) {
  if (v > 0) return std::nullopt;
  return "block sizes must be positive, not " + std::to_string(v);
}
std::optional<std::string> validWarps(int64_t v) {
  if (v >= 1 && v <= 32 && (v & (v - 1)) == 0) return std::nullopt;
  return "warps must be a power of two from 1 to 32, not " + std::to_string(v);
}
std::optional<std::string> validStages(int64_t v) {
  if (v >= 1) return std::nullopt;
  return "stages must be at least 1, not " + std::to_string(v);
}
std::optional<std::string> validVector(int64_t v) {
  if (v >= 1 && (v & (v - 1)) == 0) return std::nullopt;
  return "vector must be a positive power of two, not " + std::to_string(v);
}

/// The (BM, BN) pair of a `block` argument.
std::optional<std::pair<int64_t, int64_t>> blockPair(CallSite &s, const ArgInfo *a) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!(t.is(K::Tuple) || t.is(K::List)) || !t.lengthKnown || t.elems.size() != 2) {
    s.wrongKind(a, "a pair of ints (BM, BN)", "block");
    return std::nullopt;
  }
  auto bm = knobValue(s, t.elems[0], a->range, "block", validBlock);
  auto bn = knobValue(s, t.elems[1], a->range, "block", validBlock);
  if (!bm || !bn) return std::nullopt;
  return std::pair{*bm, *bn};
}

// Schedule(block=(BM, BN), k=BK, warps=4, stages=2, vector=None): a kernel schedule whose knobs
// BM, BN, BK, warps, stages (and vector) are compile-time ints: positive block sizes, warps a
// power of two up to 32, at least one stage (ScheduleKnob otherwise). Defaults as Triton's.
TypeRef ruleSchedule(CallSite &s) {
  if (!s.expect({"block", "k", "warps", "stages"}, 2, {"vector"})) return T::unknown();
  const ArgInfo *b = s.arg(0, "block"), *k = s.arg(1, "k"), *w = s.arg(2, "warps"), *st = s.arg(3, "stages"), *v = s.kwarg("vector");
  auto block = blockPair(s, b);
  std::optional<int64_t> bk, warps = 4, stages = 2, vec;
  bool ok = true;
  if (!isUnknown(k)) ok &= (bk = knobValue(s, k->type, k->range, "k", validBlock)).has_value();
  if (given(w) && !isUnknown(w)) ok &= (warps = knobValue(s, w->type, w->range, "warps", validWarps)).has_value();
  if (given(st) && !isUnknown(st)) ok &= (stages = knobValue(s, st->type, st->range, "stages", validStages)).has_value();
  if (given(v) && !isUnknown(v)) ok &= (vec = knobValue(s, v->type, v->range, "vector", validVector)).has_value();
  // A wrong warps, stages or vector was reported; the schedule keeps its default so that the
  // kernels using it are not also reported as missing their block sizes.
  if (!warps) warps = 4;
  if (!stages) stages = 2;
  (void)ok;
  if (!block || !bk) return T::unknown();
  std::vector<std::pair<std::string, Dim>> knobs = {
      {"BM", Dim::constant(block->first)}, {"BN", Dim::constant(block->second)}, {"BK", Dim::constant(*bk)},
      {"warps", Dim::constant(*warps)},    {"stages", Dim::constant(*stages)}};
  if (vec) knobs.push_back({"vector", Dim::constant(*vec)});
  return T::schedule(std::move(knobs));
}

/// A copy of the receiver schedule with some knobs replaced.
TypeRef withKnobs(const TypeRef &self, const std::vector<std::pair<std::string, int64_t>> &repl) {
  std::vector<std::pair<std::string, Dim>> knobs = self->knobs;
  for (auto &[name, v] : repl) {
    const std::string &n = name; // (clang 14 cannot capture structured bindings)
    auto it = std::find_if(knobs.begin(), knobs.end(), [&](auto &k) { return k.first == n; });
    if (it != knobs.end()) it->second = Dim::constant(v);
    else knobs.push_back({n, Dim::constant(v)});
  }
  return T::schedule(std::move(knobs));
}

// sched.with_block(bm, bn), with_k(k), with_warps(w), with_stages(s): a new Schedule with those
// knobs replaced (validated as by Schedule).
BuiltinRule scheduleWith(std::vector<std::string> params, std::vector<std::string> knobs,
                         std::optional<std::string> (*valid)(int64_t)) {
  return [params, knobs, valid](CallSite &s) -> TypeRef {
    if (!s.expect(params, params.size())) return T::unknown();
    if (isUnknown(s.self) || !s.self->is(K::Schedule)) return T::unknown();
    std::vector<std::pair<std::string, int64_t>> repl;
    bool ok = true;
    for (size_t i = 0; i < params.size(); ++i) {
      const ArgInfo *a = s.arg(i, params[i]);
      if (isUnknown(a)) { ok = false; continue; }
      auto v = knobValue(s, a->type, a->range, params[i], valid);
      if (v) repl.push_back({knobs[i], *v});
      else ok = false;
    }
    if (!ok) return T::unknown();
    return withKnobs(s.self, repl);
  };
}

} // namespace

void addScheduleBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  auto method = [&](TypeKind k, std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.method(k, std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // The checker reads schedules where they matter, in @kernel.schedule(...) at module level; no
  // stage after it computes with a Schedule value yet, so the checker refuses one in functions.
  const char *why = "a schedule is read at compile time, by @kernel.schedule(...) at module level; in a kernel, tile.context() gives its knobs";
  add("Schedule", Anywhere, ruleSchedule, "Schedule(block=(BM, BN), k=BK, warps=4, stages=2, *, vector=None) -> Schedule",
      "a kernel schedule: tile sizes, warps and pipeline stages", false)
      .example("Schedule(block=(64, 64), k=32)").notYet(Anywhere, why);
  method(K::Schedule, "with_block", Anywhere, scheduleWith({"bm", "bn"}, {"BM", "BN"}, validBlock),
      "s.with_block(bm, bn) -> Schedule", "the schedule with other block sizes", false)
      .example("Schedule(block=(64, 64), k=32).with_block(32, 32)").notYet(Anywhere, why);
  method(K::Schedule, "with_k", Anywhere, scheduleWith({"k"}, {"BK"}, validBlock), "s.with_k(k) -> Schedule",
      "the schedule with another reduction block size", false)
      .example("Schedule(block=(64, 64), k=32).with_k(16)").notYet(Anywhere, why);
  method(K::Schedule, "with_warps", Anywhere, scheduleWith({"warps"}, {"warps"}, validWarps), "s.with_warps(warps) -> Schedule",
      "the schedule with another number of warps", false)
      .example("Schedule(block=(64, 64), k=32).with_warps(8)").notYet(Anywhere, why);
  method(K::Schedule, "with_stages", Anywhere, scheduleWith({"stages"}, {"stages"}, validStages), "s.with_stages(stages) -> Schedule",
      "the schedule with another number of pipeline stages", false)
      .example("Schedule(block=(64, 64), k=32).with_stages(3)").notYet(Anywhere, why);
}

} // namespace tsr::sema::builtins
