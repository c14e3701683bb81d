// The ranks of a distributed run and their collectives (docs/distributed.md; spec 10). A run of N
// ranks is N processes (`tsr run --devices N` starts them, or an outer launcher such as torchrun
// does), each told its place by the environment as torchrun tells it: RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Without them the process is the only rank, and every
// collective is the identity (all_gather and reduce_scatter over one rank included).
//
// Collectives on host tensors go through Gloo's TCP transport (runtime/dist/Gloo.cpp), after a
// rendezvous through the TCP store of Store.h; those on CUDA tensors through NCCL (Nccl.h). Every
// collective waits at most `timeout()` (TSR_DIST_TIMEOUT_S, default 300 s), then throws DistError:
// a rank that died or never came makes the others fail, never hang.
#pragma once

#include "runtime/Tensor.h"
#include "runtime/dist/Store.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tsr::rt::dist {

/// This process's place in the run, read once from the environment. A malformed or
/// inconsistent variable (RANK >= WORLD_SIZE, a non-number) is a DistError naming it.
struct WorldInfo {
  int rank = 0, size = 1, localRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;
};
const WorldInfo &world();
/// How long a collective or the rendezvous may wait: TSR_DIST_TIMEOUT_S (seconds; default 300).
std::chrono::milliseconds timeout();

/// A device mesh (dist.mesh): named axes with extents, over the ranks in row-major order (rank =
/// the mesh coordinates' row-major index, as jax.sharding.Mesh over np.arange(n).reshape(shape)).
struct Mesh {
  std::vector<std::string> axes;
  std::vector<int64_t> shape;
  std::string str() const; // `("dp", "tp") (2, 2)`
};
/// Makes `m` the run's mesh, which collectives name axes of. Its size must be the world size:
/// else a DistError naming both.
void setMesh(const Mesh &m);
/// The run's mesh; null before dist.mesh ran.
const Mesh *currentMesh();

/// The ranks a collective over mesh axes `axes` spans (comma-separated names, "" for every rank):
/// those that share this rank's coordinates on the other axes, in the order of the named axes'
/// coordinates. An axis the mesh lacks, or a named axis without a mesh, is a DistError.
struct Group {
  std::vector<int> ranks; // world ranks
  int index = 0;          // this rank's position in `ranks`
  size_t size() const { return ranks.size(); }
};
Group groupOf(const std::string &axes);

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, Prod };
std::optional<ReduceOp> reduceOpFromName(const std::string &name);
const char *reduceOpName(ReduceOp op);

/// The collectives, on host tensors (any dtype; f32/f64/i32/i64 travel as themselves, the other
/// dtypes as f32 or i64 and back, exactly for every dtype narrower than those). Each returns a new
/// tensor; `what` names the operand in errors (the op and its source location).
/// all_reduce: every rank gets op over the group's x (mean: the sum divided by the group size;
/// integers: truncated).
Tensor allReduce(const Tensor &x, ReduceOp op, const std::string &axes, const std::string &what = "");
/// all_gather: the group's x concatenated along `dim` in group order.
Tensor allGather(const Tensor &x, const std::string &axes, int64_t dim, const std::string &what = "");
/// reduce_scatter: op over the group's x, then this rank's `index`-th of `size` equal parts along
/// `dim` (x.shape[dim] must divide: else a DistError naming the sizes).
Tensor reduceScatter(const Tensor &x, ReduceOp op, const std::string &axes, int64_t dim, const std::string &what = "");
/// broadcast: the x of the group's `src`-th rank, on every rank of the group.
Tensor broadcast(const Tensor &x, int64_t src, const std::string &axes, const std::string &what = "");
/// The sum of the group's x on its `dst`-th rank, zeros on the others (broadcast's transpose).
Tensor reduceTo(const Tensor &x, int64_t dst, const std::string &axes, const std::string &what = "");
/// all_to_all: x cut into `size` parts along split_dim, part j sent to the group's j-th rank; the
/// parts received concatenated along concat_dim in group order.
Tensor allToAll(const Tensor &x, int64_t splitDim, int64_t concatDim, const std::string &axes, const std::string &what = "");
/// Every rank of the run waits for the others.
void barrier();

/// The collectives this process has run, by op spelling ("all_reduce"), on every backend (Gloo
/// through ir::runCollective, NCCL through exec/cuda/NcclSteps.cpp): what `TSR_DIST_REPORT=1`
/// reports per graph call (exec/host/TensorParallel.cpp), so that tests count the all-reduces of
/// a forward and a backward pass.
void countCollective(const std::string &op);
int64_t collectivesRun();

/// The run's store (connected on first use; rank 0 serves it). Only when world().size > 1.
TcpStore &store();

/// Tensor helpers the collectives share with the NCCL path: parts of x along `dim` and their
/// concatenation (host tensors).
std::vector<Tensor> splitAlong(const Tensor &x, int64_t dim, int64_t parts);
Tensor concatAlong(const std::vector<Tensor> &parts, int64_t dim);

} // namespace tsr::rt::dist
