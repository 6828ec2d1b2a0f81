"""The simplex policy, the two stages and the baselines."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from icml25.proxy_feedback import (
    MLPPolicy,
    PreferenceBatch,
    SimplexPolicy,
    SyntheticPreferenceWorld,
    evaluate,
    fit_finetune_all,
    fit_pooled,
    fit_proxy_stage,
    fit_true_only,
    fit_true_stage,
    sample_preferences,
)


@pytest.fixture(scope="module")
def hold():
    """World seed 0, stage 1 on 8000 proxy triples (pinned: docs/proxy_feedback.md)."""
    torch.manual_seed(0)
    w = SyntheticPreferenceWorld(seed=0)
    g = torch.Generator().manual_seed(10_000)
    proxy = sample_preferences(w.proxy_policy, 8000, generator=g)
    expert = sample_preferences(w.true_policy, 1000, generator=g)
    m = SimplexPolicy(5, 3, 2)
    fit_proxy_stage(m, proxy, seed=0)
    return w, proxy, expert, m


@pytest.mark.parametrize(
    "adapter,kw", [("loglinear", {}), ("mlp", {}), ("mlp", {"spectral_norm": True})]
)
def test_identity_initialisation(adapter, kw):
    torch.manual_seed(0)
    m = SimplexPolicy(5, 4, 3, adapter=adapter, **kw)
    x = torch.randn(64, 5)
    assert torch.allclose(m(x), m(x, use_adapter=False), atol=1e-6, rtol=0)
    assert m(x).shape == (64, 4)
    assert torch.allclose(m(x).exp().sum(-1), torch.ones(64), atol=1e-5)


def test_module_follows_dtype_and_validates_input():
    m = SimplexPolicy(5, 3, 2).double()
    assert m(torch.randn(4, 5, dtype=torch.float64)).dtype == torch.float64
    assert m(torch.randn(4, 5)).dtype == torch.float64  # cast to the module's dtype
    with pytest.raises(ValueError, match=r"\(n, d_x\) = \(n, 5\), got \(4, 6\)"):
        m(torch.randn(4, 6))
    with pytest.raises(ValueError, match="D must be"):
        SimplexPolicy(5, 3, 0)
    with pytest.raises(ValueError, match="n_outputs must be"):
        SimplexPolicy(5, 1, 2)
    with pytest.raises(ValueError, match="adapter must be one of"):
        SimplexPolicy(5, 3, 2, adapter="lora")
    meta = SimplexPolicy(5, 3, 2).to("meta")
    assert meta(torch.empty(2, 5, device="meta")).device.type == "meta"


def test_stage1_fits_the_proxy_and_stage2_recovers_the_expert(hold):
    """Learning sanity (pinned world seed 0): stage 1 alone fits π̃ to TV < 0.12; with n = 1000
    expert triples the two-stage estimator reaches TV < 0.15 to π†; the proxy-only model is far."""
    w, _, expert, m = hold

    class ProxyAsTruth:
        d_x, true_policy, sample_x = w.d_x, w.proxy_policy, w.sample_x

    assert evaluate(m, ProxyAsTruth(), use_adapter=False)["tv"] < 0.12
    proxy_only = evaluate(m, w, use_adapter=False)["tv"]
    m2 = copy.deepcopy(m)
    fit_true_stage(m2, expert)
    e = evaluate(m2, w)
    assert e["tv"] < 0.15 < proxy_only
    assert 0.5 < e["pref_acc"] < 1 and e["kl"] > 0 and e["regret"] >= 0


def test_stage2_error_falls_as_n_grows(hold):
    """Consistency: more expert triples, closer to π† (10 → 1000 on nested data)."""
    w, _, expert, m = hold
    tvs = []
    for n in (10, 100, 1000):
        m2 = copy.deepcopy(m)
        fit_true_stage(m2, expert[:n])
        tvs.append(evaluate(m2, w)["tv"])
    assert tvs[0] > tvs[1] > tvs[2], tvs


def test_stage2_changes_only_adapter_parameters_bitwise(hold):
    _, _, expert, m = hold
    m2 = copy.deepcopy(m)
    m2.theta.weight.grad = torch.ones_like(m2.theta.weight)  # a stale gradient stays as it is
    before = {k: v.clone() for k, v in m2.state_dict().items()}
    flags = [p.requires_grad for p in m2.parameters()]
    h = fit_true_stage(m2, expert[:35], steps=50)
    after = m2.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"adapter.M", "adapter.b"}
    assert torch.equal(m2.theta.weight.grad, torch.ones_like(m2.theta.weight))
    assert [p.requires_grad for p in m2.parameters()] == flags
    assert len(h["restarts"]) == 6 and h["best"] in range(6)  # all permutations of 3 vertices
    assert h["nll"] == min(r["nll"] for r in h["restarts"])


def test_batched_restarts_equal_separate_runs(hold):
    """All permutation starts run as one stacked problem; each equals its own run."""
    _, _, expert, m = hold
    a, b = copy.deepcopy(m), copy.deepcopy(m)
    ha = fit_true_stage(a, expert[:35], steps=40, restarts=[(1, 2, 0)])
    hb = fit_true_stage(b, expert[:35], steps=40, restarts=[(0, 1, 2), (1, 2, 0), (2, 1, 0)])
    assert abs(ha["nll"] - hb["restarts"][1]["nll"]) < 1e-5


def test_restart_options_and_bad_input(hold):
    _, proxy, expert, m = hold
    assert (
        len(fit_true_stage(copy.deepcopy(m), expert[:20], steps=5, restarts=None)["restarts"]) == 1
    )
    assert len(fit_true_stage(copy.deepcopy(m), expert[:20], steps=5, restarts=3)["restarts"]) == 3
    with pytest.raises(ValueError, match="permutation of 0..2"):
        fit_true_stage(copy.deepcopy(m), expert[:20], restarts=[(0, 1)])
    with pytest.raises(ValueError, match="restarts must be"):
        fit_true_stage(copy.deepcopy(m), expert[:20], restarts="all")
    with pytest.raises(ValueError, match="empty"):
        fit_true_stage(copy.deepcopy(m), expert[:0])
    with pytest.raises(ValueError, match="empty"):
        fit_proxy_stage(SimplexPolicy(5, 3, 2), proxy[:0])
    with pytest.raises(ValueError, match="dimension 5, the model takes d_x = 4"):
        fit_proxy_stage(SimplexPolicy(4, 3, 2), proxy)
    with pytest.raises(ValueError, match="out of range"):
        fit_true_stage(SimplexPolicy(5, 2, 2), expert[:20])
    with pytest.raises(ValueError, match="no parameters"):
        fit_true_stage(SimplexPolicy(5, 3, 2, adapter="identity"), expert[:20])
    with pytest.raises(ValueError, match="restarts need the log-linear"):
        fit_true_stage(SimplexPolicy(5, 3, 2, adapter="mlp"), expert[:20], restarts=4)
    with pytest.raises(TypeError, match="PreferenceBatch"):
        fit_true_stage(copy.deepcopy(m), (expert.x, expert.y_w, expert.y_l))
    with pytest.raises(ValueError, match="lr must be"):
        fit_true_stage(copy.deepcopy(m), expert[:20], lr=0)
    with pytest.raises(TypeError, match="SimplexPolicy"):
        fit_true_stage(MLPPolicy(5, 3), expert[:20])


def test_mlp_adapter_stage2_runs_once(hold):
    _, _, expert, m = hold
    m2 = SimplexPolicy(5, 3, 2, adapter="mlp")
    m2.encoder.load_state_dict(m.encoder.state_dict())
    m2.theta.load_state_dict(m.theta.state_dict())
    h = fit_true_stage(m2, expert[:100], steps=30)
    assert len(h["restarts"]) == 1 and h["restarts"][0]["init"] is None


def test_baselines_train_and_user_arrays_work(hold):
    w, proxy, expert, m = hold
    x, yw, yl = expert.x[:60].numpy(), expert.y_w[:60].numpy(), expert.y_l[:60].numpy()
    batch = PreferenceBatch.from_arrays(x, yw, yl)  # numpy, as users have it
    for model in (SimplexPolicy(5, 3, 2), MLPPolicy(5, 3)):
        h = fit_true_only(model, batch, steps=30)
        assert len(h["loss"]) == 30 and h["loss"][-1] < h["loss"][0]
    ft = copy.deepcopy(m)
    h = fit_finetune_all(ft, batch, steps=20)
    assert h["loss"][-1] < h["loss"][0]
    assert not torch.equal(ft.encoder[0].weight, m.encoder[0].weight)
    pooled = SimplexPolicy(5, 3, 2)
    h = fit_pooled(pooled, proxy[:1000], batch, epochs=2)
    assert len(h["loss"]) == 2 and all(v == v for v in h["loss"])
    with pytest.raises(ValueError, match="weight must be"):
        fit_pooled(pooled, proxy[:100], batch, weight=-1.0)


def test_numpy_integers_custom_adapters_and_frozen_adapters(hold):
    _, _, expert, m = hold
    k = np.array([0, 1, 2]).max() + 1  # np.int64, as users compute sizes
    model = SimplexPolicy(np.int64(5), k, np.int32(2), encoder_hidden=np.int64(16))
    assert model(torch.randn(2, 5)).shape == (2, 3)

    class Softer(torch.nn.Module):  # any probabilities -> probabilities module
        def __init__(self):
            super().__init__()
            self.t = torch.nn.Parameter(torch.ones(()))

        def forward(self, p):
            return torch.softmax(self.t * torch.log(p), -1)

    custom = SimplexPolicy(5, 3, 2, adapter=Softer())
    custom.encoder.load_state_dict(m.encoder.state_dict())
    custom.theta.load_state_dict(m.theta.state_dict())
    h = fit_true_stage(custom, expert[:50], steps=np.int64(20))
    assert len(h["restarts"]) == 1 and float(custom.adapter.module.t.detach()) != 1.0
    with pytest.raises(ValueError, match="the adapter has 4 vertices"):
        SimplexPolicy(5, 3, 2, adapter=SimplexPolicy(5, 3, 3).adapter)
    with pytest.raises(TypeError, match="apply to 'mlp' only"):
        SimplexPolicy(5, 3, 2, spectral_norm=True)
    frozen = copy.deepcopy(m)
    for p in frozen.adapter.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="frozen"):
        fit_true_stage(frozen, expert[:20])


def test_batches_copy_user_arrays_and_refuse_integer_casts():
    x = np.random.default_rng(0).normal(size=(4, 5))
    b = PreferenceBatch.from_arrays(x, [0, 1, 2, 0], [1, 2, 0, 2])
    x[0, 0] = np.nan
    assert torch.isfinite(b.x).all()
    with pytest.raises(ValueError, match="floating dtype"):
        b.to(torch.int32)
    assert b.to(torch.float64).x.dtype == torch.float64 and len(b[0]) == 1 and len(b[-1]) == 1
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(np.zeros((3, 5)))
    b2 = PreferenceBatch.from_arrays(df, pd.Series([0, 1, 2]), np.array([1, 2, 0]))
    assert b2.x.shape == (3, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_training_loss_is_preference_nll_bitwise(dtype):
    """The fits' per-step loss skips ``preference_nll``'s checks (issue 50: they were a sixth of
    a fit's time) and must give the same number by the same operations."""
    from icml25.proxy_feedback.losses import preference_nll, triple_logprobs
    from icml25.proxy_feedback.train import _nll

    g = torch.Generator().manual_seed(3)
    logp = torch.log_softmax(torch.randn(257, 4, generator=g) * 3, -1).to(dtype)
    b = PreferenceBatch(
        torch.zeros(257, 2),
        torch.randint(4, (257,), generator=g),
        torch.randint(4, (257,), generator=g),
    )
    want = preference_nll(*triple_logprobs(logp, b.y_w, b.y_l))
    got = _nll(logp, b)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_fits_stop_on_nan_outputs_naming_them():
    w = SyntheticPreferenceWorld(seed=0)
    batch = sample_preferences(w.true_policy, 40, generator=torch.Generator().manual_seed(1))
    for fit in (fit_true_only, fit_finetune_all):
        model = SimplexPolicy(5, 3, 2)
        with torch.no_grad():
            model.encoder[0].weight[0, 0] = float("nan")
        with pytest.raises(ValueError, match="log-probabilities hold NaN"):
            fit(model, batch, steps=3)
