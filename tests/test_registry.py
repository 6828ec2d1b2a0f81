"""The registry lists all 19 papers, in step with the project's paper notes, the package folders and the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from icml25 import registry

ROOT = Path(__file__).resolve().parents[1]
SHARED_PAPERS = ROOT.parent / "shared" / "papers"


def test_nineteen_papers_numbered_in_order():
    assert [p.number for p in registry.PAPERS] == list(range(1, 20))
    assert len(set(registry.slugs())) == 19
    for p in registry.PAPERS:
        assert re.fullmatch(r"[a-z][a-z_]*", p.slug), p.slug
        assert p.title and p.title == p.title.strip()
        assert p.module == f"icml25.{p.slug}"


def test_links_are_arxiv_ids_or_urls():
    for p in registry.PAPERS:
        assert re.fullmatch(r"arXiv:\d{4}\.\d{5}", p.link) or p.link.startswith("https://"), p.link
        assert p.url.startswith("https://")


@pytest.mark.skipif(
    not SHARED_PAPERS.is_dir(), reason="the paper notes are not beside this checkout"
)
def test_slugs_match_the_paper_specs():
    specs = sorted(f.stem for f in SHARED_PAPERS.glob("[0-9][0-9]-*.md"))
    assert specs == [f"{p.number:02d}-{p.slug}" for p in registry.PAPERS]


def test_repro_entry_point_iff_package_has_repro_module():
    for p in registry.PAPERS:
        has_repro = (ROOT / "src" / "icml25" / p.slug / "repro.py").exists()
        assert (p.repro is not None) == has_repro, (
            f"{p.slug}: registry says {p.status} but repro.py "
            f"{'exists' if has_repro else 'does not exist'}"
        )
        if p.repro is not None:
            assert p.repro == f"icml25.{p.slug}.repro:run"
            assert callable(registry.load_repro(p))
            assert p.usage, f"{p.slug}: an implemented paper needs a one-line usage for the README"


def test_implemented_papers_have_tests_and_docs():
    for p in registry.PAPERS:
        if p.repro is not None:
            assert (ROOT / "tests" / p.slug).is_dir(), p.slug
            assert (ROOT / "docs" / f"{p.slug}.md").is_file(), p.slug


def test_readme_table_in_sync_with_registry():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d\d) \| (.+?) \| `(icml25\.\w+)` \| (\w+) \|(.*)\|$", text, re.M)
    assert len(rows) == 19, "the README table must have one row per paper"
    for (num, title, module, status, usage), p in zip(rows, registry.PAPERS):
        assert int(num) == p.number
        assert title == p.title
        assert module == p.module
        assert status == p.status
        if p.usage:
            assert usage.strip() == f"`{p.usage}`"


def test_get_and_resolve():
    assert registry.get("lapsum").number == 4
    with pytest.raises(ValueError, match="valid slugs: contrastive, distinguishability"):
        registry.get("lapsums")
    assert registry.resolve([]) == list(registry.PAPERS)
    assert [p.slug for p in registry.resolve(["swan", "4", "04", "lapsum"])] == ["lapsum", "swan"]
    with pytest.raises(ValueError) as err:
        registry.resolve(["nope", "lapsum", "99"])
    assert (
        "'nope'" in str(err.value) and "'99'" in str(err.value) and "certificates" in str(err.value)
    )


def test_load_repro_of_planned_paper_and_bad_entry_point():
    planned = registry.Paper(99, "x", "X", "arXiv:0000.00000")
    with pytest.raises(LookupError, match="planned"):
        registry.load_repro(planned)
    with pytest.raises(ValueError, match="module:function"):
        registry.load_entry_point("icml25.registry")


def test_every_reproduction_has_a_smoke_test_that_checks_its_units():
    """Each registered reproduction's smoke run goes through ``check_smoke`` (tests/conftest.py),
    which fails when a check counts one independent unit twice (``unit_problems``)."""
    import re
    from pathlib import Path

    from icml25.registry import PAPERS

    tests = Path(__file__).parent
    missing = []
    for paper in PAPERS:
        if paper.repro is None:
            continue
        text = "".join(p.read_text() for p in (tests / paper.slug).glob("test_repro*.py"))
        if not (re.search(r"smoke\s*=\s*True|def smoke\(", text) and "check_smoke(" in text):
            missing.append(paper.slug)
    assert not missing, (
        f"no smoke run checked by check_smoke in tests/<slug>/test_repro*.py: {missing}"
    )
