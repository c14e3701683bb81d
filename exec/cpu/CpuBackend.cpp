// The host CPU as a StepBackend (exec/StepBackend.h): codegen's host JIT and worker pool.
#include "exec/cpu/CpuBackend.h"

#include "codegen/cpu/CpuKernel.h"

namespace tsr::exec {
namespace {

struct CpuProgram final : BackendProgram {
  std::shared_ptr<const codegen::CompiledKernel> code;
};

class CpuBackend final : public StepBackend {
public:
  explicit CpuBackend(int threads) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  const ir::schedule::TileTarget &tileTarget() const override { return target_; }
  bool interpretsSmallSteps() const override { return true; }
  rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *) override {
    return rt::Tensor::empty(shape, dtype);
  }
  char *address(const rt::Tensor &t, bool write, const char *) override {
    if (!write) return static_cast<char *>(const_cast<void *>(t.data()));
    rt::Tensor w = t; // the same storage; the non-const data() marks a host write
    return static_cast<char *>(w.data());
  }
  std::shared_ptr<const BackendProgram> compile(const tile::Function &fn) override {
    auto p = std::make_shared<CpuProgram>();
    p->code = codegen::compileForHost(fn);
    return p;
  }
  void launch(const BackendProgram &p, const std::vector<rt::KernelArg> &args, const std::array<int64_t, 3> &grid,
              const LaunchSite &) override {
    static_cast<const CpuProgram &>(p).code->launch(args.data(), args.size(), grid, threads_);
  }

private:
  int threads_;
  ir::schedule::TileTarget target_ = ir::schedule::TileTarget::cpu();
};

} // namespace

std::shared_ptr<StepBackend> cpuBackend(int threads) { return std::make_shared<CpuBackend>(threads); }

} // namespace tsr::exec
