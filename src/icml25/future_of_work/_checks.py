"""The package's disclaimer (argument checks live in :mod:`icml25._validate`)."""

from __future__ import annotations

__all__ = ["DISCLAIMER"]

DISCLAIMER = "Interpretation tool; the paper does not specify this mechanism."
