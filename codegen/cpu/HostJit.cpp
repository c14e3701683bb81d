// The host CPU back end: Tile IR -> LLVM IR (codegen/llvm) -> the tier's pipeline for this CPU
// (OptTier, CpuKernel.h) -> object code -> ORC LLJIT, a compile cache keyed by the tier and the
// function's text (in the process, and on disk across processes: runtime/DiskCache.h); grids run
// on the runtime's launcher (runtime/GridLauncher.h), and the generated code's conversion helpers
// are the runtime's (runtime/CodegenHelpers.h).
//
// Compilations run concurrently (the executor compiles a graph's programs on every core before
// its first run): each builds its module in its own LLVMContext and emits it with its own
// TargetMachine, since neither is thread-safe; only the cache and the JIT's linking are locked.
//
// The entry each kernel gets (its ABI, used by launch() only):
//   void entry(const KernelArg *args, int64_t begin, int64_t end, const int64_t *grid)
// runs programs [begin, end) of the flattened grid (axis 0 fastest: p = x + g0 * (y + g1 * z)),
// each an inlined copy of the program function, so a call per chunk rather than per program.
#include "codegen/cpu/CpuKernel.h"
#include "codegen/llvm/TileToLLVM.h"

#include "ir/tile/TileText.h"
#include "runtime/CodegenHelpers.h"
#include "runtime/DiskCache.h"
#include "runtime/GridLauncher.h"
#include "support/BuildId.h"

#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <future>
#include <mutex>
#include <unordered_map>

namespace tsr::codegen {

using namespace llvm;

namespace {

/// The host CPU as a TargetDesc: the program function is
///   void program(const KernelArg *args, i64 pid0, i64 pid1, i64 pid2, const i64 *grid)
/// and math functions are the C library's.
class CpuTarget : public TargetDesc {
public:
  explicit CpuTarget(bool avx512) : avx512_(avx512) {}
  int vectorFloats() const override { return avx512_ ? 16 : 8; }
  int vectorRegisters() const override { return avx512_ ? 32 : 16; }
  FunctionType *programType(LLVMContext &c) const override {
    Type *p = PointerType::get(c, 0), *i64 = Type::getInt64Ty(c);
    return FunctionType::get(Type::getVoidTy(c), {p, i64, i64, i64, p}, false);
  }
  Value *kernelArgs(IRBuilderBase &, Function *fn) const override { return fn->getArg(0); }
  Value *programId(IRBuilderBase &, Function *fn, int axis) const override { return fn->getArg(1 + axis); }
  Value *numPrograms(IRBuilderBase &b, Function *fn, int axis) const override {
    return b.CreateLoad(b.getInt64Ty(), b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), fn->getArg(4), axis));
  }
  Value *mathCall(IRBuilderBase &b, const std::string &name, Value *x) const override {
    Module *m = b.GetInsertBlock()->getModule();
    FunctionCallee f = m->getOrInsertFunction(name, FunctionType::get(x->getType(), {x->getType()}, false));
    if (auto *fn = dyn_cast<Function>(f.getCallee())) {
      fn->setDoesNotThrow();
      fn->setDoesNotAccessMemory();
    }
    return b.CreateCall(f, {x});
  }
  Value *helperCall(IRBuilderBase &b, const std::string &name, Type *ret, ArrayRef<Value *> args) const override {
    Module *m = b.GetInsertBlock()->getModule();
    std::vector<Type *> ts;
    for (Value *a : args) ts.push_back(a->getType());
    FunctionCallee f = m->getOrInsertFunction(name, FunctionType::get(ret, ts, false));
    if (auto *fn = dyn_cast<Function>(f.getCallee())) {
      fn->setDoesNotThrow();
      fn->setDoesNotAccessMemory();
      fn->setWillReturn();
    }
    return b.CreateCall(f, args);
  }

private:
  bool avx512_;
};

std::once_flag gNativeInit;
void initNative() {
  std::call_once(gNativeInit, [] {
    InitializeNativeTarget();
    InitializeNativeTargetAsmPrinter();
  });
}

CodeGenOptLevel codeGenLevel(OptTier tier) {
  return tier == OptTier::Full ? CodeGenOptLevel::Aggressive : CodeGenOptLevel::Less;
}

/// A target machine for this CPU whose code generator works at `tier`'s level (one per
/// compilation: a TargetMachine may not emit two modules at once).
std::unique_ptr<TargetMachine> hostMachine(OptTier tier) {
  initNative();
  auto jtmb = orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw CodegenError("internal error: cannot describe the host CPU to LLVM: " + toString(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(codeGenLevel(tier));
  auto tm = jtmb->createTargetMachine();
  if (!tm) throw CodegenError("internal error: no LLVM target for the host CPU: " + toString(tm.takeError()));
  return std::move(*tm);
}

/// Builds the module of `f`: the program function and the entry `entryName` around it.
std::unique_ptr<Module> buildModule(const tile::Function &f, LLVMContext &ctx, TargetMachine &tm,
                                    const std::string &entryName) {
  auto m = std::make_unique<Module>("tsr." + f.name, ctx);
  m->setDataLayout(tm.createDataLayout());
  m->setTargetTriple(tm.getTargetTriple().str());
  std::string cpu = tm.getTargetCPU().str(), feats = tm.getTargetFeatureString().str();
  bool avx512 = feats.find("+avx512f") != std::string::npos;
  CpuTarget target(avx512);
  Function *prog = lowerTileFunction(f, *m, target, "tsr.program." + f.name);

  Type *ptr = PointerType::get(ctx, 0), *i64 = Type::getInt64Ty(ctx);
  Function *entry = Function::Create(FunctionType::get(Type::getVoidTy(ctx), {ptr, i64, i64, ptr}, false),
                                     GlobalValue::ExternalLinkage, entryName, *m);
  entry->addFnAttr(Attribute::NoUnwind);
  entry->addParamAttr(0, Attribute::ReadOnly);
  entry->addParamAttr(0, Attribute::NoAlias);
  entry->addParamAttr(3, Attribute::ReadOnly);
  entry->addParamAttr(3, Attribute::NoAlias);
  IRBuilder<> b(BasicBlock::Create(ctx, "entry", entry));
  Value *args = entry->getArg(0), *begin = entry->getArg(1), *end = entry->getArg(2), *grid = entry->getArg(3);
  Value *g0 = b.CreateLoad(i64, grid), *g1 = b.CreateLoad(i64, b.CreateConstInBoundsGEP1_64(i64, grid, 1));
  BasicBlock *head = BasicBlock::Create(ctx, "head", entry), *body = BasicBlock::Create(ctx, "body", entry),
             *exit = BasicBlock::Create(ctx, "exit", entry);
  BasicBlock *pre = b.GetInsertBlock();
  b.CreateBr(head);
  b.SetInsertPoint(head);
  PHINode *p = b.CreatePHI(i64, 2, "p");
  p->addIncoming(begin, pre);
  b.CreateCondBr(b.CreateICmpSLT(p, end), body, exit);
  b.SetInsertPoint(body);
  Value *x = b.CreateURem(p, g0), *yz = b.CreateUDiv(p, g0);
  Value *y = b.CreateURem(yz, g1), *z = b.CreateUDiv(yz, g1);
  b.CreateCall(prog, {args, x, y, z, grid});
  p->addIncoming(b.CreateAdd(p, b.getInt64(1)), body);
  b.CreateBr(head);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();

  // This CPU's features on every function; 512-bit vectors where the CPU has them.
  for (Function &fn : *m) {
    if (fn.isDeclaration()) continue;
    fn.addFnAttr("target-cpu", cpu);
    fn.addFnAttr("target-features", feats);
    if (avx512) {
      fn.addFnAttr("prefer-vector-width", "512");
      fn.addFnAttr("min-legal-vector-width", "512");
    }
  }
  std::string err;
  raw_string_ostream es(err);
  if (verifyModule(*m, &es))
    throw CodegenError("internal error: codegen of tile function @" + f.name + " made invalid LLVM IR: " + es.str() +
                       " (please report this)");
  return m;
}

/// The tier's pipeline of the new pass manager (OptTier, CpuKernel.h) for `tm`'s CPU.
void optimize(Module &m, TargetMachine &tm, OptTier tier) {
  const bool full = tier == OptTier::Full;
  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = full;
  pto.LoopUnrolling = full;
  pto.LoopInterleaving = full;
  PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(full ? OptimizationLevel::O3 : OptimizationLevel::O1);
  mpm.run(m, mam);
}

// Programs run on the runtime's workers (runtime/GridLauncher.h); the launching thread joins
// only when a program's tiles fit comfortably on its stack.
constexpr int64_t kCallerFrameLimit = int64_t(4) << 20;

using EntryFn = rt::HostEntry;

class HostKernel : public CompiledKernel {
public:
  HostKernel(std::string name, EntryFn fn, size_t nparams, int64_t frame)
      : name_(std::move(name)), fn_(fn), nparams_(nparams), frame_(frame) {}
  void launch(const KernelArg *args, size_t nargs, std::array<int64_t, 3> grid, int threads) const override {
    if (nargs != nparams_)
      throw CodegenError("kernel @" + name_ + " takes " + std::to_string(nparams_) + " arguments, got " + std::to_string(nargs));
    for (int64_t g : grid)
      if (g < 0) throw CodegenError("kernel @" + name_ + ": a negative grid size");
    rt::launchGrid(fn_, args, grid, threads, frame_ <= kCallerFrameLimit);
  }
  const std::string &name() const override { return name_; }

private:
  std::string name_;
  EntryFn fn_;
  size_t nparams_;
  int64_t frame_;
};

using KernelPtr = std::shared_ptr<const CompiledKernel>;

struct Jit {
  std::unique_ptr<orc::LLJIT> jit;
  // The host as the persistent cache's keys name it: triple, CPU and features.
  std::string hostKey;
  // `mu` guards `cache` and the JIT's adding and looking up of objects; compilation runs
  // outside it. A program being compiled is in `cache` already, as a future that a second
  // thread asking for it waits on.
  std::mutex mu;
  std::unordered_map<std::string, std::shared_future<KernelPtr>> cache;

  Jit() {
    auto tm = hostMachine(OptTier::Full);
    hostKey = tm->getTargetTriple().str() + "|" + tm->getTargetCPU().str() + "|" + tm->getTargetFeatureString().str();
    auto jtmb = orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) throw CodegenError("internal error: " + toString(jtmb.takeError()));
    jtmb->setCodeGenOptLevel(CodeGenOptLevel::Aggressive);
    auto j = orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
    if (!j) throw CodegenError("internal error: cannot start LLVM's JIT: " + toString(j.takeError()));
    jit = std::move(*j);
    auto gen = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit->getDataLayout().getGlobalPrefix());
    if (!gen) throw CodegenError("internal error: " + toString(gen.takeError()));
    jit->getMainJITDylib().addGenerator(std::move(*gen));
    orc::SymbolMap syms;
    auto add = [&](const char *name, void *p) {
      syms[jit->mangleAndIntern(name)] = {orc::ExecutorAddr::fromPtr(p), JITSymbolFlags::Exported | JITSymbolFlags::Callable};
    };
    for (const rt::CodegenHelper &h : rt::codegenHelpers()) add(h.name, h.address);
    if (auto e = jit->getMainJITDylib().define(orc::absoluteSymbols(std::move(syms))))
      throw CodegenError("internal error: " + toString(std::move(e)));
  }
};

Jit &theJit() {
  static Jit *j = [] {
    initNative();
    return new Jit();
  }();
  return *j;
}

void checkVerified(const tile::Function &f) {
  auto problems = tile::verify(f);
  if (!problems.empty())
    throw CodegenError("internal error: tile function @" + f.name + " is malformed: " + problems.front() +
                       " (please report this)");
}

} // namespace

const std::string &hostTargetKey() {
  static const std::string key = [] {
    auto tm = hostMachine(OptTier::Full);
    return tm->getTargetTriple().str() + "|" + tm->getTargetCPU().str() + "|" + tm->getTargetFeatureString().str();
  }();
  return key;
}

namespace {

/// Object code of `f` at `tier` whose entry is `sym`: from the persistent cache, or compiled
/// (and stored there). Runs without the JIT's lock.
std::string objectCode(const tile::Function &f, OptTier tier, const std::string &sym, const std::string &key,
                       const std::string &hostKey) {
  // The object code depends on the program and tier (`key`), the CPU and its features, and the
  // compiler's build.
  const std::string cacheKey = std::string("host-obj|") + buildId() + "|" + hostKey + "|" + loweringSwitches() + "|" + sym + "|" + key;
  rt::DiskCache &disk = rt::DiskCache::process();
  if (std::optional<std::string> object = disk.get("host-obj", cacheKey)) return std::move(*object);
  auto tm = hostMachine(tier);
  LLVMContext ctx;
  auto m = buildModule(f, ctx, *tm, sym);
  optimize(*m, *tm, tier);
  // Object code from a target machine like the JIT's own: what LLJIT's compile layer would make.
  SmallVector<char, 0> buf;
  raw_svector_ostream os(buf);
  legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, CodeGenFileType::ObjectFile))
    throw CodegenError("internal error: LLVM cannot emit object code for the host CPU");
  pm.run(*m);
  std::string object(buf.data(), buf.size());
  disk.put("host-obj", cacheKey, object);
  return object;
}

} // namespace

std::shared_ptr<const CompiledKernel> compileForHost(const tile::Function &f, OptTier tier) {
  checkVerified(f);
  const std::string text = tile::toString(f);
  const std::string key = std::string(tier == OptTier::Full ? "full|" : "quick|") + text;
  Jit &j = theJit();
  std::promise<KernelPtr> promise;
  {
    std::unique_lock<std::mutex> lk(j.mu);
    // A program compiled fully serves a quick request too.
    auto it = j.cache.find(key);
    if (tier == OptTier::Quick && it == j.cache.end()) it = j.cache.find("full|" + text);
    if (it != j.cache.end()) {
      std::shared_future<KernelPtr> pending = it->second;
      lk.unlock();
      return pending.get(); // rethrows the compiling thread's error
    }
    j.cache.emplace(key, promise.get_future().share());
  }
  try {
    int64_t frame = tileFrameBytes(f);
    if (frame > int64_t(rt::kWorkerStackBytes) - (int64_t(16) << 20))
      throw CodegenError("tile function @" + f.name + " needs " + std::to_string(frame >> 20) +
                         " MiB of tiles per program, more than the CPU back end's thread stacks hold");
    // The entry's symbol comes from the program's text and tier, so that object code from the
    // persistent cache (runtime/DiskCache.h) links under the same name in every process, and
    // both tiers of one program can be linked at once.
    char h[40];
    std::snprintf(h, sizeof h, "%016llx%016llx", static_cast<unsigned long long>(rt::fnv1a64(key)),
                  static_cast<unsigned long long>(rt::fnv1a64(key, 0x84222325cbf29ce4ull)));
    const std::string sym = "tsr_kernel_" + std::string(h) + "_" + f.name;
    const std::string object = objectCode(f, tier, sym, key, j.hostKey);
    KernelPtr k;
    {
      std::lock_guard<std::mutex> lk(j.mu);
      if (auto e = j.jit->addObjectFile(MemoryBuffer::getMemBufferCopy(object, sym)))
        throw CodegenError("internal error: JIT of @" + f.name + ": " + toString(std::move(e)));
      auto addr = j.jit->lookup(sym);
      if (!addr) throw CodegenError("internal error: JIT of @" + f.name + ": " + toString(addr.takeError()));
      k = std::make_shared<HostKernel>(f.name, addr->toPtr<EntryFn>(), f.params.size(), frame);
    }
    promise.set_value(k);
    return k;
  } catch (...) {
    // Waiting threads get the error; a later call compiles again.
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lk(j.mu);
    j.cache.erase(key);
    throw;
  }
}

std::string hostLLVMText(const tile::Function &f, bool optimized) {
  checkVerified(f);
  auto tm = hostMachine(OptTier::Full);
  LLVMContext ctx;
  auto m = buildModule(f, ctx, *tm, f.name);
  if (optimized) optimize(*m, *tm, OptTier::Full);
  std::string s;
  raw_string_ostream os(s);
  m->print(os, nullptr);
  return os.str();
}

} // namespace tsr::codegen
