"""Preference triples ``(x, y_w, y_l)`` over a finite output set, sampled from a policy under the
Bradley-Terry model with the policy-implied reward (the DPO identity, Sec. 2 of
arXiv:2412.16475): ``P(y_a ≻ y_b | x) = σ(log π(y_a|x) - log π(y_b|x))`` (uniform reference,
``β = 1``), or read from a practitioner's own arrays.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_int

__all__ = ["PreferenceBatch", "sample_preferences"]


def _as_tensor(name: str, v: Any, *, integer: bool) -> Tensor:
    if hasattr(v, "to_numpy") and not isinstance(v, Tensor):  # pandas DataFrame / Series
        v = v.to_numpy()
    if isinstance(v, Tensor):
        t = v
    else:
        try:
            t = torch.as_tensor(v)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must be a tensor or an array of numbers, got {type(v).__name__}"
                + (f" of dtype {v.dtype}" if hasattr(v, "dtype") else "")
            ) from None
    if integer:
        if t.is_floating_point():
            if not bool(torch.all(t == t.round())):
                raise ValueError(f"{name} must hold integer output indices, got {t[:5].tolist()}")
            t = t.long()
        elif t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{name} must be integer output indices, got dtype {t.dtype}")
        return t.long()
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


def _copy(v: Any) -> Any:
    if hasattr(v, "to_numpy") and not isinstance(v, Tensor):
        v = v.to_numpy()
    if isinstance(v, Tensor):
        return v.detach().clone()
    try:
        import numpy as np

        return np.array(v, copy=True)
    except (TypeError, ValueError):
        return v


@dataclass(frozen=True)
class PreferenceBatch:
    """Preference triples: ``x`` ``(n, d_x)`` float, ``y_w`` and ``y_l`` ``(n,)`` long output
    indices (winner and loser), on one device. ``batch[:k]`` is the first ``k`` triples (nested
    subsets), ``len(batch)`` the number of triples."""

    x: Tensor
    y_w: Tensor
    y_l: Tensor

    def __post_init__(self) -> None:
        x = _as_tensor("x", self.x, integer=False)
        yw = _as_tensor("y_w", self.y_w, integer=True)
        yl = _as_tensor("y_l", self.y_l, integer=True)
        if x.ndim != 2:
            raise ValueError(f"x must have shape (n, d_x), got {tuple(x.shape)}")
        n = x.shape[0]
        if yw.shape != (n,) or yl.shape != (n,):
            raise ValueError(
                f"y_w and y_l must have shape (n,) = ({n},) to match x, got {tuple(yw.shape)} "
                f"and {tuple(yl.shape)}"
            )
        if not (x.device == yw.device == yl.device):
            raise ValueError(
                f"x, y_w and y_l must be on one device, got {x.device}, {yw.device}, {yl.device}"
            )
        if n and (int(torch.minimum(yw, yl).min()) < 0):
            raise ValueError("y_w and y_l must be non-negative output indices")
        if not bool(torch.isfinite(x).all()):
            raise ValueError("x holds NaN or inf")
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y_w", yw)
        object.__setattr__(self, "y_l", yl)

    @classmethod
    def from_arrays(cls, x: Any, y_w: Any, y_l: Any, *, drop_ties: bool = False) -> PreferenceBatch:
        """Triples from a user's arrays (numpy, lists or tensors). A triple with ``y_w == y_l``
        carries no preference: ``ValueError`` naming it, or dropped with a warning when
        ``drop_ties=True``."""
        # copies: later edits of the caller's arrays must not reach the validated batch
        b = cls(*(_copy(v) for v in (x, y_w, y_l)))
        tie = b.y_w == b.y_l
        if bool(tie.any()):
            idx = torch.nonzero(tie).flatten()
            if not drop_ties:
                raise ValueError(
                    f"{idx.numel()} triple(s) have y_w == y_l (first at index {int(idx[0])}); a "
                    "tie carries no preference: remove them or pass drop_ties=True"
                )
            warnings.warn(f"dropped {idx.numel()} tied triple(s) (y_w == y_l)", stacklevel=2)
            keep = ~tie
            b = cls(b.x[keep], b.y_w[keep], b.y_l[keep])
        return b

    @classmethod
    def from_records(
        cls,
        records: Any,
        *,
        keys: tuple[str, str, str] = ("x", "y_w", "y_l"),
        drop_ties: bool = False,
    ) -> PreferenceBatch:
        """Triples from rows: any iterable (a list, a ``torch.utils.data.Dataset`` or a
        ``datasets.Dataset``) of mappings with the three ``keys`` or of ``(x, y_w, y_l)`` tuples."""
        xs, ws, ls = [], [], []
        n = len(records) if hasattr(records, "__len__") else None
        it = (
            (records[i] for i in range(n))
            if n is not None and hasattr(records, "__getitem__")
            else records
        )
        for i, r in enumerate(it):
            if hasattr(r, "keys"):
                missing = [k for k in keys if k not in r]
                if missing:
                    raise ValueError(f"record {i} lacks {missing} (has {sorted(r.keys())})")
                x, w, lo = (r[k] for k in keys)
            elif isinstance(r, (tuple, list)) and len(r) == 3:
                x, w, lo = r
            else:
                raise TypeError(
                    f"record {i} must be a mapping with keys {keys} or an (x, y_w, y_l) "
                    f"tuple, got {type(r).__name__}"
                )
            xs.append(torch.as_tensor(_copy(x.to_numpy() if hasattr(x, "to_numpy") else x)))
            ws.append(int(w))
            ls.append(int(lo))
        if not xs:
            raise ValueError("no records")
        shapes = {tuple(t.shape) for t in xs}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise ValueError(
                f"every record's x must be a vector of one length, got shapes {sorted(shapes)}"
            )
        return cls.from_arrays(torch.stack(xs), ws, ls, drop_ties=drop_ties)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def __getitem__(self, idx: Any) -> PreferenceBatch:
        if isinstance(idx, (bool, np.bool_)) or (
            isinstance(idx, Tensor) and idx.dim() == 0 and idx.dtype == torch.bool
        ):
            raise TypeError(
                f"a PreferenceBatch is indexed by an integer, a slice, an index array or a "
                f"boolean mask of length {len(self)}, not by the bool {idx!r}"
            )
        if isinstance(idx, Tensor) and idx.dim() == 0 and not idx.is_floating_point():
            idx = idx.item()
        if isinstance(idx, numbers.Integral) and not isinstance(idx, (bool, np.bool_)):
            # one triple (Python, numpy or 0-d tensor integer), kept as a batch of one
            n, i = len(self), int(idx)
            if not -n <= i < n:
                raise IndexError(f"index {idx!r} is out of range for {n} triples")
            idx = slice(i % n, i % n + 1)
        return PreferenceBatch(self.x[idx], self.y_w[idx], self.y_l[idx])

    @property
    def d_x(self) -> int:
        return int(self.x.shape[1])

    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> PreferenceBatch:
        """Move to ``device`` and/or cast ``x`` to the floating ``dtype``; indices stay long."""
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"x can only be cast to a floating dtype, got {dtype}")
        x = self.x.to(device=device, dtype=dtype)
        return PreferenceBatch(x, self.y_w.to(x.device), self.y_l.to(x.device))

    def check_outputs(self, n_outputs: int, what: str = "the model") -> None:
        """``ValueError`` when an index is ``>= n_outputs`` or a triple is a tie."""
        if len(self) == 0:
            return
        hi = int(torch.maximum(self.y_w, self.y_l).max())
        if hi >= n_outputs:
            raise ValueError(
                f"output index {hi} is out of range for {what} with n_outputs = {n_outputs} "
                f"(valid: 0..{n_outputs - 1})"
            )
        tie = self.y_w == self.y_l
        if bool(tie.any()):
            i = int(torch.nonzero(tie).flatten()[0])
            raise ValueError(
                f"triple {i} has y_w == y_l == {int(self.y_w[i])}; a tie carries no preference "
                "(PreferenceBatch.from_arrays(..., drop_ties=True) drops them)"
            )


def sample_preferences(
    policy: Callable[[Tensor], Tensor],
    n: int,
    *,
    generator: torch.Generator | None = None,
    x: Tensor | None = None,
    d_x: int | None = None,
    pair: str = "uniform_distinct",
    dtype: torch.dtype = torch.float32,
) -> PreferenceBatch:
    """``n`` Bradley-Terry triples labelled by ``policy`` (``x -> (n, K)`` probabilities, e.g.
    ``world.true_policy``): ``x ~ N(0, I)`` (or the given ``x``), two distinct outputs drawn
    uniformly, the first wins with probability ``σ(log π(y_a|x) - log π(y_b|x))``.

    ``d_x`` defaults to the input dimension of the world a bound method belongs to. Everything is
    drawn from ``generator`` (and lives on its device, or on ``x``'s).
    """
    if pair != "uniform_distinct":
        raise ValueError(f"pair must be 'uniform_distinct', got {pair!r}")
    if not callable(policy):
        raise TypeError(
            f"policy must be a callable x -> probabilities, got {type(policy).__name__}"
        )
    n = as_int("n", n, 0)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype for x, got {dtype}")
    if x is None:
        if d_x is None:
            d_x = getattr(getattr(policy, "__self__", None), "d_x", None)
        if d_x is None:
            raise ValueError("pass d_x= (or x=): the input dimension of the policy is unknown")
        dev = generator.device if generator is not None else None
        x = torch.randn(n, int(d_x), generator=generator, device=dev, dtype=dtype)
    else:
        x = _as_tensor("x", x, integer=False)
        if x.ndim != 2 or x.shape[0] != n:
            raise ValueError(f"x must have shape (n, d_x) with n = {n}, got {tuple(x.shape)}")
    p = policy(x)
    if not isinstance(p, Tensor) or p.ndim != 2 or p.shape[0] != n:
        raise ValueError(
            f"policy(x) must return (n, K) probabilities, got "
            f"{tuple(p.shape) if isinstance(p, Tensor) else type(p).__name__}"
        )
    k = p.shape[1]
    if k < 2:
        raise ValueError(f"the policy has {k} output(s); preferences need at least 2")
    dev = x.device
    a = torch.randint(0, k, (n,), generator=generator, device=dev)
    b = (a + torch.randint(1, k, (n,), generator=generator, device=dev)) % k
    logp = torch.log(p.to(torch.float64).clamp_min(1e-300))
    margin = logp.gather(1, a[:, None]).squeeze(1) - logp.gather(1, b[:, None]).squeeze(1)
    u = torch.rand(n, generator=generator, device=dev, dtype=torch.float64)
    a_wins = u < torch.sigmoid(margin)
    return PreferenceBatch(x, torch.where(a_wins, a, b), torch.where(a_wins, b, a))
