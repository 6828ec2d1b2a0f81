"""Sparse autoencoders: the frozen feature encoder of FPO (paper §2.3, Eq. 5-6; §3, Eq. 10).

Three encoders, one decoder ``ĥ = c W_dec + b_dec``:

* ``"jumprelu"`` (Gemma Scope, as the official FeatureAlignment loader reads it):
  ``pre = h W_enc + b_enc``, ``c = 1[pre > θ] ⊙ ReLU(pre)``.
* ``"relu"`` (paper Eq. 5): ``c = ReLU(h W_enc + b_enc)``.
* ``"topk"``: ``c = TopK_k(ReLU(pre))``, every entry but the ``k_sae`` largest set to 0.

``apply_b_dec_to_input`` subtracts ``b_dec`` before encoding (the SAELens convention; Gemma Scope
does not) and ``input_scale`` multiplies ``h`` first (our own small SAEs normalise the residual
stream to norm √d; the decoder output is divided back). The threshold / top-k mask is a constant
for autograd, so gradients reach ``h`` through the active pre-activations only.

Without a public SAE, :func:`harvest_activations` + :func:`train_sae` fit one on the model's own
residual stream (docs/fpo.md, "Training an SAE for your model").
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from icml25._validate import as_bool, as_int, as_real

__all__ = [
    "SAE_KINDS",
    "SparseAutoencoder",
    "from_sae_lens",
    "harvest_activations",
    "load_gemma_scope_npz",
    "sae_metrics",
    "train_sae",
]

SAE_KINDS = ("jumprelu", "relu", "topk")
_NPZ_KEYS = ("W_enc", "W_dec", "threshold", "b_enc", "b_dec")  # Gemma Scope params.npz


def _positive_int(name: str, v: Any) -> int:
    return as_int(name, v, 1)


class SparseAutoencoder(nn.Module):
    """An SAE over ``d_in``-dimensional activations with ``d_sae`` features.

    Parameters: ``W_enc`` ``(d_in, d_sae)``, ``b_enc`` ``(d_sae,)``, ``W_dec`` ``(d_sae, d_in)``,
    ``b_dec`` ``(d_in,)`` and, for ``kind="jumprelu"``, ``threshold`` ``(d_sae,)``. A fresh SAE
    has zero weights: load them (:func:`load_gemma_scope_npz`, :func:`from_sae_lens`) or train
    them (:func:`train_sae`).
    """

    def __init__(
        self,
        d_in: int,
        d_sae: int,
        kind: Literal["jumprelu", "relu", "topk"] = "topk",
        k_sae: int | None = None,
        input_scale: float = 1.0,
        apply_b_dec_to_input: bool = False,
    ) -> None:
        super().__init__()
        d_in = _positive_int("d_in", d_in)
        d_sae = _positive_int("d_sae", d_sae)
        if kind not in SAE_KINDS:
            raise ValueError(f"kind must be one of {SAE_KINDS}, got {kind!r}")
        if kind == "topk":
            k_sae = 8 if k_sae is None else k_sae  # our default for small SAEs (docs/fpo.md)
            # (k_sae=None with kind="topk" means 8, the L0 our small SAEs are trained for)
            k_sae = _positive_int("k_sae", k_sae)
            if k_sae > d_sae:
                raise ValueError(f"k_sae={k_sae} exceeds d_sae={d_sae}")
        elif k_sae is not None:
            raise ValueError(f"k_sae is only used by kind='topk', got k_sae={k_sae} for {kind!r}")
        scale = as_real("input_scale", input_scale, low=0.0, low_open=True)
        self.d_in, self.d_sae, self.kind, self.k_sae = d_in, d_sae, kind, k_sae
        self.input_scale, self.apply_b_dec_to_input = (
            scale,
            as_bool("apply_b_dec_to_input", apply_b_dec_to_input),
        )
        self.W_enc = nn.Parameter(torch.zeros(d_in, d_sae))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.W_dec = nn.Parameter(torch.zeros(d_sae, d_in))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        if kind == "jumprelu":
            self.threshold = nn.Parameter(torch.zeros(d_sae))
        else:
            self.register_parameter("threshold", None)

    def extra_repr(self) -> str:
        k = f", k_sae={self.k_sae}" if self.kind == "topk" else ""
        return f"d_in={self.d_in}, d_sae={self.d_sae}, kind={self.kind!r}{k}"

    def _check_input(self, h: Tensor) -> None:
        if not isinstance(h, Tensor):
            raise TypeError(
                f"expected a tensor of activations (..., {self.d_in}), got {type(h).__name__}"
            )
        if h.shape[-1] != self.d_in:
            raise ValueError(
                f"activations have last dimension {h.shape[-1]}, but this SAE "
                f"expects d_in={self.d_in} (the model's hidden size at the SAE's "
                "layer)"
            )

    def pre_activations(self, h: Tensor) -> Tensor:
        """``(..., d_sae)`` encoder pre-activations, in the SAE's dtype."""
        self._check_input(h)
        x = h.to(self.W_enc.dtype)
        if self.input_scale != 1.0:
            x = x * self.input_scale
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def encode(self, h: Tensor) -> Tensor:
        """``(..., d_sae)`` non-negative sparse codes of ``h`` ``(..., d_in)`` (computed in the
        SAE's dtype: keep the SAE in float32 for bf16 models)."""
        pre = self.pre_activations(h)
        if self.kind == "jumprelu":
            return torch.relu(pre) * (pre > self.threshold).to(pre.dtype)
        act = torch.relu(pre)
        if self.kind == "relu":
            return act
        top = act.topk(self.k_sae, dim=-1)
        return torch.zeros_like(act).scatter(-1, top.indices, top.values)

    def decode(self, c: Tensor) -> Tensor:
        """``(..., d_in)`` reconstruction in the activations' original scale."""
        if not isinstance(c, Tensor) or c.shape[-1] != self.d_sae:
            raise ValueError(
                f"codes must be (..., d_sae={self.d_sae}), got {tuple(getattr(c, 'shape', ()))}"
            )
        out = c.to(self.W_dec.dtype) @ self.W_dec + self.b_dec
        return out / self.input_scale if self.input_scale != 1.0 else out

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """``(reconstruction, codes)``."""
        c = self.encode(h)
        return self.decode(c), c

    @torch.no_grad()
    def normalize_decoder_(self) -> None:
        """Scale every decoder row to unit norm (our trainer does this after each step)."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-8))

    def identity(self) -> dict[str, Any]:
        """What identifies this SAE in a reference-cache fingerprint (shape, kind, a weight
        checksum)."""
        with torch.no_grad():
            sums = [float(p.double().sum()) for p in (self.W_enc, self.b_enc, self.W_dec)]
        return {
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "kind": self.kind,
            "k_sae": self.k_sae,
            "input_scale": self.input_scale,
            "apply_b_dec_to_input": self.apply_b_dec_to_input,
            "checksum": [round(s, 6) for s in sums],
        }


def load_gemma_scope_npz(
    path: str | os.PathLike, *, dtype: torch.dtype = torch.float32, device: Any = None
) -> SparseAutoencoder:
    """A JumpReLU SAE from a Gemma Scope ``params.npz`` (keys ``W_enc`` ``(d, m)``, ``W_dec``
    ``(m, d)``, ``threshold``, ``b_enc`` ``(m,)``, ``b_dec`` ``(d,)``), e.g.
    ``google/gemma-scope-2b-pt-res/layer_25/width_16k/average_l0_55/params.npz``, the official
    FPO code's choice. No ``b_dec`` subtraction before encoding, as in Gemma Scope."""
    import numpy as np

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no SAE file at {path!r} (expected a Gemma Scope params.npz)")
    with np.load(path) as z:
        missing = [k for k in _NPZ_KEYS if k not in z.files]
        if missing:
            raise ValueError(
                f"{path} is not a Gemma Scope params.npz: missing {missing} "
                f"(found {sorted(z.files)})"
            )
        arr = {k: np.asarray(z[k]) for k in _NPZ_KEYS}
    if arr["W_enc"].ndim != 2:
        raise ValueError(f"{path}: W_enc must be 2-D (d_in, d_sae), got {arr['W_enc'].shape}")
    d, m = arr["W_enc"].shape
    want = {"W_dec": (m, d), "threshold": (m,), "b_enc": (m,), "b_dec": (d,)}
    for k, shape in want.items():
        if arr[k].shape != shape:
            raise ValueError(
                f"{path}: {k} has shape {arr[k].shape}, expected {shape} for W_enc "
                f"of shape {(d, m)}"
            )
    sae = SparseAutoencoder(d, m, kind="jumprelu")
    with torch.no_grad():
        for k in _NPZ_KEYS:
            getattr(sae, k).copy_(torch.from_numpy(arr[k].astype(np.float32)))
    return sae.to(device=device, dtype=dtype).requires_grad_(False)


def from_sae_lens(sae_obj: Any, *, dtype: torch.dtype = torch.float32) -> SparseAutoencoder:
    """Copy the weights of an SAELens ``SAE`` object (any version: pass the object you loaded,
    e.g. ``SAE.from_pretrained("gemma-scope-2b-pt-res-canonical", "layer_25/width_16k/canonical")``).

    Reads ``W_enc``, ``W_dec``, ``b_enc``, ``b_dec``, ``threshold`` (JumpReLU) and
    ``cfg.apply_b_dec_to_input``; the architecture from ``cfg.architecture`` (``"jumprelu"``,
    ``"standard"`` = ReLU, ``"topk"`` with ``cfg.k``). Activation normalisation other than
    ``"none"`` is refused (its scale is data-dependent; fold it into the weights first).
    """
    cfg = getattr(sae_obj, "cfg", None)
    for k in ("W_enc", "W_dec", "b_enc", "b_dec"):
        if not isinstance(getattr(sae_obj, k, None), Tensor):
            raise TypeError(
                f"expected an SAELens SAE object with tensor attribute {k!r}; got "
                f"{type(sae_obj).__name__} without it"
            )
    arch = getattr(cfg, "architecture", None)
    arch = arch() if callable(arch) else arch
    if arch is None:
        arch = "jumprelu" if isinstance(getattr(sae_obj, "threshold", None), Tensor) else "standard"
    arch = str(arch).lower()
    norm = getattr(cfg, "normalize_activations", "none")
    if norm not in (None, "none"):
        raise ValueError(
            f"SAELens normalize_activations={norm!r} is not supported: only 'none' "
            "(fold the normalisation into the weights first)"
        )
    kinds = {"jumprelu": "jumprelu", "standard": "relu", "relu": "relu", "topk": "topk"}
    if arch not in kinds:
        raise ValueError(f"SAELens architecture {arch!r} is not supported (valid: {sorted(kinds)})")
    kind = kinds[arch]
    d, m = sae_obj.W_enc.shape
    k_sae = None
    if kind == "topk":
        k_sae = getattr(cfg, "k", None)
        if k_sae is None:
            raise ValueError("a TopK SAELens SAE needs cfg.k")
    apply_b = getattr(cfg, "apply_b_dec_to_input", None)
    if apply_b is None:
        raise ValueError(
            "the SAELens cfg has no apply_b_dec_to_input: set it explicitly "
            "(its default changed across SAELens versions)"
        )
    sae = SparseAutoencoder(
        int(d), int(m), kind=kind, k_sae=k_sae, apply_b_dec_to_input=bool(apply_b)
    )
    with torch.no_grad():
        names = ["W_enc", "W_dec", "b_enc", "b_dec"] + (["threshold"] if kind == "jumprelu" else [])
        for k in names:
            src = getattr(sae_obj, k, None)
            if not isinstance(src, Tensor):
                raise TypeError(f"the SAELens object has no tensor {k!r} for kind {kind!r}")
            dst = getattr(sae, k)
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(
                    f"SAELens {k} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}"
                )
            dst.copy_(src.detach().float().cpu())
    dev = sae_obj.W_enc.device
    return sae.to(device=dev, dtype=dtype).requires_grad_(False)


@torch.no_grad()
def harvest_activations(
    model: nn.Module,
    batches: Iterable[dict[str, Tensor]],
    layer: int,
    *,
    max_vectors: int = 200_000,
    response_only: bool = True,
    site: str = "hook",
    progress: bool | None = None,
) -> Tensor:
    """``(N, d)`` float32 residual-stream vectors after block ``layer`` (on CPU).

    ``batches`` yields dicts with ``input_ids``, ``attention_mask`` and (for
    ``response_only=True``) ``completion_mask`` or ``labels`` (-100 off the response), e.g. the
    batches of :class:`~icml25.fpo.data.PreferenceCollator`. Stops after ``max_vectors``.
    """
    from icml25.fpo.hooks import residual_stream

    _positive_int("max_vectors", max_vectors)
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out: list[Tensor] = []
    n = 0
    try:
        for i, b in enumerate(batches):
            if not isinstance(b, dict) or "input_ids" not in b:
                what = (
                    f"a dict with keys {sorted(b)[:6]}" if isinstance(b, dict) else type(b).__name__
                )
                raise TypeError(
                    f"batch {i} must be a collated batch with input_ids and "
                    f"attention_mask (e.g. PreferenceCollator(tok)(records)), got "
                    f"{what}"
                )
            if not isinstance(b["input_ids"], Tensor):
                raise TypeError(
                    f"batch {i}: input_ids must be a tensor, got {type(b['input_ids']).__name__}"
                )
            ids = b["input_ids"].to(dev)
            att = b.get("attention_mask", torch.ones_like(ids)).to(dev)
            pos = (att.long().cumsum(-1) - 1).clamp(min=0)  # left padding keeps real positions
            _, h = residual_stream(
                model, layer, ids, att, site=site, use_cache=False, position_ids=pos
            )
            mask = _response_mask(b, i).to(dev) if response_only else att.bool()
            vecs = h[mask].float().cpu()
            out.append(vecs)
            n += len(vecs)
            if n >= max_vectors:
                break
    finally:
        model.train(was_training)
    if not out or n == 0:
        raise ValueError(
            "no activation was harvested: the batches were empty or had no response tokens"
        )
    return torch.cat(out)[:max_vectors]


def _response_mask(b: dict[str, Tensor], i: int) -> Tensor:
    if "completion_mask" in b:
        return b["completion_mask"].bool()
    if "labels" in b:
        # labels[t] marks token t as a response token (unshifted, as the collator builds them)
        return b["labels"] != -100
    raise ValueError(
        f"batch {i} has neither completion_mask nor labels: cannot find the "
        "response tokens (or pass response_only=False)"
    )


def _fve(sae: SparseAutoencoder, acts: Tensor, chunk: int = 8192) -> tuple[float, float, Tensor]:
    err = tot = l0 = 0.0
    active = torch.zeros(sae.d_sae, dtype=torch.bool, device=acts.device)
    mu = acts.mean(0)
    for s in range(0, len(acts), chunk):
        x = acts[s : s + chunk]
        rec, c = sae(x)
        err += float(((x - rec) ** 2).sum())
        tot += float(((x - mu) ** 2).sum())
        l0 += float((c > 0).sum())
        active |= (c > 0).any(0)
    return 1 - err / max(tot, 1e-30), l0 / len(acts), active


@torch.no_grad()
def sae_metrics(sae: SparseAutoencoder, acts: Tensor) -> dict[str, float]:
    """Fraction of variance explained ``FVE = 1 - E‖h - ĥ‖² / E‖h - E h‖²``, mean L0 (active
    features per vector) and the dead fraction (features never active on ``acts``)."""
    if not isinstance(acts, Tensor):
        raise TypeError(
            f"acts must be a torch tensor (N, d_in), got {type(acts).__name__} (use "
            "torch.as_tensor)"
        )
    if acts.ndim != 2 or acts.shape[1] != sae.d_in:
        raise ValueError(f"acts must be (N, d_in={sae.d_in}), got {tuple(acts.shape)}")
    if len(acts) < 2:
        raise ValueError("sae_metrics needs at least 2 activation vectors")
    acts = acts.to(device=sae.W_enc.device, dtype=sae.W_enc.dtype)
    fve, l0, active = _fve(sae, acts)
    return {"fve": fve, "l0": l0, "dead_frac": 1 - float(active.float().mean())}


def train_sae(
    acts: Tensor,
    *,
    d_sae: int,
    kind: Literal["topk", "relu"] = "topk",
    k_sae: int = 8,
    l1: float | None = None,
    steps: int = 3000,
    batch: int = 1024,
    lr: float = 1e-3,
    seed: int = 0,
    holdout: float = 0.1,
    aux_k: int | None = None,
    aux_coef: float = 1 / 32,
    dead_after_steps: int = 50,
    progress: bool | None = None,
) -> tuple[SparseAutoencoder, dict[str, Any]]:
    """Fit an SAE to ``acts`` ``(N, d)`` (docs/fpo.md, "Training an SAE for your model").

    Normalises by ``input_scale = √d / mean‖h‖``; initialises unit-norm random decoder rows,
    ``W_enc = W_decᵀ``, ``b_dec`` = the mean (scaled) activation, ``b_enc = 0``; trains with
    Adam on ``‖h - ĥ‖²`` (TopK) or ``‖h - ĥ‖² + l1 Σ_i c_i ‖W_dec,i‖`` (ReLU), re-normalising the
    decoder rows after each step. Returns ``(sae, info)``; ``info`` holds the held-out
    :func:`sae_metrics` (``fve``, ``l0``, ``dead_frac``) and the loss curve. The SAE comes back
    frozen (``requires_grad_(False)``), on ``acts``' device, float32.

    ``aux_k`` (TopK only; off by default) adds the AuxK loss of Gao et al. 2024 (§A.2, as in
    SAELens and EleutherAI's sparsify) against dead latents: the latents that have not fired
    for ``dead_after_steps`` steps reconstruct the (detached) residual ``h - ĥ`` with their
    ``aux_k`` largest pre-activations, and ``aux_coef`` (1/32) times that error, normalised by
    the residual's variance, is added to the loss. ``info["aux_dead_frac"]`` is the dead
    fraction the training saw at its last step.
    """
    from icml25.progress import track

    r = _SAERecipe.checked(
        acts,
        d_sae=d_sae,
        kind=kind,
        k_sae=k_sae,
        l1=l1,
        steps=steps,
        batch=batch,
        lr=lr,
        seed=seed,
        holdout=holdout,
        aux_k=aux_k,
        aux_coef=aux_coef,
        dead_after_steps=dead_after_steps,
    )
    acts = acts.float()
    gen = torch.Generator().manual_seed(r.seed)
    perm = torch.randperm(len(acts), generator=gen).to(acts.device)
    n_hold = max(1, int(round(len(acts) * r.holdout)))
    hold, train = acts[perm[:n_hold]], acts[perm[n_hold:]]
    sae, scale = _initial_sae(train, r, gen)
    opt = torch.optim.Adam(sae.parameters(), lr=r.lr)
    xs = train * scale
    losses = []
    latents = _DeadLatents.fresh(r.d_sae, acts.device)
    disable = None if progress is None else not progress
    for _ in track(range(r.steps), "training SAE", total=r.steps, disable=disable):
        idx = torch.randint(len(xs), (min(r.batch, len(xs)),), generator=gen).to(acts.device)
        losses.append(_sae_step(sae, opt, xs[idx], r, latents))
    sae.requires_grad_(False)
    info: dict[str, Any] = sae_metrics(sae, hold)
    info.update(losses=losses, input_scale=scale, n_train=len(train), n_holdout=n_hold)
    if r.aux_k is not None:
        info["aux_dead_frac"] = float(latents.dead.float().mean())
    return sae, info


@dataclass(frozen=True)
class _SAERecipe:
    """:func:`train_sae`'s settings, checked (``l1`` for ReLU only; ``aux_*`` only with
    ``aux_k``)."""

    d_sae: int
    kind: Literal["topk", "relu"]
    k_sae: int
    l1: float | None
    steps: int
    batch: int
    lr: float
    seed: int
    holdout: float
    aux_k: int | None
    aux_coef: float
    dead_after_steps: int

    @classmethod
    def checked(cls, acts: Any, **kw: Any) -> _SAERecipe:
        """Check ``acts`` (a finite floating ``(N, d)`` tensor, ``N >= 20``) and the settings."""
        if not isinstance(acts, Tensor):
            raise TypeError(
                f"acts must be a torch tensor (N, d), got {type(acts).__name__} "
                "(use torch.as_tensor)"
            )
        if acts.ndim != 2 or len(acts) < 20:
            raise ValueError(
                "acts must be an (N, d) tensor with N >= 20, got "
                f"{tuple(getattr(acts, 'shape', ()))}"
            )
        if not acts.is_floating_point():
            raise TypeError(f"acts must be a floating tensor, got {acts.dtype}")
        if not torch.isfinite(acts).all():
            raise ValueError("acts contain NaN or inf")
        kind = kw["kind"]
        if kind not in ("topk", "relu"):
            raise ValueError(f"train_sae supports kind 'topk' or 'relu', got {kind!r}")
        for n in ("d_sae", "steps", "batch", "k_sae"):
            kw[n] = _positive_int(n, kw[n])
        kw["lr"] = as_real("lr", kw["lr"], low=0.0, low_open=True)
        kw["seed"] = as_int("seed", kw["seed"])
        kw["holdout"] = as_real(
            "holdout", kw["holdout"], low=0.0, high=1.0, low_open=True, high_open=True
        )
        if kind == "relu":
            if kw["l1"] is None:
                raise ValueError("kind='relu' needs an L1 coefficient l1 > 0, got None")
            kw["l1"] = as_real("l1", kw["l1"], low=0.0, low_open=True)
        if kw["aux_k"] is not None:
            if kind != "topk":
                raise ValueError(
                    f"aux_k (the AuxK loss) is for kind='topk' SAEs, got kind={kind!r}"
                )
            kw["aux_k"] = as_int("aux_k", kw["aux_k"], 1, kw["d_sae"])
            kw["aux_coef"] = as_real("aux_coef", kw["aux_coef"], low=0.0)
            kw["dead_after_steps"] = _positive_int("dead_after_steps", kw["dead_after_steps"])
        return cls(**kw)


def _initial_sae(
    train: Tensor, r: _SAERecipe, gen: torch.Generator
) -> tuple[SparseAutoencoder, float]:
    """The SAE before training and its ``input_scale = √d / mean‖h‖``: unit-norm random decoder
    rows, ``W_enc = W_decᵀ``, ``b_dec`` = the mean scaled activation, ``b_enc = 0``."""
    d = train.shape[1]
    scale = math.sqrt(d) / float(train.norm(dim=1).mean().clamp(min=1e-12))
    sae = SparseAutoencoder(
        d, r.d_sae, kind=r.kind, k_sae=r.k_sae if r.kind == "topk" else None, input_scale=scale
    ).to(train.device)
    with torch.no_grad():
        w = torch.randn(r.d_sae, d, generator=gen).to(train.device)
        sae.W_dec.copy_(w / w.norm(dim=1, keepdim=True))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_dec.copy_(train.mean(0) * scale)
    return sae, scale


@dataclass
class _DeadLatents:
    """AuxK's bookkeeping: the steps since each latent last fired, and the latents that have not
    fired for ``dead_after_steps`` steps."""

    since_fired: Tensor
    dead: Tensor

    @classmethod
    def fresh(cls, d_sae: int, device: Any) -> _DeadLatents:
        return cls(
            torch.zeros(d_sae, dtype=torch.long, device=device),
            torch.zeros(d_sae, dtype=torch.bool, device=device),
        )

    def update(self, c: Tensor, dead_after_steps: int) -> int:
        """Count this step's codes ``c``; the number of dead latents."""
        fired = (c > 0).any(0)
        self.since_fired = torch.where(
            fired, torch.zeros_like(self.since_fired), self.since_fired + 1
        )
        self.dead = self.since_fired >= dead_after_steps
        return int(self.dead.sum())


def _sae_step(
    sae: SparseAutoencoder,
    opt: torch.optim.Optimizer,
    x: Tensor,
    r: _SAERecipe,
    latents: _DeadLatents,
) -> float:
    """One Adam step on the scaled activations ``x``: ``‖h - ĥ‖²`` (+ the L1 penalty for ReLU,
    + AuxK), then the decoder rows re-normalised; the step's loss."""
    pre = (x @ sae.W_enc) + sae.b_enc
    if r.kind == "topk":
        top = torch.relu(pre).topk(r.k_sae, dim=-1)
        c = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
    else:
        c = torch.relu(pre)
    rec = c @ sae.W_dec + sae.b_dec
    loss = ((x - rec) ** 2).sum(-1).mean()
    if r.kind == "relu":
        loss = loss + r.l1 * (c * sae.W_dec.norm(dim=1)).sum(-1).mean()
    if r.aux_k is not None:
        n_dead = latents.update(c, r.dead_after_steps)
        if n_dead > 0 and r.aux_coef > 0:
            loss = loss + r.aux_coef * _auxk_loss(
                pre, x - rec.detach(), sae.W_dec, latents.dead, min(r.aux_k, n_dead)
            )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sae.normalize_decoder_()
    return loss.item()


def _auxk_loss(pre: Tensor, residual: Tensor, W_dec: Tensor, dead: Tensor, k: int) -> Tensor:
    """AuxK (Gao et al. 2024, §A.2): the ``k`` largest pre-activations among the ``dead``
    latents reconstruct ``residual`` (detached); the squared error over the residual's total
    variance (as EleutherAI's sparsify normalises it)."""
    masked = torch.where(dead, pre, torch.full_like(pre, -torch.inf))
    top = masked.topk(k, dim=-1)
    z = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
    err = ((z @ W_dec - residual) ** 2).sum()
    var = ((residual - residual.mean(0)) ** 2).sum().clamp(min=1e-12)
    return err / var
