// The TCP key-value store of a distributed run's rendezvous (Store.h).
#include "runtime/dist/Store.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace tsr::rt::dist {

namespace {

bool sendAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool recvAll(int fd, void *p, size_t n) {
  char *c = static_cast<char *>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

bool sendStr(int fd, const std::string &s) {
  uint32_t n = uint32_t(s.size());
  return sendAll(fd, &n, 4) && sendAll(fd, s.data(), s.size());
}

bool recvStr(int fd, std::string &s) {
  uint32_t n = 0;
  if (!recvAll(fd, &n, 4)) return false;
  s.resize(n);
  return recvAll(fd, s.data(), n);
}

} // namespace

// Rank 0's server: a listening socket and one thread per client, over one map. It lives as long as
// the process (its threads are detached): a peer may still read the store while rank 0 finishes.
struct TcpStore::Server {
  int listenFd = -1;
  std::mutex mu;
  std::map<std::string, std::string> data;

  void serve(int fd) {
    for (;;) {
      char cmd = 0;
      if (!recvAll(fd, &cmd, 1)) break;
      if (cmd == 'S') {
        std::string k, v;
        if (!recvStr(fd, k) || !recvStr(fd, v)) break;
        { std::lock_guard<std::mutex> l(mu); data[k] = std::move(v); }
        char ok = 1;
        if (!sendAll(fd, &ok, 1)) break;
      } else if (cmd == 'G') {
        std::string k, v;
        if (!recvStr(fd, k)) break;
        char found = 0;
        {
          std::lock_guard<std::mutex> l(mu);
          if (auto it = data.find(k); it != data.end()) { found = 1; v = it->second; }
        }
        if (!sendAll(fd, &found, 1) || (found && !sendStr(fd, v))) break;
      } else if (cmd == 'C') {
        uint32_t n = 0;
        if (!recvAll(fd, &n, 4)) break;
        char all = 1;
        for (uint32_t i = 0; i < n; ++i) {
          std::string k;
          if (!recvStr(fd, k)) { ::close(fd); return; }
          std::lock_guard<std::mutex> l(mu);
          if (!data.count(k)) all = 0;
        }
        if (!sendAll(fd, &all, 1)) break;
      } else {
        break;
      }
    }
    ::close(fd);
  }
};

TcpStore::TcpStore(const std::string &host, int port, bool serve, std::chrono::milliseconds timeout)
    : timeout_(timeout), where_(host + ":" + std::to_string(port)) {
  if (serve) {
    auto *s = new Server(); // lives until the process exits (see Server)
    s->listenFd = ::socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = s->listenFd >= 0;
    if (!v6) s->listenFd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s->listenFd < 0) throw DistError("the rendezvous store: socket(): " + std::string(std::strerror(errno)));
    int one = 1;
    ::setsockopt(s->listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      int zero = 0;
      ::setsockopt(s->listenFd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(uint16_t(port));
      rc = ::bind(s->listenFd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(uint16_t(port));
      rc = ::bind(s->listenFd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(s->listenFd, 1024) != 0)
      throw DistError("the rendezvous store cannot listen on port " + std::to_string(port) + " (MASTER_PORT): " + std::strerror(errno));
    int lfd = s->listenFd;
    std::thread([s, lfd] {
      for (;;) {
        int c = ::accept(lfd, nullptr, nullptr);
        if (c < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          return;
        }
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        std::thread([s, c] { s->serve(c); }).detach();
      }
    }).detach();
  }
  // Connect, retrying while the server is not up yet.
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::string last = "no attempt";
  for (;;) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) throw DistError("the rendezvous store: MASTER_ADDR " + host + ": " + ::gai_strerror(gai));
    for (addrinfo *a = res; a && fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
      } else {
        last = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (fd_ >= 0) break;
    if (std::chrono::steady_clock::now() > deadline)
      throw DistError("the rendezvous store at " + where_ + " (MASTER_ADDR:MASTER_PORT) did not answer within " +
                      std::to_string(timeout_.count() / 1000) + " s (" + last + "); is rank 0 running?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStore::set(const std::string &key, const std::vector<char> &value) {
  char cmd = 'S', ok = 0;
  if (!sendAll(fd_, &cmd, 1) || !sendStr(fd_, key) || !sendStr(fd_, std::string(value.begin(), value.end())) || !recvAll(fd_, &ok, 1))
    throw DistError("the rendezvous store at " + where_ + " closed the connection (rank 0 has ended?) setting `" + key + "`");
}

bool TcpStore::check(const std::vector<std::string> &keys) {
  char cmd = 'C', all = 0;
  uint32_t n = uint32_t(keys.size());
  bool ok = sendAll(fd_, &cmd, 1) && sendAll(fd_, &n, 4);
  for (auto &k : keys) ok = ok && sendStr(fd_, k);
  if (!ok || !recvAll(fd_, &all, 1))
    throw DistError("the rendezvous store at " + where_ + " closed the connection (rank 0 has ended?)");
  return all != 0;
}

std::vector<char> TcpStore::get(const std::string &key) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    char cmd = 'G', found = 0;
    if (!sendAll(fd_, &cmd, 1) || !sendStr(fd_, key) || !recvAll(fd_, &found, 1))
      throw DistError("the rendezvous store at " + where_ + " closed the connection (rank 0 has ended?) reading `" + key + "`");
    if (found) {
      std::string v;
      if (!recvStr(fd_, v)) throw DistError("the rendezvous store at " + where_ + " closed the connection reading `" + key + "`");
      return std::vector<char>(v.begin(), v.end());
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw DistError("the rendezvous: `" + key + "` was not set within " + std::to_string(timeout_.count() / 1000) +
                      " s (a rank did not reach the rendezvous; TSR_DIST_TIMEOUT_S sets the limit)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void TcpStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::string names;
      for (auto &k : keys) names += (names.empty() ? "`" : ", `") + k + "`";
      throw DistError("the rendezvous: " + names + " not set within " + std::to_string(timeout.count() / 1000) +
                      " s (a rank did not reach the rendezvous; TSR_DIST_TIMEOUT_S sets the limit)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

} // namespace tsr::rt::dist
