"""House rule: a paper package never imports another paper package (what two papers share lives
in ``icml25.llm``, ``icml25.toy`` or a small common module such as ``icml25.lora``)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
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


# What cites the project's own notes outside the repository, which a reader cannot open: the
# notes' name as a word ("the ...", "... Part C", "(...: 3)", "... test 9", plural too), their folder
# and their description. Built from pieces so that this file does not cite them itself.
_NOTES = "sp" + "ec"
_CITATION = re.compile(
    rf"\b{_NOTES}s?\b|shared/pap" + r"ers|planning no" + "tes", flags=re.IGNORECASE
)
# Legitimate technical uses, left alone:
# - identifiers such as ``find_<n>``, ``ModuleS<n>``, ``PartitionS<n>`` or ``<n>_from_file_location``
#   (<n> the notes' name) never match: ``_`` and letters are word characters, so ``\b`` fails;
# - a variable of that name is code, not a citation: in Python only comments and string literals
#   are read (not code), and an f-string's ``{...}`` replacement fields are dropped, e.g. the
#   model-argument errors in the CLIs, ``f"{<n>!r}: use openai:NAME ..."``;
# - the same variable named in prose as an inline code span (``<n>`` in backticks).
_CODE_SPAN = re.compile(rf"`{{1,2}}{_NOTES}`{{1,2}}", flags=re.IGNORECASE)


def _strip_replacement_fields(literal: str) -> str:
    """An f-string literal without its ``{...}`` fields (kept: ``{{``/``}}`` and line breaks)."""
    out, depth, i = [], 0, 0
    while i < len(literal):
        c = literal[i]
        if depth == 0 and c in "{}" and literal[i : i + 2] in ("{{", "}}"):
            out.append(c)
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}" and depth:
            depth -= 1
        elif depth == 0 or c == "\n":
            out.append(c)
        i += 1
    return "".join(out)


def _prose(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of what a reader reads as prose: all of a Markdown file; a Python file's
    comments and string literals (docstrings included), f-strings without their ``{...}`` fields."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return list(enumerate(text.splitlines(), 1))
    parts = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = tokenize.tok_name[tok.type]
        s = tok.string
        if kind == "STRING":  # before Python 3.12 an f-string is one STRING token
            prefix = s[: min(s.find(q) for q in "'\"" if q in s)].lower()
            if "f" in prefix:
                s = _strip_replacement_fields(s)
        elif kind != "COMMENT" and kind != "FSTRING_MIDDLE":  # 3.12+: only the literal parts
            continue
        parts += [(tok.start[0] + k, line) for k, line in enumerate(s.splitlines())]
    return parts


def notes_citations(root: Path = SRC.parents[1]) -> list[str]:
    """``"file:line: text"`` for every citation of the notes outside the repository in the
    sources, tests, benchmarks and docs under ``root`` and in its README and CHANGELOG."""
    paths = [root / "README.md", root / "CHANGELOG.md", root / "CONTRIBUTING.md"]
    for folder in ("src", "tests", "benchmarks", "docs"):
        paths += sorted(p for p in (root / folder).rglob("*") if p.suffix in (".py", ".md"))
    bad = []
    for path in paths:
        if not path.is_file():
            continue
        for line_no, line in _prose(path):
            if _CITATION.search(_CODE_SPAN.sub("", line)):
                bad.append(f"{path.relative_to(root)}:{line_no}: {line.strip()[:90]}")
    return bad


def test_code_cites_what_a_reader_can_open():
    """Sources, tests, benchmarks and docs cite the paper, the official code or docs/<slug>.md,
    never the project's own notes, which are not part of the repository."""
    bad = notes_citations()
    assert not bad, "cite the paper, the official code or docs/<slug>.md instead:\n" + "\n".join(
        bad
    )


def test_the_citation_scan_finds_every_spelling_and_skips_code(tmp_path):
    """The scan itself can fail: each way the notes were cited is found, in comments, docstrings,
    plain and f-string literals and Markdown, while code, an f-string's fields, identifiers that
    contain the word and an inline code span naming a variable are not."""
    n, cap = _NOTES, _NOTES.capitalize()
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "src" / "pkg" / "m.py").write_text(
        f'"""{cap} "Small-scale reproduction" sizes."""\n'  # 1
        f"# see the {n}'s split\n"  # 2
        f"{n} = find_{n}('x')  # ModuleSpec, {n}_from_file_location\n"  # 3: not a citation
        f'msg = f"{{{n}!r}}: needs --base-url"\n'  # 4: the field is code
        f'msg = f"{{x}}: defaults ({n}: 3)"\n'  # 5
        "x = 1  # " + "shared/" + "papers/a.md\n"  # 6
        f'"""the ``{n}`` argument,\n{cap} test 9 and the {n}s."""\n'  # 7-8
    )
    (tmp_path / "docs" / "a.md").write_text(
        f"Claim checked ({n}): yes.\nA `{n}` variable.\nOur plann" + "ing notes.\n"
    )
    (tmp_path / "README.md").write_text(f"(our parametrisation, {n})\n")
    bad = notes_citations(tmp_path)
    where = sorted(b.split(": ", 1)[0] for b in bad)
    assert where == [
        "README.md:1",
        "docs/a.md:1",
        "docs/a.md:3",
        "src/pkg/m.py:1",
        "src/pkg/m.py:2",
        "src/pkg/m.py:5",
        "src/pkg/m.py:6",
        "src/pkg/m.py:8",
    ], bad


def _runtime_imports(tree: ast.AST) -> Iterator[ast.ImportFrom]:
    """The ``from ... import`` statements that run (top level and inside functions), without the
    ones under ``if TYPE_CHECKING:``, which only a type checker follows."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            yield from (n for s in node.orelse for n in _runtime_imports(s))
            continue
        if isinstance(node, ast.ImportFrom):
            yield node
        yield from _runtime_imports(node)


def import_circles(src: Path = SRC) -> list[str]:
    """``"icml25.<pkg>: a -> b -> a"`` for every circle of runtime imports between the modules of
    one package (a lazy import inside a function counts: it is the same circle, deferred)."""
    found = []
    for pkg in sorted(p for p in src.iterdir() if (p / "__init__.py").is_file()):
        mods = {f.stem: f for f in pkg.glob("*.py") if f.stem != "__init__"}
        edges: dict[str, set[str]] = {m: set() for m in mods}
        for name, path in mods.items():
            for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
                if node.level == 1:
                    target = (node.module or "").split(".")[0]
                elif (node.module or "").startswith(f"icml25.{pkg.name}."):
                    target = node.module.split(".")[2]
                else:
                    continue
                if target in mods and target != name:
                    edges[name].add(target)

        def path_to(a: str, b: str, seen: set[str], edges=edges) -> list[str] | None:
            if a == b:
                return [b]
            seen.add(a)
            for c in sorted(edges[a] - seen):
                rest = path_to(c, b, seen, edges)
                if rest:
                    return [a, *rest]
            return None

        reported: set[frozenset[str]] = set()
        for a in sorted(mods):
            for b in sorted(edges[a]):
                back = path_to(b, a, set())
                if back and frozenset([a, *back]) not in reported:
                    reported.add(frozenset([a, *back]))
                    found.append(f"icml25.{pkg.name}: " + " -> ".join([a, *back]))
    return found


def test_no_import_circles_inside_a_package():
    """What two modules of a package share lives in the lower one (CONTRIBUTING.md), so the
    modules form layers; a lazy import inside a function does not hide a circle."""
    circles = import_circles()
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_circle_scan_finds_lazy_circles_and_skips_type_only_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from icml25.pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from icml25.pkg.d import X\n"
    )
    (pkg / "d.py").write_text("from icml25.pkg.c import Y\n")
    assert import_circles(tmp_path) == ["icml25.pkg: a -> b -> a"]
