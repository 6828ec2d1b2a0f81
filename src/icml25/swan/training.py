"""The tiny-LLaMA training loop shared by the reproduction and the tests (docs/swan.md)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import torch

from icml25.progress import track
from icml25.swan.data import WindowSampler
from icml25.swan.groups import swan_param_groups
from icml25.swan.memory import expected_adamw_state_bytes, model_bytes, optimizer_state_bytes
from icml25.swan.optim import SWAN, SinkGD

__all__ = [
    "ModelConfig",
    "RunResult",
    "build_model",
    "lr_sweep",
    "make_optimizer",
    "train_run",
    "OPTIMIZERS",
]

OPTIMIZERS = (
    "adamw",
    "sgd",
    "swan",
    "swan_muon",
    "swan_nsds",
    "swan_no_whiten",
    "swan_no_norm",
    "sinkgd",
    "muon",
)


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the reproduction's tiny LLaMA: vocabulary, hidden width, MLP width, layers,
    context length and attention heads."""

    vocab: int
    hidden: int = 64  # the quick model: H=64, FF=176, L=2, S=64 (~0.36 M parameters)
    ff: int = 176
    layers: int = 2
    seq: int = 64
    heads: int = 4


@dataclass
class RunResult:
    """One training run: its eval-CE curve over tokens, train losses, step times and the exact
    byte counts of parameters, gradients and optimizer state (``final`` is the last eval CE)."""

    optimizer: str
    lr: float
    seed: int
    tokens: list[int] = field(default_factory=list)
    eval_ce: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    step_seconds: float = 0.0
    opt_step_seconds: float = 0.0
    state_bytes: int = 0
    expected_state_bytes: int = 0
    swan_params_with_state: int = 0
    param_bytes: int = 0
    grad_bytes: int = 0
    row_sum_drift: float = 0.0

    @property
    def final(self) -> float:
        return self.eval_ce[-1]

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def build_model(cfg: ModelConfig, seed: int):
    """A freshly initialised ``LlamaForCausalLM`` of ``cfg``'s sizes (untied head), seeded by
    ``seed`` so every optimizer of a seed starts from the same model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=cfg.vocab,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.ff,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.seq,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


class _Combined(torch.optim.Optimizer):
    """Muon on the hidden matrices plus AdamW on the rest, stepped together (Muon's own advice)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers
        self.param_groups = [g for o in optimizers for g in o.param_groups]
        self.defaults = {}

    @property
    def state(self):  # noqa: D102
        merged = {}
        for o in self.optimizers:
            merged.update(o.state)
        return merged

    def step(self, closure=None):
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)


def make_optimizer(name: str, model: torch.nn.Module, lr: float, adamw_lr: float = 3e-3):
    """One of :data:`OPTIMIZERS` with the hybrid split of docs/swan.md (embed/head/norms on AdamW)."""
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    groups = swan_param_groups(model, lr, adamw_lr=adamw_lr)
    if name == "swan":
        return SWAN(groups, variant="swan")
    if name == "swan_muon":
        return SWAN(groups, variant="swan_muon")
    if name == "swan_nsds":
        return SWAN(groups, variant="swan_nsds")
    if name == "swan_no_whiten":
        return SWAN(groups, whitening=None)
    if name == "swan_no_norm":
        return SWAN(groups, norm=False)
    if name == "sinkgd":
        return SinkGD(groups)
    if name == "muon":
        matrices = [p for g in groups if g["use_swan"] for p in g["params"]]
        rest = [p for g in groups if not g["use_swan"] for p in g["params"]]
        return _Combined(
            [
                torch.optim.Muon(matrices, lr=lr, weight_decay=0.0),
                torch.optim.AdamW(rest, lr=adamw_lr, weight_decay=0.0),
            ]
        )
    raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")


def schedule(step: int, total: int) -> float:
    """Linear warm-up over 10 % of the steps, then cosine to 10 % of the peak (GaLore benchmark)."""
    warm = max(1, total // 10)
    if step < warm:
        return (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))


@torch.no_grad()
def evaluate(model, windows: torch.Tensor, batch: int = 32) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i : i + batch]
        logits = model(input_ids=w[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), w[:, 1:].reshape(-1), reduction="sum"
        )
        total += float(loss)
        count += w[:, 1:].numel()
    model.train()
    return total / count


def train_run(
    name: str,
    lr: float,
    seed: int,
    steps: int,
    train_ids: torch.Tensor,
    eval_ids: torch.Tensor,
    cfg: ModelConfig,
    *,
    batch: int = 16,
    evals: int = 6,
    adamw_lr: float = 3e-3,
) -> RunResult:
    """Train a fresh tiny LLaMA with one optimizer; equal data order for every optimizer."""
    if steps < 10:
        raise ValueError(f"steps must be >= 10 (the schedule needs a warm-up), got {steps}")
    model = build_model(cfg, seed)
    opt = make_optimizer(name, model, lr, adamw_lr)
    groups = opt.param_groups
    base = [g["lr"] for g in groups]
    sampler = WindowSampler(train_ids, cfg.seq, batch, seed=1000 + seed)
    swan_mats = [p for g in groups if g.get("use_swan") for p in g["params"]]
    row_sums0 = [p.detach().double().sum(-1).clone() for p in swan_mats]
    result = RunResult(name, lr, seed)
    every = max(1, steps // evals)
    result.tokens.append(0)
    result.eval_ce.append(evaluate(model, eval_ids))
    step_t, opt_t = [], []
    for step in track(range(steps), f"{name} lr={lr:g}", total=steps):
        for g, b in zip(groups, base):
            g["lr"] = b * schedule(step, steps)
        t0 = time.perf_counter()
        w = sampler.next()
        out = model(input_ids=w[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            out.logits.reshape(-1, out.logits.shape[-1]).float(), w[:, 1:].reshape(-1)
        )
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        if step == 0:
            mb = model_bytes(model)
            result.param_bytes, result.grad_bytes = mb["params"], mb["grads"]
        opt.zero_grad(set_to_none=True)
        step_t.append(t2 - t0)
        opt_t.append(t2 - t1)
        result.train_loss.append(loss.item())
        if (step + 1) % every == 0 or step + 1 == steps:
            result.tokens.append((step + 1) * batch * cfg.seq)
            result.eval_ce.append(evaluate(model, eval_ids))
    result.step_seconds = statistics.median(step_t[10:] or step_t)
    result.opt_step_seconds = statistics.median(opt_t[10:] or opt_t)
    result.state_bytes = optimizer_state_bytes(opt)
    non_swan = [p for g in groups if not g.get("use_swan") for p in g["params"]]
    result.expected_state_bytes = expected_adamw_state_bytes(non_swan)
    result.swan_params_with_state = sum(1 for p in swan_mats if len(opt.state.get(p, {})) > 0)
    if swan_mats:
        result.row_sum_drift = max(
            float((p.detach().double().sum(-1) - r0).abs().max())
            for p, r0 in zip(swan_mats, row_sums0)
        )
    return result


def lr_sweep(
    grids: dict[str, list[float]],
    seed: int,
    steps: int,
    train_ids: torch.Tensor,
    eval_ids: torch.Tensor,
    cfg: ModelConfig,
) -> dict[str, dict[float, float]]:
    """``{optimizer: {lr: final eval CE}}``: one :func:`train_run` per optimizer and learning rate
    of ``grids``, in order, all on ``seed`` (the reproduction's full mode tunes on a seed it never
    evaluates)."""
    return {
        name: {lr: train_run(name, lr, seed, steps, train_ids, eval_ids, cfg).final for lr in grid}
        for name, grid in grids.items()
    }
