"""Back-propagating the topological signature to samples (§6, reconstructed) and the signature
curve against the adversarial fraction (§5)."""

from __future__ import annotations

import math
import statistics

import torch
from torch import Tensor

from icml25._validate import as_int, as_prob
from icml25.topo_detect.losses import _dims, _positive, mk_loss, tp_loss
from icml25.topo_detect.persistence import total_persistence, vr_diagrams

__all__ = ["chunks", "sample_signatures", "signature_curve"]

#: the adversarial fractions of the signature curve (§5): 0, 0.1, ..., 1
FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))


def chunks(n: int, size: int, generator: torch.Generator | None) -> list[Tensor]:
    """A label-independent random split of ``0..n-1`` into chunks of ``size``; a last chunk
    smaller than ``max(10, size / 2)`` joins the previous one."""
    n = as_int("n", n, 1)
    size = as_int("size", size, 1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r}")
    perm = torch.randperm(n, generator=generator)
    out = list(perm.split(size))
    if len(out) > 1 and len(out[-1]) < max(10, size / 2):
        last = out.pop()
        out[-1] = torch.cat([out[-1], last])
    return out


def sample_signatures(
    image_emb: Tensor,
    text_emb: Tensor,
    *,
    loss: str = "tp",
    mode: str = "attribution",
    chunk_size: int = 50,
    generator=None,
    alpha: float = 1.0,
    dims=(0, 1),
    signed: bool = False,
    wrt: str = "embedding",
    image_encoder=None,
    images=None,
    **loss_kw,
) -> Tensor:
    """Per-sample topological features of paired clouds (equal N).

    ``mode="attribution"`` (default): in each chunk, every finite pair r of the image cloud adds
    ``pers_r^alpha / |V_r|`` to each distinct vertex of its critical edges (death edge for H0,
    birth and death edges above), per dimension: ``(N, len(dims))``. ``signed=True`` multiplies
    dimension k by ``sign(Pers_k(X) - Pers_k(Y))`` (the TP loss's chain rule).
    ``mode="gradient"``: the autograd gradient of the chunk's loss (``loss="tp"`` or ``"mk"``)
    with respect to the image embeddings, ``(N, d)``; with ``wrt="input"`` it is chained through
    ``image_encoder`` to the ``images`` themselves (``(N, ...)``, flattened; images larger than
    32x32 are average-pooled to 32x32 first to keep kernels cheap), "back-propagated to input
    samples" literally; ``image_emb`` is then ignored for the clouds (the encoder's outputs are
    used). (Attribution uses the persistence pairs
    themselves, so ``loss`` and ``**loss_kw`` only matter in gradient mode.) Float32/float64
    inputs keep their dtype in the output."""
    X, Y = torch.as_tensor(image_emb), torch.as_tensor(text_emb)
    chunk_size, alpha, dims, images = _check_signature_inputs(
        X, Y, loss, mode, chunk_size, alpha, dims, wrt, image_encoder, images, loss_kw
    )
    out, out_dtype = _signature_buffer(X, mode, wrt, dims, images)
    for idx in chunks(X.shape[0], chunk_size, generator):
        idx = idx.to(X.device)
        x, y = X[idx].detach(), Y[idx].detach()
        if mode == "attribution":
            _attribute_chunk(out, idx, x, y, dims=dims, alpha=alpha, signed=signed)
        else:
            _gradient_chunk(
                out,
                idx,
                x,
                y,
                loss,
                loss_kw,
                alpha=alpha,
                dims=dims,
                wrt=wrt,
                encoder=image_encoder,
                images=images,
            )
    return out.to(out_dtype)


def _check_signature_inputs(
    X, Y, loss, mode, chunk_size, alpha, dims, wrt, image_encoder, images, loss_kw
):
    """The arguments of :func:`sample_signatures`, checked in order; returns the checked
    ``(chunk_size, alpha, dims, images)`` (``images`` as a tensor, pooled to 32x32 when larger)."""
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"image_emb and text_emb must be (N, d) with the same N, got {tuple(X.shape)} and {tuple(Y.shape)}"
        )
    if mode not in ("attribution", "gradient"):
        raise ValueError(f"mode must be 'attribution' or 'gradient', got {mode!r}")
    if loss not in ("tp", "mk"):
        raise ValueError(f"loss must be 'tp' or 'mk', got {loss!r}")
    chunk_size = as_int("chunk_size", chunk_size, 3)
    alpha = _positive("alpha", alpha)
    dims = _dims(dims)
    allowed = {"tp": {"metric"}, "mk": {"sigmas", "reduction", "metric"}}[loss]
    unknown = sorted(set(loss_kw) - allowed)
    if unknown:
        raise TypeError(
            f"unknown keyword(s) {unknown} for sample_signatures(loss={loss!r}); the loss takes "
            f"{sorted(allowed)}"
        )
    if wrt not in ("embedding", "input"):
        raise ValueError(f"wrt must be 'embedding' or 'input', got {wrt!r}")
    if wrt == "input":
        if mode != "gradient":
            raise ValueError("wrt='input' is a gradient: pass mode='gradient'")
        if image_encoder is None or images is None:
            raise ValueError("wrt='input' needs image_encoder and images (the encoder's inputs)")
        images = torch.as_tensor(images)
        if len(images) != X.shape[0]:
            raise ValueError(
                f"images must have one row per embedding ({X.shape[0]}), got {tuple(images.shape)}"
            )
        if images.ndim == 4 and images.shape[-1] > 32:
            images = torch.nn.functional.adaptive_avg_pool2d(images, 32)
    for name, t in (("image_emb", X), ("text_emb", Y)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} has non-finite values")
    return chunk_size, alpha, dims, images


def _signature_buffer(X: Tensor, mode: str, wrt: str, dims, images) -> tuple[Tensor, torch.dtype]:
    """The zero output the chunks fill (float64 attributions, one column per dimension; or one
    gradient row per sample) and the dtype it is returned in (float32/float64 inputs keep theirs)."""
    N = X.shape[0]
    out_dtype = (
        X.dtype
        if X.is_floating_point() and X.dtype in (torch.float32, torch.float64)
        else torch.float32
    )
    if mode == "attribution":
        out = torch.zeros(N, len(dims), dtype=torch.float64, device=X.device)
    elif wrt == "input":
        out = torch.zeros(N, images[0].numel(), dtype=out_dtype, device=X.device)
    else:
        out = torch.zeros(
            N,
            X.shape[1],
            dtype=X.dtype if X.is_floating_point() else torch.float32,
            device=X.device,
        )
    return out, out_dtype


def _attribute_chunk(
    out: Tensor, idx: Tensor, x: Tensor, y: Tensor, *, dims, alpha, signed
) -> None:
    """Attribution in one chunk: every finite pair r of the image cloud's diagram in dimension k
    adds ``sign_k * pers_r^alpha / |V_r|`` to each distinct vertex of its critical edges."""
    dgx = vr_diagrams(x, max_dim=max(dims))
    sign = _persistence_signs(dgx, y, dims, alpha) if signed else [1.0] * len(dims)
    for j, k in enumerate(dims):
        dg = dgx[k]
        if len(dg) == 0:
            continue
        pers = (dg.diagram[:, 1] - dg.diagram[:, 0]).detach().double().clamp(min=0) ** alpha
        verts = (dg.pairs[:, 1:3] if k == 0 else dg.pairs).to(x.device)
        srt = verts.sort(1).values
        first = torch.ones_like(srt, dtype=torch.bool)
        first[:, 1:] = srt[:, 1:] != srt[:, :-1]
        first &= srt >= 0
        share = sign[j] * pers / first.sum(1).clamp(min=1)  # pers / |V_r|
        contrib = torch.where(
            first, share[:, None].expand_as(srt), torch.zeros_like(srt, dtype=share.dtype)
        )
        col = torch.zeros(len(idx), dtype=torch.float64, device=x.device)
        col.index_add_(0, srt.clamp(min=0).reshape(-1), contrib.reshape(-1))
        out[idx, j] += col


def _persistence_signs(dgx, y: Tensor, dims, alpha) -> list[float]:
    """``sign(Pers_k(X) - Pers_k(Y))`` per dimension (the TP loss's chain rule)."""
    dgy = vr_diagrams(y, max_dim=max(dims))
    return [
        float(torch.sign(total_persistence(dgx[k], alpha) - total_persistence(dgy[k], alpha)))
        for k in dims
    ]


def _gradient_chunk(out, idx, x, y, loss, loss_kw, *, alpha, dims, wrt, encoder, images) -> None:
    """Gradient mode in one chunk: the autograd gradient of the chunk's loss with respect to the
    embeddings, or (``wrt="input"``) to the encoder's inputs, flattened into the chunk's rows."""
    if wrt == "input":
        leaf = images[idx.to(images.device)].detach().clone().requires_grad_(True)
        with torch.enable_grad():
            x = encoder(leaf)
    else:
        leaf = x = x.clone().requires_grad_(True)
    with torch.enable_grad():
        value = (
            tp_loss(x, y, alpha=alpha, dims=dims, **loss_kw)
            if loss == "tp"
            else mk_loss(x, y, dims=dims, **loss_kw)
        )
        (g,) = torch.autograd.grad(value, leaf, allow_unused=True)
    g = torch.zeros_like(leaf) if g is None else g.detach()
    out[idx] = g.reshape(len(idx), -1).to(device=out.device, dtype=out.dtype)


def _encode(model, x: Tensor, batch: int = 256) -> Tensor:
    with torch.no_grad():
        return torch.cat([model.encode_image(x[i : i + batch]) for i in range(0, len(x), batch)])


def signature_curve(
    model,
    clean,
    adversarial,
    class_texts,
    *,
    fractions=FRACTIONS,
    batch_size: int = 100,
    n_batches: int = 20,
    pairing: str = "predicted",
    labels=None,
    alpha: float = 1.0,
    sigmas=(0.1,),
    dims=(0, 1),
    generator: torch.Generator | None = None,
    disable_progress: bool | None = None,
) -> dict:
    """The observed signature of §5: batch means of ``L_TP`` and ``L_MK`` between the image cloud
    and its paired text cloud as a fraction ``p`` of the batch is adversarial.

    ``model``: an :class:`~icml25.topo_detect.models.AlignmentModel` whose ``encode_image`` maps
    ``clean`` and ``adversarial`` images (``(N, ...)``, ``adversarial[i]`` the attacked
    ``clean[i]``); ``None`` when both are already image embeddings ``(N, d)``. ``class_texts``:
    the class text embeddings ``(K, d)`` in the same space, or a list of strings for
    ``model.encode_text``. ``pairing``: ``"predicted"`` (the text of the class the model predicts;
    a detector knows no labels), ``"label"`` (needs ``labels``) or ``"caption"`` (``class_texts``
    is ``(N, d)``, one caption per image). For each ``p``, ``n_batches`` batches of
    ``batch_size`` distinct indices are drawn (``generator``) and the first ``round(p B)`` are
    replaced by their adversarial versions.

    Returns ``{"fractions": [...], "tp"|"mk"|"pers0_x"|"pers1_x"|"pers0_y"|"pers1_y": {"mean":
    [...], "std": [...]}, "spearman": {"tp": rho, "mk": rho}}`` (Spearman's rho of p against
    the batch means; its sign is the direction of the change)."""
    from scipy.stats import spearmanr

    from icml25.progress import track

    if pairing not in ("predicted", "label", "caption"):
        raise ValueError(f"pairing must be 'predicted', 'label' or 'caption', got {pairing!r}")
    clean, adversarial = torch.as_tensor(clean), torch.as_tensor(adversarial)
    if clean.shape != adversarial.shape:
        raise ValueError(
            "adversarial[i] must be the attacked clean[i]: shapes differ, "
            f"{tuple(clean.shape)} vs {tuple(adversarial.shape)}"
        )
    E = clean if model is None else _encode(model, clean)
    E_adv = adversarial if model is None else _encode(model, adversarial)
    if E.ndim != 2:
        raise ValueError(f"image embeddings must be (N, d), got {tuple(E.shape)}")
    N = len(E)
    if isinstance(class_texts, (list, tuple)) and class_texts and isinstance(class_texts[0], str):
        if model is None or not hasattr(model, "encode_text"):
            raise ValueError("text prompts need a model with encode_text; pass embeddings (K, d)")
        with torch.no_grad():
            class_texts = model.encode_text(list(class_texts))
    T = torch.as_tensor(class_texts).to(E)
    if T.ndim != 2 or T.shape[1] != E.shape[1]:
        raise ValueError(
            f"class_texts must be (K, {E.shape[1]}) embeddings in the image space, got {tuple(T.shape)}"
        )
    if pairing == "label":
        if labels is None or len(labels) != N:
            raise ValueError(f"pairing='label' needs labels, one per image ({N})")
        labels = torch.as_tensor(labels).long().to(E.device)
        if int(labels.min()) < 0 or int(labels.max()) >= len(T):
            raise ValueError(f"labels must index class_texts (0..{len(T) - 1})")
    if pairing == "caption" and len(T) != N:
        raise ValueError(f"pairing='caption' needs one caption per image: {N} rows, got {len(T)}")
    batch_size = as_int("batch_size", batch_size, 2, N)
    n_batches = as_int("n_batches", n_batches, 1)
    fractions = [as_prob("fractions", p) for p in fractions]
    if len(set(fractions)) < 2:
        raise ValueError(
            f"fractions must be at least 2 distinct numbers in [0, 1] (a curve, and its Spearman "
            f"rho), got {fractions}"
        )
    keys = ("tp", "mk", "pers0_x", "pers1_x", "pers0_y", "pers1_y")
    rows = {key: [] for key in keys}
    max_dim = max(max(dims), 1)
    for p in track(fractions, "signature curve", disable=disable_progress):
        vals = {key: [] for key in keys}
        for _ in range(n_batches):
            idx = torch.randperm(N, generator=generator)[:batch_size].to(E.device)
            k = int(round(p * batch_size))
            e = torch.cat([E_adv[idx[:k]], E[idx[k:]]])
            if pairing == "predicted":
                t = T[(e @ T.T).argmax(-1)]
            elif pairing == "label":
                t = T[labels[idx]]
            else:
                t = T[idx]
            dx, dy = vr_diagrams(e, max_dim=max_dim), vr_diagrams(t, max_dim=max_dim)
            vals["tp"].append(float(tp_loss(dx, dy, alpha=alpha, dims=dims)))
            vals["mk"].append(float(mk_loss(dx, dy, sigmas=sigmas, dims=dims)))
            for h in (0, 1):
                vals[f"pers{h}_x"].append(float(total_persistence(dx[h], alpha)))
                vals[f"pers{h}_y"].append(float(total_persistence(dy[h], alpha)))
        for key in keys:
            rows[key].append((statistics.fmean(vals[key]), statistics.pstdev(vals[key])))
    out = {"fractions": fractions}
    for key in keys:
        out[key] = {"mean": [m for m, _ in rows[key]], "std": [s for _, s in rows[key]]}

    def rho(key):
        if len(fractions) < 2 or len(set(out[key]["mean"])) < 2:
            return math.nan
        return float(spearmanr(fractions, out[key]["mean"])[0])

    out["spearman"] = {"tp": rho("tp"), "mk": rho("mk")}
    return out
