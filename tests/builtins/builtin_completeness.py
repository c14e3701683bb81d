#!/usr/bin/env python3
"""ctest builtin_completeness: the walk of the builtin registry (builtin_completeness.cpp), given
the tsr expressions of the finite-difference checks of gradients.

    builtin_completeness.py WALKER TEST_GRAD [WALKER's other arguments...]

The expressions are the third element of each case of TEST_GRAD's CASES list
(tests/autodiff/test_grad.py), read from its syntax tree: the file is not run, so this needs no
torch, and the torch functions beside the expressions are not mistaken for calls of builtins.
"""
import ast
import os
import subprocess
import sys
import tempfile


def grad_expressions(path):
    tree = ast.parse(open(path).read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CASES" for t in node.targets):
            out = []
            for case in node.value.elts:
                if isinstance(case, ast.Tuple) and len(case.elts) >= 3 and isinstance(case.elts[2], ast.Constant):
                    out.append(case.elts[2].value)
            return out
    sys.exit(f"builtin_completeness: no CASES list in {path}")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    walker, test_grad = sys.argv[1], sys.argv[2]
    exprs = grad_expressions(test_grad)
    if not exprs:
        sys.exit(f"builtin_completeness: no expressions in the CASES of {test_grad}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(exprs) + "\n")
    try:
        r = subprocess.run([walker, f.name] + sys.argv[3:])
    finally:
        os.unlink(f.name)
    if r.returncode < 0:
        print(f"builtin_completeness: the walker was killed by signal {-r.returncode}")
        return 1
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
