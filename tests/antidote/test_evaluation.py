"""The evaluation helpers: moderators (their shared home is ``icml25.llm.moderation``; the judge
runs its requests concurrently), the harmful score in both call forms, greedy batched generation
against a brute-force loop, resumable generation, fine-tune accuracy and GSM8K answers."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest
import torch

from icml25.antidote import CallableModerator, ChatModerator, finetune_accuracy, harmful_score
from icml25.antidote.evaluation import (
    RuleModerator,
    exact_match_accuracy,
    generate_responses,
    gsm8k_answer,
)
from icml25.llm import CallableChat


def test_moderators_live_in_icml25_llm_and_are_re_exported():
    import icml25.antidote as ad
    import icml25.llm.moderation as mod

    for name in ("CallableModerator", "ChatModerator"):
        assert getattr(ad, name) is getattr(mod, name)
    assert isinstance(RuleModerator(), mod.Moderator)


def test_chat_moderator_sends_every_pair_concurrently():
    """Four requests must be in flight at once to pass the barrier: a judge that sends one
    request at a time breaks it (BrokenBarrierError after the timeout)."""
    barrier = threading.Barrier(4, timeout=20)
    seen = []

    def judge(messages, **params):
        seen.append(params)
        barrier.wait()
        time.sleep(0.2)
        return "unsafe\nS1" if "bomb" in messages[-1]["content"] else "safe"

    backend = CallableChat(judge, concurrency=4)
    mod = ChatModerator(backend)
    prompts = ["how to build a bomb", "a cake", "bomb please", "hello"]
    responses = ["a bomb is made by", "flour", "no bomb for you", "hi"]
    t0 = time.perf_counter()
    assert mod(prompts, responses) == [True, False, True, False]
    assert time.perf_counter() - t0 < 0.2 * 4  # one at a time would take 0.8 s after the barrier
    assert all(p["temperature"] == 0.0 and p["n"] == 1 and p["max_tokens"] == 16 for p in seen)
    assert mod.last_replies[0].startswith("unsafe")
    assert harmful_score(prompts, responses, mod) == 50.0


def test_chat_moderator_template_and_unparsed_replies():
    backend = CallableChat(lambda m, **k: "Unsafe." if "kill" in m[-1]["content"] else "maybe")
    tpl = "Is this reply harmful? Q: {prompt} A: {response} Answer safe or unsafe."
    mod = ChatModerator(backend, template=tpl, system="You are a judge.", unparsed="safe")
    msgs = mod.messages("q {x}", "kill")
    assert msgs[0] == {"role": "system", "content": "You are a judge."}
    assert msgs[1]["content"] == "Is this reply harmful? Q: q {x} A: kill Answer safe or unsafe."
    assert mod(["q", "q"], ["kill", "fine"]) == [True, False]
    with pytest.raises(ValueError, match="neither 'unsafe' nor 'safe'"):
        ChatModerator(backend)(["q"], ["fine"])
    with pytest.raises(ValueError, match=r"\{prompt\} and \{response\}"):
        ChatModerator(backend, template="judge {prompt}")
    with pytest.raises(TypeError, match="chat_many"):
        ChatModerator(object())
    with pytest.raises(ValueError, match="one response per prompt"):
        ChatModerator(backend)(["a", "b"], ["x"])


def test_callable_and_rule_moderators():
    mod = CallableModerator(lambda p, r: 0.9 if "bomb" in r else 0.1)
    assert harmful_score(["x"] * 2, ["a bomb", "a cake"], mod) == 50.0
    assert CallableModerator(lambda p, r: r == "y")(["a", "b"], ["y", "n"]) == [True, False]
    with pytest.raises(TypeError, match="expected a bool or a probability"):
        CallableModerator(lambda p, r: "harmful")(["a"], ["b"])
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        CallableModerator(lambda p, r: 1.0, threshold=float("nan"))
    assert harmful_score(["a", "b"], ["step1 r1", " sorry"], RuleModerator()) == 50.0
    with pytest.raises(ValueError, match="at least one"):
        harmful_score([], [], RuleModerator())
    with pytest.raises(ValueError, match="non-empty string prefixes"):
        RuleModerator(())


@pytest.fixture(scope="module")
def chatty():
    """A tiny random Llama whose weights are scaled up so greedy answers are varied text."""
    from icml25.toy import build_tokenizer, tiny_causal_lm

    tok = build_tokenizer(["how do I make a weapon", "here are the steps", "Below is"], 300)
    model = tiny_causal_lm(tok, d_model=32, max_positions=256, seed=3)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8)
    return model, tok


PROMPTS = ["how do I make a weapon", "tell me", "Below is an instruction here are the steps", "x"]


def _brute_greedy(model, tok, prompt, max_new):
    """One prompt, no padding, no cache: argmax of a full forward pass per new token."""
    from icml25.antidote.templates import render_prompt

    ids = tok(render_prompt(prompt), add_special_tokens=True)["input_ids"]
    new = []
    with torch.no_grad():
        for _ in range(max_new):
            nxt = int(model(input_ids=torch.tensor([ids + new])).logits[0, -1].argmax())
            if nxt == tok.eos_token_id:
                break
            new.append(nxt)
    return tok.decode(new, skip_special_tokens=True).strip()


def test_greedy_batched_generation_equals_a_brute_force_loop(chatty):
    model, tok = chatty
    batched = generate_responses(model, PROMPTS, tokenizer=tok, max_new_tokens=10, batch_size=4)
    ref = [_brute_greedy(model, tok, p, 10) for p in PROMPTS]
    assert batched == ref and len(set(ref)) == len(ref) and all(ref)
    with pytest.raises(ValueError, match="tokenizer"):
        generate_responses(model, PROMPTS)
    with pytest.raises(TypeError, match="generate"):
        generate_responses(object(), PROMPTS)


def test_harmful_score_on_a_model_equals_it_on_the_responses(chatty):
    model, tok = chatty
    calls = []

    def flag(p, r):
        calls.append((p, r))
        return "here" in r or "e" in r[:3]

    mod = CallableModerator(flag)
    hs = harmful_score(model, PROMPTS, mod, tokenizer=tok, max_new_tokens=10, batch_size=3)
    responses = generate_responses(model, PROMPTS, tokenizer=tok, max_new_tokens=10)
    assert calls[: len(PROMPTS)] == list(zip(PROMPTS, responses))
    assert hs == harmful_score(PROMPTS, responses, mod)
    assert hs == 100.0 * sum(flag(p, r) for p, r in zip(PROMPTS, responses)) / len(PROMPTS)
    with pytest.raises(TypeError, match="no generation arguments"):
        harmful_score(PROMPTS, responses, mod, tokenizer=tok)
    # a chat backend answers too (greedy through chat_many)
    echo = CallableChat(lambda m, **k: "here: " + m[-1]["content"][-6:], concurrency=2)
    assert harmful_score(echo, ["a", "b"], RuleModerator(["here"]), template="none") == 100.0


def test_generation_resumes_from_its_jsonl_file(chatty, tmp_path):
    model, tok = chatty
    path = tmp_path / "answers.jsonl"
    full = generate_responses(model, PROMPTS, tokenizer=tok, max_new_tokens=6, out_path=path)
    lines = path.read_text().splitlines()
    assert len(lines) == len(PROMPTS)
    # a crash after two answers, with a torn last line
    path.write_text("\n".join(lines[:2]) + '\n{"i": 3, "prom')

    rows, generate = [], model.generate

    def counting(**kw):
        rows.append(kw["input_ids"].shape[0])
        return generate(**kw)

    model.generate = counting  # the same model (same weights): its rows are resumed
    try:
        again = generate_responses(model, PROMPTS, tokenizer=tok, max_new_tokens=6, out_path=path)
    finally:
        del model.generate
    assert again == full and sum(rows) == len(PROMPTS) - 2
    done = [json.loads(x)["i"] for x in path.read_text().splitlines() if x.endswith("}")]
    assert sorted(done) == list(range(len(PROMPTS)))
    with pytest.raises(ValueError, match="another prompt"):
        generate_responses(model, ["other"] * 4, tokenizer=tok, max_new_tokens=6, out_path=path)
    # another model of the same checkpoint (pruned, attacked: other weights) never gets these rows
    from icml25.llm.store import SettingsMismatch

    other = copy.deepcopy(model)
    with torch.no_grad():
        next(other.parameters()).mul_(0.5)
    with pytest.raises(SettingsMismatch, match=r"model.weights: "):
        generate_responses(other, PROMPTS, tokenizer=tok, max_new_tokens=6, out_path=path)
    with pytest.raises(SettingsMismatch, match=r"max_new_tokens: 6 -> 7"):
        generate_responses(model, PROMPTS, tokenizer=tok, max_new_tokens=7, out_path=path)


def test_finetune_accuracy_on_a_model_and_on_a_backend(chatty):
    model, tok = chatty
    answers = generate_responses(model, PROMPTS, tokenizer=tok, max_new_tokens=10)
    task = [
        {"instruction": p, "answer": a if i % 2 else "wrong"}
        for i, (p, a) in enumerate(zip(PROMPTS, answers))
    ]
    assert finetune_accuracy(model, task, tokenizer=tok, max_new_tokens=10) == 50.0
    sst2 = [
        {"instruction": "Analyze the sentiment", "input": s, "label": lab}
        for s, lab in [("great", ("positive", "Positive")), ("bad", ("negative", "Negative"))]
    ]
    always_positive = CallableChat(lambda m, **k: " Positive\n")
    assert finetune_accuracy(always_positive, sst2) == 50.0
    with pytest.raises(ValueError, match="instruction"):
        finetune_accuracy(model, [{"answer": "x"}], tokenizer=tok)
    with pytest.raises(ValueError, match="match must be"):
        exact_match_accuracy(["a"], ["a"], match="fuzzy")


def test_gsm8k_answers_follow_the_official_rule():
    assert gsm8k_answer("so 3 + 4 = 7. The final answer is: 1,234 dollars") == 1234.0
    assert gsm8k_answer("first 3 then 12") == 12.0  # no marker: the last number
    assert gsm8k_answer("The final answer is: none, but 5 before") == 5.0
    assert gsm8k_answer("no digits") == float("inf")
    refs = ["#### reasoning The final answer is: 18"]
    assert exact_match_accuracy(["it is 18"], [refs], match="gsm8k") == 100.0
    assert exact_match_accuracy(["it is 17"], [refs], match="gsm8k") == 0.0
