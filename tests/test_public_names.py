"""A package's ``__all__`` is what its users call; building blocks are public in the submodule
that defines them (CONTRIBUTING.md, "Public names"). Names that left a package's ``__all__``
still resolve from the package, with a DeprecationWarning, until ``icml25._moved.REMOVED_IN``;
nothing in the repository uses them that way."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from icml25 import registry
from icml25._moved import REMOVED_IN, moved

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [p.module for p in registry.PAPERS]


def _moved_table(module: str) -> dict[str, str]:
    getter = importlib.import_module(module).__dict__.get("__getattr__")
    return dict(getattr(getter, "moved", {}))


def _target(package: str, where: str) -> str:
    return where if where.startswith("icml25.") else f"{package}.{where}"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_moved_name_lives_in_its_module_and_still_resolves_with_a_warning(package):
    mod = importlib.import_module(package)
    for name, where in _moved_table(package).items():
        assert name not in mod.__all__, (package, name)
        target = importlib.import_module(_target(package, where))
        assert name in target.__all__, f"{package}.{name}: not public in {target.__name__}"
        with pytest.warns(DeprecationWarning, match=rf"{re.escape(package)}\.{name} moved to"):
            obj = getattr(mod, name)
        assert obj is getattr(target, name)


def test_the_package_keeps_what_its_users_call():
    """The shared rule, not a frozen list: every name a docs page's or the README's examples
    import from a paper's package is in that package's ``__all__``."""
    missing = []
    for _page, text in _example_code():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module in PACKAGES:
                names = set(importlib.import_module(node.module).__all__)
                missing += [f"{node.module}.{a.name}" for a in node.names if a.name not in names]
    assert not missing, missing


def test_an_unknown_name_is_still_an_attribute_error():
    getter = moved("icml25.example", {"a": "b"})
    with pytest.raises(AttributeError, match="has no attribute 'zzz'"):
        getter("zzz")
    assert REMOVED_IN.count(".") == 2


def _example_code() -> list[tuple[str, str]]:
    """``(source, code)`` of every Python block on the docs pages, the README and CONTRIBUTING."""
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    out = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:python|py)\n(.*?)```", text, flags=re.S):
            out.append((page.name, block))
    return out


def _uses_of_moved_names() -> list[str]:
    """``from <package> import <moved name>`` and ``<package>.<moved name>`` anywhere in the
    repository's code (src, tests, benchmarks, tools) and in the docs' examples."""
    tables = {p: _moved_table(p) for p in PACKAGES}
    sources = [
        (str(f.relative_to(ROOT)), f.read_text(encoding="utf-8"))
        for base in ("src", "tests", "benchmarks", "tools")
        for f in sorted((ROOT / base).rglob("*.py"))
        if f.name != "test_public_names.py"
    ]
    found = []
    for where, text in sources + _example_code():
        for package, table in tables.items():
            if not table or package.split(".")[1] not in text:
                continue
            for m in re.finditer(
                r"from\s+" + re.escape(package) + r"\s+import\s+\(?([^)]*?)\)?$", text, re.M | re.S
            ):
                names = {n.strip().split(" as ")[0] for n in m.group(1).split(",")}
                found += [f"{where}: from {package} import {n}" for n in sorted(names & set(table))]
            short = package.split(".")[1]
            for name in table:
                if re.search(rf"(?<![\w.]){re.escape(short)}\.{name}\b", text):
                    found.append(f"{where}: {short}.{name}")
    return found


def test_nothing_in_the_repository_imports_a_moved_name_from_its_package():
    assert not _uses_of_moved_names()


@pytest.mark.parametrize("package", ["icml25.rlthf", "icml25.fpo", "icml25.antidote"])
def test_one_warning_per_use_and_lazy_names_resolve_without_one(package):
    """rlthf and fpo also load a TRL trainer on first use, through the same ``__getattr__``."""
    import warnings

    name = sorted(_moved_table(package))[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(f"from {package} import {name}", {})
    # ``from`` asks the package twice (importlib's hasattr, then the import); both point at the
    # importing line, so the default filter shows one
    assert {(w.category, str(w.message), w.lineno) for w in caught} == {
        (DeprecationWarning, str(caught[0].message), 1)
    }
    lazy = {"icml25.rlthf": "WeightedRewardTrainer", "icml25.fpo": "FPOTrainer"}.get(package)
    if lazy:
        pytest.importorskip("trl")
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            assert getattr(importlib.import_module(package), lazy).__name__ == lazy
