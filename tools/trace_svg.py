#!/usr/bin/env python3
"""Draws a trace that `tsr run --profile` wrote as an SVG timeline (docs/profiling.md's picture).

  tools/trace_svg.py TRACE.json OUT.svg [--from MS] [--to MS] [--width PX]

One row per track (a host thread, a device's kernels or transfers), spans stacked by nesting depth
and coloured by category, counters as a step line under the tracks, a time axis in milliseconds.
--from/--to cut a window of the run (milliseconds from the first event). For exploring a trace,
open it in https://ui.perfetto.dev instead; this is for a picture in a document.
"""
import argparse
import html
import json

COLORS = {"host": "#8fb8de", "graph": "#f2b36b", "step": "#9ccf8f", "compile": "#d98fb0",
          "launch": "#c9c0e8", "kernel": "#5aa469", "transfer": "#e07b53"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from", dest="t0", type=float, default=None)
    ap.add_argument("--to", dest="t1", type=float, default=None)
    ap.add_argument("--width", type=int, default=1100)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    timed = [e for e in events if e["ph"] in ("X", "C")]
    origin = min(e["ts"] for e in timed)
    lo = origin + (a.t0 or 0) * 1e3
    hi = origin + a.t1 * 1e3 if a.t1 is not None else max(e["ts"] + e.get("dur", 0) for e in timed)
    spans = [e for e in timed if e["ph"] == "X" and e["ts"] < hi and e["ts"] + e["dur"] > lo]

    # Depth of each span within its track (events are sorted, parents first).
    tracks = {}
    for e in spans:
        st = tracks.setdefault((e["pid"], e["tid"]), [])
        stack = [s for s in st[-1][1] if s > e["ts"]] if st else []
        tracks[(e["pid"], e["tid"])].append((e, stack + [e["ts"] + e["dur"]]))
    left, right, row_h, top = 170, 20, 16, 30
    plot_w = a.width - left - right
    x = lambda t: left + (min(max(t, lo), hi) - lo) / (hi - lo) * plot_w
    out = []
    y = top
    for key in sorted(tracks):
        rows = tracks[key]
        depth = max(len(s) for _, s in rows)
        label = f"{procs.get(key[0], key[0])}: {threads.get(key, key[1])}"
        out.append(f'<text x="6" y="{y + 12}" font-size="11">{html.escape(label)}</text>')
        out.append(f'<line x1="{left}" x2="{a.width - right}" y1="{y - 2}" y2="{y - 2}" stroke="#ddd"/>')
        for e, stack in rows:
            d = len(stack) - 1
            x0, x1 = x(e["ts"]), x(e["ts"] + e["dur"])
            if x1 - x0 < 0.25:
                continue  # narrower than a quarter pixel: invisible, and it would only grow the file
            w = x1 - x0
            fill = COLORS.get(e.get("cat", ""), "#bbb")
            name = html.escape(e["name"])
            out.append(f'<rect x="{x0:.2f}" y="{y + d * row_h}" width="{w:.2f}" height="{row_h - 2}" fill="{fill}" '
                       f'stroke="#555" stroke-width="0.3"><title>{name} ({e["dur"] / 1e3:.3f} ms)</title></rect>')
            if w > 7 * len(e["name"]) * 0.6:
                out.append(f'<text x="{x0 + 2:.2f}" y="{y + d * row_h + 11}" font-size="9">{name}</text>')
        y += depth * row_h + 10
    # Counters: one step line each, scaled to its own maximum.
    counters = {}
    for e in timed:
        if e["ph"] == "C":
            counters.setdefault((e["pid"], e["name"]), []).append((e["ts"], list(e["args"].values())[0]))
    for (pid, name), pts in sorted(counters.items()):
        peak = max(v for _, v in pts) or 1
        h = 40
        label = f"{procs.get(pid, pid)}: {name}"
        out.append(f'<text x="6" y="{y + 12}" font-size="11">{html.escape(label)}</text>')
        out.append(f'<text x="6" y="{y + 26}" font-size="9">peak {peak / 2**20:.2f} MiB</text>')
        # The highest value in each pixel column: the peaks stay, the file stays small.
        cols = {}
        for t, v in pts:
            if t > hi:
                break
            c = int(x(t))
            cols[c] = max(cols.get(c, 0), v)
        path, prev = [], None
        for c in sorted(cols):
            yy = y + h - cols[c] / peak * h
            if prev is not None:
                path.append(f"L{c},{prev:.1f}")
            path.append(f"{'M' if not path else 'L'}{c},{yy:.1f}")
            prev = yy
        if prev is not None:
            path.append(f"L{x(hi):.2f},{prev:.2f}")
        out.append(f'<path d="{" ".join(path)}" fill="none" stroke="#3a6ea5" stroke-width="1"/>')
        y += h + 14
    # Time axis.
    span_ms = (hi - lo) / 1e3
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4)
                if span_ms / s <= 12)
    t = 0.0
    while t <= span_ms + 1e-9:
        xx = left + t / span_ms * plot_w
        out.append(f'<line x1="{xx:.2f}" x2="{xx:.2f}" y1="{top - 8}" y2="{y}" stroke="#eee"/>')
        out.append(f'<text x="{xx:.2f}" y="{top - 12}" font-size="9" text-anchor="middle">'
                   f'{(lo - origin) / 1e3 + t:g} ms</text>')
        t += step
    legend = " ".join(f'<tspan fill="{c}">■</tspan> {k}' for k, c in COLORS.items())
    out.append(f'<text x="{left}" y="{y + 14}" font-size="10">{legend}</text>')
    height = y + 24
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{a.width}" height="{height}" font-family="sans-serif">'
           f'<rect width="100%" height="100%" fill="white"/>' + "".join(out) + "</svg>\n")
    open(a.out, "w").write(svg)


if __name__ == "__main__":
    main()
