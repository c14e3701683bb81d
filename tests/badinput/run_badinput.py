#!/usr/bin/env python3
"""Bad input never crashes or hangs tsrc: each case must end within a time limit, with the exit
code of the spec (1 for user errors, 2 for usage errors) and a diagnostic that has a location.
Ends with `N passed, N failed`."""
import os
import random
import re
import subprocess
import sys
import tempfile

LOC = re.compile(r"^[^\s:][^:]*:\d+:\d+: error\[E\d+\]: ", re.M)


def cases(tmp):
    rnd = random.Random(1234)

    def write(name, data):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return path

    yield "binary garbage", [write("garbage.tsr", bytes(rnd.getrandbits(8) for _ in range(4096)))], 1, True
    yield "invalid UTF-8", [write("bad_utf8.tsr", b"def main():\n    x = '\xff\xfe'\n")], 1, True
    yield "valid UTF-8 noise", [write("noise.tsr", "".join(chr(rnd.randrange(0x20, 0x3000)) for _ in range(3000)))], 1, True
    yield "NUL bytes", [write("nul.tsr", b"x = 1\x00\x00\ny = 2\n")], 1, True
    yield "tabs", [write("tabs.tsr", "def main():\n\tx = 1\n\treturn x\n")], 1, True
    yield "10,000 nested parentheses", [write("parens.tsr", "x = " + "(" * 10000 + "1" + ")" * 10000 + "\n")], 1, True
    yield "10,000 nested brackets, unclosed", [write("brackets.tsr", "x = " + "[" * 10000 + "\n")], 1, True
    yield "10,000 levels of indentation", [write("indent.tsr", "".join(" " * i + "if x:\n" for i in range(10000)) + " " * 10000 + "pass\n")], 1, True
    yield "10,000 unary minus", [write("unary.tsr", "x = " + "-" * 10000 + "y\n")], 1, True
    yield "10,000 nested lambdas", [write("lambdas.tsr", "x = " + "lambda: " * 10000 + "1\n")], 1, True
    yield "10,000 chained conditionals", [write("ifexp.tsr", "x = " + "1 if c else " * 10000 + "2\n")], 1, True
    yield "a 1 MB line of additions", [write("long_add.tsr", "x = " + "1 + " * 262144 + "1\n")], 1, True
    yield "a 1 MB line of noise", [write("long_noise.tsr", "x = " + "".join(rnd.choice("ab(+)*[]:,. ") for _ in range(1 << 20)) + "\n")], 1, True
    yield "a 1 MB string", [write("long_str.tsr", "def main():\n    s = '" + "a" * (1 << 20) + "'\n")], 0, False
    yield "an empty file", [write("empty.tsr", "")], 1, True
    yield "a file of comments", [write("comments.tsr", "# nothing here\n\n# at all\n")], 1, True
    yield "a missing file", [os.path.join(tmp, "does_not_exist.tsr")], 1, False
    yield "a directory", [tmp], 1, False
    yield "deeply nested f-string", [write("fstr.tsr", "def main():\n    print(f\"{" + "(" * 5000 + "1" + ")" * 5000 + "}\")\n")], 1, True
    yield "an unknown flag", [write("ok.tsr", "def main():\n    pass\n"), "--frobnicate"], 2, False
    yield "no file argument", [], 2, False
    yield "an unknown --emit", [write("ok2.tsr", "def main():\n    pass\n"), "--emit=nonsense"], 2, False
    # Malformed scans in Graph IR text (--read-graph): a scan without its body, xs shorter than its
    # length, a body reading a value of the enclosing graph (bodies are closed), a body on another
    # op. Each is the reader's or the verifier's error (exit 1), not a crash.
    head = 'graph @f(%h: tensor<4, f32>, %xs: tensor<3, 4, f32>) -> (tensor<4, f32>) {\n'
    scan = '  %2, %3 = scan %h, %xs {consts = 0, carries = 1, length = <N>, reverse = false} : tensor<4, f32>, tensor<N, 4, f32>'
    body = ' body graph @b(%c: tensor<4, f32>, %x: tensor<4, f32>) -> (tensor<4, f32>, tensor<4, f32>) {\n    %2 = add %c, %X : tensor<4, f32>\n    return %2, %x\n  }\n'
    end = '  return %2\n}\n'
    yield "a scan without its body", [write("scan_nobody.graph", head + scan.replace("N", "3") + "\n" + end), "--read-graph"], 1, False
    yield "a scan longer than its xs", [write("scan_len.graph", head + scan.replace("N", "5") + body.replace("%X", "%x") + end), "--read-graph"], 1, False
    yield "a scan body reading the enclosing graph", [write("scan_open.graph", head + scan.replace("N", "3") + body.replace("%X", "%h") + end), "--read-graph"], 1, False
    yield "a body on an op other than scan", [write("add_body.graph", head + "  %2 = add %h, %h : tensor<4, f32>" + body.replace("%X", "%x") + end), "--read-graph"], 1, False
    write("cyc_b.tsr", "import cyc_a\n")
    yield "an import cycle", [write("cyc_a.tsr", "import cyc_b\n\ndef main():\n    pass\n")], 1, True


def main():
    tsrc = sys.argv[1]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, args, want, need_loc in cases(tmp):
            cmd = [tsrc] + args + (["--check"] if len(args) == 1 else [])
            try:
                p = subprocess.run(cmd, capture_output=True, timeout=30)
            except subprocess.TimeoutExpired:
                print(f"FAIL {name}: no answer within 30 s")
                failed += 1
                continue
            err = p.stderr.decode("utf-8", "replace")
            problems = []
            if p.returncode != want:
                problems.append(f"exit code {p.returncode}, expected {want}")
            if p.returncode < 0 or p.returncode >= 128 or p.returncode == 70:
                problems.append("crashed or reported an internal error")
            if need_loc and not LOC.search(err):
                problems.append("no diagnostic with a location")
            if want != 0 and not err.strip():
                problems.append("printed nothing")
            if problems:
                failed += 1
                print(f"FAIL {name}: " + "; ".join(problems))
                print("    " + "\n    ".join(err.splitlines()[:8]))
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
