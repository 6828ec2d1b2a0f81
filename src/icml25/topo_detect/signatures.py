"""Back-propagating the topological signature to samples (§6, reconstructed) and the signature
curve against the adversarial fraction (§5)."""

from __future__ import annotations

import torch
from torch import Tensor

from icml25.topo_detect.losses import mk_loss, tp_loss
from icml25.topo_detect.persistence import total_persistence, vr_diagrams

__all__ = ["chunks", "sample_signatures"]


def chunks(n: int, size: int, generator: torch.Generator | None) -> list[Tensor]:
    """A label-independent random split of ``0..n-1`` into chunks of ``size``; a last chunk
    smaller than ``max(10, size / 2)`` joins the previous one."""
    perm = torch.randperm(n, generator=generator)
    out = list(perm.split(size))
    if len(out) > 1 and len(out[-1]) < max(10, size / 2):
        last = out.pop()
        out[-1] = torch.cat([out[-1], last])
    return out


def sample_signatures(image_emb: Tensor, text_emb: Tensor, *, loss: str = "tp",
                      mode: str = "attribution", chunk_size: int = 50, generator=None,
                      alpha: float = 1.0, dims=(0, 1), signed: bool = False,
                      **loss_kw) -> Tensor:  # fmt: skip
    """Per-sample topological features of paired clouds (equal N).

    ``mode="attribution"`` (default): in each chunk, every finite pair r of the image cloud adds
    ``pers_r^alpha / |V_r|`` to each distinct vertex of its critical edges (death edge for H0,
    birth and death edges above), per dimension: ``(N, len(dims))``. ``signed=True`` multiplies
    dimension k by ``sign(Pers_k(X) - Pers_k(Y))`` (the TP loss's chain rule).
    ``mode="gradient"``: the autograd gradient of the chunk's loss (``loss="tp"`` or ``"mk"``)
    with respect to the image embeddings, ``(N, d)``. (Attribution uses the persistence pairs
    themselves, so ``loss`` and ``**loss_kw`` only matter in gradient mode.) Float32/float64
    inputs keep their dtype in the output."""
    X, Y = torch.as_tensor(image_emb), torch.as_tensor(text_emb)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"image_emb and text_emb must be (N, d) with the same N, got {tuple(X.shape)} and {tuple(Y.shape)}"
        )
    if mode not in ("attribution", "gradient"):
        raise ValueError(f"mode must be 'attribution' or 'gradient', got {mode!r}")
    if loss not in ("tp", "mk"):
        raise ValueError(f"loss must be 'tp' or 'mk', got {loss!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 3:
        raise ValueError(f"chunk_size must be an integer >= 3, got {chunk_size!r}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    for name, t in (("image_emb", X), ("text_emb", Y)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} has non-finite values")
    dims = tuple(dims)
    N = X.shape[0]
    out_dtype = (
        X.dtype
        if X.is_floating_point() and X.dtype in (torch.float32, torch.float64)
        else torch.float32
    )
    if mode == "attribution":
        out = torch.zeros(N, len(dims), dtype=torch.float64, device=X.device)
    else:
        out = torch.zeros(
            N,
            X.shape[1],
            dtype=X.dtype if X.is_floating_point() else torch.float32,
            device=X.device,
        )
    for idx in chunks(N, chunk_size, generator):
        idx = idx.to(X.device)
        x, y = X[idx].detach(), Y[idx].detach()
        if mode == "attribution":
            dgx = vr_diagrams(x, max_dim=max(dims))
            sign = [1.0] * len(dims)
            if signed:
                dgy = vr_diagrams(y, max_dim=max(dims))
                sign = [float(torch.sign(total_persistence(dgx[k], alpha) - total_persistence(dgy[k], alpha)))
                        for k in dims]  # fmt: skip
            for j, k in enumerate(dims):
                dg = dgx[k]
                if len(dg) == 0:
                    continue
                pers = (dg.diagram[:, 1] - dg.diagram[:, 0]).detach().double().clamp(min=0) ** alpha
                verts = (dg.pairs[:, 1:3] if k == 0 else dg.pairs).to(X.device)
                srt = verts.sort(1).values
                first = torch.ones_like(srt, dtype=torch.bool)
                first[:, 1:] = srt[:, 1:] != srt[:, :-1]
                first &= srt >= 0
                share = sign[j] * pers / first.sum(1).clamp(min=1)  # pers / |V_r|
                contrib = torch.where(
                    first, share[:, None].expand_as(srt), torch.zeros_like(srt, dtype=share.dtype)
                )
                col = torch.zeros(len(idx), dtype=torch.float64, device=X.device)
                col.index_add_(0, srt.clamp(min=0).reshape(-1), contrib.reshape(-1))
                out[idx, j] += col
        else:
            x = x.clone().requires_grad_(True)
            value = (tp_loss(x, y, alpha=alpha, dims=dims, **loss_kw) if loss == "tp"
                     else mk_loss(x, y, dims=dims, **loss_kw))  # fmt: skip
            (g,) = torch.autograd.grad(value, x, allow_unused=True)
            out[idx] = torch.zeros_like(x) if g is None else g.detach()
    return out.to(out_dtype)
