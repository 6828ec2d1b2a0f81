"""The ``train`` extra works: TRL trainers run a few steps on a tiny random-init Llama, offline, on
CPU, with an in-memory ``datasets.Dataset``; a subclass's ``compute_loss`` is the loss trained on.

Facts these pin (trl 1.16, transformers 5.24): TRL configs default to ``bf16=True`` (a CPU-only
run raises unless it is off) and ``gradient_checkpointing=True``; trainers want a
``datasets.Dataset``; ``CPOTrainer`` lives in ``trl.experimental.cpo``; a custom loss overrides
``compute_loss(model, inputs, return_outputs=False, num_items_in_batch=None)``; ``DPOTrainer``
with ``ref_model=None`` reloads the reference from ``model.config.name_or_path``, so a model built
in memory needs its reference passed.
"""

from __future__ import annotations

import math

import pytest

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
torch = pytest.importorskip("torch")

from icml25.toy import build_tokenizer, tiny_causal_lm  # noqa: E402

STEPS = 3
PAIRS = [  # (prompt, chosen, rejected)
    ("reverse red cat", "cat red", "red cat"),
    ("reverse sun dog moon", "moon dog sun", "sun dog moon"),
    ("reverse a b", "b a", "a b"),
    ("reverse tree river", "river tree", "tree river"),
]


def _preference_data():
    """Conversational preference rows: the tokenizer's chat template renders them."""
    return datasets.Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": p}] for p, _, _ in PAIRS],
            "chosen": [[{"role": "assistant", "content": c}] for _, c, _ in PAIRS],
            "rejected": [[{"role": "assistant", "content": r}] for _, _, r in PAIRS],
        }
    )


def _tiny():
    texts = [t for row in PAIRS for t in row]
    tokenizer = build_tokenizer(texts, 300)
    return tiny_causal_lm(tokenizer, d_model=32, n_layers=1, n_heads=2, seed=0), tokenizer


def _cpu_args(tmp_path):
    """What every TRL config needs on a CPU-only machine, offline, quietly."""
    return dict(
        output_dir=str(tmp_path / "out"),
        bf16=False,  # TRL's default; raises "Your setup doesn't support bf16/gpu" on CPU
        use_cpu=True,
        gradient_checkpointing=False,  # TRL's default is True: slower and pointless here
        report_to=[],
        max_steps=STEPS,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_dpo_trainer_runs_and_updates_the_policy(tmp_path):
    torch.set_num_threads(1)
    model, tokenizer = _tiny()
    reference, _ = _tiny()  # same seed: the same weights
    before = _weights(model)
    args = trl.DPOConfig(**_cpu_args(tmp_path), beta=0.1, max_length=64)
    trainer = trl.DPOTrainer(
        model,
        ref_model=reference,  # None reloads it from model.config.name_or_path: none in memory
        args=args,
        train_dataset=_preference_data(),
        processing_class=tokenizer,
    )
    out = trainer.train()
    assert trainer.state.global_step == STEPS
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses)
    assert math.isfinite(out.training_loss)
    # DPO's first-step loss is log 2: policy and reference start equal.
    assert losses[0] == pytest.approx(math.log(2), abs=1e-3)
    after = trainer.model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k].detach().cpu())]
    assert changed, "no weight changed in 3 DPO steps"
    ref_after = trainer.ref_model.state_dict()
    assert all(torch.equal(before[k], ref_after[k].detach().cpu()) for k in before)  # frozen


def test_custom_compute_loss_is_what_trains(tmp_path):
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    torch.set_num_threads(1)
    model, tokenizer = _tiny()
    seen: list[float] = []

    class ScaledCPO(CPOTrainer):
        """A paper's loss goes here: CPO's loss times 3 (visible in the logged loss)."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, metrics = super().compute_loss(model, inputs, return_outputs=True)
            loss = 3.0 * loss
            seen.append(loss.item())
            return (loss, metrics) if return_outputs else loss

    args = CPOConfig(**_cpu_args(tmp_path), beta=0.1, max_length=64)
    trainer = ScaledCPO(
        model, args=args, train_dataset=_preference_data(), processing_class=tokenizer
    )
    trainer.train()
    assert len(seen) == STEPS  # one call per step (no gradient accumulation)
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert logged == pytest.approx(seen, rel=1e-4)  # the trainer optimised our loss
