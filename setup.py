"""Build of the optional C speedups; all project metadata lives in pyproject.toml.

``optional=True``: without a compiler the build of the extension is skipped with a warning and
``storage_engine.record.records`` falls back to its pure-Python loops.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("storage_engine.record._speedups", ["storage_engine/record/_speedups.c"], optional=True)])
