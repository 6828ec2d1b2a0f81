"""``DigitsVLM``: an offline vision-language stand-in for DPS (docs/dps.md, "Reproduction").

A real ``icml25.llm`` chat backend whose "vision" is a small CNN over scikit-learn's digits
(upsampled to 32x32) and whose "language" is a fixed, documented rule set, so the whole DPS
pipeline (prompts, crops, helper, message plumbing) runs unchanged. Rules, applied to the last
user text (case-insensitive), first match wins:

1. a request for coordinates or bounding boxes -> ``"{}"`` (no text boxes);
2. a request for a description -> a description naming ``argmax p``, or an "unable to determine"
   reply when ``max p < tau_unsure``;
3. digit hints in the text (``digit``/``number`` followed by a digit) -> evidence fusion over the
   hints of every user turn after the first: ``fusion="bayes"``
   ``argmax_c log p(c) + Σ_j log C[c, h_j]`` with ``C`` the classifier's confusion matrix on
   crops of clean validation images (Laplace +0.5, row-normalised), or ``fusion="bonus"``
   ``argmax_c log p(c) + lam · #{j: h_j = c}``;
4. otherwise ``"The digit is {argmax p}."`` (or the uncertain reply below ``tau_unsure``).

How the stand-in "listens" to supervision is this documented rule; whether attacked images make
it less confident (the paper's observation) is measured, not assumed.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from icml25._validate import as_int, as_prob, as_real
from icml25.dps.images import last_image, to_pil
from icml25.llm.base import BaseChat, Completion, message_text

__all__ = [
    "DigitsCNN",
    "DigitsVLM",
    "confusion_matrix",
    "digits32",
    "fuse",
    "random_resized_crop",
    "train_classifier",
]

UNSURE = "The strokes are partial; I am unable to determine which digit this is."
_HINT = re.compile(r"(?:digit|number)\D{0,20}?(\d)", re.IGNORECASE)


def digits32(seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """scikit-learn's digits upsampled to ``(N, 1, 32, 32)`` (bilinear, [0, 1]), split 56 / 14 / 30
    % (stratified, ``random_state=seed``) into ``train``, ``val`` and ``test``."""
    seed = as_int("seed", seed, 0, 2**32 - 1)
    from sklearn.model_selection import train_test_split

    from icml25.toy import digits

    x, y = digits()
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).clamp(0, 1)
    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=0.30, stratify=y.numpy(), random_state=seed)
    tr, va = train_test_split(tr, test_size=0.20, stratify=y.numpy()[tr], random_state=seed)
    return {k: (x[i], y[i]) for k, i in (("train", tr), ("val", va), ("test", te))}


class DigitsCNN(nn.Module):
    """conv(1->w)-ReLU-pool-conv(w->2w)-ReLU-pool-conv(2w->2w)-ReLU-avgpool(2)-linear(8w->128)-ReLU-linear(128->10)."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(8 * w, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def random_resized_crop(
    x: torch.Tensor, gen: torch.Generator, lo: float = 0.2, hi: float = 1.0
) -> torch.Tensor:
    """A square random crop of area fraction ``U(lo, hi)`` per image, resized back: batched with
    ``affine_grid`` + ``grid_sample``."""
    n = x.shape[0]
    area = torch.empty(n).uniform_(lo, hi, generator=gen)
    s = area.sqrt()  # side fraction
    cx = (torch.rand(n, generator=gen) * 2 - 1) * (1 - s)
    cy = (torch.rand(n, generator=gen) * 2 - 1) * (1 - s)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 1, 1], theta[:, 0, 2], theta[:, 1, 2] = s, s, cx, cy
    grid = F.affine_grid(theta.to(x), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def train_classifier(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int = 1500,
    width: int = 32,
    seed: int = 0,
    lr: float = 2e-3,
    batch_size: int = 64,
    crop_prob: float = 0.5,
) -> DigitsCNN:
    """Adam, batches of 64; each image is replaced by a random-resized crop with probability 0.5
    so crops stay classifiable."""
    if not (
        isinstance(x, torch.Tensor) and x.ndim == 4 and x.shape[1] == 1 and x.is_floating_point()
    ):
        raise ValueError(
            f"x must be a float tensor (N, 1, H, W) in [0, 1], got {getattr(x, 'shape', type(x))}"
        )
    if not isinstance(y, torch.Tensor) or y.shape != (x.shape[0],):
        raise ValueError(
            f"y must be a tensor of {x.shape[0]} labels, got {getattr(y, 'shape', type(y))}"
        )
    steps, batch_size, width = (
        as_int("steps", steps, 1),
        as_int("batch_size", batch_size, 1),
        as_int("width", width, 1),
    )
    crop_prob = as_prob("crop_prob", crop_prob)
    lr = as_real("lr", lr, low=0.0, low_open=True)
    seed = as_int("seed", seed)
    torch.manual_seed(seed)
    model = DigitsCNN(width)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(y), (batch_size,), generator=gen)
        xb = x[idx]
        swap = torch.rand(batch_size, generator=gen) < crop_prob
        if swap.any():
            xb = xb.clone()
            xb[swap] = random_resized_crop(xb[swap], gen)
        loss = F.cross_entropy(model(xb), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def confusion_matrix(
    model: nn.Module, views: torch.Tensor, y: torch.Tensor, smoothing: float = 0.5
) -> np.ndarray:
    """``C[c, h] = P(the classifier says h on a view | true c)`` (Laplace ``smoothing`` per cell,
    row-normalised, float64)."""
    if len(views) != len(y):
        raise ValueError(f"{len(views)} views but {len(y)} labels")
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0 (Laplace), got {smoothing!r}")
    pred = model(views).argmax(-1).numpy()
    c = np.full((10, 10), smoothing, dtype=np.float64)
    for t, h in zip(y.numpy(), pred):
        c[t, h] += 1
    return c / c.sum(1, keepdims=True)


def fuse(
    logp: np.ndarray,
    hints: list[int],
    *,
    fusion: str = "bayes",
    confusion: np.ndarray | None = None,
    lam: float = 2.0,
) -> int:
    """The stand-in's decision given its own log-probabilities and the digit hints it was told."""
    score = np.asarray(logp, dtype=np.float64).copy()
    if score.ndim != 1 or len(score) < 2:
        raise ValueError(
            f"logp must be a vector of class log-probabilities, got shape {score.shape}"
        )
    k = len(score)
    for h in hints:
        as_int("hints", h, 0, k - 1)  # class indices
    if fusion == "bayes":
        if confusion is None:
            raise ValueError("fusion='bayes' needs the confusion matrix")
        for h in hints:
            score += np.log(confusion[:, h])
    elif fusion == "bonus":
        for h in hints:
            score[h] += lam
    else:
        raise ValueError(f"fusion must be 'bayes' or 'bonus', got {fusion!r}")
    return int(np.argmax(score))


class DigitsVLM(BaseChat):
    """The stand-in vision-language model (see the module docstring).

    Args:
        model: the digit classifier (``DigitsCNN``).
        confusion: its crop confusion matrix (for ``fusion="bayes"``).
        fusion, lam: the evidence-fusion rule and the bonus weight.
        tau_unsure: below this max-probability it replies that it cannot tell (0: never).
    """

    native_batching = False

    def __init__(
        self,
        model: nn.Module,
        confusion: np.ndarray | None = None,
        *,
        fusion: str = "bayes",
        lam: float = 2.0,
        tau_unsure: float = 0.0,
        name: str = "digits-vlm",
    ) -> None:
        if fusion not in ("bayes", "bonus"):
            raise ValueError(f"fusion must be 'bayes' or 'bonus', got {fusion!r}")
        if fusion == "bayes" and (confusion is None or np.asarray(confusion).shape != (10, 10)):
            raise ValueError(
                "fusion='bayes' needs the classifier's (10, 10) crop confusion matrix: pass "
                "confusion=confusion_matrix(model, crops, labels), or use fusion='bonus'"
            )
        lam = as_real("lam", lam, low=0.0)
        tau_unsure = as_prob("tau_unsure", tau_unsure)  # a max-probability
        if confusion is not None:
            c = np.asarray(confusion, dtype=np.float64)
            if (c <= 0).any() or not np.allclose(c.sum(1), 1):
                raise ValueError(
                    "confusion must hold positive rows that sum to 1 (use confusion_matrix)"
                )
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be the digit classifier (a torch module), got {type(model).__name__}"
            )
        with torch.no_grad():
            out = model.eval()(
                torch.zeros(
                    1, 1, 32, 32, dtype=next(iter(model.parameters()), torch.zeros(())).dtype
                )
            )
        if out.shape != (1, 10):
            raise ValueError(
                f"model must map (N, 1, 32, 32) images to 10 digit logits, got output shape {tuple(out.shape)}"
            )
        self.model, self.confusion, self.fusion = model.eval(), confusion, fusion
        self.lam, self.tau_unsure, self.name, self.concurrency = (
            float(lam),
            float(tau_unsure),
            name,
            1,
        )
        self.calls = 0

    @torch.no_grad()
    def probs(self, image: Any) -> np.ndarray:
        """The classifier's class probabilities (float64, shape 10) for any image ``to_pil``
        accepts (PIL, arrays, tensors in [0, 1], paths); colour images are read as grey."""
        arr = np.asarray(to_pil(image).convert("L"), dtype=np.float32) / 255.0
        x = torch.from_numpy(arr)[None, None]
        x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
        return torch.softmax(self.model(x)[0].double(), -1).numpy()

    def reply(self, messages: list[dict[str, Any]]) -> str:
        self.calls += 1
        users = [m for m in messages if m["role"] == "user"]
        text = message_text(users[-1], allow_images=True).lower() if users else ""
        if "coordinates" in text or "bounding box" in text or "text box" in text:
            return "{}"
        image = last_image(messages)
        if image is None:
            return "I see no image."
        p = self.probs(image)
        top = int(np.argmax(p))
        if "describe" in text:
            return (
                UNSURE
                if p.max() < self.tau_unsure
                else f"A handwritten digit that looks like {top}."
            )
        if _HINT.search(text):
            hints = [
                int(h) for m in users[1:] for h in _HINT.findall(message_text(m, allow_images=True))
            ]
            c = fuse(
                np.log(np.maximum(p, 1e-300)),
                hints,
                fusion=self.fusion,
                confusion=self.confusion,
                lam=self.lam,
            )
            return f"After weighing the observations, the digit is {c}."
        return UNSURE if p.max() < self.tau_unsure else f"The digit is {top}."

    def _complete(self, messages: list[dict[str, Any]], params: Any) -> list[Completion]:
        return [Completion(self.reply(messages), finish_reason="stop") for _ in range(params.n)]
