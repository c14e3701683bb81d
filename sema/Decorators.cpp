#include "sema/Decorators.h"
#include "sema/Program.h"

namespace tsr::sema {

const std::vector<DecoratorInfo> &allDecorators() {
  static const std::vector<DecoratorInfo> decorators = {
      {DecoratorKind::Jit, "jit", "makes {} a graph function: compiled, fused and scheduled into device kernels"},
      {DecoratorKind::Kernel, "kernel", "makes {} a kernel: one tile program per point of its launch grid"},
      {DecoratorKind::KernelAutotune, "kernel.autotune", "makes {} a kernel whose configuration is chosen from a search space"},
      {DecoratorKind::KernelSchedule, "kernel.schedule", "makes {} a kernel with a fixed schedule"},
      {DecoratorKind::Inline, "inline", "makes {} an inline helper, inlined into its callers"},
      {DecoratorKind::Autodiff, "autodiff", "makes {} differentiable: grad, value_and_grad, vjp and jvp apply to it"},
      {DecoratorKind::CustomVjp, "custom_vjp", "gives {} a hand-written backward pass (fwd=, bwd=)"},
      {DecoratorKind::Distribute, "distribute", "distributes {} over a device mesh"},
  };
  return decorators;
}

const DecoratorInfo *findDecorator(std::string_view dotted) {
  for (const DecoratorInfo &d : allDecorators())
    if (d.name == dotted) return &d;
  return nullptr;
}

std::string describeDecorator(const DecoratorInfo &d, const std::string &function) {
  std::string s(d.says);
  if (size_t at = s.find("{}"); at != std::string::npos) s.replace(at, 2, "`" + function + "`");
  return s;
}

namespace {
constexpr std::string_view kTessera = "tessera";
}

TypeRef tesseraModule() { return T::opaque(std::string(kTessera)); }

bool isTesseraModule(const TypeRef &t) { return t && t->is(TypeKind::Opaque) && t->name == kTessera; }

std::string decoratorName(const ModuleInfo &m, const ast::Decorator &d) {
  std::vector<std::string> path = d.path;
  if (path.size() > 1) {
    auto g = m.globals.find(path[0]);
    if (g != m.globals.end() && isTesseraModule(g->second.type)) path.erase(path.begin());
  }
  std::string name;
  for (auto &part : path) name += (name.empty() ? "" : ".") + part;
  return name;
}

} // namespace tsr::sema
