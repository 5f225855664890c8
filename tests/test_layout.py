"""The package layout is the architecture: dependency direction and public surfaces."""

from __future__ import annotations

import ast
import functools
import importlib
import textwrap
from pathlib import Path

import pytest

import ledger

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"ledger": {"collectors", "caisson"}, "collectors": {"caisson"}}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_dependency_direction_ledger_collectors_caisson():
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = _imports(path) & forbidden
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: breaks ledger <- collectors <- caisson"


def test_the_product_imports_no_test_fixture():
    """Builders only tests and benchmarks use live in `tests/_fixtures/`; no package imports them."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = _imports(path) & {"tests", "benchmarks"}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: a fixture in the product"


# The proxy addon is mitmproxy code: it runs inside mitmdump's own asyncio loop, in its own
# process, never in caisson's trio tasks (its resolver hook awaits the loop's getaddrinfo).
ASYNCIO_OUTSIDE_CAISSON = {ROOT / "collectors" / "proxy" / "addon.py"}


def test_asyncio_is_confined_to_the_docker_adapter():
    for path in sorted(ROOT.glob("*/**/*.py")):
        if ".venv" in path.parts or path.name == "_docker.py" or "tests" in path.parts or path in ASYNCIO_OUTSIDE_CAISSON:
            continue
        assert not _imports(path) & {"asyncio", "aiodocker", "trio_asyncio"}, path


def test_ledger_public_surface_is_pinned():
    assert sorted(ledger.__all__) == sorted([
        "BLOBS_DIR", "BlobMismatchError", "BlobStore", "CREDENTIAL_PATTERNS", "SECRET_HEADERS", "SECRET_QUERY_PARAMS", "Redactor",
        "derive_fingerprint_key", "is_credential", "keyed_fingerprint", "looks_secret", "redact_argv", "redact_env", "redact_exec", "CaissonError", "FORMAT_VERSION", "Header", "KeyFileError", "LEDGER_FILE",
        "LedgerChecker", "LedgerError", "LedgerWriter", "NotALedgerError", "Record", "Seal", "SigningKey",
        "Submission", "VerifyKey", "VerifyReport", "WriterClosedError", "fingerprint", "fingerprint_secret", "follow_records",
        "generate_keypair", "load_signing_key", "load_verify_key", "locate", "read_records", "run_writer",
        "verify_and_read", "VerifiedStream", "verify_ledger", "NEED_DATA", "NeedData", "ParserClosedError", "SansIOParser", "drain",
        "HeadCheck", "HeldHead", "encode_head", "load_heads", "PROOF_MAGIC", "PROOF_VERSION", "LedgerProof", "Proof",
        "ProofReport", "ProvenBlob", "ProvenRecord", "decode_proof", "encode_proof", "is_proof", "prove",
        "read_proof", "verify_proof",
    ])
    for name in ledger.__all__:
        assert getattr(ledger, name) is not None


PACKAGES = ("ledger", "collectors", "caisson")


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_sources(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    return {_module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _module_scope(tree: ast.Module) -> list[ast.stmt]:
    """The statements run at import: module level, inside module-level if/try blocks, never function bodies."""
    stack, nodes = list(tree.body), []
    while stack:
        node = stack.pop()
        nodes.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", [])
                         + [s for h in getattr(node, "handlers", []) for s in h.body])
    return nodes


@functools.cache
def _lazy_sources(path: Path) -> dict[str, str]:
    """A lazy face's names (PEP 562: a module-level ``__getattr__``), each with the module it is
    resolved from (its ``if TYPE_CHECKING:`` imports); {} for a module that is no lazy face."""
    scope = _module_scope(_tree(path))
    if "__getattr__" not in _bound_names(path):
        return {}
    return {alias.asname or alias.name: node.module for node in scope
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 for alias in node.names}


def _imported_modules(path: Path, modules: dict[str, Path], *, top_level_only: bool,
                      run_time_only: bool = False) -> set[str]:
    """The project modules a file imports (``from a.b import c`` counts a.b.c when it is a module,
    and, from a lazy face, the module the face resolves ``c`` from); `run_time_only`: not those
    imported for a type checker only (``if TYPE_CHECKING:``)."""
    tree = _run_time_tree(path) if run_time_only else _tree(path)
    nodes = _module_scope(tree) if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            lazy = _lazy_sources(modules[node.module]) if run_time_only else {}
            for alias in node.names:
                submodule = _submodule(node.module, alias.name, modules)
                found.add(submodule or lazy.get(alias.name, node.module))
    return found


def _submodule(module: str, name: str, modules: dict[str, Path]) -> str | None:
    """The module ``from module import name`` imports, or None when it imports a name: one the
    package binds itself wins over its submodule of that name (``from caisson.run import record``)."""
    submodule = f"{module}.{name}"
    return submodule if submodule in modules and name not in _bound_names(modules[module]) else None


def _imported_names(path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, name) for each ``from module import name`` of a project module where the name
    is no submodule: the names a file takes from another module's surface."""
    return [(node.module, alias.name) for node in ast.walk(_tree(path))
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules
            for alias in node.names if _submodule(node.module, alias.name, modules) is None]


@functools.cache
def _run_time_tree(path: Path) -> ast.Module:
    """The module without its ``if TYPE_CHECKING:`` blocks (imports a type checker reads, never run)."""
    class Drop(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> ast.AST | None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                return None
            return self.generic_visit(node)

    return Drop().visit(ast.parse(path.read_text(), filename=str(path)))


@functools.cache
def _bound_names(path: Path) -> frozenset[str]:
    """The names a module binds at module scope (defs, classes, assignments, imports)."""
    names: set[str] = set()
    for node in _module_scope(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return frozenset(names)


def _dunder_all(path: Path) -> list[str] | None:
    """A module's ``__all__`` (a literal list or tuple of names at module level), or None."""
    for node in _tree(path).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return list(value) if isinstance(value, (list, tuple)) else None
    return None


def _room(name: str, modules: dict[str, Path]) -> str:
    """The package a module lives in: itself for a package's ``__init__``."""
    return name if modules[name].name == "__init__.py" else name.rpartition(".")[0]


def _face(name: str, modules: dict[str, Path]) -> str:
    """What another package imports to reach module ``name``: the package it lives in, or the
    module itself when that is a top-level package (``caisson.errors``, ``collectors.sse``)."""
    room = _room(name, modules)
    return name if "." not in room else room


def _inside(room: str, face: str) -> bool:
    return room == face or room.startswith(face + ".")


def cross_face_imports(modules: dict[str, Path]) -> list[str]:
    """Imports of a module past another package's face: a module imports the modules of its
    own package (and of the packages it is inside), and of any other package only the
    package itself; a module of a top-level package (``caisson.errors``) is its own face."""
    bad = []
    for name, path in modules.items():
        room = _room(name, modules)
        for target in sorted(_imported_modules(path, modules, top_level_only=False)):
            face = _face(target, modules)
            if target != face and not _inside(room, face):
                bad.append(f"{name} imports {target}, past the face {face}")
    return bad


def unpinned_names(modules: dict[str, Path]) -> list[str]:
    """Modules with no literal ``__all__``, names in an ``__all__`` the module does not bind
    (a lazy face binds them in its ``if TYPE_CHECKING:`` imports), and names a module of another
    package imports from a face (a package, or a top-level package's module) not in its ``__all__``."""
    bad = []
    for name, path in modules.items():
        names = _dunder_all(path)
        if names is None:
            bad.append(f"{name} has no literal __all__")
            continue
        bad.extend(f"{name}.__all__ names {n!r}, which {name} does not define"
                   for n in names if n not in _bound_names(path))
        bad.extend(f"{name}.__all__ names {n!r} twice" for n in sorted({n for n in names if names.count(n) > 1}))
        room = _room(name, modules)
        for target, n in _imported_names(path, modules):
            face = _face(target, modules)
            if room != _room(target, modules) and not _inside(room, face) \
                    and n not in (_dunder_all(modules[target]) or ()):
                bad.append(f"{name} imports {n} from {target}, not in its __all__")
    return bad


def import_cycle(modules: dict[str, Path], *, top_level_only: bool) -> list[str]:
    """One import cycle as the modules along it, or [] (run-time imports only)."""
    graph = {name: _imported_modules(path, modules, top_level_only=top_level_only, run_time_only=True) - {name}
             for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_no_module_imports_another_packages_private_module():
    """A private module (``_name``) is imported only from inside the package that holds it."""
    modules = _package_sources()
    bad = []
    for name, path in modules.items():
        importer = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in _imported_modules(path, modules, top_level_only=False):
            parts = target.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:i])
                    if importer != owner and not importer.startswith(owner + "."):
                        bad.append(f"{name} imports {target}, private to {owner}")
                    break
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("top_level_only", [True, False], ids=["module-level", "with-function-level"])
def test_no_import_cycle(top_level_only):
    """Imports form no cycle (a package's __init__ counts as importing what it re-exports;
    a submodule that imports names from its own package's __init__ closes a cycle): at module
    level, and with the imports inside functions too (deferred, they still tie the modules
    together); imports for a type checker only (``if TYPE_CHECKING:``) do not count."""
    assert import_cycle(_package_sources(), top_level_only=top_level_only) == []


WITNESS_TASKS = {"run_strace_witness", "run_procfs_witness", "run_proxy_witness", "run_dns_witness",
                 "run_pcap_witness"}


def test_every_witness_task_is_under_60_lines():
    """A witness task is a thin loop inside `collectors._witness.witness_life`: past 60 lines
    (``def`` to its last line, docstring included), the lifecycle or the parsing leaked in."""
    lengths: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("run_") \
                        and node.name.endswith("_witness"):
                    lengths[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert {name.rpartition(":")[2] for name in lengths} >= WITNESS_TASKS
    assert {name: n for name, n in lengths.items() if n >= 60} == {}


def test_witness_events_reach_the_ledger_as_the_collectors_made_them():
    """The chamber's wiring of the witnesses builds and rewrites no event: what a collector's
    parser emits is what the ledger holds (its golden tests pin the recorded events)."""
    path = ROOT / "caisson" / "run" / "witnesses.py"
    assert "ledger.events" not in _imported_modules(path, _package_sources(), top_level_only=False)
    assert "msgspec.structs.replace(event" not in path.read_text()


def test_no_module_defines_a_function_or_class_twice():
    """A second ``def`` of a name hides the first: a test that never runs, or code that is
    not the code read (seen once: a copy of four tests left beside their replacements)."""
    twice = []
    for path in sorted(ROOT.glob("tests/**/*.py")) + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]:
        tree = ast.parse(path.read_text(), filename=str(path))
        seen: set[str] = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in seen:
                    twice.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}")
                seen.add(node.name)
    assert twice == []


def test_no_module_imports_past_another_packages_face():
    """A module imports another package through its face (``from caisson.replay import
    replay_runs``), never its modules (``caisson.replay.scoring``): the face is the package's
    whole surface, and a module behind it can move without touching its importers."""
    assert cross_face_imports(_package_sources()) == []


def test_every_module_pins_its_all():
    """Every product module and package names its surface in ``__all__``; every name there
    exists; what a module of another package imports from a face is in the face's ``__all__``."""
    assert unpinned_names(_package_sources()) == []


def test_lazy_faces_resolve_every_name():
    """A lazy face (``ledger.lazy``) resolves each name of its ``__all__`` and lists it in ``dir()``."""
    modules = _package_sources()
    lazy = sorted(name for name, path in modules.items() if "__getattr__" in _bound_names(path))
    assert {"caisson.agents", "caisson.chamber", "caisson.run", "caisson.study"} <= set(lazy)
    for name in lazy:
        module = importlib.import_module(name)
        assert [n for n in module.__all__ if getattr(module, n, None) is None] == [], name
        assert set(module.__all__) <= set(dir(module)), name
        with pytest.raises(AttributeError):
            getattr(module, "no_such_name")


def test_no_lazy_face_name_is_also_a_submodule():
    """A name a lazy face resolves on access never equals one of its package's submodules:
    importing the submodule (``import caisson.chamber.reap``, by anyone) binds the module on
    the package, and ``from caisson.chamber import reap`` then gives the module, not the
    function. (An eager face binds its name after the submodule is imported, so it wins.)"""
    modules = _package_sources()
    lazy = sorted(name for name, path in modules.items() if "__getattr__" in _bound_names(path))
    clashes = []
    for package in lazy:
        face = importlib.import_module(package)
        clashes += [f"{package}.{name}" for name in face.__all__
                    if name not in vars(face) and f"{package}.{name}" in modules]
    assert clashes == []


_UNBOUND = ("UndefinedName", "UndefinedLocal", "UndefinedExport")


def _unbound_names(paths: list[Path]) -> list[str]:
    """pyflakes' messages, over ``paths``, of a name used (or exported) where it is not bound."""
    from pyflakes.api import checkPath
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self) -> None:
            self.found: list[str] = []

        def flake(self, message) -> None:
            if type(message).__name__ in _UNBOUND:
                self.found.append(str(message))

        def unexpectedError(self, filename, msg) -> None:
            self.found.append(f"{filename}: {msg}")

        def syntaxError(self, filename, msg, lineno, offset, text) -> None:
            self.found.append(f"{filename}:{lineno}: {msg}")

    reporter = Collect()
    for path in paths:
        checkPath(str(path), reporter)
    return reporter.found


def test_no_name_is_used_where_it_is_not_bound():
    """Imports moved into the function that runs (fast start, lazy faces) leave no function
    using a name it no longer imports: mypy checks ledger/ and collectors/ only."""
    paths = sorted(p for top in ("caisson", "ledger", "collectors", "benchmarks", "tests", "scripts")
                   for p in (ROOT / top).rglob("*.py"))
    assert len(paths) > 300
    assert _unbound_names(paths) == []


def test_the_unbound_name_check_finds_a_name_imported_in_another_function(tmp_path):
    bad = tmp_path / "cmd.py"
    bad.write_text("def register():\n    import msgspec\n    return msgspec\n\n\n"
                   "def run():\n    return msgspec.json.encode(1)\n")
    assert [m for m in _unbound_names([bad]) if "undefined name 'msgspec'" in m]


def _synthetic(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """A package tree under ``root`` (path -> source), as `_package_sources` reads it."""
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return _package_sources(root, ("pkg",))


FACES = {
    "pkg/__init__.py": "__all__ = []\n",
    "pkg/errors.py": "__all__ = ['Oops']\nclass Oops(Exception): ...\n",
    "pkg/a/__init__.py": "from pkg.a._impl import f, g\nfrom pkg.a.tools import tool\n__all__ = ['f', 'tool']\n",
    "pkg/a/_impl.py": "__all__ = ['f', 'g']\ndef f(): ...\ndef g(): ...\n",
    "pkg/a/tools.py": "from pkg.a._impl import g\n__all__ = ['tool']\ndef tool(): ...\n",
    "pkg/b/__init__.py": "__all__ = []\n",
}


def test_the_checker_refuses_an_import_past_a_face(tmp_path):
    modules = _synthetic(tmp_path, {**FACES, "pkg/b/user.py": """
        from pkg.errors import Oops
        from pkg.a import f, tool
        __all__ = ['use']
        def use():
            from pkg.a.tools import tool
            import pkg.a._impl
            from pkg.a import tools
    """})
    assert cross_face_imports(modules) == [
        "pkg.b.user imports pkg.a._impl, past the face pkg.a",
        "pkg.b.user imports pkg.a.tools, past the face pkg.a",
    ]
    assert unpinned_names(modules) == []


def test_the_checker_refuses_a_name_missing_from_a_faces_all(tmp_path):
    modules = _synthetic(tmp_path, {**FACES, "pkg/b/user.py": """
        from pkg.a import f, g
        __all__ = ['use', 'gone']
        def use(): ...
    """, "pkg/b/bare.py": "x = 1\n"})
    assert unpinned_names(modules) == [
        "pkg.b.bare has no literal __all__",
        "pkg.b.user.__all__ names 'gone', which pkg.b.user does not define",
        "pkg.b.user imports g from pkg.a, not in its __all__",
    ]
    assert cross_face_imports(modules) == []


def test_the_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    modules = _synthetic(tmp_path, {
        "pkg/__init__.py": "__all__ = []\n",
        "pkg/x.py": "__all__ = ['f']\ndef f():\n    import pkg.y\n",
        "pkg/y.py": "from pkg.x import f\n__all__ = []\n",
        "pkg/z.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.w\n__all__ = []\n",
        "pkg/w.py": "import pkg.z\n__all__ = []\n",
    })
    assert import_cycle(modules, top_level_only=True) == []
    assert import_cycle(modules, top_level_only=False) == ["pkg.x", "pkg.y", "pkg.x"]


def test_the_checker_finds_a_cycle_through_a_lazy_face(tmp_path):
    """``from face import name`` of a lazy face imports the module the name is resolved from."""
    modules = _synthetic(tmp_path, {
        "pkg/__init__.py": "__all__ = []\n",
        "pkg/a/__init__.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg.a.m import f
            __all__ = ['f']
            def __getattr__(name): ...
        """,
        "pkg/a/m.py": "from pkg.b import g\n__all__ = ['f']\ndef f(): ...\n",
        "pkg/b/__init__.py": "__all__ = ['g']\ndef g():\n    from pkg.a import f\n",
    })
    assert import_cycle(modules, top_level_only=True) == []
    assert import_cycle(modules, top_level_only=False) == ["pkg.a.m", "pkg.b", "pkg.a.m"]
