"""SWAN's Muon-class mode on the quick reproduction's task (issue 50): final evaluation loss and
optimizer-step time against the paper's SWAN, paired over the quick run's seeds.

The quick reproduction of docs/swan.md trains a tiny LLaMA (H = 64, 2 layers, 300 steps, lr 1e-3
with SWAN's hybrid split) on the stdlib corpus on seeds 0-4. This script trains the same runs
with ``variant="swan"`` (the paper's ten cubic Newton-Schulz steps at beta 0.8, float32) and
``variant="swan_muon"`` (Muon's five quintic steps in bf16), same data order and initialisation
per seed, and prints each seed's final evaluation cross-entropy, the paired difference with a
t-interval over seeds (the seed is the independent unit: its model, data order and evaluation),
and the mean optimizer-step time.

Run: ``python benchmarks/swan_muon_quick.py [--seeds 5] [--threads 2]`` (about 2 minutes a seed
pair on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from scipy import stats

from icml25.swan.data import eval_windows, load_stdlib_corpus, train_tokenizer
from icml25.swan.training import ModelConfig, train_run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_stdlib_corpus()  # the quick reproduction's sizes (icml25.swan.repro._sizes)
    tok = train_tokenizer(corpus.train[:1_000_000])
    train_ids = torch.tensor(tok.encode(corpus.train[:2_000_000]).ids)
    eval_ids = torch.tensor(tok.encode(corpus.eval[:300_000]).ids)
    cfg = ModelConfig(vocab=tok.get_vocab_size())
    ev = eval_windows(eval_ids, cfg.seq, 64)
    print(
        f"# SWAN vs SWAN-muon, quick reproduction task ({args.seeds} seeds, {args.steps} steps, "
        f"{args.threads} threads)\n"
    )
    print(
        "| seed | SWAN final eval CE | SWAN-muon final eval CE | muon - SWAN | SWAN step | "
        "SWAN-muon step |\n|---|---|---|---|---|---|"
    )
    diffs, t_swan, t_muon = [], [], []
    for seed in range(args.seeds):
        a = train_run("swan", 1e-3, seed, args.steps, train_ids, ev, cfg)
        b = train_run("swan_muon", 1e-3, seed, args.steps, train_ids, ev, cfg)
        d = b.eval_ce[-1] - a.eval_ce[-1]
        diffs.append(d)
        t_swan.append(a.opt_step_seconds)
        t_muon.append(b.opt_step_seconds)
        print(
            f"| {seed} | {a.eval_ce[-1]:.4f} | {b.eval_ce[-1]:.4f} | {d:+.4f} | "
            f"{a.opt_step_seconds * 1e3:.2f} ms | {b.opt_step_seconds * 1e3:.2f} ms |"
        )
    mean = statistics.fmean(diffs)
    if len(diffs) > 1:
        sd = statistics.stdev(diffs)
        half = stats.t.ppf(0.975, len(diffs) - 1) * sd / len(diffs) ** 0.5
        interval = f"[{mean - half:+.4f}, {mean + half:+.4f}]"
    else:
        interval = "(one seed: no interval)"
    print(
        f"\nmean difference (muon - SWAN) in final eval CE: {mean:+.4f} nats, 95 % t-interval "
        f"over seeds {interval}"
    )
    print(
        f"mean optimizer step: SWAN {statistics.fmean(t_swan) * 1e3:.2f} ms, SWAN-muon "
        f"{statistics.fmean(t_muon) * 1e3:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
