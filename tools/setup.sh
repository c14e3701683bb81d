#!/usr/bin/env bash
# Installs what Tessera builds and tests with, from Debian's packages. Idempotent: packages that
# are already installed are left alone, and nothing is downloaded when all are present.
set -euo pipefail

PACKAGES=(
  cmake ninja-build ccache g++ clang libclang-rt-14-dev   # build; clang + libFuzzer for the fuzz target
  llvm-19-dev zlib1g-dev libzstd-dev libxml2-dev libedit-dev libffi-dev   # LLVM 19 (code generation)
  antlr4 default-jre-headless libantlr4-runtime-dev        # the grammar (ANTLR 4.7.2 tool, 4.9 runtime)
  libcli11-dev doctest-dev nlohmann-json3-dev              # command line, unit tests, JSON
  python3 python3-numpy python3-torch                      # test oracles
  python3-dev python3-venv pybind11-dev libdlpack-dev       # the tessera Python package (python/)
  neovim                                                   # the language server's editor test (0.7)
  libonnx-dev libprotobuf-dev python3-onnx libonnx-testdata   # ONNX import/export and its backend tests
  dataset-fashion-mnist                                    # Fashion-MNIST's IDX files (examples/dino)
  fortunes                                                 # the fortune files' text (examples/gpt)
  libgloo-dev                                              # Gloo: collectives between CPU ranks (tsr run --devices)
)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "tessera setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "tessera setup: all packages present"
fi

if [[ -x /usr/local/cuda/bin/ptxas ]]; then
  echo "tessera setup: CUDA toolkit found at /usr/local/cuda"
else
  echo "tessera setup: WARNING: the CUDA toolkit (ptxas, cuda.h) was NOT found at /usr/local/cuda;"
  echo "tessera setup: WARNING: GPU code is still generated but cannot be assembled or checked here."
fi
