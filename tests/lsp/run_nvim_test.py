#!/usr/bin/env python3
"""Runs the Neovim test (tests/lsp/nvim_test.lua) headless: `nvim --headless -u tests/lsp/init.lua`
with its built-in LSP client driving `tsr lsp`. Without nvim on PATH the test is skipped
(tests/testlib.py: exit 77; a failure under TSR_REQUIRE_PREREQS=1). Ends with `N passed, N failed`.

usage: run_nvim_test.py TSR REPO_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import skip  # noqa: E402


def main():
    tsr, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    nvim = shutil.which("nvim")
    if not nvim:
        skip("lsp_neovim", "nvim is not installed; the Neovim test did not run (tools/setup.sh installs it)")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TSR=tsr, TSR_ROOT=root, TSR_NVIM_TEST=os.path.join(here, "nvim_test.lua"))
    with tempfile.TemporaryDirectory() as home:
        # A private home: the user's own config, plugins and state stay out of the test.
        env.update(HOME=home, XDG_CONFIG_HOME=home, XDG_DATA_HOME=home, XDG_STATE_HOME=home, XDG_CACHE_HOME=home)
        try:
            p = subprocess.run([nvim, "--headless", "-u", os.path.join(here, "init.lua")], cwd=root, env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired as e:
            print((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
            print("FAIL nvim did not finish in 180 s")
            print("0 passed, 1 failed")
            return 1
    lines = p.stdout.splitlines()
    for l in lines:
        print(l)
    summary = lines[-1] if lines else ""
    if p.returncode != 0 or not summary.endswith(" 0 failed"):
        if p.stderr.strip():
            print("nvim stderr:\n" + p.stderr[-3000:])
        if not summary.endswith("failed"):
            print("0 passed, 1 failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
