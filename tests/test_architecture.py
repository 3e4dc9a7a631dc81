"""The package's shape, read from its source with `ast` (nothing is imported, no database).

* No import cycle inside ``sqla_queue/``: a module may be understood, and tested, after the
  modules it imports, never together with them. Imports at module level and inside functions
  both count (a lazy import only hides a cycle); ``if TYPE_CHECKING:`` imports do not run.
* No module uses another module's private names: ``from .x import _y``, ``module._y`` on an
  imported sqla_queue module, or ``obj._y`` where ``_y`` is defined only in other sqla_queue
  modules (a method or attribute another module's class keeps to itself). Private *modules*
  (``_engine.py``) with public names are fine; that is how internal interfaces are shared.
  The one exception is the executor's documented internal interface (`EXECUTOR_INTERFACE`).
* ``sqla_queue/testing/`` is what users import in their own tests, so it is built on public
  API only: it imports no private module of sqla_queue.

Each test fails with the full list of violations, one per line with file and line number.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "sqla_queue"
TESTING = f"{PACKAGE}.testing"

EXECUTOR_INTERFACE: frozenset[str] = frozenset()
"""Private names the executor's clients may use: only names `sqla_queue/_executor.py` documents
as its internal interface belong here (public names in that private module need no entry)."""

PUBLIC_UNDERSCORE_API = frozenset({"_asdict", "_fields", "_field_defaults", "_make", "_mapping", "_replace", "_t", "_tuple"})
"""Underscore names that are public API elsewhere: named tuples' and SQLAlchemy rows' methods."""


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the sqla_queue module imported
    line: int


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    imports: list[Import] = field(default_factory=list)

    def where(self, line: int) -> str:
        return f"{self.path.relative_to(ROOT)}:{line}"


# -- reading the package -------------------------------------------------------------------


@cache
def modules() -> dict[str, Module]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, ast.parse(path.read_text(), str(path)), is_package)
    for module in found.values():
        module.imports = list(imports_of(module, found))
    return found


def is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_nodes(tree: ast.AST):
    """Every node that can run: the bodies of ``if TYPE_CHECKING:`` are skipped (their ``else``
    is kept)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if is_type_checking_block(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def base_of(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` reads from."""
    if node.level == 0:
        return node.module or ""
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def imports_of(module: Module, known: dict[str, Module]):
    """Edges to sqla_queue modules. ``from pkg import name`` is an edge to ``pkg.name`` when that
    is a module, else to ``pkg``; importing a submodule is not counted as importing its parent
    packages (every module would then import ``sqla_queue/__init__``)."""
    for node in runtime_nodes(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield Import(module.name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = base_of(module, node)
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                if target in known:
                    yield Import(module.name, target, node.lineno)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def by_place(violation: str) -> tuple[str, int]:
    """Sort key of a ``path:line: ...`` report: by file, then by line number."""
    path, line, _ = violation.split(":", 2)
    return path, int(line)


# -- (a) import cycles ---------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for module in modules().values():
        for edge in module.imports:
            graph[module.name].add(edge.target)
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on a long chain of imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, by breadth-first search."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start, start]


def first_import_line(source: str, target: str) -> str:
    module = modules()[source]
    lines = sorted(edge.line for edge in module.imports if edge.target == target)
    return module.where(lines[0])


def import_cycles() -> list[str]:
    graph = import_graph()
    cyclic = [c for c in strongly_connected_components(graph) if len(c) > 1 or c[0] in graph[c[0]]]
    reports = []
    for component in sorted(cyclic, key=lambda c: (-len(c), c)):
        cycle = shortest_cycle(graph, component)
        steps = "\n".join(
            f"      {a} -> {b}  ({first_import_line(a, b)})" for a, b in zip(cycle, cycle[1:])
        )
        reports.append(
            f"  {len(component)} modules import each other: {', '.join(component)}\n"
            f"    for example:\n{steps}"
        )
    return reports


def test_no_import_cycle_inside_the_package():
    cycles = import_cycles()
    assert not cycles, "import cycles inside sqla_queue/:\n" + "\n".join(cycles)


# -- (b) private names ---------------------------------------------------------------------


@cache
def private_definitions() -> dict[str, set[str]]:
    """Private name -> the modules that define it: a function or class at any depth, a module or
    class level assignment, or an attribute assigned on ``self``/``cls``."""
    defined: dict[str, set[str]] = defaultdict(set)
    for module in modules().values():
        for node in ast.walk(module.tree):
            for name in defined_names(node):
                if is_private(name):
                    defined[name].add(module.name)
    return defined


def defined_names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    names = []
    for target in targets:
        for part in ast.walk(target):
            if isinstance(part, ast.Name) and isinstance(part.ctx, ast.Store):
                names.append(part.id)
            elif isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                names.append(part.attr)
    return names


def module_aliases(module: Module) -> dict[str, str]:
    """Local names bound to sqla_queue modules (``import sqla_queue.x as m``, ``from . import x``)."""
    known = modules()
    aliases = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = base_of(module, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def private_imports(module: Module) -> list[str]:
    found = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = base_of(module, node)
        if base.split(".")[0] != PACKAGE:
            continue
        for alias in node.names:
            if is_private(alias.name) and f"{base}.{alias.name}" not in modules() \
                    and alias.name not in EXECUTOR_INTERFACE:
                found.append(f"{module.where(node.lineno)}: from {base} import {alias.name}")
    return found


def private_attributes(module: Module, defined: dict[str, set[str]] | None = None) -> list[str]:
    """``m._y`` on an imported sqla_queue module, and ``obj._y`` where only other sqla_queue
    modules define ``_y`` (`defined`: private name -> defining modules; the package's own by
    default)."""
    aliases = module_aliases(module)
    defined = private_definitions() if defined is None else defined
    found = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        if node.attr in EXECUTOR_INTERFACE or node.attr in PUBLIC_UNDERSCORE_API:
            continue
        owner = dotted(node.value)
        head, _, rest = (owner or "").partition(".")
        if head in aliases:
            target = ".".join(filter(None, [aliases[head], rest]))
            if target in modules() and f"{target}.{node.attr}" not in modules():
                found.append(f"{module.where(node.lineno)}: {owner}.{node.attr} (private name of {target})")
                continue
        owners = defined.get(node.attr, set())
        if owners and module.name not in owners:
            text = ast.unparse(node)
            found.append(f"{module.where(node.lineno)}: {text} (defined only in {', '.join(sorted(owners))})")
    return found


def test_no_module_uses_another_modules_private_names():
    violations = sorted(
        {line for module in modules().values() for line in [*private_imports(module), *private_attributes(module)]},
        key=by_place,
    )
    assert not violations, (
        f"{len(violations)} use(s) of another module's private names:\n  " + "\n  ".join(violations)
    )


# -- (c) the testing package ---------------------------------------------------------------


def test_testing_package_imports_only_public_modules():
    violations = sorted({
        f"{module.where(edge.line)}: imports {edge.target}"
        for module in modules().values()
        if module.name == TESTING or module.name.startswith(f"{TESTING}.")
        for edge in module.imports
        if not edge.target.startswith(f"{TESTING}.")
        and any(is_private(part) for part in edge.target.split("."))
    }, key=by_place)
    assert not violations, (
        "sqla_queue.testing imports private modules (users' tests import it: public API only):\n  "
        + "\n  ".join(violations)
    )


# -- the checks themselves -----------------------------------------------------------------


def test_the_cycle_finder_finds_a_cycle_and_no_false_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    components = strongly_connected_components(graph)
    assert sorted(components) == [["a", "b", "c"], ["d"], ["e"]]
    assert shortest_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_the_package_is_read_whole():
    """Every module parsed, and imports resolved: a reader that found nothing would pass."""
    found = modules()
    assert {f"{PACKAGE}.queue", f"{PACKAGE}.worker", f"{PACKAGE}.cli", f"{PACKAGE}.sql.claim"} <= set(found)
    assert any(edge.target == f"{PACKAGE}.sql.claim" for m in found.values() for edge in m.imports)


def test_the_private_name_checks_see_each_kind_of_reach():
    source = (
        "from .types import _helper\n"
        "from . import types\n"
        "import sqla_queue.errors as errors\n"
        "def f(queue, row):\n"
        "    queue._bound_elsewhere(None)\n"
        "    types._hidden\n"
        "    errors._hidden\n"
        "    row._asdict()\n"
        "    queue._unknown_anywhere\n"
    )
    fake = Module(f"{PACKAGE}.fake", ROOT / PACKAGE / "fake.py", ast.parse(source), is_package=False)
    assert private_imports(fake) == [f"{PACKAGE}/fake.py:1: from {PACKAGE}.types import _helper"]
    found = sorted(private_attributes(fake, {"_bound_elsewhere": {f"{PACKAGE}.other"}}), key=by_place)
    assert found == [
        f"{PACKAGE}/fake.py:5: queue._bound_elsewhere (defined only in {PACKAGE}.other)",
        f"{PACKAGE}/fake.py:6: types._hidden (private name of {PACKAGE}.types)",
        f"{PACKAGE}/fake.py:7: errors._hidden (private name of {PACKAGE}.errors)",
    ]


# -- (d) the layers ------------------------------------------------------------------------

FACADE_USERS = ("queue", "ops", "cli", "dashboard", "testing", "demo")
"""The facade and the layers above it: the only modules that may take a `Queue`."""


def test_the_layers_contract_is_kept_with_type_checking_imports_counted():
    """import-linter's `layers` contract (pyproject.toml): each layer imports only the ones below."""
    import subprocess
    import sys
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert not config.get("exclude_type_checking_imports"), "TYPE_CHECKING imports must count"
    assert [c["type"] for c in config["contracts"]] == ["layers"]
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "1 kept, 0 broken" in result.stdout, result.stdout + result.stderr


def _below_the_facade(module: Module) -> bool:
    relative = module.name.removeprefix(f"{PACKAGE}.")
    return module.name != PACKAGE and relative.split(".")[0] not in FACADE_USERS


def _names_queue(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(
        isinstance(node, ast.Name) and node.id == "Queue"
        or isinstance(node, ast.Constant) and isinstance(node.value, str) and "Queue" in node.value.split("[")[0].split(" | ")
        for node in ast.walk(annotation))


def test_no_module_below_the_facade_takes_a_queue():
    """Services, the worker and core take a `Core`: nothing below the facade reaches back up."""
    violations = []
    for module in modules().values():
        if not _below_the_facade(module):
            continue
        violations += [f"{module.where(edge.line)}: imports {edge.target}"
                       for edge in module.imports if edge.target == f"{PACKAGE}.queue"]
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                violations += [f"{module.where(node.lineno)}: {node.name}({argument.arg}: Queue)"
                               for argument in arguments if _names_queue(argument.annotation)]
    assert not violations, "modules below the facade that take a Queue:\n  " + "\n  ".join(violations)


def test_the_finder_sees_a_queue_parameter():
    tree = ast.parse("def f(core: Core, queue: 'Queue') -> None: ...\ndef g(q: Queue | None): ...")
    found = [argument.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
             for argument in node.args.args if _names_queue(argument.annotation)]
    assert found == ["queue", "q"]


def test_the_facade_is_thin_and_no_module_is_long():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
               for path in (ROOT / PACKAGE).rglob("*.py")}
    # 350 before Queue.workers (the worker registry); 370 with the async reads (get_job_async, ...)
    # 385 with workflows (chain, dependencies); 398 with batches (batch, batch_async, batch_status)
    assert lengths[f"{PACKAGE}/queue.py"] <= 398
    long = {path: n for path, n in lengths.items() if n > 500}
    assert not long, f"modules over 500 lines (split them by concern): {long}"
