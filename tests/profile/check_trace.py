#!/usr/bin/env python3
"""Checks a trace against the Trace Event Format (what `tsr run --profile` writes).

The format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
("JSON Object Format"), as Perfetto's and Chrome's importers read it. Checked:
  - the top level is an object with a list `traceEvents` (or a bare list);
  - every event is an object with a known phase `ph`; a string `name` (an "E" may omit it);
    integer `pid` and `tid`; a number `ts` >= 0 (metadata "M" has none); `args`, where present,
    an object;
  - "X" has a number `dur` >= 0; "B"/"E" pair up per (pid, tid) as a stack, names matching;
  - the spans of one (pid, tid) nest: a span that starts inside another ends inside it
    (Perfetto draws a thread's spans as a flame chart and drops those that overlap partially);
  - timestamps never decrease in file order (metadata aside);
  - "C" (counter) has `args` with at least one value, all numbers;
  - "M" is process_name / thread_name / *_sort_index with `args.name` (or sort_index).
Requirements of a particular run are options: --require-cat CAT (an "X" of that category),
--require-counter NAME, --require-process NAME (a process_name containing it),
--require-nested CHILD_CAT:PARENT_CAT (every CHILD span on the host lies inside a PARENT span of
the same thread). --self-test breaks a valid trace in each of the ways above and fails unless the
checker rejects every broken copy (the checker's negative control).

Exit 0 when valid (prints a summary line), 1 with one line per problem.
"""
import argparse
import copy
import json
import sys

PHASES = {"X", "B", "E", "C", "M", "i", "I", "b", "e", "n", "s", "t", "f", "P", "O", "N", "D"}
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}
EPS = 1e-3  # microseconds: the writer's resolution (ns)


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check(doc, require_cat=(), require_counter=(), require_process=(), require_nested=()):
    problems = []
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            return ["the top-level object has no list `traceEvents`"]
    elif isinstance(doc, list):
        events = doc
    else:
        return ["the top level is neither an object nor a list"]

    last_ts = None
    stacks = {}       # (pid, tid) -> [(name, end or None for B)]
    be_stacks = {}    # (pid, tid) -> [name] of open B events
    cats = set()
    counters = set()
    processes = {}
    spans = []        # (pid, tid, ts, end, cat)
    for i, e in enumerate(events):
        where = f"event {i}"
        if not isinstance(e, dict):
            problems.append(f"{where}: not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            problems.append(f"{where}: unknown phase {ph!r}")
            continue
        name = e.get("name")
        if not isinstance(name, str) and not (ph == "E" and name is None):
            problems.append(f"{where} ({ph}): `name` is not a string")
        where = f"event {i} ({ph} {name!r})"
        pid, tid = e.get("pid"), e.get("tid")
        if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(tid, int) or isinstance(tid, bool):
            problems.append(f"{where}: `pid` and `tid` must be integers")
            continue
        if "args" in e and not isinstance(e["args"], dict):
            problems.append(f"{where}: `args` is not an object")
            continue
        if ph == "M":
            if name not in METADATA:
                problems.append(f"{where}: unknown metadata event")
            elif name.endswith("_name"):
                if not isinstance(e.get("args", {}).get("name"), str):
                    problems.append(f"{where}: metadata without args.name")
                elif name == "process_name":
                    processes[pid] = e["args"]["name"]
            continue
        ts = e.get("ts")
        if not is_num(ts) or ts < 0:
            problems.append(f"{where}: `ts` must be a number >= 0")
            continue
        if last_ts is not None and ts < last_ts - EPS:
            problems.append(f"{where}: timestamp {ts} is before the previous event's {last_ts}")
        last_ts = ts if last_ts is None else max(last_ts, ts)
        key = (pid, tid)
        if ph == "X":
            dur = e.get("dur")
            if not is_num(dur) or dur < 0:
                problems.append(f"{where}: a complete event needs a number `dur` >= 0")
                continue
            if isinstance(e.get("cat"), str):
                cats.add(e["cat"])
            stack = stacks.setdefault(key, [])
            while stack and stack[-1][1] is not None and stack[-1][1] <= ts + EPS:
                stack.pop()
            end = ts + dur
            if stack and stack[-1][1] is not None and end > stack[-1][1] + EPS:
                problems.append(f"{where}: [{ts}, {end}] overlaps {stack[-1][0]!r} (ending {stack[-1][1]}) partially on pid {pid} tid {tid}")
            stack.append((name, end))
            spans.append((pid, tid, ts, end, e.get("cat")))
        elif ph == "B":
            be_stacks.setdefault(key, []).append(name)
        elif ph == "E":
            open_ = be_stacks.get(key, [])
            if not open_:
                problems.append(f"{where}: an end without a begin on pid {pid} tid {tid}")
            else:
                began = open_.pop()
                if name is not None and name != began:
                    problems.append(f"{where}: ends {name!r} but {began!r} is open")
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(is_num(v) for v in args.values()):
                problems.append(f"{where}: a counter needs `args` with numeric values")
            else:
                counters.add(name)
    for key, open_ in be_stacks.items():
        for n in open_:
            problems.append(f"a begin without an end: {n!r} on pid {key[0]} tid {key[1]}")
    for pid in {s[0] for s in spans}:
        if pid not in processes:
            problems.append(f"pid {pid} has spans but no process_name")
    for c in require_cat:
        if c not in cats:
            problems.append(f"no span of category {c!r} (categories: {sorted(cats)})")
    for c in require_counter:
        if c not in counters:
            problems.append(f"no counter {c!r} (counters: {sorted(counters)})")
    for p in require_process:
        if not any(p in n for n in processes.values()):
            problems.append(f"no process named like {p!r} (processes: {sorted(processes.values())})")
    for pair in require_nested:
        child, parent = pair.split(":")
        outer = [s for s in spans if s[4] == parent]
        n = 0
        for s in spans:
            if s[4] != child:
                continue
            n += 1
            if not any(o[0] == s[0] and o[1] == s[1] and o[2] <= s[2] + EPS and s[3] <= o[3] + EPS for o in outer):
                problems.append(f"a {child!r} span at {s[2]} is inside no {parent!r} span of its thread")
                break
        if n == 0:
            problems.append(f"no {child!r} span to check inside {parent!r}")
    if not problems:
        print(f"ok: {len(events)} events, categories {sorted(cats)}, counters {sorted(counters)}, "
              f"processes {sorted(processes.values())}")
    return problems


def breakages(doc):
    """(what, broken copy) for each way a trace can break; doc must hold X spans and a counter."""
    ev = doc["traceEvents"]
    xs = [i for i, e in enumerate(ev) if e.get("ph") == "X"]
    cs = [i for i, e in enumerate(ev) if e.get("ph") == "C"]
    out = []

    def variant(what, f):
        d = copy.deepcopy(doc)
        f(d["traceEvents"])
        out.append((what, d))

    variant("no traceEvents", lambda e: e.clear() or e.append(None))
    variant("unknown phase", lambda e: e[xs[0]].__setitem__("ph", "Q"))
    variant("name missing", lambda e: e[xs[0]].pop("name"))
    variant("pid a string", lambda e: e[xs[0]].__setitem__("pid", "1"))
    variant("ts missing", lambda e: e[xs[0]].pop("ts"))
    variant("negative ts", lambda e: e[xs[0]].__setitem__("ts", -5))
    variant("dur missing", lambda e: e[xs[0]].pop("dur"))
    variant("negative dur", lambda e: e[xs[0]].__setitem__("dur", -1))
    variant("timestamps out of order", lambda e: e[xs[-1]].__setitem__("ts", 0.0))

    def partial(e):
        # the first span with a child: the child made to end after its parent
        for a in xs:
            for b in xs:
                if b != a and e[b]["pid"] == e[a]["pid"] and e[b]["tid"] == e[a]["tid"] and \
                        e[a]["ts"] < e[b]["ts"] and e[b]["ts"] + e[b]["dur"] <= e[a]["ts"] + e[a]["dur"]:
                    e[b]["dur"] = e[a]["ts"] + e[a]["dur"] - e[b]["ts"] + 10
                    return
        raise AssertionError("the trace has no nested spans to break")
    variant("partially overlapping spans", partial)

    def unmatched_b(e):
        x = e[xs[0]]
        x["ph"] = "B"
        x.pop("dur")
    variant("a B without its E", unmatched_b)

    def mismatched_e(e):
        x = e[xs[0]]
        end = dict(x, ph="E", name="something else", ts=x["ts"] + x["dur"])
        x["ph"] = "B"
        end.pop("dur")
        x.pop("dur")
        e.insert(xs[0] + 1, end)
    variant("an E naming another span", mismatched_e)
    variant("an E without a B", lambda e: e.insert(xs[0] + 1, {"ph": "E", "pid": 1, "tid": 999, "ts": e[xs[0]]["ts"]}))
    variant("a counter with a string value", lambda e: e[cs[0]].__setitem__("args", {"bytes": "12"}))
    variant("a counter without args", lambda e: e[cs[0]].pop("args"))
    variant("metadata without a name", lambda e: [m["args"].pop("name") for m in e if m.get("ph") == "M"][:1])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--require-cat", action="append", default=[])
    ap.add_argument("--require-counter", action="append", default=[])
    ap.add_argument("--require-process", action="append", default=[])
    ap.add_argument("--require-nested", action="append", default=[])
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {a.trace}: not JSON: {e}")
        return 1
    problems = check(doc, a.require_cat, a.require_counter, a.require_process, a.require_nested)
    for p in problems:
        print(f"FAIL: {a.trace}: {p}")
    if problems:
        return 1
    if a.self_test:
        missed = []
        for what, broken in breakages(doc):
            found = check(broken) if what else []
            if not found:
                missed.append(what)
            else:
                print(f"  rejected ({what}): {found[0]}")
        for m in missed:
            print(f"FAIL: the checker accepts a trace with {m}")
        if missed:
            return 1
        print(f"ok: the checker rejects all {len(breakages(doc))} broken copies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
