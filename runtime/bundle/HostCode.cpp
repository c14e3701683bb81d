// A bundle's CPU code at run time (HostCode.h): ISA checks and the shared object.
#include "runtime/bundle/HostCode.h"

#include "runtime/CodegenHelpers.h"

#include <dlfcn.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tsr::rt::bundle {

std::string_view hostArch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

#if defined(__x86_64__)
namespace {
// Whether this CPU (and its OS: AVX and AVX-512 need their register state enabled in XCR0) has
// the extension LLVM calls `f`, read with CPUID as LLVM's own host detection does (Intel SDM vol.
// 2A, CPUID; AMD APM vol. 3 appendix E): the instruction set extensions vectorized code may use.
// `known` is false for a name not in the table.
bool hasX86Feature(const std::string &f, bool &known) {
  struct Bit {
    const char *name;
    unsigned leaf, sub;
    int reg; // 0 eax, 1 ebx, 2 ecx, 3 edx
    int bit;
    int state; // 0: none, 1: AVX state (XCR0 bits 1-2), 2: AVX-512 state (XCR0 bits 1-2 and 5-7)
  };
  static const Bit table[] = {
      {"cmov", 1, 0, 3, 15, 0}, {"mmx", 1, 0, 3, 23, 0}, {"sse", 1, 0, 3, 25, 0}, {"sse2", 1, 0, 3, 26, 0},
      {"sse3", 1, 0, 2, 0, 0}, {"pclmul", 1, 0, 2, 1, 0}, {"ssse3", 1, 0, 2, 9, 0}, {"fma", 1, 0, 2, 12, 1},
      {"sse4.1", 1, 0, 2, 19, 0}, {"sse4.2", 1, 0, 2, 20, 0}, {"movbe", 1, 0, 2, 22, 0}, {"popcnt", 1, 0, 2, 23, 0},
      {"aes", 1, 0, 2, 25, 0}, {"avx", 1, 0, 2, 28, 1}, {"f16c", 1, 0, 2, 29, 1},
      {"bmi", 7, 0, 1, 3, 0}, {"avx2", 7, 0, 1, 5, 1}, {"bmi2", 7, 0, 1, 8, 0}, {"avx512f", 7, 0, 1, 16, 2},
      {"avx512dq", 7, 0, 1, 17, 2}, {"adx", 7, 0, 1, 19, 0}, {"avx512ifma", 7, 0, 1, 21, 2}, {"avx512cd", 7, 0, 1, 28, 2},
      {"sha", 7, 0, 1, 29, 0}, {"avx512bw", 7, 0, 1, 30, 2}, {"avx512vl", 7, 0, 1, 31, 2},
      {"avx512vbmi", 7, 0, 2, 1, 2}, {"avx512vbmi2", 7, 0, 2, 6, 2}, {"gfni", 7, 0, 2, 8, 0}, {"vaes", 7, 0, 2, 9, 1},
      {"vpclmulqdq", 7, 0, 2, 10, 1}, {"avx512vnni", 7, 0, 2, 11, 2}, {"avx512bitalg", 7, 0, 2, 12, 2},
      {"avx512vpopcntdq", 7, 0, 2, 14, 2}, {"avx512vp2intersect", 7, 0, 3, 8, 2}, {"avx512fp16", 7, 0, 3, 23, 2},
      {"avxvnni", 7, 1, 0, 4, 1}, {"avx512bf16", 7, 1, 0, 5, 2},
      {"lzcnt", 0x80000001, 0, 2, 5, 0}, {"sse4a", 0x80000001, 0, 2, 6, 0}, {"xop", 0x80000001, 0, 2, 11, 1},
      {"fma4", 0x80000001, 0, 2, 16, 1},
  };
  const Bit *b = nullptr;
  for (const Bit &t : table)
    if (f == t.name) b = &t;
  known = b != nullptr;
  if (!b) return true;
  unsigned r[4] = {0, 0, 0, 0};
  if (static_cast<unsigned>(__get_cpuid_max(b->leaf & 0x80000000u, nullptr)) < b->leaf) return false;
  __cpuid_count(b->leaf, b->sub, r[0], r[1], r[2], r[3]);
  if (!((r[b->reg] >> b->bit) & 1)) return false;
  if (b->state == 0) return true;
  unsigned a1, b1, c1, d1;
  __cpuid(1, a1, b1, c1, d1);
  if (!((c1 >> 27) & 1)) return false; // OSXSAVE: the OS saves extended state, XGETBV works
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const unsigned need = b->state == 1 ? 0x6u : 0xe6u;
  return (lo & need) == need;
}
} // namespace
#endif

std::vector<std::string> cpuMissingFeatures(const std::vector<std::string> &features) {
  std::vector<std::string> missing;
  // Test-only: TSR_BUNDLE_TEST_CPU_LACKS=avx2,fma makes this CPU lack those (the refusal's tests
  // need a CPU that lacks something the bundle's code uses).
  if (const char *lacks = std::getenv("TSR_BUNDLE_TEST_CPU_LACKS"); lacks && *lacks) {
    const std::string list = "," + std::string(lacks) + ",";
    for (const std::string &f : features)
      if (list.find("," + f + ",") != std::string::npos) missing.push_back(f);
    if (!missing.empty()) return missing;
  }
#if defined(__x86_64__)
  for (const std::string &f : features) {
    bool known = false;
    if (!hasX86Feature(f, known) && known) missing.push_back(f);
  }
#else
  (void)features; // no run-time ISA check on this architecture yet (docs/bundle.md)
#endif
  return missing;
}

// ---- the shared object ----

SharedObject::SharedObject(std::string_view image, const std::string &name) {
  // The code's conversion helpers come from this executable; dlopen's own message for a missing
  // one would name the symbol but not the fix.
  if (const std::vector<std::string> missing = helpersNotExported(); !missing.empty())
    throw std::runtime_error("cannot load the bundle's cpu code: this program does not export " + missing.front() +
                             " (link it with --export-dynamic-symbol=tsr_cg_*, as tsr_bundle_rt's users are)");
  fd_ = int(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (fd_ < 0) throw std::runtime_error("cannot load the bundle's cpu code: memfd_create: " + std::string(std::strerror(errno)));
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = ::write(fd_, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = std::strerror(errno);
      ::close(fd_);
      throw std::runtime_error("cannot load the bundle's cpu code: write: " + why);
    }
    done += size_t(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd_);
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char *e = dlerror();
    ::close(fd_);
    throw std::runtime_error("cannot load the bundle's cpu code: " + std::string(e ? e : "dlopen failed"));
  }
}

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
  if (fd_ >= 0) ::close(fd_);
}

rt::HostEntry SharedObject::entry(const std::string &symbol) const {
  dlerror();
  void *p = dlsym(handle_, symbol.c_str());
  if (!p) throw std::runtime_error("the bundle's cpu code has no entry `" + symbol + "`");
  return reinterpret_cast<rt::HostEntry>(p);
}

} // namespace tsr::rt::bundle
