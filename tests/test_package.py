"""The package's shape: no import cycle among its modules, no private name used across modules."""

import ast
import os
from pathlib import Path

import flashspec_hf

ROOT = Path(flashspec_hf.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """Absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports() -> dict[str, list[tuple[str, list[str], int]]]:
    """Per module of the package: (imported package module, names taken from it, line), lazy imports included."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    found = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in modules:  # `from . import module`
                        edges.append((sub, [], node.lineno))
                    elif source in modules:
                        edges.append((source, [alias.name], node.lineno))
            elif isinstance(node, ast.Import):
                edges += [(a.name, [], node.lineno) for a in node.names if a.name in modules]
        found[name] = edges
    return found


def _cycles(imports) -> list[list[str]]:
    graph = {m: sorted({target for target, _, _ in edges if target != m}) for m, edges in imports.items()}
    cycles, state = [], {}  # state: 1 = on the current path, 2 = done

    def visit(module, path):
        state[module] = 1
        for target in graph.get(module, ()):
            if target == "flashspec_hf":
                continue  # importing the package itself (to install the generate flag) is not a module cycle
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def _private(imports) -> list[str]:
    return [
        f"{module} line {line} takes {name} from {source}"
        for module, edges in imports.items()
        for source, names, line in edges
        for name in names
        if name.startswith("_") and source != module
    ]


def test_no_import_cycles():
    cycles = _cycles(_imports())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_private_names_across_modules():
    used = _private(_imports())
    assert not used, "private names used across modules: " + "; ".join(used)


def test_the_checks_see_a_lazy_cycle_and_a_private_import(tmp_path, monkeypatch):
    """The walkers above find what they look for (a check that cannot fail is no check)."""
    package = tmp_path / "flashspec_hf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import _helper\n")
    (package / "b.py").write_text("def _helper():\n    from . import a\n")
    monkeypatch.setitem(globals(), "ROOT", package)
    imports = _imports()
    assert _cycles(imports) == [["flashspec_hf.a", "flashspec_hf.b", "flashspec_hf.a"]]
    assert _private(imports) == ["flashspec_hf.a line 1 takes _helper from flashspec_hf.b"]



def test_openmp_threads_wait_passively_on_a_busy_cpu_unless_the_environment_says_otherwise(tmp_path):
    """``flashspec_hf/openmp.py`` sets the policy when another task is runnable at every look (Linux), else from the
    load average, and the package imports it before any module that imports torch (OpenMP reads it when torch
    loads); a policy the environment already has is kept."""
    imports = [n for n in ast.parse((ROOT / "__init__.py").read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports[0].level == 1 and imports[0].module is None and [a.name for a in imports[0].names] == ["openmp"]
    from flashspec_hf import openmp

    loadavg = tmp_path / "loadavg"
    for running, others in (("1/80", 0), ("2/80", 1), ("4/90", 3)):
        loadavg.write_text(f"0.9 1.1 1.3 {running} 4467\n")
        assert openmp.others_runnable(str(loadavg)) == others
    assert openmp.others_runnable(str(tmp_path / "missing")) is None
    assert [openmp.shared(2, others, 0.0) for others in (0, 1)] == [False, True]
    assert [openmp.shared(16, others, 0.0) for others in (3, 4)] == [False, True]
    assert [openmp.shared(2, None, load) for load in (1.9, 2.0)] == [False, True]
    for environ, others, want in (({}, 1, "PASSIVE"), ({}, 0, None), ({"OMP_WAIT_POLICY": "ACTIVE"}, 1, "ACTIVE")):
        openmp.set_policy(environ, 2, others, 0.0)
        assert environ.get("OMP_WAIT_POLICY") == want
