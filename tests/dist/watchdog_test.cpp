// The NCCL watchdog's decision (runtime/dist/Nccl.h watchdogVerdict) driven with a fake clock: a
// collective is waited for until TSR_DIST_TIMEOUT_S, then named with its rank and group; a finished
// one never fails; an asynchronous NCCL error or a failed stream fails at once. --negative flips
// one expectation (a collective 1 ms past the limit expected to wait on), which must fail.
#include "runtime/dist/Nccl.h"

#include <cstdio>
#include <cstring>
#include <string>

using namespace std::chrono;
namespace n = tsr::rt::dist::nccl;

static int passed = 0, failed = 0;
static void check(bool ok, const std::string &what, const std::string &got) {
  std::printf("%s %s%s\n", ok ? "PASS" : "FAIL", what.c_str(), ok ? "" : (" (got: \"" + got + "\")").c_str());
  (ok ? passed : failed)++;
}
static bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

int main(int argc, char **argv) {
  const bool negative = argc > 1 && std::strcmp(argv[1], "--negative") == 0;
  const std::string label = "all_reduce over mesh axis dp (all_reduce %5)";
  const std::vector<int> ranks{0, 1};
  const milliseconds limit(5000);
  constexpr int notReady = 600;
  std::string v = n::watchdogVerdict(label, 0, ranks, false, notReady, 0, "", milliseconds(4999), limit);
  check(v.empty(), "an unfinished collective 4.999 s into a 5 s limit is waited for", v);
  v = n::watchdogVerdict(label, 0, ranks, false, notReady, 0, "", milliseconds(5001), limit);
  if (negative) check(v.empty(), "timeout: (negative control) a collective 5.001 s into a 5 s limit is waited for", v);
  else
    check(has(v, "all_reduce over mesh axis dp (all_reduce %5) failed on rank 0 (group of ranks 0, 1): it did not finish within 5 s") &&
              has(v, "aborted") && has(v, "TSR_DIST_TIMEOUT_S"),
          "timeout: a collective 5.001 s into a 5 s limit fails, named with its rank and group", v);
  v = n::watchdogVerdict(label, 1, ranks, true, 0, 0, "", milliseconds(100000), limit);
  check(v.empty(), "a finished collective never fails, however long ago it was queued", v);
  v = n::watchdogVerdict(label, 1, ranks, false, notReady, 6, "remote process exited or there was a network error", milliseconds(1), limit);
  check(has(v, "failed on rank 1 (group of ranks 0, 1): NCCL reports remote process exited or there was a network error (error 6"),
        "an asynchronous NCCL error fails at once (before the limit)", v);
  v = n::watchdogVerdict(label, 0, ranks, false, 700, 0, "", milliseconds(1), limit);
  check(has(v, "its stream failed (CUresult 700)"), "a failed stream fails at once", v);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
