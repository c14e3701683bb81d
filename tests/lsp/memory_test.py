#!/usr/bin/env python3
"""Memory of `tsr lsp` over many edits: opens a generated module and sends EDITS incremental
edits, each one keystroke (statements typed into function bodies a character at a time, then
erased with backspaces), waits for the diagnostics of every 50th version so that the checker
really runs, and compares the server's VmRSS (/proc/PID/status) and heap in use before and after.

usage: memory_test.py TSR REPO_ROOT [EDITS] [LINES]
Prints the figures and ends with `N passed, N failed`. Fails if the heap in use grew by more than
5% + 1 MB (a leak), or VmRSS by more than 25% + 8 MB (fragmentation beyond what it settles at).
"""
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lspclient import Client, file_uri  # noqa: E402


def main():
    tsr, root = sys.argv[1], sys.argv[2]
    edits = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    nlines = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    text = subprocess.run([sys.executable, os.path.join(root, "tools", "bench", "gen_module.py"), str(nlines)],
                          capture_output=True, text=True, check=True).stdout
    tmp = tempfile.mkdtemp(prefix="tsr-lsp-mem-")
    path = os.path.join(tmp, "module.tsr")
    with open(path, "w") as f:
        f.write(text)
    uri = file_uri(path)
    lines = text.split("\n")
    rnd = random.Random(1)
    c = Client([tsr, "lsp"])
    c.initialize()
    c.open(uri, text)
    if c.diagnostics(uri, 1, timeout=60) is None:
        print("no diagnostics after open\n0 passed, 1 failed")
        return 1
    version = 1
    # Typing: a statement is typed into a function body one character at a time, then erased
    # with backspaces; every keystroke is one edit (so half of the versions have a syntax error).
    statements = ["t = x * 2.0", "z = nn.relu(h)", "q = reshape(q, (B, S, heads, D // heads))",
                  "acc = tile.dot(a, b, acc)", "print(f\"step {step}\")", "s = sum(C, axis=0)"]
    bodies = [i + 1 for i, l in enumerate(lines) if l.startswith("def ") or l.startswith("@")]
    script = []  # (line, character, text typed, or "\b" for a backspace)

    def plan():
        l = rnd.choice(bodies)
        while not lines[l].startswith("    "):
            l += 1
        stmt = "    " + rnd.choice(statements) + "\n"
        # Typed at the start of line l: each character lands after the ones before it.
        col = 0
        out = []
        for ch in stmt:
            out.append((l, col, ch))
            if ch == "\n":
                l, col = l + 1, 0
            else:
                col += 1
        back = []
        for (ll, cc, ch) in reversed(out):
            back.append((ll, cc, "\b\n" if ch == "\n" else "\b"))
        return out + back

    def edit():
        nonlocal version, script
        if not script:
            script = plan()
        l, ch, text = script.pop(0)
        version += 1
        if text.startswith("\b"):  # backspace: remove the character typed at (l, ch)
            end = {"line": l + 1, "character": 0} if text == "\b\n" else {"line": l, "character": ch + 1}
            c.change(uri, version, [{"range": {"start": {"line": l, "character": ch}, "end": end}, "text": ""}])
        else:
            c.change(uri, version, [{"range": {"start": {"line": l, "character": ch}, "end": {"line": l, "character": ch}}, "text": text}])
        if version % 50 == 0:
            if c.diagnostics(uri, version, timeout=60) is None:
                raise RuntimeError(f"no diagnostics for version {version}")
            c.pending.clear()

    last = {}

    def idle_figures():
        last["diagnostics"] = c.diagnostics(uri, version, timeout=60)
        time.sleep(1.5)  # the server gives freed memory back after a second of idleness
        st = c.call("tessera/status")["result"]
        return c.rss_kb(), st["heapInUseKb"], st

    def finish_statement():
        # Measured between statements, when the text is the generated module again.
        n = 0
        while script:
            edit()
            n += 1
        return n

    warmup = 500
    for _ in range(warmup):
        edit()
    warmup += finish_statement()
    before, heap_before, _ = idle_figures()
    trajectory = [(0, before, heap_before)]
    t0 = time.time()
    sent = 0
    step = max(1, edits // 5)
    while sent < edits:
        for _ in range(min(step, edits - sent)):
            edit()
            sent += 1
        sent += finish_statement()
        rss, heap, status = idle_figures()
        trajectory.append((sent, rss, heap))
    after, heap_after = trajectory[-1][1], trajectory[-1][2]
    final = last["diagnostics"]
    clean = final is not None and final["diagnostics"] == []
    if not clean:
        print("the text did not come back to the original:", final and final["diagnostics"][:3])
    elapsed = time.time() - t0
    code = c.close()
    print(f"module: {len(lines)} lines; {sent} incremental edits after {warmup} warm-up edits; "
          f"{status['checks']} checks ({status['superseded']} superseded), "
          f"{status['parsedStatements']} statements parsed, {status['reusedStatements']} reused; {elapsed:.1f} s")
    for n, rss, heap in trajectory:
        print(f"  after {n:6} edits: VmRSS {rss:7} kB, heap in use {heap:7} kB")
    print(f"VmRSS before: {before} kB, after: {after} kB ({(after - before) / before * 100:+.1f}%); "
          f"heap in use before: {heap_before} kB, after: {heap_after} kB ({(heap_after - heap_before) / heap_before * 100:+.1f}%)")
    ok = clean and after <= before * 1.25 + 8192 and heap_after <= heap_before * 1.05 + 1024 and code == 0
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
