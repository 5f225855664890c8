"""Lazy package faces (PEP 562): a package re-exports names its ``__init__`` does not import.

A face names what other packages use (its ``__all__``); the names whose modules the face does
not import itself are resolved on first access, so importing the package (or any of its
modules, which imports the package first) imports no more than it did. The face keeps the
same names under ``if TYPE_CHECKING:`` for the type checker (tests/test_layout.py pins both).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_face"]


def lazy_face(package: str, where: Mapping[str, Iterable[str]],
              namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names in ``where`` (submodule ->
    names) are imported on first access.

    Each access reads the submodule's attribute (nothing is copied into the package), so a
    test that patches the submodule is seen through the face.

    Args:
        package: the package's ``__name__``.
        where: for each submodule (relative to ``package``), the names the face resolves from it.
        namespace: the package's ``globals()``, for ``__dir__``.
    """
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted({*namespace, *module_of})

    return __getattr__, __dir__
