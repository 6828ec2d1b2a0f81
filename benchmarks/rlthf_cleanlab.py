"""RLTHF's ranking of likely-wrong AI labels beside confident learning (cleanlab), one process.

RLTHF ranks the pool by the *in-sample* margin of a reward model trained on the AI labels (the
bottom of the sorted curve first); cleanlab's ``find_label_issues(..., return_indices_ranked_by=
"self_confidence")`` ranks by *out-of-sample* probabilities, here ``[1 - sigma(m), sigma(m)]`` from
5-fold cross-fitted reward models (5 extra fits). On the text world we report, per budget k:

* precision@k of "the AI label is wrong" for both rankings (and cleanlab's own issue-set size);
* end-to-end: humans fix each method's top-k (one shot, weight 1, nothing dropped) and the
  reward model is retrained; test accuracy against human labels;
* cost: the ranking time of each beside its floor (one ``np.argsort`` of the scores), and the
  reward-model fits each needs.

Run: ``python benchmarks/rlthf_cleanlab.py [--n 4000 --seeds 0 1 2 --encoder minilm]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from icml25.rlthf import EmbeddingRewardModel, RewardDistribution, make_textworld
from icml25.rlthf.loop import cross_fit_margins, preference_accuracy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--encoder", default="minilm", choices=("minilm", "hashing"))
    args = ap.parse_args()
    from cleanlab.filter import find_label_issues

    budgets = (0.02, 0.06, 0.10)
    rows: dict[str, list[list[float]]] = {}
    times: dict[str, list[float]] = {
        "rlthf rank": [],
        "cleanlab rank": [],
        "argsort floor": [],
        "rlthf fits": [],
        "cleanlab fits": [],
    }
    n_issues = []
    rm = EmbeddingRewardModel(encoder=args.encoder, cache_dir="/tmp/icml25-rlthf-bench")
    for seed in args.seeds:
        w = make_textworld(args.n, args.n_test, seed=seed)
        wrong = w.ai_labels != w.train.human_labels
        idx = np.arange(args.n)
        t0 = time.perf_counter()
        rm.fit(w.train, idx, w.ai_labels, None, seed=seed)
        m_in = rm.margins(w.train, idx, w.ai_labels)
        times["rlthf fits"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m_oof = cross_fit_margins(rm, w.train, idx, w.ai_labels, folds=5, seed=seed)
        times["cleanlab fits"].append(time.perf_counter() - t0)
        # pred_probs over the classes {0, 1} of the AI label (1 = response A preferred): the
        # margin is under the AI label, so P(label = z) = sigma(m)
        p_label = 1 / (1 + np.exp(-m_oof))
        p1 = np.where(w.ai_labels == 1, p_label, 1 - p_label)
        probs = np.stack([1 - p1, p1], 1)

        t0 = time.perf_counter()
        order_rlthf = RewardDistribution(m_in, idx).order[::-1]  # bottom of the curve first
        times["rlthf rank"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        issues = find_label_issues(w.ai_labels, probs, return_indices_ranked_by="self_confidence")
        times["cleanlab rank"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        np.argsort(m_in, kind="stable")
        times["argsort floor"].append(time.perf_counter() - t0)
        n_issues.append(len(issues))
        order_cl = np.argsort(m_oof, kind="stable")  # cleanlab's score, ranked over the whole pool
        for k in budgets:
            b = int(np.ceil(k * args.n))
            for name, order in (
                ("rlthf (in-sample)", order_rlthf),
                ("cleanlab (out-of-fold)", order_cl),
            ):
                top = order[:b]
                z = w.ai_labels.copy()
                z[top] = w.train.human_labels[top]
                rm.fit(w.train, idx, z, None, seed=seed + 1)
                acc = preference_accuracy(rm, w.test)
                rows.setdefault(f"{name} @ {k:.0%}", []).append([wrong[top].mean(), acc])
    print(
        f"text world, N = {args.n}, test {args.n_test}, seeds {args.seeds}, encoder {args.encoder}; "
        f"AI-label error rate {np.mean([1 - make_textworld(args.n, 0, seed=s).ai_accuracy for s in args.seeds]):.3f}"
    )
    print()
    print(
        "| ranking @ budget | precision@k (AI label wrong) | RM test accuracy after fixing top-k |"
    )
    print("|---|---|---|")
    for name, vals in rows.items():
        v = np.array(vals)
        print(
            f"| {name} | {v[:, 0].mean():.3f} ± {v[:, 0].std():.3f} | "
            f"{v[:, 1].mean():.3f} ± {v[:, 1].std():.3f} |"
        )
    print()
    print(
        f"cleanlab's find_label_issues flags {np.mean(n_issues):.0f} pairs on average "
        f"({np.mean(n_issues) / args.n:.1%} of the pool)."
    )
    print()
    floor = np.median(times["argsort floor"])
    print("| cost | median | / argsort floor |")
    print("|---|---|---|")
    for key in ("rlthf rank", "cleanlab rank", "argsort floor"):
        t = np.median(times[key])
        print(f"| {key} | {t * 1e3:.2f} ms | {t / floor:.1f}x |")
    for key in ("rlthf fits", "cleanlab fits"):
        print(f"| {key} (reward-model training) | {np.median(times[key]):.2f} s | - |")


if __name__ == "__main__":
    main()
