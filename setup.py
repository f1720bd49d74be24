"""Build of the optional C speedups; all project metadata lives in pyproject.toml.

``optional=True``: without a compiler the build of the extension is skipped with a warning and the engine falls
back to its pure-Python loops (``storage_engine.record.kernels.IMPLEMENTATION == "python"``).
"""
from setuptools import Extension, setup

SOURCES = ["storage_engine/record/_speedups.c", "storage_engine/record/_keymap.c", "storage_engine/record/_clean.c",
           "storage_engine/record/_walk.c"]

setup(ext_modules=[Extension("storage_engine.record._speedups", SOURCES, optional=True,
                             depends=["storage_engine/record/_speedups.h", "storage_engine/record/vendor/xxhash.h"],
                             extra_compile_args=["-O3"])])
