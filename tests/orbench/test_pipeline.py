"""Algorithms 1-4 of OR-Bench end to end on the scripted agents of the toy request language:
seed generation, rewriting, ensemble moderation, hard/toxic selection and the resumable build."""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import pytest

from icml25.llm import CallableChat, JsonlStore, ScriptedChat
from icml25.orbench import (
    CATEGORIES,
    EnsembleModerator,
    LLMModerator,
    PromptTemplates,
    build_orbench,
)
from icml25.orbench.categories import normalize_category
from icml25.orbench.generation import generate_toxic_seeds, rewrite_seeds
from icml25.orbench.moderation import ModerationResult, vote_threshold
from icml25.orbench.records import ORBenchRecord
from icml25.orbench.selection import select_hard, select_toxic
from icml25.orbench.standin import scripted_generator, scripted_moderator, scripted_rewriter
from icml25.toy.overrefusal_lang import OverRefusalWorld


@pytest.fixture
def world():
    return OverRefusalWorld(CATEGORIES, 0)


def agents(world):
    return (
        scripted_generator(world),
        scripted_rewriter(world),
        [scripted_moderator(world, i) for i in range(3)],
    )


def forward(backend, messages, kw) -> str:
    """Pass a CallableChat's call on to another backend (without CallableChat's sample_index)."""
    kw = {k: v for k, v in kw.items() if k != "sample_index"}
    return backend.chat(messages, **kw)[0]


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


# -- categories and templates ---------------------------------------------------------------------


def test_categories_are_the_datasets_strings_and_normalise():
    assert CATEGORIES == (
        "hate",
        "self-harm",
        "sexual",
        "violence",
        "harassment",
        "harmful",
        "illegal",
        "unethical",
        "privacy",
        "deception",
    )
    assert normalize_category(" Self_Harm ") == "self-harm"
    assert normalize_category("SELF HARM") == "self-harm"
    with pytest.raises(ValueError, match="valid categories: hate, self-harm"):
        normalize_category("weapons")
    with pytest.raises(TypeError, match="got int"):
        normalize_category(3)


def test_templates_fill_slots_once_and_validate(tmp_path):
    t = PromptTemplates.default()
    judged = t.judge_message("what is {response}?", "R")
    assert 'QUESTION: "what is {response}?"' in judged and 'RESPONSE: "R"' in judged
    msg = t.moderation_message("x {prompt} y")
    assert "x {prompt} y" in msg and "11. none of the above" in msg and "1. hate:" in msg
    assert "20" in t.seed_message("hate") and '"hate"' in t.seed_message("hate")
    with pytest.raises(ValueError, match=r"lacks the slot\(s\) \{prompt\}"):
        PromptTemplates(rewrite="rewrite {n} things")
    (tmp_path / "rewrite.txt").write_text("Give {n} rewrites of: {prompt}", encoding="utf-8")
    loaded = PromptTemplates.from_files(tmp_path)
    assert loaded.rewrite_message("s", 5) == "Give 5 rewrites of: s"
    assert loaded.moderation == t.moderation  # missing files keep the default
    with pytest.raises(ValueError, match="holds none of"):
        PromptTemplates.from_files(tmp_path / "..")
    with pytest.raises(FileNotFoundError):
        PromptTemplates.from_files(tmp_path / "nope")


# -- Algorithm 1 ------------------------------------------------------------------------------------


def test_seed_generation_dedupes_and_resumes_without_repeating_calls(world, tmp_path):
    gen = scripted_generator(world)
    calls = []
    counting = CallableChat(
        lambda m, **kw: calls.append(kw["seed"]) or forward(gen, m, kw), name="counting"
    )
    store = tmp_path / "seed_calls.jsonl"
    seeds = generate_toxic_seeds(counting, "Self_Harm", 60, store=store, seed=5)
    assert len(seeds) == 60 and len({s.prompt for s in seeds}) == 60
    assert all(s.category == "self-harm" and world.is_toxic(s.prompt) for s in seeds)
    assert calls == list(range(5, 5 + len(calls)))  # seed + call index: no repeated request
    n = len(calls)
    again = generate_toxic_seeds(counting, "self-harm", 60, store=store, seed=5)
    assert len(calls) == n and [s.prompt for s in again] == [s.prompt for s in seeds]


def test_seed_generation_stops_after_empty_calls_and_counts_failures(tmp_path, caplog):
    refusing = ScriptedChat(lambda m, **kw: "I cannot help with that.")
    with caplog.at_level("WARNING"):
        assert generate_toxic_seeds(refusing, "hate", 40, max_empty_calls=3) == []
    assert len(refusing.calls) == 3 and "no parseable prompt" in caplog.text
    n = {"k": 0}

    def flaky(m, **kw):
        n["k"] += 1
        if n["k"] == 2:
            raise ConnectionError("boom")
        return "[[a b c]]\n[[d e f]]"

    store = JsonlStore(tmp_path / "s.jsonl", ("category", "call_idx"))
    out = generate_toxic_seeds(CallableChat(flaky), "hate", 2, per_call=2, store=store)
    assert [s.prompt for s in out] == ["a b c", "d e f"]
    with pytest.raises(ValueError, match="n_seeds must be an integer >= 1"):
        generate_toxic_seeds(refusing, "hate", 0)
    with pytest.raises(ValueError, match="unknown category"):
        generate_toxic_seeds(refusing, "guns", 5)


# -- Algorithm 2 ------------------------------------------------------------------------------------


def test_rewrites_keep_the_topic_dedupe_globally_and_record_failures(world, tmp_path):
    seeds = generate_toxic_seeds(scripted_generator(world), "hate", 30)
    rw = scripted_rewriter(world)
    bad = seeds[3].prompt
    down = {"bad": True}  # the one seed's calls time out until the rerun

    def sometimes(m, **kw):
        if down["bad"] and bad in m[-1]["content"]:
            raise TimeoutError("rewriter timed out")
        return forward(rw, m, kw)

    store = tmp_path / "rw.jsonl"
    flaky = CallableChat(sometimes, name="rw")
    cands = rewrite_seeds(flaky, seeds, store=store, concurrency=4)
    assert len({c.prompt for c in cands}) == len(cands)
    topic = {s.prompt: s.prompt.split()[1] for s in seeds}
    assert all(c.prompt.split()[1] == topic[c.toxic_seed] for c in cands)
    assert all(c.toxic_seed != bad for c in cands)
    errors = [r for r in rows(store) if "error" in r]
    assert len(errors) == 1 and errors[0]["error"]["type"] == "TimeoutError"
    # a rerun retries only the failed seed when asked
    down["bad"] = False
    cands2 = rewrite_seeds(flaky, seeds, store=store, retry_errors=True)
    assert any(c.toxic_seed == bad for c in cands2) and len(cands2) >= len(cands)
    with pytest.raises(ValueError, match="seeds must not be empty"):
        rewrite_seeds(rw, [])


def test_rewrite_concurrency_gives_identical_candidates(world, tmp_path):
    seeds = generate_toxic_seeds(scripted_generator(world), "privacy", 25)
    a = rewrite_seeds(scripted_rewriter(world), seeds, concurrency=1, store=tmp_path / "a.jsonl")
    b = rewrite_seeds(scripted_rewriter(world), seeds, concurrency=8, store=tmp_path / "b.jsonl")
    assert a == b
    assert sorted(rows(tmp_path / "a.jsonl"), key=lambda r: r["id"]) == sorted(
        rows(tmp_path / "b.jsonl"), key=lambda r: r["id"]
    )


# -- Algorithm 3 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("votes", list(product([False, True], repeat=3)))
def test_voting_rules_on_all_eight_patterns(votes):
    replies = ["[[11. none of the above]]" if not v else "[[7. illegal]]" for v in votes]
    mods = [ScriptedChat([r], name=f"m{i}") for i, r in enumerate(replies)]
    res = EnsembleModerator(mods).moderate_one("some prompt")
    assert res.votes == list(votes) and res.is_toxic == (sum(votes) >= 2)
    assert res.toxic_under("unanimous") == any(votes)
    assert res.toxic_under(3) == all(votes) and res.toxic_under(1) == any(votes)
    assert res.categories == ["illegal" if v else "none" for v in votes]


def test_vote_threshold_rules_and_errors():
    assert [vote_threshold("majority", m) for m in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert vote_threshold("unanimous", 3) == 1 and vote_threshold(2, 3) == 2
    for bad in ("most", 0, 4, True, 2.0):
        with pytest.raises(ValueError, match="majority"):
            vote_threshold(bad, 3)
    with pytest.raises(ValueError, match="names must differ"):
        EnsembleModerator([ScriptedChat([]), ScriptedChat([])])
    with pytest.raises(TypeError, match="chat backend"):
        LLMModerator("gpt-4")


def test_a_failed_moderation_is_never_counted_safe(tmp_path):
    def mod(name, fail_on):
        def fn(m, **kw):
            if fail_on in m[-1]["content"]:
                raise ConnectionError("moderator down")
            return "fine [[11. none of the above]]"

        return CallableChat(fn, name=name)

    ens = EnsembleModerator([mod("a", "beta"), mod("b", "zzz"), mod("c", "zzz")])
    store = tmp_path / "mod.jsonl"
    out = ens.moderate(["alpha one", "beta two", "gamma three"], store)
    assert [r.prompt for r in out] == ["alpha one", "gamma three"]
    assert ens.last_report.n_failed == 1
    assert [r["error"]["type"] for r in rows(store) if "error" in r] == ["ConnectionError"]
    # stored votes are re-decided under another ensemble's rule without new calls
    strict = EnsembleModerator([ScriptedChat([], name=n) for n in "abc"], "unanimous")
    again = strict.moderate(["alpha one", "gamma three"], JsonlStore(store, "id"))
    assert [r.is_toxic for r in again] == [False, False]


def test_moderation_concurrency_gives_identical_stores(world, tmp_path):
    prompts = [c for c in world.all_requests()[::97]]
    mods = [scripted_moderator(world, i) for i in range(3)]
    a = EnsembleModerator(mods).moderate(prompts, tmp_path / "a.jsonl", concurrency=1)
    b = EnsembleModerator(mods).moderate(prompts, tmp_path / "b.jsonl", concurrency=8)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(rows(tmp_path / "a.jsonl"), key=key) == sorted(
        rows(tmp_path / "b.jsonl"), key=key
    )


# -- Algorithm 4 ------------------------------------------------------------------------------------


def _pool():
    return [ORBenchRecord(f"p{i} x y", CATEGORIES[i % 2], "80k") for i in range(8)]


def test_select_hard_counts_panel_refusals_and_remoderates():
    pool = _pool()
    panel = {
        "a": [True] * 6 + [False] * 2,
        "b": [True, True, True, False, False, False, True, False],
        "c": {pool[0].id: True, pool[7].id: True},
    }
    with pytest.warns(UserWarning, match="no stricter re-moderation"):
        sel = select_hard(pool, panel, k_min=2)
    assert [r.prompt for r in sel] == ["p0 x y", "p1 x y", "p2 x y"]
    assert sel.rejections[pool[0].id] == 3 and sel.rejections[pool[7].id] == 1
    assert all(r.subset == "hard-1k" for r in sel)
    # stored moderation: p1 had one toxic vote -> removed under the unanimous rule
    mods = [
        ModerationResult(r.id, r.prompt, [i == 1, False, False], ["none"] * 3, [""] * 3, False)
        for i, r in enumerate(pool)
    ]
    strict = select_hard(pool, panel, k_min=2, remoderate=mods)
    assert [r.prompt for r in strict] == ["p0 x y", "p2 x y"]
    assert strict.removed_by_remoderation == [pool[1].id] and strict.metadata()["k_min"] == 2
    capped = select_hard(pool, panel, k_min=1, per_category=1, seed=3, remoderate=False)
    assert sorted(r.category for r in capped) == sorted(CATEGORIES[:2])
    with pytest.raises(ValueError, match=r"k_min must be an integer in \[1, 3\]"):
        select_hard(pool, panel, k_min=4)
    with pytest.raises(ValueError, match="8 prompts"):
        select_hard(pool, {"a": [True]}, k_min=1)
    with pytest.raises(ValueError, match="none of its 1 refusal ids is a pool prompt"):
        select_hard(pool, {"a": {"not-an-id": True}}, k_min=1, remoderate=False)
    with pytest.raises(ValueError, match="no stored moderation"):
        select_hard(pool, panel, k_min=2, remoderate=mods[2:])


def test_select_toxic_is_stratified_and_needs_categories():
    res = [
        ModerationResult(
            f"i{j}", f"q{j}", [True, True, j % 3 == 0], ["x"] * 3, [""] * 3, True, CATEGORIES[j % 3]
        )
        for j in range(30)
    ]
    out = select_toxic(res, per_category=4, seed=0)
    assert len(out) == 12 and {r.category for r in out} == set(CATEGORIES[:3])
    assert all(r.subset == "toxic" for r in out)
    unanimous = select_toxic(res, per_category=4, rule=3)  # only j % 3 == 0 has 3 votes
    assert len(unanimous) == 4 and {r.category for r in unanimous} == {CATEGORIES[0]}
    res[0].category = None
    with pytest.raises(ValueError, match="no category"):
        select_toxic(res)


# -- the whole build ----------------------------------------------------------------------------------


def test_build_end_to_end_on_scripted_agents(world, tmp_path):
    gen, rw, mods = agents(world)
    panel = {
        "strict": CallableChat(
            lambda m, **kw: (
                "sorry cannot"
                if world.parse(m[-1]["content"])
                and world.parse(m[-1]["content"])[0] in world.harmful_verbs
                else "sure thing"
            ),
            name="strict",
        )
    }
    rep = build_orbench(
        gen,
        rw,
        mods,
        out_dir=tmp_path,
        categories=["hate", "privacy"],
        n_seeds=10,
        panel=panel,
        k_min=1,
        toxic_per_category=5,
        progress=False,
    )
    assert rep.n_seeds == 20 and rep.n_failed == 0
    seeds, cands = rows(tmp_path / "seeds.jsonl"), rows(tmp_path / "candidates.jsonl")
    pool, hard = rows(tmp_path / "or-bench-80k.jsonl"), rows(tmp_path / "or-bench-hard-1k.jsonl")
    toxic = rows(tmp_path / "or-bench-toxic.jsonl")
    assert len(seeds) == 20 and {s["category"] for s in seeds} == {"hate", "privacy"}
    assert len(cands) == rep.n_candidates and 20 * 3 < len(cands) <= 20 * 5
    assert len(pool) + rep.n_flagged == len(cands) == len(rows(tmp_path / "moderation.jsonl"))
    assert rep.n_hard == len(hard) and rep.n_toxic == len(toxic) == 10
    # the ensemble cleans the candidates; the hard set holds only panel-refused prompts
    before = sum(world.is_toxic(c["prompt"]) for c in cands) / len(cands)
    after = sum(world.is_toxic(p["prompt"]) for p in pool) / len(pool)
    assert before > 0.1 and after < before / 2
    assert all(world.parse(h["prompt"])[0] in world.harmful_verbs for h in hard)
    assert all(world.is_toxic(t["prompt"]) for t in toxic)
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["hard_selection"]["k_min"] == 1 and meta["hard_selection"]["panel"] == ["strict"]
    assert rows(tmp_path / "failed.jsonl") == []


def test_killed_build_resumes_without_repeating_calls_and_ends_identical(world, tmp_path):
    gen, rw, mods = agents(world)

    class Killed(BaseException):  # like a SIGKILL: nothing catches it
        pass

    def dying(backends, limit):
        # one call counter per build: a worker of the killed build that was already running
        # its next item when the kill arrived must not count as a call of the resumed build
        calls = {"n": 0}

        class Dying:  # an object, not a closure over `limit`: the same backend in every build
            def __init__(self, backend):
                self.backend = backend

            def __call__(self, m, **kw):
                calls["n"] += 1
                if limit is not None and calls["n"] > limit:
                    raise Killed
                return forward(self.backend, m, kw)

        return [CallableChat(Dying(b), name=b.name) for b in backends], calls

    kw = dict(categories=["hate"], n_seeds=15, toxic_per_category=4, progress=False, concurrency=1)
    ref = tmp_path / "ref"
    (g0, r0, *m0), _ = dying([gen, rw, *mods], None)
    build_orbench(g0, r0, m0, out_dir=ref, **kw)
    out = tmp_path / "run"
    (g, r, *m), _ = dying([gen, rw, *mods], 40)
    with pytest.raises(Killed):
        build_orbench(g, r, m, out_dir=out, **kw)
    (g, r, *m), resumed = dying([gen, rw, *mods], None)
    build_orbench(g, r, m, out_dir=out, **kw)
    (g, r, *m), total = dying([gen, rw, *mods], None)
    build_orbench(g, r, m, out_dir=tmp_path / "fresh", **kw)
    assert resumed["n"] == total["n"] - 40  # every call made before the kill was kept
    for name in ("seeds.jsonl", "candidates.jsonl", "or-bench-80k.jsonl", "or-bench-toxic.jsonl"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    assert sorted(rows(out / "moderation.jsonl"), key=key) == sorted(
        rows(ref / "moderation.jsonl"), key=key
    )


def test_a_rerun_with_other_settings_in_the_same_folder_is_refused(world, tmp_path):
    gen, rw, mods = agents(world)
    kw = dict(categories="hate", n_seeds=10, toxic_per_category=3, progress=False)
    build_orbench(gen, rw, mods, out_dir=tmp_path, **kw)
    others = [scripted_moderator(world, i, name=f"X{i}") for i in range(3)]
    with pytest.raises(ValueError, match="holds a build with other settings.*moderators"):
        build_orbench(gen, rw, others, out_dir=tmp_path, **kw)
    with pytest.raises(ValueError, match="n_rewrites: 5 -> 3"):
        build_orbench(gen, rw, mods, out_dir=tmp_path, n_rewrites=3, **kw)
    refusing = CallableChat(lambda m, **k: "I will not write that.", name="refusing")
    with pytest.raises(ValueError, match="produced no parseable seed"):
        build_orbench(refusing, rw, mods, out_dir=tmp_path / "b", **kw)


def test_rewrites_are_cut_to_n_rewrites(world):
    seeds = generate_toxic_seeds(scripted_generator(world), "hate", 10)
    five = CallableChat(
        lambda m, **kw: "\n".join(f"[[{i}. {m[-1]['content'][-20:]} v{i}]]" for i in range(1, 6)),
        name="five",
    )
    per_seed: dict[str, int] = {}
    for c in rewrite_seeds(five, seeds, n_rewrites=2):
        per_seed[c.toxic_seed] = per_seed.get(c.toxic_seed, 0) + 1
    assert set(per_seed.values()) == {2} and len(per_seed) == len(seeds)


def test_a_rerun_with_the_same_names_but_other_sampling_is_refused_per_stage(world, tmp_path):
    """Issue 48: the build's folder check compares names only; each stage's store is stamped with
    the backend's identity and sampling, so a moderator of the same name at another temperature
    (or a generator called at another temperature) is refused, naming the field, with no call."""
    from icml25.llm.store import SettingsMismatch

    gen, rw, mods = agents(world)
    kw = dict(categories="hate", n_seeds=10, toxic_per_category=3, progress=False)
    calls = {"n": 0}

    class Counted:  # an object (identified by the backend's name), not a new closure per run
        def __init__(self, backend):
            self.backend = backend

        def __call__(self, m, **k):
            calls["n"] += 1
            return forward(self.backend, m, k)

    def counted(backend):
        return CallableChat(Counted(backend), name=backend.name)

    build_orbench(counted(gen), counted(rw), [counted(m) for m in mods], out_dir=tmp_path, **kw)
    calls["n"] = 0

    warm = [LLMModerator(counted(m), temperature=0.7) for m in mods]
    with pytest.raises(
        SettingsMismatch, match=r"moderators\.0\.temperature: 0\.0 -> 0\.7.*another out_dir"
    ):
        build_orbench(counted(gen), counted(rw), warm, out_dir=tmp_path, **kw)
    assert calls["n"] == 0
    # the stage functions stamp a store given as a path the same way
    store = tmp_path / "alone.jsonl"
    generate_toxic_seeds(gen, "hate", 5, store=store)
    with pytest.raises(SettingsMismatch, match=r"temperature: 1\.0 -> 0\.5"):
        generate_toxic_seeds(gen, "hate", 5, store=store, temperature=0.5)
    # the same settings resume from the store without a call
    build_orbench(
        *[counted(b) for b in (gen, rw)], [counted(m) for m in mods], out_dir=tmp_path, **kw
    )
    assert calls["n"] == 0
