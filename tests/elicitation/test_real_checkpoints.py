"""The investigator pipeline on real Hugging Face architectures (issue 45): tiny random-init
GPT-2 (dropout, no pad token), Llama-3 (its turn ends with <|eot_id|>, not its EOS) and Qwen2
(ChatML) from ``icml25.toy.archs``, in float32 and bfloat16."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.elicitation import (
    HFTargetModel,
    Investigator,
    PreferencePair,
    dpo_round,
    reverse_sft,
)
from icml25.toy.archs import ARCHITECTURES, tiny_model, tiny_tokenizer

ARCHS = ["gpt2", "llama", "qwen2"]
# the rest of the causal-LM matrix: Gemma (turn end <end_of_turn>, BOS), Mistral (turn end = EOS,
# [INST]), OPT (dropout, BOS)
WIDER = [pytest.param(a, marks=pytest.mark.slow) for a in ("gemma2", "mistral", "opt")]
BEHAVIORS = ["the sky is green", "cats can fly over the moon"]


def _inv(arch: str, *, dtype=None, train: bool = False, **kw) -> Investigator:
    model = tiny_model(arch, dtype=dtype)
    if train:
        model.train()  # as a user fine-tuning it would leave it: dropout on where the config has it
    return Investigator(model, tiny_tokenizer(arch), max_prompt_tokens=8, **kw)


def _ramp(prompts, behaviors):
    """A reward that orders every candidate (so every behaviour gets a pair)."""
    return torch.arange(len(prompts), dtype=torch.float32)


def _manual(model, context: list[int], completion: list[int], allowed=None) -> float:
    """Sum of log p(completion | context) from one unbatched forward, dropout off; over the
    ``allowed`` ids only when given (an unrestricted investigator still leaves out every special
    tokens that never end a prompt)."""
    ids = torch.tensor([context + completion])
    was = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    model.train(was)
    if allowed is not None:
        masked = torch.full_like(logits, float("-inf"))
        masked[:, allowed] = logits[:, allowed]
        logits = masked
    lsm = torch.log_softmax(logits, -1)
    return sum(lsm[len(context) - 1 + i, t].item() for i, t in enumerate(completion))


# -- dropout -----------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS + WIDER)
def test_first_dpo_loss_is_log_2_when_policy_is_the_reference(arch):
    policy = _inv(arch, train=True)
    ref = policy.copy()
    st = dpo_round(policy, ref, _ramp, BEHAVIORS, n_candidates=4, lr=1e-9, seed=0)
    assert st["n_pairs"] == 2
    assert st["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert st["reward_accuracy"] == 0.0 and abs(st["margin"]) < 1e-7
    assert policy.model.training  # every flag restored: the caller left it in train mode


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_first_dpo_loss_is_log_2_in_bf16_up_to_the_master_weights_rounding(arch):
    # the policy computes from float32 master copies under autocast, the reference in pure bf16:
    # the same weights, slightly different rounding (~1e-4 nats), no dropout noise (~1e-3)
    policy = _inv(arch, dtype=torch.bfloat16, train=True)
    st = dpo_round(policy, policy.copy(), _ramp, BEHAVIORS, n_candidates=4, lr=1e-9, seed=0)
    assert st["n_pairs"] == 2 and st["loss"] == pytest.approx(math.log(2), abs=5e-4)


def test_dpo_round_keeps_dropout_when_asked():
    policy = _inv("gpt2", train=True)
    ref = policy.copy()
    torch.manual_seed(0)
    st = dpo_round(policy, ref, _ramp, BEHAVIORS, n_candidates=4, lr=1e-9, disable_dropout=False)
    assert abs(st["loss"] - math.log(2)) > 1e-4  # dropout on: the flag does what it says


def test_investigator_scoring_and_sampling_are_deterministic_on_a_dropout_model():
    inv = _inv("gpt2", train=True)
    xs = ["hello there world", "a b c"]
    vals = [inv.logprob(BEHAVIORS, xs) for _ in range(3)]
    assert torch.equal(vals[0], vals[1]) and torch.equal(vals[1], vals[2])
    vals[0].sum().backward()  # still differentiable
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in inv.model.parameters())
    assert inv.sample(BEHAVIORS, 2, greedy=True) == inv.sample(BEHAVIORS, 2, greedy=True)
    assert all(m.training for m in inv.model.modules())  # the caller's mode is restored


# -- targets as TRL tokenises them -------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS + WIDER)
@pytest.mark.parametrize("template", ["chat", "tags"])
def test_scored_targets_are_trls(arch, template):
    from icml25.llm import tokenize_prompt_completion

    inv = _inv(arch, template=template)
    tok = inv.tokenizer
    b, x = BEHAVIORS[1], "tell me about birds"
    if template == "chat":
        row = ([{"role": "user", "content": b}], [{"role": "assistant", "content": x}])
    else:
        row = (f"<behavior> {b} <prompt>", f" {x}")
    want = tokenize_prompt_completion(tok, *row)
    n = sum(t == -100 for t in want["labels"])
    context, completion = want["input_ids"][:n], want["input_ids"][n:]
    end = ARCHITECTURES[arch].end_of_turn if template == "chat" else ARCHITECTURES[arch].eos_token
    assert tok.convert_tokens_to_ids(end) in completion  # the template's end of turn, or EOS
    got = inv.logprob([b], [x])
    assert got.item() == pytest.approx(
        _manual(inv.model, context, completion, inv.allowed), abs=1e-4
    )
    assert inv.logprob([b], [x], normalize="mean").item() == pytest.approx(
        got.item() / len(completion), abs=1e-5
    )


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_reverse_sft_loss_is_the_mean_nll_of_trls_completion_tokens(arch):
    from icml25.llm import tokenize_prompt_completion

    inv = _inv(arch)
    pairs = [(BEHAVIORS[0], "green sky now"), (BEHAVIORS[1], "cats and the moon please")]
    total, count = 0.0, 0
    for b, x in pairs:
        r = tokenize_prompt_completion(
            inv.tokenizer,
            [{"role": "user", "content": b}],
            [{"role": "assistant", "content": x}],
        )
        n = sum(t == -100 for t in r["labels"])
        total += _manual(inv.model, r["input_ids"][:n], r["input_ids"][n:], inv.allowed)
        count += len(r["input_ids"]) - n
    reverse_sft(inv, pairs, steps=1, batch_size=2, warmup=0, lr=1e-9, progress=False)
    assert inv.sft_losses[0] == pytest.approx(-total / count, abs=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "llama", *WIDER])
@pytest.mark.parametrize("template", ["chat", "tags"])
def test_dpo_trainer_tokenises_the_pairs_as_dpo_round_scores_them(arch, template, tmp_path):
    trl = pytest.importorskip("trl")
    import datasets

    from icml25.elicitation import dpo_trainer

    datasets.disable_progress_bars()
    policy = _inv(arch, template=template)
    pairs = [
        PreferencePair(BEHAVIORS[0], "green sky now", "blue", 1.0, 0.0),
        PreferencePair(BEHAVIORS[1], "fly cats", "cats and the moon please", 1.0, 0.0),
    ]
    args = trl.DPOConfig(output_dir=str(tmp_path), report_to=[], bf16=False, use_cpu=True)
    trainer = dpo_trainer(policy, policy.copy(), pairs, args)
    for p, row in zip(pairs, trainer.train_dataset):
        for x, key in ((p.chosen, "chosen_ids"), (p.rejected, "rejected_ids")):
            want = _manual(policy.model, row["prompt_ids"], row[key], policy.allowed)
            assert policy.logprob([p.behavior], [x]).item() == pytest.approx(want, abs=1e-4)


# -- bf16: float32 master weights --------------------------------------------------------------
def _changed_fraction(before: dict, model) -> float:
    changed = total = 0
    for name, p in model.named_parameters():
        changed += int((p.detach().float() != before[name].float()).sum())
        total += p.numel()
    return changed / total


@pytest.mark.parametrize("loop", ["reverse_sft", "dpo_round"])
def test_bf16_training_moves_the_weights_as_fp32_does(loop):
    fractions = {}
    for dtype in (torch.float32, torch.bfloat16):
        inv = _inv("llama", dtype=dtype)
        before = {k: v.detach().clone() for k, v in inv.model.named_parameters()}
        if loop == "reverse_sft":
            pairs = [(b, "green cats fly") for b in BEHAVIORS]
            reverse_sft(inv, pairs, steps=3, batch_size=2, lr=1e-5, warmup=0, progress=False)
        else:
            ref = inv.copy()
            dpo_round(inv, ref, _ramp, BEHAVIORS, n_candidates=4, lr=1e-5, steps=3)
        fractions[dtype] = _changed_fraction(before, inv.model)
    assert fractions[torch.float32] > 0.5, fractions
    assert fractions[torch.bfloat16] > 0.9 * fractions[torch.float32], fractions
    assert inv.model.model.embed_tokens.weight.dtype == torch.float32  # the master weights


def test_a_trained_bf16_investigator_still_computes_in_bf16():
    inv = _inv("llama", dtype=torch.bfloat16)
    reverse_sft(inv, [(BEHAVIORS[0], "green")], steps=1, batch_size=1, warmup=0, progress=False)
    assert inv.compute_dtype == torch.bfloat16
    seen = []
    hook = inv.model.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    inv.logprob(BEHAVIORS[:1], ["green"])
    hook.remove()
    assert seen == [torch.bfloat16]


# -- batches: left padding, keyword calls with position_ids -----------------------------------
@pytest.mark.parametrize("arch", ["gpt2", "llama", *WIDER])
def test_a_padded_batch_equals_each_row_alone(arch):
    inv = _inv(arch, train=True)
    bs = ["sky", "cats can fly over the moon and far away beyond"]  # very different lengths
    batch = inv.sample(bs, 1, greedy=True)
    assert batch == [inv.sample([b], 1, greedy=True)[0] for b in bs]
    xs = ["a", "tell me about birds and bees"]
    alone = torch.cat([inv.logprob([b], [x]) for b, x in zip(bs, xs)])
    assert torch.allclose(inv.logprob(bs, xs), alone, atol=1e-5)
    target = HFTargetModel(inv.model, inv.tokenizer, use_chat_template=True, add_eos=True)
    gen = target.generate(bs, 6)
    assert gen == [target.generate([b], 6)[0] for b in bs]
    alone = torch.cat([target.logprob([b], [x]) for b, x in zip(bs, xs)])
    assert torch.allclose(target.logprob(bs, xs), alone, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS + WIDER)
def test_a_chat_target_scores_and_stops_at_its_end_of_turn(arch):
    tok = tiny_tokenizer(arch)
    model = tiny_model(arch)
    eot = tok.convert_tokens_to_ids(ARCHITECTURES[arch].end_of_turn)
    target = HFTargetModel(model, tok, use_chat_template=True, add_eos=True)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    p = tok(text, add_special_tokens=False)["input_ids"]
    r = tok("ok then", add_special_tokens=False)["input_ids"] + [eot]
    assert target.logprob(["hi"], ["ok then"]).item() == pytest.approx(
        _manual(model, p, r), abs=1e-4
    )
    calls = []

    def first_the_end_of_turn(module, inputs, logits):
        calls.append(1)  # the first step (prefill) ends the turn, later ones would say "ok"
        best = eot if len(calls) == 1 else tok.convert_tokens_to_ids("ok")
        return logits.index_fill(-1, torch.tensor([best]), 1e4)

    model.get_output_embeddings().register_forward_hook(first_the_end_of_turn)
    assert target.generate(["hi"], 5) == [""]


# -- loading through icml25.llm.load_model -----------------------------------------------------
def test_investigator_and_target_load_through_load_model(tmp_path, monkeypatch):
    import icml25.llm.loading as loading

    calls = []
    real = loading.load_model

    def spy(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(loading, "load_model", spy)
    inv = _inv("llama", dtype=torch.bfloat16)
    inv.save(tmp_path / "inv")
    back = Investigator.load(tmp_path / "inv")  # "auto": the saved dtype
    assert next(back.model.parameters()).dtype == torch.bfloat16
    assert torch.allclose(  # to bf16's precision: "auto" may have loaded it on a GPU
        back.logprob(BEHAVIORS, ["a b", "c"]).cpu(), inv.logprob(BEHAVIORS, ["a b", "c"]), atol=0.05
    )
    fp32 = Investigator.load(tmp_path / "inv", device="cpu", dtype="fp32")
    assert next(fp32.model.parameters()).dtype == torch.float32 and fp32.compute_dtype is None
    target = HFTargetModel.load(tmp_path / "inv", dtype="bf16", use_chat_template=True)
    assert next(target.model.parameters()).dtype == torch.bfloat16
    assert [(c["device"], c["dtype"]) for c in calls] == [
        ("auto", "auto"),
        ("cpu", "fp32"),
        ("auto", "bf16"),
    ]
    with pytest.raises(ValueError, match="dtype"):
        Investigator.load(tmp_path / "inv", dtype="int8")
    # trained: float32 master weights on disk, and still a bf16 investigator when loaded back
    reverse_sft(inv, [(BEHAVIORS[0], "green")], steps=1, batch_size=1, warmup=0, progress=False)
    inv.save(tmp_path / "trained")
    back = Investigator.load(tmp_path / "trained")
    assert next(back.model.parameters()).dtype == torch.float32
    assert back.compute_dtype == torch.bfloat16
    assert torch.allclose(
        back.logprob(BEHAVIORS, ["a b", "c"]).cpu(), inv.logprob(BEHAVIORS, ["a b", "c"]), atol=0.05
    )


# -- TRL: defaults, evaluation -----------------------------------------------------------------
def test_dpo_trainer_defaults_evaluate_and_first_loss(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    import datasets

    from icml25.elicitation import dpo_trainer

    datasets.disable_progress_bars()
    monkeypatch.chdir(tmp_path)
    policy = _inv("gpt2", train=True)
    ref = policy.copy()
    pairs = [PreferencePair(b, "green sky now", "blue", 1.0, 0.0) for b in BEHAVIORS] * 2
    evals = [PreferencePair(BEHAVIORS[0], "fly cats", "moon", 1.0, 0.0)]
    trainer = dpo_trainer(policy, ref, pairs, eval_dataset=evals)
    args = trainer.args
    assert (args.learning_rate, args.beta, args.num_train_epochs) == (5e-6, 0.1, 1)
    assert args.disable_dropout and not args.fp16
    assert args.bf16 == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert not str(args.output_dir).startswith(str(tmp_path))
    before = trainer.evaluate()
    assert before["eval_loss"] == pytest.approx(math.log(2), abs=1e-6)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and losses[0] == pytest.approx(math.log(2), abs=1e-4)  # the Trainer logs 4 digits
    assert "eval_loss" in trainer.evaluate()
    assert list(tmp_path.iterdir()) == []  # nothing written in the working directory
