#!/usr/bin/env python3
"""Protocol-level tests of `tsr lsp`: a client speaking JSON-RPC with Content-Length framing over
pipes. Covers the framing and its error cases, the lifecycle (requests before initialize, after
shutdown, exit codes), text synchronisation (full and incremental edits in UTF-16, stale and
out-of-order versions), debouncing, diagnostics against tsrc's own output for the golden suite,
hover, definition, document symbols, completion and signature help.

usage: test_protocol.py TSR TSRC REPO_ROOT
Prints one line per test and ends with `N passed, N failed`.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lspclient import Client, file_uri, frame  # noqa: E402

TSR, TSRC, ROOT = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
EXAMPLES = os.path.join(ROOT, "examples")
STDLIB = os.path.join(ROOT, "stdlib")
TMP = tempfile.mkdtemp(prefix="tsr-lsp-test-")

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def server(**kw):
    return Client([TSR, "lsp"], **kw)


def started(options=None):
    c = server()
    r = c.initialize(options=options)
    check(r and "result" in r, f"initialize failed: {r}")
    return c


def pos(line, ch):
    return {"line": line, "character": ch}


def tdp(uri, line, ch):
    return {"textDocument": {"uri": uri}, "position": pos(line, ch)}


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def utf16_len(s):
    return len(s.encode("utf-16-le")) // 2


# ---- framing and lifecycle -------------------------------------------------------------------

@test
def initialize_capabilities():
    c = server()
    r = c.initialize()
    caps = r["result"]["capabilities"]
    check(caps["textDocumentSync"]["change"] == 2, "incremental sync")
    for k in ("hoverProvider", "definitionProvider", "documentSymbolProvider", "completionProvider", "signatureHelpProvider"):
        check(k in caps, f"capability {k}")
    check(caps.get("positionEncoding") == "utf-16", "utf-16 positions")
    check(c.close() == 0, "exit code after shutdown + exit")


@test
def request_before_initialize():
    c = server()
    r = c.call("textDocument/hover", tdp("file:///x.tsr", 0, 0))
    check(r["error"]["code"] == -32002, f"ServerNotInitialized, got {r}")
    # A notification before initialize is dropped silently; the server keeps going.
    c.notify("textDocument/didOpen", {"textDocument": {"uri": "file:///x.tsr", "languageId": "tessera", "version": 1, "text": "x = 1\n"}})
    r = c.call("shutdown")
    check(r["error"]["code"] == -32002, "shutdown before initialize is an error too")
    r = c.initialize()
    check("result" in r, "initialize still works")
    check(c.close() == 0, "clean exit")


@test
def malformed_json():
    c = started()
    c.raw(frame(b'{"jsonrpc": "2.0", "id": 5, "method": '))
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32700 and r["id"] is None, f"ParseError with a null id, got {r}")
    c.raw(frame(b'[1, 2, 3]'))
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32600, f"a batch is an InvalidRequest, got {r}")
    c.raw(frame(b'"just a string"'))
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32600, f"a non-object is an InvalidRequest, got {r}")
    c.send({"jsonrpc": "2.0", "id": 77})
    r = c.response(77)
    check(r and r["error"]["code"] == -32600, f"no method: InvalidRequest, got {r}")
    c.send({"jsonrpc": "2.0", "id": {"a": 1}, "method": "shutdown"})
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32600, f"an object id: InvalidRequest, got {r}")
    c.raw(frame(b'{"jsonrpc": "2.0", "id": 8, "method": "tessera/status", "params": {"x": "\xff\xfe"}}'))
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32700, f"invalid UTF-8: ParseError, got {r}")
    check(c.close() == 0, "still serving after bad messages")


@test
def bad_headers_resynchronise():
    c = started()
    # No Content-Length at all.
    c.raw(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n")
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32700, f"header without Content-Length: ParseError, got {r}")
    # A length that is not a number.
    c.raw(b"Content-Length: twelve\r\n\r\n")
    r = c.wait_for(lambda m: "error" in m)
    check(r and r["error"]["code"] == -32700, f"non-numeric Content-Length: ParseError, got {r}")
    # Garbage, then a real message: the message is still served.
    c.raw(b"this is not a header\r\n" + frame({"jsonrpc": "2.0", "id": 41, "method": "tessera/status"}))
    r = c.response(41)
    check(r and "result" in r, f"message after garbage served, got {r}")
    # A JSON body with no header, running into a real one.
    c.raw(b'{"jsonrpc":"2.0","id":1,"method":"x"}' + frame({"jsonrpc": "2.0", "id": 42, "method": "tessera/status"}))
    r = c.response(42)
    check(r and "result" in r, f"message after a headerless body served, got {r}")
    # Content-Type is accepted; header names are case-insensitive.
    body = json.dumps({"jsonrpc": "2.0", "id": 43, "method": "tessera/status"}).encode()
    c.raw(b"content-length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(body) + body)
    r = c.response(43)
    check(r and "result" in r, f"lowercase header and Content-Type, got {r}")
    check(c.close() == 0, "clean exit")


@test
def split_and_joined_writes():
    c = started()
    data = frame({"jsonrpc": "2.0", "id": 50, "method": "tessera/status"})
    for b in data:  # one byte at a time
        c.raw(bytes([b]))
    check(c.response(50) is not None, "message written byte by byte")
    c.raw(frame({"jsonrpc": "2.0", "id": 51, "method": "tessera/status"}) + frame({"jsonrpc": "2.0", "id": 52, "method": "tessera/status"}))
    check(c.response(51) is not None and c.response(52) is not None, "two messages in one write")
    big = "# " + "x" * (2 << 20) + "\nEPS = 1e-5\n"
    uri = file_uri(os.path.join(TMP, "big_line.tsr"))
    c.open(uri, big)
    d = c.diagnostics(uri, 1, timeout=30)
    check(d is not None and d["diagnostics"] == [], f"a 2 MB message, got {d and d['diagnostics'][:2]}")
    check(c.close() == 0, "clean exit")


@test
def unknown_methods():
    c = started()
    r = c.call("textDocument/frobnicate", {})
    check(r["error"]["code"] == -32601, f"MethodNotFound, got {r}")
    r = c.call("$/somethingOptional", {})
    check(r["error"]["code"] == -32601, f"$/ request: MethodNotFound, got {r}")
    c.notify("workspace/unknownNotification", {"a": 1})
    c.notify("$/setTrace", {"value": "off"})
    r = c.call("tessera/status")
    check("result" in r, "unknown notifications ignored")
    check(not [m for m in c.pending if "error" in m], f"no error for notifications: {c.pending}")
    check(c.close() == 0, "clean exit")


@test
def invalid_params():
    c = started()
    r = c.call("textDocument/hover", {"textDocument": {"uri": "file:///nowhere.tsr"}})
    check(r["error"]["code"] == -32602, f"hover without position: InvalidParams, got {r}")
    r = c.call("textDocument/hover", {"position": pos(0, 0)})
    check(r["error"]["code"] == -32602, f"hover without textDocument: InvalidParams, got {r}")
    r = c.call("textDocument/definition", "not an object")
    check(r["error"]["code"] == -32602, f"params not an object: InvalidParams, got {r}")
    r = c.call("textDocument/hover", {"textDocument": {"uri": "file:///nowhere.tsr"}, "position": {"line": -1, "character": 0}})
    check(r["error"]["code"] == -32602, f"negative line: InvalidParams, got {r}")
    r = c.call("textDocument/hover", tdp("file:///not-open.tsr", 0, 0))
    check("result" in r and r["result"] is None, f"hover in a document that is not open: null, got {r}")
    c.notify("textDocument/didChange", {"textDocument": {"uri": "file:///not-open.tsr", "version": 2}, "contentChanges": [{"text": "x"}]})
    c.notify("textDocument/didOpen", {"textDocument": {"uri": 5}})
    c.notify("textDocument/didChange", {"contentChanges": "nonsense"})
    r = c.call("initialize", {"capabilities": {}})
    check(r["error"]["code"] == -32600, f"a second initialize: InvalidRequest, got {r}")
    check("result" in c.call("tessera/status"), "still serving")
    check(c.close() == 0, "clean exit")


@test
def shutdown_and_exit_codes():
    c = started()
    check(c.call("shutdown")["result"] is None, "shutdown answers null")
    r = c.call("textDocument/hover", tdp("file:///x.tsr", 0, 0))
    check(r["error"]["code"] == -32600, f"requests after shutdown: InvalidRequest, got {r}")
    c.notify("exit")
    check(c.proc.wait(timeout=10) == 0, "exit after shutdown: 0")

    c = started()
    c.notify("exit")
    check(c.proc.wait(timeout=10) == 1, "exit without shutdown: 1")

    c = started()
    c.proc.stdin.close()
    check(c.proc.wait(timeout=10) == 1, "end of input without exit: exits with 1")


@test
def tsr_command_line():
    p = subprocess.run([TSR], capture_output=True, text=True)
    check(p.returncode == 2, f"no subcommand: usage error (2), got {p.returncode}")
    p = subprocess.run([TSR, "lsp", "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and "--debounce-ms" in p.stdout, f"tsr lsp --help: {p.returncode} {p.stdout!r}")
    p = subprocess.run([TSR, "lsp", "--no-such-flag"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    check(p.returncode == 2, f"an unknown flag: usage error (2), got {p.returncode}")
    # Editors may pass --stdio; it is the only transport.
    c = Client([TSR, "lsp", "--stdio"])
    check("result" in c.initialize(), "tsr lsp --stdio serves")
    check(c.close() == 0, "clean exit")


# ---- diagnostics -----------------------------------------------------------------------------

DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|internal error)\[(?P<code>[A-Z0-9]+)\]: (?P<msg>.*)$")


def tsrc_diagnostics(path):
    p = subprocess.run([TSRC, path, "--check"], capture_output=True, text=True, errors="replace")
    out = []
    for line in p.stderr.splitlines():
        m = DIAG.match(line)
        if m and os.path.abspath(m["file"]) == os.path.abspath(path):
            out.append(m.groupdict())
    return out


def to_utf16_col(text, line1, col1):
    """tsrc's 1-based code-point column -> the protocol's 0-based UTF-16 column."""
    lines = text.splitlines()
    s = lines[line1 - 1] if line1 - 1 < len(lines) else ""
    return utf16_len(s[: col1 - 1])


@test
def diagnostics_match_tsrc_on_golden_suite():
    golden = os.path.join(ROOT, "tests", "golden")
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(golden) for f in fs
                   if f.endswith(".tsr") and not f.startswith("_"))
    c = started()
    mismatches = []
    for i, path in enumerate(files):
        text = open(path, encoding="utf-8", errors="replace").read()
        if "\ufffd" in text or "# args:" in text:
            continue
        uri = file_uri(path)
        c.open(uri, text, 1)
        d = c.diagnostics(uri, 1, timeout=30)
        if d is None:
            mismatches.append(f"{path}: no diagnostics published")
            continue
        c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        c.diagnostics(uri, None, timeout=10)  # the clearing publish
        got = sorted((x["range"]["start"]["line"], x["range"]["start"]["character"], x["code"], x["message"])
                     for x in d["diagnostics"] if not x["message"].split(":")[0].endswith(".tsr"))
        want = sorted((int(e["line"]) - 1, to_utf16_col(text, int(e["line"]), int(e["col"])), e["code"], e["msg"])
                      for e in tsrc_diagnostics(path))
        if got != want:
            mismatches.append(f"{os.path.relpath(path, ROOT)}: lsp {got} vs tsrc {want}")
    check(not mismatches, f"{len(mismatches)} files differ:\n  " + "\n  ".join(mismatches[:5]))
    check(c.close() == 0, "clean exit")


@test
def diagnostic_ranges_and_related_information():
    text = ('@jit\n'
            'def project(x: Tensor["B", "D", f32], w: Tensor["H", "N", f32]) -> Tensor["B", "N", f32]:\n'
            '    return x @ w\n')
    uri = file_uri(write("matmul.tsr", text))
    c = started()
    c.open(uri, text)
    d = c.diagnostics(uri, 1)["diagnostics"]
    check(len(d) == 1, f"one diagnostic, got {d}")
    e = d[0]
    check(e["code"] == "E0302" and e["severity"] == 1 and e["source"] == "tsr", f"code and severity: {e}")
    check(e["range"] == {"start": pos(2, 11), "end": pos(2, 16)}, f"range of `x @ w`: {e['range']}")
    rel = e.get("relatedInformation", [])
    check(rel and all(r["location"]["uri"] == uri for r in rel), f"related information from the notes: {rel}")
    check(any('x is Tensor["B", "D", f32]' in r["message"] for r in rel), f"the note's text: {rel}")
    # A note with a range of its own points there.
    text2 = "def f():\n    return 1\n\ndef f():\n    return 2\n"
    uri2 = file_uri(write("redefined.tsr", text2))
    c.open(uri2, text2)
    d = c.diagnostics(uri2, 1)["diagnostics"]
    check(len(d) == 1 and d[0]["range"]["start"] == pos(3, 4), f"the second definition: {d}")
    rel = d[0].get("relatedInformation", [])
    check(rel and rel[0]["location"]["range"]["start"] == pos(0, 4) and rel[0]["location"]["uri"] == uri2,
          f"the note points at the first: {rel}")
    check(c.close() == 0, "clean exit")


@test
def utf16_positions():
    # Non-BMP characters (two UTF-16 units each) and a two-byte character before the error.
    text = 'def main():\n    print("😀😀é", undefined_name)\n'
    uri = file_uri(write("utf16.tsr", text))
    c = started()
    c.open(uri, text)
    d = c.diagnostics(uri, 1)["diagnostics"]
    check(len(d) == 1, f"one diagnostic, got {d}")
    line = text.splitlines()[1]
    col = utf16_len(line[: line.index("undefined_name")])
    check(d[0]["range"]["start"] == pos(1, col), f"start at UTF-16 column {col}: {d[0]['range']}")
    check(d[0]["range"]["end"] == pos(1, col + len("undefined_name")), f"end: {d[0]['range']}")
    # An incremental edit addressed in UTF-16: replace `undefined_name` with `1`.
    c.change(uri, 2, [{"range": {"start": pos(1, col), "end": pos(1, col + len("undefined_name"))}, "text": "1"}])
    d = c.diagnostics(uri, 2)["diagnostics"]
    check(d == [], f"the edit landed after the emoji: {d}")
    # Insert an error after the emoji, inside the string's line, by UTF-16 position.
    str_end = utf16_len(line[: line.index('"', line.index('"') + 1) + 1])
    c.change(uri, 3, [{"range": {"start": pos(1, str_end), "end": pos(1, str_end)}, "text": " + nope"}])
    d = c.diagnostics(uri, 3)["diagnostics"]
    check(len(d) == 1 and d[0]["range"]["start"] == pos(1, str_end + 3), f"error at the inserted name: {d}")
    check(c.close() == 0, "clean exit")


def apply_edit(text, start, end, new):
    """Applies an LSP edit (UTF-16 positions) to a Python string, as a client does."""
    lines = text.split("\n")

    def offset(p):
        base = sum(len(l) + 1 for l in lines[: p["line"]])
        line = lines[p["line"]] if p["line"] < len(lines) else ""
        units, i = 0, 0
        while i < len(line) and units < p["character"]:
            units += 2 if ord(line[i]) > 0xFFFF else 1
            i += 1
        return base + i
    a, b = offset(start), offset(end)
    return text[:a] + new + text[b:]


@test
def incremental_edits_match_full_text():
    import random
    rnd = random.Random(7)
    text = open(os.path.join(EXAMPLES, "transformer_block.tsr"), encoding="utf-8").read()
    uri = file_uri(os.path.join(EXAMPLES, "inc_edit.tsr"))
    c = started()
    c.open(uri, text)
    c.diagnostics(uri, 1)
    version = 1
    pieces = ["x", "😀", "é", "\n", "", "  ", "(", "w_out", "# c\n"]
    for i in range(200):
        lines = text.split("\n")
        l1 = rnd.randrange(len(lines))
        c1 = rnd.randrange(utf16_len(lines[l1]) + 1)
        l2 = min(len(lines) - 1, l1 + rnd.randrange(2))
        c2 = rnd.randrange(utf16_len(lines[l2]) + 1)
        if (l2, c2) < (l1, c1):
            l1, c1, l2, c2 = l2, c2, l1, c1
        # Never split a surrogate pair.
        def fix(l, ch):
            s, units = lines[l], 0
            for k, chh in enumerate(s):
                w = 2 if ord(chh) > 0xFFFF else 1
                if units + w > ch:
                    return units
                units += w
            return units
        c1, c2 = fix(l1, c1), fix(l2, c2)
        new = rnd.choice(pieces)
        version += 1
        c.change(uri, version, [{"range": {"start": pos(l1, c1), "end": pos(l2, c2)}, "text": new}])
        text = apply_edit(text, pos(l1, c1), pos(l2, c2), new)
    d_inc = c.diagnostics(uri, version, timeout=30)
    check(d_inc is not None, "diagnostics for the last version")
    uri2 = file_uri(os.path.join(EXAMPLES, "inc_edit_full.tsr"))
    c.open(uri2, text)
    d_full = c.diagnostics(uri2, 1, timeout=30)

    def strip(ds):
        return sorted((d["range"]["start"]["line"], d["range"]["start"]["character"], d["code"], d["message"]) for d in ds)
    check(strip(d_inc["diagnostics"]) == strip(d_full["diagnostics"]),
          f"the edited text differs from the client's:\n{strip(d_inc['diagnostics'])[:3]}\n{strip(d_full['diagnostics'])[:3]}")
    # A full-text change replaces everything.
    version += 1
    c.change(uri, version, [{"text": "EPS = 1e-5\n"}])
    d = c.diagnostics(uri, version)
    check(d["diagnostics"] == [], f"full replacement: {d}")
    check(c.close() == 0, "clean exit")


@test
def stale_and_out_of_order_versions():
    uri = file_uri(os.path.join(TMP, "versions.tsr"))
    c = started()
    c.open(uri, "EPS = 1e-5\n", 5)
    check(c.diagnostics(uri, 5)["diagnostics"] == [], "clean at version 5")
    # Version 4 is older than what the server has: ignored.
    c.change(uri, 4, [{"text": "EPS = undefined_thing\n"}])
    # Version 5 again: a repeat, ignored too.
    c.change(uri, 5, [{"text": "EPS = undefined_thing\n"}])
    c.change(uri, 7, [{"range": {"start": pos(0, 6), "end": pos(0, 10)}, "text": "2.0"}])
    d = c.diagnostics(uri, 7)
    check(d is not None and d["diagnostics"] == [], f"version 7 applied to version 5's text: {d}")
    check(not [m for m in c.pending if m.get("method") == "textDocument/publishDiagnostics"
               and m["params"].get("version") in (4,)], "nothing published for the stale version")
    hov = c.call("textDocument/hover", tdp(uri, 0, 1))["result"]
    check(hov and "EPS: float" in hov["contents"]["value"], f"the text is version 7's: {hov}")
    check(c.close() == 0, "clean exit")


@test
def debounced_rapid_edits():
    text = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "gen_module.py"), "1000"],
                          capture_output=True, text=True, check=True).stdout
    path = write("rapid.tsr", text)
    uri = file_uri(path)
    c = started()
    c.open(uri, text)
    c.diagnostics(uri, 1, timeout=30)
    before = c.call("tessera/status")["result"]
    n = 100
    for v in range(2, n + 2):  # a burst: 100 edits, each inserting a character in a comment
        c.change(uri, v, [{"range": {"start": pos(0, 1), "end": pos(0, 1)}, "text": "x"}])
    d = c.diagnostics(uri, n + 1, timeout=30)
    check(d is not None, "diagnostics for the last version of the burst")
    time.sleep(0.3)
    after = c.call("tessera/status")["result"]
    checks = after["checks"] - before["checks"]
    check(checks < n / 4, f"a burst of {n} edits was checked {checks} times")
    published = [m for m in c.pending if m.get("method") == "textDocument/publishDiagnostics"]
    check(all(m["params"]["version"] <= n + 1 for m in published), "no publish after the last version")
    check(c.close() == 0, "clean exit")


@test
def superseded_results_are_dropped():
    # Edits arriving while a check runs: that check's result is dropped, never published.
    text = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "gen_module.py"), "3000"],
                          capture_output=True, text=True, check=True).stdout
    uri = file_uri(write("superseded.tsr", text))
    c = started(options={"debounceMs": 0})
    c.open(uri, text)
    c.diagnostics(uri, 1, timeout=30)
    versions = []
    for v in range(2, 40):
        c.change(uri, v, [{"range": {"start": pos(0, 1), "end": pos(0, 1)}, "text": "y"}])
        versions.append(v)
        time.sleep(0.01)
    d = c.diagnostics(uri, versions[-1], timeout=30)
    check(d is not None, "the last version is published")
    status = c.call("tessera/status")["result"]
    published = sorted(m["params"]["version"] for m in c.pending if m.get("method") == "textDocument/publishDiagnostics")
    check(status["superseded"] + status["cancelled"] > 0 or len(published) < len(versions),
          f"some checks were superseded or cancelled: {status}")
    check(published == sorted(set(published)), f"each version published at most once: {published}")
    check(c.close() == 0, "clean exit")


@test
def imported_module_errors_shown_at_import():
    path = os.path.join(ROOT, "tests", "golden", "imports", "error_in_helper.tsr")
    text = open(path).read()
    uri = file_uri(path)
    c = started()
    c.open(uri, text)
    d = c.diagnostics(uri, 1)["diagnostics"]
    e = [x for x in d if x["code"] == "E0302"]
    check(e, f"the helper's error is shown: {d}")
    check(e[0]["message"].startswith("_broken.tsr:4:12: "), f"it says where: {e[0]['message']}")
    rel = e[0]["relatedInformation"][0]["location"]
    check(rel["uri"].endswith("/_broken.tsr") and rel["range"]["start"] == pos(3, 11), f"related location: {rel}")
    check(c.close() == 0, "clean exit")


# ---- hover, definition, symbols, completion, signature help -----------------------------------

def open_example(c, name):
    path = os.path.join(EXAMPLES, name)
    text = open(path, encoding="utf-8").read()
    uri = file_uri(path)
    c.open(uri, text)
    d = c.diagnostics(uri, 1, timeout=30)
    check(d is not None, f"{name} checked")
    return uri, text.split("\n")


def where(lines, needle, nth=0, offset=0):
    for i, l in enumerate(lines):
        k = l.find(needle)
        while k >= 0:
            if nth == 0:
                return i, k + offset
            nth -= 1
            k = l.find(needle, k + 1)
    raise Failure(f"{needle!r} not found")


def hover_text(c, uri, line, ch):
    r = c.call("textDocument/hover", tdp(uri, line, ch))
    check("result" in r, f"hover answered: {r}")
    return r["result"]["contents"]["value"] if r["result"] else ""


@test
def hover():
    c = started()
    uri, lines = open_example(c, "transformer_block.tsr")
    t = hover_text(c, uri, *where(lines, "x: Tensor"))
    check('x: Tensor["B", "S", "D", bf16 @accum(f32)]' in t, f"parameter type: {t}")
    check("dtype: `bf16`" in t and "policy: `@accum(f32)`" in t and 'shape: `["B", "S", "D"]`' in t, f"facts: {t}")
    t = hover_text(c, uri, *where(lines, "h = nn.layer_norm"))
    check('h: Tensor["B", "S", "D", bf16 @accum(f32)]' in t, f"binding type: {t}")
    t = hover_text(c, uri, *where(lines, "q, k, v", offset=0))
    check(t.startswith("```tsr\nq: Tensor["), f"tuple target: {t}")
    t = hover_text(c, uri, *where(lines, "def block", offset=5))
    check("graph function" in t and "block(x: Tensor[" in t and "@jit" in t, f"function: {t}")
    t = hover_text(c, uri, *where(lines, "y = block(", offset=5))
    check("graph function" in t and "-> Tensor[" in t, f"function at a call: {t}")
    t = hover_text(c, uri, *where(lines, "split(h", offset=1))
    check("split(" in t and "builtin" in t, f"builtin: {t}")
    t = hover_text(c, uri, *where(lines, "nn.layer_norm", offset=4))
    check("layer_norm(" in t and "module `nn`" in t and "layer_norm over the last axis" in t, f"stdlib function with its doc: {t}")
    t = hover_text(c, uri, *where(lines, "import nn", offset=8))
    check("module" in t and "nn" in t, f"module: {t}")
    t = hover_text(c, uri, *where(lines, "random.normal", offset=8))
    check("random.normal" in t, f"namespaced builtin: {t}")
    # The cursor right after a name still hovers it.
    l, ch = where(lines, "h = nn.layer_norm")
    check("h: Tensor" in hover_text(c, uri, l, ch + 1), "cursor after the name")
    check(hover_text(c, uri, 2, 0) == "", "blank line: null")
    c2 = started()
    uri2, lines2 = open_example(c2, "gemm.tsr")
    t = hover_text(c2, uri2, *where(lines2, "acc = tile.zeros"))
    check("acc: Tile[" in t and "dtype: `f32`" in t, f"tile: {t}")
    t = hover_text(c2, uri2, *where(lines2, "tile.load", offset=6))
    check("tile.load(" in t, f"tile op: {t}")
    t = hover_text(c2, uri2, *where(lines2, "def gemm", offset=5))
    check("kernel" in t, f"kernel kind: {t}")
    check(c.close() == 0 and c2.close() == 0, "clean exit")


@test
def definition():
    c = started()
    uri, lines = open_example(c, "transformer_block.tsr")
    r = c.call("textDocument/definition", tdp(uri, *where(lines, "nn.layer_norm", offset=4)))["result"]
    check(r and r[0]["uri"] == file_uri(os.path.join(STDLIB, "nn.tsr")), f"into the stdlib: {r}")
    nn_lines = open(os.path.join(STDLIB, "nn.tsr")).read().split("\n")
    check(r[0]["range"]["start"] == pos(*where(nn_lines, "def layer_norm", offset=4)), f"at the def: {r}")
    r = c.call("textDocument/definition", tdp(uri, *where(lines, "y = block(", offset=5)))["result"]
    check(r and r[0]["uri"] == uri and r[0]["range"]["start"] == pos(*where(lines, "def block", offset=4)), f"local function: {r}")
    r = c.call("textDocument/definition", tdp(uri, *where(lines, "split(h @", offset=7)))["result"]
    check(r and r[0]["range"]["start"]["line"] == where(lines, "h = nn.layer_norm")[0], f"local variable: {r}")
    r = c.call("textDocument/definition", tdp(uri, *where(lines, "import nn", offset=8)))["result"]
    check(r and r[0]["uri"] == file_uri(os.path.join(STDLIB, "nn.tsr")), f"module: {r}")
    r = c.call("textDocument/definition", tdp(uri, *where(lines, "split(h", offset=1)))["result"]
    check(r is None, f"a builtin has no definition: {r}")
    # Across a user import.
    path = os.path.join(ROOT, "tests", "golden", "imports", "from_helper_function.tsr")
    text = open(path).read()
    huri = file_uri(path)
    c.open(huri, text)
    c.diagnostics(huri, 1)
    hl = text.split("\n")
    r = c.call("textDocument/definition", tdp(huri, *where(hl, "dense(x", offset=1)))["result"]
    check(r and r[0]["uri"].endswith("/imports/_layers.tsr") and r[0]["range"]["start"]["line"] == 4, f"across an import: {r}")
    check(c.close() == 0, "clean exit")


@test
def document_symbols():
    c = started()
    uri, lines = open_example(c, "train_regression.tsr")
    r = c.call("textDocument/documentSymbol", {"textDocument": {"uri": uri}})["result"]
    names = [s["name"] for s in r]
    check("main" in names, f"functions listed: {names}")
    for s in r:
        rs, ss = s["range"], s["selectionRange"]
        check((rs["start"]["line"], rs["start"]["character"]) <= (ss["start"]["line"], ss["start"]["character"]), f"selection inside range: {s}")
    uri2, _ = open_example(c, "transformer_block.tsr")
    r = c.call("textDocument/documentSymbol", {"textDocument": {"uri": uri2}})["result"]
    block = next(s for s in r if s["name"] == "block")
    check(block["kind"] == 12 and "graph function" in block.get("detail", ""), f"kind and detail: {block}")
    kids = [k["name"] for k in block.get("children", [])]
    check("x" in kids and "h" in kids, f"parameters and locals: {kids}")
    check(c.close() == 0, "clean exit")


def complete(c, uri, line, ch):
    r = c.call("textDocument/completion", tdp(uri, line, ch))["result"]
    return {i["label"]: i for i in r["items"]}


@test
def completion():
    c = started()
    uri, lines = open_example(c, "transformer_block.tsr")
    version = 1
    # Type `nn.` on a new line inside `block`.
    l = where(lines, "    return x + nn.gelu")[0]
    version += 1
    c.change(uri, version, [{"range": {"start": pos(l, 0), "end": pos(l, 0)}, "text": "    y = nn.\n"}])
    items = complete(c, uri, l, len("    y = nn."))
    check("layer_norm" in items and "scaled_dot_product_attention" in items, f"module members: {sorted(items)[:10]}")
    check("_upcast" not in items, "private helpers are not offered")
    version += 1
    c.change(uri, version, [{"range": {"start": pos(l, 0), "end": pos(l + 1, 0)}, "text": "    y = tile.\n"}])
    items = complete(c, uri, l, len("    y = tile."))
    check("load" in items and "store" in items and "dot" in items, f"tile operations: {sorted(items)[:10]}")
    version += 1
    c.change(uri, version, [{"range": {"start": pos(l, 0), "end": pos(l + 1, 0)}, "text": "    y = w\n"}])
    items = complete(c, uri, l, len("    y = w"))
    for name in ("w_qkv", "w_out", "x", "heads", "B", "bf16", "f32", "matmul", "nn", "block", "tile"):
        check(name in items, f"{name} in scope: {sorted(items)[:20]}")
    version += 1
    c.change(uri, version, [{"range": {"start": pos(l, 0), "end": pos(l + 1, 0)}, "text": "    y = x.\n"}])
    items = complete(c, uri, l, len("    y = x."))
    check("shape" in items and "astype" in items and "dtype" in items, f"tensor members: {sorted(items)}")
    items = complete(c, uri, 0, 5)
    check(items == {}, "nothing inside a comment")
    check(c.close() == 0, "clean exit")


@test
def signature_help():
    c = started()
    uri, lines = open_example(c, "transformer_block.tsr")
    l = where(lines, "    return x + nn.gelu")[0]
    c.change(uri, 2, [{"range": {"start": pos(l, 0), "end": pos(l, 0)}, "text": "    y = split(h, 3, \n"}])
    r = c.call("textDocument/signatureHelp", tdp(uri, l, len("    y = split(h, 3, ")))["result"]
    check(r and r["signatures"][0]["label"].startswith("split("), f"builtin signature: {r}")
    check(r["activeParameter"] == 2, f"third parameter active: {r}")
    c.change(uri, 3, [{"range": {"start": pos(l, 0), "end": pos(l + 1, 0)}, "text": "    y = nn.layer_norm(x, eps=\n"}])
    r = c.call("textDocument/signatureHelp", tdp(uri, l, len("    y = nn.layer_norm(x, eps=")))["result"]
    check(r and r["signatures"][0]["label"].startswith("layer_norm("), f"stdlib signature: {r}")
    params = [p["label"] for p in r["signatures"][0]["parameters"]]
    check(params[r["activeParameter"]].startswith("eps"), f"keyword argument active: {params} {r['activeParameter']}")
    c.change(uri, 4, [{"range": {"start": pos(l, 0), "end": pos(l + 1, 0)}, "text": "    y = tile.load(\n"}])
    r = c.call("textDocument/signatureHelp", tdp(uri, l, len("    y = tile.load(")))["result"]
    check(r and r["signatures"][0]["label"].startswith("tile.load("), f"tile signature: {r}")
    c.change(uri, 5, [{"range": {"start": pos(l, 0), "end": pos(l + 1, 0)}, "text": "    y = block(x, \n"}])
    r = c.call("textDocument/signatureHelp", tdp(uri, l, len("    y = block(x, ")))["result"]
    check(r and r["signatures"][0]["label"].startswith("block(x: Tensor[") and r["activeParameter"] == 1, f"user function: {r}")
    check(c.close() == 0, "clean exit")


@test
def every_position_of_the_examples():
    # Hover, definition, completion and signature help at every position of every example (and
    # past the ends of lines): each is answered, none is an error, and the server stays up.
    c = started()
    n = 0
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".tsr"):
            continue
        uri, lines = open_example(c, name)
        for l, line in enumerate(lines):
            for ch in range(utf16_len(line) + 2):
                for m in ("textDocument/hover", "textDocument/definition", "textDocument/completion",
                          "textDocument/signatureHelp"):
                    r = c.call(m, tdp(uri, l, ch))
                    n += 1
                    check(r is not None and "result" in r, f"{m} at {name}:{l}:{ch}: {r}")
        r = c.call("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        check(r and isinstance(r.get("result"), list), f"symbols of {name}")
        c.pending.clear()
    check(n > 1000, f"{n} requests")
    check(c.close() == 0, "clean exit")


@test
def tessera_alias_completion():
    text = "import tessera as ts\n\n@ts.jit\ndef f(x: Tensor[\"N\", f32]):\n    return ts.exp(x)\n"
    uri = file_uri(write("alias.tsr", text))
    c = started()
    c.open(uri, text)
    c.diagnostics(uri, 1)
    c.change(uri, 2, [{"range": {"start": pos(4, 0), "end": pos(4, 0)}, "text": "    y = ts.tile.\n    z = ts.\n"}])
    items = complete(c, uri, 4, len("    y = ts.tile."))
    check("load" in items, f"ts.tile. gives tile operations: {sorted(items)[:8]}")
    items = complete(c, uri, 5, len("    z = ts."))
    check("exp" in items and "tile" in items, f"ts. gives the builtins: {sorted(items)[:8]}")
    check(c.close() == 0, "clean exit")


@test
def requests_wait_for_the_current_version():
    # A hover sent right after an edit is answered from the check of the edited text.
    c = started()
    uri = file_uri(os.path.join(TMP, "wait.tsr"))
    c.open(uri, "A = 1\n")
    c.diagnostics(uri, 1)
    c.change(uri, 2, [{"text": "A = 2.5\n"}])
    t = c.call("textDocument/hover", tdp(uri, 0, 0))["result"]["contents"]["value"]
    check("A: float" in t, f"hover of version 2: {t}")
    c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    d = c.diagnostics(uri)
    check(d["diagnostics"] == [], "close clears the diagnostics")
    check(c.close() == 0, "clean exit")


def main():
    passed = failed = 0
    only = os.environ.get("TSR_LSP_TEST")
    for t in TESTS:
        if only and t.__name__ != only:
            continue
        start = time.time()
        try:
            t()
            passed += 1
            print(f"ok   {t.__name__} ({time.time() - start:.1f} s)")
        except Failure as e:
            failed += 1
            print(f"FAIL {t.__name__}: {e}")
        except Exception:
            failed += 1
            print(f"FAIL {t.__name__}: exception\n{traceback.format_exc()}")
        sys.stdout.flush()
    if only and passed + failed == 0:
        print(f"FAIL: TSR_LSP_TEST={only} names no test; the tests are: " + ", ".join(t.__name__ for t in TESTS))
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
