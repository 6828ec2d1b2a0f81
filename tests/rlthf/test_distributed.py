"""WeightedRewardTrainer under two gloo processes equals one process on the same global batch, and
its loss is the weighted mean over the global batch, not a mean of per-rank ratios (issue 47)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")
pytest.importorskip("torch.distributed")

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _first_step_rewards():
    """Rewards of the first optimiser step's 8 pairs (in order) under the initial model."""
    import datasets

    from icml25.rlthf.trl_trainer import WeightedPreferenceCollator, WeightedRewardTrainer

    sys.path.insert(0, str(WORKER.parent))
    try:
        import _ddp_worker
    finally:
        sys.path.remove(str(WORKER.parent))
    model, tok, rows = _ddp_worker.setup()
    # the trainer tokenises the rows as the workers' trainers do
    tr = WeightedRewardTrainer(
        model=model, processing_class=tok, train_dataset=datasets.Dataset.from_list(rows)
    )
    collate = WeightedPreferenceCollator(pad_token_id=tok.pad_token_id)
    batch = collate([tr.train_dataset[i] for i in range(8)])
    with torch.no_grad():
        r = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    r_c, r_r = torch.chunk(r.logits.squeeze(-1).double(), 2)
    return r_c, r_r, batch["weight"].double(), _ddp_worker.WEIGHTS


def test_two_processes_train_the_global_weighted_mean_of_one(ranks, tmp_path):
    from icml25.rlthf.losses import weighted_bt_loss

    # two processes, batch 2, 2 accumulation steps; one process, batch 4, 2 steps: 8 pairs a step
    two = ranks(WORKER, "2", "2", nproc=2)
    one = ranks(WORKER, "4", "2", nproc=1)
    assert [r["world"] for r in two] == [2, 2] and one[0]["world"] == 1

    # the first logged loss is the weighted mean over the step's 8 pairs on the initial model
    r_c, r_r, w, weights = _first_step_rewards()
    assert w.tolist() == weights[:8]
    global_mean = float(weighted_bt_loss(r_c, r_r, w))
    # per-micro-batch ratios averaged (what a per-rank normalisation trains) differ clearly
    per_batch = np.mean(
        [
            float(weighted_bt_loss(r_c[s : s + 2], r_r[s : s + 2], w[s : s + 2]))
            for s in range(0, 8, 2)
        ]
    )
    assert abs(per_batch - global_mean) > 20 * 1e-5
    for losses in (two[0]["losses"], two[1]["losses"], one[0]["losses"]):
        assert len(losses) == 2
        assert losses[0] == pytest.approx(global_mean, abs=1e-5)
    assert two[0]["losses"] == pytest.approx(one[0]["losses"], abs=1e-5)
    assert two[0]["losses"][1] != pytest.approx(two[0]["losses"][0], abs=1e-4)  # it trained

    # the trained weights are equal, and rank 0's checkpoint reloads to them
    for name, vals in one[0]["params"].items():
        np.testing.assert_allclose(two[0]["params"][name], vals, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(two[1]["params"][name], vals, rtol=1e-5, atol=1e-6, err_msg=name)
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "world2-1" / "model"
    )
    for name, t in saved.state_dict().items():
        if name in two[0]["params"]:
            np.testing.assert_allclose(
                t.double().flatten()[:64].numpy(), two[0]["params"][name], rtol=1e-6, err_msg=name
            )


@pytest.mark.slow
def test_accelerate_launch_trains_what_one_process_trains(ranks):
    """The same worker started by ``accelerate launch`` with a config file: two processes log the
    losses of one process with twice the batch."""
    two = ranks(WORKER, "2", "2", nproc=2, launcher="accelerate")
    one = ranks(WORKER, "4", "2", nproc=1)
    assert [r["world"] for r in two] == [2, 2]
    assert two[0]["losses"] == pytest.approx(one[0]["losses"], abs=1e-5)
    for name, vals in one[0]["params"].items():
        np.testing.assert_allclose(two[1]["params"][name], vals, rtol=1e-5, atol=1e-6, err_msg=name)
