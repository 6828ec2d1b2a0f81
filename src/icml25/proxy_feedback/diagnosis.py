"""The synthetic "diagnosis" text task: a :class:`SyntheticPreferenceWorld` written as text, for
the LLM parameterisation (docs/proxy_feedback.md, "LLM path").

A prompt lists one symptom token per input coordinate, ``s{i}_{b}``, with ``b`` the quartile of
``x_i`` under ``N(0, 1)``; inputs are drawn on the quartiles' conditional means, so a prompt
determines ``x`` and the expert's next-token distribution over the ``K`` disease tokens
``d{k}`` is exactly ``π†(x)``. Preference pairs come from :func:`sample_preferences` on those
inputs.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from icml25.proxy_feedback.data import sample_preferences
from icml25.proxy_feedback.worlds import SyntheticPreferenceWorld

__all__ = ["DiagnosisTask", "prepare_llm_path", "run_llm_path"]

#: E[Z | Z in quartile b] for Z ~ N(0, 1): ±φ(0.6745)·4 and ±(φ(0)-φ(0.6745))·4
QUARTILE_MEANS = (-1.2711, -0.3178, 0.3178, 1.2711)


class DiagnosisTask:
    """Prompts, responses and preference pairs of a world, as words.

    ``x`` is drawn uniformly over the ``4^{d_x}`` quartile cells (each cell has probability
    ``4^{-d_x}`` under ``N(0, I)``), at the cells' conditional means."""

    def __init__(self, world: SyntheticPreferenceWorld) -> None:
        if not isinstance(world, SyntheticPreferenceWorld):
            raise TypeError(f"world must be a SyntheticPreferenceWorld, got {type(world).__name__}")
        self.world = world
        self.d_x, self.K = world.d_x, world.n_outputs
        self.symptoms = [f"s{i}_{b}" for i in range(self.d_x) for b in range(4)]
        self.diseases = [f"d{k}" for k in range(self.K)]
        self._means = torch.tensor(QUARTILE_MEANS, dtype=torch.float64)

    def sample_x(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        b = torch.randint(0, 4, (n, self.d_x), generator=generator)
        return self._means[b]

    def prompts(self, x: Tensor) -> list[str]:
        b = torch.bucketize(
            x.to(torch.float64), torch.tensor([-0.6745, 0.0, 0.6745], dtype=torch.float64)
        )
        return [" ".join(f"s{i}_{int(v)}" for i, v in enumerate(row)) for row in b]

    @staticmethod
    def with_bos(prompt: str, tokenizer: Any) -> str:
        """The prompt as the model saw it in training (``train_causal_lm`` starts texts with BOS)."""
        return f"{tokenizer.bos_token} {prompt}" if tokenizer.bos_token else prompt

    def tokenizer(self) -> Any:
        from icml25.toy import build_tokenizer

        return build_tokenizer([" ".join(self.symptoms + self.diseases)], kind="word")

    def sft_texts(self, n: int, generator: torch.Generator, *, policy: str = "proxy") -> list[str]:
        """``prompt disease`` texts with the disease drawn from the proxy's (or expert's) policy."""
        x = self.sample_x(n, generator)
        p = self._policy(policy)(x)
        y = torch.multinomial(p.float(), 1, generator=generator).squeeze(1)
        return [f"{q} {self.diseases[int(k)]}" for q, k in zip(self.prompts(x), y)]

    def pairs(
        self, n: int, generator: torch.Generator, *, policy: str, tokenizer: Any = None
    ) -> list[dict[str, str]]:
        """``n`` TRL-format preference records labelled by ``policy`` ("proxy" or "expert");
        with ``tokenizer``, prompts start with its BOS token as in training."""
        x = self.sample_x(n, generator)
        b = sample_preferences(self._policy(policy), n, generator=generator, x=x)
        qs = self.prompts(x)
        if tokenizer is not None:
            qs = [self.with_bos(q, tokenizer) for q in qs]
        return [
            {
                "prompt": q,
                "chosen": " " + self.diseases[int(w)],
                "rejected": " " + self.diseases[int(lo)],
            }
            for q, w, lo in zip(qs, b.y_w, b.y_l)
        ]

    def _policy(self, which: str):
        if which not in ("proxy", "expert"):
            raise ValueError(f"policy must be 'proxy' or 'expert', got {which!r}")
        return self.world.proxy_policy if which == "proxy" else self.world.true_policy

    @torch.no_grad()
    def tv(
        self, model: Any, tokenizer: Any, n: int = 500, seed: int = 0, **forward_kw: Any
    ) -> dict[str, float]:
        """Mean TV between the model's next-token distribution after a prompt (renormalised over
        the disease tokens) and ``π†``, on ``n`` test prompts; ``off_mass`` is the mean
        probability the model puts outside the disease tokens."""
        from icml25.proxy_feedback.llm import next_token_probs

        x = self.sample_x(n, torch.Generator().manual_seed(50_000 + seed))
        prompts = [self.with_bos(q, tokenizer) for q in self.prompts(x)]
        probs = next_token_probs(model, tokenizer, prompts, **forward_kw).double()
        ids = [tokenizer(d, add_special_tokens=False)["input_ids"][0] for d in self.diseases]
        q = probs[:, ids]
        mass = q.sum(-1)
        q = q / mass[:, None].clamp_min(1e-12)
        p = self.world.true_policy(x)
        return {
            "tv": float((0.5 * (p - q).abs().sum(-1)).mean()),
            "off_mass": float((1 - mass).mean()),
        }


def prepare_llm_path(
    seed: int = 0,
    n_expert: int = 100,
    *,
    n_sft: int = 4000,
    n_proxy_pairs: int = 2000,
    sft_steps: int = 400,
    warmup_steps: int = 300,
    stage1_steps: int = 300,
    bottleneck_dim: int = 12,  # warm-up KL ~0.02: the bottleneck also carries the symptom tokens
    beta: float = 1.0,
    reference: bool = False,
    n_test: int = 500,
) -> dict[str, Any]:
    """Everything up to stage 1 on the diagnosis task (``hold`` world): SFT a tiny Llama on
    proxy-labelled texts, wrap it with a simplex bottleneck, warm it up, then stage-1 DPO on proxy
    pairs (body + bottleneck). ``reference=False`` uses a uniform DPO reference, which with
    ``β = 1`` targets the labelling policy itself (the synthetic setting). Returns the task,
    tokenizer, SFT model ``base``, stage-1 model, ``n_expert`` expert pairs and TVs so far."""
    from icml25.proxy_feedback.llm import SimplexBottleneckLM, dpo_stage, warmup_bottleneck
    from icml25.toy import tiny_causal_lm, train_causal_lm

    world = SyntheticPreferenceWorld(seed=seed)
    task = DiagnosisTask(world)
    tok = task.tokenizer()
    g = torch.Generator().manual_seed(60_000 + seed)
    texts = task.sft_texts(n_sft, g)
    base = tiny_causal_lm(tok, d_model=64, n_layers=2, n_heads=2, max_positions=16, seed=seed)
    train_causal_lm(
        base,
        tok,
        texts,
        steps=sft_steps,
        batch_size=64,
        lr=3e-3,
        max_length=16,
        seed=seed,
        progress=False,
    )
    out: dict[str, Any] = {"tv": {"sft": task.tv(base, tok, n_test, seed)}}
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=bottleneck_dim, seed=seed)
    wu = warmup_bottleneck(m, texts[:1000], warmup_steps, tokenizer=tok, seed=seed)
    out["warmup_heldout_kl"] = wu["heldout_kl"]
    out["tv"]["warmed"] = task.tv(m, tok, n_test, seed)
    proxy_pairs = task.pairs(n_proxy_pairs, g, policy="proxy", tokenizer=tok)
    ref = copy.deepcopy(m) if reference else None
    dpo_stage(
        m,
        ref,
        proxy_pairs,
        tokenizer=tok,
        trainable="all",
        lr=1e-3,
        beta=beta,
        steps=stage1_steps,
        batch_size=32,
        seed=seed,
    )
    out["tv"]["stage1"] = task.tv(m, tok, n_test, seed)
    out.update(
        task=task,
        tokenizer=tok,
        base=base,
        stage1=m,
        expert_pairs=task.pairs(n_expert, g, policy="expert", tokenizer=tok),
    )
    return out


def run_llm_path(
    seed: int = 0,
    ns: tuple[int, ...] = (35, 100),
    *,
    stage2_steps: int = 200,
    stage2_lr: float = 1e-2,
    beta: float = 1.0,
    reference: bool = False,
    n_test: int = 500,
    **prepare_kw: Any,
) -> dict[str, Any]:
    """:func:`prepare_llm_path`, then stage-2 adapter-only DPO on ``n`` expert pairs and, beside
    it, DPO of every parameter of the SFT model on the same pairs. Returns next-token TVs to
    ``π†`` (``{name: {"tv", "off_mass"}}``) and the warm-up's held-out KL."""
    from icml25.proxy_feedback.llm import dpo_stage

    prep = prepare_llm_path(
        seed, max(ns), beta=beta, reference=reference, n_test=n_test, **prepare_kw
    )
    task, tok, base, m = prep["task"], prep["tokenizer"], prep["base"], prep["stage1"]
    out: dict[str, Any] = {**prep["tv"], "warmup_heldout_kl": prep["warmup_heldout_kl"]}
    for n in ns:
        pairs = prep["expert_pairs"][:n]
        m2 = copy.deepcopy(m)
        dpo_stage(
            m2,
            copy.deepcopy(m) if reference else None,
            pairs,
            tokenizer=tok,
            trainable="adapter",
            lr=stage2_lr,
            beta=beta,
            steps=stage2_steps,
            batch_size=min(n, 32),
            seed=seed,
        )
        out[f"two_stage@{n}"] = task.tv(m2, tok, n_test, seed)
        b2 = copy.deepcopy(base)
        dpo_stage(
            b2,
            base if reference else None,
            pairs,
            tokenizer=tok,
            trainable="all",
            lr=1e-3,
            beta=beta,
            steps=stage2_steps,
            batch_size=min(n, 32),
            seed=seed,
        )
        out[f"dpo_all@{n}"] = task.tv(b2, tok, n_test, seed)
    return out
