// The shared building blocks of the step lowerings (TileBuilder.h).
#include "ir/schedule/TileBuilder.h"

#include <cstdlib>

namespace tsr::ir::schedule::build {

int64_t bucket(int64_t x, std::initializer_list<int64_t> levels) {
  int64_t last = 1;
  for (int64_t l : levels) {
    if (x <= l) return l;
    last = l;
  }
  return last;
}

std::pair<int64_t, int64_t> gpuTile2d(int64_t rows, int64_t cols, const TileTarget &t) {
  const int64_t T = t.threads();
  const int64_t br = rows <= 1 ? 1 : bucket(rows, {8, 32, T});
  const int64_t bc = std::min(bucket(cols, {8, 32, 128}), std::max<int64_t>(8, gpuTileElems(t) / br));
  return {br, bc};
}

int64_t gpuWideTileElems(const TileTarget &t) {
  static const int64_t n = [] {
    const char *e = std::getenv("TSR_WIDE_TILE_ELEMS");
    const int64_t v = e ? std::atoll(e) : 0;
    return v > 0 ? v : int64_t(16);
  }();
  return n * int64_t(t.threads());
}

std::pair<int64_t, int64_t> gpuTileWide(int64_t rows, int64_t cols, const TileTarget &t) {
  const int64_t E = gpuWideTileElems(t);
  int64_t bc = 0;
  for (int64_t c = E; c >= 128; c /= 2)
    if (cols % c == 0) {
      bc = c;
      break;
    }
  if (!bc) bc = std::min(E, bucket(cols, {8, 16, 32, 64, 128, 256, 512, 1024, E}));
  const int64_t br = rows <= 1 ? 1 : std::min(bucket(rows, {2, 4, 8, 16, 32, 64, 128}), std::max<int64_t>(1, E / bc));
  return {br, bc};
}

Policies roundingPolicies(const Policies &p) {
  Policies r;
  r.saturate = p.saturate;
  return r;
}

DType accumulatorOf(const Type &t) {
  if (t.policies.accum) return *t.policies.accum;
  if (isFloat(t.dtype) && (dtypeBits(t.dtype) <= 16 || t.dtype == DType::TF32)) return DType::F32;
  return t.dtype;
}

TV *convert(Builder &b, TV *x, DType from, DType to, const Policies &p) {
  if (from == to || reprOf(from) == to) return x;
  TV *y = b.cast(x, to, p);
  return b.cast(y, reprOf(to));
}

TV *roundTo(Builder &b, TV *x, DType t, const Policies &p) {
  if (reprOf(t) == t) return x;
  return b.cast(b.cast(x, t, p), reprOf(t));
}

TV *loadBox(Builder &b, TV *tensor, const Coords &c) {
  std::vector<TV *> ops{tensor};
  for (TV *s : c.start) ops.push_back(s);
  return b.op(TK::LoadBox, ops, {{"box", c.block}});
}

std::vector<bool> broadcastAxes(const Value *v, const std::vector<int64_t> &shape) {
  const size_t n = shape.size(), k = v->type.rank();
  std::vector<bool> r(n, false);
  for (size_t d = 0; d < n; ++d) {
    if (d + k < n) { r[d] = true; continue; }
    auto one = v->type.dims[d + k - n].constantValue();
    r[d] = one && *one == 1 && shape[d] != 1;
  }
  return r;
}

TV *loadBroadcast(Builder &b, TV *tensor, const Coords &c, const std::vector<bool> &bcast, bool widen) {
  Coords lc = c;
  bool shrunk = false;
  for (size_t d = 0; d < c.block.size(); ++d) {
    if (!bcast[d]) continue;
    lc.start[d] = b.i64(0);
    if (lc.block[d] > 1) { lc.block[d] = 1; shrunk = true; }
  }
  TV *t = loadBox(b, tensor, lc);
  return shrunk && widen ? b.broadcast(t, c.tileShape()) : t;
}

void storeBox(Builder &b, TV *tensor, const Coords &c, TV *value) {
  std::vector<TV *> ops{tensor};
  for (TV *s : c.start) ops.push_back(s);
  ops.push_back(value);
  b.f.addWithTypes(b.blk, TK::StoreBox, ops, {{"box", c.block}}, {}, b.loc);
}

TV *axisIndex(Builder &b, const Coords &c, size_t axis) {
  std::vector<int64_t> shape = c.tileShape();
  if (c.block[axis] == 0) return shape.empty() ? c.start[axis] : b.broadcast(c.start[axis], shape);
  TV *r = b.op(TK::Arange, {}, {{"n", c.block[axis]}, {"dtype", DTypeAttr{DType::I64, {}}}});
  r = b.bin(TK::Add, r, b.broadcast(c.start[axis], {c.block[axis]}));
  if (shape.size() == 2) {
    int p = c.tilePos(axis);
    r = b.op(TK::ExpandDims, {r}, {{"axis", int64_t(p == 0 ? 1 : 0)}});
    r = b.broadcast(r, shape);
  }
  return r;
}

void decompose(Builder &b, TV *p, const std::vector<int> &axes, TV *shapeOf, std::vector<TV *> &start) {
  for (size_t i = axes.size(); i-- > 0;) {
    if (i == 0) { start[axes[i]] = p; break; }
    TV *ext = b.dim(shapeOf, axes[i]);
    TV *q = b.bin(TK::Div, p, ext);
    start[axes[i]] = b.bin(TK::Sub, p, b.bin(TK::Mul, q, ext));
    p = q;
  }
}

void reportChecks(Builder &b, const std::vector<TV *> &checks, TV *inBounds, TV *err) {
  for (size_t i = 0; i < checks.size(); ++i) {
    TV *bad = b.bin(TK::And, checks[i], inBounds);
    TV *n = b.cast(bad, DType::I64);
    if (n->type.shape.size() > 1) n = b.op(TK::Reshape, {n}, {{"shape", std::vector<int64_t>{n->type.numElements()}}});
    if (!n->type.shape.empty()) n = b.op(TK::ReduceSum, {n}, {{"axis", int64_t(0)}});
    b.f.addWithTypes(b.blk, TK::AtomicAddBox, {err, b.i64(int64_t(i)), n}, {{"box", std::vector<int64_t>{0}}}, {}, b.loc);
  }
}

TV *inBoundsMask(Builder &b, const Coords &c, const std::vector<TV *> &extents) {
  std::vector<int64_t> shape = c.tileShape();
  TV *m = b.constant(shape, DType::Bool, true);
  for (size_t d = 0; d < c.block.size(); ++d) {
    if (c.block[d] == 0) continue;
    TV *ext = shape.empty() ? extents[d] : b.broadcast(extents[d], shape);
    m = b.bin(TK::And, m, b.bin(TK::Lt, axisIndex(b, c, d), ext));
  }
  return m;
}

void setGrid(tile::Function &f, const std::array<GridAxis, 3> &g) {
  f.gridRank = !g[2].axes.empty() ? 3 : !g[1].axes.empty() ? 2 : 1;
}

Kernel newKernel(const std::string &name, const TileTarget &t) {
  Kernel k;
  k.fn = std::make_unique<tile::Function>(name);
  if (t.gpuTarget()) k.fn->config.push_back({"warps", int64_t(t.warps)});
  return k;
}

std::string joinInts(const std::vector<int64_t> &v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

Kernel fitShared(const TileTarget &t, std::vector<int64_t> tiles,
                 const std::function<Kernel(const std::vector<int64_t> &)> &build) {
  if (t.gpuTarget() && !t.measureShared) throw tile::TileError{"a GPU TileTarget without measureShared"};
  std::string first;        // the first candidate, named in an error
  bool anyAvailable = false; // whether some candidate measured a size (not kUnavailable)
  for (;;) {
    Kernel k = build(tiles);
    if (!t.gpuTarget()) return k;
    const int64_t bytes = t.measureShared(*k.fn);
    if (bytes <= t.sharedBytes) return k;
    if (first.empty()) first = k.fn->name + " (tiles " + joinInts(tiles) + ")";
    anyAvailable = anyAvailable || bytes != TileTarget::kUnavailable;
    auto big = tiles.end();
    for (auto it = tiles.begin(); it != tiles.end(); ++it)
      if (*it > 1 && (big == tiles.end() || *it >= *big)) big = it;
    if (big == tiles.end() && !anyAvailable) throw tile::TileError{"program " + first + " " + t.unavailable};
    if (big == tiles.end())
      throw tile::TileError{"program " + k.fn->name + " needs " + std::to_string(bytes) +
                            " bytes of shared memory with 1-element tiles; the budget is " + std::to_string(t.sharedBytes)};
    *big /= 2;
  }
}

std::vector<int64_t> outputTiles(const std::vector<int64_t> &shape, const TileTarget &t) {
  const size_t n = shape.size();
  if (n == 0) return {1, 1};
  if (t.gpuTarget()) {
    if (n == 1) return {1, gpuTile1d(shape[0], t)};
    auto [br, bc] = gpuTileWide(shape[n - 2], shape[n - 1], t);
    return {br, bc};
  }
  // CPU: BR * BC about kTileElems.
  if (n == 1) return {1, bucket(shape[0], {128, 1024, kTileElems})};
  const int64_t bc = wideBucket(shape[n - 1]);
  return {rowBucket(shape[n - 2], kTileElems / bc), bc};
}

std::string outputTilesText(size_t rank, int64_t BR, int64_t BC) {
  if (rank == 0) return "scalar";
  return rank == 1 ? "BC=" + std::to_string(BC) : "BR=" + std::to_string(BR) + " BC=" + std::to_string(BC);
}

Coords tileOverOutput(Builder &b, Kernel &k, tile::Function &f, const std::vector<int64_t> &shape, TV *out,
                      int64_t BR, int64_t BC) {
  const size_t n = shape.size();
  Coords c;
  c.start.assign(n, nullptr);
  c.block.assign(n, 0);
  if (n >= 1) {
    c.block[n - 1] = BC;
    c.start[n - 1] = b.bin(TK::Mul, b.pid(0), b.i64(BC));
    k.grid[0] = {{int(n - 1)}, BC};
  }
  if (n >= 2) {
    c.block[n - 2] = BR;
    c.start[n - 2] = b.bin(TK::Mul, b.pid(1), b.i64(BR));
    k.grid[1] = {{int(n - 2)}, BR};
  }
  if (n >= 3) {
    std::vector<int> lead;
    for (size_t d = 0; d + 2 < n; ++d) lead.push_back(int(d));
    k.grid[2] = {lead, 1};
    decompose(b, b.pid(2), lead, out, c.start);
  }
  setGrid(f, k.grid);
  return c;
}

} // namespace tsr::ir::schedule::build
