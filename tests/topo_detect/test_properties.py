"""Issue 49: pandas samples, and inputs at the public boundary."""

import numpy as np
import pandas as pd
import pytest
import torch

from icml25.topo_detect import GaussianMMD, vr_diagrams


def test_pandas_dataframes_are_their_values():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(20, 3)), rng.normal(size=(20, 3)) + 1.0
    fromframe = GaussianMMD().test(
        pd.DataFrame(X), pd.DataFrame(Y), generator=torch.Generator().manual_seed(0)
    )  # before: KeyError
    fromarray = GaussianMMD().test(X, Y, generator=torch.Generator().manual_seed(0))
    assert fromframe.p_value == fromarray.p_value
    assert fromframe == fromarray
    a, b = vr_diagrams(pd.DataFrame(X)), vr_diagrams(X)
    assert all(torch.equal(u.diagram, v.diagram) for u, v in zip(a, b))


def test_a_dataframe_of_strings_is_refused_clearly():
    frame = pd.DataFrame({"a": ["x", "y", "z"], "b": [1.0, 2.0, 3.0]})
    with pytest.raises(TypeError, match="numeric"):
        GaussianMMD().test(frame, frame)
