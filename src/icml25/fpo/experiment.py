"""The FPO experiment on the reversal task (docs/fpo.md, "Reproduction"): the SFT model, the SAE,
every method trained from the same SFT checkpoint on the same pairs and evaluated on fresh
held-out prompts, the interleaved step timing and the full mode's layer / site sweep.

:mod:`icml25.fpo.repro` runs these as the pre-registered reproduction; each function here can be
called on its own (sizes as arguments, every random draw seeded by its arguments).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from icml25.fpo.cache import build_reference_cache
from icml25.fpo.data import PreferenceCollator
from icml25.fpo.forward import preference_pass
from icml25.fpo.losses import feature_discrepancy
from icml25.fpo.metrics import dataset_sequential_kl, reward_accuracy, token_entropy, win_outcomes
from icml25.fpo.sae import harvest_activations, train_sae
from icml25.fpo.synthetic import ReversalTask, reward, sample_preference_pairs
from icml25.fpo.trainer import PreferenceConfig, preference_step_loss, train_preference

__all__ = [
    "EVAL_PROMPTS",
    "K_FPO",
    "LR",
    "METHODS",
    "build_sae",
    "build_sft",
    "fit_sae",
    "interleaved_step_times",
    "layer_sweep",
    "measure_methods",
]

#: the methods every seed trains from the same SFT model (full mode adds the ablation variants)
METHODS = ("dpo", "simpo", "tdpo2", "fpo", "fpo_alpha0")
K_FPO = 16  # our heuristic min(50, 2 L0) for a k_sae = 8 SAE (docs/fpo.md, "Decisions")
LR = 1e-4  # one shared setting for every method (Adam, 10 warm-up steps, then constant)
EVAL_PROMPTS = 100_000  # + seed: fresh held-out evaluation prompts per seed


# -- the SFT model and its SAE --------------------------------------------------------------------


def build_sft(model_seed: int, n_sft: int, sft_steps: int) -> dict:
    """Task, tokenizer and the SFT (= reference) model of ``model_seed``."""
    from icml25.toy import build_tokenizer, tiny_causal_lm, train_causal_lm

    t0 = time.perf_counter()
    task = ReversalTask()
    tok = build_tokenizer([" ".join(task.vocabulary())] * 2, kind="word")
    ref = tiny_causal_lm(tok, d_model=64, n_layers=2, max_positions=32, seed=model_seed)
    train_causal_lm(
        ref,
        tok,
        task.sft_pairs(n_sft, model_seed),
        steps=sft_steps,
        batch_size=64,
        lr=1e-3,
        seed=model_seed,
        progress=False,
    )
    ref.eval()
    return {
        "task": task,
        "tok": tok,
        "ref": ref,
        "model_seed": model_seed,
        "t_sft": time.perf_counter() - t0,
    }


def build_sae(sft: dict, sae_seed: int, sae_steps: int, n_prompts: int) -> dict:
    """An SAE on the last block of ``sft["ref"]``: its data are the residuals at the response
    positions of the model's own samples (two each, like the pairs) on prompts disjoint from the
    pairs' (prompt and sampling seeds from ``sae_seed``), and its training seed is ``sae_seed``."""
    from icml25.llm import HFChat

    task, tok, ref = sft["task"], sft["tok"], sft["ref"]
    recs = sample_preference_pairs(
        HFChat(ref, tok), task.prompts(n_prompts, 50_000 + sae_seed), seed=10_000 + sae_seed
    )
    sae, info = fit_sae(ref, tok, recs, layer=1, steps=sae_steps, seed=sae_seed)
    return {"sae": sae, "sae_info": info, "sae_seed": sae_seed, "t_sae": info["seconds"]}


def fit_sae(ref, tok, recs, *, layer: int, steps: int, seed: int, site: str = "hook"):
    t0 = time.perf_counter()
    col = PreferenceCollator(tok)
    batches = (
        col([dict(x, idx=i) for i, x in enumerate(recs[s : s + 128], s)])
        for s in range(0, len(recs), 128)
    )
    acts = harvest_activations(ref, batches, layer=layer, max_vectors=60_000, site=site)
    sae, info = train_sae(
        acts, d_sae=512, kind="topk", k_sae=8, steps=steps, seed=seed, progress=False
    )
    info.pop("losses")
    info.update(n_vectors=len(acts), seconds=time.perf_counter() - t0)
    return sae, info


# -- one seed ---------------------------------------------------------------------------------------


def _config(method: str, seed: int, **kw: Any) -> PreferenceConfig:
    base = "fpo" if method.startswith("fpo") else method
    return PreferenceConfig(
        method=base,
        layer=kw.pop("layer", 1),
        k=kw.pop("k", K_FPO),
        lr=LR,
        batch_size=32,
        epochs=2,
        warmup_steps=10,
        seed=seed,
        max_length=32,
        max_prompt_length=16,
        progress=False,
        **kw,
    )


_VARIANTS = {"fpo_alpha0": {"alpha": 0.0}}


def _chat(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]


def _samples(model, tok, prompts, temperature: float, seed: int) -> list[str]:
    from icml25.llm import HFChat

    outs = HFChat(model, tok).chat_many(
        [[{"role": "user", "content": p}] for p in prompts],
        temperature=temperature,
        max_tokens=10,
        seed=seed,
    )
    return [o[0] for o in outs]


def measure_methods(
    st: dict, seed: int, n_prompts: int, n_held: int, n_eval: int, *, full: bool
) -> dict:
    """One seed on the SFT model and SAE in ``st`` (:func:`build_sft` and :func:`build_sae`
    merged): pairs -> reference cache -> every method from the same SFT model -> evaluation on
    ``n_eval`` held-out prompts drawn for this seed. Returns the per-method outcomes (rewards,
    per-prompt win outcomes, per-pair KLs, reward accuracy, step times, ...)."""
    from icml25.llm import HFChat

    task, tok, ref, sae = st["task"], st["tok"], st["ref"], st["sae"]
    recs = sample_preference_pairs(
        HFChat(ref, tok), task.prompts(n_prompts, 1000 + seed), seed=seed
    )
    held, train = recs[:n_held], recs[n_held:]
    col = PreferenceCollator(tok, max_length=32, max_prompt_length=16)
    cache = build_reference_cache(
        ref, sae, train, layer=1, collator=col, batch_size=128, progress=False
    )
    # fresh held-out prompts per seed: the prompts are nested in the seed, so the seed's trained
    # models are the independent unit of the win rates (a prompt set shared by every seed would
    # be a second, crossed unit that clustering by seed ignores)
    prompts = task.prompts(n_eval, EVAL_PROMPTS + seed)
    variants = _variants(full)
    methods = list(METHODS) + [v for v in variants if v not in METHODS]
    temps = (0.2, 0.4, 0.6, 0.8, 1.0) if full else (1.0,)
    m = _Measures(st, seed, prompts, temps)
    m.evaluate("sft", ref)
    for name in methods:
        m.train_and_evaluate(name, dict(variants.get(name, {})), train, held, cache, full=full)
    m.compare_with_fpo()
    out = m.out
    out["step_ms"] = interleaved_step_times(st, train, col, cache, seed)
    out["n_pairs"], out["cache_bytes"] = len(train), cache.nbytes()
    return out


def _variants(full: bool) -> dict[str, dict[str, Any]]:
    """The FPO variants beside :data:`METHODS` (their config changes): α = 0; in full mode the
    α and k ablations, the policy's top-k only and the official code's choices."""
    variants = dict(_VARIANTS)
    if full:
        variants |= {f"fpo_a{a}": {"alpha": a} for a in (0.1, 1.0, 2.0)}
        variants |= {f"fpo_k{k}": {"k": k} for k in (4, 64)}
        variants |= {
            "fpo_policy_topk": {"index_mode": "policy"},
            "fpo_official": {"paper_mode": False},
        }
    return variants


#: what :func:`measure_methods` returns per method (besides step_ms, n_pairs, cache_bytes)
_OUTCOMES = (
    "reward",
    "greedy",
    "entropy",
    "win_vs_sft",
    "kl_w",
    "kl_l",
    "acc",
    "h2h",
    "temps",
    "train_s",
    "curve",
)


@dataclass
class _Measures:
    """One seed's measurements: every model's samples and rewards on the seed's held-out
    ``prompts`` at each of ``temps``, and the outcomes :func:`measure_methods` returns."""

    st: dict
    seed: int
    prompts: list[str]
    temps: tuple[float, ...]
    out: dict[str, Any] = field(default_factory=lambda: {k: {} for k in _OUTCOMES})
    samples: dict[str, dict[float, list[str]]] = field(default_factory=dict)
    scores: dict[str, dict[float, list[float]]] = field(default_factory=dict)

    def evaluate(self, name: str, model) -> None:
        """Samples and rewards at each temperature, the mean reward at T = 1 and greedy, and the
        token entropy of the non-empty T = 1 samples."""
        tok, prompts, out = self.st["tok"], self.prompts, self.out
        self.samples[name] = {t: _samples(model, tok, prompts, t, self.seed) for t in self.temps}
        self.scores[name] = {
            t: [reward(p, y) for p, y in zip(prompts, s)] for t, s in self.samples[name].items()
        }
        out["reward"][name] = float(np.mean(self.scores[name][1.0]))
        greedy = _samples(model, tok, prompts, 0.0, self.seed)
        out["greedy"][name] = float(np.mean([reward(p, y) for p, y in zip(prompts, greedy)]))
        nonempty = [(p, y) for p, y in zip(prompts, self.samples[name][1.0]) if y.strip()]
        out["entropy"][name] = (
            token_entropy(model, tok, [_chat(p) for p, _ in nonempty], [y for _, y in nonempty])
            if nonempty
            else float("nan")
        )

    def train_and_evaluate(
        self, name: str, kw: dict, train: list, held: list, cache, *, full: bool
    ) -> None:
        """Method ``name`` trained from a copy of the SFT model on ``train`` (the full mode's FPO
        records Figure 4's curve), then evaluated: samples, wins over SFT, per-pair sequential
        KLs and reward accuracy on the ``held`` pairs."""
        tok, ref, sae, out = self.st["tok"], self.st["ref"], self.st["sae"], self.out
        pol = copy.deepcopy(ref)
        curve: list[dict] = []
        cb = (
            _curve_callback(pol, ref, sae, tok, held[:100], curve)
            if (full and name == "fpo")
            else None
        )
        t0 = time.perf_counter()
        train_preference(
            pol,
            tok,
            train,
            _config(name, self.seed, **kw),
            sae=sae,
            ref_cache=cache,
            ref_model=ref,
            callback=cb,
        )
        out["train_s"][name] = time.perf_counter() - t0
        if curve:
            out["curve"][name] = curve
        self.evaluate(name, pol)
        out["win_vs_sft"][name] = win_outcomes(self.scores[name][1.0], self.scores["sft"][1.0])
        kw_, kl_ = dataset_sequential_kl(pol, ref, tok, held)
        out["kl_w"][name], out["kl_l"][name] = kw_.tolist(), kl_.tolist()
        out["acc"][name] = reward_accuracy(pol, tok, held)
        del pol

    def compare_with_fpo(self) -> None:
        """FPO head to head with DPO, SimPO and TDPO-2 at T = 1, and its mean win rate over SFT
        and each baseline at each temperature."""
        scores = self.scores
        for m in ("dpo", "simpo", "tdpo2"):
            self.out["h2h"][m] = win_outcomes(scores["fpo"][1.0], scores[m][1.0])
        for t in self.temps:
            self.out["temps"][t] = {
                m: float(np.mean(win_outcomes(scores["fpo"][t], scores[m][t])))
                for m in ("sft", "dpo", "simpo", "tdpo2")
            }


def interleaved_step_times(st: dict, train: list, col, cache, seed: int, steps: int = 25) -> dict:
    """Optimizer-step wall-clock of FPO, TDPO-2 and DPO (offline reference) on the same batches,
    interleaved (the order rotates every step) so machine drift hits all alike; steps 5-25."""
    ref, sae = st["ref"], st["sae"]
    cfgs = {m: _config(m, seed) for m in ("fpo", "tdpo2", "dpo")}
    pols = {m: copy.deepcopy(ref).train() for m in cfgs}
    opts = {m: torch.optim.Adam(p.parameters(), lr=LR) for m, p in pols.items()}
    gen = torch.Generator().manual_seed(seed)
    times: dict[str, list[float]] = {m: [] for m in cfgs}
    order = list(cfgs)
    for step in range(steps):
        idx = torch.randint(len(train), (32,), generator=gen).tolist()
        batch = col([dict(train[i], idx=i) for i in idx])
        order = order[1:] + order[:1]
        for m in order:
            t0 = time.perf_counter()
            loss, _ = preference_step_loss(
                pols[m], batch, cfgs[m], sae=sae, ref_cache=cache, ref_model=ref
            )
            opts[m].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(pols[m].parameters(), 1.0)
            opts[m].step()
            if step >= 4:
                times[m].append((time.perf_counter() - t0) * 1e3)
    return times


def _curve_callback(pol, ref, sae, tok, held, curve: list, every: int = 4):
    """Figure 4 (right): D_FPO margin and sequential-KL margin on held-out pairs over training."""
    col = PreferenceCollator(tok, max_length=32, max_prompt_length=16)
    b = col([dict(x, idx=i) for i, x in enumerate(held)])
    with torch.no_grad():
        rc = preference_pass(ref, b, sae=sae, layer=1).halves("codes")

    def cb(step: int, model) -> None:
        if step % every:
            return
        with torch.no_grad():
            pc = preference_pass(model, b, sae=sae, layer=1).halves("codes")
            d_w = feature_discrepancy(pc[0], rc[0], K_FPO)
            d_l = feature_discrepancy(pc[1], rc[1], K_FPO)
            from icml25.fpo.metrics import sequential_kl

            kl = sequential_kl(model, ref, b)
        n = len(held)
        curve.append(
            {
                "step": step,
                "d_margin": float((d_l - d_w).mean()),
                "kl_margin": float((kl[n:] - kl[:n]).mean()),
            }
        )

    return cb


# -- full mode: layer / site sweep (paper Table 3 analogue) ---------------------------------------


def layer_sweep(
    seeds: list[int],
    n_sft: int,
    sft_steps: int,
    sae_steps: int,
    n_prompts: int,
    n_held: int,
    n_eval: int,
) -> dict[str, tuple[list[float], list[float], list[float], float]]:
    """A 4-block SFT model; an SAE at each block's residual output and at each MLP output; FPO
    with each, on each of ``seeds``: ``{"residual 0": (win rates vs SFT, reward accuracies,
    entropies, the SAE's FVE), ..., "MLP 3": ...}``, one value per seed."""
    from icml25.llm import HFChat
    from icml25.toy import build_tokenizer, tiny_causal_lm, train_causal_lm

    task = ReversalTask()
    tok = build_tokenizer([" ".join(task.vocabulary())] * 2, kind="word")
    ref = tiny_causal_lm(tok, d_model=64, n_layers=4, max_positions=32, seed=0)
    train_causal_lm(
        ref, tok, task.sft_pairs(n_sft, 0), steps=sft_steps, batch_size=64, lr=1e-3, progress=False
    )
    ref.eval()
    sae_recs = sample_preference_pairs(
        HFChat(ref, tok), task.prompts(n_prompts, 50_000), seed=10_000
    )
    prompts = task.prompts(n_eval, 99)
    res = {}
    col = PreferenceCollator(tok, max_length=32, max_prompt_length=16)
    data = {}
    for s in seeds:
        recs = sample_preference_pairs(HFChat(ref, tok), task.prompts(n_prompts, 1000 + s), seed=s)
        data[s] = (recs[:n_held], recs[n_held:])
    base = {
        s: [reward(p, y) for p, y in zip(prompts, _samples(ref, tok, prompts, 1.0, s))]
        for s in seeds
    }
    for site in ("hook", "mlp"):
        for layer in range(4):
            sae, info = fit_sae(ref, tok, sae_recs, layer=layer, steps=sae_steps, seed=0, site=site)
            wins, accs, ents = [], [], []
            for s in seeds:
                held, train = data[s]
                cache = build_reference_cache(
                    ref,
                    sae,
                    train,
                    layer=layer,
                    collator=col,
                    batch_size=128,
                    site=site,
                    progress=False,
                )
                pol = copy.deepcopy(ref)
                train_preference(
                    pol,
                    tok,
                    train,
                    _config("fpo", s, layer=layer, site=site),
                    sae=sae,
                    ref_cache=cache,
                )
                ys = _samples(pol, tok, prompts, 1.0, s)
                wins.append(
                    float(
                        np.mean(win_outcomes([reward(p, y) for p, y in zip(prompts, ys)], base[s]))
                    )
                )
                accs.append(reward_accuracy(pol, tok, held))
                ne = [(p, y) for p, y in zip(prompts, ys) if y.strip()]
                ents.append(token_entropy(pol, tok, [_chat(p) for p, _ in ne], [y for _, y in ne]))
            name = f"{'residual' if site == 'hook' else 'MLP'} {layer}"
            res[name] = (wins, accs, ents, info["fve"])
    return res
