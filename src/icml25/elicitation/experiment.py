"""The reproduction's experiment in the planted-trigger world (docs/elicitation.md, "Reproduction"):
one world's checkpoints (the target with its fidelity gate, the reverse model) and the loops on
them (Frank-Wolfe against equal-compute restarts, evaluated per iterate and per mixture prefix).

``repro.py`` checks the claims on what these functions return; they are usable on their own::

    sz = ToySizes(target_steps=200, target_data=4000, natural=2000, sft_steps=150, iters=2,
                  rounds=2, n_eval=20, gate_n=50, lam=0.1)
    ck = checkpoints(0, sz, Path("runs/toy"), gate=False)   # cached in runs/toy/checkpoints
    res = loops(ck, 0, sz, Path("runs/toy"), ablations=False)
    res["mix_cov"]["fw"][-1], res["mix_cov"]["restart"][-1]  # coverage after T iterations
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path
from typing import Any

__all__ = ["ToySizes", "checkpoints", "evaluate_investigator", "loops"]


@dataclasses.dataclass(frozen=True)
class ToySizes:
    """The sizes of one run of the toy, and the Frank-Wolfe λ (on sum-normalised log-probs)."""

    target_steps: int  # training steps of the target
    target_data: int  # its (prompt, response) pairs
    natural: int  # natural prompts of the reverse model's corpus
    sft_steps: int  # training steps of the reverse model
    iters: int  # Frank-Wolfe iterations T
    rounds: int  # DPO rounds per iteration
    n_eval: int  # samples per behaviour in an evaluation
    gate_n: int  # prompts per trigger count in the fidelity gate
    lam: float  # Frank-Wolfe's diversity penalty λ


def _atomic_save(state: Any, path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def checkpoints(seed: int, sz: ToySizes, out: Path, *, gate: bool) -> dict[str, Any]:
    """The target (with its fidelity gate) and the reverse model of one world seed, cached in
    ``out/checkpoints``."""
    import torch

    from icml25.elicitation.backends import HFTargetModel
    from icml25.elicitation.investigator import Investigator
    from icml25.elicitation.sft import build_reverse_pairs, reverse_sft
    from icml25.elicitation.toy import PlantedTriggerWorld
    from icml25.toy import train_causal_lm

    d = out / "checkpoints"
    d.mkdir(parents=True, exist_ok=True)
    w = PlantedTriggerWorld(seed)
    tok = w.build_tokenizer()
    tag = f"s{seed}_t{sz.target_steps}"
    target = w.build_model(tok, seed)
    tp = d / f"target_{tag}.pt"
    t0 = time.perf_counter()
    if tp.exists():
        target.load_state_dict(torch.load(tp))
    else:
        data = w.target_data(sz.target_data, random.Random(seed))
        train_causal_lm(
            target,
            tok,
            data,
            steps=sz.target_steps,
            batch_size=64,
            lr=1e-3,
            warmup=50,
            max_length=32,
            seed=seed,
            progress=False,
        )
        _atomic_save(target.state_dict(), tp)
    target.eval()
    tgt = HFTargetModel(target, tok, use_chat_template=True, add_eos=True, batch_size=256)
    fid = w.fidelity(tgt, sz.gate_n, random.Random(seed + 1))
    if gate:
        w.check_fidelity(fid)
    t_target = time.perf_counter() - t0
    inv_model = w.build_model(tok, seed + 1)
    ip = d / f"reverse_{tag}_s{sz.sft_steps}.pt"
    if ip.exists():
        inv_model.load_state_dict(torch.load(ip))
        inv = Investigator(
            inv_model, tok, allowed_token_ids=w.content_ids(tok), exact_length=w.prompt_len
        )
    else:
        xs = w.natural_prompts(sz.natural, random.Random(seed + 2))
        pairs = build_reverse_pairs(tgt, xs, max_new_tokens=6, seed=seed + 3)
        inv = Investigator(
            inv_model, tok, allowed_token_ids=w.content_ids(tok), exact_length=w.prompt_len
        )
        reverse_sft(
            inv,
            pairs,
            steps=sz.sft_steps,
            lr=1e-3,
            batch_size=64,
            warmup=50,
            seed=seed,
            progress=False,
        )
        _atomic_save(inv_model.state_dict(), ip)
    inv_model.eval()
    return {
        "seed": seed,
        "world": w,
        "tok": tok,
        "target": tgt,
        "sft": inv,
        "fidelity": {str(k): v for k, v in fid.items()},
        "seconds_target": t_target,
        "seconds_total": time.perf_counter() - t0,
    }


def evaluate_investigator(ck: dict[str, Any], q: Any, n: int, seed: int) -> dict[str, Any]:
    """Success rate, mean log p_m, per-behaviour trigger histogram of successes, coverage, mean
    trigger count and distinct-2 of ``n`` samples per behaviour."""
    from icml25.elicitation.metrics import distinct_n, successes, trigger_coverage

    w, tgt = ck["world"], ck["target"]
    bs = w.behaviors
    samp = q.sample(bs, n, seed=seed)
    flat_b = [b for b, s in zip(bs, samp) for _ in s]
    flat_x = [x for s in samp for x in s]
    ok = successes(tgt, flat_x, flat_b, max_new_tokens=6)
    lp = tgt.logprob(flat_x, flat_b)
    cred = [
        [w.credited_trigger(x, j) for x, o in zip(samp[j], ok[j * n : (j + 1) * n]) if o]
        for j in range(len(bs))
    ]
    return {
        "sr": sum(ok) / len(ok),
        "logprob": float(lp.clamp(min=-50).mean()),
        "coverage": trigger_coverage(cred),
        "hist": [[c.count(k) for k in range(3)] for c in cred],
        "mean_count": sum(w.counts(x)[j] for j in range(len(bs)) for x in samp[j]) / (n * len(bs)),
        "distinct2": distinct_n(flat_x, 2),
    }


def loops(ck: dict[str, Any], seed: int, sz: ToySizes, out: Path, *, ablations: bool) -> dict:
    """Frank-Wolfe (λ = ``sz.lam``) and restarts (λ = 0) on one loop seed, evaluated per iterate
    and per mixture prefix; cached as JSON. ``ablations`` adds λ = 0.03, 0.3, 1 and the "last"
    penalty."""
    from icml25.elicitation.frank_wolfe import frank_wolfe
    from icml25.elicitation.investigator import InvestigatorMixture

    cache = (
        out
        / f"loops_c{ck['seed']}_l{seed}_r{sz.rounds}_T{sz.iters}_n{sz.n_eval}_a{int(ablations)}.json"
    )
    if cache.exists():
        res = json.loads(cache.read_text())
        res["checkpoint"] = {k: ck[k] for k in ("seed", "fidelity")}
        return res
    t0 = time.perf_counter()
    w = ck["world"]
    fw_kw = dict(
        n_iters=sz.iters,
        rounds_per_iter=sz.rounds,
        n_candidates=16,
        pairs_per_behavior=4,
        min_gap=0.1,
        beta=0.1,
        lr=2e-4,
        steps_per_round=2,
    )
    evaluate = evaluate_investigator
    res: dict[str, Any] = {"seed": seed, "sft": evaluate(ck, ck["sft"], sz.n_eval, seed + 5)}
    variants = {"fw": dict(lam=sz.lam, seed=2 * seed), "restart": dict(lam=0.0, seed=2 * seed + 1)}
    if ablations:
        variants.update(
            {f"fw_lam{lam:g}": dict(lam=lam, seed=2 * seed) for lam in (0.03, 0.3, 1.0)}
        )
        variants["fw_last"] = dict(lam=sz.lam, seed=2 * seed, penalty="last")
    for name, kw in variants.items():
        spreads: list[tuple[int, int, float, float]] = []
        mix = frank_wolfe(
            w.behaviors,
            ck["target"],
            ck["sft"],
            callbacks=[
                lambda t, k, st, spreads=spreads: spreads.append(
                    (
                        t,
                        k,
                        st["spread"].get("reward_std", 0.0),
                        st["spread"].get("penalty_std", 0.0),
                    )
                )
            ],
            **fw_kw,
            **kw,
        )
        its = [evaluate(ck, q, sz.n_eval, seed + 11 + i) for i, q in enumerate(mix.members)]
        mixes = [
            evaluate(ck, InvestigatorMixture(mix.members[: t + 1]), sz.n_eval, seed + 31 + t)
            for t in range(len(mix.members))
        ]
        res[name] = {"iterates": its, "mixtures": mixes, "spreads": spreads}
    res["seconds"] = time.perf_counter() - t0
    summary = {
        "sr": {
            "sft": res["sft"]["sr"],
            **{k: [i["sr"] for i in res[k]["iterates"]] for k in variants},
        },
        "logprob": {
            "sft": res["sft"]["logprob"],
            **{k: [i["logprob"] for i in res[k]["iterates"]] for k in variants},
        },
        "mix_sr": {k: [m["sr"] for m in res[k]["mixtures"]] for k in variants},
        "mix_cov": {k: [m["coverage"] for m in res[k]["mixtures"]] for k in variants},
    }
    res.update(summary)
    cache.write_text(json.dumps(res))
    res["checkpoint"] = {k: ck[k] for k in ("seed", "fidelity")}
    return res
