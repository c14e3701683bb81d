"""Where a Tessera program's GPU time goes, from Nsight Compute: runs
    ncu --metrics gpu__time_duration.sum --csv --print-units base -- CMD...
and prints the kernels' total time grouped by the kind of program (the last part of a graph
kernel's name: matmul, row, elementwise, reduce, copy; a hand-written kernel's own name) and the
top kernels by total time. ncu serializes the kernels, so the sum is the device time of each
kernel alone, not the program's wall time.
    python3 kernel_times.py [--top N] -- CMD...
Kernels are told apart by name, block and grid size (one program text runs at several shapes)."""
import collections
import csv
import io
import re
import subprocess
import sys

args = sys.argv[1:]
top = 15
if args[:1] == ["--top"]:
    top, args = int(args[1]), args[2:]
if args[:1] == ["--"]:
    args = args[1:]
r = subprocess.run(["ncu", "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base", "--"] + args,
                   capture_output=True, text=True)
rows = [l for l in r.stdout.splitlines() if l.startswith('"')]
if not rows:
    print("no kernels profiled; ncu said:", r.stdout[-2000:], r.stderr[-2000:])
    sys.exit(1)
by_kernel = collections.defaultdict(lambda: [0.0, 0])
for row in csv.DictReader(io.StringIO("\n".join(rows))):
    if row.get("Metric Name") != "gpu__time_duration.sum":
        continue
    ns = float(row["Metric Value"].replace(",", ""))
    # The same program text runs at several shapes: tell launches apart by block and grid too.
    k = by_kernel[f'{row["Kernel Name"]} block {row.get("Block Size", "?")} grid {row.get("Grid Size", "?")}']
    k[0] += ns
    k[1] += 1
total = sum(v[0] for v in by_kernel.values())
kinds = collections.defaultdict(lambda: [0.0, 0])
for name, (ns, n) in by_kernel.items():
    m = re.search(r"_step\d+_([a-z]+)", name)
    kind = m.group(1) if m else name.split(" block ")[0]
    kinds[kind][0] += ns
    kinds[kind][1] += n
print(f"{len(by_kernel)} kernels, {sum(v[1] for v in by_kernel.values())} launches, {total / 1e6:.1f} ms of device time")
print(f"{'kind':<40}{'ms':>10}{'share':>8}{'launches':>10}")
for kind, (ns, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
    print(f"{kind[:40]:<40}{ns / 1e6:>10.2f}{ns / total:>8.1%}{n:>10}")
print(f"top {top} kernels:")
for name, (ns, n) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"{name[:80]:<80}{ns / 1e6:>10.2f} ms{n:>6} x {ns / n / 1e3:>9.1f} us")
