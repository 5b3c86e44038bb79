"""Builds the optional C fast path (keyedstate/fastpath.py); everything else is configured in pyproject.toml."""

from glob import glob

from setuptools import Extension, setup

# One extension module from every C file of the folder (one per type, see fastpath.h). Relative paths: pip runs this
# from the project root. The folder is not named after the module: a folder keyedstate/_fastpath/ would import as an
# empty namespace package wherever the extension is not built, and the fast path would take it for the module.
SOURCE_FOLDER = "keyedstate/_fastpath_src"

setup(
    # optional: without a C compiler the install succeeds and keyedstate runs its pure-Python implementation
    ext_modules=[
        Extension(
            "keyedstate._fastpath",
            sources=sorted(glob(f"{SOURCE_FOLDER}/*.c")),
            depends=sorted(glob(f"{SOURCE_FOLDER}/*.h")),
            optional=True,
        )
    ],
)
