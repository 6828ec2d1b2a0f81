"""Reward learning from PCQ and DQ answers (spec §3, B-Pref ``train_reward`` procedure).

Each epoch every member draws its own permutation of the answer buffer; mini-batches of
``batch_size`` sum the members' losses and take one Adam step over all members. Training stops
after ``max_epochs`` or when the members' mean training accuracy exceeds ``stop_acc``, and it
continues from the current weights on the next call (B-Pref). ``batch_size=None`` trains
full-batch (the same batch for every member), as the offline reproduction does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml25.distinguishability.queries import AnswerBuffer
from icml25.distinguishability.reward_model import RewardEnsemble, dq_loss, pcq_loss, smooth_abs
from icml25.distinguishability.segments import SegmentBuffer

__all__ = ["RewardLearner"]


class RewardLearner:
    """Args: ``ensemble``; ``lr`` (B-Pref 3e-4); ``batch_size`` (B-Pref 128; None = full batch);
    ``max_epochs`` (B-Pref ``reward_update`` 200); ``stop_acc`` (B-Pref 0.97; None = never stop
    early); ``likelihood``, ``lambda_pref``, ``eps`` (spec §3); ``learn_dist_temperature``: a
    learnable ``log beta_d`` for the strength answer (spec §2, off by default)."""

    def __init__(
        self,
        ensemble: RewardEnsemble,
        lr: float = 3e-4,
        batch_size: int | None = 128,
        max_epochs: int = 200,
        stop_acc: float | None = 0.97,
        likelihood: str = "abs",
        lambda_pref: float = 1.0,
        eps: float = 1e-3,
        learn_dist_temperature: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        if likelihood not in ("abs", "difference"):
            raise ValueError(f"likelihood must be 'abs' or 'difference', got {likelihood!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if max_epochs < 0:
            raise ValueError(f"max_epochs must be >= 0, got {max_epochs}")
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.ensemble, self.batch_size, self.max_epochs = ensemble, batch_size, max_epochs
        self.stop_acc, self.likelihood, self.lambda_pref, self.eps = (
            stop_acc,
            likelihood,
            lambda_pref,
            eps,
        )
        p = next(ensemble.parameters())
        self.log_beta_d = (
            torch.zeros((), dtype=p.dtype, device=p.device, requires_grad=True)
            if learn_dist_temperature
            else None
        )
        params = list(ensemble.parameters()) + (
            [self.log_beta_d] if self.log_beta_d is not None else []
        )
        self.opt = torch.optim.Adam(params, lr=lr)
        self.answers = AnswerBuffer()
        self.generator = generator

    def add(self, queries, answers) -> int:
        return self.answers.add(queries, answers)

    def _batch_loss(self, ret: Tensor, t: dict, pcq_rows, dq_rows, pos) -> tuple[Tensor, float]:
        """``ret (K, U)``: returns of the distinct segments; rows index the answers per member
        (``(K, b)`` tensors); ``pos`` maps segment ids to columns of ``ret``."""
        K = ret.shape[0]
        loss = ret.new_zeros(())
        correct, total = ret.new_zeros(()), 0
        beta_d = self.log_beta_d.exp() if self.log_beta_d is not None else 1.0
        if pcq_rows is not None and pcq_rows.shape[1]:
            ids = pos[t["pcq_idx"][pcq_rows]]  # (K, b, 2)
            r = torch.gather(ret, 1, ids.reshape(K, -1)).reshape(ids.shape)
            y = t["pcq_y"][pcq_rows].to(ret.dtype)
            # members see different answers: per-member loss, summed
            loss = loss + sum(
                pcq_loss(r[k : k + 1, :, 0], r[k : k + 1, :, 1], y[k]) for k in range(K)
            )
            z = r[..., 0] - r[..., 1]
            hard = y != 0.5
            correct = correct + ((z > 0) == (y > 0.5))[hard].sum()
            total += int(hard.sum())
        if dq_rows is not None and dq_rows.shape[1]:
            ids = pos[t["dq_idx"][dq_rows]]  # (K, b, 4)
            r = torch.gather(ret, 1, ids.reshape(K, -1)).reshape(ids.shape)
            d, dp, y = (t[k][dq_rows].to(ret.dtype) for k in ("dq_d", "dq_pref", "dq_y"))
            for k in range(K):
                loss = loss + dq_loss(
                    r[k : k + 1, :, 0],
                    r[k : k + 1, :, 1],
                    r[k : k + 1, :, 2],
                    r[k : k + 1, :, 3],
                    d[k],
                    dp[k],
                    y[k],
                    likelihood=self.likelihood,
                    lambda_pref=self.lambda_pref,
                    eps=self.eps,
                    beta_d=beta_d,
                )
            d1, d2 = r[..., 0] - r[..., 1], r[..., 2] - r[..., 3]
            zd = smooth_abs(d1, self.eps) - smooth_abs(d2, self.eps)
            zy = torch.where(dp == 1.0, d1, d2)
            hard_d, hard_y = d != 0.5, y != 0.5
            # DQ accuracy: the mean of the strength and the preference accuracies (spec §3)
            acc_d = ((zd > 0) == (d == 1.0))[hard_d].to(ret.dtype)
            acc_y = ((zy > 0) == (y == 1.0))[hard_y].to(ret.dtype)
            correct = correct + 0.5 * (acc_d.sum() + acc_y.sum())
            total += int(0.5 * (hard_d.sum() + hard_y.sum()))
        acc = float(correct) / total if total else 1.0
        return loss, acc

    def train(self, buf: SegmentBuffer) -> dict:
        """Train on every stored answer; returns ``dict(acc, loss, epochs)``."""
        n_p, n_d = len(self.answers.pcq_y), len(self.answers.dq_y)
        if n_p + n_d == 0:
            return {"epochs": 0, "acc": float("nan"), "loss": float("nan")}
        t = self.answers.tensors()
        K = self.ensemble.K
        dev = next(self.ensemble.parameters()).device
        last = {"epochs": 0, "acc": 0.0, "loss": float("nan")}
        for epoch in range(1, self.max_epochs + 1):
            if self.batch_size is None:
                batches = [
                    (
                        torch.arange(n_p).expand(K, -1),
                        torch.arange(n_d).expand(K, -1),
                    )
                ]
            else:
                perm_p = torch.stack(
                    [torch.randperm(n_p, generator=self.generator) for _ in range(K)]
                )
                perm_d = torch.stack(
                    [torch.randperm(n_d, generator=self.generator) for _ in range(K)]
                )
                n_all = max(n_p, n_d)
                batches = [
                    (perm_p[:, s : s + self.batch_size], perm_d[:, s : s + self.batch_size])
                    for s in range(0, n_all, self.batch_size)
                ]
            tot_loss, tot_acc = 0.0, 0.0
            for pr, dr in batches:
                seg = torch.cat(
                    [t["pcq_idx"][pr].reshape(-1), t["dq_idx"][dr].reshape(-1)]
                ).unique()
                pos = torch.full((len(buf),), -1, dtype=torch.long)
                pos[seg] = torch.arange(seg.numel())
                ret = self.ensemble.segment_returns(buf.obs[seg].to(dev), buf.act[seg].to(dev))
                loss, acc = self._batch_loss(ret, t, pr, dr, pos)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                tot_loss += float(loss.detach())
                tot_acc += acc
            last = {"epochs": epoch, "acc": tot_acc / len(batches), "loss": tot_loss / len(batches)}
            if self.stop_acc is not None and last["acc"] > self.stop_acc:
                break
        return last
