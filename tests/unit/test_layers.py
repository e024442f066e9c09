"""The house's floors (docs/architecture.md), checked on the source: every import of a hydria
module, at module level or in a function (not those only for type checkers), goes to the same
floor or a lower one; no modules import each other in a circle; only the command line prints or
exits."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "hydria"

# Highest floor first; a module's floor is its longest matching prefix's.
FLOORS = {
    "hydria.cli": 5, "hydria.__main__": 5,
    "hydria.api": 4, "hydria.bundle": 4, "hydria.slurm": 4, "hydria.oci": 4,
    "hydria.container": 3, "hydria.doctor": 3, "hydria.imagebuild": 3,
    "hydria.image": 2, "hydria.hooks": 2,
    "hydria.runtime": 1,
}
# Writing to the terminal or ending the process outside cli/, and why it is right there.
OUTPUT_ALLOWED = {
    "hydria.log": "the log's own output",
    "hydria.image.progress": "the progress display draws on standard error",
    "hydria.slurm.shim": "the Slurm protocol: the shim reads the step's standard error",
    "hydria.runtime.syscalls": "a forked child's _exit",
    "hydria.runtime.rootfs": "a forked child's _exit",
    "hydria.runtime.namespaces": "a forked child's _exit",
    "hydria.imagebuild.sandbox": "a forked child's _exit, and the error of a step's command that cannot start",
    "hydria.imagebuild.idmap": "a forked child's _exit",
    "hydria.container.unpack_behind": "the forked unpacker's _exit",
}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The hydria modules ``name`` imports. The package's ``__init__`` only holds the version and
    a lazy facade (its ``__getattr__`` imports the API on first use), so its functions are not
    followed: importing ``hydria`` imports nothing else."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for statement in node.orelse:
                    self.visit(statement)
                return
            self.generic_visit(node)

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            if name != "hydria":
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in MODULES else node.module)

    Visitor().visit(ast.parse(path.read_text()))
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _floor(module: str) -> int:
    matches = [prefix for prefix in FLOORS if module == prefix or module.startswith(prefix + ".")]
    return FLOORS[max(matches, key=len)] if matches else 0


def test_imports_go_to_the_same_floor_or_down() -> None:
    upward = [f"{a} -> {b}" for a, targets in sorted(GRAPH.items()) for b in sorted(targets)
              if _floor(b) > _floor(a)]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    def circle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            module, trail = stack.pop()
            for target in GRAPH[module]:
                if target == start:
                    return trail + [start]
                if target not in seen:
                    seen.add(target)
                    stack.append((target, trail + [target]))
        return None

    circles = [" -> ".join(trail) for module in sorted(GRAPH) if (trail := circle_from(module))]
    assert circles == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _floor(m) < 5 and m not in OUTPUT_ALLOWED))
def test_only_the_command_line_prints_or_exits(module: str) -> None:
    calls = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Call):
            function = node.func
            called = function.id if isinstance(function, ast.Name) else \
                function.attr if isinstance(function, ast.Attribute) else None
            receiver = ast.unparse(function.value) if isinstance(function, ast.Attribute) else ""
            if called in ("print", "_exit") or (called == "exit" and receiver == "sys") or \
                    (called == "write" and receiver in ("sys.stdout", "sys.stderr")):
                calls.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    assert calls == []


def test_the_checks_see_the_house() -> None:
    """Guards the checks above against passing on nothing: the graph has the known edges."""
    assert "hydria.runtime.rootfs" in GRAPH["hydria.container.start"]
    assert "hydria.container.start" in GRAPH["hydria.container.options"]  # a function-level import
    assert "hydria.runtime.confscript" not in GRAPH["hydria.container.start"]  # only for type checkers
    assert _floor("hydria.image.sources.registry") == 2 and _floor("hydria.paths") == 0
