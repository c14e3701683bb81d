// Kernel lowering: tile extents and shapes, views of tensor parameters (slices, indices, gathers),
// loads and stores through them, dots, reductions, and the causal mask and online softmax steps.
#include "ir/lower/kernel/KernelLowering.h"

namespace tsr::ir::kernel_lowering {

int64_t KernelLowering::extent(const KVRef &x, SourceRange at) {
  if (x->kind == KV::K::Int) {
    if (x->i <= 0) unsupported("a tile extent of " + std::to_string(x->i), at);
    return x->i;
  }
  if (x->kind == KV::K::Tile && x->known) {
    if (*x->known + x->off <= 0) unsupported("a tile extent of " + std::to_string(*x->known + x->off), at);
    return *x->known + x->off;
  }
  unsupported("a tile extent that is known only at run time", at);
}

std::vector<int64_t> KernelLowering::shapeArg(const KVRef &x, SourceRange at) {
  if (x->kind == KV::K::Tuple) {
    std::vector<int64_t> s;
    for (const KVRef &e : x->elems) s.push_back(extent(e, at));
    return s;
  }
  return {extent(x, at)};
}

DType KernelLowering::dtypeArg(const KVRef &x, DType dflt, SourceRange at) {
  if (!x || x->kind == KV::K::None) return dflt;
  if (x->kind == KV::K::DType) return x->dt;
  if (x->kind == KV::K::Str) if (auto d = dtypeFromName(x->s)) return *d;
  unsupported("a " + kindName(x) + " where a dtype belongs", at);
}

int64_t KernelLowering::constInt(const KVRef &x, const char *what, SourceRange at) {
  if (x && x->kind == KV::K::Int) return x->i;
  if (x && x->kind == KV::K::Bool) return x->b;
  unsupported(std::string("a `") + what + "` known only at run time", at);
}

tile::Value *KernelLowering::dimOf(tile::Value *tensor, int64_t axis, SourceRange at) {
  auto key = std::make_pair(tensor, axis);
  auto it = dims_.find(key);
  if (it != dims_.end()) return it->second;
  return dims_[key] = entryOp(TOp::TensorDim, {tensor}, {{"axis", axis}}, at);
}

tile::Value *KernelLowering::strideOf(tile::Value *tensor, int64_t axis, SourceRange at) {
  auto key = std::make_pair(tensor, axis);
  auto it = strides_.find(key);
  if (it != strides_.end()) return it->second;
  return strides_[key] = entryOp(TOp::TensorStride, {tensor}, {{"axis", axis}}, at);
}

KVRef KernelLowering::view(const KVRef &t, Subscript *s) {
  KV v;
  v.kind = KV::K::View;
  v.v = t->v;
  v.dt = t->dt;
  size_t rank = t->dims.size(), axis = 0;
  auto fullAxis = [&](size_t a, SourceRange at) {
    ViewAxis ax;
    ax.start = integer(0);
    auto c = t->dims[a].constantValue();
    if (!c) unsupported("a whole axis of a tensor whose size is known only at run time, as a tile extent", at);
    ax.size = *c;
    if (ax.size <= 0) unsupported("a view of an empty axis", at);
    return ax;
  };
  for (Expr *ie : s->indices) {
    if (ie->kind == Kind::EllipsisLit) {
      size_t rest = 0;
      for (Expr *o : s->indices) rest += o->kind != Kind::EllipsisLit && o->kind != Kind::NoneLit;
      while (axis < rank && rank - axis > rest - std::min(rest, v.axes.size())) v.axes.push_back(fullAxis(axis++, ie->range));
      continue;
    }
    if (ie->kind == Kind::NoneLit) unsupported("`None` in a view of a tensor", ie->range);
    if (axis >= rank) unsupported("a view with more indices than the tensor has axes", ie->range);
    if (auto *sl = dyn_cast<Slice>(ie)) {
      if (sl->step) {
        KVRef st = expr(sl->step);
        if (st->kind != KV::K::Int || st->i != 1) unsupported("a view with a step", sl->step->range);
      }
      if (!sl->lower && !sl->upper) { v.axes.push_back(fullAxis(axis++, ie->range)); continue; }
      KVRef lo = sl->lower ? expr(sl->lower) : integer(0);
      if (!sl->upper) unsupported("a view slice without an end (`a:`) whose extent is known only at run time", ie->range);
      KVRef hi = expr(sl->upper);
      KVRef n = binary(BinOp::Sub, hi, lo, ie->range);
      // A slice up to a size the launch fixes (`X[0:N]`) has that extent.
      if (n->kind == KV::K::Tile && n->known) n = integer(extent(n, ie->range));
      if (n->kind != KV::K::Int) unsupported("a view slice whose extent is known only at run time", ie->range);
      if (n->i <= 0) unsupported("a view slice of extent " + std::to_string(n->i), ie->range);
      ViewAxis ax;
      ax.start = lo;
      ax.size = n->i;
      v.axes.push_back(ax);
      ++axis;
      continue;
    }
    KVRef idx = expr(ie);
    ViewAxis ax;
    ax.start = idx;
    if (idx->kind == KV::K::Int || (idx->kind == KV::K::Tile && idx->v->type.isScalar())) {
      if (idx->kind == KV::K::Tile && !isInteger(idx->v->type.dtype)) unsupported("a view index that is not an integer", ie->range);
      ax.kind = ViewAxis::K::Index;
    } else if (idx->kind == KV::K::Tile && isInteger(idx->v->type.dtype)) {
      ax.kind = ViewAxis::K::Gather;
    } else {
      unsupported("a view index that is a " + kindName(idx), ie->range);
    }
    v.axes.push_back(ax);
    ++axis;
  }
  while (axis < rank) v.axes.push_back(fullAxis(axis++, s->range));
  bool gather = false, slice = false;
  for (auto &ax : v.axes) {
    gather |= ax.kind == ViewAxis::K::Gather;
    slice |= ax.kind == ViewAxis::K::Slice;
  }
  if (gather && slice) unsupported("a view that mixes tile indices with slices", s->range);
  return mk(v);
}

bool KernelLowering::isGather(const KV &v) {
  return std::any_of(v.axes.begin(), v.axes.end(), [](const ViewAxis &a) { return a.kind == ViewAxis::K::Gather; });
}

std::vector<int64_t> KernelLowering::boxSizes(const KV &v) {
  std::vector<int64_t> box;
  for (auto &ax : v.axes) box.push_back(ax.kind == ViewAxis::K::Slice ? ax.size : 0);
  return box;
}

std::vector<int64_t> KernelLowering::viewShape(const KV &v, SourceRange at) {
  if (isGather(v)) {
    std::vector<int64_t> shape;
    for (auto &ax : v.axes) shape = broadcastShapes(shape, shapeOf(ax.start), at);
    return shape;
  }
  std::vector<int64_t> s;
  for (auto &ax : v.axes) if (ax.kind == ViewAxis::K::Slice) s.push_back(ax.size);
  return s;
}

std::vector<tile::Value *> KernelLowering::starts(const KV &v, SourceRange at) {
  std::vector<tile::Value *> out;
  for (auto &ax : v.axes) out.push_back(convert(ax.start, DType::I64, {}, at));
  return out;
}

std::pair<tile::Value *, tile::Value *> KernelLowering::gatherOffsets(const KV &v, const std::vector<int64_t> &shape, SourceRange at) {
  tile::Value *offsets = nullptr, *mask = nullptr;
  for (size_t a = 0; a < v.axes.size(); ++a) {
    tile::Value *idx = convert(v.axes[a].start, DType::I64, shape, at);
    tile::Value *stride = broadcastTo(strideOf(v.v, static_cast<int64_t>(a), at), shape, at);
    tile::Value *term = op(TOp::Mul, {idx, stride}, {}, at);
    offsets = offsets ? op(TOp::Add, {offsets, term}, {}, at) : term;
    tile::Value *zero = constant(integer(0), DType::I64, shape, at);
    tile::Value *n = broadcastTo(dimOf(v.v, static_cast<int64_t>(a), at), shape, at);
    tile::Value *in = op(TOp::And, {op(TOp::Ge, {idx, zero}, {}, at), op(TOp::Lt, {idx, n}, {}, at)}, {}, at);
    mask = mask ? op(TOp::And, {mask, in}, {}, at) : in;
  }
  return {offsets, mask};
}

tile::Value *KernelLowering::maskArg(const KVRef &m, const std::vector<int64_t> &shape, SourceRange at) {
  if (!m || m->kind == KV::K::None) return nullptr;
  if (m->kind == KV::K::Bool && m->b) return nullptr;
  if (!(m->kind == KV::K::Bool || (m->kind == KV::K::Tile && m->v->type.dtype == DType::Bool)))
    unsupported("a mask that is not a bool tile", at);
  return convert(m, DType::Bool, shape, at);
}

KVRef KernelLowering::load(const KVRef &vw, const KVRef &other, const KVRef &mask, SourceRange at) {
  if (vw->kind != KV::K::View) unsupported("tile.load of a " + kindName(vw) + " (a view of a kernel's tensor belongs there)", at);
  const KV &v = *vw;
  auto shape = viewShape(v, at);
  std::vector<Attr> attrs;
  if (other && other->kind != KV::K::None) {
    if (!isNumber(other)) unsupported("an `other=` known only at run time", at);
    double o = other->kind == KV::K::Float ? other->f : other->kind == KV::K::Int ? double(other->i) : double(other->b);
    if (isFloat(v.dt)) attrs.push_back({"other", o});
    else {
      if (!std::isfinite(o)) unsupported("a non-finite `other=` for an integer tensor", at);
      attrs.push_back({"other", static_cast<int64_t>(o)});
    }
  }
  tile::Value *m = maskArg(mask, shape, at);
  checkIndices(v, shape, m, "load", at);
  if (isGather(v)) {
    auto [offsets, inBounds] = gatherOffsets(v, shape, at);
    tile::Value *all = m ? op(TOp::And, {inBounds, m}, {}, at) : inBounds;
    return tileOf(op(TOp::Load, {v.v, offsets, all}, attrs, at));
  }
  std::vector<tile::Value *> ops{v.v};
  for (tile::Value *s : starts(v, at)) ops.push_back(s);
  attrs.insert(attrs.begin(), {"box", boxSizes(v)});
  if (m) {
    ops.push_back(m);
    attrs.push_back({"masked", true});
  }
  return tileOf(op(TOp::LoadBox, ops, attrs, at));
}

void KernelLowering::store(TOp boxKind, TOp offKind, const KVRef &vw, const KVRef &val, const KVRef &mask, SourceRange at) {
  if (vw->kind != KV::K::View) unsupported("a store into a " + kindName(vw) + " (a view of a kernel's tensor belongs there)", at);
  const KV &v = *vw;
  auto shape = viewShape(v, at);
  if (!isNumber(val) && !isRuntime(val)) unsupported("storing a " + kindName(val), at);
  tile::Value *x = convert(val, v.dt, shape, at);
  tile::Value *m = maskArg(mask, shape, at);
  checkIndices(v, shape, m, offKind == TOp::AtomicAdd ? "atomic_add" : "store", at);
  if (isGather(v)) {
    auto [offsets, inBounds] = gatherOffsets(v, shape, at);
    tile::Value *all = m ? op(TOp::And, {inBounds, m}, {}, at) : inBounds;
    f_.add(cur_, offKind, {v.v, offsets, x, all}, {}, loc(at));
    return;
  }
  std::vector<tile::Value *> ops{v.v};
  for (tile::Value *s : starts(v, at)) ops.push_back(s);
  ops.push_back(x);
  std::vector<Attr> attrs{{"box", boxSizes(v)}};
  if (m) {
    ops.push_back(m);
    attrs.push_back({"masked", true});
  }
  op(boxKind, ops, attrs, at);
}

tile::Value *KernelLowering::tileValue(const KVRef &x, const char *what, SourceRange at) {
  if (x->kind != KV::K::Tile) unsupported(std::string("a ") + kindName(x) + " as `" + what + "` (a tile belongs there)", at);
  return value(x, at);
}

KVRef KernelLowering::dot(const KVRef &a, const KVRef &b, const KVRef &acc, SourceRange at) {
  tile::Value *x = tileValue(a, "a", at), *y = tileValue(b, "b", at);
  if (x->type.dtype != y->type.dtype) {
    auto p = promote(x->type.dtype, y->type.dtype);
    if (!p) unsupported("a product of " + x->type.str() + " and " + y->type.str(), at);
    x = castTo(x, *p, at);
    y = castTo(y, *p, at);
  }
  if (!acc || acc->kind == KV::K::None) return tileOf(op(TOp::Dot, {x, y}, {}, at));
  tile::Value *c = tileValue(acc, "acc", at);
  return tileOf(op(TOp::Dot, {x, y, c}, {}, at));
}

KVRef KernelLowering::reduce(TOp k, const KVRef &x, int64_t axis, SourceRange at) {
  tile::Value *v = tileValue(x, "x", at);
  int64_t r = static_cast<int64_t>(v->type.shape.size());
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) unsupported("a reduction over an axis the tile does not have", at);
  return tileOf(op(k, {v}, {{"axis", axis}}, at));
}

tile::Value *KernelLowering::indexAlong(const std::vector<int64_t> &shape, size_t axis, const KVRef &start, SourceRange at) {
  tile::Value *r = op(TOp::Arange, {}, {{"n", shape[axis]}, dtypeAttr(DType::I64)}, at);
  if (!(start->kind == KV::K::Int && start->i == 0)) r = op(TOp::Add, {r, convert(start, DType::I64, {shape[axis]}, at)}, {}, at);
  std::vector<int64_t> s(shape.size(), 1);
  s[axis] = shape[axis];
  return broadcastTo(op(TOp::Reshape, {r}, {{"shape", s}}, at), shape, at);
}

KVRef KernelLowering::maskCausal(const KVRef &s, const KVRef &row0, const KVRef &col0, SourceRange at) {
  tile::Value *x = tileValue(s, "S", at);
  if (x->type.shape.size() != 2) unsupported("tile.mask_causal of a tile that is not 2-d", at);
  auto shape = x->type.shape;
  tile::Value *rows = indexAlong(shape, 0, row0, at), *cols = indexAlong(shape, 1, col0, at);
  tile::Value *keep = op(TOp::Le, {cols, rows}, {}, at);
  tile::Value *ninf = constant(floating(-INFINITY), x->type.dtype, shape, at);
  return tileOf(op(TOp::Select, {keep, x, ninf}, {}, at));
}

KVRef KernelLowering::softmaxOnline(const KVRef &s, const KVRef &m, const KVRef &l, SourceRange at) {
  tile::Value *x = tileValue(s, "S", at);
  if (x->type.shape.size() != 2) unsupported("tile.softmax_online of a tile that is not 2-d", at);
  DType sd = x->type.dtype;
  x = castTo(x, DType::F32, at);
  auto shape = x->type.shape;
  std::vector<int64_t> rows{shape[0]};
  tile::Value *mv = convert(m, DType::F32, rows, at), *lv = convert(l, DType::F32, rows, at);
  tile::Value *mNew = op(TOp::Max, {mv, op(TOp::ReduceMax, {x}, {{"axis", int64_t(1)}}, at)}, {}, at);
  tile::Value *mCol = broadcastTo(op(TOp::ExpandDims, {mNew}, {{"axis", int64_t(1)}}, at), shape, at);
  tile::Value *p = op(TOp::Exp, {op(TOp::Sub, {x, mCol}, {}, at)}, {}, at);
  tile::Value *alpha = op(TOp::Exp, {op(TOp::Sub, {mv, mNew}, {}, at)}, {}, at);
  tile::Value *lNew = op(TOp::Add, {op(TOp::Mul, {alpha, lv}, {}, at), op(TOp::ReduceSum, {p}, {{"axis", int64_t(1)}}, at)}, {}, at);
  return tuple({tileOf(castTo(p, sd, at)), tileOf(mNew), tileOf(lNew), tileOf(alpha)});
}

} // namespace tsr::ir::kernel_lowering
