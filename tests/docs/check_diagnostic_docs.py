#!/usr/bin/env python3
"""Every diagnostic code in support/DiagnosticKinds.def has its section (`### CODE`) in
docs/diagnostics.md, and every section names a code that exists. Ends with `N passed, N failed`."""
import re
import sys

root = sys.argv[1]
codes = re.findall(r'^DIAG\(\s*\w+,\s*"([A-Z0-9]+)"', open(f"{root}/support/DiagnosticKinds.def").read(), re.M)
sections = set(re.findall(r"^### ([A-Z0-9]+)\s*$", open(f"{root}/docs/diagnostics.md").read(), re.M))
failed = 0
for c in codes:
    if c not in sections:
        print(f"FAIL {c} has no section in docs/diagnostics.md")
        failed += 1
for s in sorted(sections - set(codes)):
    print(f"FAIL docs/diagnostics.md documents {s}, which is not in DiagnosticKinds.def")
    failed += 1
print(f"{max(len(codes) - failed, 0)} passed, {failed} failed")
sys.exit(1 if failed else 0)
