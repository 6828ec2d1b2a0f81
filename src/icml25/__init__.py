"""icml25: the methods of 19 ICML 2025 papers as tested software, with small-scale reproductions.

Importing ``icml25`` is deliberately cheap: it pulls in no torch, no numpy. Each paper lives in its own
subpackage (``icml25.lapsum``, ``icml25.swan``, ...); :mod:`icml25.registry` lists them all.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
