"""Build step for the ledger's two native modules: ``ledger._chainc`` (the hash chain loop)
and ``ledger._appendc`` (the writer's append).

Everything else is declared in pyproject.toml. The extensions are optional: without a C
compiler or OpenSSL's headers the install still succeeds and the ledger uses their
pure-Python twins (same bytes, slower; `ledger._chain.NATIVE`, `ledger._append.NATIVE` and
the ledger benchmark say which ones ran).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("ledger._chainc", ["ledger/_chainc.c"], libraries=["crypto"], optional=True),
        Extension("ledger._appendc", ["ledger/_appendc.c"], optional=True),
    ]
)
