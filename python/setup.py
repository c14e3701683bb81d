"""The `tessera` Python package from this repository (docs/python.md):

    python3 -m venv --system-site-packages venv     # torch and NumPy from the system, if wanted
    venv/bin/pip install ./python                   # from the repository's root

Builds the extension modules with CMake into build-python/ (TSR_PYTHON=ON: position-independent
code; TSR_PYTHON_BUILD_DIR overrides the folder, TSR_PYTHON_JOBS the parallel jobs) from the same
sources as the tools, then installs the package: tessera/ with _runtime (bundles, no LLVM),
_compiler (compile(), the host JIT), the Python files and the stdlib. There is no pyproject.toml
on purpose: pip then builds with the environment's own setuptools and needs no package index.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildTessera(build_py):
    def run(self):
        build = os.environ.get("TSR_PYTHON_BUILD_DIR") or os.path.join(ROOT, "build-python")
        if not os.path.exists(os.path.join(build, "build.ninja")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                   "-DTSR_PYTHON=ON", "-DTSR_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("TSR_PYTHON_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call(["ninja", "-C", build, "-j", jobs, "tessera_python"])
        super().run()
        shutil.copytree(os.path.join(build, "python", "tessera"), os.path.join(self.build_lib, "tessera"),
                        dirs_exist_ok=True)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(
    name="tessera",
    version="0.1.0",
    description="Call Tessera programs and bundles from Python: torch.Tensor and NumPy through DLPack",
    packages=["tessera"],
    package_dir={"tessera": "tessera"},
    python_requires=">=3.9",
    cmdclass={"build_py": BuildTessera},
    distclass=BinaryDistribution,
    zip_safe=False,
)
