"""The runtime's layers, checked: every import of tritonrt's own modules runs downwards, no modules import each
other in a circle (inside a package too), and public modules declare ``__all__``. Read from the source with
``ast`` (imports inside functions count too), nothing imported.

Layers, lowest first; a module may import its own package and the layers below its own:

    exceptions, _access, memory, constants, metrics, ports  <  model_config  <  context  <  decorators  <  client
    <  server  <  proxy  <  bls  <  models  <  triton, __main__
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import tritonrt

PACKAGE_DIR = pathlib.Path(tritonrt.__file__).parent

LAYERS: list[tuple[str, ...]] = [
    (
        "tritonrt.exceptions",
        "tritonrt._access",
        "tritonrt.memory",
        "tritonrt.constants",
        "tritonrt.metrics",
        "tritonrt.ports",
    ),
    ("tritonrt.model_config",),
    ("tritonrt.context",),
    ("tritonrt.decorators",),
    ("tritonrt.client",),
    ("tritonrt.server",),
    ("tritonrt.proxy",),
    ("tritonrt.bls",),
    ("tritonrt.models",),
    ("tritonrt.triton", "tritonrt.__main__"),
]
# Contracts stated for themselves, besides the order (they follow from it today).
ONLY_FROM = {"tritonrt.model_config": {"tritonrt.exceptions"}}
NEVER_FROM = {"tritonrt.client": {"tritonrt.server", "tritonrt.proxy", "tritonrt.models", "tritonrt.triton"}}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _unit(module: str) -> str | None:
    """The layer entry (package or top-level module) that ``module`` belongs to; None for ``tritonrt`` itself."""
    for layer in LAYERS:
        for unit in layer:
            if module == unit or module.startswith(unit + "."):
                return unit
    return None


def _layer(unit: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if unit in layer)


def _imports(module: str) -> set[str]:
    """The tritonrt modules that ``module`` imports, anywhere in its source."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES)
    return {name for name in found if name == "tritonrt" or name.startswith("tritonrt.")}


def test_every_module_has_a_layer():
    unplaced = [module for module in MODULES if module != "tritonrt" and _unit(module) is None]
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


@pytest.mark.parametrize("module", [name for name in MODULES if name != "tritonrt"])
def test_imports_run_downwards(module: str):
    unit = _unit(module)
    assert unit is not None
    upward = []
    for target in sorted(_imports(module)):
        target_unit = _unit(target)
        if target_unit is None:  # the package itself: its __init__ holds only the version
            continue
        if target_unit != unit and _layer(target_unit) >= _layer(unit):
            upward.append(f"{target} (layer {_layer(target_unit)})")
        if unit in ONLY_FROM and target_unit != unit:
            allowed = ONLY_FROM[unit]
            assert target_unit in allowed, f"{module} imports {target}; {unit} may import only {allowed}"
        assert target_unit not in NEVER_FROM.get(unit, ()), f"{module} imports {target}: {unit} must not"
    assert not upward, f"{module} (layer {_layer(unit)}) imports upwards: {', '.join(upward)}"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
            for target in node.targets:
                if isinstance(target, ast.Tuple):
                    names.update(element.id for element in target.elts if isinstance(element, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
    return names


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            return list(ast.literal_eval(node.value))
    return None


PUBLIC = [
    name
    for name in MODULES
    if name != "tritonrt" and not any(part.startswith("_") and part != "__init__" for part in name.split("."))
]


@pytest.mark.parametrize("module", PUBLIC)
def test_public_modules_declare_what_they_export(module: str):
    tree = ast.parse(MODULES[module].read_text())
    exported = _declared_all(tree)
    assert exported is not None, f"{module} is public (no leading underscore) but declares no __all__"
    missing = sorted(set(exported) - _top_level_names(tree))
    assert not missing, f"{module}.__all__ names what the module does not define: {missing}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports in ``graph`` (module -> modules it imports), as a path back to its start; None if none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph.get(module, ())):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done and (found := visit(target)) is not None:
                return found
        on_path.discard(path.pop())
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done and (found := visit(module)) is not None:
            return found
    return None


def _module_graph() -> dict[str, set[str]]:
    """Module -> the tritonrt modules it imports (``TYPE_CHECKING`` imports too: a circle is a circle). A module's
    import of its own package (``from tritonrt.models import trace`` names ``tritonrt.models``) is left out: the
    package is always imported first, and what counts is the module it names."""
    graph = {}
    for module in MODULES:
        own_packages = {module.rsplit(".", depth)[0] for depth in range(1, module.count(".") + 1)}
        graph[module] = {target for target in _imports(module) if target in MODULES and target not in own_packages}
    return graph


def test_the_cycle_finder_finds_a_circle_and_only_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"x": {"y"}, "y": {"y"}}) == ["y", "y"]


def test_no_circle_of_imports_between_modules():
    """Layers keep packages in order; inside a package, modules must not import each other in a circle either
    (one needs the other's names half-initialised, or hides the import under TYPE_CHECKING)."""
    cycle = _cycle(_module_graph())
    assert cycle is None, f"a circle of imports: {' -> '.join(cycle)}; move what both need into a third module"
