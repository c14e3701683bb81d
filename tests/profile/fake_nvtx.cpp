// A stand-in for libnvToolsExt.so.1 (NVTX v2's library) for the profile tests
// (tests/profile/test_profile.py): nvtxRangePushA and nvtxRangePop append "push NAME" and "pop"
// lines to the file FAKE_NVTX_LOG names, so that a test sees which ranges a run pushed and that
// they balance.
#include <cstdio>
#include <cstdlib>

namespace {
void logLine(const char *what, const char *name) {
  const char *path = std::getenv("FAKE_NVTX_LOG");
  if (!path) return;
  if (FILE *f = std::fopen(path, "a")) {
    std::fprintf(f, name ? "%s %s\n" : "%s\n", what, name);
    std::fclose(f);
  }
}
} // namespace

extern "C" {
int nvtxRangePushA(const char *message) {
  logLine("push", message ? message : "");
  return 0;
}
int nvtxRangePop() {
  logLine("pop", nullptr);
  return 0;
}
}
