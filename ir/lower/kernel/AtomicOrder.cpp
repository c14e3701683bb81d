// Kernel lowering in deterministic mode (support/RunModes.h): the ticket of float atomics.
//
// The programs of a launch that add floats into the same memory (`tile.atomic_add`) form each
// sum in the order the hardware runs them, and float addition is not associative. In
// deterministic mode a kernel with a float atomic takes one more tensor parameter, `atomic_ticket`
// (two i32, zeroed by the launcher before each launch: exec/KernelLauncher.cpp), after any other
// (debug mode's record included), and its config `ordered_atomics` gives that parameter's index.
// A target whose programs run concurrently orders its programs' atomics by it
// (codegen/llvm/OrderedAtomics.cpp has the algorithm); the CPU runs such a launch on one thread in
// grid order (exec/cpu/CpuBackend.cpp). Being part of the program's text, the ticket keys every
// cache of compiled code: a program compiled in deterministic mode is never taken for one
// compiled without it. Integer atomics (debug mode's counts) give the same bits in any order and
// take no ticket.
#include "ir/lower/kernel/KernelLowering.h"

#include "support/RunModes.h"

#include <functional>

namespace tsr::ir::kernel_lowering {

void KernelLowering::finishAtomicOrder() {
  if (!runModes().deterministic) return;
  std::function<bool(const tile::Block &)> floatAtomics = [&](const tile::Block &b) {
    for (const tile::Op *op : b.ops) {
      if ((op->kind == TOp::AtomicAdd || op->kind == TOp::AtomicAddBox) && isFloat(op->operands[0]->type.dtype)) return true;
      for (const tile::Block *r : op->regions)
        if (floatAtomics(*r)) return true;
    }
    return false;
  };
  if (!floatAtomics(*f_.body)) return;
  f_.addParam("atomic_ticket", tile::Type::tensor(1, DType::I32));
  f_.config.push_back({"ordered_atomics", int64_t(f_.params.size() - 1)});
}

} // namespace tsr::ir::kernel_lowering
