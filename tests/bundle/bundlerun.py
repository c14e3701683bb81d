"""What the tests that run bundles share (bundle_roundtrip, bundle_runner_nollvm): the runner's
verbose count line, timings to mask when outputs are compared, module folders that prove a bundle
run reads no module from disk, and the files a run wrote."""
import glob
import os
import re

# `tsr: bundle: N programs from the bundle, M compiled here` (TSR_BUNDLE_VERBOSE=1).
COUNT = re.compile(r"^tsr: bundle: (\d+) programs from the bundle, (\d+) compiled here$", re.M)
# Durations in printed lines ("1.3s"), which differ between two runs of one program.
TIME = re.compile(r"\d+(\.\d+)?s\b")


def broken_module_folders(base):
    """A stdlib and a TESSERA_PATH folder whose every module fails to parse."""
    folders = []
    for name in ("stdlib", "path"):
        d = os.path.join(base, name)
        os.makedirs(os.path.join(d, "optim"), exist_ok=True)
        for m in ("nn", "kernels", "plot", "optim/adamw", "optim/sgd", "optim/adam", "optim/momentum"):
            with open(os.path.join(d, m + ".tsr"), "w") as f:
                f.write("def broken(:\n")
        folders.append(d)
    return folders


def files_in(folder):
    """The files under `folder`, as sorted paths relative to it."""
    return sorted(os.path.relpath(p, folder) for p in glob.glob(os.path.join(folder, "**", "*"), recursive=True) if os.path.isfile(p))
