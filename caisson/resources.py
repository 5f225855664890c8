"""Where caisson finds its own folders: the image recipes (`images/`), the scenarios
(`scenarios/`, including the selftest's probes and the demo's click scenario) and the
studies (`studies/`, the checked-in study definitions).

One rule, the same from a checkout and from an installed wheel (docs/architecture.md,
"resources"), first match wins:

1. ``$CAISSON_IMAGES_DIR`` / ``$CAISSON_SCENARIOS_DIR`` / ``$CAISSON_STUDIES_DIR``, when set;
2. the folder beside the ``caisson`` package, when it exists (a checkout, or an editable
   install of one);
3. the copy shipped inside the package, ``caisson/_data/<name>`` (setup.py's ``build_py``
   puts it there when a wheel is built).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from caisson.errors import UsageError

__all__ = ["ResourceName", "resource_dir"]

ResourceName = Literal["images", "scenarios", "studies"]
_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: ResourceName) -> Path:
    """The folder of caisson's ``images``, ``scenarios`` or ``studies``, by the rule in the module docstring.

    Raises:
        UsageError: ``name`` is not one of the three, or no candidate folder exists (the
            message lists every place looked at).
    """
    if name not in ("images", "scenarios", "studies"):
        raise UsageError(f"unknown resource folder {name!r}: expected 'images', 'scenarios' or 'studies'")
    variable = f"CAISSON_{name.upper()}_DIR"
    if os.environ.get(variable):
        return Path(os.environ[variable])
    candidates = [_PACKAGE.parent / name, _PACKAGE / "_data" / name]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise UsageError(f"caisson's {name}/ folder was not found: set {variable}, or look at "
                     + ", ".join(str(c) for c in candidates))
