#!/usr/bin/env python3
"""Where a run's time goes, from a `tsr run --profile` trace (docs/profiling.md).

    tools/bench/trace_summary.py trace.json [--graph NAME | --at FILE:LINE] [--top 15] [--skip 1] [--steps N] [--by-grid]

For the calls of one graph (by default the graph whose calls take the most time in all; `--at`
takes the calls made at a source place, such as a training step's `value_and_grad` line; `--skip N`
leaves out each graph's first N calls, which compile): wall time per call, the device time of the
kernels its launches ran, the launches and host time per launch, and the step kinds. Then the
kernels of those calls by device time, grouped by name and source place. A call whose wall time
is far above its kernels' is bound by the host (the executor between launches), not the GPU.
`--steps N` then lists the N steps with the most host time (their spans' wall time, which on a GPU
is the host's work and the launches, not the kernels), grouped by step kind, op and source place:
where a host-bound call spends it.
"""
import argparse
import collections
import json
import re
import sys


def load(path):
    with open(path) as f:
        t = json.load(f)
    return t["traceEvents"] if isinstance(t, dict) else t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--graph", help="the graph's name as the trace shows it, without 'graph '")
    ap.add_argument("--at", help="the calls made at this place, FILE:LINE or FILE:LINE:COLUMN (the end of args.at)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--steps", type=int, default=0, help="list the N steps with the most host time")
    ap.add_argument("--by-grid", action="store_true",
                    help="group kernels by their grid too (a program at one place compiled for several shapes, such as "
                         "every matrix product of `nn.linear`), with the time per launch")
    ap.add_argument("--skip", type=int, help="leave out each graph's first N calls (compilation): 1 by default, 0 with --at")
    a = ap.parse_args()
    if a.skip is None:
        a.skip = 0 if a.at else 1
    ev = [e for e in load(a.trace) if e.get("ph") == "X"]
    graphs = collections.defaultdict(list)
    for e in ev:
        if e.get("cat") == "graph":
            graphs[e["name"][len("graph "):]].append(e)
    if not graphs:
        sys.exit("trace_summary: the trace has no graph calls")
    for g in graphs.values():
        g.sort(key=lambda e: e["ts"])
    calls = {n: g[a.skip:] for n, g in graphs.items()}
    if a.at:
        # Every graph called at that place (a call site may compile a graph per specialization).
        here = sorted((e for g in graphs.values() for e in g if re.search(re.escape(a.at) + r"(:\d+)?$", e.get("args", {}).get("at", ""))),
                      key=lambda e: e["ts"])
        calls = {a.at: here[a.skip:]}
    name = a.at or a.graph or max(calls, key=lambda n: sum(e["dur"] for e in calls[n]))
    if name not in calls or not calls[name]:
        sys.exit(f"trace_summary: no calls of graph {name!r} after the first {a.skip} (graphs: {', '.join(sorted(graphs))})")
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in calls[name]]

    def inside(e):
        return any(s <= e["ts"] < t for s, t in spans)

    launches = [e for e in ev if e.get("cat") == "launch" and inside(e)]
    steps = [e for e in ev if e.get("cat") == "step" and inside(e)]
    # A kernel runs after its launch: match kernels to calls by the launches' names and places in
    # order, since device times sit on the device's clock.
    launched = collections.Counter((e["name"], e.get("args", {}).get("at")) for e in launches)
    kernels = []
    pool = collections.defaultdict(list)
    for e in ev:
        if e.get("cat") == "kernel":
            pool[(e["name"], e.get("args", {}).get("at"))].append(e)
    first = min(s for s, _ in spans)
    for key, n in launched.items():
        ks = [k for k in pool.get(key, []) if k["ts"] >= first]
        kernels += ks[:n]
    wall = sum(t - s for s, t in spans)
    dev = sum(k["dur"] for k in kernels)
    n = len(calls[name])
    print(f"graph {name}: {n} calls (after {a.skip} skipped), {wall / n / 1e3:.2f} ms wall per call, "
          f"{dev / n / 1e3:.2f} ms of kernels per call ({100 * dev / wall if wall else 0:.0f}% of wall)")
    print(f"  {len(launches) / n:.0f} launches per call, {(wall - dev) / max(len(launches), 1):.1f} us of wall beyond "
          f"the kernels per launch")
    kinds = collections.Counter(e["name"].split()[2] if len(e["name"].split()) > 2 else e["name"] for e in steps)
    print("  steps per call: " + ", ".join(f"{k} {v / n:.0f}" for k, v in kinds.most_common()))
    by = collections.defaultdict(lambda: [0.0, 0])
    for k in kernels:
        args = k.get("args", {})
        b = by[(k["name"], args.get("at", ""), args.get("grid", "") if a.by_grid else "")]
        b[0] += k["dur"]
        b[1] += 1
    print(f"  kernels by device time (per call{'; by grid, with the time per launch' if a.by_grid else ''}):")
    for (kn, at, grid), (d, c) in sorted(by.items(), key=lambda x: -x[1][0])[:a.top]:
        extra = f"  grid {grid}  {d / c:8.1f} us per launch" if a.by_grid else ""
        print(f"    {d / n / 1e3:8.3f} ms {100 * d / dev if dev else 0:5.1f}%  {c / n:5.1f}x  {kn}  {at}{extra}")
    if a.steps:
        # "step 41 library kernel_call" -> "library kernel_call", so a step's calls group together
        host = collections.defaultdict(lambda: [0.0, 0])
        for e in steps:
            b = host[(" ".join(e["name"].split()[2:]), e.get("args", {}).get("at", ""))]
            b[0] += e["dur"]
            b[1] += 1
        total = sum(e["dur"] for e in steps)
        print(f"  steps by host time (per call; {total / n / 1e3:.2f} ms in all):")
        for (what, at), (d, c) in sorted(host.items(), key=lambda x: -x[1][0])[:a.steps]:
            print(f"    {d / n / 1e3:8.3f} ms {100 * d / total if total else 0:5.1f}%  {c / n:5.1f}x  {what}  {at}")


if __name__ == "__main__":
    main()
