#!/usr/bin/env bash
# Packs what tools/gpu/py_cuda.sh needs into DIR (default .gpu-bin/python, which .gitignore keeps
# out of the repository), for a machine with an NVIDIA GPU that has no compiler for this project:
#   tessera.tar.xz            the `tessera` package from BUILD/python (the extension modules
#                             stripped; LLVM is linked into _compiler), its Python files, the stdlib
#   lib/*.so*.xz              shared libraries the modules link that such a machine may lack (ANTLR)
#   model.cpu.bundle, model.cuda.bundle   tests/python/model.tsr for each target, traced with main's
#                             shapes (the GPU machine has no tsrc)
#   cuda_gpu_external.xz      the backend over borrowed memory and a borrowed stream (C++, no Python)
#   ABI                       the extension modules' Python ABI (EXT_SUFFIX): they import only
#                             under a Python of that version
#   tools/gpu/pack_python.sh [DIR]     (BUILD: TSR_BUILD_DIR, default build)
#
# TSR_PACK_PYTHON=PYTHON: the modules for that Python's version instead of the build's (the GPU
# machine's PyTorch may live under another Python): only the package's pybind11 glue
# (python/src/*.cpp) is compiled again, against PYTHON's headers, and linked with BUILD's
# libraries by BUILD's own link commands, into BUILD/python-abi/.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TSR_BUILD_DIR:-build}
DIR=${1:-.gpu-bin/python}
rm -rf "$DIR"
mkdir -p "$DIR/lib"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
MODULES=("$BUILD"/python/tessera/_*.so)
if [[ -n "${TSR_PACK_PYTHON:-}" ]]; then
  inc=$("$TSR_PACK_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  suffix=$("$TSR_PACK_PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  built=$(ls "$BUILD"/python/tessera/_runtime*.so | sed -E 's/.*_runtime(.*)$/\1/')
  built_inc=$(sed -n 's/^_\?Python3_INCLUDE_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
  [[ -n "$built_inc" ]] || built_inc=$(grep -o -- '-isystem [^ ]*include/python3[.0-9]*' "$BUILD/build.ninja" | head -1 | cut -d' ' -f2)
  alt=python-abi
  mkdir -p "$BUILD/$alt/CMakeFiles/tsr_python_core.dir/src" "$BUILD/$alt/CMakeFiles/tsr_python_runtime.dir/src" \
           "$BUILD/$alt/CMakeFiles/tsr_python_compiler.dir/src"
  MODULES=()
  for mod in runtime compiler; do
    # The glue's compile, archive and link commands as the build runs them, retargeted.
    ninja -C "$BUILD" -t commands "python/tessera/_$mod$built" |
      grep -E 'python/src/|libtsr_python_core\.a && |-o python/tessera/_' |
      sed -e "s#$built_inc#$inc#g" -e "s#python/CMakeFiles/#$alt/CMakeFiles/#g" \
          -e "s#python/libtsr_python_core.a#$alt/libtsr_python_core.a#g" \
          -e "s#python/tessera/_$mod$built#$alt/_$mod$suffix#g" >"$stage/$mod.sh"
    (cd "$BUILD" && bash -e "$stage/$mod.sh")
    MODULES+=("$BUILD/$alt/_$mod$suffix")
  done
  echo "the modules built again for $("$TSR_PACK_PYTHON" --version) ($inc)"
fi
mkdir -p "$stage/tessera"
cp "$BUILD/python/tessera/__init__.py" "$BUILD/python/tessera/torch.py" "$stage/tessera/"
cp -r "$BUILD/python/tessera/stdlib" "$stage/tessera/"
for so in "${MODULES[@]}"; do
  strip --strip-unneeded -o "$stage/tessera/$(basename "$so")" "$so"
done
tar -C "$stage" -cf - tessera | xz -T0 -6 >"$DIR/tessera.tar.xz"
echo "packed $DIR/tessera.tar.xz ($(du -h "$DIR/tessera.tar.xz" | cut -f1))"
basename "${MODULES[0]}" | sed -E 's/^_[a-z]+(.*)$/\1/' >"$DIR/ABI"
echo "the modules' ABI: $(cat "$DIR/ABI")"
# Beyond the C/C++ runtime, libz and libzstd: ANTLR's runtime (the modules link it shared).
for so in "$BUILD"/python/tessera/_*.so "$BUILD/tests/cuda/cuda_gpu_external"; do
  ldd "$so" | awk '/=> \// {print $3}'
done | sort -u | grep -E 'libantlr4' | while read -r l; do
  xz -T0 -6 -c "$l" >"$DIR/lib/$(basename "$l").xz"
  echo "packed $DIR/lib/$(basename "$l").xz"
done
for t in cpu cuda; do
  "$BUILD/tools/tsrc/tsrc" tests/python/model.tsr -o "$DIR/model.$t.bundle" --target "$t" --trace ""
done
strip -o "$DIR/cuda_gpu_external" "$BUILD/tests/cuda/cuda_gpu_external"
xz -T0 -6 -f "$DIR/cuda_gpu_external"
du -sh "$DIR"
