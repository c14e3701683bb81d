// The modes a compilation or a run is made in (spec §13): `--debug` and `--deterministic` of tsrc
// and `tsr run`. One process serves one program in one mode, so the modes are set once, by the
// command line, before anything is lowered; the lowering and the runtime read them here.
//
// - debug: kernels check their indices (ir/lower/kernel/DebugChecks.cpp: an out-of-range index
//   that the kernel did not mask off is reported, with the tensor, the index, the extent and the
//   line, instead of reading `other`), and graphs check every step's float results for NaN and
//   Inf (exec/CompiledExecutor.cpp). The checks are part of the programs' Tile IR, so their text,
//   which keys every cache of compiled code, differs from the unchecked programs'.
// - deterministic: work that a run could order differently each time is done in one fixed order:
//   a kernel with float atomics takes a ticket (ir/lower/kernel/AtomicOrder.cpp) by which the GPU
//   orders its programs' atomics (codegen/llvm/OrderedAtomics.cpp), and on the CPU a grid whose
//   programs add into shared memory runs its programs one after the other, in grid order
//   (exec/cpu). The ticket is part of the programs' text, which keys the caches.
#pragma once

namespace tsr {

struct RunModes {
  bool debug = false;
  bool deterministic = false;
};

/// The process's modes (all off unless the command line set them).
inline RunModes &runModes() {
  static RunModes modes;
  return modes;
}

} // namespace tsr
