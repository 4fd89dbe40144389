"""The package's layers, read from its source: imports point one way (README, Layout), and nothing imports a
module that imports it back."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from conftest import loaded_by_fresh_import

import tinylm

PACKAGE = Path(tinylm.__file__).parent
# What each part may import from tinylm, beyond itself and the plain-Python basics (errors, checks, files).
BASICS = {"tinylm.errors", "tinylm.checks", "tinylm.files"}
ALLOWED = {
    "tinylm.model": set(),
    "tinylm.data": set(),
    "tinylm.layout": {"tinylm.model", "tinylm.data"},
    "tinylm.overrides": set(),
    "tinylm.training": {"tinylm.model", "tinylm.data", "tinylm.layout", "tinylm.overrides"},
    "tinylm.probe": {"tinylm.model", "tinylm.data"},
    "tinylm.analysis": {"tinylm.model", "tinylm.data", "tinylm.layout", "tinylm.overrides", "tinylm.probe"},
    "tinylm.inference": {"tinylm.model", "tinylm.data", "tinylm.layout"},
    # add_seeds' rounds: plan from the report (analysis), start the runs (training), look again; the one part using both.
    "tinylm.seed_rounds": {"tinylm.analysis", "tinylm.training", "tinylm.layout", "tinylm.overrides"},
}


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def tinylm_imports(path: Path, type_only: bool = False) -> set[str]:
    """What the module imports when it runs, and with `type_only` also the names imported for type checkers."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING" and not type_only:
            node.body = []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("tinylm.")}


def modules(type_only: bool = False) -> dict[str, set[str]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(relative.parts).removesuffix(".__init__")
        found[name] = tinylm_imports(path, type_only)
    return found


def test_imports_point_one_way():
    wrong = []
    for module, imported in modules().items():
        if part(module) not in ALLOWED:
            continue  # the entry points' helpers (cli) and the basics
        allowed = ALLOWED[part(module)] | BASICS | {part(module)}
        wrong += [
            f"{module} imports {name}"
            for name in imported
            if part(name) not in allowed and name not in BASICS
        ]
    assert not wrong, wrong


def test_the_analysis_computes_and_never_reaches_training_even_through_another_part():
    """The analysis reads runs and judges them, and starts none: training/ and seed_rounds/ start them."""
    graph = modules(type_only=True)
    reached, stack = set(), [m for m in graph if part(m) == "tinylm.analysis"]
    while stack:
        for name in graph.get(stack.pop(), ()):
            if name not in reached:
                reached.add(name)
                stack.append(name)
    launching = sorted(name for name in reached if part(name) in {"tinylm.training", "tinylm.seed_rounds"})
    assert not launching, launching


PRESENT = "tinylm.analysis.present"


def test_the_report_is_computed_without_importing_what_presents_it():
    """tinylm.analysis computes the report value and tinylm.analysis.present renders it (markdown, figures,
    report.json, files): presenting imports computing, never the reverse, not even for type checkers."""
    graph = modules(type_only=True)
    computing = [m for m in graph if part(m) == "tinylm.analysis" and not _within(m, PRESENT)]
    assert len(computing) > 1 and any(_within(m, PRESENT) for m in graph)  # both sides are where this looks
    wrong = sorted(f"{m} imports {name}" for m in computing for name in graph[m] if _within(name, PRESENT))
    assert not wrong, wrong


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_writing_a_report_imports_neither_training_nor_datasets():
    """A fresh interpreter that imports the report's writer holds no module of tinylm.training, nor Hugging Face
    `datasets` (the data pipeline's): what the report reads of a run's data, it reads through tinylm.layout."""
    assert loaded_by_fresh_import("tinylm.analysis.present.write_report", "datasets", "tinylm.training") == []


def test_no_module_imports_one_that_imports_it_back_even_for_type_checkers_only():
    """No cycle of any length, counting `if TYPE_CHECKING:` imports: a registry two modules share is a leaf.
    A package's __init__ re-exports its modules, so an import of a sibling through it is not followed."""
    graph = modules(type_only=True)

    def cycle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for name in graph.get(module, ()):
                if name == start:
                    return [*path, name]
                if name not in seen and name in graph and not is_package(name):
                    seen.add(name)
                    stack.append((name, [*path, name]))
        return None

    cycles = [found for module in graph if not is_package(module) and (found := cycle_from(module))]
    assert not cycles, cycles


def is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").is_file()


def test_every_subpackage_is_listed_for_the_wheel():
    """pyproject.toml names its packages one by one (conf/ is installed as tinylm.conf); a subpackage left off
    the list is missing from a non-editable install (tinylm.training.callbacks was)."""
    listed = set(
        tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {".".join(path.parent.relative_to(PACKAGE.parent).parts) for path in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_every_third_party_module_the_package_imports_is_declared():
    """A module imported by tinylm but arriving only with another dependency (numpy with torch, omegaconf
    with Hydra) breaks when that one stops bringing it: each is declared, the sweep report's in `sweep`."""
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    with_sweep = core | _requirement_names(project["optional-dependencies"]["sweep"])
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for path in PACKAGE.rglob("*.py"):
        declared = with_sweep if "analysis" in path.relative_to(PACKAGE).parts else core
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            else:
                continue
            for top in {module.split(".")[0] for module in modules}:
                if top in sys.stdlib_module_names or top == "tinylm":
                    continue
                names = {name.lower().replace("_", "-") for name in distributions.get(top, [top])}
                if not names & declared:
                    missing.append(f"{path.relative_to(PACKAGE.parent)}: {top}")
    assert not missing, sorted(set(missing))


def test_each_dependency_is_declared_once():
    """A requirement named in two lists is two pins to keep in step, and two comments that drift apart (issue
    67: matplotlib in the core and the sweep extra, tbparse and submitit in the sweep and the dev extras).
    `dev` has the `sweep` extra already, through tinylm[sweep]."""
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    lists = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    named: dict[str, list[str]] = {}
    for where, requirements in lists.items():
        for name in _requirement_names(requirements) - {"tinylm"}:
            named.setdefault(name, []).append(where)
    assert {name: where for name, where in named.items() if len(where) > 1} == {}
