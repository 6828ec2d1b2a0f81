"""The DPS call sequence with a recording backend, the informativeness branch, helpers, prompts,
baselines, and an OpenAI-compatible server receiving image parts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from icml25.dps import (
    BackendError,
    DPSDefense,
    DPSPrompts,
    LLMHelper,
    RuleHelper,
    crop_vote,
    ecso,
    smooth_vlm,
    vanilla,
)
from icml25.dps.images import last_image
from icml25.llm import CallableChat, ScriptedChat

IMG = np.linspace(0, 1, 32 * 32).reshape(32, 32)
LONG = " ".join(["word"] * 30)


class Recorder:
    """Replies by role (from the system prompt) and records (role, has_image, turn text)."""

    def __init__(
        self, weak_answer="A cat.", weak_description="A small animal.", strong="It is a cat."
    ):
        self.calls = []
        self.weak_answer, self.weak_description, self.strong = weak_answer, weak_description, strong
        self.backend = CallableChat(self)

    def __call__(self, messages, **kw):
        system = messages[0]["content"]
        last = messages[-1]["content"]
        text = (
            last if isinstance(last, str) else next(p["text"] for p in last if p["type"] == "text")
        )
        has_image = isinstance(last, list)
        p = DPSPrompts()
        role = (
            "strong"
            if system == p.strong_system
            else "weak"
            if system == p.weak_system
            else "plain"
        )
        self.calls.append((role, has_image, len(messages), text))
        if role == "weak":
            return self.weak_description if text == p.describe else self.weak_answer
        if role == "plain":
            return "{'obj1': [0, 0, 8, 8]}"
        return self.strong


def test_call_graph_single_agent():
    rec = Recorder()
    res = DPSDefense(rec.backend, crop="center").respond(IMG, "What animal is this?")
    roles = [(r, img) for r, img, _, _ in rec.calls]
    assert roles == [
        ("strong", True),
        ("weak", True),
        ("weak", True),
        ("strong", False),
        ("strong", True),
    ]
    # the strong agent keeps one conversation (history grows), the weak agent is fresh
    assert [n for r, _, n, _ in rec.calls if r == "strong"] == [2, 4, 6]
    assert [n for r, _, n, _ in rec.calls if r == "weak"] == [2, 4]
    assert [t["template"] for t in res.trace] == [
        "question",
        "question",
        "describe",
        "check_informative",
        "supervise_single",
        "summarize_plain",
        "final",
    ]
    assert (
        res.n_calls == {"lvlm": 5, "helper": 2}
        and res.observations == ["A cat."]
        and res.informative == [True]
    )
    assert "What animal is this?" in rec.calls[-1][3] and res.crops[0].size == (16, 16)


def test_call_graph_auto_mode_and_long_texts():
    rec = Recorder(weak_answer=LONG, weak_description=LONG)
    with pytest.warns(UserWarning, match="3 agents"):
        d = DPSDefense(rec.backend, crop="auto", n_agents=2)
    res = d.respond(IMG, "What animal is this?")
    roles = [r for r, *_ in rec.calls]
    assert roles == ["strong", "plain"] + ["weak"] * 6 + ["strong", "strong"]
    weak_sizes = [n for r, _, n, _ in rec.calls if r == "weak"]
    assert weak_sizes == [2, 4] * 3  # three fresh weak conversations
    templates = [t["template"] for t in res.trace if t["role"] == "helper"]
    assert templates == ["summarize_answer", "summarize_plain", "check_informative"] * 3 + [
        "summarize_plain"
    ]
    assert res.n_calls == {"lvlm": 10, "helper": 10}
    assert all(len(o.split()) == 20 for o in res.observations)
    assert np.array(res.crops[0])[:8, :8].max() == 0  # the model's text box is blacked out
    supervise = rec.calls[-2][3]
    assert "agent 1: " in supervise and ", agent 2: " in supervise and ", agent 3: " in supervise


def test_uninformative_weak_answer_is_replaced_by_the_description():
    rec = Recorder(weak_answer="I cannot determine what this is.", weak_description=LONG)
    res = DPSDefense(rec.backend).respond(IMG, "What is it?")
    assert res.informative == [False] and res.observations == [" ".join(["word"] * 20)]


def test_helpers():
    h = RuleHelper()
    assert h.summarize(" ".join(str(i) for i in range(30))) == " ".join(str(i) for i in range(20))
    assert not h.is_informative("Lack of specific information here") and not h.is_informative("  ")
    assert h.is_informative("A dog on a sofa.")
    backend = ScriptedChat(["short summary", "YES", "no."])
    lh = LLMHelper(backend)
    assert lh.summarize("some text", 20, style="answer") == "short summary"
    assert lh.is_informative("x") and not lh.is_informative("y")
    sent = [c["messages"][-1]["content"] for c in backend.calls]
    assert (
        "20 words" in sent[0]
        and "some text" in sent[0]
        and "{" not in sent[0]
        and "{" not in sent[1]
    )
    assert all(len(c["messages"]) == 2 for c in backend.calls)  # a fresh context per call


def test_prompts_json_round_trip_and_slot_checks(tmp_path):
    p = DPSPrompts()
    p.to_json(tmp_path / "p.json")
    assert DPSPrompts.from_json(tmp_path / "p.json") == p
    (tmp_path / "bad.json").write_text(json.dumps({"final": "Answer {question} using {nothing}"}))
    with pytest.raises(ValueError, match="unknown slot"):
        DPSPrompts.from_json(tmp_path / "bad.json")
    (tmp_path / "miss.json").write_text(json.dumps({"final": "Answer {question}"}))
    with pytest.raises(ValueError, match="lacks the slot"):
        DPSPrompts.from_json(tmp_path / "miss.json")
    (tmp_path / "unk.json").write_text(json.dumps({"finale": "x"}))
    with pytest.raises(ValueError, match="unknown prompt"):
        DPSPrompts.from_json(tmp_path / "unk.json")


def test_failures_raise_with_the_trace_or_follow_the_official_refusal():
    def fn(messages, **kw):
        if messages[0]["content"] == DPSPrompts().weak_system:
            raise ConnectionError("server down")
        return "It is a cat."

    with pytest.raises(BackendError, match="server down") as info:
        DPSDefense(CallableChat(fn)).respond(IMG, "What?")
    assert [t["role"] for t in info.value.trace] == [
        "strong",
        "weak",
    ] and "error" in info.value.trace[-1]
    res = DPSDefense(CallableChat(fn), on_error="refusal").respond(IMG, "What?")
    assert res.weak_answers[0].startswith("I'm sorry") and res.final == "It is a cat."
    out = DPSDefense(CallableChat(fn)).respond_batch([(IMG, "a"), (IMG, "b")], errors="return")
    assert all(isinstance(o, BackendError) for o in out)


def test_helper_failures_raise_or_follow_the_official_refusal():
    from icml25.dps.defense import REFUSAL

    long = " ".join(["stroke"] * 30) + " so it is a seven."
    lvlm = CallableChat(lambda m, **kw: long)

    def down(m, **kw):
        raise ConnectionError("helper down")

    with pytest.raises(BackendError, match="helper call .*helper down") as info:
        DPSDefense(lvlm, helper=LLMHelper(CallableChat(down))).respond(IMG, "What?")
    assert (
        info.value.trace[-1]["role"] == "helper" and "helper down" in info.value.trace[-1]["error"]
    )
    res = DPSDefense(lvlm, helper=LLMHelper(CallableChat(down)), on_error="refusal").respond(
        IMG, "What?"
    )
    helper_steps = [t for t in res.trace if t["role"] == "helper"]
    assert helper_steps and all("helper down" in t["error"] for t in helper_steps)
    assert res.final == long  # the run completes; the supervision carried the refusal text
    # the failed yes/no check reads "not informative", so the observation is the (refused) summary
    assert (
        res.informative == [False]
        and res.observations == [REFUSAL]
        and res.analysis_summary == REFUSAL
    )


def test_bad_input():
    b = CallableChat(lambda m, **kw: "x")
    with pytest.raises(ValueError, match="crop"):
        DPSDefense(b, crop="zoom")
    with pytest.raises(ValueError, match="n_agents"):
        DPSDefense(b, n_agents=0)
    with pytest.raises(ValueError, match="question"):
        DPSDefense(b).respond(IMG, " ")
    with pytest.raises(TypeError, match="chat backend"):
        DPSDefense(lambda m: "x")


def test_random_mode_is_seeded_and_batch_keeps_order():
    rec = Recorder()
    d = DPSDefense(rec.backend, crop="random", n_agents=3, seed=5)
    a = [np.array(c) for c in d.respond(IMG, "q").crops]
    b = [np.array(c) for c in d.respond(IMG, "q").crops]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    out = d.respond_batch([(IMG, f"q{i}") for i in range(4)], workers=2)
    assert [o.trace[0]["role"] for o in out] == ["strong"] * 4 and len(out) == 4


def test_baselines():
    answers = iter(["7", "7.", "3", "3", "1"])
    b = CallableChat(lambda m, **kw: next(answers))
    assert (
        crop_vote(b, IMG, "Digit?", n_random=3) == "7"
    )  # 7 and 7. tie with 3 3 -> full image wins
    seen = []

    def fn(messages, **kw):
        seen.append(np.array(last_image(messages)))
        return "2"

    assert smooth_vlm(CallableChat(fn), (IMG * 0 + 1.0), "Digit?", n_copies=4, frac=0.25) == "2"
    assert all((s == 0).mean() == pytest.approx(0.25, abs=0.01) for s in seen)
    assert vanilla(CallableChat(lambda m, **kw: "ok"), IMG, "q") == "ok"
    lvlm = CallableChat(
        lambda m, **kw: "caption" if "Describe" in str(m[-1]["content"]) else "bad answer"
    )
    judge = CallableChat(lambda m, **kw: "Yes, harmful")
    assert (
        ecso(lvlm, IMG, "q", judge=judge) == "bad answer"
    )  # answered again from the caption (same stub)
    assert ecso(lvlm, IMG, "q", judge=CallableChat(lambda m, **kw: "no")) == "bad answer"


def test_openai_compatible_server_receives_image_parts():
    from icml25.llm import ChatServer, OpenAIChat

    seen = []

    def check(messages, **kw):
        user = [m for m in messages if m["role"] == "user"]
        for m in user:
            if isinstance(m["content"], list):
                for part in m["content"]:
                    assert part["type"] in ("text", "image_url")
                    if part["type"] == "image_url":
                        assert part["image_url"]["url"].startswith("data:image/png;base64,")
                        seen.append(last_image([m]).size)
        return "It is a cat."

    with ChatServer(CallableChat(check)) as server:
        res = DPSDefense(OpenAIChat(server.url, "m")).respond(IMG, "What animal?")
    assert res.final == "It is a cat." and (32, 32) in seen and (16, 16) in seen


def test_more_bad_input():
    b = CallableChat(lambda m, **kw: "x")
    with pytest.raises(ValueError, match="temperature"):
        DPSDefense(b, temperature=-1, on_error="refusal")
    with pytest.raises(ValueError, match="seed"):
        DPSDefense(b, seed=1.5)
    with pytest.raises(TypeError, match="DPSPrompts"):
        DPSDefense(b, prompts={"final": "x"})
    with pytest.raises(ValueError, match="workers"):
        DPSDefense(b).respond_batch([(IMG, "q")], workers=0)
    with pytest.raises(ValueError, match="image is None"):
        vanilla(b, None, "q")
    with pytest.raises(TypeError, match="judge"):
        ecso(b, IMG, "q", judge=RuleHelper())
    with pytest.raises(TypeError, match="list of regex"):
        RuleHelper(uninformative_patterns="cannot")
    with pytest.raises(ValueError, match="n_random"):
        crop_vote(b, IMG, "q", n_random=-1)


def test_reproduction_full_mode_path_small(tmp_path):
    """The full mode's extra attacks, defences, sweeps and figures on a tiny size (the real full
    run takes ~25 minutes)."""
    import numpy as np

    from icml25.dps import experiment, figures, repro

    sz = {
        "target_steps": 20,
        "surrogate_steps": 20,
        "n_surrogates": 2,
        "patch_steps": 3,
        "n_test": 12,
    }
    att = experiment.train_attacker(sz, tmp_path, True)
    assert len(att["surrogates"]) == 2 and att["pgd_transfer"].shape == att["data"]["test"][0].shape
    per_seed = [experiment.measure(s, sz, tmp_path, att, True) for s in (0, 1)]
    keys = [
        f"{n}_{c}"
        for n in ("van", "dps", "vote", "dps_random3", "smooth")
        for c in ("clean", "adv", "pgd_transfer", "pgd_white")
    ]
    keys += [f"{n}_{c}" for n in experiment.sweep_names() for c in ("clean", "adv")]
    for p in per_seed:
        for k in keys:
            assert len(p[k]) == 12 and set(p[k]) <= {0.0, 1.0}, k
        assert all(0 < v <= 1 for v in p["maxp_pgd_white"])
    assert "dps_bonus_lam1_pgd_transfer" not in per_seed[0]  # sweeps: clean and patched only
    names = [m.name for m in repro.metrics(per_seed, True)]
    assert (
        "SmoothVLM accuracy under pgd_white" in names and "dps_bonus_lam4 clean accuracy" in names
    )
    assert all(np.isfinite(v) for m in repro.metrics(per_seed, True) for v in m.values)
    for fig in (
        figures.plot_bars(per_seed, True),
        figures.plot_confidence(per_seed),
        figures.plot_lam(per_seed),
    ):
        assert fig.axes
