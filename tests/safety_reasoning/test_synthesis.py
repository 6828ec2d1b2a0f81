"""synthesize(): rejection sampling, acceptance bookkeeping, per-query seeds, error rows and
resumption after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from icml25.llm import CallableChat
from icml25.safety_reasoning import FormatFilter, GuidelineFilter, OutcomeFilter, Query, synthesize
from icml25.safety_reasoning.toy_teacher import (
    TOY_FORMAT,
    ScriptedTeacher,
    restatement_judge,
    toy_guidelines,
)


def toy_queries(world, n=40, seed=0):
    import random

    cores = world.safety_queries(n, random.Random(seed))
    return [
        Query(world.render(c, "plain"), "harmful" if c.harmful else "helpful", f"q{i}")
        for i, c in enumerate(cores)
    ]


def toy_filters(world):
    return [
        FormatFilter(),
        OutcomeFilter(world.is_refusal),
        GuidelineFilter(restatement_judge(world), guidelines=toy_guidelines()),
    ]


def test_acceptance_bookkeeping_and_teacher_reads_guidelines(world, tmp_path):
    qs = toy_queries(world)
    teacher = CallableChat(ScriptedTeacher(world, error_rate=0.3))
    rep = synthesize(
        teacher,
        qs,
        toy_guidelines(),
        k=4,
        fmt=TOY_FORMAT,
        filters=toy_filters(world),
        store=tmp_path / "s.jsonl",
        progress=False,
    )
    assert rep.n_candidates == 4 * len(qs)
    rejected = sum(rep.per_filter_rejects.values())
    assert rep.acceptance_rate == pytest.approx((rep.n_candidates - rejected) / rep.n_candidates)
    assert 0.5 < rep.acceptance_rate < 0.9  # 30 % error rate, every error caught
    assert set(rep.acceptance_by_kind) == {"harmful", "helpful"}
    assert len(rep.examples) == len(qs) - len(rep.dropped)
    for ex in rep.examples:  # every kept trace is correct
        assert ex.reasoning == world.trace(ex.query.text)
        assert ex.answer == world.answer(world.normalise(ex.query.text))
    # without the harm guideline the scripted teacher never refuses: the outcome filter rejects
    exact = CallableChat(ScriptedTeacher(world, error_rate=0.0))
    rep2 = synthesize(
        exact,
        qs,
        [g for g in toy_guidelines() if g.name != "G-harm"],
        k=2,
        fmt=TOY_FORMAT,
        filters=toy_filters(world),
        progress=False,
    )
    assert rep2.acceptance_by_kind["harmful"] == 0.0 and rep2.queries_kept_by_kind["harmful"] == 0.0
    assert rep2.per_filter_rejects["outcome"] >= 2 * sum(q.kind == "harmful" for q in qs)


def test_candidates_differ_and_queries_get_their_own_seed(world):
    seen = []

    def teacher(messages, *, seed, sample_index=0, **kw):
        seen.append((messages[-1]["content"], seed, sample_index))
        return "<think>r</think>a"

    qs = [Query("a b c", "helpful", "x"), Query("d e f", "helpful", "y")]
    synthesize(CallableChat(teacher), qs, k=3, max_rounds=1, progress=False)
    seeds = {q: s for q, s, _ in seen}
    assert seeds["a b c"] != seeds["d e f"]
    assert sorted(i for q, _, i in seen if q == "a b c") == [0, 1, 2]


def test_failing_query_is_an_error_row_and_others_are_kept(world, tmp_path):
    server = {"broken": True}
    asked = []

    def teacher(messages, **kw):
        asked.append(messages[-1]["content"])
        if server["broken"] and "boom" in messages[-1]["content"]:
            raise RuntimeError("server error")
        return "<think>fine</think>Sure, here it is."

    qs = [
        Query("fine one", "helpful", "1"),
        Query("boom", "helpful", "2"),
        Query("fine two", "helpful", "3"),
    ]
    rep = synthesize(CallableChat(teacher), qs, k=1, store=tmp_path / "s.jsonl", progress=False)
    assert rep.failed == ["2"] and len(rep.examples) == 2
    assert rep.errors == {"2": "RuntimeError: server error"}
    rows = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert any("error" in r for r in rows)
    # the same teacher, its server fixed: a rerun asks the failed query again (and only it)
    server["broken"] = False
    asked.clear()
    rep2 = synthesize(CallableChat(teacher), qs, k=1, store=tmp_path / "s.jsonl", progress=False)
    assert asked == ["boom"] and not rep2.failed and len(rep2.examples) == 3


def test_every_query_failing_is_an_error_naming_the_cause():
    def down(messages, **kw):
        raise ConnectionError("connection refused: http://localhost:9/v1")

    with pytest.raises(RuntimeError, match="connection refused"):
        synthesize(
            CallableChat(down), [Query("a", "helpful"), Query("b", "harmful")], progress=False
        )


def test_default_filters_check_the_outcome():
    teacher = CallableChat(lambda m, **kw: "<think>r</think>I'm sorry, I can't help with that.")
    rep = synthesize(
        teacher,
        [Query("bake bread", "helpful"), Query("make a bomb", "harmful")],
        k=1,
        progress=False,
    )
    assert rep.per_filter_rejects == {"outcome": 1} and [e.query.kind for e in rep.examples] == [
        "harmful"
    ]


def test_max_rounds_resamples_rejected_queries():
    calls = []

    def teacher(messages, *, seed, **kw):
        calls.append(seed)
        return "<think>r</think>ok" if len(calls) > 2 else "no block"

    rep = synthesize(
        CallableChat(teacher), [Query("q", "helpful", "1")], k=2, max_rounds=3, progress=False
    )
    assert (
        len(rep.examples) == 1 and len(calls) == 4 and len(set(calls)) == 2
    )  # two rounds, two seeds


SCRIPT = textwrap.dedent(
    """
    import sys, time
    from icml25.llm import CallableChat
    from icml25.safety_reasoning import Query, synthesize

    def teacher(messages, **kw):
        with open(sys.argv[2], "a") as f:
            f.write(messages[-1]["content"] + "\\n")
        time.sleep(0.05)
        return "<think>r</think>answer"

    qs = [Query(f"query {i}", "helpful", str(i)) for i in range(40)]
    rep = synthesize(CallableChat(teacher), qs, k=1, store=sys.argv[1], concurrency=1, progress=False)
    print(len(rep.examples))
    """
)


def test_resumes_after_kill(tmp_path):
    script, store, log = tmp_path / "run.py", tmp_path / "store.jsonl", tmp_path / "calls.txt"
    script.write_text(SCRIPT)
    env = {**os.environ, "ICML25_QUIET": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(store), str(log)], env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        if store.exists() and len(store.read_text().splitlines()) >= 8:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    done_before = {
        json.loads(x)["id"] for x in store.read_text().splitlines() if x.strip().endswith("}")
    }
    assert 8 <= len(done_before) < 40
    first_calls = log.read_text().splitlines()
    out = subprocess.run(
        [sys.executable, str(script), str(store), str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip().endswith("40")
    second_calls = log.read_text().splitlines()[len(first_calls) :]
    # only the queries not finished before the kill were asked again (at most one in flight was lost)
    assert {c.removeprefix("query ") for c in second_calls} == {
        str(i) for i in range(40)
    } - done_before
    assert len(first_calls) - len(done_before) <= 1


def test_bad_input(world):
    teacher = CallableChat(lambda m, **kw: "<think>r</think>a")
    with pytest.raises(ValueError, match="empty"):
        synthesize(teacher, [])
    with pytest.raises(ValueError, match="kind"):
        Query("x", "evil")
    with pytest.raises(ValueError, match="k must be"):
        synthesize(teacher, [Query("x", "helpful")], k=0)
    with pytest.raises(ValueError, match="share the id"):
        synthesize(teacher, [Query("x", "helpful", "1"), Query("y", "helpful", "1")])
    with pytest.raises(TypeError, match="chat backend"):
        synthesize(lambda m: "x", [Query("x", "helpful")])
    with pytest.raises(ValueError, match="temperature"):
        synthesize(teacher, [Query("x", "helpful")], temperature=-1)
    with pytest.raises(TypeError, match="pass an instance"):
        synthesize(teacher, [Query("x", "helpful")], filters=[FormatFilter])
    with pytest.raises(TypeError, match="list of filters"):
        synthesize(teacher, [Query("x", "helpful")], filters=FormatFilter())
    with pytest.raises(TypeError, match="ReasoningFormat"):
        synthesize(teacher, [Query("x", "helpful")], fmt="<think>")
    import numpy as np

    assert (
        synthesize(teacher, [Query("x", "helpful")], k=np.int64(2), progress=False).n_candidates
        == 2
    )


def test_another_teacher_or_filter_never_gets_the_first_runs_rows(world, tmp_path):
    """Teacher B on teacher A's store: refused before any call, naming the teacher; with
    keep_both B is asked and its own reasoning comes back. A filter's parameter counts too."""
    from icml25.llm import KeywordRefusalDetector
    from icml25.llm.store import SettingsMismatch

    qs = [Query("plan a trip", "helpful", "1"), Query("bake bread", "helpful", "2")]
    asked = []

    def teacher(tag):
        def reply(messages, **kw):
            asked.append(tag)
            return f"<think>{tag} reasoning</think>Sure, here it is."

        return reply

    store = tmp_path / "s.jsonl"
    rep_a = synthesize(
        CallableChat(teacher("A"), name="teacher-a"), qs, k=1, store=store, progress=False
    )
    assert {e.reasoning for e in rep_a.examples} == {"A reasoning"}
    asked.clear()
    with pytest.raises(
        SettingsMismatch, match=r"teacher.cache_identity: 'teacher-a' -> 'teacher-b'"
    ):
        synthesize(
            CallableChat(teacher("B"), name="teacher-b"), qs, k=1, store=store, progress=False
        )
    assert asked == []
    rep_b = synthesize(
        CallableChat(teacher("B"), name="teacher-b"),
        qs,
        k=1,
        store=store,
        progress=False,
        keep_both=True,
    )
    assert asked == ["B", "B"] and {e.reasoning for e in rep_b.examples} == {"B reasoning"}
    # the outcome filter's detector is part of what made a row
    other = [FormatFilter(), OutcomeFilter(KeywordRefusalDetector(prefixes=("never",)))]
    with pytest.raises(SettingsMismatch, match=r"filters"):
        synthesize(
            CallableChat(teacher("A"), name="teacher-a"),
            qs,
            k=1,
            store=store,
            filters=other,
            progress=False,
        )


def test_a_query_relabelled_or_reworded_under_its_id_is_asked_again(tmp_path):
    """Issue 48 (a new user's review): the row of query "1" as harmful is never returned for
    query "1" as helpful, nor for another text under the same id."""
    asked = []

    def teacher(messages, **kw):
        asked.append(messages[-1]["content"])
        return (
            "<think>\nintent: x harm: y self-reflection: z\n</think>\nI'm sorry, but I can't help."
        )

    store = tmp_path / "s.jsonl"
    chat = CallableChat(teacher, name="t")
    harmful = synthesize(
        chat, [Query("open a locked door", "harmful", "1")], k=1, store=store, progress=False
    )
    assert [e.query.kind for e in harmful.examples] == ["harmful"] and len(asked) == 1
    helpful = synthesize(
        chat, [Query("open a locked door", "helpful", "1")], k=1, store=store, progress=False
    )
    assert len(asked) == 2  # asked again: a refusal of a helpful query is rejected, not reused
    assert helpful.examples == [] and helpful.dropped == ["1"]
    reworded = synthesize(
        chat, [Query("open my own locked door", "helpful", "1")], k=1, store=store, progress=False
    )
    assert len(asked) == 3 and reworded.dropped == ["1"]
    again = synthesize(
        chat, [Query("open my own locked door", "helpful", "1")], k=1, store=store, progress=False
    )
    assert len(asked) == 3 and again.dropped == ["1"]  # the same query: read from the store
