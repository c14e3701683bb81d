#!/usr/bin/env python3
"""The tree's layering, checked on the includes: each stage folder may include only the folders
listed for it below (dependencies point down the pipeline; runtime/ is what a deployed program
needs and includes no LLVM, no ANTLR and no IR). Third-party headers are checked too: LLVM's and
ANTLR's only where they belong.

    check_layers.py REPO_ROOT         check the tree
    check_layers.py --self-test       plant a violation in a temporary tree and expect it found

Prints each violation as FILE:LINE: `#include` and the rule; ends with `N passed, N failed`
(files checked)."""
import os
import re
import shutil
import sys
import tempfile

# folder -> the project folders its files may include (itself is always allowed).
ALLOWED = {
    "support": set(),
    "grammar": {"support"},
    "frontend": {"support", "grammar"},
    "sema": {"support", "frontend"},
    "runtime": {"support"},
    "ir": {"support", "frontend", "sema", "runtime"},
    "lsp": {"support", "frontend", "sema"},
    "codegen": {"support", "sema", "ir", "runtime"},
    "exec": {"support", "frontend", "sema", "ir", "runtime", "codegen"},
}
# Third-party headers that only some folders may include.
RESTRICTED = [
    (re.compile(r"^(llvm|llvm-c)/"), {"codegen"}, "LLVM stays inside codegen/"),
    (re.compile(r"^antlr4-runtime|^antlr4|^Tessera(Lexer|Parser)"), {"frontend", "grammar"}, "ANTLR stays inside frontend/"),
]
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def check(root):
    failed = checked = 0
    for top in sorted(ALLOWED):
        for d, _, names in os.walk(os.path.join(root, top)):
            if "/generated" in d:
                continue
            for n in sorted(names):
                if not n.endswith((".h", ".cpp", ".def")):
                    continue
                path = os.path.join(d, n)
                checked += 1
                for ln, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    first = inc.split("/", 1)[0]
                    if "/" in inc and first in ALLOWED and first != top and first not in ALLOWED[top]:
                        print(f"FAIL {os.path.relpath(path, root)}:{ln}: #include \"{inc}\": {top}/ may include only "
                              f"{', '.join(sorted(ALLOWED[top])) or 'nothing else'}")
                        failed += 1
                    for pat, where, rule in RESTRICTED:
                        if pat.match(inc) and top not in where:
                            print(f"FAIL {os.path.relpath(path, root)}:{ln}: #include <{inc}>: {rule}")
                            failed += 1
    return checked, failed


def self_test():
    """The check must find a planted violation (its negative control)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "runtime"))
        with open(os.path.join(tmp, "runtime", "Bad.cpp"), "w") as f:
            f.write('#include "ir/IR.h"\n#include <llvm/IR/Module.h>\n')
        _, failed = check(tmp)
    if failed != 2:
        print(f"FAIL self-test: {failed} violations found in a tree with 2 planted")
        return 1
    print("self-test: both planted violations found")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    checked, failed = check(sys.argv[1])
    print(f"{checked} files checked")
    print(f"{checked if not failed else 0} passed, {failed} failed")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
