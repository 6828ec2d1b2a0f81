"""The domain-adaptation view of refusal training (arXiv:2502.04040, §3.2; Fig. 2-3).

RepE-style evidence: the hidden state of the last prompt token at a chosen layer, a PCA fitted on
in-distribution (ID) harmful and helpful prompts, and where OOD attack prompts fall in it. The
divergence between ID harmful and OOD attack representations is measured by the proxy
A-distance ``d_A = 2 (1 - 2 eps)`` (Ben-David et al., 2007), ``eps`` the held-out error of a
logistic-regression domain classifier; the paper's own quantitative measure is not given
(docs/safety_reasoning.md, Decisions).

"Last prompt token" is the last token of the *rendered* prompt, generation prompt included (the
assistant marker of the chat template): the state from which the model produces its first
response token, i.e. where it decides how to respond (our choice; docs/safety_reasoning.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from icml25._validate import as_int

__all__ = [
    "DivergenceReport",
    "last_token_states",
    "pca_projection",
    "proxy_a_distance",
    "representation_divergence",
]


def _resolve_layer(layer: Any, n_layers: int) -> int:
    if layer == "middle":
        return max(1, n_layers // 2 + n_layers % 2)
    if layer == "last":
        return n_layers
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
        raise ValueError(
            f"layer must be an int in [-{n_layers + 1}, {n_layers}], 'middle' or 'last', got {layer!r}"
        )
    if not -(n_layers + 1) <= layer <= n_layers:
        raise ValueError(
            f"layer {layer} is out of range for a model with {n_layers} layers "
            f"(hidden_states has {n_layers + 1} entries, 0 = embeddings)"
        )
    return int(layer) % (n_layers + 1)


def last_token_states(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    layer: Any = "middle",
    *,
    batch_size: int = 32,
    system: str | None = None,
    chat_template: bool = True,
) -> Any:
    """Hidden states ``(n, d)`` of the last prompt token at ``layer``.

    Args:
        model, tokenizer: a Hugging Face causal LM (or a PEFT model) and its tokenizer.
        prompts: user messages, rendered with the tokenizer's chat template and the generation
            prompt (``chat_template=False``: the raw text, tokenised without special tokens).
        layer: index into ``hidden_states`` (0 = embeddings, ``n_layers`` = last block; negative
            counts from the end), ``"middle"`` or ``"last"``.

    Returns:
        A float32 tensor on the model's device. The model's train/eval mode is restored.
    """
    import torch

    from icml25.llm import check_context_length

    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or not prompts:
        raise ValueError("prompts must be a non-empty list of strings")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"prompts[{i}] must be a string, got {type(p).__name__}")
    batch_size = as_int("batch_size", batch_size, 1)
    if chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat template: set tokenizer.chat_template, or pass "
            "chat_template=False to use the raw prompt text"
        )
    n_layers = int(getattr(getattr(model, "config", None), "num_hidden_layers", 0) or 0)
    if n_layers < 1:
        raise ValueError(
            "the model's config has no num_hidden_layers; pass a transformers causal LM"
        )
    idx = _resolve_layer(layer, n_layers)
    seqs = []
    for i, p in enumerate(prompts):
        if chat_template:
            msgs = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": p}
            ]
            text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        else:
            text = p
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"prompt {p!r:.60} tokenises to nothing")
        check_context_length(model, len(ids), what=f"prompt {i} ({p!r:.40})")
        seqs.append(ids)
    device = next(model.parameters()).device
    pad = (
        tokenizer.pad_token_id
        if tokenizer.pad_token_id is not None
        else (tokenizer.eos_token_id or 0)
    )
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.no_grad():
            for s in range(0, len(seqs), batch_size):
                chunk = seqs[s : s + batch_size]
                width = max(len(x) for x in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for r, x in enumerate(
                    chunk
                ):  # right padding: causal attention leaves real tokens alone
                    ids[r, : len(x)] = torch.tensor(x)
                    mask[r, : len(x)] = 1
                hs = model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    output_hidden_states=True,
                ).hidden_states[idx]
                last = torch.tensor([len(x) - 1 for x in chunk], device=device)
                out.append(hs[torch.arange(len(chunk), device=device), last].float())
    finally:
        model.train(was_training)
    return torch.cat(out)


def _np(x: Any, name: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    a = np.asarray(x, dtype=float)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} must be a non-empty (n, d) matrix, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} holds non-finite values")
    return a


def pca_projection(
    id_harm: Any, id_help: Any, ood: Any = None, n_components: int = 2
) -> dict[str, Any]:
    """Project representations on the principal components of ID harmful ∪ ID helpful.

    ``ood``: one ``(m, d)`` matrix or a ``{name: matrix}`` mapping (one per attack). Returns
    ``{"id_harm": (n, k), "id_help": (n, k), "ood": {name: (m, k)}, "components": (k, d),
    "mean": (d,), "explained_variance_ratio": (k,)}`` as numpy arrays.
    """
    a, b = _np(id_harm, "id_harm"), _np(id_help, "id_help")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"id_harm has dimension {a.shape[1]} but id_help {b.shape[1]}")
    n_components = as_int("n_components", n_components, 1, a.shape[1])
    oods = {} if ood is None else dict(ood) if isinstance(ood, Mapping) else {"ood": ood}
    oods = {k: _np(v, f"ood[{k!r}]") for k, v in oods.items()}
    for k, v in oods.items():
        if v.shape[1] != a.shape[1]:
            raise ValueError(f"ood[{k!r}] has dimension {v.shape[1]}, ID {a.shape[1]}")
    fit = np.concatenate([a, b])
    mean = fit.mean(0)
    _, s, vt = np.linalg.svd(fit - mean, full_matrices=False)
    comps = vt[:n_components]
    var = s**2
    proj = lambda x: (x - mean) @ comps.T  # noqa: E731
    return {
        "id_harm": proj(a),
        "id_help": proj(b),
        "ood": {k: proj(v) for k, v in oods.items()},
        "components": comps,
        "mean": mean,
        "explained_variance_ratio": var[:n_components] / var.sum()
        if var.sum() > 0
        else np.zeros(n_components),
    }


def proxy_a_distance(
    a: Any, b: Any, seed: int = 0, *, folds: int = 2, C: float = 1.0, return_errors: bool = False
) -> Any:
    """Proxy A-distance ``2 (1 - 2 eps)`` between two samples of representations.

    ``eps`` is the balanced held-out error (mean of the two classes' error rates) of a
    standardised logistic-regression domain classifier, cross-fitted over ``folds`` stratified
    folds so every point is predicted once by a classifier that did not see it. ``eps`` is
    capped at 0.5, so the distance is in ``[0, 2]``: about 0 for one distribution, 2 for
    separable ones. ``return_errors=True`` also returns the 0/1 held-out error of each point
    (``a``'s first), for intervals over points.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _np(a, "a"), _np(b, "b")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"a has dimension {x.shape[1]} but b {y.shape[1]}")
    folds = as_int("folds", folds, 2)
    if min(len(x), len(y)) < folds:
        raise ValueError(
            f"each sample needs at least folds={folds} points, got {len(x)} and {len(y)}"
        )
    data = np.concatenate([x, y])
    lab = np.r_[np.zeros(len(x), int), np.ones(len(y), int)]
    pred = np.empty(len(lab), int)
    for tr, te in StratifiedKFold(folds, shuffle=True, random_state=seed).split(data, lab):
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))
        clf.fit(data[tr], lab[tr])
        pred[te] = clf.predict(data[te])
    err = (pred != lab).astype(float)
    eps = min(0.5, 0.5 * (err[lab == 0].mean() + err[lab == 1].mean()))
    d = 2.0 * (1.0 - 2.0 * eps)
    return (d, err) if return_errors else d


@dataclass
class DivergenceReport:
    """What :func:`representation_divergence` returns: proxy A-distance between ID harmful and
    each OOD set, the PCA projection, and the layer used."""

    a_distance: dict[str, float]
    projection: dict[str, Any]
    layer: int | str

    @property
    def mean_a_distance(self) -> float:
        return float(np.mean(list(self.a_distance.values())))


def representation_divergence(
    model: Any,
    tokenizer: Any,
    id_harmful: Sequence[str],
    id_helpful: Sequence[str],
    ood: Mapping[str, Sequence[str]],
    *,
    layer: Any = "middle",
    seed: int = 0,
    **kw: Any,
) -> DivergenceReport:
    """Last-prompt-token states of ID harmful, ID helpful and each OOD prompt set (``{attack:
    prompts}``); the proxy A-distance between ID harmful and each attack, and the PCA of
    Fig. 2-3."""
    if not isinstance(ood, Mapping) or not ood:
        raise ValueError("ood must be a non-empty {attack name: prompts} mapping")
    h = last_token_states(model, tokenizer, list(id_harmful), layer, **kw)
    g = last_token_states(model, tokenizer, list(id_helpful), layer, **kw)
    o = {k: last_token_states(model, tokenizer, list(v), layer, **kw) for k, v in ood.items()}
    dist = {k: float(proxy_a_distance(h, v, seed)) for k, v in o.items()}
    return DivergenceReport(dist, pca_projection(h, g, o), layer)
