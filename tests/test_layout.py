"""House rule: a paper package never imports another paper package (what two papers share lives
in ``icml25.llm``, ``icml25.toy`` or a small common module such as ``icml25.lora``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from icml25 import registry

SRC = Path(__file__).resolve().parents[1] / "src" / "icml25"


def _imported_modules(path: Path, package: str) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``path`` (top level and inside functions),
    with relative imports resolved against ``package`` (``icml25.<slug>[.sub]``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # ``from icml25 import knowledge_swap`` imports the package too
            if mod == "icml25":
                out += [(node.lineno, f"icml25.{a.name}") for a in node.names]
    return out


def paper_cross_imports(src: Path = SRC) -> list[str]:
    """``"file:line: icml25.<a> imports icml25.<b>"`` for every cross-paper import under ``src``."""
    slugs = set(registry.slugs())
    bad = []
    for slug in sorted(slugs):
        pkg_dir = src / slug
        if not pkg_dir.is_dir():
            continue
        for path in sorted(pkg_dir.rglob("*.py")):
            rel = path.relative_to(pkg_dir).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            package = ".".join(["icml25", slug, *parts[:-1]] if parts else ["icml25", slug])
            if path.name == "__init__.py":
                package = ".".join(["icml25", slug, *parts])
            for line, mod in _imported_modules(path, package):
                bits = mod.split(".")
                if len(bits) >= 2 and bits[0] == "icml25" and bits[1] in slugs and bits[1] != slug:
                    bad.append(
                        f"{path.relative_to(src.parent)}:{line}: icml25.{slug} imports {mod}"
                    )
    return bad


def test_no_paper_package_imports_another():
    bad = paper_cross_imports()
    assert not bad, "paper packages import each other:\n" + "\n".join(bad)


def test_the_scan_sees_every_import_form(tmp_path):
    """The scanner itself can fail: absolute, lazy (inside a function), ``from icml25 import x``
    and relative imports of another paper are all reported; a paper's own modules are not."""
    a = tmp_path / "icml25" / "antidote"
    a.mkdir(parents=True)
    (a / "__init__.py").write_text("from icml25.antidote.x import y\nfrom . import x\n")
    (a / "m.py").write_text(
        "import icml25.lapsum\n"
        "def f():\n    from icml25.knowledge_swap.lora import inject_lora\n"
        "from icml25 import swan\n"
        "from ..tpo import core\n"
        "from icml25.llm import HFChat\n"
    )
    bad = paper_cross_imports(tmp_path / "icml25")
    assert len(bad) == 4, bad
    assert {b.rsplit(" ", 1)[1] for b in bad} == {
        "icml25.lapsum",
        "icml25.knowledge_swap.lora",
        "icml25.swan",
        "icml25.tpo",
    }


def test_every_reproduction_uses_the_shared_harness_with_declared_criteria():
    """Each implemented paper's ``run`` is built by ``icml25.report.reproduction`` (so it takes
    ``seeds=`` and declares its seed counts) and its module declares its criteria at module level,
    before any measurement, as ``Criterion`` objects with unique names."""
    import importlib
    import inspect

    from icml25.report import Criterion

    for paper in registry.PAPERS:
        if paper.repro is None:
            continue
        module_name, _, attr = paper.repro.partition(":")
        module = importlib.import_module(module_name)
        run = getattr(module, attr)
        assert "seeds" in inspect.signature(run).parameters, paper.slug
        counts = run.preregistered_seeds
        assert counts["quick"] >= 1 and counts["full"] >= counts["quick"], (paper.slug, counts)
        criteria = module.CRITERIA
        assert criteria and all(isinstance(c, Criterion) for c in criteria), paper.slug
        names = [c.name for c in criteria]
        assert len(set(names)) == len(names), (paper.slug, names)


def test_code_cites_what_a_reader_can_open():
    """Sources and tests cite the paper, the official code or docs/<slug>.md, never the project's
    planning notes, which are not part of the repository."""
    words = ("spec " + "§", "the " + "spec", "shared" + "/papers")
    # the other ways the notes were cited: in brackets, with a section name, a part or a test number
    cited = re.compile(
        r"(?<![\w.])\((?:spec)(?:\)|[:;] (?!str\b|Any\b)|, (?![\"'])|$)"
        r"|\bspec(?: \"| Part\b| tests?\b|'s\b)"
    )
    bad = []
    for root in (SRC, SRC.parents[1] / "tests"):
        for path in root.rglob("*.py"):
            if path.resolve() == Path(__file__).resolve():  # this check names what it looks for
                continue
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(w in line for w in words) or cited.search(line):
                    bad.append(f"{path.relative_to(SRC.parents[1])}:{i}: {line.strip()[:80]}")
    assert not bad, "\n".join(bad)
