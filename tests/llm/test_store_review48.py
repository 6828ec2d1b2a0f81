"""A new user's review of the stores (issue 48): functions are fingerprinted by their code,
defaults and closure, not their name; another pipeline's file is refused, not mixed into; a
missing settings file is named, not diffed; bad lines are warned about and a torn last line is
cut off before the next append; an empty list against a full one reads as one difference."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import pytest

from icml25.llm import CachedChat, CallableChat, CallableReward
from icml25.llm.store import (
    JsonlStore,
    SettingsMismatch,
    describe,
    settings_differences,
    settings_fingerprint,
)

# -- A: a function is described by what it computes ------------------------------------------


def _make(tag):
    def judge(q, r):
        return f"{tag}:{q}"

    return judge


def test_describe_tells_closures_and_edited_functions_apart():
    a, b, a2 = _make("A"), _make("B"), _make("A")
    assert describe(a) != describe(b)  # same code and name, other closure value
    assert describe(a) == describe(a2)  # same code, same closure: same description
    assert "'A'" in repr(describe(a)) and "'B'" in repr(describe(b))  # the diff can name it

    def f(x):
        return x + 1

    def g(x):  # another body
        return x + 2

    g.__qualname__ = f.__qualname__
    assert describe(f) != describe(g)
    first, second = (lambda q, r: 1.0), (lambda q, r: -5.0)
    assert describe(first) != describe(second)

    def with_default(x, k=3):
        return x * k

    d1 = describe(with_default)
    with_default.__defaults__ = (4,)
    assert describe(with_default) != d1

    # a method: its code and its object's state
    class Judge:
        def __init__(self, threshold):
            self.threshold = threshold

        def __call__(self, q, r):
            return len(r) > self.threshold

        def score(self, q, r):
            return len(r) > self.threshold

    assert describe(Judge(1).score) != describe(Judge(2).score)
    assert describe(Judge(1).score) == describe(Judge(1).score)
    json.dumps(describe(Judge(1).score))


def test_describe_survives_odd_closures():
    import threading

    lock = threading.Lock()
    import os

    def uses_odd(x):
        with lock:
            return os.sep + x

    def rec(n):  # refers to itself through its closure
        return 0 if n == 0 else rec(n - 1)

    for fn in (uses_odd, rec):
        d = describe(fn)
        json.dumps(d)
        assert "0x" not in json.dumps(d)  # no memory address
    assert describe(uses_odd)["closure"]["lock"]["class"].endswith("lock")


_SCRIPT = textwrap.dedent(
    """
    import json
    from icml25.llm.store import describe
    from icml25.llm import CallableChat

    def make(tag):
        words = frozenset({"alpha", "beta", "gamma", tag})
        def judge(q, r, k=2):
            inner = lambda s: [c for c in s if c in words]
            return len(inner(r)) > k and {"x", "y"}
        return judge

    print(json.dumps([describe(make("A")), CallableChat(make("A")).cache_identity()],
                     sort_keys=True))
    """
)


def test_a_functions_description_is_the_same_in_two_processes(tmp_path):
    script = tmp_path / "fp.py"
    script.write_text(_SCRIPT)
    outs = [
        subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            check=True,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert outs[0] == outs[1] and "code" in outs[0]
    assert "0x" not in outs[0]


def test_callable_chat_and_reward_identity_follow_the_function(tmp_path):
    one = CallableChat(lambda m, **kw: "one")
    two = CallableChat(lambda m, **kw: "two")
    assert one.cache_identity() != two.cache_identity()
    assert describe(one) != describe(two)
    assert CallableChat(_make("A")).cache_identity() == CallableChat(_make("A")).cache_identity()
    assert CallableChat(_make("A")).cache_identity() != CallableChat(_make("B")).cache_identity()
    # the cache never serves one function's answers to another
    msgs = [{"role": "user", "content": "hi"}]
    with CachedChat(one, tmp_path / "c.sqlite") as c:
        assert c.chat(msgs, temperature=0.0) == ["one"]
    with CachedChat(two, tmp_path / "c.sqlite") as c:
        assert c.chat(msgs, temperature=0.0) == ["two"]
    # a function's own calls (a call log in its closure) do not change its identity
    log = []

    def logging(m, **kw):
        log.append(1)
        return "x"

    chat = CallableChat(logging)
    before = chat.cache_identity()
    chat.chat(msgs, temperature=0.0)
    assert log and chat.cache_identity() == before

    # a callable object without identity(): identified by the name (its state is a counter)
    class Probe:
        def __init__(self):
            self.n = 0

        def __call__(self, m, **kw):
            self.n += 1
            return "x"

    probe = CallableChat(Probe(), name="probe")
    assert probe.cache_identity() == "probe"
    r1, r2 = CallableReward(lambda q, r: 1.0), CallableReward(lambda q, r: -5.0)
    assert r1.cache_identity() != r2.cache_identity() and describe(r1) != describe(r2)
    assert r1.cache_identity().startswith("callable")


def test_tpo_batch_rerun_with_another_reward_lambda_is_refused(tmp_path):
    from icml25.tpo import PromptSet, TPOConfig, tpo_batch

    P = PromptSet.default()

    def policy(messages, *, n=1, sample_index=0, **kw):
        role = P.detect_role(list(messages))
        if role == "generate":
            return f"draft for {messages[-1]['content']} #{sample_index}"
        if role == "loss":
            return "the chosen one is longer"
        if role == "gradient":
            return "make it longer"
        chosen = P.parse_update(list(messages))["chosen"]
        return f"{P.start_tag}{chosen} and more{P.end_tag}"

    out = tmp_path / "r.jsonl"
    cfg = TPOConfig(width=2, depth=1)
    tpo_batch(
        ["q"], CallableChat(policy), CallableReward(lambda q, r: float(len(r))), cfg, out_path=out
    )
    with pytest.raises(SettingsMismatch, match=r"reward\.fn\.code"):
        tpo_batch(["q"], CallableChat(policy), CallableReward(lambda q, r: -5.0), cfg, out_path=out)
    other_policy = CallableChat(lambda m, **kw: policy(m, **kw).replace("draft", "other"))
    with pytest.raises(SettingsMismatch, match=r"backend\.fn\."):
        tpo_batch(
            ["q"], other_policy, CallableReward(lambda q, r: float(len(r))), cfg, out_path=out
        )


# -- B: another pipeline's file ------------------------------------------------------------------


def test_a_file_of_another_pipeline_is_refused_not_appended_to(tmp_path):
    path = tmp_path / "records.jsonl"
    rows = [{"id": i, "prompt": "p", "response": "r"} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = path.read_text()
    with pytest.raises(
        ValueError, match=r"records\.jsonl.*3 rows.*\('content',\).*'prompt'.*another"
    ):
        JsonlStore(path, ("content",), settings={"a": 1})
    with pytest.raises(ValueError, match="Another pipeline"):
        JsonlStore(path, "content")
    assert path.read_text() == before  # untouched
    # a torn LAST line stays tolerated (a crash mid-write)
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"id": 1, "x": 2}\n{"id": 2, "x"')
    st = JsonlStore(ok, "id")
    assert st.n_torn == 1 and st.is_done(1)


def test_rows_of_a_fingerprint_the_settings_file_does_not_know_are_foreign(tmp_path):
    path = tmp_path / "rows.jsonl"
    with JsonlStore(path, "id", settings={"a": 1}) as st:
        st.append({"id": 1, "v": 1})
    with open(path, "a") as f:
        f.write(json.dumps({"id": 2, "v": 1, "_settings": "0123456789abcdef"}) + "\n")
    with pytest.raises(ValueError, match=r"1 rows?.*0123456789abcdef.*settings\.json"):
        JsonlStore(path, "id", settings={"a": 1}, on_mismatch="separate")


# -- C: a missing or unreadable settings file ----------------------------------------------------


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_settings_file_is_named_not_diffed(tmp_path, damage):
    path = tmp_path / "rows.jsonl"
    with JsonlStore(path, "id", settings={"agents": 1, "model": "a"}) as st:
        st.append({"id": 1, "v": 1})
    beside = tmp_path / "rows.jsonl.settings.json"
    if damage == "missing":
        beside.unlink()
    else:
        beside.write_text('{"abc": ')
    with pytest.raises(SettingsMismatch) as err:
        JsonlStore(path, "id", settings={"agents": 2, "model": "a"})
    msg = str(err.value)
    assert "rows.jsonl.settings.json" in msg and ("missing" in msg or "unreadable" in msg)
    assert "cannot be named" in msg and "<absent>" not in msg
    if damage == "corrupt":
        assert "unreadable" in msg


# -- D: bad lines --------------------------------------------------------------------------------


def test_a_bad_line_in_the_middle_is_warned_about_once(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": 1}\nnot json\n{"id": 2}\n{"id": 3, "x\n{"id": 4}\n')
    with pytest.warns(UserWarning, match=r"rows\.jsonl.*lines? 2, 4.*skipped") as rec:
        st = JsonlStore(path, "id")
    assert len([w for w in rec if "skipped" in str(w.message)]) == 1
    assert [st.is_done(i) for i in (1, 2, 3, 4)] == [True, True, False, True]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean = tmp_path / "clean.jsonl"
        clean.write_text('{"id": 1}\n{"id": 2')  # only a torn last line: no warning
        JsonlStore(clean, "id")


def test_a_torn_last_line_is_cut_off_before_the_next_append(tmp_path):
    path = tmp_path / "rows.jsonl"
    with JsonlStore(path, "id", settings={"a": 1}) as st:
        st.append({"id": 1, "v": 1.5})
        st.append({"id": 2, "v": 2.5})
    complete = path.read_text()
    with open(path, "a") as f:
        f.write('{"id": 3, "v": 0.')  # a kill mid-write
    with JsonlStore(path, "id", settings={"a": 1}) as st:
        assert st.n_torn == 1
        st.append({"id": 3, "v": 3.5})
    text = path.read_text()
    assert text.startswith(complete)  # complete lines untouched
    rows = [json.loads(x) for x in text.splitlines()]  # strict JSON, every line
    assert [r["id"] for r in rows] == [1, 2, 3]
    # a complete last line that only lacks its newline is kept and fenced
    path.write_text(text + json.dumps({"id": 4, "v": 4.0, "_settings": rows[0]["_settings"]}))
    with JsonlStore(path, "id", settings={"a": 1}) as st:
        st.append({"id": 5, "v": 5.0})
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == [1, 2, 3, 4, 5]


# -- E: list differences ---------------------------------------------------------------------------


def test_an_empty_container_against_a_full_one_reads_as_one_difference():
    old = {"accept_prefixes": [], "opts": {}, "m": {"a": [1, 2], "b": {"c": 1}}, "k": 1}
    new = {"accept_prefixes": ["Certainly"], "opts": {"x": 1}, "m": {"a": [1, 3], "b": {"c": 2}}}
    assert settings_differences(old, new) == [
        "accept_prefixes: [] -> ['Certainly']",
        "k: 1 -> '<absent>'",
        "m.a.1: 2 -> 3",
        "m.b.c: 1 -> 2",
        "opts: {} -> {'x': 1}",
    ]
    assert settings_differences({"a": [1]}, {"a": [1, 2]}) == ["a.1: '<absent>' -> 2"]
    assert settings_differences(old, old) == []
    assert settings_fingerprint(old) != settings_fingerprint(new)
