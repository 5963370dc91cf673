"""The package's shape: imports among toolserve's modules go one way, down the layers, and
modules stay small.

The import graph is read from the source (`ast`), not by importing. Imports inside functions
are edges too: deferring an import hides a cycle from the interpreter, not from a reader (the
registry once imported its loader inside a function because the loader's placement imported
the registry). Imports under `if TYPE_CHECKING:` are not: they name types for annotations and
run nowhere (formats/stream.py names the Grammar it runs, whose Format makes the parser).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "toolserve"
MAX_LINES = 460  # docs/architecture.md: no module over about 450 lines

# The layers, lowest first (docs/architecture.md): a module imports from its own layer and the
# ones below, never from one above; within a layer, test_no_import_cycles keeps the order. A
# request runs down them: the protocol's adapter (api), the conversation and pipeline (serving),
# the parts they use (engine, formats, models), the shared types and errors.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("toolserve", "toolserve._native", "toolserve.types", "toolserve.errors"),
    ("toolserve.constrain", "toolserve.engine", "toolserve.formats", "toolserve.models", "toolserve.config", "toolserve.mcp"),
    ("toolserve.serving",),
    ("toolserve.upstream",),  # a model behind another server
    ("toolserve.api",),
    ("toolserve.cli", "toolserve.launch"),
)

# Over MAX_LINES still, and why. The test also fails once one of them is under, so that it
# leaves this list then: the list only ever shrinks.
PENDING: dict[str, str] = {}  # modules over the limit with a reason, each to be split


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Every import statement of a module, in functions too, but not under `if TYPE_CHECKING:`."""

    def __init__(self) -> None:
        self.found: list[ast.Import | ast.ImportFrom] = []

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append(node)

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node):
            for child in node.body:
                self.visit(child)
        for child in node.orelse:
            self.visit(child)


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    visitor = _Imports()
    visitor.visit(tree)
    return visitor.found


def import_graph() -> dict[str, set[str]]:
    """Module -> the toolserve modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from package import module` imports the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it (the first repeated at the end), or None."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [iter(sorted(graph[root]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                left = path.pop()
                on_path.discard(left)
                done.add(left)
                continue
            if nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_sees_known_edges() -> None:
    graph = import_graph()
    assert "toolserve.serving.pipeline" in graph["toolserve.serving.registry"]
    assert "toolserve.engine.placement" in graph["toolserve.serving.placement"]  # `from toolserve.engine import placement`
    assert "toolserve.formats.base" in graph["toolserve.formats.families.hermes"]  # relative: `from ..base import`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles() -> None:
    assert find_cycle(import_graph()) is None


def layer(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    """The index of the layer a module lies in: the longest package of LAYERS that holds it."""
    best = max((p for group in layers for p in group if module == p or module.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{module} is in no layer: add its package to LAYERS"
    return next(i for i, group in enumerate(layers) if best in group)


def upward(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """Every import from a layer into one above it, as 'module -> module'."""
    return sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs if layer(b, layers) > layer(a, layers))


def test_the_layer_check_sees_an_import_upward() -> None:
    layers = (("p.low",), ("p.mid", "p.side"), ("p.top",))
    graph = {"p.top.x": {"p.mid.y", "p.low"}, "p.mid.y": {"p.side.z"}, "p.side.z": {"p.top.x"}, "p.low": set()}
    assert upward(graph, layers) == ["p.side.z -> p.top.x"]
    assert layer("p.mid.y.deep", layers) == 1


def test_imports_go_down_the_layers() -> None:
    graph = import_graph()
    assert {layer(m) for m in graph} == set(range(len(LAYERS)))  # every module placed, no layer empty
    assert upward(graph) == []


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_over_the_size_limit() -> None:
    over = {str(p.relative_to(SRC)): _lines(p) for p in PACKAGE.rglob("*.py") if _lines(p) > MAX_LINES}
    assert set(over) - set(PENDING) == set(), f"modules over {MAX_LINES} lines: {over}"
    shrunk = set(PENDING) - set(over)
    assert not shrunk, f"{sorted(shrunk)} are {MAX_LINES} lines or fewer now: take them off PENDING"
