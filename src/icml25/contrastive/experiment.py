"""The experiments behind the reproduction (docs/contrastive.md, "Reproduction"), callable on
their own.

- :func:`theory_sandbox` (Part A): free unit embeddings optimised under InfoNCE, SimCLR, DCL,
  DHEL and SigLIP-style losses, against the paper's closed-form optima and bounds.
- :func:`load_digits_split` and :func:`run_simclr` (Part B): one SimCLR run on scikit-learn
  digits, with or without VRNS, with its linear-probe accuracy and negative-similarity
  statistics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from icml25.contrastive import theory
from icml25.contrastive.augment import digits_augment
from icml25.contrastive.losses import (
    ContrastiveLoss,
    dcl_loss,
    dhel_loss,
    independent_additive_loss,
    infonce_loss,
    nt_xent_loss,
)
from icml25.contrastive.stats import embed_two_views, similarity_stats
from icml25.contrastive.train import DigitsSimCLR, linear_probe, train_simclr


# -- Part A: the theory sandbox ----------------------------------------------------------------
def theory_sandbox(steps: int, d: int = 16, n: int = 8) -> tuple[dict, list[list[str]]]:
    """Part A of the reproduction (docs/contrastive.md): free unit embeddings (``n`` of them in
    ``d`` dimensions, float64) optimised for ``steps`` steps under each loss, against the paper's
    predicted optima (Thm 5.1, 5.3/Ex. 5.4, 5.5) and the alignment bound (Thm 5.2). Returns the
    measured quantities the checks read and one row per setting (setting, positive mean, negative
    mean, predicted, within tolerance; formatted cells)."""
    box = _Sandbox(steps, d, n)
    box.etf_optima()  # Thm 5.1
    box.siglip_optima()  # Thm 5.3 / Ex. 5.4, and the within-view fix
    box.alignment_bound()  # Thm 5.2
    box.minibatch_variance()  # Thm 5.5
    return box.m, box.rows


@dataclass
class _Sandbox:
    """Part A's settings, the measured quantities the checks read (``m``) and the table's rows;
    each method is one of the paper's results."""

    steps: int
    d: int
    n: int
    m: dict = field(default_factory=lambda: {"a1_pos_min": 1.0, "a1_neg_dev": 0.0})
    rows: list[list[str]] = field(default_factory=list)
    thr: float = field(init=False)
    var_lo: float = field(init=False)
    var_hi: float = field(init=False)
    off: torch.Tensor = field(init=False)  # the off-diagonal (negative pairs) of S

    def __post_init__(self) -> None:
        self.thr = theory.etf_threshold(self.n)  # the ETF's off-diagonal -1/(n-1)
        self.var_lo, self.var_hi = theory.minibatch_variance_bounds(self.n, 4)  # Thm 5.5, m = 4
        self.off = ~torch.eye(self.n, dtype=torch.bool)

    def _similarities(self, loss: Callable[..., torch.Tensor], **kw: Any) -> torch.Tensor:
        """``S = U V^T`` of the free embeddings optimised under ``loss``."""
        U, V = theory.optimize_embeddings(loss, self.n, self.d, steps=self.steps, **kw)
        return U @ V.T

    def etf_optima(self) -> None:
        """Thm 5.1: InfoNCE, SimCLR, DCL and DHEL reach perfect alignment and the simplex ETF."""
        m, thr, off = self.m, self.thr, self.off
        for name, fn in (
            ("InfoNCE", infonce_loss),
            ("SimCLR", nt_xent_loss),
            ("DCL", dcl_loss),
            ("DHEL", dhel_loss),
        ):
            S = self._similarities(lambda a, b, fn=fn: fn(a, b, 0.5, validate=False))
            pos_min, neg_dev = float(S.diagonal().min()), float((S[off] - thr).abs().max())
            m["a1_pos_min"] = min(m["a1_pos_min"], pos_min)
            m["a1_neg_dev"] = max(m["a1_neg_dev"], neg_dev)
            good = pos_min >= 0.999 and neg_dev <= 1e-3
            self.rows.append(
                [
                    f"{name} t=0.5",
                    f"{float(S.diagonal().mean()):.5f}",
                    f"{float(S[off].mean()):.5f}",
                    f"1, {thr:.5f}",
                    f"{good}",
                ]
            )

    def _siglip_means(self, phi: float, psi: float, c2: int) -> tuple[float, float]:
        """Mean positive and negative similarity at the optimum of the independent additive
        (SigLIP-style) loss with within-view weight ``c2``."""
        S = self._similarities(
            lambda a, c: independent_additive_loss(a, c, phi, psi, 1, c2, validate=False)
        )
        return float(S.diagonal().mean()), float(S[self.off].mean())

    def siglip_optima(self) -> None:
        """Thm 5.3 / Ex. 5.4: SigLIP-style losses separate excessively exactly when Eq. 10
        holds (then the optimum is the predicted one, not aligned), and the within-view term
        (``c2 = 1``) restores the ETF."""
        m, thr = self.m, self.thr
        eq10_right, etf_pos, etf_dev = 0, 1.0, 0.0
        for t, b, expect_sep in ((5.0, 2.0, True), (10.0, 6.0, False)):
            phi, psi = theory.siglip_phi_psi(self.n, t, b)
            cond = theory.siglip_excessive_separation(self.n, t, b)
            eq10_right += int(cond == expect_sep)
            pred = theory.predicted_ind_add_optimum(phi, psi, self.n)
            pos, neg = self._siglip_means(phi, psi, 0)
            if expect_sep:
                m["a2_sep_dist"] = max(abs(pos - pred[0]), abs(neg - pred[1]))
                m["a2_sep_pos"] = pos
                good = cond and m["a2_sep_dist"] <= 2e-3 and pos < 0.99
            else:
                etf_pos, etf_dev = min(etf_pos, pos), max(etf_dev, abs(neg - thr))
                good = (not cond) and pos >= 0.999 and abs(neg - thr) <= 1e-3
            self.rows.append(
                [
                    f"SigLIP t={t:g} b_paper={b:g} (Eq. 10 {cond})",
                    f"{pos:.5f}",
                    f"{neg:.5f}",
                    f"{pred[0]:.5f}, {pred[1]:.5f}",
                    f"{good}",
                ]
            )
            if expect_sep:  # the within-view fix (c2 = 1) restores alignment
                pos, neg = self._siglip_means(phi, psi, 1)
                etf_pos, etf_dev = min(etf_pos, pos), max(etf_dev, abs(neg - thr))
                good = pos >= 0.999 and abs(neg - thr) <= 1e-3
                self.rows.append(
                    [
                        f"SigLIP + within-view t={t:g} b_paper={b:g}",
                        f"{pos:.5f}",
                        f"{neg:.5f}",
                        f"1, {thr:.5f}",
                        f"{good}",
                    ]
                )
        m.update(a2_eq10_right=eq10_right, a2_etf_pos_min=etf_pos, a2_etf_neg_dev=etf_dev)

    def alignment_bound(self) -> None:
        """Thm 5.2: the alignment gap is at most ``n/(n-1)`` (2000 random embeddings and one
        maximised), and equals its centred form."""
        g = torch.Generator().manual_seed(0)
        worst, ident = -1e9, 0.0
        for _ in range(2000):
            nn_ = int(torch.randint(2, 12, (1,), generator=g))
            dd = int(torch.randint(1, 16, (1,), generator=g))
            U = torch.nn.functional.normalize(
                torch.randn(nn_, dd, generator=g, dtype=torch.float64), dim=-1
            )
            V = torch.nn.functional.normalize(
                torch.randn(nn_, dd, generator=g, dtype=torch.float64), dim=-1
            )
            gap, centred = theory.alignment_gap(U, V)
            worst = max(worst, gap - nn_ / (nn_ - 1))
            ident = max(ident, abs(gap - centred))
        U, V = theory.optimize_embeddings(
            lambda a, b: (
                -(
                    (a * b).sum(-1).mean()
                    - (a @ b.T)[~torch.eye(a.shape[0], dtype=torch.bool)].mean()
                )
            ),
            6,
            8,
            steps=max(200, self.steps // 4),
        )
        gap, _ = theory.alignment_gap(U, V)
        worst = max(worst, gap - 6 / 5)
        self.m.update(a3_gap=worst, a3_identity=ident)
        self.rows.append(
            [
                "Thm 5.2: max(gap - n/(n-1)) over 2000 random + 1 maximised",
                f"{worst:.2e}",
                f"identity err {ident:.1e}",
                "<= 1e-9",
                f"{worst <= 1e-9 and ident <= 1e-10}",
            ]
        )

    def minibatch_variance(self) -> None:
        """Thm 5.5: trained on mini-batches (``m = 4``), InfoNCE and SimCLR keep the alignment
        and the ETF's mean negative similarity, with the negatives' variance within the
        theorem's bounds."""
        thr, var_lo, var_hi = self.thr, self.var_lo, self.var_hi
        pos_min, mean_dev, variances = 1.0, 0.0, []
        for name, fn in (("InfoNCE", infonce_loss), ("SimCLR", nt_xent_loss)):
            for seed in range(3):
                S = self._similarities(
                    lambda a, b, fn=fn: fn(a, b, 0.5, validate=False), seed=seed, partition=4
                )
                neg = S[self.off]
                var = float(neg.var(unbiased=False))
                pos_min = min(pos_min, float(S.diagonal().min()))
                mean_dev = max(mean_dev, abs(float(neg.mean()) - thr))
                variances.append(var)
                good = (
                    float(S.diagonal().min()) >= 0.999
                    and abs(float(neg.mean()) - thr) <= 1e-3
                    and var_lo - 1e-9 <= var <= var_hi + 1e-9
                )
                self.rows.append(
                    [
                        f"Thm 5.5 {name} m=4 seed {seed}",
                        f"{float(S.diagonal().mean()):.5f}",
                        f"{float(neg.mean()):.5f} (var {var:.4f})",
                        f"var in [{var_lo:.5f}, {var_hi:.5f}]",
                        f"{good}",
                    ]
                )
        self.m.update(a4_pos_min=pos_min, a4_mean_dev=mean_dev, a4_variances=variances)


# -- Part B: SimCLR on digits -----------------------------------------------------------------
def load_digits_split():
    """Our split: stratified, test_size = 0.2, random_state = 0 (1437 train / 360 test),
    images (N, 1, 8, 8) in [0, 1]; the shared loader of :mod:`icml25.toy`."""
    from icml25.toy import digits_split

    return digits_split(0.2, seed=0, shape="image")


def run_simclr(batch: int, temperature: float, vrns: float, seed: int, steps: int, data) -> dict:
    """One SimCLR run on digits; returns probe accuracy and negative-similarity statistics."""
    xtr, ytr, xte, yte = data
    torch.manual_seed(seed)
    model = DigitsSimCLR()
    loss = ContrastiveLoss("simclr", temperature, vrns_weight=vrns, n_train=len(xtr))
    t0 = time.perf_counter()
    train_simclr(model, xtr, digits_augment, loss=loss, batch_size=batch, steps=steps, seed=seed)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        ftr, fte = model(xtr)[0], model(xte)[0]
    acc = linear_probe(ftr, ytr, fte, yte)
    U, V = embed_two_views(model, xtr, digits_augment, torch.Generator().manual_seed(123))
    st = similarity_stats(U, V)
    S = torch.nn.functional.normalize(U, dim=-1) @ torch.nn.functional.normalize(V, dim=-1).T
    neg = S[~torch.eye(len(S), dtype=torch.bool)]
    return {
        "acc": acc,
        "neg_var": st.neg_var,
        "neg_mean": st.neg_mean,
        "pos_mean": st.pos_mean,
        "seconds": seconds,
        "neg_sample": neg[
            torch.randperm(neg.numel(), generator=torch.Generator().manual_seed(0))[:20000]
        ],
    }
