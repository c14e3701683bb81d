// Collectives on a GPU's tensors through NCCL (NcclSteps.h).
#include "exec/cuda/NcclSteps.h"

#include "runtime/dist/Nccl.h"

#include <cstdlib>

namespace tsr::exec {

namespace {
// The buffers of deferred collectives, kept until ncclJoin. Never destroyed: after an error
// between a deferred collective and its join, the process's exit must not free device memory
// after the driver's teardown.
std::vector<rt::Tensor> &held() {
  static auto *h = new std::vector<rt::Tensor>;
  return *h;
}
} // namespace

void ncclJoin(int device, void *computeStream) {
  rt::dist::nccl::joinCommStream(device, computeStream);
  held().clear();
}

bool ncclCollective(StepBackend &b, int device, void *computeStream, const ir::Op &op, const rt::Tensor &x, rt::Tensor &out) {
  namespace d = rt::dist;
  using ir::OpKind;
  if (d::world().size == 1) return false;
  if (const char *be = std::getenv("TSR_DIST_BACKEND"); be && std::string(be) == "gloo") return false;
  auto str = [&](const char *n) { const std::string *v = op.attrAs<std::string>(n); return v ? *v : std::string(); };
  auto num = [&](const char *n) { const int64_t *v = op.attrAs<int64_t>(n); return v ? *v : int64_t(0); };
  const std::string axes = str("axes");
  const d::Group g = d::groupOf(axes);
  if (g.size() == 1) return false;
  // As the Gloo path labels it (runtime/dist/Dist.cpp opLabel): `all_reduce over mesh axis dp (all_reduce %5)`.
  const std::string spelled(ir::opSpelling(op.kind));
  const std::string what = spelled + " over " + (axes.empty() ? std::string("every rank") : "mesh axis " + axes) + " (" + spelled + " %" +
                           std::to_string(op.result() ? op.result()->id : 0) + ")";
  const int64_t n = int64_t(g.size());
  std::vector<int64_t> shape = x.shape();
  // Parts along `dim` are contiguous blocks when every extent before it is 1.
  auto contiguousAlong = [&](int64_t dim) {
    const int64_t r = int64_t(shape.size());
    if (dim < 0) dim += r;
    if (dim < 0 || dim >= r) return int64_t(-1);
    for (int64_t i = 0; i < dim; ++i)
      if (shape[size_t(i)] != 1) return int64_t(-1);
    return dim;
  };
  int64_t dim = 0;
  switch (op.kind) {
  case OpKind::AllReduce: case OpKind::DistBroadcast: break;
  case OpKind::AllGather: case OpKind::ReduceScatter:
    if ((dim = contiguousAlong(num("dim"))) < 0) return false;
    break;
  case OpKind::AllToAll:
    if (num("split_dim") != num("concat_dim") || (dim = contiguousAlong(num("split_dim"))) < 0) return false;
    break;
  default: return false;
  }
  const size_t count = size_t(x.numel());
  auto reduction = [&] {
    auto r = d::reduceOpFromName(str("op"));
    if (!r) throw d::DistError(what + ": no reduction `" + str("op") + "`");
    return *r;
  };
  std::vector<int64_t> outShape = shape;
  if (op.kind == OpKind::AllGather) outShape[size_t(dim)] *= n;
  if (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllToAll) {
    if (shape[size_t(dim)] % n != 0)
      throw d::DistError(what + ": dimension " + std::to_string(dim) + " of " + rt::formatShape(shape) + " (" + std::to_string(shape[size_t(dim)]) +
                         ") does not divide among the group's " + std::to_string(n) + " ranks");
    if (op.kind == OpKind::ReduceScatter) outShape[size_t(dim)] /= n;
  }
  // After the shape checks: a part that does not divide is the program's error wherever NCCL is.
  if (!d::nccl::available())
    throw d::DistError(what + ": " + d::nccl::why() + " (TSR_DIST_BACKEND=gloo runs GPU collectives through Gloo on host copies instead)");
  out = b.allocate(outShape, x.dtype(), "a collective's result");
  const void *in = b.address(x, false, "a collective's operand");
  void *res = b.address(out, true, "a collective's result");
  const DType dt = x.dtype();
  // An all-reduce that data parallelism put inside the backward graph (exec/host/DataParallel.cpp,
  // attribute `overlap`): the compute stream goes on with the backward's later steps and waits
  // for it only where its result is read (ncclJoin, called by the executor). Its operand and
  // result stay referenced until then, so that neither buffer returns to the allocator while the
  // communication stream may still use it.
  const int64_t *overlap = op.attrAs<int64_t>("overlap");
  const bool defer = overlap && *overlap != 0;
  if (defer) {
    held().push_back(x);
    held().push_back(out);
  }
  d::nccl::onCommStream(device, computeStream, g, what, [&](void *comm) {
    switch (op.kind) {
    case OpKind::AllReduce: d::nccl::allReduce(g, device, in, res, count, dt, reduction(), comm, what); break;
    case OpKind::DistBroadcast: d::nccl::broadcast(g, device, in, res, count, dt, int(num("src")), comm, what); break;
    case OpKind::AllGather: d::nccl::allGather(g, device, in, res, count, dt, comm, what); break;
    case OpKind::ReduceScatter: d::nccl::reduceScatter(g, device, in, res, count / size_t(n), dt, reduction(), comm, what); break;
    case OpKind::AllToAll: d::nccl::allToAll(g, device, in, res, count / size_t(n), dt, comm, what); break;
    default: break;
    }
  }, defer);
  d::countCollective(spelled);
  return true;
}

} // namespace tsr::exec
