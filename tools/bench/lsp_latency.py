#!/usr/bin/env python3
"""Language-server latency (issue: fresh diagnostics for a 5,000-line file within 300 ms of an
edit). Generates the module with gen_module.py, opens it in `tsr lsp`, then 20 times: makes one
incremental edit and measures the time until the publishDiagnostics of that version arrives.
Prints each sample and the median. Not a test: numbers on shared machines are noisy.

usage: tools/bench/lsp_latency.py [TSR] [LINES] [--debounce-ms N] [--edit name|syntax] [--at FRACTION]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "lsp"))
from lspclient import Client, file_uri  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr", nargs="?", default=os.path.join(ROOT, "build-lsp", "tools", "tsr", "tsr"))
    ap.add_argument("lines", nargs="?", type=int, default=5000)
    ap.add_argument("--debounce-ms", type=int, default=None, help="the server's debounce (default: its own)")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--at", type=float, default=0.5, help="where the edits are, as a fraction of the file (default 0.5)")
    ap.add_argument("--edit", choices=["name", "syntax"], default="name",
                    help="name: alternate a defined and an undefined name (the text always parses); "
                         "syntax: alternate a syntax error (an unclosed parenthesis) and its fix")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.tsr")
        with open(path, "w") as f:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "gen_module.py"), str(args.lines)],
                           stdout=f, check=True)
        text = open(path).read()
        lines = text.split("\n")
        print(f"module: {len(lines)} lines, {len(text)} bytes")
        argv = [args.tsr, "lsp"] + ([f"--debounce-ms={args.debounce_ms}"] if args.debounce_ms is not None else [])
        c = Client(argv)
        c.initialize()
        uri = file_uri(path)
        t0 = time.perf_counter()
        c.open(uri, text, 1)
        d = c.diagnostics(uri, 1, timeout=60)
        print(f"open -> diagnostics: {(time.perf_counter() - t0) * 1000:.0f} ms, {len(d['diagnostics'])} diagnostics")
        # The edits alternate between introducing and removing an error in the middle of the file,
        # so that every published version differs from the last.
        target = next(i for i in range(int(len(lines) * args.at), len(lines)) if lines[i].strip().startswith("h = nn.layer_norm(x)"))
        col = lines[target].index("x)")
        samples = []
        version = 1
        for i in range(args.samples):
            version += 1
            if args.edit == "name":
                new = "y" if i % 2 == 0 else "x"  # `y` is undefined there: one error, then none
                end = col + 1
            else:
                new = "x(" if i % 2 == 0 else "x"  # `(` is never closed: syntax errors, then none
                end = col + (1 if i % 2 == 0 else 2)
            t = time.perf_counter()
            c.change(uri, version, [{"range": {"start": {"line": target, "character": col},
                                               "end": {"line": target, "character": end}}, "text": new}])
            d = c.diagnostics(uri, version, timeout=60)
            ms = (time.perf_counter() - t) * 1000
            if d is None:
                print("no diagnostics for version", version)
                return 1
            samples.append(ms)
            print(f"edit {i + 1:2}: {ms:6.1f} ms, {len(d['diagnostics'])} diagnostics")
            time.sleep(0.05)
        status = c.call("tessera/status")["result"]
        c.close()
        print(f"server: last check {status['lastCheckMs']:.1f} ms, VmRSS {status['vmRssKb']} kB")
        print(f"edit -> publishDiagnostics ({args.edit} edits): median {statistics.median(samples):.1f} ms of {len(samples)} "
              f"(min {min(samples):.1f}, max {max(samples):.1f})")
        breaking, fixing = samples[0::2], samples[1::2]
        print(f"  edits that introduce the error: median {statistics.median(breaking):.1f} ms; "
              f"edits that remove it: median {statistics.median(fixing):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
