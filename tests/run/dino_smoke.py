#!/usr/bin/env python3
"""examples/dino/dino.tsr in its small CPU configuration: DINO pretraining of a tiny ViT on a
subset of Fashion-MNIST for a few epochs. Checks that the output has the random backbone's k-NN
line and one line per epoch, that the DINO loss falls (the last epoch's mean at least 0.5 below the
first's), that the teacher's k-NN accuracy is well above chance and differs from the randomly
initialised backbone's in some epoch (the teacher moved), and that the curves are a well-formed
SVG chart with one point per epoch, and that the teacher's targets collapsed neither towards
uniform nor onto one prototype (the last epoch's collapse diagnostics, DINO's section 5.3); then a
short run with Gram anchoring, whose second epoch must print a finite positive Gram loss (and its
first none). Prints the k-NN gain over the random backbone (measured on the same images) without
asserting it: in these 160 steps it is about 2 points, too close to the noise of 1000 test images
to assert on every machine; the gain needs about 1000 steps (docs/dino.md).

Extra arguments are passed to the program: `--lr 0` (no learning: the loss rises as the center
flattens the teacher's targets, and the teacher stays the random backbone) must make this test
fail, which is its negative control (ctest negative_dino_no_learning); `--gram-only --gram_weight 0`
(the Gram run alone, without its anchor) must fail too (ctest negative_dino_gram_off), and so must
`--teacher_temp 0.1 --warmup_teacher_temp 0.1` (no sharpening: the targets flatten towards uniform;
ctest negative_dino_uniform_collapse).

Skips (exit 77) when the data set is not installed, unless TSR_REQUIRE_PREREQS=1.

usage: dino_smoke.py TSR REPO_ROOT [--gram-only] [DINO FLAGS...]"""
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import chart_problems  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
RANDOM = re.compile(r"^random backbone  knn_acc +([\d.]+)%  time ([\d.]+)s$")
EPOCH = re.compile(r"^epoch +(\d+)/(\d+)  loss (\S+)  knn_acc +([\d.]+)%  random +([\d.]+)%  time ([\d.]+)s$")
# The collapse diagnostics printed under each epoch line (Caron et al. 2021, section 5.3).
STATS = re.compile(r"^  teacher H\(P_t\) ([\d.]+) \(uniform ([\d.]+)\)  H\(mean P_t\) ([\d.]+)  KL\(P_t\|\|P_s\) (\S+)")
GRAM_EPOCH = re.compile(r"^epoch +(\d+)/(\d+)  loss (\S+)  gram (\S+)  knn_acc")
# The smoke configuration: a 2-block ViT of width 32 on 16-pixel global and 8-pixel local crops,
# 2048 training images (5 epochs of 32 steps), k-NN of 1000 test images against 2000 training
# images. The teacher's temperature is 0.03, a little below DINO's 0.04, which keeps the targets
# sharper in so short a run (docs/dino.md).
SMALL = ["--epochs", "5", "--batch", "64", "--train_images", "2048", "--bank_images", "2000",
         "--test_images", "1000", "--eval_batch", "1000", "--global_size", "16", "--local_size", "8",
         "--n_local", "2", "--patch", "4", "--dim", "32", "--depth", "2", "--heads", "2",
         "--mlp_ratio", "2", "--hidden", "64", "--bottleneck", "32", "--out_dim", "128",
         "--lr", "2e-3", "--momentum", "0.99", "--teacher_temp", "0.03"]


# The Gram anchoring run: the same model, 2 epochs of 8 steps, the anchor from epoch 2 on both
# blocks against a snapshot retaken every epoch.
GRAM = ["--epochs", "2", "--train_images", "512", "--bank_images", "1000", "--gram_weight", "1.0",
        "--gram_layers", "1,2", "--gram_start", "2", "--gram_refresh", "1"]


def merged(base, extra):
    """base's flags and values, less those that `extra` gives, then extra."""
    given = {a for a in extra if a.startswith("--")}
    return [v for i in range(0, len(base), 2) if base[i] not in given for v in base[i:i + 2]] + extra


def gram_run(tsr, root, extra, tmp):
    """The Gram anchoring run: epoch 1 has no gram term, epoch 2 a finite positive one."""
    cmd = [tsr, "run", os.path.join(root, "examples", "dino", "dino.tsr"), "--device", "cpu",
           "--data", DATA, "--out", os.path.join(tmp, "gram.svg")] + merged(merged(SMALL, GRAM), extra)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return [f"the Gram anchoring run failed with exit code {p.returncode}: {p.stderr.strip()}"]
    lines = p.stdout.splitlines()
    print("\n".join(l for l in lines if l.startswith("epoch ") and "loss" in l))
    grams = [float(m.group(4)) for m in map(GRAM_EPOCH.match, lines) if m]
    if len(grams) != 1:
        return [f"the Gram anchoring run printed a gram loss in {len(grams)} epochs, not in epoch 2 alone"]
    if not (math.isfinite(grams[0]) and grams[0] > 0):
        return [f"the Gram anchoring loss is {grams[0]}"]
    return []


def main():
    tsr, root, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    # --gram-only: the Gram anchoring run alone (its negative control passes --gram_weight 0)
    gram_only = "--gram-only" in extra
    extra = [a for a in extra if a != "--gram-only"]
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print(f"SKIP dino_smoke: {DATA} is missing (Debian's dataset-fashion-mnist; tools/setup.sh installs it)")
        return 1 if os.environ.get("TSR_REQUIRE_PREREQS") == "1" else 77
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "dino.svg")
        if gram_only:
            problems = gram_run(tsr, root, extra, tmp)
            for pr in problems:
                print("FAIL: " + pr)
            print("dino smoke (Gram anchoring): " + ("ok" if not problems else f"{len(problems)} problem(s)"))
            return 1 if problems else 0
        # (a flag among the extra arguments replaces SMALL's)
        cmd = [tsr, "run", os.path.join(root, "examples", "dino", "dino.tsr"), "--device", "cpu",
               "--data", DATA, "--out", out] + merged(SMALL, extra)
        # The compiled executor: on the 2-core build machine the run takes about 37 s from an
        # empty compilation cache (25 s warm); the reference evaluator takes 6x as long per step.
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL: exit code {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
            return 1
        print(p.stdout, end="")
        lines = p.stdout.splitlines()
        randoms = [m for m in map(RANDOM.match, lines) if m]
        rows = [m for m in map(EPOCH.match, lines) if m]
        stats = [m for m in map(STATS.match, lines) if m]
        epochs = int(SMALL[SMALL.index("--epochs") + 1])
        if len(randoms) != 1:
            problems.append("no `random backbone  knn_acc` line")
        if [int(m.group(1)) for m in rows] != list(range(1, epochs + 1)):
            problems.append(f"expected epoch lines 1..{epochs}")
        if not problems:
            losses = [float(m.group(3)) for m in rows]
            accs = [float(m.group(4)) for m in rows]
            random_acc = float(randoms[0].group(1))
            if not all(math.isfinite(v) for v in losses):
                problems.append(f"a loss is not finite: {losses}")
            # The cross-entropy starts near 4 (the teacher sharp, the student its copy on other
            # crops) and falls as the student learns to match the teacher across views; without
            # learning it rises towards log(128) = 4.85 as the center flattens the targets.
            elif not losses[-1] < losses[0] - 0.5:
                problems.append(f"the DINO loss did not fall by 0.5: {losses}")
            if any(float(m.group(5)) != random_acc for m in rows):
                problems.append("the random backbone's accuracy changed between lines")
            # Chance is 10%; a random backbone's features already reach about 58% (the k-NN
            # sees the images through them).
            if not accs[-1] > 10.0 + 20.0:
                problems.append(f"the k-NN accuracy stayed near chance: {accs}")
            # Collapse (DINO's section 5.3): the teacher's targets must stay sharper than uniform
            # (mean entropy below 0.6 log K; this run ends near 0.39 log K, and with the teacher as
            # soft as the student, --teacher_temp 0.1, the centering flattens them to above 0.9 log K,
            # the control negative_dino_uniform_collapse) and must not all pick one prototype (the
            # entropy of their batch mean above 1 nat; it ends near 3.1).
            if len(stats) != epochs:
                problems.append(f"expected {epochs} `teacher H(P_t)` lines, found {len(stats)}")
            else:
                h, uniform, h_mean = (float(stats[-1].group(i)) for i in (1, 2, 3))
                if not h < 0.6 * uniform:
                    problems.append(f"the teacher's targets collapsed towards uniform: H(P_t) {h} of {uniform} in the last epoch")
                if not h_mean > 1.0:
                    problems.append(f"the teacher's targets collapsed onto one prototype: H(mean P_t) {h_mean}")
            if all(a == random_acc for a in accs):
                problems.append(f"the teacher's k-NN accuracy is the random backbone's in every epoch ({random_acc}%): it did not move")
            if not problems:
                print(f"k-NN gain over the random backbone: {accs[-1] - random_acc:+.1f} points at the end, "
                      f"{max(accs) - random_acc:+.1f} at best (not asserted)")
        if not re.search(r"^final k-NN accuracy [\d.]+% \(random backbone [\d.]+%\)", p.stdout, re.M):
            problems.append("no final k-NN accuracy line")
        problems += chart_problems(out, ("loss", "k-NN of the teacher", "k-NN of the random backbone"), epochs,
                                   ("DINO loss", "k-NN, teacher", "k-NN, random backbone"))

        problems += gram_run(tsr, root, extra, tmp)

    for pr in problems:
        print("FAIL: " + pr)
    print("dino smoke: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
