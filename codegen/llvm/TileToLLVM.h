// Tile IR -> LLVM IR, for any target: the lowering knows nothing of the CPU or the GPU except
// through a TargetDesc (how a program finds its grid position and arguments, how the math
// library is reached), so the host JIT (codegen/cpu) and NVPTX share one lowering.
//
// Shape of the generated code (the CPU's O3 pipeline relies on it, see docs/design.md):
// - A rank-0 tile is an SSA value; a tile of N elements is a 64-byte aligned alloca of N
//   elements in its *compute type* and each elementwise op a counted loop over the contiguous
//   elements (the loop vectorizer widens it). Compute types: f32 for f32/tf32/bf16/f16/fp8 (a
//   value of a narrow float dtype is kept as the f32 of that dtype's value, rounded after every
//   op), f64, i8/i32/i64, and i8 0/1 in buffers (i1 in registers) for bool.
// - Shape ops are index-mapping copy loops (reshape and expand_dims reuse the buffer),
//   reductions are loops, and an f32 `dot` is a register-blocked micro-kernel (MR rows by NV
//   vectors of accumulators, the target's vector shape); other dots are i-k-j loop nests with the
//   j loop innermost and contiguous.
// - Boxes are nested loops over the box with the tensor's strides, masked at its bounds, with a
//   fast path when the box is inside the tensor; an f32 box read only by the next dot is read by
//   the dot in place when it can be.
// - `for` and `if` become loops and branches with phis for carried scalars; a carried tile has a
//   buffer of its own, which the yield copies into (nothing to copy when a dot accumulated into it
//   in place), and an `if`'s tile result is a phi of its arms' buffers.
//
// Tensor parameters are read from the KernelArg array of codegen/cpu/CpuKernel.h (one struct per
// parameter: data, shape[8], strides[8], i, f); the target gives the pointer to it.
#pragma once

#include "ir/tile/TileIR.h"
#include "runtime/TensorMaps.h"

#include <string>

#include "llvm/ADT/ArrayRef.h"

namespace llvm {
class Function;
class FunctionType;
class LLVMContext;
class Module;
class Value;
class Type;
class IRBuilderBase;
} // namespace llvm

namespace tsr::codegen {

/// What the lowering asks of a target. The generated program function has the target's
/// signature; everything the lowering needs from its arguments comes through these hooks.
class TargetDesc {
public:
  virtual ~TargetDesc() = default;
  /// The signature of one program's function.
  virtual llvm::FunctionType *programType(llvm::LLVMContext &ctx) const = 0;
  /// A pointer to the KernelArg array inside `fn` (the program's function).
  virtual llvm::Value *kernelArgs(llvm::IRBuilderBase &b, llvm::Function *fn) const = 0;
  /// program_id(axis) and num_programs(axis) as i64.
  virtual llvm::Value *programId(llvm::IRBuilderBase &b, llvm::Function *fn, int axis) const = 0;
  virtual llvm::Value *numPrograms(llvm::IRBuilderBase &b, llvm::Function *fn, int axis) const = 0;
  /// A call of a scalar libm function (`name` as C's: "erff", "log1p", ...) on `x`, of the
  /// function's float type. The CPU calls the C library; NVPTX would map to libdevice.
  virtual llvm::Value *mathCall(llvm::IRBuilderBase &b, const std::string &name, llvm::Value *x) const = 0;
  /// f32 approximations the target has as one instruction, or nullptr (the CPU: none): 2^x and
  /// 1/x, each within 2 ulp over the normal range, subnormals flushed (PTX ISA 9.7.3,
  /// ex2.approx.ftz.f32 and rcp.approx.ftz.f32). Only where the error analysis of the caller
  /// keeps its result's error bound (tanhF32).
  virtual llvm::Value *approxExp2(llvm::IRBuilderBase &b, llvm::Value *x) const { (void)b; (void)x; return nullptr; }
  virtual llvm::Value *approxRcp(llvm::IRBuilderBase &b, llvm::Value *x) const { (void)b; (void)x; return nullptr; }
  /// Whether f32 -> bf16 rounding is one instruction (`fptrunc float to bfloat`: PTX
  /// cvt.rn.bf16.f32 from sm_80, PTX ISA 9.7.9.21), which the lowering then uses for the
  /// nearest-even rounding instead of integer bit operations; NaN is still made Numeric.h's
  /// quiet NaN with x's sign. x86 without AVX512-BF16 would make it a library call: the CPU
  /// keeps the bit operations.
  virtual bool nativeBf16Round() const { return false; }
  /// An i32 of all ones where the f32 `x` is NaN and zero elsewhere, computed without a predicate
  /// (PTX `set.nan.u32.f32`), or nullptr where the target has no such instruction. Rounding uses
  /// it to make NaN canonical by bit operations: a select there becomes, in ptxas, a predicated
  /// write to a register that it then keeps live around loops (a persistent product's epilogue
  /// spilled 300 bytes of them).
  virtual llvm::Value *nanMask(llvm::IRBuilderBase &b, llvm::Value *x) const { (void)b; (void)x; return nullptr; }
  /// A runtime helper for the rare conversions with no instruction (fp8 <-> f32, narrowing
  /// from f64): `name` is one of the tsr_cg_* functions of runtime/CodegenHelpers.h.
  virtual llvm::Value *helperCall(llvm::IRBuilderBase &b, const std::string &name, llvm::Type *ret,
                                  llvm::ArrayRef<llvm::Value *> args) const = 0;
  /// The vector shape `dot`'s micro-kernel is blocked for: floats per vector register and the
  /// number of vector registers (AVX-512: 16 and 32; AVX2: 8 and 16).
  virtual int vectorFloats() const { return 8; }
  virtual int vectorRegisters() const { return 16; }

  /// Threads that run one program together (1 on the CPU). Above 1 (NVPTX: a CTA), the lowering
  /// puts every tile buffer in memory all of them see (tileBuffer), splits the outermost loop of
  /// each op over the threads (thread t runs iterations t, t+T, t+2T, ...; the iterations of an
  /// op's outer loop write disjoint elements) with a barrier() before and after it, lets thread 0
  /// alone do a scalar store or atomic, and runs ops whose result is a scalar redundantly in every
  /// thread on private buffers. codegen/nvptx/README.md describes the model.
  virtual int threadsPerProgram() const { return 1; }
  /// This thread's index in [0, threadsPerProgram()) as i64; only called when that is above 1.
  virtual llvm::Value *threadIndex(llvm::IRBuilderBase &b) const { (void)b; return nullptr; }
  /// A barrier of the program's threads that also orders their memory accesses.
  virtual void barrier(llvm::IRBuilderBase &b) const { (void)b; }
  /// A tile buffer of `bytes` bytes, 16-byte aligned, shared by the program's threads, built with
  /// `b` (positioned in the function's entry block); null (the default): a private alloca.
  virtual llvm::Value *tileBuffer(llvm::IRBuilderBase &b, uint64_t bytes) const { (void)b; (void)bytes; return nullptr; }
  /// Says that no value lowered to `buf` (a tileBuffer result) is read any more: a later
  /// tileBuffer may return memory overlapping it. The lowering calls it only between ops, and every
  /// op writes tile memory only after a barrier(), so the reuse does not race with earlier reads.
  virtual void releaseTileBuffer(llvm::Value *buf) const { (void)buf; }
  /// Whether shuffleXor exists: threads of a warp exchange registers (NVPTX: 32 lanes). Where it
  /// does, a reduction with fewer outputs than threads splits each output's elements over a group
  /// of threads (codegen/llvm/lower/Shape.cpp).
  virtual bool warpShuffles() const { return false; }
  /// The value `x` (i32 or f32) of the lane whose index is this lane's xor `laneMask`, in a warp
  /// of 32 whose lanes all execute it (NVVM's llvm.nvvm.shfl.sync.bfly). Only called when
  /// warpShuffles().
  virtual llvm::Value *shuffleXor(llvm::IRBuilderBase &b, llvm::Value *x, int laneMask) const {
    (void)b; (void)laneMask;
    return x;
  }
  /// The tensor-core generation of a GPU target as its compute capability (80: mma.sync, ldmatrix
  /// and cp.async; 90: also wgmma), 0 where there are none: matrix main loops then take the
  /// general lowering (MmaPlan.h).
  virtual int tensorCoreArch() const { return 0; }
  /// Hopper's tensor maps (runtime/TensorMaps.h): the slot of the kernel's parameter block that
  /// will hold the map `spec` describes, the same slot for the same spec; -1 where the target has
  /// no maps or already gave the parameter a slot for another box. The map of slot s is at byte
  /// rt::tensorMapOffset(params, persistent) + s * rt::kTensorMapBytes of the KernelArg array's pointer.
  virtual int tensorMapSlot(const rt::TensorMapSpec &spec) const { (void)spec; return -1; }
  /// Launches one warpgroup (128 threads) more per program than threadsPerProgram(), with thread
  /// indices from threadsPerProgram() on (a warp-specialized loop's producer: MmaWarpSpecialized.cpp),
  /// and at most `maxRegisters` registers per thread at launch (what setmaxnreg.inc asks for).
  virtual void addProducerWarpgroup(int maxRegisters) const { (void)maxRegisters; }
  /// Launches `count` more warpgroups of consumers, before the producer's (a ping-pong kernel's
  /// second, which runs programs of its own: MmaWarpSpecialized.cpp). Idempotent.
  virtual void addConsumerWarpgroups(int count) const { (void)count; }
  /// Whether the target launches persistent kernels: as many CTAs as fit on the device at once,
  /// each looping over programs, whose grid it reads from the parameter block
  /// (rt::persistentGridOffset). makePersistent() marks the kernel being lowered as one; the
  /// lowering (MmaWarpSpecialized.cpp) reads the grid and loops.
  virtual bool persistentKernels() const { return false; }
  virtual void makePersistent() const {}
  /// Whether programs that take deterministic mode's atomic ticket (the config `ordered_atomics`,
  /// ir/lower/kernel/AtomicOrder.cpp) do their float atomics in program order by it
  /// (codegen/llvm/OrderedAtomics.cpp); with it, the three hooks below. The CPU runs such a grid on
  /// one thread in grid order instead (exec/cpu/CpuBackend.cpp) and ignores the ticket.
  virtual bool ordersAtomics() const { return false; }
  /// An i32 load from `ptr` with acquire semantics at the device's scope (the GPU's L2).
  virtual llvm::Value *loadAcquire(llvm::IRBuilderBase &b, llvm::Value *ptr) const { (void)b; return ptr; }
  /// An i32 store of `v` to `ptr` with release semantics at the device's scope.
  virtual void storeRelease(llvm::IRBuilderBase &b, llvm::Value *ptr, llvm::Value *v) const { (void)b; (void)ptr; (void)v; }
  /// A short pause in a spin loop, so that waiting threads leave the memory system to the one they wait for.
  virtual void spinPause(llvm::IRBuilderBase &b) const { (void)b; }
};

/// Lowers `f` into `m` as a function named `name` of the target's program type, internal and
/// always-inline (the target wraps it in its entry). Throws CodegenError (CpuKernel.h) for a
/// construct with no lowering; the function must verify (tile::verify) beforehand.
llvm::Function *lowerTileFunction(const tile::Function &f, llvm::Module &m, const TargetDesc &target,
                                  const std::string &name);

/// The environment switches that change what lowerTileFunction emits (TSR_REGISTER_TILES,
/// TSR_FLASH_LOOP, TSR_WELFORD, TSR_FUSE_ELEMENTWISE), as text for the keys of compiled-code caches.
std::string loweringSwitches();

/// Bytes of tile buffers (allocas) one program of `f` uses: the launcher sizes thread stacks by it.
int64_t tileFrameBytes(const tile::Function &f);

} // namespace tsr::codegen
