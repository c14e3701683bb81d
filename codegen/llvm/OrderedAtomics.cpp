// Deterministic mode's float atomics on a target whose programs run concurrently as blocks of
// threads (NVPTX: CTAs). Float addition is not associative, so `tile.atomic_add` gives bits that
// depend on the order in which the hardware runs the grid's programs; in deterministic mode the
// kernel's lowering gives such a program one more parameter, the ticket (two i32, zeroed by the
// launcher before each launch: exec/KernelLauncher.cpp), and names it in the config
// `ordered_atomics` (ir/lower/kernel/AtomicOrder.cpp). With it every program adds in one order:
//
//   start:  thread 0: id = atomic_add(ticket[0], 1) (relaxed); shared slot = id; barrier
//           every thread reads id; program_id(axis) is id as grid coordinates (x fastest)
//   atomic: thread 0 alone does the op's elements, in element order, after waiting once for its
//           turn: spin until ld.acquire(ticket[1]) == id
//   end:    thread 0: wait for the turn if no atomic ran; st.release(ticket[1], id + 1)
//
// So the atomics of program i happen before those of program i + 1 (release and acquire on
// ticket[1] at the GPU's scope order them, with the relaxed atomics before the release), and each
// element's sum is formed in program order, the same every run. Program numbers come from the
// order in which the programs start (the first counter), not from %ctaid, so no assumption about
// the hardware's dispatch order is needed for progress: the program numbered i started after
// programs 0..i-1 took their numbers, so they are resident or finished; the lowest-numbered
// program that has not passed its turn on is resident, and its turn has come (every lower
// program has passed it on), so it finishes its atomics and passes its turn on; by induction
// every program does. Only thread 0 ever waits, and no barrier follows a wait, so the other
// threads never wait on the ticket; work before a program's first atomic runs concurrently.
//
// Cost, in deterministic mode only (kernels without float atomics are unchanged): one relaxed
// atomic and one barrier per program at its start; the programs' atomic sections, from the first
// atomic to the end, one after the other, each op's elements on one thread; and a chain of one
// release-acquire hand-over per program (about a microsecond of L2 latency each), which bounds a
// launch below by the number of its programs times that.
#include "codegen/llvm/Lowering.h"

namespace tsr::codegen::lower {

void Lowering::beginOrderedAtomics() {
  const int64_t *param = nullptr;
  for (const ir::Attr &a : F.config)
    if (a.name == "ordered_atomics") param = std::get_if<int64_t>(&a.value);
  if (!param || threads == 1 || !T.ordersAtomics()) return;
  if (*param < 0 || size_t(*param) >= F.params.size() || !F.params[size_t(*param)]->type.isTensor())
    fail(F, "ordered_atomics does not name a tensor parameter");
  ticket = tensor(F.params[size_t(*param)]).data;
  Value *slot;
  {
    IRBuilder<> ab(entry, entry->getFirstInsertionPt());
    slot = T.tileBuffer(ab, 4);
    holdsTurn = ab.CreateAlloca(i1());
  }
  if (!slot) fail(F, "ordered atomics need memory the program's threads share");
  B.CreateStore(B.getFalse(), holdsTurn);
  ifThen(B.CreateICmpEQ(tid, c64(0)), [&] {
    B.CreateStore(B.CreateAtomicRMW(AtomicRMWInst::Add, ticket, B.getInt32(1), MaybeAlign(4), AtomicOrdering::Monotonic), slot);
  });
  T.barrier(B);
  orderedId = B.CreateZExt(B.CreateLoad(i32(), slot), i64(), "ordered.id");
}

Value *Lowering::orderedProgramId(int axis) {
  Value *nx = T.numPrograms(B, fn, 0), *ny = T.numPrograms(B, fn, 1);
  switch (axis) {
  case 0: return B.CreateURem(orderedId, nx);
  case 1: return B.CreateURem(B.CreateUDiv(orderedId, nx), ny);
  default: return B.CreateUDiv(orderedId, B.CreateMul(nx, ny));
  }
}

// In thread 0: once per program, spin until ticket[1] holds this program's number.
void Lowering::waitForTurn() {
  ifThen(B.CreateNot(B.CreateLoad(i1(), holdsTurn)), [&] {
    BasicBlock *spin = BasicBlock::Create(C, "turn.wait", fn), *pause = BasicBlock::Create(C, "turn.pause", fn),
               *done = BasicBlock::Create(C, "turn.held", fn);
    Value *turn = B.CreateConstInBoundsGEP1_64(i32(), ticket, 1);
    B.CreateBr(spin);
    B.SetInsertPoint(spin);
    Value *now = B.CreateZExt(T.loadAcquire(B, turn), i64());
    B.CreateCondBr(B.CreateICmpEQ(now, orderedId), done, pause);
    B.SetInsertPoint(pause);
    T.spinPause(B);
    B.CreateBr(spin);
    B.SetInsertPoint(done);
    B.CreateStore(B.getTrue(), holdsTurn);
  });
}

bool Lowering::orderedAtomic(const TOp &op) {
  if (op.kind != OpKind::AtomicAdd && op.kind != OpKind::AtomicAddBox) return false;
  // Integer (and bool) additions give the same bits in any order: only float ones wait.
  if (!isFloat(op.operands[0]->type.dtype)) return false;
  // The barrier: thread 0 reads the op's tiles, which other threads wrote (its scalars are every
  // thread's). Then thread 0 runs the op as a program of one thread: its loops are not split and
  // wait on no barrier.
  T.barrier(B);
  Redundant alone(*this);
  ifThen(B.CreateICmpEQ(tid, c64(0)), [&] {
    waitForTurn();
    lowerClassSpecial(op);
  });
  return true;
}

void Lowering::endOrderedAtomics() {
  if (!ticket) return;
  ifThen(B.CreateICmpEQ(tid, c64(0)), [&] {
    waitForTurn();
    T.storeRelease(B, B.CreateConstInBoundsGEP1_64(i32(), ticket, 1), B.CreateTrunc(B.CreateAdd(orderedId, c64(1)), i32()));
  });
}

} // namespace tsr::codegen::lower
