"""A minimal Language Server Protocol client for the tests and benchmarks of `tsr lsp`:
Content-Length framing over the server's stdin/stdout, a reader thread, and helpers to wait for
responses and notifications."""
import json
import os
import queue
import subprocess
import threading
import time


def frame(obj_or_bytes):
    body = obj_or_bytes if isinstance(obj_or_bytes, bytes) else json.dumps(obj_or_bytes).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def file_uri(path):
    from urllib.parse import quote
    return "file://" + quote(os.path.abspath(path))


class Client:
    def __init__(self, argv, env=None, stderr=subprocess.DEVNULL):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        self.messages = queue.Queue()
        self.next_id = 1
        self.pending = []  # messages read but not yet claimed
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        out = self.proc.stdout
        while True:
            headers = {}
            while True:
                line = out.readline()
                if not line:
                    self.messages.put(None)
                    return
                line = line.strip()
                if not line:
                    break
                k, _, v = line.decode("ascii", "replace").partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            body = out.read(n)
            try:
                self.messages.put(json.loads(body))
            except ValueError:
                self.messages.put({"unparseable": body})

    # ---- sending -------------------------------------------------------------------------
    def raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj):
        self.raw(frame(obj))

    def request(self, method, params=None, id=None):
        if id is None:
            id = self.next_id
            self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return id

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    # ---- receiving -----------------------------------------------------------------------
    def wait_for(self, pred, timeout=10.0):
        """The first message (pending first, then new ones) satisfying pred; None on timeout or
        when the server's output ends."""
        for i, m in enumerate(self.pending):
            if pred(m):
                return self.pending.pop(i)
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                return None
            try:
                m = self.messages.get(timeout=left)
            except queue.Empty:
                return None
            if m is None:
                self.messages.put(None)
                return None
            if pred(m):
                return m
            self.pending.append(m)

    def response(self, id, timeout=10.0):
        return self.wait_for(lambda m: m.get("id") == id and ("result" in m or "error" in m), timeout)

    def call(self, method, params=None, timeout=10.0):
        return self.response(self.request(method, params), timeout)

    def diagnostics(self, uri, version=None, timeout=10.0):
        def pred(m):
            if m.get("method") != "textDocument/publishDiagnostics":
                return False
            p = m["params"]
            return p["uri"] == uri and (version is None or p.get("version") == version)
        m = self.wait_for(pred, timeout)
        return None if m is None else m["params"]

    def initialize(self, root=None, options=None):
        params = {"processId": os.getpid(), "rootUri": file_uri(root) if root else None,
                  "capabilities": {"textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]}}}}
        if options is not None:
            params["initializationOptions"] = options
        r = self.call("initialize", params)
        self.notify("initialized", {})
        return r

    def open(self, uri, text, version=1):
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "tessera", "version": version, "text": text}})

    def change(self, uri, version, changes):
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes})

    def close(self, timeout=10.0):
        """shutdown + exit; returns the exit code."""
        try:
            self.call("shutdown", timeout=timeout)
            self.notify("exit")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1
