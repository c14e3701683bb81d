#!/usr/bin/env bash
# Configures and builds Tessera into build/ (Release with debug info, Ninja, ccache when present).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# TSR_PYTHON=ON: the `tessera` Python package's modules too (docs/python.md; every library as
# position-independent code), so that ctest python_package runs with the rest.
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSR_PYTHON=ON "$@"
fi
ninja -C "$BUILD_DIR" -j "$JOBS"
# ninja 1.11 keeps an object whose source or header changed while it was compiled (someone's save
# during the build): tools/stale_outputs.py removes such objects, and the second ninja rebuilds
# them and relinks.
if ! python3 tools/stale_outputs.py -C "$BUILD_DIR" --quiet >/dev/null; then
  python3 tools/stale_outputs.py -C "$BUILD_DIR" --fix
  ninja -C "$BUILD_DIR" -j "$JOBS"
fi
