// codegen/nvptx as the GPU backend's PtxSource (NvptxCompiler.h).
#include "exec/cuda/NvptxCompiler.h"

#include "codegen/nvptx/PtxKernel.h"
#include "ir/tile/TileText.h"
#include "runtime/DiskCache.h"
#include "support/BuildId.h"

#include <optional>
#include <sstream>
#include <stdexcept>

namespace tsr::exec {

PtxSource nvptxSource() {
  PtxSource s;
  s.measureShared = [](const tile::Function &fn) { return codegen::nvptx::sharedBytesOf(fn); };
  s.compile = [](const tile::Function &fn, const std::string &arch) {
    // The PTX of a program depends on its text, the architecture and the compiler's build; it is
    // kept in the persistent cache (runtime/DiskCache.h) as "ENTRY THREADS SHARED MAPS PERSISTENT\n"
    // + PTX (MAPS: rt::formatTensorMaps, "-" for none; PERSISTENT: 0 or 1).
    const std::string key = std::string("ptx|") + buildId() + "|" + arch + "|" + codegen::nvptx::codegenSwitches() + "|" + tile::toString(fn);
    CompiledPtx c;
    rt::DiskCache &disk = rt::DiskCache::process();
    if (std::optional<std::string> hit = disk.get("ptx", key)) {
      const size_t nl = hit->find('\n');
      std::istringstream head(hit->substr(0, nl));
      std::string maps;
      if (nl != std::string::npos && head >> c.entry >> c.threads >> c.sharedBytes >> maps >> c.persistent) {
        if (auto m = rt::parseTensorMaps(maps == "-" ? "" : maps)) {
          c.tensorMaps = std::move(*m);
          c.ptx = hit->substr(nl + 1);
          return c;
        }
      }
    }
    codegen::nvptx::PtxOptions opts;
    opts.arch = arch;
    codegen::nvptx::PtxModule mod = codegen::nvptx::compileToPtx({&fn}, opts);
    if (mod.kernels.size() != 1) throw std::logic_error("compileToPtx of one function gave " + std::to_string(mod.kernels.size()) + " kernels");
    const codegen::nvptx::PtxKernel &k = mod.kernels[0];
    c.entry = k.name;
    c.threads = unsigned(k.threads);
    c.sharedBytes = unsigned(k.sharedBytes);
    c.tensorMaps = k.tensorMaps;
    c.persistent = k.persistent;
    c.ptx = std::move(mod.ptx);
    const std::string maps = rt::formatTensorMaps(c.tensorMaps);
    disk.put("ptx", key, c.entry + " " + std::to_string(c.threads) + " " + std::to_string(c.sharedBytes) + " " +
                             (maps.empty() ? "-" : maps) + " " + (c.persistent ? "1" : "0") + "\n" + c.ptx);
    return c;
  };
  return s;
}

std::shared_ptr<CudaBackend> cudaBackend(const std::string &spec) { return cudaBackend(spec, nvptxSource()); }

} // namespace tsr::exec
