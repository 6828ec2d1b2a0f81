"""Property-based tests at the public boundary of ``icml25.fpo`` (issue 49): numpy and Python
scalars, float32/float64/bf16 tensors, NaN/inf, empty and degenerate inputs, and random inputs
against brute-force references written with Python loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.fpo import (
    PreferenceConfig,
    SparseAutoencoder,
    dpo_loss,
    fpo_loss,
    simpo_loss,
    tdpo_loss,
)
from icml25.fpo.logps import response_logps
from icml25.fpo.losses import feature_discrepancy, pool_codes

SETTINGS = settings(max_examples=40, deadline=None)
DTYPES = [torch.float32, torch.float64]
SCALAR_KINDS = [float, np.float32, np.float64]


def _brute_topk_active(x: list[float], k: int) -> set[int]:
    """The k largest values counting only non-zero ones, every tie with the k-th included."""
    order = sorted(x, reverse=True)
    kth = order[k - 1]
    return {i for i, v in enumerate(x) if v != 0 and v >= kth}


def _brute_d(p, r, k, mode):
    out = []
    for pr, rr in zip(p.tolist(), r.tolist()):
        idx = _brute_topk_active(pr, k)
        if mode == "union":
            idx |= _brute_topk_active(rr, k)
        out.append(sum((pr[i] - rr[i]) ** 2 for i in idx) / k)
    return out


@st.composite
def sparse_codes(draw, max_b=4, max_m=12):
    B = draw(st.integers(1, max_b))
    m = draw(st.integers(1, max_m))
    seed = draw(st.integers(0, 2**16))
    density = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    g = torch.Generator().manual_seed(seed)

    def one():
        vals = torch.rand(B, m, generator=g, dtype=torch.float64)
        keep = torch.rand(B, m, generator=g, dtype=torch.float64) < density
        # a coarse grid makes ties frequent, the case the selection rule must get right
        return torch.where(keep, (vals * 4).round() / 4, torch.zeros_like(vals))

    return one(), one(), draw(st.integers(1, m)), draw(st.sampled_from(["union", "policy"]))


@SETTINGS
@given(sparse_codes(), st.sampled_from(DTYPES), st.sampled_from([int, np.int32, np.int64]))
def test_discrepancy_against_brute_force_and_numbering(data, dtype, kind):
    p, r, k, mode = data
    got = feature_discrepancy(p.to(dtype), r.to(dtype), kind(k), mode)
    assert got.dtype == dtype
    want = _brute_d(p.to(dtype).double(), r.to(dtype).double(), k, mode)
    assert got.double().tolist() == pytest.approx(want, rel=1e-5, abs=1e-7)
    perm = torch.randperm(p.shape[1], generator=torch.Generator().manual_seed(k))
    again = feature_discrepancy(p[:, perm].to(dtype), r[:, perm].to(dtype), k, mode)
    assert torch.allclose(again, got, rtol=1e-6, atol=1e-7)


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(2, 6),
    st.integers(1, 4),
    st.integers(0, 2**16),
    st.sampled_from(["mean", "sum", "padded_mean", "official"]),
    st.sampled_from(DTYPES),
)
def test_pool_codes_against_loops(B, T, m, seed, mode, dtype):
    g = torch.Generator().manual_seed(seed)
    codes = torch.rand(B, T, m, generator=g, dtype=torch.float64).to(dtype)
    mask = torch.rand(B, T, generator=g) < 0.6
    mask[:, -1] = True  # every row has a response token after position 0
    got = pool_codes(codes, mask, mode)
    c = codes.double()
    for b in range(B):
        ts = [t for t in range(T) if mask[b, t]]
        if mode == "official":
            ts = [t for t in range(T - 1) if mask[b, t + 1]]
        s = sum(c[b, t] for t in ts)
        div = {"mean": len(ts), "sum": 1, "padded_mean": T, "official": T - 1}[mode]
        torch.testing.assert_close(got[b].double(), s / div, rtol=1e-5, atol=1e-6)


def _pair_inputs(B, m, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    vecs = [torch.randn(B, generator=g, dtype=torch.float64).to(dtype) for _ in range(4)]
    codes = [torch.rand(B, m, generator=g, dtype=torch.float64).to(dtype) for _ in range(4)]
    return vecs, codes


@SETTINGS
@given(
    st.integers(1, 4),
    st.integers(0, 2**16),
    st.floats(0.01, 5),
    st.floats(0, 3),
    st.sampled_from(SCALAR_KINDS),
    st.sampled_from(DTYPES),
)
def test_fpo_loss_closed_form_and_scalar_kinds(B, seed, beta, alpha, kind, dtype):
    (aw, al, rw, rl), (cw, cl, qw, ql) = _pair_inputs(B, 6, seed, dtype)
    b, a = kind(beta), kind(alpha)
    out = fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, beta=b, alpha=a, k=3)
    fb, fa = float(b), float(a)
    d_w = _brute_d(cw.double(), qw.double(), 3, "union")
    d_l = _brute_d(cl.double(), ql.double(), 3, "union")
    for i in range(B):
        u = fb * (float(aw[i]) - float(rw[i])) - fb * (float(al[i]) - float(rl[i]))
        u -= fa * (fb * d_l[i] - fb * d_w[i])
        want = math.log1p(math.exp(-u)) if u > -30 else -u
        assert float(out.losses[i]) == pytest.approx(want, rel=1e-4, abs=1e-5)


@SETTINGS
@given(st.integers(1, 4), st.integers(0, 2**16), st.floats(0.01, 5), st.sampled_from(SCALAR_KINDS))
def test_dpo_simpo_tdpo_closed_forms(B, seed, beta, kind):
    (pw, pl, rw, rl), _ = _pair_inputs(B, 2, seed)
    _, losses, u = dpo_loss(pw, pl, rw, rl, kind(beta))
    want = float(kind(beta)) * ((pw - rw) - (pl - rl))
    torch.testing.assert_close(u, want)
    torch.testing.assert_close(losses, -F.logsigmoid(want))
    _, losses, u = simpo_loss(pw, pl, kind(beta), kind(0.5))
    torch.testing.assert_close(u, float(kind(beta)) * (pw - pl) - float(kind(0.5)))
    _, _, u1 = tdpo_loss(pw, pl, rw, rl, rw.abs(), rl.abs(), kind(beta), version=np.int64(1))
    b = float(kind(beta))
    torch.testing.assert_close(u1, b * ((pw - rw) - (pl - rl)) - b * (rl.abs() - rw.abs()))


@pytest.mark.parametrize("name", ["beta", "alpha", "k"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, True, "0.1", np.float32("nan")])
def test_bad_scalars_name_the_value(name, bad):
    (aw, al, rw, rl), (cw, cl, qw, ql) = _pair_inputs(2, 6, 0)
    with pytest.raises(ValueError, match=f"{name} must be "):
        fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, **{name: bad})
    with pytest.raises(ValueError, match=f"{name} must be "):
        PreferenceConfig(**{name: bad})


def test_non_finite_and_empty_tensors_are_refused():
    (aw, al, rw, rl), (cw, cl, qw, ql) = _pair_inputs(2, 6, 0)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(FloatingPointError, match="pol_mean_l holds NaN or inf"):
            fpo_loss(aw, al * bad, rw, rl, cw, cl, qw, ql, k=3)
        c = cw.clone()
        c[0, 0] = bad
        with pytest.raises(FloatingPointError, match="NaN or inf in the pooled SAE codes"):
            fpo_loss(aw, al, rw, rl, c, cl, qw, ql, k=3)
    e = torch.zeros(0)
    with pytest.raises(ValueError, match="non-empty"):
        fpo_loss(e, e, e, e, cw[:0], cl[:0], qw[:0], ql[:0], k=3)
    with pytest.raises(ValueError, match="no feature"):
        feature_discrepancy(torch.zeros(2, 0), torch.zeros(2, 0), 1)
    with pytest.raises(ValueError, match="example 0 has no response token"):
        pool_codes(torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.bool))


def test_degenerate_codes():
    # identical codes: no discrepancy; all-zero codes: nothing active, D = 0 (not a picked zero)
    c = torch.rand(3, 8, dtype=torch.float64)
    assert torch.equal(feature_discrepancy(c, c.clone(), 4), torch.zeros(3, dtype=torch.float64))
    z = torch.zeros(3, 8)
    assert torch.equal(feature_discrepancy(z, z, 4), torch.zeros(3))
    # constant rows: every feature tied at the k-th value, all included
    ones = torch.ones(1, 5, dtype=torch.float64)
    assert float(feature_discrepancy(ones, 0 * ones, 2, "policy")) == pytest.approx(5 / 2)


def test_bf16_inputs_compute_in_float32():
    (aw, al, rw, rl), (cw, cl, qw, ql) = _pair_inputs(3, 6, 1, torch.float32)
    ref = fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, k=3)
    bf = [x.to(torch.bfloat16) for x in (aw, al, rw, rl, cw, cl, qw, ql)]
    out = fpo_loss(*bf, k=3)
    assert out.loss.dtype == torch.float32 and out.d_w.dtype == torch.float32
    assert float(out.loss) == pytest.approx(float(ref.loss), abs=0.05)
    pooled = pool_codes(torch.rand(2, 3, 4).to(torch.bfloat16), torch.ones(2, 3), "official")
    assert pooled.dtype == torch.float32


@SETTINGS
@given(st.integers(1, 3), st.integers(2, 5), st.integers(2, 6), st.integers(0, 2**16))
def test_response_logps_against_loops(B, T, V, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    labels = torch.randint(V, (B, T), generator=g)
    labels[:, 0] = -100
    s, mean, n = response_logps(logits, labels)
    for b in range(B):
        tot, cnt = 0.0, 0
        for t in range(1, T):  # logits at t - 1 predict token t
            if labels[b, t] != -100:
                tot += float(logits[b, t - 1].log_softmax(-1)[labels[b, t]])
                cnt += 1
        assert float(s[b]) == pytest.approx(tot, rel=1e-9) and int(n[b]) == cnt
        assert float(mean[b]) == pytest.approx(tot / cnt, rel=1e-9)


@pytest.mark.parametrize("kind", [int, np.int64])
def test_sae_sizes_take_numpy_integers_and_refuse_bad_ones(kind):
    sae = SparseAutoencoder(kind(4), kind(16), "topk", k_sae=kind(2), input_scale=np.float32(2.0))
    assert (type(sae.d_in), type(sae.k_sae), sae.input_scale) == (int, int, 2.0)
    with pytest.raises(ValueError, match=r"d_sae must be an integer >= 1, got (np\.int64\()?0"):
        SparseAutoencoder(4, kind(0))
    with pytest.raises(ValueError, match="input_scale must be a finite number > 0, got nan"):
        SparseAutoencoder(4, 8, input_scale=float("nan"))
