"""The documentation site (`make docs`): every public name is documented, the strict build passes
and its front page is the README's table linking each paper's page and API reference."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icml25 import registry

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("icml25.llm", "icml25.report", "icml25.toy", "icml25.preference", "icml25.lora")


def _documented(obj) -> bool:
    """A docstring of its own (not a dataclass's generated signature, not a base class's)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not doc or not doc.strip():
        return False
    generated = (
        doc.startswith(obj.__name__ + "(") and "\n" not in doc.strip()
    )  # dataclass, NamedTuple
    return not (inspect.isclass(obj) and generated)


def test_every_public_callable_has_a_docstring():
    missing = []
    for m in [p.module for p in registry.PAPERS] + list(SHARED):
        mod = importlib.import_module(m)
        names = getattr(mod, "__all__", None)
        assert names, f"{m} has no __all__"
        for n in names:
            obj = getattr(mod, n)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and not _documented(obj):
                missing.append(f"{m}.{n}")
        # the building blocks the API page renders under "Submodules"
        for sub, sub_names in _submodule_names(m):
            for n in sub_names:
                if not _documented(getattr(importlib.import_module(sub), n)):
                    missing.append(f"{sub}.{n}")
    assert not missing, missing


def test_the_site_builds_strict_with_the_papers_on_its_front_page(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    for p in registry.PAPERS:
        assert f'href="api/{p.slug}/"' in index, p.slug
        assert f'href="{p.slug}/"' in index, p.slug  # the paper's page
        api = (tmp_path / "site" / "api" / p.slug / "index.html").read_text(encoding="utf-8")
        mod = importlib.import_module(p.module)
        documented = [
            n
            for n in mod.__all__
            if inspect.isfunction(getattr(mod, n)) or inspect.isclass(getattr(mod, n))
        ]
        for n in documented:
            obj = getattr(mod, n)
            ids = {f"{p.module}.{n}", f"{obj.__module__}.{obj.__qualname__}"}
            assert any(f'id="{i}"' in api for i in ids), (p.slug, n)
        # no builtin type's docstring standing in for an attribute's, no stray module attributes
        assert "int([x]) -&gt; integer" not in api and "str(object=" not in api, p.slug
        if importlib.util.find_spec(f"{p.module}.annotations") is None:  # twa has the module
            assert 'id="' + p.module + '.annotations"' not in api, p.slug
        assert "_Feature" not in api, p.slug  # ``from __future__ import annotations``
        # the building blocks are on the page, under their module (the hook's "Submodules")
        for sub, names in _submodule_names(p.module):
            for n in names:
                assert f'id="{sub}.{n}"' in api, (sub, n)
        assert ":func:<code>" not in api and ":class:<code>" not in api, p.slug


def _submodule_names(module: str) -> list[tuple[str, list[str]]]:
    """What the docs hook renders under "Submodules" for ``module``, functions and classes only."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    out = []
    for sub, names in mkdocs_hooks._submodules(module):
        mod = importlib.import_module(sub)
        kept = [
            n
            for n in names
            if inspect.isfunction(getattr(mod, n)) or inspect.isclass(getattr(mod, n))
        ]
        out.append((sub, kept))
    return out
