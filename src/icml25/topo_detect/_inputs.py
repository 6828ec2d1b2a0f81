"""Array-likes at the public boundary: pandas objects become their values (docs/topo_detect.md)."""

from __future__ import annotations

from typing import Any

import numpy as np


def plain_array(x: Any) -> Any:
    """A pandas ``DataFrame``/``Series`` (anything with ``to_numpy`` that is not a tensor) as its
    numpy values, rows as points; anything else unchanged. ``torch.as_tensor`` would index a
    DataFrame by column label (``KeyError: 5``)."""
    if hasattr(x, "to_numpy") and not hasattr(x, "numpy"):
        # a C-ordered copy: pandas may hand out a read-only, column-major view
        x = np.array(x.to_numpy(), order="C")
        if x.dtype == object:
            raise TypeError(
                "a pandas sample must have numeric columns only, got object (mixed or "
                "string) columns"
            )
    return x
