"""The icml25 command: list, repro argument errors, help, version, and a cheap import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from icml25 import __version__, cli, registry


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"icml25 {__version__}"


def test_list_prints_one_row_per_paper(capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line[:2].isdigit()]
    assert len(rows) == 19
    for row, paper in zip(rows, registry.PAPERS):
        number, slug, status = row.split()[:3]
        assert (int(number), slug, status) == (paper.number, paper.slug, paper.status)


def test_list_json(capsys):
    assert cli.main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["slug"] for r in rows] == registry.slugs()
    assert {r["status"] for r in rows} <= {"implemented", "planned"}


def test_unknown_slug_is_an_argument_error_naming_valid_slugs(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        cli.main(["repro", "nosuchpaper", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'nosuchpaper'" in err
    for slug in registry.slugs():
        assert slug in err
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["repro", "--seed", "-1"],
        ["repro", "--seeds", "0"],
        ["repro", "--seed", "abc"],
        ["repro", "--bogus"],
        ["nosuchcommand"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["list"], ["repro"], ["bench"]])
def test_help_on_every_subcommand(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([*command, "--help"])
    assert exc.value.code == 0
    assert "usage: icml25" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 0
    assert "repro" in capsys.readouterr().out


def test_repro_of_planned_papers_writes_report_and_exits_0(tmp_path, capsys, monkeypatch):
    planned = [p.slug for p in registry.PAPERS if p.repro is None][:2]
    if not planned:  # every paper is implemented: plan two again for the duration of the test
        import dataclasses

        papers = list(registry.PAPERS)
        for i in (0, 1):
            papers[i] = dataclasses.replace(papers[i], repro=None)
            monkeypatch.setitem(registry._BY_SLUG, papers[i].slug, papers[i])
            planned.append(papers[i].slug)
        monkeypatch.setattr(registry, "PAPERS", type(registry.PAPERS)(papers))
    assert cli.main(["repro", *planned, "--out", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "report.md").exists() and (tmp_path / "results.json").exists()
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["slug"] for r in data["results"]] == planned
    assert all(r["status"] == "planned" for r in data["results"])


def test_bench_without_folder_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--dir", str(tmp_path / "none")])
    assert exc.value.code == 2
    assert "not found" in capsys.readouterr().err


def test_bench_runs_scripts_and_reports_failure(tmp_path, capsys):
    (tmp_path / "ok.py").write_text("print('ratio 3.0x')\n")
    (tmp_path / "bad.py").write_text("raise SystemExit(3)\n")
    assert cli.main(["bench", "--dir", str(tmp_path), "--list"]) == 0
    assert capsys.readouterr().out.split() == ["bad", "ok"]
    assert cli.main(["bench", "ok", "--dir", str(tmp_path)]) == 0
    assert cli.main(["bench", "--dir", str(tmp_path)]) == 1
    with pytest.raises(SystemExit):
        cli.main(["bench", "nope", "--dir", str(tmp_path)])


def test_import_is_cheap_and_module_entry_point_works():
    code = (
        "import sys, icml25, icml25.cli, icml25.registry, icml25.report, icml25.llm, icml25.toy; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    run = subprocess.run(
        [sys.executable, "-m", "icml25", "--version"], capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == f"icml25 {__version__}"


def test_report_rerenders_and_compares(tmp_path, capsys, monkeypatch):
    from icml25.report import Criterion, ReproResult, render, write_report

    gain = Criterion("gain", "paired", above=0.0)
    monkeypatch.setattr(render, "registered_criteria", lambda slug: [gain])
    a = ReproResult("lapsum", "c", checks=[gain.check([1.0, 1.2, 1.1], [0.0, 0.1, 0.0])])
    b = ReproResult("lapsum", "c", checks=[gain.check([1.0, -1.2, 1.1], [0.0, 0.1, 0.0])])
    write_report([a], tmp_path / "one", meta={"mode": "quick", "seed": 0})
    write_report([b], tmp_path / "two", meta={"mode": "quick", "seed": 5})
    (tmp_path / "one" / "report.md").unlink()
    assert cli.main(["report", str(tmp_path / "one")]) == 0
    assert "✅ held" in (tmp_path / "one" / "report.md").read_text()
    assert cli.main(["report", str(tmp_path / "one"), "--compare", str(tmp_path / "two")]) == 0
    out = capsys.readouterr().out
    assert "✅ held (one) · ❔ inconclusive (two)" in out
    target = tmp_path / "cmp.md"
    assert (
        cli.main(
            [
                "report",
                str(tmp_path / "one"),
                "--compare",
                str(tmp_path / "two"),
                "--out",
                str(target),
            ]
        )
        == 0
    )
    assert "seed 5" in target.read_text()
    for argv in (
        ["report", str(tmp_path / "none")],
        ["report", str(tmp_path / "one"), "--out", "x.md"],
    ):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2
