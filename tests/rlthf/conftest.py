import numpy as np
import pytest

from icml25.rlthf import PreferencePairs


@pytest.fixture
def small_pairs():
    return PreferencePairs(
        ["How do I x?", "How do I y?", "How do I z?"],
        ["do x well", "y is hard", "z"],
        ["x badly", "y done right", "zz"],
        np.array([1, 0, 1]),
    )
