"""Offline data for the reproduction: a noisy many-class task and digit-number sets."""

from __future__ import annotations

import torch

__all__ = ["digit_number_sets", "noisy_many_class"]


def noisy_many_class(
    seed: int,
    n_classes: int = 100,
    dim: int = 32,
    noise: float = 1.6,
    flip: float = 0.4,
    n_train: int = 5000,
    n_test: int = 5000,
):
    """Gaussian classes with structured label noise (docs/lapsum.md, part C).

    Class means ``mu_c ~ N(0, I_dim)``; ``x = mu_y + noise * eps``; with probability ``flip`` the
    label is replaced by one of the 4 nearest other class means (uniformly), in train and test
    alike, so the task is to rank the plausible classes. Everything comes from one
    ``torch.Generator(seed)``. Returns ``(x_train, y_train, x_test, y_test)``.
    """
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(n_classes, dim, generator=g)
    d = torch.cdist(mu, mu)
    d.fill_diagonal_(float("inf"))
    neighbours = d.topk(4, largest=False).indices  # (C, 4)

    def sample(n: int):
        y = torch.randint(n_classes, (n,), generator=g)
        x = mu[y] + noise * torch.randn(n, dim, generator=g)
        swap = torch.rand(n, generator=g) < flip
        pick = torch.randint(4, (n,), generator=g)
        y = torch.where(swap, neighbours[y, pick], y)
        return x, y

    x_tr, y_tr = sample(n_train)
    x_te, y_te = sample(n_test)
    return x_tr, y_tr, x_te, y_te


def digit_number_sets(seed_split: int = 123):
    """Digits images split into train / test pools (docs/lapsum.md, part B): ``(train_x, train_y, test_x, test_y)``.

    scikit-learn's 8x8 digits (1797 images, through the shared loader :func:`icml25.toy.digits`),
    scaled by 1/16 and flattened to 64 features; a fixed permutation (seed 123) gives 1300 train /
    497 test images.
    """
    from icml25.toy import digits

    x, y = digits("flat")
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed_split))
    tr, te = perm[:1300], perm[1300:]
    return x[tr], y[tr], x[te], y[te]


def sample_number_sets(
    images, labels, n_sets: int, n: int, generator: torch.Generator, digits_per_number: int = 2
):
    """``n_sets`` sets of n "numbers"; a number is ``digits_per_number`` images side by side.

    Returns ``features (n_sets, n, 64 * L)`` and ``values (n_sets, n)`` with value
    ``10 d1 + d2`` (+ U(0, 1e-3) to break ties inside a set).
    """
    idx = torch.randint(len(labels), (n_sets, n, digits_per_number), generator=generator)
    feats = images[idx].reshape(n_sets, n, -1)
    place = 10 ** torch.arange(digits_per_number - 1, -1, -1)
    values = (labels[idx] * place).sum(-1).to(torch.float32)
    values = values + 1e-3 * torch.rand(n_sets, n, generator=generator)
    return feats, values
