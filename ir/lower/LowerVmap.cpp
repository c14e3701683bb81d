// Graph lowering: vmap(f, in_axes, out_axes) (spec 14, jax.vmap), lowered in place like the
// autodiff transforms. Each mapped tensor leaf is moved to have its mapped axis first, f is
// lowered inline on placeholders of one example's type, and ir/autodiff/Batching.h appends the
// batched form of the span's ops; the example ops are then dead. The checker has matched the
// axes to the arguments and compared the mapped sizes (E0609, E0610).
#include "ir/autodiff/Batching.h"
#include "ir/lower/Lowering.h"

namespace tsr::ir::lowering {

namespace {

/// Moves axis `from` of `v` to position `to` (a transpose; no op when equal).
Value *moveAxis(autodiff::Emitter &E, Value *v, size_t from, size_t to) {
  if (from == to) return v;
  std::vector<int64_t> perm;
  for (size_t i = 0; i < v->type.rank(); ++i) if (i != from) perm.push_back(static_cast<int64_t>(i));
  perm.insert(perm.begin() + static_cast<std::ptrdiff_t>(to), static_cast<int64_t>(from));
  return E.op(OpKind::Transpose, {v}, {{"perm", perm}});
}

struct VmapLowering {
  Lowering &L;
  Graph &g;
  SourceRange at;
  std::vector<Value *> placeholders, batched;
  std::optional<Dim> B;

  autodiff::Emitter emitter() { return autodiff::Emitter(g, L.loc(at)); }

  int64_t specAxis(const LVRef &spec) {
    if (spec->kind != LV::K::Int || !spec->i.constantValue()) L.unsupported("vmap axes that are not ints or None", at);
    return *spec->i.constantValue();
  }

  /// `v` with the leaves that `spec` maps replaced by placeholders of one example's type.
  LVRef unmap(const LVRef &v, const LVRef &spec) {
    if (spec->kind == LV::K::None) return v;
    if (spec->kind == LV::K::Int) {
      switch (v->kind) {
      case LV::K::Tensor: {
        Value *x = v->v;
        int64_t r = static_cast<int64_t>(x->type.rank()), a = specAxis(spec);
        size_t n = static_cast<size_t>(a < 0 ? a + r : a);
        autodiff::Emitter E = emitter();
        Value *front = moveAxis(E, x, n, 0);
        if (!B) B = front->type.dims[0];
        Type ex = x->type;
        ex.dims.erase(ex.dims.begin() + static_cast<std::ptrdiff_t>(n));
        Value *p = E.zeros(ex);
        // A placeholder must be a value of its own: an alias when zeros of a 0-d type is the
        // constant itself (shared with nothing, but kept distinct from the span's constants).
        p = L.op(OpKind::Reshape, {p}, {{"shape", ex.dims}}, at);
        placeholders.push_back(p);
        batched.push_back(front);
        LV c = *v;
        c.v = p;
        return mk(c);
      }
      case LV::K::Tuple: case LV::K::List: {
        LV c = *v;
        for (auto &e : c.elems) e = unmap(e, spec);
        return mk(c);
      }
      case LV::K::Dict: {
        LV c = *v;
        for (auto &f : c.fields) f.second = unmap(f.second, spec);
        return mk(c);
      }
      case LV::K::None: return v;
      case LV::K::Key: L.unsupported("vmap over a random key (pass it with in_axes None: every example then draws the same values)", at);
      default: L.unsupported("vmap over a " + Lowering::kindName(v), at);
      }
    }
    LV c = *v;
    if (spec->kind == LV::K::Tuple || spec->kind == LV::K::List) {
      if (c.elems.size() != spec->elems.size()) L.unsupported("in_axes of another structure than the argument", at);
      for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = unmap(c.elems[i], spec->elems[i]);
    } else if (spec->kind == LV::K::Dict) {
      for (auto &f : c.fields)
        for (auto &s : spec->fields)
          if (s.first == f.first) f.second = unmap(f.second, s.second);
    }
    return mk(c);
  }

  /// The example result `v` with its tensors replaced by their batched values, the batch axis
  /// at `spec`'s position; leaves that do not vary are broadcast along it.
  LVRef remap(const LVRef &v, const LVRef &spec, const std::vector<Value *> &outs, const std::vector<Value *> &bouts, size_t &next) {
    switch (v->kind) {
    case LV::K::Tensor: case LV::K::Key: {
      Value *x = outs.at(next), *bx = bouts.at(next);
      ++next;
      if (spec->kind == LV::K::None) {
        if (bx)
          L.autodiffError(DiagKind::VmapAxes, {"`out_axes` None", "a result that varies along the mapped axis (" + bx->type.str() + ")"}, at);
        return v;
      }
      if (v->kind == LV::K::Key) L.unsupported("a random key as a mapped result of vmap", at);
      autodiff::Emitter E = emitter();
      if (!bx) {
        std::vector<Dim> one{Dim::constant(1)}, full{*B};
        one.insert(one.end(), x->type.dims.begin(), x->type.dims.end());
        full.insert(full.end(), x->type.dims.begin(), x->type.dims.end());
        bx = E.broadcast(E.reshape(x, one), full);
      }
      int64_t r = static_cast<int64_t>(bx->type.rank()), a = specAxis(spec);
      return tensor(moveAxis(E, bx, 0, static_cast<size_t>(a < 0 ? a + r : a)));
    }
    case LV::K::Int: case LV::K::Float: case LV::K::Bool: {
      if (spec->kind == LV::K::None) return v;
      DType dt = v->kind == LV::K::Float ? DType::F32 : v->kind == LV::K::Int ? DType::I64 : DType::Bool;
      Value *c = L.asTensor(v, dt, at);
      return tensor(emitter().broadcast(c, {*B}));
    }
    case LV::K::Tuple: case LV::K::List: {
      LV c = *v;
      for (size_t i = 0; i < c.elems.size(); ++i) {
        LVRef s = spec->kind == LV::K::Tuple || spec->kind == LV::K::List ? spec->elems.at(i) : spec;
        c.elems[i] = remap(c.elems[i], s, outs, bouts, next);
      }
      return mk(c);
    }
    case LV::K::Dict: {
      LV c = *v;
      for (auto &f : c.fields) {
        LVRef s = spec;
        if (spec->kind == LV::K::Dict)
          for (auto &q : spec->fields) if (q.first == f.first) s = q.second;
        f.second = remap(f.second, s, outs, bouts, next);
      }
      return mk(c);
    }
    default: return v;
    }
  }
};

} // namespace

LVRef Lowering::vmapCall(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
  LVRef inAxes = t.inAxes ? t.inAxes : integer(Dim::constant(0));
  LVRef outAxes = t.outAxes ? t.outAxes : integer(Dim::constant(0));
  VmapLowering V{*this, g_, at, {}, {}, std::nullopt};
  bool perArg = inAxes->kind == LV::K::Tuple || inAxes->kind == LV::K::List;
  if (perArg && inAxes->elems.size() != args.size()) unsupported("in_axes with another number of entries than the arguments", at);
  for (size_t i = 0; i < args.size(); ++i) args[i] = V.unmap(args[i], perArg ? inAxes->elems[i] : inAxes);
  if (!V.B) unsupported("vmap without a mapped argument", at);
  size_t begin = g_.ops.size();
  LVRef out = callValue(t.inner, args, kwargs, at);
  size_t end = g_.ops.size();
  std::vector<Value *> outs;
  tensorLeaves(out, outs, true);
  std::vector<Value *> bouts;
  try {
    bouts = autodiff::batchSpan(span(begin, end, V.placeholders, outs), V.batched, *V.B, &regions_, &constants_);
  } catch (autodiff::BatchError &e) {
    std::string where = locText(e.loc);
    unsupported("vmap of " + e.what + (where.empty() ? "" : " (at " + where + ")"), at);
  } catch (IRError &e) {
    throw CompileError{"internal: vmap: " + e.message, at};
  }
  size_t next = 0;
  return V.remap(out, outAxes, outs, bouts, next);
}

} // namespace tsr::ir::lowering
