"""Issue 48: failures are counted at every stage of ``build_orbench`` / ``icml25 orbench build``,
generation included, with their HTTP cause; against a local OpenAI-compatible server whose
generator rejects requests (HTTP 400, as a server does past the model's context length)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("httpx")

from icml25.cli import main  # noqa: E402
from icml25.llm import CallableChat, ChatServer  # noqa: E402
from icml25.orbench import CATEGORIES, build_orbench  # noqa: E402
from icml25.orbench.standin import (  # noqa: E402
    scripted_generator,
    scripted_moderator,
    scripted_rewriter,
)
from icml25.toy.overrefusal_lang import OverRefusalWorld  # noqa: E402

CONTEXT = "This model's maximum context length is 16 tokens; the request has 212"


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def generator_failing_for(world, failing: set[str] | None):
    """The scripted generator, except that a request naming a category of ``failing`` (all,
    when ``None``) raises a ValueError, which :class:`ChatServer` answers with HTTP 400."""
    gen = scripted_generator(world)

    def answer(messages, **kw):
        text = messages[-1]["content"]
        if failing is None or any(f'"{c}"' in text for c in failing):
            raise ValueError(CONTEXT)
        kw = {k: v for k, v in kw.items() if k != "sample_index"}
        return gen.chat(messages, **kw)[0]

    return CallableChat(answer, name="G")


def build_argv(urls, out, categories):
    return [
        "orbench",
        "build",
        "--generator",
        f"G@{urls[0]}",
        "--rewriter",
        f"R@{urls[1]}",
        "--moderator",
        f"M1@{urls[2]}",
        "--moderator",
        f"M2@{urls[3]}",
        "--moderator",
        f"M3@{urls[4]}",
        "--categories",
        categories,
        "--n-seeds",
        "6",
        "--toxic-per-category",
        "2",
        "--out",
        str(out),
        "-q",
    ]


def serve(world, failing):
    backends = [
        generator_failing_for(world, failing),
        scripted_rewriter(world),
        *(scripted_moderator(world, i) for i in range(3)),
    ]
    return [ChatServer(b) for b in backends]


def test_build_counts_a_category_whose_generator_calls_all_failed(tmp_path, capsys):
    world = OverRefusalWorld(CATEGORIES, 0)
    servers = serve(world, {"privacy"})
    out = tmp_path / "b"
    try:
        rc = main(build_argv([s.url for s in servers], out, "hate,privacy"))
    finally:
        for s in servers:
            s.close()
    err = capsys.readouterr().err
    assert rc == 1, err  # a failed stage is never an exit 0
    failed = rows_of(out / "failed.jsonl")
    gen_rows = [r for r in failed if r["stage"] == "seed_generation"]
    assert gen_rows and len(gen_rows) == len(failed)
    assert all(r["key"][0] == "privacy" for r in gen_rows)
    assert all("HTTP 400" in r["message"] and "context length" in r["message"] for r in gen_rows)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["report"]["failed"]["seed_generation"] == len(gen_rows)
    assert meta["report"]["n_failed"] == len(gen_rows)
    assert meta["report"]["empty_categories"] == ["privacy"]
    assert f"{len(gen_rows)} failed" in err and "privacy" in err
    seeds = rows_of(out / "seeds.jsonl")
    assert seeds and {s["category"] for s in seeds} == {"hate"}


def test_build_where_every_generator_call_fails_names_the_http_cause(tmp_path, capsys):
    world = OverRefusalWorld(CATEGORIES, 0)
    servers = serve(world, None)
    out = tmp_path / "b"
    try:
        rc = main(build_argv([s.url for s in servers], out, "hate,privacy"))
        assert all(len(s.requests) == 0 for s in servers[1:])  # nothing after generation
    finally:
        for s in servers:
            s.close()
    err = capsys.readouterr().err
    assert rc == 1
    assert "HTTP 400" in err and "context length" in err
    assert "format" not in err  # the replies were never seen: no guess about their format
    failed = rows_of(out / "failed.jsonl")
    assert len(failed) == len(servers[0].requests) > 0
    assert {r["stage"] for r in failed} == {"seed_generation"}
    assert {r["key"][0] for r in failed} == {"hate", "privacy"}


def test_build_orbench_reports_generation_failures_in_the_report(tmp_path):
    world = OverRefusalWorld(CATEGORIES, 0)
    gen = generator_failing_for(world, {"hate"})
    mods = [scripted_moderator(world, i) for i in range(3)]

    def run(out):
        return build_orbench(
            gen,
            scripted_rewriter(world),
            mods,
            out_dir=out,
            categories=["hate", "privacy"],
            n_seeds=6,
            toxic_per_category=2,
            progress=False,
            concurrency=1,
        )

    rep = run(tmp_path)
    assert rep.failed["seed_generation"] == rep.n_failed > 0
    assert rep.empty_categories == ["hate"]
    assert "hate" in rep.summary() and f"{rep.n_failed} failed" in rep.summary()
    again = run(tmp_path)  # a rerun retries the failed calls, and counts them again
    assert again.failed["seed_generation"] == rep.failed["seed_generation"]
