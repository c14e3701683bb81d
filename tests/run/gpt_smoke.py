#!/usr/bin/env python3
"""examples/gpt in its small CPU configuration (ctest gpt_smoke): a 2-layer GPT of width 64 and
context 64 trained for a few dozen steps on the text of Debian's fortunes package, then sampled.

Checks that the corpus is the one docs/gpt.md describes (2,478,275 bytes from 40 files, a
vocabulary of 114 byte values), that the training loss falls (the mean of the last window of
steps at least 0.5 below the first window's; at the start it is near log 114 = 4.74), that the
validation loss falls below its value before training, that the curves are a well-formed SVG
chart with a point per window, and that generate.tsr samples the requested number of bytes from
the checkpoint, the same text with its key/value cache as without.

Extra arguments go to train.tsr: `--lr 0 --min_lr 0` (nothing learns) must make this test fail, which is its
negative control (ctest negative_gpt_no_learning).

Skips (exit 77) when the fortunes package is not installed, unless TSR_REQUIRE_PREREQS=1.

usage: gpt_smoke.py TSR REPO_ROOT [TRAIN FLAGS...]"""
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import chart_problems  # noqa: E402

DATA = "/usr/share/games/fortunes"
CORPUS = re.compile(r"^gpt: fortunes, (\d+) bytes from (\d+) files, vocabulary (\d+) bytes")
START = re.compile(r"^step +0/\d+  val (\S+)  val_acc")
WINDOW = re.compile(r"^step +(\d+)/(\d+)  train (\S+)  val (\S+)  val_acc +([\d.]+)%  lr \S+  (\d+) ms/step$")
# The small configuration: 2 layers of 4 heads, width 64, context 64, batches of 32 windows, no
# dropout; 40 steps (10 of warm-up), evaluated every 10 on 2 fixed validation batches.
SMALL = ["--layers", "2", "--heads", "4", "--width", "64", "--context", "64", "--dropout", "0",
         "--batch", "32", "--steps", "40", "--warmup", "10", "--eval_interval", "10",
         "--eval_batches", "2"]
BYTES, FILES, VOCAB = 2478275, 40, 114


def merged(base, extra):
    """base's flags and values, less those that `extra` gives, then extra."""
    given = {a for a in extra if a.startswith("--")}
    return [v for i in range(0, len(base), 2) if base[i] not in given for v in base[i:i + 2]] + extra


def main():
    tsr, root, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not os.path.exists(os.path.join(DATA, "zippy")):
        print(f"SKIP gpt_smoke: {DATA} is missing (Debian's fortunes; tools/setup.sh installs it)")
        return 1 if os.environ.get("TSR_REQUIRE_PREREQS") == "1" else 77
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "gpt.svg")
        ckpt = os.path.join(tmp, "gpt.safetensors")
        cmd = [tsr, "run", os.path.join(root, "examples", "gpt", "train.tsr"), "--device", "cpu",
               "--data", DATA, "--out", out, "--checkpoint", ckpt] + merged(SMALL, extra)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL: exit code {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
            return 1
        print(p.stdout, end="")
        lines = p.stdout.splitlines()
        corpus = [m for m in map(CORPUS.match, lines) if m]
        if len(corpus) != 1:
            problems.append("no `gpt: fortunes, N bytes from N files, vocabulary N bytes` line")
        elif [int(g) for g in corpus[0].groups()] != [BYTES, FILES, VOCAB]:
            problems.append(f"the corpus is {corpus[0].group(1)} bytes from {corpus[0].group(2)} files with "
                            f"{corpus[0].group(3)} byte values, not {BYTES}, {FILES} and {VOCAB}")
        start = [float(m.group(1)) for m in map(START.match, lines) if m]
        rows = [m for m in map(WINDOW.match, lines) if m]
        steps = int(merged(SMALL, extra)[merged(SMALL, extra).index("--steps") + 1])
        interval = int(merged(SMALL, extra)[merged(SMALL, extra).index("--eval_interval") + 1])
        expected = list(range(interval, steps, interval)) + [steps]
        if len(start) != 1:
            problems.append("no validation line before training (`step 0/N  val ...`)")
        if [int(m.group(1)) for m in rows] != expected:
            problems.append(f"expected window lines at steps {expected}, got {[int(m.group(1)) for m in rows]}")
        if not problems:
            train = [float(m.group(3)) for m in rows]
            val = [float(m.group(4)) for m in rows]
            if not all(math.isfinite(v) for v in train + val + start):
                problems.append(f"a loss is not finite: train {train}, val {start + val}")
            else:
                # Before training every byte is about equally likely (log 114 = 4.74 nats); a few
                # dozen steps learn the bytes' frequencies and common pairs.
                if not train[-1] < train[0] - 0.5:
                    problems.append(f"the training loss did not fall by 0.5 from the first window to the last: {train}")
                if not val[-1] < start[0] - 0.5:
                    problems.append(f"the validation loss did not fall by 0.5: {start[0]} before training, {val}")
            print(f"training loss, first window {train[0]:.4f}, last {train[-1]:.4f}; validation {start[0]:.4f} -> "
                  f"{val[-1]:.4f}; {rows[-1].group(6)} ms/step in the last window")
        problems += chart_problems(out, ("train", "validation", "accuracy"), len(expected))
        if not os.path.exists(ckpt):
            problems.append("no checkpoint was written")
        else:
            # 70 bytes after a 3-byte prompt: the key/value caches serve the first 61 tokens, the
            # sliding window the rest (the context is 64); without the cache the window serves
            # all. On the CPU both give the same scores, so the same text.
            texts = {}
            for cache in ("true", "false"):
                gen = [tsr, "run", os.path.join(root, "examples", "gpt", "generate.tsr"), "--device", "cpu",
                       "--checkpoint", ckpt, "--prompt", "Q: ", "--length", "70", "--samples", "2", "--top_k", "20",
                       "--cache", cache]
                g = subprocess.run(gen, capture_output=True, text=True, errors="replace", timeout=600)
                if g.returncode != 0:
                    problems.append(f"generate.tsr --cache {cache} failed with exit code {g.returncode}: {g.stderr.strip()}")
                    continue
                print(g.stdout, end="")
                if g.stdout.count("--- sample ") != 2 or not re.search(r"^--- 140 tokens in ", g.stdout, re.M):
                    problems.append(f"generate.tsr --cache {cache} did not print 2 samples and the count of 140 tokens")
                texts[cache] = g.stdout.split("--- sample 1 ---", 1)[-1].rsplit("\n--- 140 tokens", 1)[0]
            if len(texts) == 2 and texts["true"] != texts["false"]:
                problems.append("the text sampled with the key/value cache differs from the text sampled without it")
    for pr in problems:
        print("FAIL: " + pr)
    print("gpt smoke: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
