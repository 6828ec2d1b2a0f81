"""Reward learning from PCQ and DQ answers (docs/distinguishability.md, B-Pref ``train_reward`` procedure).

Each epoch every member draws its own permutation of the answer buffer; mini-batches of
``batch_size`` sum the members' losses and take one Adam step over all members. Training stops
after ``max_epochs`` or when the members' mean training accuracy exceeds ``stop_acc``, and it
continues from the current weights on the next call (B-Pref). ``batch_size=None`` trains
full-batch (the same batch for every member), as the offline reproduction does.

Answers refer to segments by their stable ids in a :class:`SegmentBuffer`. Pass the buffer to
:meth:`RewardLearner.add` and the answered segments are copied into the learner (``segments``),
so later FIFO evictions cannot touch them and :meth:`RewardLearner.train` needs no buffer (what
the PEBBLE loop does). Without it, ``train(buf)`` looks the ids up in ``buf`` and raises if one
was evicted.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.distinguishability.queries import (
    AnswerBuffer,
    DistinguishabilityQuery,
    PairwiseQuery,
)
from icml25.distinguishability.reward_model import RewardEnsemble, dq_loss, pcq_loss, smooth_abs
from icml25.distinguishability.segments import SegmentBuffer

__all__ = ["RewardLearner"]


class RewardLearner:
    """Args: ``ensemble``; ``lr`` (B-Pref 3e-4); ``batch_size`` (B-Pref 128; None = full batch);
    ``max_epochs`` (B-Pref ``reward_update`` 200); ``stop_acc`` (B-Pref 0.97; None = never stop
    early); ``likelihood``, ``lambda_pref``, ``eps`` (docs/distinguishability.md); ``learn_dist_temperature``: a
    learnable ``log beta_d`` for the strength answer (docs/distinguishability.md, off by default); ``noise_prob``:
    imitation's preference-model noise on the pairwise answers (0, B-Pref's plain BT)."""

    def __init__(
        self,
        ensemble: RewardEnsemble,
        lr: float = 3e-4,
        batch_size: int | None = 128,
        max_epochs: int = 200,
        stop_acc: float | None = 0.97,
        likelihood: Literal["abs", "difference"] = "abs",
        lambda_pref: float = 1.0,
        eps: float = 1e-3,
        learn_dist_temperature: bool = False,
        generator: torch.Generator | None = None,
        noise_prob: float = 0.0,
    ) -> None:
        if likelihood not in ("abs", "difference"):
            raise ValueError(f"likelihood must be 'abs' or 'difference', got {likelihood!r}")
        batch_size = None if batch_size is None else as_int("batch_size", batch_size, 1)
        max_epochs = as_int("max_epochs", max_epochs, 0)
        lr = as_real("lr", lr, low=0.0, low_open=True)
        noise_prob = as_real("noise_prob", noise_prob, low=0.0, high=1.0, high_open=True)
        self.noise_prob = noise_prob
        stop_acc = None if stop_acc is None else as_real("stop_acc", stop_acc, low=0.0, high=1.0)
        lambda_pref = as_real("lambda_pref", lambda_pref, low=0.0)
        eps = as_real("eps", eps, low=0.0, low_open=True)
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
        self.segments: SegmentBuffer | None = None  # copies of the answered segments

    def add(self, queries, answers, buf: SegmentBuffer | None = None) -> int:
        """Store the answered queries (``None`` answers are skipped); returns how many. With
        ``buf``, the answered segments are copied into :attr:`segments` and the answers refer
        to the copies (always pass it, or never: the two cannot be mixed)."""
        if len(queries) != len(answers):
            raise ValueError(f"{len(queries)} queries but {len(answers)} answers")
        mode = "copy" if buf is not None else "ids"
        if len(self.answers) and getattr(self, "_mode", mode) != mode:
            raise ValueError(
                "answers were added with and without a segment buffer; pass buf to every add() "
                "(answered segments are copied) or to none (train(buf) looks ids up)"
            )
        self._mode = mode
        if buf is None:
            return self.answers.add(queries, answers)
        stored = [(q, a) for q, a in zip(queries, answers) if a is not None]
        if not stored:
            return 0
        if self.segments is None:
            self.segments = SegmentBuffer(max_episodes=2**62)
        base = len(self.segments)
        ids = sorted(
            {
                i
                for q, _ in stored
                for i in ((q.i0, q.i1) if isinstance(q, PairwiseQuery) else q.segments)
            }
        )
        new = {i: base + j for j, i in enumerate(ids)}
        rows = buf.positions(ids)  # raises if an answered segment was already evicted
        rew = buf.true_rew
        self.segments._add_segments(
            buf.obs[rows], buf.act[rows], None if rew is None else rew[rows]
        )
        remapped = []
        for q, a in stored:
            if isinstance(q, PairwiseQuery):
                q2 = PairwiseQuery(new[q.i0], new[q.i1])
            elif isinstance(q, DistinguishabilityQuery):
                q2 = DistinguishabilityQuery(
                    PairwiseQuery(new[q.q1.i0], new[q.q1.i1]),
                    PairwiseQuery(new[q.q2.i0], new[q.q2.i1]),
                )
            else:
                raise TypeError(f"unknown query type {type(q).__name__}")
            remapped.append((q2, a))
        return self.answers.add([q for q, _ in remapped], [a for _, a in remapped])

    # -- saving ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue: the ensemble (weights and shape), the optimiser, the
        answers, the copied segments, the settings."""
        e = self.ensemble
        seg = self.segments
        return {
            "format": "icml25.distinguishability.RewardLearner/1",
            "ensemble": {
                "args": dict(
                    obs_dim=e.obs_dim,
                    act_dim=e.act_dim,
                    n_members=e.K,
                    hidden=e.hidden,
                    n_layers=e.n_layers,
                    activation=e.activation,
                ),
                "state": {k: v.detach().cpu() for k, v in e.state_dict().items()},
            },
            "optimizer": self.opt.state_dict(),
            "log_beta_d": None if self.log_beta_d is None else self.log_beta_d.detach().cpu(),
            "settings": dict(
                batch_size=self.batch_size,
                max_epochs=self.max_epochs,
                stop_acc=self.stop_acc,
                likelihood=self.likelihood,
                lambda_pref=self.lambda_pref,
                eps=self.eps,
                noise_prob=self.noise_prob,
                lr=self.opt.param_groups[0]["lr"],
            ),
            "generator": None if self.generator is None else self.generator.get_state(),
            "answers": self.answers.state_dict(),
            "mode": getattr(self, "_mode", None),
            "segments": None
            if seg is None
            else {"obs": seg.obs, "act": seg.act, "true_rew": seg.true_rew},
        }

    def save(self, path) -> None:
        """``torch.save`` of :meth:`state_dict` (reload with :meth:`load`)."""
        torch.save(self.state_dict(), path)

    @classmethod
    def load(cls, path, *, map_location=None, generator: torch.Generator | None = None):
        """A learner restored from :meth:`save`: same ensemble, optimiser state, answers, copied
        segments and mini-batch generator state, so training continues where it stopped. Exact
        with ``batch_size=None`` or a learner built with ``generator=`` (without one, mini-batches
        come from torch's global generator, which is not saved)."""
        st = torch.load(path, map_location=map_location or "cpu", weights_only=False)
        if (
            not isinstance(st, dict)
            or st.get("format") != "icml25.distinguishability.RewardLearner/1"
        ):
            raise ValueError(f"{path} is not a RewardLearner checkpoint (written by save)")
        ens = RewardEnsemble(**st["ensemble"]["args"])
        ens.load_state_dict(st["ensemble"]["state"])
        p = next(iter(st["ensemble"]["state"].values()))
        ens = ens.to(device=p.device, dtype=p.dtype)
        s = st["settings"]
        learner = cls(
            ens,
            lr=s["lr"],
            batch_size=s["batch_size"],
            max_epochs=s["max_epochs"],
            stop_acc=s["stop_acc"],
            likelihood=s["likelihood"],
            lambda_pref=s["lambda_pref"],
            eps=s["eps"],
            learn_dist_temperature=st["log_beta_d"] is not None,
            generator=generator,
            noise_prob=s["noise_prob"],
        )
        if st["log_beta_d"] is not None:
            with torch.no_grad():
                learner.log_beta_d.copy_(st["log_beta_d"])
        learner.opt.load_state_dict(st["optimizer"])
        if st.get("generator") is not None:
            if learner.generator is None:
                learner.generator = torch.Generator()
            learner.generator.set_state(st["generator"])
        learner.answers = AnswerBuffer.from_state(st["answers"])
        if st["mode"] is not None:
            learner._mode = st["mode"]
        if st["segments"] is not None:
            seg = st["segments"]
            learner.segments = SegmentBuffer(
                seg["obs"], seg["act"], seg["true_rew"], max_episodes=2**62
            )
        return learner

    def _batch_loss(self, ret: Tensor, t: dict, pcq_rows, dq_rows, pos) -> tuple[Tensor, float]:
        """``ret (K, U)``: returns of the distinct segments ``seg`` (sorted ids); rows index the
        answers per member (``(K, b)`` tensors). Column indices are built on ``ret``'s device."""
        K = ret.shape[0]
        seg = pos.to(ret.device)

        def col(ids: Tensor) -> Tensor:
            return torch.searchsorted(seg, ids.to(ret.device))

        loss = ret.new_zeros(())
        correct, total = ret.new_zeros(()), 0
        beta_d = self.log_beta_d.exp() if self.log_beta_d is not None else 1.0
        if pcq_rows is not None and pcq_rows.shape[1]:
            ids = col(t["pcq_idx"][pcq_rows])  # (K, b, 2)
            r = torch.gather(ret, 1, ids.reshape(K, -1)).reshape(ids.shape)
            y = t["pcq_y"][pcq_rows].to(device=ret.device, dtype=ret.dtype)
            # members see different answers: per-member loss, summed
            loss = loss + sum(
                pcq_loss(r[k : k + 1, :, 0], r[k : k + 1, :, 1], y[k], noise_prob=self.noise_prob)
                for k in range(K)
            )
            z = r[..., 0] - r[..., 1]
            hard = y != 0.5
            correct = correct + ((z > 0) == (y > 0.5))[hard].sum()
            total += float(hard.sum())
        if dq_rows is not None and dq_rows.shape[1]:
            ids = col(t["dq_idx"][dq_rows])  # (K, b, 4)
            r = torch.gather(ret, 1, ids.reshape(K, -1)).reshape(ids.shape)
            d, dp, y = (
                t[k][dq_rows].to(device=ret.device, dtype=ret.dtype)
                for k in ("dq_d", "dq_pref", "dq_y")
            )
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
            # DQ accuracy: the mean of the strength and the preference accuracies (docs/distinguishability.md)
            acc_d = ((zd > 0) == (d == 1.0))[hard_d].to(ret.dtype)
            acc_y = ((zy > 0) == (y == 1.0))[hard_y].to(ret.dtype)
            correct = correct + 0.5 * (acc_d.sum() + acc_y.sum())
            total += 0.5 * float(hard_d.sum() + hard_y.sum())  # never rounded up to a win
        acc = float(correct) / total if total else 1.0
        return loss, acc

    def train(self, buf: SegmentBuffer | None = None) -> dict:
        """Train on every stored answer; returns ``dict(acc, loss, epochs)``. ``buf``: the
        buffer the answers' ids refer to (default: the copies made by :meth:`add`)."""
        n_p, n_d = len(self.answers.pcq_y), len(self.answers.dq_y)
        if getattr(self, "_mode", None) == "copy":
            if buf is not None and buf is not self.segments:
                raise ValueError(
                    "the answers were added with their segments (add(..., buf)); call train() "
                    "without a buffer"
                )
            buf = self.segments
        if n_p + n_d == 0:
            return {"epochs": 0, "acc": float("nan"), "loss": float("nan")}
        if buf is None:
            raise ValueError("train(buf) needs the SegmentBuffer the answers refer to")
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
                ).unique()  # sorted segment ids of this batch
                rows = buf.positions(seg)  # raises if one was evicted
                ret = self.ensemble.segment_returns(buf.obs[rows].to(dev), buf.act[rows].to(dev))
                loss, acc = self._batch_loss(ret, t, pr, dr, seg)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                tot_loss += float(loss.detach())
                tot_acc += acc
            last = {"epochs": epoch, "acc": tot_acc / len(batches), "loss": tot_loss / len(batches)}
            if self.stop_acc is not None and last["acc"] > self.stop_acc:
                break
        return last
