"""Builds the optional C fast path (keyedstate/fastpath.py); everything else is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    # optional: without a C compiler the install succeeds and keyedstate runs its pure-Python implementation
    ext_modules=[Extension("keyedstate._fastpath", ["keyedstate/_fastpath.c"], optional=True)],
)
