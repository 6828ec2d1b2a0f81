"""align -> harmful fine-tune -> prune -> evaluate (the paper's three-stage fine-tuning-as-a-service
setting: alignment, user fine-tuning, post-fine-tuning pruning).

:func:`compare_pruning` is the post-fine-tuning part for any model (toy or real): each scorer
and ratio is applied in place, evaluated and undone exactly, so no model copy is needed.
:class:`HarmfulFinetuneExperiment` runs the whole pipeline on the synthetic safety language of
:mod:`icml25.toy.safety_lang` in one call.

Single-process. The toy pipeline's training loops (pre-training, alignment, the harmful
fine-tuning attack) are plain loops on a tiny model, as the paper runs each stage on one GPU;
under ``torch.distributed`` with several processes they raise ``RuntimeError`` instead of
repeating the same run on every rank. On real models the fine-tuning is the user's own run, and
the path that scales is TRL's ``SFTTrainer`` (with a PEFT LoRA config: ``accelerate launch
--num_processes 8 sft.py``), followed by Antidote's one-shot pruning
(:func:`~icml25.antidote.prune.antidote_prune`, ``icml25 antidote prune``), which is a
single-process step on the trained model (docs/antidote.md, "Several GPUs").
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from icml25._validate import as_int, as_prob, as_real
from icml25.antidote.masks import _as_real, undo_mask
from icml25.antidote.prune import AntidoteConfig, antidote_prune
from icml25.antidote.targets import inactive_adapters, select_target_layers
from icml25.antidote.templates import ALPACA, ALPACA_INPUT, render_prompt

__all__ = [
    "ALPACA",
    "ALPACA_INPUT",
    "HarmfulFinetuneExperiment",
    "ToySettings",
    "compare_pruning",
    "make_realign_batches",
]


def make_realign_batches(
    tokenizer,
    pairs: Iterable,
    *,
    template: str = "alpaca",
    max_length: int | None = None,
    batch_size: int = 1,
) -> list[dict[str, torch.Tensor]]:
    """Tokenised calibration batches in the training format (official ``utils.preprocess``):
    Alpaca prompt + answer + EOS, right-padded, with ``attention_mask`` (padding is excluded from
    the statistics) and ``labels`` (-100 on the prompt and the padding, so ``grad_magnitude`` gets
    the training loss on the answer). ``pairs``: ``(prompt, response)`` tuples or dicts with
    ``prompt``/``instruction``, optional ``input``, and ``response``/``output``.
    ``template="none"`` uses the prompt text as is. Sequences longer than ``max_length`` are
    truncated with a warning."""
    if template not in ("alpaca", "none"):
        raise ValueError(f"template must be 'alpaca' or 'none', got {template!r}")
    batch_size = as_int("batch_size", batch_size, 1)
    texts, heads = [], []
    for i, p in enumerate(pairs):
        if isinstance(p, dict):
            instr = p.get("prompt", p.get("instruction"))
            inp, resp = p.get("input") or "", p.get("response", p.get("output"))
        elif isinstance(p, (tuple, list)) and len(p) == 2:
            (instr, resp), inp = p, ""
        else:
            raise ValueError(
                f"calibration pair {i} must be a (prompt, response) tuple or a dict with "
                f"prompt/instruction and response/output, got {p!r}"
            )
        if instr is None or resp is None:
            raise ValueError(f"a calibration pair needs a prompt and a response, got {p!r}")
        if not all(isinstance(x, str) for x in (instr, inp, resp)):
            raise ValueError(
                f"calibration pair {i} needs text for its prompt, input and response, got {p!r}"
            )
        head = render_prompt(instr, inp, template)
        heads.append(head)
        texts.append(head + resp + (tokenizer.eos_token or ""))
    if not texts:
        raise ValueError("no calibration pairs")
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    out, truncated = [], 0
    for i in range(0, len(texts), batch_size):
        enc = [
            tokenizer(t, add_special_tokens=True)["input_ids"] for t in texts[i : i + batch_size]
        ]
        n_head = [
            len(tokenizer(h, add_special_tokens=True)["input_ids"])
            for h in heads[i : i + batch_size]
        ]
        if max_length is not None:
            truncated += sum(len(e) > max_length for e in enc)
            enc = [e[:max_length] for e in enc]
        T = max(len(e) for e in enc)
        ids = torch.full((len(enc), T), pad_id, dtype=torch.long)
        am = torch.zeros(len(enc), T, dtype=torch.long)
        labels = torch.full((len(enc), T), -100, dtype=torch.long)
        for j, e in enumerate(enc):
            ids[j, : len(e)], am[j, : len(e)] = torch.tensor(e), 1
            labels[j, n_head[j] : len(e)] = ids[j, n_head[j] : len(e)]
        out.append({"input_ids": ids, "attention_mask": am, "labels": labels})
    if truncated:
        warnings.warn(
            f"{truncated} calibration sequence(s) truncated to max_length={max_length} tokens",
            UserWarning,
            stacklevel=2,
        )
    return out


def compare_pruning(
    model: nn.Module,
    evaluate: Callable[[nn.Module], dict[str, float]],
    *,
    harmful_batches: list | None,
    benign_batches: list | None = None,
    ratios: Iterable[float] = (0.05, 0.1, 0.2),
    scorers: Iterable[str] = ("antidote", "benign_wanda", "magnitude", "random"),
    target: str = "lora",
    target_filter: Callable[[str, nn.Module], bool] | None = None,
    adapters: str | Sequence[str] | None = None,
    seed: int = 0,
) -> dict[str, dict[float, dict[str, float]]]:
    """``{scorer: {rho: evaluate(pruned model)}}`` plus ``{"none": {0.0: evaluate(model)}}``.

    Scorers: ``"antidote"`` (Wanda on ``harmful_batches``), ``"benign_wanda"`` (Wanda on the
    user's data, ``benign_batches``), ``"magnitude"``, ``"random"`` (per tensor), and
    ``"grad_magnitude"`` (batches with ``labels``). ``target``, ``target_filter`` and
    ``adapters`` select the weights as in :func:`select_target_layers`. Each pruning is undone
    exactly before the next, so one model serves every point (no copies: a real 7B model works
    the same way)."""
    rhos = [_as_real(f"ratios[{i}]", r) for i, r in enumerate(ratios)]
    layers = select_target_layers(model, target, target_filter, adapters=adapters)
    results: dict[str, dict[float, dict[str, float]]] = {"none": {0.0: evaluate(model)}}
    kinds = {
        "antidote": ("wanda", harmful_batches),
        "benign_wanda": ("wanda", benign_batches),
        "magnitude": ("magnitude", None),
        "random": ("random", None),
        "grad_magnitude": ("grad_magnitude", harmful_batches),
    }
    for scorer in scorers:
        if scorer not in kinds:
            raise ValueError(f"unknown scorer {scorer!r}; valid: {sorted(kinds)}")
        score, data = kinds[scorer]
        if score in ("wanda", "grad_magnitude") and data is None:
            raise ValueError(f"scorer {scorer!r} needs calibration batches")
        off = inactive_adapters(model, adapters) if score in ("wanda", "grad_magnitude") else []
        if off:
            raise ValueError(
                f"scorer {scorer!r} needs activations, but adapter(s) {off} are not active "
                "(PEFT: model.set_adapter(name))"
            )
        for rho in rhos:
            cfg = AntidoteConfig(dense_ratio=rho, score=score, target=target, seed=seed)
            res = antidote_prune(model, data, cfg, layers=layers)
            try:
                results.setdefault(scorer, {})[rho] = evaluate(model)
            finally:
                undo_mask(layers, res.mask, res.removed)
    return results


@dataclass
class ToySettings:
    """Toy reproduction sizes (docs/antidote.md); the H1/H2 attack settings are (lr, epochs)."""

    pretrain_steps: int = 800
    pretrain_batch: int = 64
    pretrain_lr: float = 3e-3
    align_steps: int = 266
    align_batch: int = 64
    align_lr: float = 1e-3
    lora_r: int = 32
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    n_finetune: int = 1000
    poison_ratio: float = 0.2
    ft_batch: int = 32
    attacks: dict[str, tuple[float, int]] = field(
        default_factory=lambda: {"H1": (3e-3, 15), "H2": (1e-3, 10)}
    )
    n_calibration: int = 200
    calibration_batch: int = 64
    n_eval: int = 400

    def __post_init__(self) -> None:
        counts = (
            "pretrain_steps",
            "pretrain_batch",
            "align_steps",
            "align_batch",
            "lora_r",
            "n_finetune",
            "ft_batch",
            "n_calibration",
            "calibration_batch",
            "n_eval",
        )
        for name in counts:
            as_int(f"ToySettings.{name}", getattr(self, name), 1)
        for name in ("pretrain_lr", "align_lr", "lora_alpha"):
            as_real(f"ToySettings.{name}", getattr(self, name), low=0, low_open=True)
        as_prob("ToySettings.poison_ratio", self.poison_ratio)
        if not self.lora_targets or not all(isinstance(t, str) for t in self.lora_targets):
            raise ValueError(
                f"ToySettings.lora_targets must be a non-empty tuple of module names, "
                f"got {self.lora_targets!r}"
            )
        if not self.attacks:
            raise ValueError("ToySettings.attacks must name at least one (lr, epochs) setting")
        for key, val in self.attacks.items():
            if not (isinstance(val, tuple | list) and len(val) == 2):
                raise ValueError(
                    f"ToySettings.attacks[{key!r}] must be (lr > 0, epochs >= 1), got {val!r}"
                )
            as_real(f"ToySettings.attacks[{key!r}] lr", val[0], low=0, low_open=True)
            as_int(f"ToySettings.attacks[{key!r}] epochs", val[1], 1)


def _train(
    model, params, sample_batch: Callable[[int], dict], steps: int, lr: float, schedule: str
):
    """AdamW on ``params`` for ``steps`` batches of ``sample_batch(step)`` (``input_ids``,
    ``attention_mask``, ``labels``; the model's own causal-LM loss), with TRL's SFT conventions:
    dropout as the model configures it (``train()`` mode, as ``SFTTrainer``), and a bf16/fp16
    checkpoint trained with float32 master weights (trainable parameters upcast in place, forward
    under autocast in the checkpoint's dtype: :class:`icml25.llm.MixedPrecision`); a float32
    model (the toy) trains exactly as before. Returns the per-step losses; the model ends in
    eval mode.

    Single-process: ``RuntimeError`` under several ``torch.distributed`` processes (each would
    train the same model on the same batches); the data-parallel fine-tuning of a real model is
    TRL's ``SFTTrainer``."""
    from icml25.llm.distributed import refuse_several_processes
    from icml25.llm.training import MixedPrecision

    refuse_several_processes(
        "HarmfulFinetuneExperiment's training (the toy pipeline)",
        "TRL's SFTTrainer (accelerate launch --num_processes N sft.py; then prune once with "
        "icml25.antidote.antidote_prune)",
    )

    params = list(params)
    mp = MixedPrecision.prepare(model)  # upcasts in place: `params` are the same tensors
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warm = max(1, int(0.1 * steps)) if schedule == "cosine" else 0

    def factor(s: int) -> float:
        if schedule == "constant":
            return 1.0
        if s < warm:
            return (s + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    model.train()
    losses = []
    for s in range(steps):
        batch = sample_batch(s)
        with mp.autocast():
            loss = model(
                input_ids=batch["input_ids"],
                attention_mask=batch.get("attention_mask"),
                labels=batch["labels"],
            ).loss
        if not torch.isfinite(loss):
            raise FloatingPointError(f"training loss became {float(loss)} at step {s}")
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


class HarmfulFinetuneExperiment:
    """The three stages on the synthetic safety language, one seed.

    ``aligned()`` pre-trains (knowledge, harmful included) and safety-aligns a tiny Llama (cached
    under ``cache_dir`` when given, as :meth:`checkpoint_name`); ``attack(name)`` fine-tunes a new LoRA adapter on the
    user's data with ``poison_ratio`` harmful samples; ``evaluate(model)`` gives the harmful
    score and task accuracy; ``run(ratios, scorers)`` does everything in one call.

    Single-process (a toy model; ``RuntimeError`` under several ``torch.distributed``
    processes). Real models: fine-tune with TRL's ``SFTTrainer`` (data-parallel), then prune
    with :func:`~icml25.antidote.prune.antidote_prune` in one process."""

    def __init__(
        self,
        seed: int = 0,
        settings: ToySettings | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        from icml25.toy.safety_lang import HarmfulFinetuneWorld

        self.seed, self.s = seed, settings or ToySettings()
        self.world = HarmfulFinetuneWorld(seed)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._aligned = None
        self.log: dict[str, float] = {}

    def checkpoint_name(self) -> str:
        """``aligned_seed<seed>_<digest>.pt``: the digest covers every setting that shapes the
        aligned model, so runs of other sizes in the same folder never share a checkpoint."""
        s = self.s
        key = json.dumps(
            [
                s.pretrain_steps,
                s.pretrain_batch,
                s.pretrain_lr,
                s.align_steps,
                s.align_batch,
                s.align_lr,
                len(self.world.vocab),
            ]
        )
        return f"aligned_seed{self.seed}_{hashlib.sha1(key.encode()).hexdigest()[:10]}.pt"

    def _sampler(self, draw, batch: int, seed: int):
        rng = random.Random(seed)
        return lambda _s: self.world.encode([draw(rng) for _ in range(batch)])

    def aligned(self) -> nn.Module:
        if self._aligned is not None:
            return self._aligned
        path = self.cache_dir / self.checkpoint_name() if self.cache_dir else None
        model = self.world.model(self.seed)
        if path is not None and path.exists():
            model.load_state_dict(torch.load(path, map_location="cpu"))
            model.eval()
        else:
            t0 = time.perf_counter()
            s = self.s
            _train(
                model,
                model.parameters(),
                self._sampler(self.world.pretrain_pair, s.pretrain_batch, 1000 + self.seed),
                s.pretrain_steps,
                s.pretrain_lr,
                "cosine",
            )
            self.log["pretrain HS"] = self.world.harmful_score(model, s.n_eval)
            _train(
                model,
                model.parameters(),
                self._sampler(self.world.align_pair, s.align_batch, 2000 + self.seed),
                s.align_steps,
                s.align_lr,
                "cosine",
            )
            self.log["align seconds"] = time.perf_counter() - t0
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                torch.save(model.state_dict(), tmp)
                tmp.replace(path)  # atomic: a crash never leaves a half-written checkpoint
        self._aligned = model
        return model

    def attack(self, setting: str = "H1") -> nn.Module:
        """A copy of the aligned model with a new LoRA adapter (r 32, alpha 32, all linear
        layers) fine-tuned on ``n`` samples, ``poison_ratio`` of them harmful (constant lr)."""
        from icml25.lora import inject_lora, mark_only_lora_trainable

        if setting not in self.s.attacks:
            raise ValueError(f"unknown attack setting {setting!r}; valid: {sorted(self.s.attacks)}")
        lr, epochs = self.s.attacks[setting]
        model = copy.deepcopy(self.aligned())
        torch.manual_seed(10_000 + self.seed)
        inject_lora(
            model,
            list(self.s.lora_targets),
            r=self.s.lora_r,
            alpha=self.s.lora_alpha,
            init_a=math.sqrt(5),  # PEFT's kaiming-uniform init of A
        )
        mark_only_lora_trainable(model)
        rng = random.Random(3000 + self.seed)
        data = self.world.finetune_set(self.s.n_finetune, self.s.poison_ratio, rng)
        bs = self.s.ft_batch
        per_epoch = math.ceil(len(data) / bs)
        order: list[int] = []

        def batch(step: int):
            if step % per_epoch == 0:
                order[:] = list(range(len(data)))
                rng.shuffle(order)
            i = (step % per_epoch) * bs
            return self.world.encode([data[j] for j in order[i : i + bs]])

        params = [p for p in model.parameters() if p.requires_grad]
        _train(model, params, batch, per_epoch * epochs, lr, "constant")
        return model

    def calibration(self, kind: str = "harmful") -> list[dict]:
        """Re-alignment data: harmful CAL-object requests with their recipes (disjoint from the
        attack and the evaluation), or the user's benign task data for the ablation."""
        rng = random.Random(4000 + self.seed)
        draw = (lambda r: self.world.harmful("cal", r)) if kind == "harmful" else self.world.task
        pairs = [draw(rng) for _ in range(self.s.n_calibration)]
        return self.world.batches(pairs, self.s.calibration_batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {
            "HS": self.world.harmful_score(model, self.s.n_eval),
            "FA": self.world.finetune_accuracy(model, self.s.n_eval),
        }

    def run(
        self,
        ratios: Iterable[float] = (0.05, 0.1, 0.2),
        scorers: Iterable[str] = ("antidote", "benign_wanda", "magnitude", "random"),
        settings: Iterable[str] = ("H1",),
        target: str = "lora",
        target_filter=None,
        *,
        lora_b_ablation: bool = False,
    ) -> dict:
        """``{"aligned": {HS, FA}, setting: {scorer: {rho: {HS, FA}}}}`` in one call.

        ``lora_b_ablation`` (ours, not the paper's) adds ``"antidote_B"`` to each setting: the
        Antidote score applied only to the adapters' ``lora_B`` factors, at the same ratios, on
        the same attacked model right after the other scorers."""
        out: dict = {"aligned": self.evaluate(self.aligned())}
        harmful, benign = self.calibration("harmful"), self.calibration("benign")
        for name in settings:
            model = self.attack(name)
            out[name] = compare_pruning(
                model,
                self.evaluate,
                harmful_batches=harmful,
                benign_batches=benign,
                ratios=ratios,
                scorers=scorers,
                target=target,
                target_filter=target_filter,
                seed=self.seed,
            )
            if lora_b_ablation:
                only_b = compare_pruning(
                    model,
                    self.evaluate,
                    harmful_batches=harmful,
                    ratios=ratios,
                    scorers=("antidote",),
                    target=target,
                    seed=self.seed,
                    target_filter=lambda n, m: n.endswith("lora_B"),
                )
                out[name]["antidote_B"] = only_b["antidote"]
        return out
