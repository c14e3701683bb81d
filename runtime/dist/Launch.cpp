// The launcher of `tsr run --devices N` (Launch.h).
#include "runtime/dist/Launch.h"

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <ostream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace tsr::rt::dist {

namespace {

std::vector<pid_t> *gChildren = nullptr;

void forwardSignal(int sig) {
  if (gChildren)
    for (pid_t p : *gChildren)
      if (p > 0) ::kill(p, sig);
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char *n = ::sigabbrev_np(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + (n ? std::string(" (SIG") + n + ")" : "");
  }
  return "ended";
}

} // namespace

bool launchedAsRank() {
  const char *r = std::getenv("RANK"), *w = std::getenv("WORLD_SIZE");
  return r && *r && w && *w;
}

int launchRanks(int n, const std::string &exe, const std::vector<std::string> &args, std::ostream &err) {
  const char *addrEnv = std::getenv("MASTER_ADDR"), *portEnv = std::getenv("MASTER_PORT");
  std::string addr = addrEnv && *addrEnv ? addrEnv : "127.0.0.1";
  std::string port = portEnv && *portEnv ? portEnv : std::to_string(freePort());
  const char *outEnv = std::getenv("TSR_DIST_OUTPUT");
  const bool allOutput = outEnv && std::string(outEnv) == "all";
  std::vector<pid_t> children(size_t(n), -1);
  gChildren = &children;
  struct sigaction sa{}, oldInt{}, oldTerm{};
  sa.sa_handler = forwardSignal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &oldInt);
  ::sigaction(SIGTERM, &sa, &oldTerm);
  std::vector<std::string> argvS;
  argvS.push_back(exe);
  for (auto &a : args) argvS.push_back(a);
  for (int r = 0; r < n; ++r) {
    pid_t p = ::fork();
    if (p < 0) {
      err << "tsr run: cannot start rank " << r << ": " << std::strerror(errno) << "\n";
      forwardSignal(SIGKILL);
      return 1;
    }
    if (p == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", addr.c_str(), 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      if (r != 0 && !allOutput) {
        int devnull = ::open("/dev/null", O_WRONLY);
        if (devnull >= 0) { ::dup2(devnull, 1); ::close(devnull); }
      }
      std::vector<char *> argv;
      for (auto &a : argvS) argv.push_back(const_cast<char *>(a.c_str()));
      argv.push_back(nullptr);
      ::execve(exe.c_str(), argv.data(), environ);
      std::fprintf(stderr, "tsr run: rank %d: cannot run %s: %s\n", r, exe.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    children[size_t(r)] = p;
  }
  int rc = 0, left = n;
  while (left > 0) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, 0);
    if (p < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (int r = 0; r < n; ++r)
      if (children[size_t(r)] == p) rank = r;
    if (rank < 0) continue;
    children[size_t(rank)] = -1;
    --left;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || rc != 0) continue;
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (left == 0) {
      err << "tsr run: rank " << rank << " of " << n << " (pid " << p << ") " << describeStatus(status) << "\n";
      break;
    }
    err << "tsr run: rank " << rank << " of " << n << " (pid " << p << ") " << describeStatus(status)
        << "; ending the other " << left << " rank" << (left == 1 ? "" : "s") << "\n";
    forwardSignal(SIGTERM);
    // Ranks that do not end within 5 s are killed.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (left > 0) {
      pid_t q = ::waitpid(-1, &status, WNOHANG);
      if (q > 0) {
        for (auto &c : children) if (c == q) { c = -1; --left; }
        continue;
      }
      if (q < 0 && errno != EINTR) { left = 0; break; }
      if (std::chrono::steady_clock::now() > deadline) {
        forwardSignal(SIGKILL);
        deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  gChildren = nullptr;
  ::sigaction(SIGINT, &oldInt, nullptr);
  ::sigaction(SIGTERM, &oldTerm, nullptr);
  return rc;
}

} // namespace tsr::rt::dist
