"""The package layout is the architecture: dependency direction and public surfaces."""

from __future__ import annotations

import ast
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
        "verify_and_read", "verify_ledger", "NEED_DATA", "NeedData", "ParserClosedError", "SansIOParser", "drain",
    ])
    for name in ledger.__all__:
        assert getattr(ledger, name) is not None


PACKAGES = ("ledger", "collectors", "caisson")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_sources() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imported_modules(path: Path, modules: dict[str, Path], *, top_level_only: bool,
                      run_time_only: bool = False) -> set[str]:
    """The project modules a file imports (``from a.b import c`` counts a.b.c when it is a module);
    `run_time_only`: not those imported for a type checker only (``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if run_time_only:
        tree = _without_type_checking(tree)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # module scope, including module-level if/try blocks, never function bodies
        stack, nodes = list(tree.body), []
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, (ast.If, ast.Try)):
                stack.extend(node.body + node.orelse + getattr(node, "finalbody", [])
                             + [s for h in getattr(node, "handlers", []) for s in h.body])
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            submodules = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
            found.update(submodules)
            if len(submodules) < len(node.names):  # names defined in the module itself
                found.add(node.module)
    return found


def _without_type_checking(tree: ast.Module) -> ast.Module:
    """The module without its ``if TYPE_CHECKING:`` blocks (imports a type checker reads, never run)."""
    class Drop(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> ast.AST | None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                return None
            return self.generic_visit(node)

    return Drop().visit(tree)


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
    modules = _package_sources()
    graph = {name: _imported_modules(path, modules, top_level_only=top_level_only, run_time_only=True) - {name}
             for name, path in modules.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


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
