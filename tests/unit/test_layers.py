"""The layers as drawn: no module imports one from a layer above its own (imports inside functions included).

Every module of the package has a layer here; a new module without one fails until it is given one, and the
README's layer table names every layer's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "workbench"
README = PACKAGE.parent / "README.md"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

#: Layers, lowest first: what each may import is its own layer and those below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("extras", "events", "formatting", "config", "placement", "hostspeed", "slurm")),
    ("store", ("store",)),
    ("collect", ("recorder", "cpu_probe", "net_probe", "_keras", "autorecord", "_profile_boot", "links", "allreduce",
                 "formats", "datasets", "workloads")),
    ("analyse", ("analysis",)),
    ("draw", ("figures",)),
    ("present", ("widgets", "text", "report")),
    ("run", ("cluster", "minicluster", "faults", "profile", "importer", "gradients", "rank_groups", "experiment",
             "cases", "node_sweep")),
    ("measure and commands", ("bench", "commands", "cli", "_entry", "api", "__init__")),
)  # fmt: skip
LAYER_OF = {part: index for index, (_name, parts) in enumerate(LAYERS) for part in parts}


def _part(module: str) -> str:
    """The module's top part under the package: ``workbench.analysis.devices`` -> ``analysis``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        pieces = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if pieces[-1] == "__init__" and len(pieces) > 1:
            pieces = pieces[:-1]
        found[".".join(pieces)] = path
    return found


def _imports(path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import of the package in the file, ``from workbench import x`` as ``workbench.x``
    where x is a module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "workbench"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "workbench":
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                out.append((node.lineno, candidate if candidate in known else node.module))
    return out


def test_every_module_has_a_layer():
    missing = sorted({_part(module) for module in _modules()} - set(LAYER_OF))
    assert not missing, f"give these a layer in tests/unit/test_layers.py LAYERS: {missing}"


def test_no_import_runs_up_a_layer():
    modules = _modules()
    known = set(modules)
    upward: set[str] = set()
    for module, path in modules.items():
        own = LAYER_OF.get(_part(module))
        if own is None:
            continue
        for line, target in _imports(path, known):
            theirs = LAYER_OF.get(_part(target), own)
            if theirs > own:
                upward.add(
                    f"{path.relative_to(PACKAGE.parent)}:{line} ({LAYERS[own][0]}) imports {target}"
                    f" ({LAYERS[theirs][0]})"
                )
    assert not upward, "imports up a layer:\n" + "\n".join(sorted(upward))


def test_the_readme_layer_table_names_every_module_group():
    text = README.read_text()
    start = text.index("| layer |")
    table = text[start : text.index("\n\n", start)]
    for name, parts in LAYERS:
        assert f"| {name} |" in table, f"README's layer table lacks the {name!r} layer"
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        for part in parts:
            if part == "__init__":
                continue
            named = f"`{part}.py`" in row or f"`{part}/`" in row
            assert named, f"README's layer table does not name {part} in the {name!r} layer's row"


def test_the_architecture_table_is_the_same_map():
    """docs/architecture.md's one table names each layer's modules in the order of ``LAYERS``."""
    text = ARCHITECTURE.read_text()
    start = text.index("| layer | modules")
    rows = [line for line in text[start : text.index("\n\n", start)].splitlines()[2:]]
    named = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert named == [name for name, _parts in LAYERS] + ["outside the package"]
    for (name, parts), row in zip(LAYERS, rows):
        for part in parts:
            assert f"`{part}`" in row or f"`{part}/`" in row, f"docs/architecture.md's {name!r} row lacks {part}"


def test_the_package_never_imports_the_docs_machinery():
    """``benchmarks/docsbench`` (the docs' benchmarks, renderers and measurements) may import the package; the
    package never imports it, so a user's install has everything it runs."""
    found = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{module}: {name}" for name in names if name.split(".")[0] == "docsbench"]
    assert not found, found
