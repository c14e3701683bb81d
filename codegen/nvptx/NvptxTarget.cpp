// Tile IR -> PTX: the NVPTX TargetDesc, the kernel entries and the LLVM pipeline. See PtxKernel.h
// for the execution model and ABI. Sources: the LLVM NVPTX usage guide (kernel calling
// convention, address spaces 1/3, libdevice and __nvvm_reflect), the PTX ISA (§9.7.13.1 bar.sync,
// §10 special registers %tid/%ctaid/%nctaid, §5.1.6 .shared state space).
#include "codegen/nvptx/PtxKernel.h"

#include "codegen/cpu/CpuKernel.h"
#include "codegen/llvm/TileToLLVM.h"
#include "codegen/nvptx/Conversions.h"
#include "ir/schedule/LowerGroups.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Transforms/IPO/Internalize.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

namespace tsr::codegen::nvptx {

using namespace llvm;

namespace {

constexpr unsigned kShared = 3;   // NVPTX address space of .shared
constexpr int64_t kArgBytes = sizeof(KernelArg);

/// One CTA as a TargetDesc. The program function is `void program(ptr args)` (args: the
/// KernelArg array); tile buffers are slices of the module's dynamic shared array.
class NvptxTarget : public TargetDesc {
public:
  NvptxTarget(int threads, GlobalVariable *smem, int smArch) : threads_(threads), smem_(smem), smArch_(smArch) {}
  FunctionType *programType(LLVMContext &c) const override {
    return FunctionType::get(Type::getVoidTy(c), {PointerType::get(c, 0)}, false);
  }
  Value *kernelArgs(IRBuilderBase &, Function *fn) const override { return fn->getArg(0); }
  Value *programId(IRBuilderBase &b, Function *, int axis) const override {
    static const Intrinsic::ID ids[3] = {Intrinsic::nvvm_read_ptx_sreg_ctaid_x, Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                                         Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
    return b.CreateZExt(b.CreateIntrinsic(ids[axis], {}, {}), b.getInt64Ty());
  }
  Value *numPrograms(IRBuilderBase &b, Function *, int axis) const override {
    static const Intrinsic::ID ids[3] = {Intrinsic::nvvm_read_ptx_sreg_nctaid_x, Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
                                         Intrinsic::nvvm_read_ptx_sreg_nctaid_z};
    return b.CreateZExt(b.CreateIntrinsic(ids[axis], {}, {}), b.getInt64Ty());
  }
  /// libdevice's __nv_<name> (erff -> __nv_erff, log1p -> __nv_log1p), linked in by compile().
  Value *mathCall(IRBuilderBase &b, const std::string &name, Value *x) const override {
    Module *m = b.GetInsertBlock()->getModule();
    FunctionCallee f = m->getOrInsertFunction("__nv_" + name, FunctionType::get(x->getType(), {x->getType()}, false));
    return b.CreateCall(f, {x});
  }
  Value *approxExp2(IRBuilderBase &b, Value *x) const override {
    return x->getType()->isFloatTy() ? b.CreateIntrinsic(Intrinsic::nvvm_ex2_approx_ftz_f, {}, {x}) : nullptr;
  }
  Value *approxRcp(IRBuilderBase &b, Value *x) const override {
    return x->getType()->isFloatTy() ? b.CreateIntrinsic(Intrinsic::nvvm_rcp_approx_ftz_f, {}, {x}) : nullptr;
  }
  bool nativeBf16Round() const override { return true; }
  Value *nanMask(IRBuilderBase &b, Value *x) const override {
    auto *ty = FunctionType::get(b.getInt32Ty(), {b.getFloatTy()}, false);
    return b.CreateCall(InlineAsm::get(ty, "set.nan.u32.f32 $0, $1, $1;", "=r,f", false), {x});
  }
  /// The host's runtime helpers as IR of the module (Conversions.h).
  Value *helperCall(IRBuilderBase &b, const std::string &name, Type *ret, ArrayRef<Value *> args) const override {
    return conversionHelperCall(b, name, ret, args);
  }
  // dot's micro-kernel per thread: scalar registers, 4 rows by 2 columns of accumulators.
  int vectorFloats() const override { return 1; }
  int vectorRegisters() const override { return 16; }
  int threadsPerProgram() const override { return threads_; }
  Value *threadIndex(IRBuilderBase &b) const override {
    return b.CreateZExt(b.CreateIntrinsic(Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {}), b.getInt64Ty());
  }
  void barrier(IRBuilderBase &b) const override { b.CreateIntrinsic(Intrinsic::nvvm_barrier0, {}, {}); }
  bool warpShuffles() const override { return true; }
  /// shfl.sync.bfly.b32 over the whole warp (PTX ISA §9.7.8.6): membermask all lanes, c = 0x1f
  /// (no segments, clamp at lane 31).
  Value *shuffleXor(IRBuilderBase &b, Value *x, int laneMask) const override {
    const bool f = x->getType()->isFloatTy();
    return b.CreateIntrinsic(f ? Intrinsic::nvvm_shfl_sync_bfly_f32 : Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                             {b.getInt32(0xffffffffu), x, b.getInt32(uint32_t(laneMask)), b.getInt32(0x1f)});
  }
  /// First fit among released ranges, else the end of the array; 16-byte aligned slices.
  Value *tileBuffer(IRBuilderBase &b, uint64_t bytes) const override {
    bytes = (bytes + 15) / 16 * 16;
    uint64_t off = end_;
    bool found = false;
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second - it->first >= bytes) {
        off = it->first;
        if (it->second - it->first == bytes) free_.erase(it);
        else it->first += bytes;
        found = true;
        break;
      }
    if (!found) end_ += bytes;
    high_ = std::max(high_, end_);
    Value *p = b.CreateAddrSpaceCast(b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), smem_, off), PointerType::get(b.getContext(), 0));
    live_[p] = {off, off + bytes};
    return p;
  }
  void releaseTileBuffer(Value *p) const override {
    auto it = live_.find(p);
    if (it == live_.end()) return;
    free_.push_back(it->second);
    live_.erase(it);
    // Keep the free list sorted and merged, so that neighbours make one range again.
    std::sort(free_.begin(), free_.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (auto r : free_)
      if (!merged.empty() && merged.back().second == r.first) merged.back().second = r.second;
      else merged.push_back(r);
    if (!merged.empty() && merged.back().second == end_) {
      end_ = merged.back().first;
      merged.pop_back();
    }
    free_ = merged;
  }
  uint64_t sharedBytes() const { return high_; }
  int tensorCoreArch() const override { return smArch_; }
  /// Tensor maps exist from sm_90 on; one slot per parameter.
  int tensorMapSlot(const rt::TensorMapSpec &spec) const override {
    if (smArch_ < 90) return -1;
    for (size_t s = 0; s < maps_.size(); ++s)
      if (maps_[s].param == spec.param) return maps_[s] == spec ? int(s) : -1;
    maps_.push_back(spec);
    return int(maps_.size() - 1);
  }
  void addProducerWarpgroup(int maxRegisters) const override {
    producerThreads_ = 128;
    maxRegisters_ = maxRegisters;
  }
  void addConsumerWarpgroups(int count) const override { consumerThreads_ = 128 * count; }
  // Hopper's warp-specialized products (MmaWarpSpecialized.cpp), with TSR_PERSISTENT=1 or
  // =pingpong only (ir/schedule/LowerGroups.h; codegenSwitches keys it): they are not the
  // default yet (docs/performance.md, "Persistent products").
  bool persistentKernels() const override {
    return smArch_ >= 90 && ir::schedule::persistentProducts() != ir::schedule::PersistentProducts::Off;
  }
  void makePersistent() const override { persistent_ = true; }
  bool persistent() const { return persistent_; }
  // Deterministic mode's ticket (codegen/llvm/OrderedAtomics.cpp): PTX's acquire and release
  // at .gpu scope (PTX ISA §8, the memory consistency model; ld/st .acquire/.release need sm_70),
  // written as inline assembly because LLVM 19's NVPTX cannot select atomic loads and stores of
  // those orderings. The address is generic (a KernelArg's data pointer).
  bool ordersAtomics() const override { return true; }
  Value *loadAcquire(IRBuilderBase &b, Value *ptr) const override {
    auto *ty = FunctionType::get(b.getInt32Ty(), {ptr->getType()}, false);
    return b.CreateCall(InlineAsm::get(ty, "ld.acquire.gpu.u32 $0, [$1];", "=r,l,~{memory}", true), {ptr});
  }
  void storeRelease(IRBuilderBase &b, Value *ptr, Value *v) const override {
    auto *ty = FunctionType::get(b.getVoidTy(), {ptr->getType(), v->getType()}, false);
    b.CreateCall(InlineAsm::get(ty, "st.release.gpu.u32 [$0], $1;", "l,r,~{memory}", true), {ptr, v});
  }
  void spinPause(IRBuilderBase &b) const override {
    auto *ty = FunctionType::get(b.getVoidTy(), {}, false);
    b.CreateCall(InlineAsm::get(ty, "nanosleep.u32 64;", "~{memory}", true), {});
  }
  const std::vector<rt::TensorMapSpec> &tensorMaps() const { return maps_; }
  int extraThreads() const { return producerThreads_ + consumerThreads_; }
  int maxRegisters() const { return maxRegisters_; }

private:
  int threads_;
  mutable std::vector<rt::TensorMapSpec> maps_;
  mutable int producerThreads_ = 0, consumerThreads_ = 0, maxRegisters_ = 255;
  mutable bool persistent_ = false;
  GlobalVariable *smem_;
  int smArch_;
  mutable uint64_t end_ = 0, high_ = 0;
  mutable std::vector<std::pair<uint64_t, uint64_t>> free_;  // released [begin, end) ranges
  mutable std::map<Value *, std::pair<uint64_t, uint64_t>> live_;
};

void initNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

std::unique_ptr<TargetMachine> makeMachine(const std::string &arch) {
  if (arch != "sm_80" && arch != "sm_90")
    throw CodegenError("NVPTX: unsupported --arch " + arch + " (sm_80 and sm_90 are)");
  initNvptx();
  std::string triple = "nvptx64-nvidia-cuda", err;
  const Target *t = TargetRegistry::lookupTarget(triple, err);
  if (!t) throw CodegenError("NVPTX: LLVM has no NVPTX target: " + err);
  // sm_90a needs PTX ISA 8.0 (LLVM 19 writes up to 8.5); sm_80 keeps 7.8, which older drivers JIT.
  TargetOptions to;
  auto *tm = t->createTargetMachine(triple, ptxTarget(arch), arch == "sm_90" ? "+ptx80" : "+ptx78", to, Reloc::PIC_,
                                    std::nullopt, CodeGenOptLevel::Aggressive);
  if (!tm) throw CodegenError("NVPTX: cannot create a target machine for " + arch);
  return std::unique_ptr<TargetMachine>(tm);
}

std::string entryName(const std::string &n) {
  std::string s;
  for (char c : n) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

int warpsOf(const tile::Function &f) {
  for (const auto &a : f.config)
    if (a.name == "warps")
      if (auto *v = std::get_if<int64_t>(&a.value); v && *v >= 1 && *v <= 32) return int(*v);
  return 4;
}

// LLVM intrinsics the NVPTX backend cannot select, as libdevice functions (f32 name, f64 name).
const std::map<Intrinsic::ID, std::pair<const char *, const char *>> &libdeviceIntrinsics() {
  static const std::map<Intrinsic::ID, std::pair<const char *, const char *>> m = {
      {Intrinsic::sin, {"__nv_sinf", "__nv_sin"}},       {Intrinsic::cos, {"__nv_cosf", "__nv_cos"}},
      {Intrinsic::exp, {"__nv_expf", "__nv_exp"}},       {Intrinsic::exp2, {"__nv_exp2f", "__nv_exp2"}},
      {Intrinsic::log, {"__nv_logf", "__nv_log"}},       {Intrinsic::log2, {"__nv_log2f", "__nv_log2"}},
      {Intrinsic::log10, {"__nv_log10f", "__nv_log10"}}, {Intrinsic::pow, {"__nv_powf", "__nv_pow"}},
  };
  return m;
}

/// Replaces calls of the intrinsics above by libdevice calls.
void mapIntrinsicsToLibdevice(Module &m) {
  std::vector<CallInst *> calls;
  for (Function &f : m)
    for (BasicBlock &bb : f)
      for (Instruction &i : bb)
        if (auto *c = dyn_cast<CallInst>(&i))
          if (Function *callee = c->getCalledFunction())
            if (libdeviceIntrinsics().count(callee->getIntrinsicID())) calls.push_back(c);
  for (CallInst *c : calls) {
    auto names = libdeviceIntrinsics().at(c->getCalledFunction()->getIntrinsicID());
    Type *t = c->getType();
    if (!t->isFloatTy() && !t->isDoubleTy()) continue;
    std::vector<Type *> ts;
    std::vector<Value *> args;
    for (Value *a : c->args()) { ts.push_back(a->getType()); args.push_back(a); }
    FunctionCallee f = m.getOrInsertFunction(t->isFloatTy() ? names.first : names.second, FunctionType::get(t, ts, false));
    IRBuilder<> b(c);
    Value *r = b.CreateCall(f, args);
    c->replaceAllUsesWith(r);
    c->eraseFromParent();
  }
}

std::string libdevicePath(const PtxOptions &o) {
  if (!o.libdevice.empty()) return o.libdevice;
  if (const char *e = std::getenv("TSR_LIBDEVICE")) return e;
#ifdef TSR_LIBDEVICE_PATH
  return TSR_LIBDEVICE_PATH;
#else
  return "";
#endif
}

/// Links libdevice when the module calls one of its functions, then internalizes it so that
/// only what is used stays.
void linkLibdevice(Module &m, const PtxOptions &o) {
  bool needs = false;
  for (Function &f : m)
    if (f.isDeclaration() && f.getName().starts_with("__nv_")) needs = true;
  if (!needs) return;
  std::string path = libdevicePath(o);
  if (path.empty())
    throw CodegenError("NVPTX: this kernel needs libdevice (log, sin, erf...), and no CUDA toolkit was found at build "
                       "time; set TSR_LIBDEVICE to libdevice.10.bc");
  auto buf = MemoryBuffer::getFile(path);
  if (!buf) throw CodegenError("NVPTX: cannot read libdevice at " + path);
  auto lib = parseBitcodeFile(**buf, m.getContext());
  if (!lib) throw CodegenError("NVPTX: cannot parse libdevice at " + path + ": " + toString(lib.takeError()));
  (*lib)->setTargetTriple(m.getTargetTriple());
  (*lib)->setDataLayout(m.getDataLayout());
  if (Linker::linkModules(m, std::move(*lib), Linker::LinkOnlyNeeded))
    throw CodegenError("NVPTX: linking libdevice failed");
}

struct Built {
  std::unique_ptr<Module> m;
  std::vector<PtxKernel> kernels;
};

Built build(const std::vector<const tile::Function *> &fns, LLVMContext &ctx, TargetMachine &tm) {
  Built out;
  out.m = std::make_unique<Module>("tsr.nvptx", ctx);
  Module &m = *out.m;
  m.setDataLayout(tm.createDataLayout());
  m.setTargetTriple(tm.getTargetTriple().str());
  // The dynamic shared array (extern __shared__): sized by each launch.
  auto *smem = new GlobalVariable(m, ArrayType::get(Type::getInt8Ty(ctx), 0), false, GlobalValue::ExternalLinkage,
                                  nullptr, "tsr_smem", nullptr, GlobalValue::NotThreadLocal, kShared);
  smem->setAlignment(Align(16));
  // "sm_80" -> 80: the tensor-core instructions the lowering may use.
  const int smArch = std::atoi(tm.getTargetCPU().str().c_str() + 3);
  NamedMDNode *ann = m.getOrInsertNamedMetadata("nvvm.annotations");
  for (const tile::Function *f : fns) {
    PtxKernel k;
    k.name = entryName(f->name);
    k.threads = warpsOf(*f) * 32;
    k.params = f->params.size();
    NvptxTarget target(k.threads, smem, smArch);
    Function *prog = lowerTileFunction(*f, m, target, "tsr.program." + k.name);
    k.sharedBytes = int64_t(target.sharedBytes());
    k.threads += target.extraThreads();
    k.tensorMaps = target.tensorMaps();
    k.persistent = target.persistent();
    // The entry: the KernelArg array by value in the .param space, and the tensor maps after it
    // (64-byte aligned, read in place by the bulk copies through a generic address: grid_constant).
    Type *argsTy = ArrayType::get(Type::getInt8Ty(ctx), uint64_t(rt::kernelParamBytes(k.params, k.tensorMaps.size(), k.persistent)));
    Function *entry = Function::Create(FunctionType::get(Type::getVoidTy(ctx), {PointerType::get(ctx, 0)}, false),
                                       GlobalValue::ExternalLinkage, k.name, m);
    entry->setCallingConv(CallingConv::PTX_Kernel);
    entry->addParamAttr(0, Attribute::getWithByValType(ctx, argsTy));
    entry->addParamAttr(0, Attribute::getWithAlignment(ctx, Align(k.tensorMaps.empty() && !k.persistent ? 8 : 64)));
    entry->addParamAttr(0, Attribute::NoAlias);
    entry->addParamAttr(0, Attribute::ReadOnly);
    entry->addFnAttr(Attribute::NoUnwind);
    IRBuilder<> b(BasicBlock::Create(ctx, "entry", entry));
    b.CreateCall(prog, {entry->getArg(0)});
    b.CreateRetVoid();
    Metadata *kmd[] = {ValueAsMetadata::get(entry), MDString::get(ctx, "kernel"),
                       ConstantAsMetadata::get(ConstantInt::get(Type::getInt32Ty(ctx), 1))};
    ann->addOperand(MDNode::get(ctx, kmd));
    Metadata *tmd[] = {ValueAsMetadata::get(entry), MDString::get(ctx, "maxntidx"),
                       ConstantAsMetadata::get(ConstantInt::get(Type::getInt32Ty(ctx), k.threads))};
    ann->addOperand(MDNode::get(ctx, tmd));
    if (target.extraThreads()) {
      // setmaxnreg moves registers between warpgroups of the count the kernel is launched with: at
      // most what the SM has per thread of the block, and never above what the consumers ask for
      // (an `inc` below the current count is not one).
      const int cap = std::min(target.maxRegisters(), 65536 / k.threads / 8 * 8);
      Metadata *rmd[] = {ValueAsMetadata::get(entry), MDString::get(ctx, "maxnreg"),
                         ConstantAsMetadata::get(ConstantInt::get(Type::getInt32Ty(ctx), cap))};
      ann->addOperand(MDNode::get(ctx, rmd));
    }
    if (!k.tensorMaps.empty()) {
      // NVPTX's grid_constant (parameter 1): the block's address is taken without a local copy.
      Metadata *one[] = {ConstantAsMetadata::get(ConstantInt::get(Type::getInt32Ty(ctx), 1))};
      Metadata *gmd[] = {ValueAsMetadata::get(entry), MDString::get(ctx, "grid_constant"), MDNode::get(ctx, one)};
      ann->addOperand(MDNode::get(ctx, gmd));
    }
    out.kernels.push_back(k);
  }
  return out;
}

void optimize(Module &m, TargetMachine &tm, const PtxOptions &o) {
  mapIntrinsicsToLibdevice(m);
  linkLibdevice(m, o);
  std::string err;
  raw_string_ostream es(err);
  if (verifyModule(m, &es))
    throw CodegenError("internal error: NVPTX codegen made invalid LLVM IR: " + es.str() + " (please report this)");
  // Only the kernels are visible outside the module.
  std::vector<std::string> keep;
  for (Function &f : m)
    if (f.getCallingConv() == CallingConv::PTX_Kernel) keep.push_back(f.getName().str());
  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  ModulePassManager mpm;
  mpm.addPass(InternalizePass([keep](const GlobalValue &g) {
    if (g.getName() == "tsr_smem") return true;
    for (const auto &k : keep)
      if (g.getName() == k) return true;
    return false;
  }));
  mpm.addPass(pb.buildPerModuleDefaultPipeline(OptimizationLevel::O3));
  mpm.run(m, mam);
}

std::string emitPtx(Module &m, TargetMachine &tm) {
  SmallString<0> out;
  raw_svector_ostream os(out);
  legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, CodeGenFileType::AssemblyFile))
    throw CodegenError("NVPTX: the target cannot emit PTX");
  pm.run(m);
  return std::string(out.str());
}

} // namespace

PtxModule compileToPtx(const std::vector<const tile::Function *> &fns, const PtxOptions &opts) {
  auto tm = makeMachine(opts.arch);
  LLVMContext ctx;
  Built b = build(fns, ctx, *tm);
  optimize(*b.m, *tm, opts);
  PtxModule r;
  r.ptx = emitPtx(*b.m, *tm);
  r.kernels = std::move(b.kernels);
  return r;
}

int64_t sharedBytesOf(const tile::Function &fn) {
  // The shared layout is made while lowering; only a tensor-core loop's differs between archs.
  int64_t most = 0;
  for (const char *arch : {"sm_80", "sm_90"}) {
    auto tm = makeMachine(arch);
    LLVMContext ctx;
    most = std::max(most, build({&fn}, ctx, *tm).kernels.at(0).sharedBytes);
  }
  return most;
}

std::string ptxTarget(const std::string &arch) { return arch == "sm_90" ? "sm_90a" : arch; }

std::string codegenSwitches() {
  std::string s;
  for (const char *name : {"TSR_WGMMA_WAIT", "TSR_WARP_SPECIALIZE", "TSR_PERSISTENT", "TSR_EPILOGUE_STAGING"}) {
    const char *v = std::getenv(name);
    s += std::string(name) + "=" + (v ? v : "") + ";";
  }
  return s + loweringSwitches();
}

std::string ptxLLVMText(const std::vector<const tile::Function *> &fns, const PtxOptions &opts) {
  auto tm = makeMachine(opts.arch);
  LLVMContext ctx;
  Built b = build(fns, ctx, *tm);
  optimize(*b.m, *tm, opts);
  std::string s;
  raw_string_ostream os(s);
  b.m->print(os, nullptr);
  return os.str();
}

} // namespace tsr::codegen::nvptx
