"""The resumable pipelines against a real third-party server (issue 48): ``transformers serve`` on a
tiny random-init Llama (fixture in conftest.py). A rerun into the same store with other settings
(another backend, sampling, config or judge) is refused before any request, naming what differs,
or with ``keep_both`` asks the server afresh; a failing server's HTTP cause is what the failure
count reports; JSON output stays strict. The server's access log counts the requests."""

from __future__ import annotations

import json
import socket

import pytest

from icml25.llm import CallableReward, OpenAIChat
from icml25.llm.store import SettingsMismatch

pytestmark = pytest.mark.integration


def chat(srv, *, url: str | None = None, model: str | None = None, **kw) -> OpenAIChat:
    return OpenAIChat(url or srv.url, model or srv.model, api_key="x", max_retries=0, **kw)


def localhost(srv) -> str:
    """The same server under another name: another backend identity for the same weights."""
    return srv.url.replace("127.0.0.1", "localhost")


def test_tpo_batch_with_another_policy_or_config_is_refused_or_kept_apart(
    transformers_server, tmp_path
):
    from icml25.tpo import TPOConfig, tpo_batch

    s = transformers_server
    out = tmp_path / "tpo.jsonl"
    reward = CallableReward(lambda q, r: float(len(r)))
    config = TPOConfig(width=2, depth=1, max_tokens_response=4, max_tokens_feedback=4)
    queries = ["the cat", "the dog"]
    first = tpo_batch(queries, chat(s), reward, config, out_path=out, progress=False)
    before = s.chat_requests()
    assert before > 0 and len(first) == 2
    # the same run again: served from the file
    again = tpo_batch(queries, chat(s), reward, config, out_path=out, progress=False)
    assert s.chat_requests() == before
    assert [r.best_response for r in again] == [r.best_response for r in first]
    deeper = TPOConfig(width=3, depth=2, max_tokens_response=4, max_tokens_feedback=4)
    with pytest.raises(SettingsMismatch, match=r"config\.depth: 1 -> 2"):
        tpo_batch(queries, chat(s), reward, deeper, out_path=out, progress=False)
    with pytest.raises(
        SettingsMismatch, match=r"backend\.cache_identity: .*127\.0\.0\.1.* -> .*localhost"
    ):
        tpo_batch(queries, chat(s, url=localhost(s)), reward, config, out_path=out, progress=False)
    assert s.chat_requests() == before  # refused before any request
    kept = tpo_batch(queries, chat(s), reward, deeper, out_path=out, progress=False, keep_both=True)
    assert s.chat_requests() > before  # the new settings were asked, not read from the file
    assert all(r.n_policy_calls > f.n_policy_calls for r, f in zip(kept, first))  # depth 2, width 3
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len({r["_settings"] for r in rows}) == 2 and len(rows) == 4


def test_synthesis_with_another_teacher_or_sampling_never_gets_the_first_teachers_rows(
    transformers_server, tmp_path
):
    from icml25.safety_reasoning import Query, synthesize

    s = transformers_server
    qs = [Query("plan a trip to the river", "helpful", "1"), Query("bake bread", "helpful", "2")]
    store = tmp_path / "srg.jsonl"
    kw = dict(k=2, max_tokens=8, store=store, progress=False)
    rep = synthesize(chat(s), qs, **kw)
    assert rep.n_candidates == 4 and rep.failed == []
    before = s.chat_requests()
    assert synthesize(chat(s), qs, **kw).n_candidates == 4 and s.chat_requests() == before
    with pytest.raises(SettingsMismatch, match="teacher"):
        synthesize(chat(s, url=localhost(s)), qs, **kw)
    with pytest.raises(SettingsMismatch, match=r"temperature: 0\.8 -> 0\.3"):
        synthesize(chat(s), qs, temperature=0.3, **kw)
    assert s.chat_requests() == before
    other = synthesize(chat(s, url=localhost(s)), qs, keep_both=True, **kw)
    assert other.n_candidates == 4 and s.chat_requests() > before


def test_orbench_eval_with_other_sampling_is_refused_and_a_dead_server_prints_strict_json(
    transformers_server, tmp_path, capsys
):
    from icml25.cli import main
    from icml25.orbench import evaluate
    from icml25.orbench.records import ORBenchRecord

    s = transformers_server
    recs = [ORBenchRecord(f"the cat sat on a mat {i}", "violence", "hard-1k") for i in range(3)]
    store = tmp_path / "eval.jsonl"
    res = evaluate(chat(s), recs, store=store, max_tokens=6, progress=False)
    assert res.n == 3 and res.n_failed == 0
    before = s.chat_requests()
    with pytest.raises(SettingsMismatch, match=r"max_tokens: 6 -> 9"):
        evaluate(chat(s), recs, store=store, max_tokens=9, progress=False)
    assert s.chat_requests() == before
    both = evaluate(chat(s), recs, store=store, max_tokens=9, progress=False, keep_both=True)
    assert both.n == 3 and s.chat_requests() - before == 3
    # a model name the server refuses: every request is an HTTP 400; stdout stays strict JSON
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": r.prompt, "category": r.category}) + "\n" for r in recs)
    )
    capsys.readouterr()
    code = main(
        [
            "orbench",
            "eval",
            "--model",
            "no-such-model",
            "--base-url",
            s.url,
            "--data",
            str(prompts),
            "--out",
            str(tmp_path / "dead"),
            "-q",
        ]
    )
    out = capsys.readouterr()
    assert code == 1
    result = json.loads(out.out, parse_constant=lambda c: pytest.fail(f"non-JSON {c} on stdout"))
    assert result["n_failed"] == 3 and result["rate"] is None
    assert "400" in out.err


def test_orbench_build_whose_generator_calls_all_fail_reports_the_http_cause(
    transformers_server, tmp_path, capsys
):
    """Every generator call answered HTTP 400 (a model name the server refuses): the error names
    the 400, not the reply format; failed.jsonl holds each call's cause; the command exits 1."""
    from icml25.cli import main
    from icml25.orbench import build_orbench

    s = transformers_server
    refused = chat(s, model="no-such-model")
    with pytest.raises(ValueError, match=r"every call to the generator .* failed.*400"):
        build_orbench(
            refused,
            chat(s),
            [chat(s)],
            out_dir=tmp_path / "a",
            categories="hate",
            n_seeds=3,
            progress=False,
            concurrency=1,
        )
    fails = [json.loads(x) for x in (tmp_path / "a" / "failed.jsonl").read_text().splitlines()]
    assert fails and all(f["stage"] == "seed_generation" and "400" in f["message"] for f in fails)
    capsys.readouterr()
    code = main(
        [
            "orbench",
            "build",
            "--generator",
            "no-such-model",
            "--rewriter",
            s.model,
            "--moderator",
            s.model,
            "--base-url",
            s.url,
            "--categories",
            "hate",
            "--n-seeds",
            "3",
            "--out",
            str(tmp_path / "b"),
            "-q",
        ]
    )
    assert code == 1 and "400" in capsys.readouterr().err


def test_orbench_build_with_a_moderator_at_other_sampling_is_refused_before_any_request(
    transformers_server, tmp_path
):
    """The moderators are the real server (their votes on the tiny model's noise are what they
    are); the generator and rewriter are scripted so that the build reaches moderation."""
    from icml25.orbench import CATEGORIES, LLMModerator, build_orbench
    from icml25.orbench.standin import scripted_generator, scripted_rewriter
    from icml25.toy.overrefusal_lang import OverRefusalWorld

    s = transformers_server
    world = OverRefusalWorld(CATEGORIES, 0)
    gen, rw = scripted_generator(world), scripted_rewriter(world)
    kw = dict(
        out_dir=tmp_path,
        categories="hate",
        n_seeds=3,
        n_rewrites=2,
        toxic_per_category=1,
        progress=False,
        concurrency=2,
    )
    rep = build_orbench(gen, rw, [LLMModerator(chat(s), max_tokens=4)], **kw)
    assert rep.n_candidates > 0 and rep.failed["moderation"] == 0
    before = s.chat_requests()
    build_orbench(gen, rw, [LLMModerator(chat(s), max_tokens=4)], **kw)
    assert s.chat_requests() == before  # resumed from the stores
    with pytest.raises(SettingsMismatch, match=r"moderators\.0\.max_tokens: 4 -> 5"):
        build_orbench(gen, rw, [LLMModerator(chat(s), max_tokens=5)], **kw)
    with pytest.raises(
        SettingsMismatch,
        match=r"moderators\.0\.backend\.cache_identity: .* -> .*extra_body=\{\"top_p\": 0\.5\}",
    ):
        build_orbench(
            gen, rw, [LLMModerator(chat(s, extra_body={"top_p": 0.5}), max_tokens=4)], **kw
        )
    assert s.chat_requests() == before


def test_rlthf_labeller_cache_keeps_each_labellers_answers_apart(transformers_server, tmp_path):
    from icml25.rlthf import ChatLabeler, PreferencePairs

    s = transformers_server
    pairs = PreferencePairs(["the cat", "the dog"], ["red sun", "blue moon"], ["a mat", "a tree"])
    cache = tmp_path / "labels.jsonl"
    a = ChatLabeler(chat(s), cache_path=cache, swap_check=False, max_retries=0)
    a.label(pairs, [0, 1])
    assert a.calls == 2
    again = ChatLabeler(chat(s), cache_path=cache, swap_check=False, max_retries=0)
    again.label(pairs, [0, 1])
    assert again.calls == 0  # the same labeller: served from the cache
    before = s.chat_requests()
    b = ChatLabeler(chat(s, url=localhost(s)), cache_path=cache, swap_check=False, max_retries=0)
    b.label(pairs, [0, 1])
    assert b.calls == 2 and s.chat_requests() - before == 2  # asked, not given A's answers


def test_a_port_that_refuses_connections_is_not_an_http_cause(tmp_path):
    """No server at all: the build's error names the connection failure (a transport error),
    and the circuit breaker stops the calls; no 'reply format' blame."""
    from icml25.orbench import build_orbench

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = OpenAIChat(
        f"http://127.0.0.1:{port}/v1", "m", api_key="x", max_retries=0, circuit_breaker=2
    )
    with pytest.raises(ValueError, match="every call to the generator") as info:
        build_orbench(
            dead,
            dead,
            [dead],
            out_dir=tmp_path,
            categories="hate",
            n_seeds=3,
            progress=False,
            concurrency=1,
        )
    assert "format" not in str(info.value)
