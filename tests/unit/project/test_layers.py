"""The package's imports run downward only: each part imports the parts of lower layers and nothing
above or beside it, so no two parts import each other (type-only and function-level imports count
too: a cycle hidden in a function is still a cycle to whoever changes either side).

The layers, lowest first, are the architecture in import order: what is collected, modelled,
decided, checked and realized sits between the ground floor (the keys, the metric records) and the
launchers and tools that wire all of it together (the session, the simulator, the replay, the
reference generator). A new module goes into a layer here; an import that breaks the order fails
below with both ends named.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

PACKAGE = "sparkscale_listener"
ROOT = Path(__file__).resolve().parents[3] / PACKAGE

# Each layer's parts (a subpackage or a top-level module), lowest first.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    {"readable", "config", "metrics"},  # ground floor: keys, readable units, the metric records
    {"views", "model", "state", "concurrency", "forecast"},
    {"decisions", "collect"},
    {"check", "observe", "evaluator", "policy"},
    {"realize"},
    {"executor"},
    {"control_loop"},
    {"sim", "spark", "reference", "plugins"},  # the loop wired: simulated, in a session, documented, plugins
    {"replay", "__init__"},
    {"__main__", "testing"},
))


def part_of(module: str) -> str:
    """``sparkscale_listener.collect.progress`` -> ``collect``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """The package's modules and packages ``path`` (in the package at ``root``) imports, anywhere
    in it."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                # `from . import jars` names a module; `from .x import Name` the module x.
                found.update(f"{target}.{a.name}" if (root.parent / f"{target}.{a.name}".replace(".", "/")
                                                      ).with_suffix(".py").exists() else target
                             for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
    return found - {module}


def import_graph() -> dict[str, set[str]]:
    return {module_name(path): imports_of(path) for path in sorted(ROOT.rglob("*.py"))}


def violations(graph: Mapping[str, set[str]], layers: Sequence[frozenset[str]]) -> list[str]:
    """A line per import that goes to a part of the same layer or of a higher one, and per part
    that is in no layer."""
    level = {part: i for i, layer in enumerate(layers) for part in layer}
    problems = []
    for module, imported in sorted(graph.items()):
        here = part_of(module)
        if here not in level:
            problems.append(f"{module}: its part {here!r} is in no layer of "
                            "tests/unit/project/test_layers.py")
            continue
        for target in sorted(imported):
            there = part_of(target)
            if there == here:
                continue
            if there not in level:
                problems.append(f"{module} imports {target}: {there!r} is in no layer")
            elif level[there] >= level[here]:
                where = "beside it" if level[there] == level[here] else "above it"
                problems.append(f"{module} imports {target}, a part {where} (layer {level[there]} from "
                                f"layer {level[here]})")
    return problems


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The module-level import cycles (strongly connected components of two or more modules)."""
    modules = set(graph)

    def resolved(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = {m: sorted({r for d in ds if (r := resolved(d)) and r != m}) for m, ds in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in sorted(edges):  # Tarjan's algorithm, iteratively
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(edges[child])))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_import_goes_to_a_lower_layer() -> None:
    problems = violations(import_graph(), LAYERS)
    assert not problems, "\n".join(problems)


def test_no_module_imports_itself_back() -> None:
    assert cycles(import_graph()) == []


def test_an_upward_import_a_sideways_one_and_a_cycle_are_each_named() -> None:
    layers = (frozenset({"config"}), frozenset({"collect", "model"}), frozenset({"spark"}))
    graph = {
        f"{PACKAGE}.collect.collector": {f"{PACKAGE}.spark.bridge", f"{PACKAGE}.config.core"},
        f"{PACKAGE}.collect.batches": {f"{PACKAGE}.model"},
        f"{PACKAGE}.spark.bridge": {f"{PACKAGE}.collect.collector"},
        f"{PACKAGE}.model": set(),
        f"{PACKAGE}.config.core": set(),
        f"{PACKAGE}.extra": set(),
    }
    assert violations(graph, layers) == [
        f"{PACKAGE}.collect.batches imports {PACKAGE}.model, a part beside it (layer 1 from layer 1)",
        f"{PACKAGE}.collect.collector imports {PACKAGE}.spark.bridge, a part above it (layer 2 from layer 1)",
        f"{PACKAGE}.extra: its part 'extra' is in no layer of tests/unit/project/test_layers.py",
    ]
    assert cycles(graph) == [[f"{PACKAGE}.collect.collector", f"{PACKAGE}.spark.bridge"]]


def test_type_only_and_function_level_imports_count(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    root.mkdir()
    (root / "sim.py").write_text("", encoding="utf-8")
    probe = root / "observe.py"
    probe.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                     "    from .control_loop import Autoscaler\n\n\n"
                     f"def f():\n    import {PACKAGE}.config\n    from . import sim\n", encoding="utf-8")
    assert imports_of(probe, root) == {f"{PACKAGE}.control_loop", f"{PACKAGE}.config", f"{PACKAGE}.sim"}


# What a reader can hold at once: a module, a class, a Java file (its own tests included).
MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_JAVA_LINES = 600, 300, 400


def test_no_module_class_or_java_file_outgrows_a_reading() -> None:
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{module_name(path)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"{module_name(path)}.{node.name}: {lines} lines")
    for path in sorted((ROOT.parent / "jvm-bridge").rglob("src/**/*.java")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_JAVA_LINES:
            too_long.append(f"{path.relative_to(ROOT.parent)}: {lines} lines")
    assert not too_long, too_long
