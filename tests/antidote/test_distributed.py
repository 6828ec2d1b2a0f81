"""Several processes: the toy pipeline's training loop is single-process and says so under a
torch.distributed group instead of repeating the same run on every rank."""

from __future__ import annotations

import pytest

from icml25.antidote.pipeline import HarmfulFinetuneExperiment, ToySettings


def test_toy_training_refuses_several_processes(monkeypatch):
    import icml25.llm.distributed as dist

    exp = HarmfulFinetuneExperiment(0, ToySettings(pretrain_steps=1, align_steps=1, n_eval=1))
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    with pytest.raises(RuntimeError, match="single-process loop.*one of 2 processes.*SFTTrainer"):
        exp.aligned()
    assert exp._aligned is None  # nothing trained, nothing cached
    monkeypatch.setattr(dist, "world_size", lambda: 1)
    model = exp.aligned()  # one process trains as before
    assert exp._aligned is model and not model.training
