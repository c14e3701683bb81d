#!/usr/bin/env bash
# ctest runtime_only: support/ and runtime/ configure and build with CMake and a C++ compiler
# alone (-DTSR_RUNTIME_ONLY=ON: no LLVM, ANTLR or IR found or used), into a fresh folder: the
# tensors, formats, numerics, random keys, the CUDA driver (dlopen), the device allocator and the
# bundle reader, and the bundle checker that links them. Then checks that no compile command
# names an LLVM or ANTLR include folder. With --negative: the same build with a runtime source
# that includes an LLVM header (TSR_RUNTIME_ONLY_BREAK) must fail.
#   runtime_only.sh SOURCE_DIR [--negative]
set -uo pipefail
src=$1 negative=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/runtime_only.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
extra=()
[[ $negative == --negative ]] && extra=(-DTSR_RUNTIME_ONLY_BREAK=ON)
if ! cmake -S "$src" -B "$work" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTSR_RUNTIME_ONLY=ON "${extra[@]}" >"$work/configure.log" 2>&1; then
  echo "FAIL runtime_only: the runtime-only configuration failed:"; tail -n 30 "$work/configure.log"; exit 1
fi
targets=(tsr_runtime tsr_cuda tsr_bundle_rt tsr-bundle-check)
# The control compiles only the source that includes LLVM.
[[ $negative == --negative ]] && targets=($(ninja -C "$work" -t targets all | grep -o '^[^:]*needs_llvm\.cpp\.o'))
ninja -C "$work" "${targets[@]}" >"$work/build.log" 2>&1
rc=$?
if [[ $negative == --negative ]]; then
  if [[ $rc -eq 0 ]]; then echo "FAIL negative_runtime_only: a runtime source that includes LLVM built without LLVM"; exit 1; fi
  grep -m1 "llvm/IR/LLVMContext.h" "$work/build.log" >/dev/null || { echo "FAIL negative_runtime_only: it failed, but not at the LLVM include:"; tail -n 20 "$work/build.log"; exit 1; }
  echo "ok   negative_runtime_only: the runtime-only build refuses a runtime source that includes LLVM"; exit 0
fi
if [[ $rc -ne 0 ]]; then echo "FAIL runtime_only: the runtime does not build without LLVM and ANTLR:"; tail -n 30 "$work/build.log"; exit 1; fi
if grep -Eiq -- '-I[^ ]*(llvm|antlr)|-isystem [^ ]*(llvm|antlr)' "$work/compile_commands.json"; then
  echo "FAIL runtime_only: a compile command names an LLVM or ANTLR include folder:"
  grep -Eio -- '-(I|isystem )[^ ]*(llvm|antlr)[^ ]*' "$work/compile_commands.json" | sort -u | head; exit 1
fi
n=$(grep -c '"file"' "$work/compile_commands.json")
echo "ok   runtime_only: support/ and runtime/ built alone ($n sources, no LLVM or ANTLR include folder); tsr-bundle-check linked"
