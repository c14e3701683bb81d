// The ranks of a distributed run, the mesh and its groups, and the collectives on host tensors
// through Gloo (Dist.h). Built without Gloo (TSR_HAVE_GLOO=0: libgloo-dev was not installed), a
// run of one rank still works and a run of several says what to install.
#include "runtime/dist/Dist.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>

#if TSR_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace tsr::rt::dist {

namespace {

int envInt(const char *name, int dflt) {
  const char *v = std::getenv(name);
  if (!v || !*v) return dflt;
  char *end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end || n < 0 || n > 1 << 20) throw DistError(std::string("the environment variable ") + name + "=" + v + " is not a rank count or index");
  return int(n);
}

std::mutex &mu() {
  static std::mutex m;
  return m;
}

std::optional<Mesh> &meshSlot() {
  static std::optional<Mesh> m;
  return m;
}

std::vector<std::string> splitAxes(const std::string &axes) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= axes.size() && !axes.empty()) {
    size_t c = axes.find(',', p);
    out.push_back(axes.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos) break;
    p = c + 1;
  }
  return out;
}

std::string opLabel(const char *op, const std::string &axes, const std::string &what) {
  std::string s = std::string(op) + " over " + (axes.empty() ? std::string("every rank") : "mesh axis " + axes);
  if (!what.empty()) s += " (" + what + ")";
  return s;
}

void checkDim(const Tensor &x, int64_t &dim, const char *op, const std::string &what) {
  int64_t r = x.ndim();
  if (dim < -r || dim >= r || r == 0)
    throw DistError(std::string(op) + (what.empty() ? "" : " (" + what + ")") + ": dim " + std::to_string(dim) +
                    " is out of range for a tensor of shape " + formatShape(x.shape()));
  if (dim < 0) dim += r;
}

} // namespace

const WorldInfo &world() {
  static const WorldInfo w = [] {
    WorldInfo i;
    i.size = envInt("WORLD_SIZE", 1);
    i.rank = envInt("RANK", 0);
    i.localRank = envInt("LOCAL_RANK", i.rank);
    if (i.size < 1) throw DistError("WORLD_SIZE=" + std::to_string(i.size) + ": a run has at least one rank");
    if (i.rank >= i.size) throw DistError("RANK=" + std::to_string(i.rank) + " is not below WORLD_SIZE=" + std::to_string(i.size));
    if (const char *a = std::getenv("MASTER_ADDR"); a && *a) i.masterAddr = a;
    i.masterPort = envInt("MASTER_PORT", 29500);
    return i;
  }();
  return w;
}

std::chrono::milliseconds timeout() {
  const char *v = std::getenv("TSR_DIST_TIMEOUT_S");
  double s = v && *v ? std::atof(v) : 300.0;
  if (!(s > 0)) s = 300.0;
  return std::chrono::milliseconds(int64_t(s * 1000));
}

std::string Mesh::str() const {
  std::string a = "(", s = "(";
  for (size_t i = 0; i < axes.size(); ++i) {
    a += (i ? ", \"" : "\"") + axes[i] + "\"";
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (axes.size() == 1) { a += ","; s += ","; }
  return a + ") " + s + ")";
}

void setMesh(const Mesh &m) {
  if (m.axes.size() != m.shape.size()) throw DistError("dist.mesh: " + std::to_string(m.axes.size()) + " axes but " + std::to_string(m.shape.size()) + " extents");
  int64_t n = 1;
  for (int64_t e : m.shape) n *= e;
  const WorldInfo &w = world();
  if (n != w.size)
    throw DistError("dist.mesh " + m.str() + " has " + std::to_string(n) + " devices, but the run has " + std::to_string(w.size) +
                    (w.size == 1 ? " (run it with `tsr run --devices " + std::to_string(n) + "`)" : " (WORLD_SIZE, from `tsr run --devices`)"));
  for (size_t i = 0; i < m.axes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (m.axes[i] == m.axes[j]) throw DistError("dist.mesh: the axis \"" + m.axes[i] + "\" is named twice");
  std::lock_guard<std::mutex> l(mu());
  meshSlot() = m;
}

const Mesh *currentMesh() {
  std::lock_guard<std::mutex> l(mu());
  return meshSlot() ? &*meshSlot() : nullptr;
}

Group groupOf(const std::string &axes) {
  const WorldInfo &w = world();
  Group g;
  std::vector<std::string> names = splitAxes(axes);
  if (names.empty()) {
    for (int r = 0; r < w.size; ++r) g.ranks.push_back(r);
    g.index = w.rank;
    return g;
  }
  const Mesh *m = currentMesh();
  if (!m) {
    // One rank without a mesh: every axis has extent 1 (a program written for a mesh runs alone).
    if (w.size == 1) { g.ranks = {0}; return g; }
    throw DistError("a collective over mesh axis " + axes + " before any dist.mesh(...) names the axes");
  }
  std::vector<size_t> picked;
  for (auto &n : names) {
    auto it = std::find(m->axes.begin(), m->axes.end(), n);
    if (it == m->axes.end()) throw DistError("the mesh " + m->str() + " has no axis \"" + n + "\"");
    picked.push_back(size_t(it - m->axes.begin()));
  }
  // This rank's coordinates; the group varies the picked axes (in the order named) and keeps the rest.
  const size_t k = m->shape.size();
  std::vector<int64_t> coord(k);
  for (int64_t r = w.rank, i = int64_t(k) - 1; i >= 0; --i) { coord[size_t(i)] = r % m->shape[size_t(i)]; r /= m->shape[size_t(i)]; }
  int64_t count = 1;
  for (size_t p : picked) count *= m->shape[p];
  for (int64_t j = 0; j < count; ++j) {
    std::vector<int64_t> c = coord;
    int64_t rem = j;
    for (size_t q = picked.size(); q-- > 0;) { c[picked[q]] = rem % m->shape[picked[q]]; rem /= m->shape[picked[q]]; }
    int64_t r = 0;
    for (size_t i = 0; i < k; ++i) r = r * m->shape[i] + c[i];
    if (r == w.rank) g.index = int(j);
    g.ranks.push_back(int(r));
  }
  return g;
}

std::optional<ReduceOp> reduceOpFromName(const std::string &n) {
  if (n == "sum") return ReduceOp::Sum;
  if (n == "mean") return ReduceOp::Mean;
  if (n == "max") return ReduceOp::Max;
  if (n == "min") return ReduceOp::Min;
  if (n == "prod") return ReduceOp::Prod;
  return std::nullopt;
}

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Mean: return "mean";
  case ReduceOp::Max: return "max";
  case ReduceOp::Min: return "min";
  case ReduceOp::Prod: return "prod";
  }
  return "?";
}

std::vector<Tensor> splitAlong(const Tensor &x, int64_t dim, int64_t parts) {
  const auto &s = x.shape();
  if (parts <= 0 || s[size_t(dim)] % parts != 0)
    throw DistError("cannot cut dimension " + std::to_string(dim) + " of " + formatShape(s) + " into " + std::to_string(parts) + " equal parts");
  int64_t outer = 1, inner = int64_t(x.itemsize());
  for (int64_t i = 0; i < dim; ++i) outer *= s[size_t(i)];
  for (size_t i = size_t(dim) + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t rows = s[size_t(dim)] / parts;
  std::vector<int64_t> ps = s;
  ps[size_t(dim)] = rows;
  const auto *src = static_cast<const char *>(x.data());
  std::vector<Tensor> out;
  for (int64_t p = 0; p < parts; ++p) {
    Tensor t = Tensor::empty(ps, x.dtype());
    auto *dst = static_cast<char *>(t.data());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * rows * inner, src + (o * s[size_t(dim)] + p * rows) * inner, size_t(rows * inner));
    out.push_back(std::move(t));
  }
  return out;
}

Tensor concatAlong(const std::vector<Tensor> &parts, int64_t dim) {
  std::vector<int64_t> s = parts.at(0).shape();
  int64_t total = 0;
  for (auto &p : parts) total += p.shape()[size_t(dim)];
  s[size_t(dim)] = total;
  Tensor out = Tensor::empty(s, parts[0].dtype());
  int64_t outer = 1, inner = int64_t(out.itemsize());
  for (int64_t i = 0; i < dim; ++i) outer *= s[size_t(i)];
  for (size_t i = size_t(dim) + 1; i < s.size(); ++i) inner *= s[i];
  auto *dst = static_cast<char *>(out.data());
  int64_t at = 0;
  for (auto &p : parts) {
    const int64_t rows = p.shape()[size_t(dim)];
    const auto *src = static_cast<const char *>(p.data());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + (o * total + at) * inner, src + o * rows * inner, size_t(rows * inner));
    at += rows;
  }
  return out;
}

// ---- Gloo -------------------------------------------------------------------------------------

#if TSR_HAVE_GLOO
namespace {

// Our TCP store as Gloo's rendezvous store.
class GlooStore : public gloo::rendezvous::Store {
public:
  explicit GlooStore(TcpStore &s) : s_(s) {}
  void set(const std::string &key, const std::vector<char> &data) override { s_.set(key, data); }
  std::vector<char> get(const std::string &key) override { return s_.get(key); }
  void wait(const std::vector<std::string> &keys) override { s_.wait(keys, s_.timeout()); }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &t) override { s_.wait(keys, t); }

private:
  TcpStore &s_;
};

struct Comm {
  std::shared_ptr<gloo::Context> ctx;
  uint32_t tag = 0;
};

std::shared_ptr<gloo::transport::Device> &device() {
  static std::shared_ptr<gloo::transport::Device> d = [] {
    gloo::transport::tcp::attr a;
    const WorldInfo &w = world();
    if (const char *h = std::getenv("TSR_GLOO_HOSTNAME"); h && *h) a.hostname = h;
    else if (w.masterAddr == "127.0.0.1" || w.masterAddr == "localhost" || w.masterAddr == "::1") a.hostname = w.masterAddr == "::1" ? "::1" : "127.0.0.1";
    else {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      a.hostname = host;
    }
    return gloo::transport::tcp::CreateDevice(a);
  }();
  return d;
}

// The context of a group, made at its first collective (every rank of the group reaches it: the
// program is the same on every rank) through the store under a prefix naming the group's ranks.
Comm &commFor(const Group &g) {
  static std::map<std::vector<int>, Comm> comms;
  static GlooStore gs(store());
  auto it = comms.find(g.ranks);
  if (it != comms.end()) return it->second;
  std::string prefix = "gloo/group";
  for (int r : g.ranks) prefix += "." + std::to_string(r);
  gloo::rendezvous::PrefixStore ps(prefix, gs);
  // Gloo's tcp pairs write without MSG_NOSIGNAL: a write to a peer that died would end this rank
  // with SIGPIPE (seen under load: exit -13) instead of the collective's error naming the peer.
  std::signal(SIGPIPE, SIG_IGN);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(g.index, int(g.size()));
  ctx->setTimeout(timeout());
  try {
    ctx->connectFullMesh(ps, device());
  } catch (const std::exception &e) {
    throw DistError(std::string("connecting the ranks ") + prefix.substr(11) + " (rank " + std::to_string(world().rank) + "): " + e.what());
  }
  Comm &c = comms[g.ranks];
  c.ctx = ctx;
  return c;
}

template <class T> gloo::AllreduceOptions::Func reduceFn(ReduceOp op) {
  switch (op) {
  case ReduceOp::Max: return [](void *c, const void *a, const void *b, size_t n) { gloo::max<T>(c, a, b, n); };
  case ReduceOp::Min: return [](void *c, const void *a, const void *b, size_t n) { gloo::min<T>(c, a, b, n); };
  case ReduceOp::Prod: return [](void *c, const void *a, const void *b, size_t n) { gloo::product<T>(c, a, b, n); };
  default: return [](void *c, const void *a, const void *b, size_t n) { gloo::sum<T>(c, a, b, n); };
  }
}

// The dtype a tensor travels as: f32, f64, i32, i64 as themselves; narrower floats as f32, the
// other integers and bool as i64.
DType wireDtype(DType d) {
  if (d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64) return d;
  return isFloat(d) ? DType::F32 : DType::I64;
}

template <class F> void withType(DType d, F &&f) {
  switch (d) {
  case DType::F32: f(float{}); break;
  case DType::F64: f(double{}); break;
  case DType::I32: f(int32_t{}); break;
  default: f(int64_t{}); break;
  }
}

[[noreturn]] void rethrow(const char *op, const std::string &axes, const std::string &what, const Group &g, const std::exception &e) {
  // A peer that vanished is most often the failure's cause: waiting a moment before failing lets
  // the launcher see that rank end first, and name it as the one that failed.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::string peers;
  for (int r : g.ranks) peers += (peers.empty() ? "" : ", ") + std::to_string(r);
  throw DistError(opLabel(op, axes, what) + " failed on rank " + std::to_string(world().rank) + " (group of ranks " + peers + "): " + e.what() +
                  " (a peer rank ended or did not reach this collective within " + std::to_string(timeout().count() / 1000) +
                  " s; TSR_DIST_TIMEOUT_S sets the limit)");
}

/// Runs `typed` (a generic lambda of a value of the C++ type) for wire dtype `wd`; a failure
/// other than the program's own (DistError) becomes the collective's error naming its peers.
template <class F>
void glooCollective(const char *op, const std::string &axes, const std::string &what, const Group &g, DType wd, F &&typed) {
  try {
    withType(wd, typed);
  } catch (const DistError &) {
    throw;
  } catch (const std::exception &e) {
    rethrow(op, axes, what, g, e);
  }
}

} // namespace
#endif

TcpStore &store() {
  static std::unique_ptr<TcpStore> s;
  static std::once_flag once;
  std::call_once(once, [] {
    const WorldInfo &w = world();
    s = std::make_unique<TcpStore>(w.masterAddr, w.masterPort, w.rank == 0, timeout());
  });
  return *s;
}

namespace {

[[noreturn]] void noGloo(const char *op) {
  throw DistError(std::string(op) + " between " + std::to_string(world().size) +
                  " ranks needs Gloo, and this tsr was built without it: install libgloo-dev "
                  "(`apt-get install libgloo-dev`, as tools/setup.sh does) and rebuild");
}

} // namespace

Tensor allReduce(const Tensor &x, ReduceOp op, const std::string &axes, const std::string &what) {
  Group g = groupOf(axes);
  if (g.size() == 1) return x.clone();
#if TSR_HAVE_GLOO
  DType wd = wireDtype(x.dtype());
  Tensor buf = wd == x.dtype() ? x.clone() : x.cast(wd);
  Comm &c = commFor(g);
  glooCollective("all_reduce", axes, what, g, wd, [&](auto t) {
    using T = decltype(t);
    gloo::AllreduceOptions o(c.ctx);
    o.setOutput(buf.data<T>(), size_t(buf.numel()));
    o.setReduceFunction(reduceFn<T>(op));
    o.setTag(c.tag++);
    o.setTimeout(timeout());
    gloo::allreduce(o);
    if (op == ReduceOp::Mean) {
      T *p = buf.data<T>();
      for (int64_t i = 0; i < buf.numel(); ++i) p[i] = T(p[i] / T(g.size()));
    }
  });
  return wd == x.dtype() ? buf : buf.cast(x.dtype());
#else
  (void)op; (void)what;
  noGloo("all_reduce");
#endif
}

Tensor allGather(const Tensor &x, const std::string &axes, int64_t dim, const std::string &what) {
  checkDim(x, dim, "all_gather", what);
  Group g = groupOf(axes);
  if (g.size() == 1) return x.clone();
#if TSR_HAVE_GLOO
  DType wd = wireDtype(x.dtype());
  Tensor in = wd == x.dtype() ? x : x.cast(wd);
  std::vector<int64_t> os = x.shape();
  os.insert(os.begin(), int64_t(g.size()));
  Tensor all = Tensor::empty(os, wd);
  Comm &c = commFor(g);
  glooCollective("all_gather", axes, what, g, wd, [&](auto t) {
    using T = decltype(t);
    gloo::AllgatherOptions o(c.ctx);
    o.setInput(const_cast<T *>(in.data<T>()), size_t(in.numel()));
    o.setOutput(all.data<T>(), size_t(all.numel()));
    o.setTag(c.tag++);
    o.setTimeout(timeout());
    gloo::allgather(o);
  });
  std::vector<Tensor> parts;
  for (Tensor &p : splitAlong(all, 0, int64_t(g.size()))) parts.push_back(p.reshape(x.shape()));
  Tensor out = concatAlong(parts, dim);
  return wd == x.dtype() ? out : out.cast(x.dtype());
#else
  (void)what;
  noGloo("all_gather");
#endif
}

Tensor reduceScatter(const Tensor &x, ReduceOp op, const std::string &axes, int64_t dim, const std::string &what) {
  checkDim(x, dim, "reduce_scatter", what);
  Group g = groupOf(axes);
  if (x.shape()[size_t(dim)] % int64_t(g.size()) != 0)
    throw DistError(opLabel("reduce_scatter", axes, what) + ": dimension " + std::to_string(dim) + " of " + formatShape(x.shape()) +
                    " (" + std::to_string(x.shape()[size_t(dim)]) + ") does not divide among the group's " + std::to_string(g.size()) + " ranks");
  if (g.size() == 1) return x.clone();
  // Gloo's reduce-scatter is an algorithm object of the older API; an all-reduce and this rank's
  // part move twice the bytes of a ring reduce-scatter, which the CPU path accepts (docs).
  Tensor r = allReduce(x, op, axes, what);
  return splitAlong(r, dim, int64_t(g.size()))[size_t(g.index)];
}

Tensor broadcast(const Tensor &x, int64_t src, const std::string &axes, const std::string &what) {
  Group g = groupOf(axes);
  if (src < 0 || src >= int64_t(g.size()))
    throw DistError(opLabel("broadcast", axes, what) + ": src " + std::to_string(src) + " is not a rank of the group's " + std::to_string(g.size()));
  if (g.size() == 1) return x.clone();
#if TSR_HAVE_GLOO
  DType wd = wireDtype(x.dtype());
  Tensor buf = wd == x.dtype() ? x.clone() : x.cast(wd);
  Comm &c = commFor(g);
  glooCollective("broadcast", axes, what, g, wd, [&](auto t) {
    using T = decltype(t);
    gloo::BroadcastOptions o(c.ctx);
    o.setOutput(buf.data<T>(), size_t(buf.numel()));
    o.setRoot(int(src));
    o.setTag(c.tag++);
    o.setTimeout(timeout());
    gloo::broadcast(o);
  });
  return wd == x.dtype() ? buf : buf.cast(x.dtype());
#else
  (void)what;
  noGloo("broadcast");
#endif
}

Tensor reduceTo(const Tensor &x, int64_t dst, const std::string &axes, const std::string &what) {
  Group g = groupOf(axes);
  if (dst < 0 || dst >= int64_t(g.size()))
    throw DistError(opLabel("reduce", axes, what) + ": rank " + std::to_string(dst) + " is not a rank of the group's " + std::to_string(g.size()));
  Tensor r = allReduce(x, ReduceOp::Sum, axes, what);
  if (g.index != dst) return Tensor::zeros(x.shape(), x.dtype());
  return r;
}

Tensor allToAll(const Tensor &x, int64_t splitDim, int64_t concatDim, const std::string &axes, const std::string &what) {
  checkDim(x, splitDim, "all_to_all", what);
  checkDim(x, concatDim, "all_to_all", what);
  Group g = groupOf(axes);
  const int64_t n = int64_t(g.size());
  if (x.shape()[size_t(splitDim)] % n != 0)
    throw DistError(opLabel("all_to_all", axes, what) + ": split_dim " + std::to_string(splitDim) + " of " + formatShape(x.shape()) + " (" +
                    std::to_string(x.shape()[size_t(splitDim)]) + ") does not divide among the group's " + std::to_string(n) + " ranks");
  if (n == 1) return x.clone();
#if TSR_HAVE_GLOO
  DType wd = wireDtype(x.dtype());
  Tensor in = wd == x.dtype() ? x : x.cast(wd);
  std::vector<Tensor> parts = splitAlong(in, splitDim, n);
  const std::vector<int64_t> ps = parts[0].shape();
  std::vector<Tensor> flat;
  for (auto &p : parts) flat.push_back(p.reshape({1, p.numel()}));
  Tensor send = concatAlong(flat, 0), recv = Tensor::empty(send.shape(), wd);
  Comm &c = commFor(g);
  glooCollective("all_to_all", axes, what, g, wd, [&](auto t) {
    using T = decltype(t);
    gloo::AlltoallOptions o(c.ctx);
    o.setInput(send.data<T>(), size_t(send.numel()));
    o.setOutput(recv.data<T>(), size_t(recv.numel()));
    o.setTag(c.tag++);
    o.setTimeout(timeout());
    gloo::alltoall(o);
  });
  std::vector<Tensor> got;
  for (Tensor &p : splitAlong(recv, 0, n)) got.push_back(p.reshape(ps));
  Tensor out = concatAlong(got, concatDim);
  return wd == x.dtype() ? out : out.cast(x.dtype());
#else
  (void)what;
  noGloo("all_to_all");
#endif
}

namespace {
std::atomic<int64_t> collectiveTotal{0};
}
void countCollective(const std::string &) { ++collectiveTotal; }
int64_t collectivesRun() { return collectiveTotal.load(); }

void barrier() {
  Group g = groupOf("");
  if (g.size() == 1) return;
#if TSR_HAVE_GLOO
  Comm &c = commFor(g);
  try {
    gloo::BarrierOptions o(c.ctx);
    o.setTag(c.tag++);
    o.setTimeout(timeout());
    gloo::barrier(o);
  } catch (const std::exception &e) {
    rethrow("barrier", "", "", g, e);
  }
#else
  noGloo("barrier");
#endif
}

} // namespace tsr::rt::dist
