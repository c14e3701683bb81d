#!/usr/bin/env python3
"""The tree's layering, checked on the includes: each stage folder may include only the folders
listed for it below (dependencies point down the pipeline; runtime/ is what a deployed program
needs and includes no LLVM, no ANTLR and no IR). Third-party headers are checked too: LLVM's and
ANTLR's only where they belong.

    check_layers.py REPO_ROOT         check the tree
    check_layers.py --self-test       plant violations in a temporary tree and expect them found

The files of the runner without a compiler (NO_COMPILER) may include nothing of codegen/.

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
    "onnx": {"support", "frontend", "sema", "ir", "runtime"},
    "lsp": {"support", "frontend", "sema"},
    "codegen": {"support", "sema", "ir", "runtime"},
    "exec": {"support", "frontend", "sema", "ir", "runtime", "codegen"},
    "python": {"support", "frontend", "sema", "ir", "runtime", "codegen", "exec"},
}
# Third-party headers that only some folders may include.
RESTRICTED = [
    (re.compile(r"^(llvm|llvm-c)/"), {"codegen"}, "LLVM stays inside codegen/"),
    (re.compile(r"^antlr4-runtime|^antlr4|^Tessera(Lexer|Parser)"), {"frontend", "grammar"}, "ANTLR stays inside frontend/"),
    (re.compile(r"^onnx/|^google/protobuf/"), {"onnx"}, "ONNX and Protobuf stay inside onnx/ (the importer)"),
]
# What the runner without a compiler (tools/tsr-run-bundle) is built from: these files may include
# nothing of codegen/ (its libraries link LLVM), although exec/ may include codegen/ elsewhere.
NO_COMPILER = ["exec/StepBackend.h", "exec/CompiledExecutor.h", "exec/CompiledExecutor.cpp", "exec/KernelLauncher.h",
               "exec/KernelLauncher.cpp", "exec/host", "exec/cuda/CudaBackend.h", "exec/cuda/CudaBackend.cpp",
               "exec/bundle/BundleBackend.h", "exec/bundle/BundleBackend.cpp", "exec/bundle/RunBundle.h",
               "exec/bundle/RunBundle.cpp", "exec/bundle/BundleModels.h", "exec/bundle/BundleModels.cpp", "tools/tsr-run-bundle",
               # tessera._runtime (python/): bundles without a compiler; only _compiler links one
               "python/src/Program.h", "python/src/Program.cpp", "python/src/runtime_module.cpp"]
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
    for entry in NO_COMPILER:
        where = os.path.join(root, entry)
        files = [where] if os.path.isfile(where) else [os.path.join(d, n) for d, _, ns in os.walk(where) for n in sorted(ns)]
        for path in files:
            if not path.endswith((".h", ".cpp")):
                continue
            checked += 1
            for ln, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if m and (m.group(1).startswith("codegen/") or re.match(r"^(llvm|llvm-c)/", m.group(1))):
                    print(f"FAIL {os.path.relpath(path, root)}:{ln}: #include \"{m.group(1)}\": the runner without a compiler "
                          f"(tools/tsr-run-bundle) is built from this file; it may include nothing of codegen/")
                    failed += 1
    return checked, failed


def self_test():
    """The check must find planted violations (its negative control)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "runtime"))
        with open(os.path.join(tmp, "runtime", "Bad.cpp"), "w") as f:
            f.write('#include "ir/IR.h"\n#include <llvm/IR/Module.h>\n')
        # exec/ may include codegen/, but not in a file of the runner without a compiler.
        os.makedirs(os.path.join(tmp, "exec", "host"))
        with open(os.path.join(tmp, "exec", "host", "Bad.cpp"), "w") as f:
            f.write('#include "codegen/cpu/CpuKernel.h"\n')
        # ONNX's and Protobuf's headers stay in onnx/ (the importer), out of the deployed runtime.
        os.makedirs(os.path.join(tmp, "sema"))
        with open(os.path.join(tmp, "sema", "Bad.cpp"), "w") as f:
            f.write('#include <google/protobuf/message.h>\n')
        _, failed = check(tmp)
    if failed != 4:
        print(f"FAIL self-test: {failed} violations found in a tree with 4 planted")
        return 1
    print("self-test: all 4 planted violations found")
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
