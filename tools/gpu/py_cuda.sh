#!/usr/bin/env bash
# The Python package on a machine with an NVIDIA GPU (docs/python.md): CUDA torch.Tensors in and
# out without copies, on PyTorch's current stream, against PyTorch. Builds nothing: BIN_DIR is
# what tools/gpu/pack_python.sh made on a build machine. Ends with `N passed, N failed`.
#
#   tools/gpu/py_cuda.sh [BIN_DIR] [OUT_DIR]      (defaults: .gpu-bin/python, $OUT or a temporary folder)
#
# Steps (each PASS or FAIL with its log's last lines; every log in OUT_DIR/py_cuda.log):
#   gpu                the driver and PyTorch see a GPU (a failure here fails everything after it)
#   cuda_gpu_external  the C++ backend over memory and a stream its caller owns (no Python needed)
#   python_abi         a python3 with CUDA torch whose version matches the modules' ABI (BIN_DIR/ABI);
#                      none: the Python steps cannot run (a FAIL naming both versions)
#   python_import      the package imports there, and tessera.load opens the cuda bundle on cuda:0
#   python_cuda        tests/python/test_tessera_cuda.py: values, zero copies, the stream, bad input,
#                      gradients and the ViT trained on the GPU against PyTorch
set -uo pipefail
# The repository's root: above tools/gpu/ (this script) or above out/ (a copy of it).
here=$(cd "$(dirname "$0")" && pwd)
for root in "$here/.." "$here/../.."; do
  if [[ -f "$root/tests/python/test_tessera_cuda.py" ]]; then cd "$root"; break; fi
done
BIN=${1:-.gpu-bin/python}
OUT=${2:-${OUT:-$(mktemp -d)}}
mkdir -p "$OUT"
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "py_cuda: no folder ${1:-.gpu-bin/python} (make it with tools/gpu/pack_python.sh)"; echo "0 passed, 1 failed"; exit 1; }
LOG="$OUT/py_cuda.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
passed=0
failed=0
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

step() { # step NAME COMMAND: PASS or FAIL, the step's log in $OUT/NAME.log
  local name=$1 cmd=$2 start=$SECONDS
  if bash -c "$cmd" >"$OUT/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - start)) s)"
    passed=$((passed + 1))
  else
    echo "FAIL $name ($((SECONDS - start)) s): last lines of $OUT/$name.log:"
    tail -n 25 "$OUT/$name.log" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
  cat "$OUT/$name.log" >>"$LOG.steps"
}
fail_step() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() {
  cat "$LOG.steps" >>"$LOG" 2>/dev/null; rm -f "$LOG.steps"
  echo "py_cuda: logs in $OUT"
  echo "$passed passed, $failed failed"
  exit $((failed > 0))
}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The modules link ANTLR's runtime shared; pack_python.sh ships it.
for l in "$BIN"/lib/*.xz; do [[ -f "$l" ]] && xz -dc "$l" >"$WORK/$(basename "${l%.xz}")"; done
export LD_LIBRARY_PATH="$WORK${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "py_cuda: $(date -u '+%Y-%m-%d %H:%M UTC'), BIN $BIN, OUT $OUT"
nvidia-smi -L 2>&1 | sed 's/^/  /'

step gpu "python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda); assert torch.cuda.is_available(), \"torch sees no GPU\"; print(torch.cuda.get_device_name(0))'"
if [[ $failed -gt 0 ]]; then finish; fi
cat "$OUT/gpu.log" | sed 's/^/  /'

if [[ -f "$BIN/cuda_gpu_external.xz" ]]; then
  xz -dc "$BIN/cuda_gpu_external.xz" >"$WORK/cuda_gpu_external" && chmod +x "$WORK/cuda_gpu_external"
  step cuda_gpu_external "'$WORK/cuda_gpu_external'"
else
  fail_step cuda_gpu_external "$BIN/cuda_gpu_external.xz is missing"
fi

# The extension modules import only under the Python version they were built for.
ABI=$(cat "$BIN/ABI" 2>/dev/null)
PY=""
for p in python3 python3.11 python3.12 python3.13 /usr/bin/python3 /usr/local/bin/python3; do
  command -v "$p" >/dev/null 2>&1 || continue
  suffix=$("$p" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
  if [[ "$suffix" == "$ABI" ]] && "$p" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then PY=$(command -v "$p"); break; fi
done
if [[ -z "$PY" ]]; then
  fail_step python_abi "the modules were built for ${ABI:-?} (BIN_DIR/ABI); python3 here is $(python3 -c 'import sys, sysconfig; print(sys.version.split()[0], sysconfig.get_config_var("EXT_SUFFIX"))' 2>&1), and no python on PATH with CUDA torch has that ABI: build the modules for this Python (python3-dev of its version and pybind11 on the build machine) and pack again"
  finish
fi
echo "PASS python_abi ($PY: $ABI)"
passed=$((passed + 1))

mkdir -p "$WORK/pkg"
tar -C "$WORK/pkg" -xJf "$BIN/tessera.tar.xz" || { fail_step python_import "cannot unpack $BIN/tessera.tar.xz"; finish; }
step python_import "'$PY' -c 'import sys; sys.path.insert(0, \"$WORK/pkg\"); import tessera, tessera.torch; m = tessera.load(\"$BIN/model.cuda.bundle\", device=\"cuda\"); print(m)'"
step python_cuda "PYTHONUNBUFFERED=1 TSR_TORCH_PYTHON='$PY' '$PY' tests/python/test_tessera_cuda.py '$WORK/pkg' '$WORK/work' --bundles '$BIN'"
grep -E "^(ok|FAIL|SKIP|GPU:|ViT)" "$OUT/python_cuda.log" | sed 's/^/  /'
finish
