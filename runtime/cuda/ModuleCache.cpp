// Loaded GPU modules and their kernels, cached per device (ModuleCache.h).
#include "runtime/cuda/ModuleCache.h"

#include <cctype>
#include <cstdio>
#include <cstring>

namespace tsr::rt::cuda {

namespace {

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string joined(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

std::string smText(const CubinArch &a) { return "sm_" + std::to_string(a.sm) + (a.archSpecific ? "a" : ""); }

} // namespace

// ---- the driver's loader ----

void *DriverModuleLoader::loadPtx(int device, const std::string &ptx) { return Context::get(device).loadPtx(ptx); }
void *DriverModuleLoader::loadCubin(int device, std::string_view cubin) { return Context::get(device).loadCubin(cubin); }
void *DriverModuleLoader::getFunction(int device, void *module, const std::string &entry) {
  return Context::get(device).getFunction(module, entry);
}
void DriverModuleLoader::unload(int device, void *module) noexcept {
  try {
    Context::get(device).unloadModule(module);
  } catch (...) {
    // No context: nothing was loaded in it.
  }
}
std::pair<int, int> DriverModuleLoader::computeCapability(int device) {
  const DeviceInfo &d = Context::get(device).info();
  return {d.ccMajor, d.ccMinor};
}

// ---- cubins and PTX text ----

std::optional<CubinArch> cubinArch(std::string_view image) {
  // ELF64 header: e_ident[0..3] magic, [4] class (2: 64-bit), [5] data (1: little-endian),
  // [8] ABI version; e_machine at 18 (u16), e_flags at 48 (u32).
  if (image.size() < 64 || image.substr(0, 4) != std::string_view("\x7f" "ELF", 4) || image[4] != 2 || image[5] != 1)
    return std::nullopt;
  auto u8 = [&](size_t i) { return uint32_t(static_cast<unsigned char>(image[i])); };
  uint32_t machine = u8(18) | u8(19) << 8;
  if (machine != 190) return std::nullopt;  // EM_CUDA
  uint32_t flags = u8(48) | u8(49) << 8 | u8(50) << 16 | u8(51) << 24;
  CubinArch a;
  if (u8(8) >= 8) {  // ELFABIVERSION_CUDA_V2
    a.sm = int((flags >> 8) & 0xff);
    a.archSpecific = (flags & 0x8) != 0;
  } else {           // ELFABIVERSION_CUDA_V1
    a.sm = int(flags & 0xff);
    a.archSpecific = (flags & 0x800) != 0;
  }
  if (a.sm == 0) return std::nullopt;
  return a;
}

bool cubinRunsOn(const CubinArch &arch, int ccMajor, int ccMinor) {
  int major = arch.sm / 10, minor = arch.sm % 10;
  if (major != ccMajor) return false;
  return arch.archSpecific ? minor == ccMinor : minor <= ccMinor;
}

std::vector<std::string> ptxEntries(std::string_view ptx) {
  std::vector<std::string> out;
  for (size_t at = ptx.find(".entry"); at != std::string_view::npos; at = ptx.find(".entry", at + 6)) {
    size_t i = at + 6;
    if (i >= ptx.size() || (ptx[i] != ' ' && ptx[i] != '\t')) continue;
    while (i < ptx.size() && (ptx[i] == ' ' || ptx[i] == '\t')) ++i;
    size_t b = i;
    while (i < ptx.size() && (std::isalnum(static_cast<unsigned char>(ptx[i])) || ptx[i] == '_' || ptx[i] == '$'))
      ++i;
    if (i > b) out.emplace_back(ptx.substr(b, i - b));
  }
  return out;
}

// ---- the cache ----

uint64_t ModuleCache::contentHash(std::string_view text) {
  // Eight bytes per step, multiply-xorshift, then splitmix64's finalizer: several GB/s, and every
  // input bit reaches every output bit. The length seeds it, so zero padding of the tail is safe.
  constexpr uint64_t k = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t(text.size()) * k);
  size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, text.data() + i, 8);
    h = (h ^ w) * k;
    h ^= h >> 29;
  }
  uint64_t w = 0;
  std::memcpy(&w, text.data() + i, text.size() - i);
  h = (h ^ w) * k;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

ModuleCache::~ModuleCache() {
  for (auto &[key, bucket] : modules_)
    for (auto &m : bucket) loader_.unload(m->device_, m->module_);
}

ModuleCache &ModuleCache::process() {
  static DriverModuleLoader *loader = new DriverModuleLoader;  // never destroyed: see the header
  static ModuleCache *cache = new ModuleCache(*loader);
  return *cache;
}

CachedModule &ModuleCache::load(int device, std::string_view ptx, std::string_view cubin) {
  const uint64_t h = contentHash(ptx);
  std::lock_guard<std::mutex> lock(mu_);
  auto &bucket = modules_[{device, h}];
  for (auto &m : bucket)
    if (m->ptx_ == ptx) {
      ++stats_.moduleHits;
      return *m;
    }
  auto m = std::make_unique<CachedModule>();
  m->device_ = device;
  m->hash_ = h;
  m->ptx_ = std::string(ptx);
  try {
    if (!cubin.empty()) {
      auto [ccMajor, ccMinor] = loader_.computeCapability(device);
      std::optional<CubinArch> arch = cubinArch(cubin);
      std::string dev = "sm_" + std::to_string(ccMajor) + std::to_string(ccMinor);
      if (!arch) {
        ++stats_.cubinSkipped;
        m->cubinNote_ = "the cubin given is not a CUDA ELF image; the PTX was JIT-compiled";
      } else if (!cubinRunsOn(*arch, ccMajor, ccMinor)) {
        ++stats_.cubinSkipped;
        m->cubinNote_ = "the cubin is for " + smText(*arch) + ", the device is " + dev + "; the PTX was JIT-compiled";
      } else {
        try {
          m->module_ = loader_.loadCubin(device, cubin);
          m->fromCubin_ = true;
          ++stats_.cubinLoads;
        } catch (const GpuError &e) {
          if (e.code() != kCudaNoBinaryForGpu && e.code() != kCudaInvalidImage) throw;
          ++stats_.cubinRefused;
          m->cubinNote_ = "the driver refused the cubin (" + e.name() + "); the PTX was JIT-compiled";
        }
      }
    }
    if (!m->module_) {
      try {
        m->module_ = loader_.loadPtx(device, m->ptx_);
      } catch (const GpuError &e) {
        throw GpuError(e.code(), e.name(),
                       std::string(e.what()) + "\nthe module (PTX hash " + hex64(h) + ") defines kernel(s) " +
                           joined(ptxEntries(ptx)));
      }
      ++stats_.ptxJits;
    }
  } catch (...) {
    if (bucket.empty()) modules_.erase({device, h});
    throw;
  }
  bucket.push_back(std::move(m));
  return *bucket.back();
}

Function &ModuleCache::function(CachedModule &module, std::string_view entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = module.functions_.find(entry);
  if (it != module.functions_.end()) return *it->second;
  void *handle = nullptr;
  try {
    ++stats_.functionLookups;
    handle = loader_.getFunction(module.device_, module.module_, std::string(entry));
  } catch (const GpuError &e) {
    throw GpuError(e.code(), e.name(),
                   std::string(e.what()) + "\nthe module (PTX hash " + hex64(module.hash_) + ") defines kernel(s) " +
                       joined(ptxEntries(module.ptx_)));
  }
  auto f = std::make_unique<Function>(handle, std::string(entry), module.device_);
  Function &ref = *f;
  module.functions_.emplace(std::string(entry), std::move(f));
  return ref;
}

Function &ModuleCache::function(int device, std::string_view ptx, std::string_view entry, std::string_view cubin) {
  return function(load(device, ptx, cubin), entry);
}

ModuleCacheStats ModuleCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t ModuleCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto &[key, bucket] : modules_) n += bucket.size();
  return n;
}

} // namespace tsr::rt::cuda
