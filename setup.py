"""Build step for the one native module, ``ledger._chainc`` (the hash chain loop).

Everything else is declared in pyproject.toml. The extension is optional: without a C
compiler or OpenSSL's headers the install still succeeds and the ledger uses its
pure-Python twin (same bytes, slower; `ledger._chain.NATIVE` and the ledger benchmark say which one ran).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("ledger._chainc", ["ledger/_chainc.c"], libraries=["crypto"], optional=True),
    ]
)
