#include "sema/ExternalModels.h"

#include <filesystem>

namespace tsr::sema {

namespace {
ModelImporter *g_importer = nullptr;
}

ModelImporter *modelImporter() { return g_importer; }
void setModelImporter(ModelImporter *importer) { g_importer = importer; }

std::string resolveModelPath(const std::string &fromFile, const std::string &written) {
  namespace fs = std::filesystem;
  fs::path p(written);
  if (p.is_absolute()) return p.lexically_normal().string();
  // A source without a file name (standard input, an editor's unsaved buffer, the fuzzer's
  // input) resolves against the working directory. The error_code overloads: fs::absolute("")
  // throws, and a failure here only means the later open reports the path as not found.
  std::error_code ec;
  fs::path dir = fs::path(fromFile).parent_path();
  fs::path base = dir.empty() ? fs::current_path(ec) : fs::absolute(dir, ec);
  if (ec) base = dir;
  return (base / p).lexically_normal().string();
}

} // namespace tsr::sema
