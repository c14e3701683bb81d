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
  if (!p.is_absolute()) p = fs::absolute(fs::path(fromFile).parent_path()) / p;
  return p.lexically_normal().string();
}

} // namespace tsr::sema
