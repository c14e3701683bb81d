// The rendezvous of a distributed run (docs/distributed.md): a key-value store over TCP that rank
// 0 serves at MASTER_ADDR:MASTER_PORT and every rank (rank 0 included) reads and writes, as
// PyTorch's TCPStore does. Gloo has no TCP store of its own; runtime/dist/Gloo.cpp adapts this one
// to gloo::rendezvous::Store, and NCCL's unique id travels through it too.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tsr::rt::dist {

/// An error of the distributed runtime: the rendezvous, a collective, a peer that left. The
/// message says what, with which rank, and (for time-outs) how long it waited.
struct DistError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Protocol (one request, one reply, over one connection per client): a request is a byte 'S'
/// (set), 'G' (get: the value, or "absent" at once) or 'C' (check: are all these keys set), then
/// u32-length-prefixed strings; the client of get/wait polls until the key is there or the
/// time-out has passed, so the server never blocks on a key.
class TcpStore {
public:
  /// Connects to host:port, retrying until `timeout` (rank 0 starts the server first when
  /// `serve` is true: it listens on port on every interface).
  TcpStore(const std::string &host, int port, bool serve, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore &) = delete;
  TcpStore &operator=(const TcpStore &) = delete;

  void set(const std::string &key, const std::vector<char> &value);
  /// Waits for the key (up to the time-out: then DistError naming the key and the wait).
  std::vector<char> get(const std::string &key);
  void wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout);
  bool check(const std::vector<std::string> &keys);
  std::chrono::milliseconds timeout() const { return timeout_; }

private:
  struct Server;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::string where_;
};

} // namespace tsr::rt::dist
