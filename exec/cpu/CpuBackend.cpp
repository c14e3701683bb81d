// The host CPU as a StepBackend (exec/StepBackend.h): codegen's host JIT and worker pool.
#include "exec/cpu/CpuBackend.h"

#include "codegen/cpu/CpuKernel.h"
#include "ir/tile/TileText.h"
#include "runtime/GridLauncher.h"
#include "support/RunModes.h"

#include <unordered_map>

namespace tsr::exec {
namespace {

struct CpuProgram final : BackendProgram {
  std::shared_ptr<const codegen::CompiledKernel> code;
  bool atomics = false; // whether its programs add into memory they share (atomic_add)
};

// Whether `fn` has an atomic_add: programs that add into shared memory in whatever order the
// worker threads reach them, which --deterministic fixes (CpuBackend::launch).
bool hasAtomics(const tile::Block &b) {
  for (const tile::Op *op : b.ops) {
    if (op->kind == tile::OpKind::AtomicAdd || op->kind == tile::OpKind::AtomicAddBox) return true;
    for (const tile::Block *r : op->regions)
      if (hasAtomics(*r)) return true;
  }
  return false;
}

class CpuBackend final : public StepBackend {
public:
  explicit CpuBackend(int threads) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  std::string tuningTarget() const override {
    const std::string &host = codegen::hostTargetKey(); // TRIPLE|CPU|FEATURES
    const size_t bar = host.find('|');
    return "cpu " + host.substr(bar + 1, host.find('|', bar + 1) - bar - 1) + "|" + host;
  }
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
  std::shared_ptr<const BackendProgram> compile(const tile::Function &fn, const CompileHints &hints) override {
    auto p = std::make_shared<CpuProgram>();
    p->code = codegen::compileForHost(fn, tierFor(hints));
    p->atomics = hasAtomics(*fn.body);
    return p;
  }
  // On every core: the JIT compiles different programs concurrently (codegen/cpu/CpuKernel.h).
  // Requests of one text (the same program in several steps or graphs) compile once, at the
  // highest tier any of them wants: a thread given a duplicate would wait for the one compiling
  // it instead of working.
  std::vector<std::shared_ptr<const BackendProgram>> compileAll(const std::vector<CompileRequest> &requests) override {
    std::vector<size_t> first(requests.size());
    std::vector<size_t> unique;
    std::vector<CompileHints> hints;
    std::unordered_map<std::string, size_t> byText;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto [it, fresh] = byText.emplace(tile::toString(*requests[i].fn), unique.size());
      if (fresh) {
        unique.push_back(i);
        hints.push_back(requests[i].hints);
      } else if (tierFor(requests[i].hints) == codegen::OptTier::Full) {
        hints[it->second] = requests[i].hints;
      }
      first[i] = it->second;
    }
    std::vector<std::shared_ptr<const BackendProgram>> done(unique.size()), out(requests.size());
    rt::runTasks(int64_t(unique.size()), [&](int64_t u) {
      const size_t i = unique[size_t(u)];
      try {
        done[size_t(u)] = compile(*requests[i].fn, hints[size_t(u)]);
      } catch (...) {
        // left null: its step compiles it again and reports the error at its op
      }
    });
    for (size_t i = 0; i < requests.size(); ++i) out[i] = done[first[i]];
    return out;
  }
  // In deterministic mode (support/RunModes.h) a program with atomics runs its grid on one thread,
  // in grid order, so that its float additions happen in the same order every run; the others
  // write disjoint elements, so their order never shows.
  void launch(const BackendProgram &p, const std::vector<rt::KernelArg> &args, const std::array<int64_t, 3> &grid,
              const LaunchSite &) override {
    const auto &cp = static_cast<const CpuProgram &>(p);
    cp.code->launch(args.data(), args.size(), grid, cp.atomics && runModes().deterministic ? 1 : threads_);
  }

private:
  // A program whose launches do fewer element-ops than this gets the quick tier: at 1-4 GB/s for
  // such small tiles a launch of 2^22 element-ops takes about a millisecond, and the full
  // pipeline's extra 0.1-0.5 s of compilation would pay for itself only over hundreds of
  // launches. (The digits ViT's programs, all below it, run equally fast either way.)
  static constexpr int64_t kQuickTierWork = int64_t(1) << 22;
  static codegen::OptTier tierFor(const CompileHints &h) {
    return h.launchWork >= 0 && h.launchWork < kQuickTierWork ? codegen::OptTier::Quick : codegen::OptTier::Full;
  }

  int threads_;
  ir::schedule::TileTarget target_ = ir::schedule::TileTarget::cpu();
};

} // namespace

std::shared_ptr<StepBackend> cpuBackend(int threads) { return std::make_shared<CpuBackend>(threads); }

} // namespace tsr::exec
