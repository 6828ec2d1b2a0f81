"""The reproduction at smoke size, the quick mode's claim (slow) and `icml25 rlthf curate`."""

from __future__ import annotations

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from icml25.rlthf import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("rlthf"), smoke=True)


def test_criteria_are_preregistered():
    from icml25.registry import get
    from icml25.rlthf import repro

    assert [(c.design, c.above, c.below) for c in repro.CRITERIA] == [
        ("paired", 0.05, None),
        ("paired", 0.0, None),
        ("paired", 0.0, None),
        ("mean", 0.0, None),
        ("mean", 0.0, None),
        ("mean", None, 0.0),
    ]
    assert repro.run.preregistered_seeds == {"quick": 3, "full": 5}
    assert get("rlthf").repro == "icml25.rlthf.repro:run"


def test_smoke_result_structure(smoke, check_smoke):
    # check_smoke: finite estimates, verdicts that recompute, and every check per seed (units)
    check_smoke(
        smoke,
        "rlthf",
        metrics=("acc AI only", "acc full human", "G(6 %) RLTHF"),
        ranges={"acc ": (0, 1)},
    )
    assert len(smoke.checks) == 4
    gate = smoke.checks[0]
    assert len(gate.data["a"]) == 2 and all(0 <= a <= 1 for a in gate.data["a"])
    assert {p.name for p in smoke.figures} == {
        "accuracy_vs_budget.png",
        "reward_distribution.png",
        "curation.png",
    }
    assert all(p.is_file() and p.stat().st_size > 1000 for p in smoke.figures)
    metric = {m.name: m for m in smoke.metrics}
    for t in (2, 4, 6):
        assert 0 <= metric[f"acc rlthf at {t} %"].mean <= 1
    assert 0 < metric["RLTHF kept_fraction after iteration 3"].mean <= 1
    assert "| method |" in smoke.tables[0]


@pytest.mark.slow
def test_quick_mode_verdicts_are_the_recorded_ones(tmp_path, check_smoke, assert_recorded_verdicts):
    from icml25.rlthf import repro

    res = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(res, "rlthf", metrics=("G(6 %) RLTHF",))
    assert_recorded_verdicts(res, "rlthf", "quick")
    by = {c.name: c for c in res.checks}
    # RLTHF beats random at 6 % on every seed, not only on average
    assert (
        min(np.subtract(by[repro.BEAT_RANDOM.name].data["a"], by[repro.BEAT_RANDOM.name].data["b"]))
        > 0
    )
    assert res.seconds < 300


def test_cli_curate_end_to_end_over_http(tmp_path, capsys):
    from icml25.cli import main
    from icml25.llm import CallableChat, ChatServer
    from icml25.rlthf import make_textworld

    w = make_textworld(80, 0, seed=5)
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in w.train.to_trl(conversational=True)))

    def judge(messages, **kw):  # prefers the longer response: a biased AI labeller
        user = messages[-1]["content"]
        a = user.split("Response A:\n")[1].split("\n\nResponse B:")[0]
        b = user.split("Response B:\n")[1].split("\n\nWhich")[0]
        return "A" if len(a) >= len(b) else "B"

    out = tmp_path / "run"
    with ChatServer(CallableChat(judge)) as server:
        argv = [
            "rlthf",
            "curate",
            "--pairs",
            str(path),
            "--labeler",
            "openai:judge",
            "--base-url",
            server.url,
            "--rm",
            "hashing",
            "--budget",
            "0.05",
            "--out",
            str(out),
            "-q",
        ]
        assert main(argv) == 0
        n_requests = len(server.requests)
        assert main(argv) == 0  # rerun: the AI labels and the iterations are on disk
        assert len(server.requests) == n_requests
        assert "curated" in capsys.readouterr().out
        with pytest.raises(SystemExit):  # other settings, same --out: a clean usage error
            main(argv[:-3] + ["--amplification", "2", "--out", str(out), "-q"])
        assert "another configuration" in capsys.readouterr().err
    rows = [json.loads(x) for x in (out / "curated.jsonl").read_text().splitlines()]
    assert rows and all({"prompt", "chosen", "rejected", "weight"} <= set(r) for r in rows)
    hist = json.loads((out / "history.json").read_text())
    assert hist[-1]["n_human"] == 3 * 4  # ceil(0.05 * 80) per iteration


def test_cli_bad_arguments(tmp_path):
    from icml25.cli import main

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "q", "chosen": "a", "rejected": "b"}))
    with pytest.raises(SystemExit):
        main(["rlthf", "curate", "--pairs", str(path), "--labeler", "gpt4", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(
            [
                "rlthf",
                "curate",
                "--pairs",
                str(path),
                "--labeler",
                "openai:m",
                "--out",
                str(tmp_path),
            ]
        )


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--rm", "no-such-checkpoint-xyz"], "local folder holding a sequence-classification"),
    ],
)
def test_cli_bad_options_are_usage_errors(tmp_path, capsys, extra, msg):
    from icml25.cli import main

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "q", "chosen": "a", "rejected": "b"}))
    argv = [
        "rlthf",
        "curate",
        "--pairs",
        str(path),
        "--labeler",
        "openai:m",
        "--base-url",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path / "o"),
        *extra,
    ]
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2 and msg in capsys.readouterr().err
