// Kernel lowering in debug mode (support/RunModes.h): the index checks of loads and stores.
//
// A view's slices are masked at the tensor's bounds by the language (a partial last tile reads
// `other`), so they are never wrong. An index is: `x[i, k0:k0 + BK]` with `i` outside its axis, or
// a gather `x[idx]` whose index tile holds one outside it, would read `other` or drop the store
// without a word. In debug mode each such axis gets a check in the Tile IR itself, so that every
// target compiles it (the host JIT and NVPTX alike) and the program's text, which keys the caches
// of compiled code, differs from the unchecked program's:
//
//   bad   = (idx < 0) | (idx >= dim(x, axis))      [& the mask the kernel gave]
//   count = sum(bad), index = max(select(bad, idx, INT64_MIN))
//   if count > 0: record[3s] += count; record[3s+1] = index; record[3s+2] = dim(x, axis)
//
// `record` is one more tensor parameter, `debug_record` (i64, 3 slots per check, zeroed by the
// launcher before the launch and read after it: exec/KernelLauncher.cpp), and `s` the check's
// number. The function's config attribute `debug_sites` describes the checks in order, one per
// `;`, as `ACCESS|TENSOR|AXIS`; the place is the location of the check's ops (the atomic_add at
// offset 3s), which the program's text, its key, leaves out: a bundle's runner, which lowers the
// kernel from sources at other paths, finds the same text.
#include "ir/lower/kernel/KernelLowering.h"

#include "support/RunModes.h"

#include <limits>

namespace tsr::ir::kernel_lowering {

tile::Value *KernelLowering::debugRecord() {
  if (!debugRecord_) debugRecord_ = f_.addParam("debug_record", tile::Type::tensor(1, DType::I64));
  return debugRecord_;
}

// The scalar sum (count) or max (index) of a tile, reduced axis by axis.
tile::Value *KernelLowering::reduceAll(TOp k, tile::Value *x, SourceRange at) {
  while (!x->type.shape.empty()) x = op(k, {x}, {{"axis", int64_t(0)}}, at);
  return x;
}

void KernelLowering::checkIndices(const KV &v, const std::vector<int64_t> &shape, tile::Value *mask, const char *access,
                                  SourceRange at) {
  if (!runModes().debug) return;
  const bool gather = isGather(v);
  for (size_t a = 0; a < v.axes.size(); ++a) {
    const ViewAxis &ax = v.axes[a];
    if (ax.kind == ViewAxis::K::Slice) continue;
    // A gather's index tiles broadcast to the view's shape; an index is one scalar.
    const std::vector<int64_t> s = gather ? shape : std::vector<int64_t>{};
    tile::Value *idx = convert(ax.start, DType::I64, s, at);
    tile::Value *dim = dimOf(v.v, static_cast<int64_t>(a), at);
    tile::Value *zero = constant(integer(0), DType::I64, s, at);
    tile::Value *bad = op(TOp::Or, {op(TOp::Lt, {idx, zero}, {}, at), op(TOp::Ge, {idx, broadcastTo(dim, s, at)}, {}, at)}, {}, at);
    if (mask) {
      // Elements the kernel masked off may have any index. A box's index serves every element
      // of the box: it counts when any of them is unmasked.
      tile::Value *m = gather ? mask : op(TOp::Gt, {reduceAll(TOp::ReduceMax, castTo(mask, DType::I64, at), at),
                                                    constant(integer(0), DType::I64, {}, at)}, {}, at);
      bad = op(TOp::And, {bad, m}, {}, at);
    }
    tile::Value *count = reduceAll(TOp::ReduceSum, castTo(bad, DType::I64, at), at);
    tile::Value *index = idx;
    if (!s.empty()) {
      tile::Value *lowest = constant(integer(std::numeric_limits<int64_t>::min()), DType::I64, s, at);
      index = reduceAll(TOp::ReduceMax, op(TOp::Select, {bad, idx, lowest}, {}, at), at);
    }
    tile::Value *hit = op(TOp::Gt, {count, constant(integer(0), DType::I64, {}, at)}, {}, at);
    const int64_t slot = 3 * static_cast<int64_t>(debugSites_.size());
    tile::Value *record = debugRecord();
    auto at_ = [&](int64_t i) { return constant(integer(slot + i), DType::I64, {}, at); };
    f_.add(cur_, TOp::AtomicAdd, {record, at_(0), count, hit}, {}, loc(at));
    f_.add(cur_, TOp::Store, {record, at_(1), index, hit}, {}, loc(at));
    f_.add(cur_, TOp::Store, {record, at_(2), dim, hit}, {}, loc(at));

    debugSites_.push_back(std::string(access) + "|" + v.v->name + "|" + std::to_string(a));
  }
}

void KernelLowering::finishDebugChecks() {
  if (debugSites_.empty()) return;
  std::string all;
  for (const std::string &s : debugSites_) all += (all.empty() ? "" : ";") + s;
  f_.config.push_back({"debug_sites", all});
}

} // namespace tsr::ir::kernel_lowering
