"""Build step for the ledger's two native modules: ``ledger._chainc`` (the hash chain loop)
and ``ledger._appendc`` (the writer's append), and for the folders a wheel must carry.

Everything else is declared in pyproject.toml. The extensions are optional: without a C
compiler or OpenSSL's headers the install still succeeds and the ledger uses their
pure-Python twins (same bytes, slower; `ledger._chain.NATIVE`, `ledger._append.NATIVE` and
the ledger benchmark say which ones ran).

A wheel also carries ``images/``, ``scenarios/`` and ``studies/`` as ``caisson/_data/``: an installed
caisson finds them there (`caisson.resources`), a checkout finds them beside the package.
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

RESOURCE_DIRS = ("images", "scenarios", "studies")


class BuildPyWithResources(build_py):
    """`build_py` that also copies the resource folders into ``caisson/_data/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout
            return
        for name in RESOURCE_DIRS:
            target = Path(self.build_lib) / "caisson" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(
    cmdclass={"build_py": BuildPyWithResources},
    ext_modules=[
        Extension("ledger._chainc", ["ledger/_chainc.c"], libraries=["crypto"], optional=True),
        Extension("ledger._appendc", ["ledger/_appendc.c"], optional=True),
    ],
)
