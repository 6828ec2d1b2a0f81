"""Shared test setup: quiet progress output, tests marked ``gpu`` skip where CUDA is absent, and
the ``check_smoke`` fixture for smoke-size reproductions."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

# Property tests (hypothesis): derandomized by default, so the suite (and CI) runs the same
# examples every time and a failure reproduces; HYPOTHESIS_PROFILE=explore draws fresh ones
# (run it locally to look for new counterexamples, then pin what it finds as a plain test).
try:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("default", derandomize=True, print_blob=True)
    _hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
except ImportError:  # hypothesis is in the dev extra; its tests skip without it
    pass

os.environ.setdefault("ICML25_QUIET", "1")
# No test downloads: a name that is not a local folder fails at once instead of after the hub
# client's retries (46 s for one bad --rm name).
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


# -- smoke-size reproductions: a finished, well-formed verdict with finite numbers ---------------


def _check_smoke_result(
    result: Any,
    slug: str,
    *,
    metrics: tuple[str, ...] = (),
    prefixes: tuple[str, ...] = (),
    ranges: dict[str, tuple[float, float]] | None = None,
    allow_nan: tuple[str, ...] = (),
) -> None:
    """``result`` is a finished reproduction of ``slug``: no error, checks from pre-registered
    criteria with finite estimates, intervals around them and stored data that recompute to the
    same verdict, the named metrics (and one metric per prefix) present, every value finite unless
    its name starts with one of ``allow_nan``, the values of ``ranges`` (name or prefix -> (low,
    high)) inside them, existing PNG figures, and a report section that renders."""
    from icml25.report import ReproResult, render_markdown

    assert isinstance(result, ReproResult) and result.slug == slug
    assert result.error is None and result.status in ("held", "inconclusive", "did not hold")
    assert result.claim.strip() and result.checks and result.seeds
    from icml25.report.checks import unit_problems

    # every check counts each independent unit once: it names its units, or is per seed
    problems = [p for c in result.checks for p in unit_problems(c, result.seeds)]
    assert not problems, problems
    for c in result.checks:
        assert math.isfinite(c.estimate) and c.low <= c.estimate <= c.high, c.to_dict()
        assert c.test.strip() and c.criterion.threshold_text
        again = c.recompute()
        assert (again.low, again.high, again.verdict) == (c.low, c.high, c.verdict), c.name
    names = [m.name for m in result.metrics]
    missing = [m for m in metrics if m not in names]
    assert not missing, f"missing metrics {missing}; got {names}"
    for p in prefixes:
        assert any(n.startswith(p) for n in names), f"no metric starting with {p!r} in {names}"
    for m in result.metrics:
        if not m.name.startswith(allow_nan):
            assert all(math.isfinite(v) for v in m.values), f"{m.name}: {m.values}"
    for key, (lo, hi) in (ranges or {}).items():
        hits = [m for m in result.metrics if m.name == key or m.name.startswith(key)]
        assert hits, f"no metric {key!r} to range-check in {names}"
        for m in hits:
            assert all(lo <= v <= hi for v in m.values if math.isfinite(v)), (m.name, m.values)
    for f in result.figures:
        assert f.exists() and f.suffix == ".png" and f.stat().st_size > 1000
    out_dir = result.figures[0].parent if result.figures else Path(".")
    text = render_markdown([result], out_dir=out_dir)
    assert slug in text and "estimate [95% interval]" in text


@pytest.fixture
def check_smoke():
    """``check_smoke(result, slug, metrics=..., prefixes=..., ranges=..., allow_nan=...)``: the
    result is a finished reproduction (see ``_check_smoke_result``): its verdict, metrics,
    ranges and figures are checked, not merely that a verdict exists."""
    return _check_smoke_result


# -- recorded verdicts: a changed verdict fails its slow test until docs/<slug>.md is updated ----

_DOCS = Path(__file__).resolve().parents[1] / "docs"


def recorded_verdicts(slug: str, mode: str = "quick", seed: int = 0) -> list[str]:
    """The verdicts, in check order, that ``docs/<slug>.md`` records for the reproduction in
    ``mode`` at base seed ``seed``, from its marker line::

        <!-- recorded verdicts, quick, seed 0: held; held; inconclusive -->

    The marker sits next to the table it summarises; a slow test compares a fresh run with it, so
    a change of verdict fails until the page (table, text and marker) is updated."""
    import re

    page = _DOCS / f"{slug}.md"
    text = page.read_text(encoding="utf-8")
    pattern = rf"<!-- recorded verdicts, {re.escape(mode)}, seed {seed}: ([^>]*?) -->"
    found = re.findall(pattern, text)
    assert len(found) == 1, (
        f"{page} needs exactly one marker '<!-- recorded verdicts, {mode}, seed {seed}: ... -->'"
    )
    verdicts = [v.strip() for v in found[0].split(";")]
    bad = [v for v in verdicts if v not in ("held", "inconclusive", "did not hold")]
    assert not bad, f"{page}: unknown verdicts {bad} in the recorded-verdicts marker"
    return verdicts


@pytest.fixture
def assert_recorded_verdicts():
    """``assert_recorded_verdicts(result, slug, mode="quick")``: the result's verdicts, check by
    check, are the ones docs/<slug>.md records for that mode and seed."""

    def check(result: Any, slug: str, mode: str = "quick") -> None:
        want = recorded_verdicts(slug, mode, result.seed)
        got = [c.verdict for c in result.checks]
        names = [c.name for c in result.checks]
        assert got == want, (
            f"{slug} {mode} verdicts changed: got {list(zip(names, got))}, docs/{slug}.md records "
            f"{want}; if the change is right, update the page (its table, text and marker)"
        )

    return check


# -- data-parallel training: the same worker under one and two gloo processes --------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    worker: Path,
    out: Path,
    *args: str,
    nproc: int = 2,
    timeout: float = 420,
    launcher: str = "torchrun",
) -> list[dict[str, Any]]:
    """Run ``python worker OUT args...`` under ``torchrun --nproc_per_node nproc`` on the CPU (one
    torch thread per process; the trainers take gloo from accelerate) and return the JSON that each
    rank wrote to ``OUT/rank<r>.json``, in rank order. A failing rank fails the test with the
    launcher's output. ``launcher="accelerate"`` starts them with ``accelerate launch`` and a
    config file written here instead (its multi-process launcher; the workers' ``use_cpu=True``
    keeps them on the CPU with gloo)."""
    import json
    import subprocess
    import sys

    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "ICML25_QUIET": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if launcher == "torchrun":
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(_free_port()),
            str(worker),
            str(out),
            *args,
        ]
    elif launcher == "accelerate":
        config = out / "accelerate.yaml"
        config.write_text(
            "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
            f"num_processes: {nproc}\nnum_machines: 1\nmachine_rank: 0\n"
            f"main_process_ip: 127.0.0.1\nmain_process_port: {_free_port()}\n"
            "mixed_precision: 'no'\ndynamo_config: {}\nuse_cpu: false\n"
        )
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(config),
            str(worker),
            str(out),
            *args,
        ]
    else:
        raise ValueError(f"launcher must be 'torchrun' or 'accelerate', got {launcher!r}")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-6000:])
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture
def ranks(tmp_path):
    """``ranks(worker, *args, nproc=2, launcher="torchrun")``: :func:`run_ranks` into a fresh folder under
    ``tmp_path`` (``tmp_path / f"world{nproc}-{n}"``); returns the ranks' JSON records."""
    calls = []

    def run(
        worker: Path, *args: str, nproc: int = 2, timeout: float = 420, launcher: str = "torchrun"
    ) -> list[dict]:
        calls.append(nproc)
        out = tmp_path / f"world{nproc}-{len(calls)}"
        return run_ranks(worker, out, *args, nproc=nproc, timeout=timeout, launcher=launcher)

    return run
