#!/usr/bin/env python3
"""Seeds for fuzz_bundle: FOLDER receives a minimal bundle written by tests/bundle/bundlefile.py
and, when TSRC is given, a bundle tsrc makes of tests/bundle/programs/refusals.tsr (cpu code, PTX
for sm_80). Each seed is prefixed with the byte fuzz_bundle reads as its checksum switch (1: on).

    make_bundle_seeds.py FOLDER [TSRC]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bundle"))
import bundlefile  # noqa: E402


def minimal():
    manifest = {"format": "1.0", "compiler": "seed", "abi": 1, "main": "m.tsr", "source_sha256": "", "ir_sha256": "",
                "modules": [{"name": "m", "path": "m.tsr", "root": "main", "sha256": "", "section": 1}],
                "graph_ir": {"section": 2}, "schedule": {"section": 3}, "tile_ir": {"section": 4},
                "targets": {"cpu": {"triple": "", "cpu": "", "features": []}}, "programs": []}
    secs = [bundlefile.Section(1, "manifest", json.dumps(manifest).encode()), bundlefile.Section(2, "module", b"def main():\n    pass\n"),
            bundlefile.Section(3, "graph-ir", b""), bundlefile.Section(4, "schedule", b""), bundlefile.Section(5, "tile-ir", b"")]
    return bundlefile.write(bundlefile.Bundle(1, 0, secs))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {"minimal": minimal()}
    if len(sys.argv) > 2:
        program = os.path.join(HERE, "..", "bundle", "programs", "refusals.tsr")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.bundle")
            subprocess.run([os.path.abspath(sys.argv[2]), program, "-o", path, "--target", "cpu,cuda", "--arch", "sm_80", "--trace", "--steps 2"],
                           check=True, cwd=tmp)
            seeds["refusals"] = open(path, "rb").read()
    for name, data in seeds.items():
        for switch in (b"\x01", b"\x00"):
            with open(os.path.join(out, f"{name}-{switch[0]}.bundle"), "wb") as f:
                f.write(switch + data)
    print(f"{2 * len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
