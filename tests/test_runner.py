"""The runner: a raising reproduction is reported and the others still run; resume; exit codes."""

from __future__ import annotations

import sys
import types

import pytest

from icml25 import cli
from icml25.registry import Paper
from icml25.report import Criterion, Metric, ReproResult, load_results, reproduction
from icml25.runner import run_reproductions

CALLS: list[str] = []
GAIN = Criterion("gain", "paired", above=0.0)
BYTES = Criterion("bytes", "exact", below=10)


def _held(quick, seed, out):
    CALLS.append("held")
    (out / "marker.txt").write_text("written by the fake repro")
    check = GAIN.check([1.0, 1.1, 1.2], [0.0, 0.05, 0.1])
    return ReproResult(
        "aaa", "A holds.", checks=[check], metrics=[Metric("x", [1.0, 2.0])], seed=seed
    )


def _raises(quick, seed, out):
    CALLS.append("raises")
    raise RuntimeError("the fake reproduction broke")


def _not_held(quick, seed, out):
    CALLS.append("not_held")
    return ReproResult("ccc", "C holds.", checks=[BYTES.check(20)])


def _wrong_type(quick, seed, out):
    return {"held": True}


@reproduction("fff", seeds=(3, 5), threads=None)
def _seeded(r):
    CALLS.append(f"seeded {r.mode} {r.seeds}")
    runs = r.over_seeds(lambda s: {"ours": 1.0 + 0.1 * s, "base": 0.5})
    check = GAIN.check([x["ours"] for x in runs], [x["base"] for x in runs])
    return r.result(claim="F holds.", checks=[check], criteria=[GAIN])


@pytest.fixture
def fake_papers(monkeypatch):
    mod = types.ModuleType("icml25_fake_repros")
    mod.held, mod.raises, mod.not_held, mod.wrong_type = _held, _raises, _not_held, _wrong_type
    mod.seeded = _seeded
    monkeypatch.setitem(sys.modules, "icml25_fake_repros", mod)
    CALLS.clear()
    return [
        Paper(1, "aaa", "Paper A", "arXiv:0000.00001", repro="icml25_fake_repros:held"),
        Paper(2, "bbb", "Paper B", "arXiv:0000.00002", repro="icml25_fake_repros:raises"),
        Paper(3, "ccc", "Paper C", "arXiv:0000.00003", repro="icml25_fake_repros:not_held"),
        Paper(4, "ddd", "Paper D", "arXiv:0000.00004"),
    ]


def test_raising_repro_is_reported_and_the_others_still_run(fake_papers, tmp_path):
    lines: list[str] = []
    results = run_reproductions(fake_papers, out=tmp_path, seed=3, echo=lines.append)
    assert CALLS == ["held", "raises", "not_held"]
    assert [r.status for r in results] == ["held", "error", "did not hold", "planned"]
    assert "RuntimeError: the fake reproduction broke" in results[1].error
    assert results[0].seed == 3 and results[0].seconds > 0
    assert (tmp_path / "aaa" / "marker.txt").exists()  # each paper writes under out/<slug>/
    assert any("bbb: error" in line for line in lines)
    text = (tmp_path / "report.md").read_text()
    assert "the fake reproduction broke" in text and "Paper D" in text
    _, saved = load_results(tmp_path)
    assert [r.status for r in saved] == ["held", "error", "did not hold", "planned"]


def test_wrong_return_type_becomes_an_error(fake_papers, tmp_path):
    paper = Paper(5, "eee", "E", "arXiv:0000.00005", repro="icml25_fake_repros:wrong_type")
    (result,) = run_reproductions([paper], out=tmp_path)
    assert result.status == "error" and "expected icml25.report.ReproResult" in result.error


def test_resume_skips_finished_papers_with_same_mode_and_seed(fake_papers, tmp_path):
    run_reproductions(fake_papers, out=tmp_path)
    CALLS.clear()
    results = run_reproductions(fake_papers, out=tmp_path, resume=True)
    assert CALLS == ["raises"]  # errors are retried, finished verdicts are kept
    assert [r.status for r in results] == ["held", "error", "did not hold", "planned"]
    CALLS.clear()
    run_reproductions(fake_papers, out=tmp_path, resume=True, seed=1)
    assert CALLS == ["held", "raises", "not_held"]  # another seed is another run


@pytest.mark.parametrize(
    ("which", "strict", "code"),
    [
        ([0], False, 0),
        ([0, 2, 3], False, 0),  # a claim that did not hold is a result, not a failure
        ([0, 2, 3], True, 1),  # ... unless --strict
        ([0, 3], True, 0),
        ([0, 1, 2], False, 1),  # a reproduction raised
    ],
)
def test_cli_exit_codes(fake_papers, tmp_path, monkeypatch, capsys, which, strict, code):
    monkeypatch.setattr(cli, "resolve", lambda names: [fake_papers[i] for i in which])
    argv = ["repro", "--out", str(tmp_path), "--quiet"] + (["--strict"] if strict else [])
    assert cli.main(argv) == code
    assert f"Report: {tmp_path / 'report.md'}" in capsys.readouterr().out


def test_seed_override_reaches_the_harness_and_is_reported(fake_papers, tmp_path):
    paper = Paper(6, "fff", "F", "arXiv:0000.00006", repro="icml25_fake_repros:seeded")
    (default,) = run_reproductions([paper], out=tmp_path / "a", seed=2)
    assert CALLS == ["seeded quick [2, 3, 4]"] and default.seeds == [2, 3, 4]
    assert "set by the caller" not in default.notes
    (full,) = run_reproductions([paper], out=tmp_path / "b", quick=False, seeds=None)
    assert full.seeds == [0, 1, 2, 3, 4]
    (over,) = run_reproductions([paper], out=tmp_path / "c", seeds=7)
    assert over.seeds == list(range(7)) and over.check("gain").n == 7
    assert "set by the caller (7 seeds" in over.notes
    meta, _ = load_results(tmp_path / "c")
    assert meta["seeds"] == 7
    # a resumed run only reuses results made with the same seed count
    CALLS.clear()
    run_reproductions([paper], out=tmp_path / "c", seeds=7, resume=True)
    assert CALLS == []
    run_reproductions([paper], out=tmp_path / "c", seeds=4, resume=True)
    assert CALLS == ["seeded quick [0, 1, 2, 3]"]
    # a repro that takes no seed count says so instead of ignoring --seeds
    held = Paper(1, "aaa", "A", "arXiv:0000.00001", repro="icml25_fake_repros:held")
    (err,) = run_reproductions([held], out=tmp_path / "d", seeds=3)
    assert err.status == "error" and "does not take a seed count" in err.error


def _tiny_figure():
    from icml25.report import pyplot

    fig, ax = pyplot().subplots()
    ax.plot([0, 1])
    return fig


def test_harness_refuses_checks_from_undeclared_criteria(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    @reproduction("ggg", seeds=(2, 2), threads=None)
    def body(r):
        moved = Criterion("gain", "paired", above=-1.0)  # threshold changed after the fact
        return r.result(claim="c", checks=[moved.check([1, 2], [0, 0])], criteria=[GAIN])

    with pytest.raises(
        ValueError, match=r"differs from its declared criterion \(above: declared 0.0, used -1.0\)"
    ):
        body(out=tmp_path)

    @reproduction("hhh", seeds=(2, 2), threads=None)
    def stray(r):
        other = Criterion("other", "mean", below=5.0)
        return r.result(claim="c", checks=[other.check([1, 2])], criteria=[GAIN])

    with pytest.raises(ValueError, match="comes from no declared criterion"):
        stray(out=tmp_path)

    @reproduction("iii", seeds=(2, 2), threads=None)
    def partial(r):
        r.figure(_tiny_figure(), "f.png")
        return r.result(claim="c", checks=[GAIN.check([1, 2], [0, 0])], criteria=[GAIN, BYTES])

    res = partial(out="rel/out")  # a relative folder: the figure is recorded by absolute path
    assert "Declared criteria not evaluated in this quick run: bytes." in res.notes
    assert res.figures[0].is_absolute() and res.figures[0].exists()
    with pytest.raises(TypeError, match="Check objects"):
        reproduction("jjj", seeds=(2, 2), threads=None)(
            lambda r: r.result(claim="c", checks=["held"], criteria=[GAIN])
        )(out=tmp_path)
    with pytest.raises(ValueError, match="number of seeds must be a positive integer"):
        body(out=tmp_path, seeds=0)


_PARALLEL_MODULE = """
import os, time
from icml25.report import Criterion, ReproResult, reproduction

GAIN = Criterion("gain", "paired", above=0.0)


@reproduction("par_a", seeds=(3, 5))
def seeded(r):
    import torch

    runs = r.over_seeds(lambda s: {"ours": 1.0 + 0.1 * s, "base": 0.5, "pid": os.getpid(),
                                   "threads": torch.get_num_threads()})
    (r.out / "pid.txt").write_text(str(runs[0]["pid"]))
    time.sleep(0.5)  # long enough for the other paper to start beside it
    check = GAIN.check([x["ours"] for x in runs], [x["base"] for x in runs])
    return r.result(claim="A holds.", checks=[check], criteria=[GAIN],
                    notes=f"threads {runs[0]['threads']}")


def raises(quick, seed, out):
    raise RuntimeError("broke in the child")


def dies(quick, seed, out):
    os._exit(3)


def sleeps(quick, seed, out):
    (out / "pid.txt").write_text(str(os.getpid()))
    time.sleep(120)
"""


@pytest.fixture
def parallel_papers(tmp_path, monkeypatch):
    """Stand-ins importable by a spawned process (it gets this process's sys.path)."""
    src = tmp_path / "mods"
    src.mkdir()
    (src / "icml25_parallel_repros.py").write_text(_PARALLEL_MODULE)
    monkeypatch.syspath_prepend(str(src))
    return [
        Paper(1, "par_a", "Paper A", "arXiv:0000.00001", repro="icml25_parallel_repros:seeded"),
        Paper(2, "par_b", "Paper B", "arXiv:0000.00002", repro="icml25_parallel_repros:raises"),
        Paper(3, "par_c", "Paper C", "arXiv:0000.00003", repro="icml25_parallel_repros:dies"),
        Paper(4, "par_d", "Paper D", "arXiv:0000.00004"),
    ]


def test_jobs_run_papers_in_their_own_processes_with_the_same_results(parallel_papers, tmp_path):
    """``--jobs 2`` (make repro): each paper in a fresh process with its fixed thread count; a
    child that raises or dies without a result is that paper's error, the others still report."""
    import os

    lines: list[str] = []
    par = run_reproductions(parallel_papers, out=tmp_path / "par", jobs=2, echo=lines.append)
    seq = run_reproductions(parallel_papers[:2], out=tmp_path / "seq")
    assert [r.status for r in par] == ["held", "error", "error", "planned"]
    assert par[0].to_dict()["checks"] == seq[0].to_dict()["checks"]
    assert par[0].notes == seq[0].notes == "threads 1"  # the harness's thread count in both
    assert int((tmp_path / "par" / "par_a" / "pid.txt").read_text()) != os.getpid()
    assert "RuntimeError: broke in the child" in par[1].error
    assert "exited with code 3 without a result" in par[2].error
    assert sum("running quick reproduction" in line for line in lines) == 3
    assert any(line.startswith("[3/3]") for line in lines)
    meta, saved = load_results(tmp_path / "par")
    assert [r.slug for r in saved] == ["par_a", "par_b", "par_c", "par_d"]
    assert "2 reproductions at a time" in meta["environment"]


def test_cli_refuses_jobs_below_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["repro", "lapsum", "--jobs", "0", "--out", str(tmp_path)])
    assert (
        exc.value.code == 2
        and "--jobs must be a positive integer, got 0" in capsys.readouterr().err
    )


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stopping_the_runner_stops_its_papers(parallel_papers, tmp_path):
    """A new user's review (issue 50): a SIGTERM to the runner alone left its papers running."""
    import signal
    import subprocess
    import sys
    import time

    src = tmp_path / "mods"
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(src)!r})\n"
        "from icml25.registry import Paper\n"
        "from icml25.runner import run_reproductions\n"
        "papers = [Paper(k, f'slow_{k}', 'S', 'arXiv:0000.00001', "
        "repro='icml25_parallel_repros:sleeps') for k in (1, 2)]\n"
        f"run_reproductions(papers, out={str(tmp_path / 'out')!r}, jobs=2)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script])
    pids = [tmp_path / "out" / f"slow_{k}" / "pid.txt" for k in (1, 2)]
    deadline = time.monotonic() + 240  # two fresh interpreters importing icml25, on 2 busy cores
    while not all(p.exists() and p.read_text() for p in pids) and time.monotonic() < deadline:
        assert runner.poll() is None, "the runner ended before its papers started"
        time.sleep(0.2)
    children = [int(p.read_text()) for p in pids]
    assert all(_alive(pid) for pid in children)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children)
