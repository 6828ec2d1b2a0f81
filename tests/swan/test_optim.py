"""The SWAN optimizer: exact step, AdamW parity, statelessness, groups, schedulers, edge cases."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn

from icml25.swan import SWAN, SinkGD, optimizer_state_bytes, swan_direction, swan_param_groups
from icml25.swan.functional import grad_norm
from icml25.swan.memory import expected_adamw_state_bytes

D = torch.float64


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.a = nn.Linear(8, 12)
        self.b = nn.Linear(12, 8, bias=False)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 20, bias=False)

    def forward(self, idx):
        return self.head(self.norm(self.b(torch.relu(self.a(self.emb(idx))))))


def loss_of(model, seed=0):
    idx = torch.randint(20, (16,), generator=torch.Generator().manual_seed(seed))
    return nn.functional.cross_entropy(model(idx), idx)


def test_one_step_equals_the_hand_computed_update():
    W = nn.Parameter(torch.randn(6, 10, dtype=D))
    G = torch.randn(6, 10, dtype=D)
    W.grad = G.clone()
    before = W.detach().clone()
    opt = SWAN(
        [{"params": [W], "use_swan": True}], lr=0.1, scale=0.5, whitening="svd", compute_dtype=D
    )
    opt.step()
    U, _, Vh = torch.linalg.svd(grad_norm(G), full_matrices=False)
    O = U @ Vh
    expected = before - 0.1 * 0.5 * math.sqrt(60) * O / torch.linalg.matrix_norm(O)
    torch.testing.assert_close(W.detach(), expected, atol=1e-10, rtol=0)
    assert len(opt.state[W]) == 0


def test_adamw_part_matches_torch_adamw_bit_for_bit():
    torch.manual_seed(0)
    a, b = Tiny(), Tiny()
    b.load_state_dict(a.state_dict())
    groups = swan_param_groups(a, lr=1e-2)
    ours = SWAN(groups, adamw_weight_decay=0.01, adamw_betas=(0.9, 0.95))
    # a plain nn.Module has no get_output_embeddings(): its head is a hidden Linear for SWAN too
    swan_names = {n for g in groups if g["use_swan"] for n in g["names"]}
    assert swan_names == {"a.weight", "b.weight", "head.weight"}
    rest_b = [p for n, p in b.named_parameters() if n not in swan_names]
    # our AdamW part runs torch's fused AdamW where it applies: compare with the same kernel
    ref = torch.optim.AdamW(rest_b, lr=1e-2, weight_decay=0.01, betas=(0.9, 0.95), fused=True)
    names = dict(a.named_parameters())
    for step in range(5):
        for model, opt in ((a, ours), (b, ref)):
            opt.zero_grad()
            loss_of(model, step).backward()
            if model is b:  # the SWAN matrices of b must not move with AdamW
                b.a.weight.grad = b.b.weight.grad = b.head.weight.grad = None
        # give b's SWAN matrices a's values so the AdamW parameters see identical activations
        ours.step()
        ref.step()
        with torch.no_grad():
            for name in ("a", "b", "head"):
                getattr(b, name).weight.copy_(getattr(a, name).weight)
    for n, p in b.named_parameters():
        assert torch.equal(p, names[n]), n


def test_stateless_and_state_dict_round_trip():
    torch.manual_seed(1)
    model = Tiny()
    opt = SWAN(swan_param_groups(model, lr=1e-2))
    for s in range(10):
        opt.zero_grad()
        loss_of(model, s).backward()
        opt.step()
    swan_params = [p for g in opt.param_groups if g["use_swan"] for p in g["params"]]
    rest = [p for g in opt.param_groups if not g["use_swan"] for p in g["params"]]
    assert all(len(opt.state[p]) == 0 for p in swan_params)
    assert optimizer_state_bytes(opt) == expected_adamw_state_bytes(rest)
    clone = Tiny()
    clone.load_state_dict(model.state_dict())
    opt2 = SWAN(swan_param_groups(clone, lr=1e-2))
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))  # state_dict() shares tensors
    for m, o in ((model, opt), (clone, opt2)):
        o.zero_grad()
        loss_of(m, 99).backward()
        o.step()
    for (n, p), q in zip(model.named_parameters(), clone.parameters()):
        assert torch.equal(p, q), n


def test_expected_adamw_bytes_match_torch_adamw():
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters())
    loss_of(model).backward()
    opt.step()
    assert optimizer_state_bytes(opt) == expected_adamw_state_bytes(model.parameters())


def test_param_groups_on_a_real_llama_and_gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=2,
        tie_word_embeddings=False,
    )
    llama = transformers.LlamaForCausalLM(cfg)
    groups = swan_param_groups(llama)
    swan_names = {n for g in groups if g["use_swan"] for n in g["names"]}
    assert swan_names == {
        f"model.layers.0.{m}.weight"
        for m in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    }
    adam_names = {n for g in groups if not g["use_swan"] for n in g["names"]}
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= adam_names
    tied = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**{**cfg.to_dict(), "tie_word_embeddings": True})
    )
    tgroups = swan_param_groups(tied)
    all_params = [p for g in tgroups for p in g["params"]]
    assert len(all_params) == len({id(p) for p in all_params})  # the tied weight appears once
    emb = tied.get_input_embeddings().weight
    assert any(p is emb for g in tgroups if not g["use_swan"] for p in g["params"])
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    )
    g2 = swan_param_groups(gpt2)
    conv = [g for g in g2 if g["use_swan"] and g["norm_dim"] == 0]
    assert conv and all("attn" in n or "mlp" in n for n in conv[0]["names"])
    opt = SWAN(g2)
    out = gpt2(input_ids=torch.randint(50, (2, 8)), labels=torch.randint(50, (2, 8)))
    out.loss.backward()
    opt.step()


def test_lr_scheduler_drives_both_rules():
    model = Tiny()
    opt = SWAN(swan_param_groups(model, lr=1e-2, adamw_lr=3e-3))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5**s)
    loss_of(model).backward()
    opt.step()
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == [5e-3, 1.5e-3]


def test_convex_sanity_whitening_counteracts_curvature():
    g = torch.Generator().manual_seed(0)
    m, n, N = 16, 48, 256
    V = torch.linalg.qr(torch.randn(n, n, dtype=D, generator=g))[0]
    X = V @ torch.diag(torch.logspace(0, -1, n, dtype=D)) @ torch.randn(n, N, dtype=D, generator=g)
    W_star = torch.randn(m, n, dtype=D, generator=g)
    W_star = W_star - W_star.mean(1, keepdim=True)  # row-centred: reachable by SWAN (docs/swan.md)
    target = W_star @ X
    base = float(0.5 / N * target.pow(2).sum())

    def fit(make, lr, steps=300):
        W = nn.Parameter(torch.zeros(m, n, dtype=D))
        opt = make(W, lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps))
        )
        drift = 0.0
        for _ in range(steps):
            opt.zero_grad()
            loss = 0.5 / N * (W @ X - target).pow(2).sum()
            loss.backward()
            opt.step()
            sched.step()
            drift = max(drift, float(W.detach().sum(1).abs().max()))
        return float(0.5 / N * (W.detach() @ X - target).pow(2).sum()) / base, drift

    def swan(W, lr):
        return SWAN([{"params": [W], "use_swan": True}], lr=lr, whitening="svd", compute_dtype=D)

    def sgd(W, lr):
        return torch.optim.SGD([W], lr=lr)

    best_sgd = min(fit(sgd, lr)[0] for lr in (0.3, 1.0, 2.0, 3.0))
    best_swan, drift = min(fit(swan, lr) for lr in (0.01, 0.03, 0.1))
    assert best_swan < 1e-6 and best_swan <= 0.1 * best_sgd
    assert drift < 1e-10  # row sums stay frozen
    W_star += 0.5  # not row-centred: SWAN (centred GradNorm) cannot reach it
    target = W_star @ X
    base = float(0.5 / N * target.pow(2).sum())
    assert fit(swan, 0.03)[0] > 1e-3

    def uncentred(W, lr):
        return SWAN(
            [{"params": [W], "use_swan": True}],
            lr=lr,
            whitening="svd",
            center=False,
            compute_dtype=D,
        )

    assert fit(uncentred, 0.03)[0] < 1e-6


def test_nonfinite_gradients_raise_or_skip():
    model = Tiny()
    opt = SWAN(swan_param_groups(model))
    loss_of(model).backward()
    model.a.weight.grad[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        opt.step()
    before = [p.detach().clone() for p in model.parameters()]
    skip = SWAN(swan_param_groups(model), nonfinite="skip")
    skip.step()
    assert skip.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize(
    ("params", "kwargs", "error", "match"),
    [
        (
            lambda: [{"params": [nn.Parameter(torch.randn(5))], "use_swan": True}],
            {},
            ValueError,
            r"2-D matrices; got a parameter of shape \(5,\)",
        ),
        (
            lambda: [{"params": [nn.Parameter(torch.randn(3, 4, 5))], "use_swan": True}],
            {},
            ValueError,
            "flatten_nd",
        ),
        (
            lambda: [{"params": [nn.Parameter(torch.randn(5, 1))], "use_swan": True}],
            {},
            ValueError,
            "needs >= 2 entries",
        ),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"lr": -1.0}, ValueError, "lr must be"),
        (
            lambda: [nn.Parameter(torch.randn(4, 4))],
            {"scale": 0.0},
            ValueError,
            "scale must be a finite number > 0",
        ),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"ns_steps": 0}, ValueError, "ns_steps"),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"ns_beta": 1.5}, ValueError, "ns_beta"),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"variant": "adam"}, ValueError, "variant"),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"whitening": "qr"}, ValueError, "whitening"),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"rescale": "l1"}, ValueError, "rescale"),
        (lambda: [nn.Parameter(torch.randn(4, 4))], {"eps": -1.0}, ValueError, "eps"),
        (
            lambda: [nn.Parameter(torch.randn(4, 4))],
            {"nonfinite": "ignore"},
            ValueError,
            "nonfinite",
        ),
    ],
)
def test_bad_arguments(params, kwargs, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error, match=match):
            SWAN(params(), **kwargs)


def test_inferred_groups_warn_and_edge_cases_run():
    W = nn.Parameter(torch.randn(6, 9))
    b = nn.Parameter(torch.randn(6))
    with pytest.warns(UserWarning, match="split per parameter: 1 matrices -> SWAN, 1 other"):
        opt = SWAN([W, b])
    # a mixed group is split per parameter: the matrix is whitened, the bias takes AdamW
    assert [(g["use_swan"], [tuple(p.shape) for p in g["params"]]) for g in opt.param_groups] == [
        (True, [(6, 9)]),
        (False, [(6,)]),
    ]
    tall = nn.Parameter(torch.randn(12, 5))
    opt = SWAN([{"params": [tall], "use_swan": True}])
    for grad in (torch.zeros(12, 5), torch.randn(12, 1) @ torch.randn(1, 5)):  # zero, rank 1
        tall.grad = grad
        before = tall.detach().clone()
        opt.step()
        assert torch.isfinite(tall).all()
        if not grad.any():
            assert torch.equal(tall.detach(), before)
    tall.grad = None
    opt.step()  # no gradient: skipped
    emb = nn.Embedding(10, 4, sparse=True)
    opt = SWAN([{"params": list(emb.parameters()), "use_swan": False}])
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()
    with pytest.warns(UserWarning, match="does not converge"):
        SWAN(
            [{"params": [nn.Parameter(torch.randn(4, 4))], "use_swan": True}],
            ns_beta=0.8,
            ns_steps=40,
        )


def test_bf16_parameters_are_updated_in_their_dtype():
    W = nn.Parameter(torch.randn(8, 16).bfloat16())
    W.grad = torch.randn(8, 16).bfloat16()
    opt = SWAN([{"params": [W], "use_swan": True}], lr=1e-2)
    before = W.detach().clone()
    opt.step()
    assert W.dtype == torch.bfloat16 and not torch.equal(W.detach(), before)


def test_sinkgd_and_muon_anchor():
    model = Tiny()
    opt = SinkGD(swan_param_groups(model, lr=1e-2))
    loss_of(model).backward()
    opt.step()
    assert optimizer_state_bytes(opt) == expected_adamw_state_bytes(
        [p for g in opt.param_groups if not g["use_swan"] for p in g["params"]]
    )
    if hasattr(torch.optim, "Muon"):
        with pytest.raises(ValueError):
            torch.optim.Muon([nn.Parameter(torch.randn(5))])


def test_one_line_call_on_a_real_model_whitens_its_matrices():
    """SWAN(model.parameters()) (the README's first call) must not silently be AdamW."""
    model = Tiny()
    with pytest.warns(UserWarning, match="split per parameter"):
        opt = SWAN(model.parameters(), lr=1e-2)
    loss_of(model).backward()
    opt.step()
    mats = [p for p in model.parameters() if p.ndim == 2]
    assert mats and all(p not in opt.state for p in mats)  # stateless: SWAN, not AdamW
    assert all(p in opt.state for p in model.parameters() if p.ndim == 1)


def test_multihead_attention_in_proj_is_whitened_per_qkv_block():
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
    groups = swan_param_groups(layer, lr=1e-2)
    qkv = [g for g in groups if g.get("blocks") == 3]
    assert len(qkv) == 1 and qkv[0]["names"] == ["self_attn.in_proj_weight"]
    swan_names = {n for g in groups if g["use_swan"] for n in g["names"]}
    assert {"self_attn.out_proj.weight", "linear1.weight", "linear2.weight"} <= swan_names
    opt = SWAN(groups, whitening="svd", compute_dtype=torch.float64)
    x = torch.randn(20, 3, 16)  # 60 tokens: every block's gradient has full rank 16
    layer(x).pow(2).sum().backward()
    W = layer.self_attn.in_proj_weight
    G = W.grad.detach().clone().double()
    before = W.detach().clone().double()
    opt.step()
    step = (before - W.detach().double()) / 1e-2
    for blk in step.reshape(3, 16, 16):
        # each block whitened on its own: equal singular values, except the one GradNorm's row
        # centring removes (every row sums to 0), and entry RMS 1
        sv = torch.linalg.svdvals(blk)
        assert float(sv[14] / sv[0]) > 1 - 1e-5 and float(sv[15] / sv[0]) < 1e-4
        assert float(blk.pow(2).mean()) == pytest.approx(1.0, rel=1e-4)
    assert not torch.allclose(
        step, swan_direction(G, whitening="svd", compute_dtype=torch.float64), atol=1e-3
    )
    assert W not in opt.state


def test_standard_optimizer_flags():
    W = nn.Parameter(torch.randn(6, 6))
    b = nn.Parameter(torch.randn(6))
    groups = [{"params": [W], "use_swan": True}, {"params": [b], "use_swan": False}]
    for flag in ("capturable", "differentiable"):
        with pytest.raises(ValueError, match=f"{flag}=True"):
            SWAN(groups, **{flag: True})
    with pytest.raises(TypeError, match="fused must be a bool or None"):
        SWAN(groups, fused="yes")
    # maximize: the step goes up the gradient, for both rules
    for maximize, sign in ((False, -1), (True, 1)):
        W2, b2 = nn.Parameter(W.detach().clone()), nn.Parameter(b.detach().clone())
        opt = SWAN(
            [{"params": [W2], "use_swan": True}, {"params": [b2], "use_swan": False}],
            lr=1e-2,
            maximize=maximize,
            foreach=False,
            fused=False,
        )
        W2.grad, b2.grad = torch.ones(6, 6) + torch.eye(6), torch.ones(6)
        opt.step()
        assert sign * float((b2 - b).sum()) > 0
        assert sign * float(((W2 - W) * W2.grad).sum()) > 0


def test_same_shape_matrices_batched_equal_one_by_one():
    torch.manual_seed(2)
    Ws = [nn.Parameter(torch.randn(8, 12)) for _ in range(3)]
    grads = [torch.randn(8, 12) for _ in Ws]
    a = SWAN([{"params": Ws, "use_swan": True}], lr=1e-2)
    for W, g in zip(Ws, grads):
        W.grad = g
    expected = [W.detach() - 1e-2 * swan_direction(g) for W, g in zip(Ws, grads)]
    a.step()
    for W, e in zip(Ws, expected):
        assert torch.allclose(W.detach(), e, atol=1e-5)


def test_compiled_step_has_no_graph_break_and_equals_eager():
    def model():
        torch.manual_seed(3)
        return nn.Sequential(
            nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.LayerNorm(16)
        ).double()

    x = torch.randn(8, 16, dtype=D)
    c = model()
    oc = SWAN(swan_param_groups(c, lr=1e-2), fused=False, compute_dtype=D)
    c(x).pow(2).sum().backward()
    torch._dynamo.reset()
    assert torch._dynamo.explain(oc.step)().graph_break_count == 0  # (explain runs one step)
    for bias in (False, True):
        a, b = model(), model()
        if not bias:  # SWAN matrices only: the compiled step must equal the eager one exactly
            for m in (a, b):
                m[0].bias, m[2].bias, m[3].weight, m[3].bias = None, None, None, None
        # float64: NS at beta 0.8 amplifies a reordered float32 reduction ~360x in 10 steps
        oa = SWAN(swan_param_groups(a, lr=1e-2), fused=False, compute_dtype=D)
        ob = SWAN(swan_param_groups(b, lr=1e-2), fused=False, compute_dtype=D)
        step = torch.compile(ob.step, fullgraph=True, backend="eager")
        for i in range(3):
            for m in (a, b):
                m.zero_grad()
                m(x + i).pow(2).sum().backward()
            oa.step()
            step()
        # with biases and norms torch's own compiled AdamW differs from eager at ~1e-7
        tol = 1e-5 if bias else 1e-12
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.allclose(p, q, atol=tol), (bias, float((p - q).abs().max()))


@pytest.mark.gpu
def test_cuda_step_equals_cpu_step():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(4)
    a = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).double()
    b = copy.deepcopy(a).cuda()
    oa = SWAN(swan_param_groups(a, lr=1e-2), compute_dtype=D)
    ob = SWAN(swan_param_groups(b, lr=1e-2), compute_dtype=D)
    x = torch.randn(32, 64, dtype=D)
    for model, opt, xx in ((a, oa, x), (b, ob, x.cuda())):
        model(xx).pow(2).sum().backward()
        opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert q.is_cuda and torch.allclose(p, q.cpu(), atol=1e-9)


def test_constructor_values_reach_groups_and_adamw_keys_are_honoured():
    model = Tiny()
    opt = SWAN(swan_param_groups(model), lr=0.05, weight_decay=0.1)
    swan_groups = [g for g in opt.param_groups if g["use_swan"]]
    assert all(g["lr"] == 0.05 and g["weight_decay"] == 0.1 for g in swan_groups)
    # an AdamW group's torch.optim.AdamW-style keys are used by its AdamW rule
    b = nn.Parameter(torch.ones(4))
    opt = SWAN(
        [{"params": [b], "use_swan": False, "weight_decay": 0.5, "betas": (0.8, 0.9)}], lr=0.01
    )
    b.grad = torch.zeros(4)
    opt.step()
    assert torch.allclose(b.detach(), torch.full((4,), 1 - 0.01 * 0.5))  # decoupled decay only
    with pytest.raises(ValueError, match="weight_decay must be a finite number >= 0, got -1"):
        SWAN([{"params": [nn.Parameter(torch.randn(4, 4))], "use_swan": True}], weight_decay=-1)
    with pytest.raises(
        ValueError, match=r"betas / adamw_betas must be a finite number in \[0, 1\), got 1.5"
    ):
        SWAN([{"params": [b], "use_swan": False}], adamw_betas=(1.5, 0.9))
    with pytest.warns(UserWarning, match="half precision"):
        SWAN(
            [{"params": [nn.Parameter(torch.randn(4, 4))], "use_swan": True}],
            compute_dtype=torch.bfloat16,
        )


def test_one_cycle_lr_cycles_the_adamw_momentum():
    model = Tiny()
    opt = SWAN(swan_param_groups(model, lr=1e-2))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10)
    for _ in range(3):
        loss_of(model).backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    assert all(g["betas"][0] < 0.95 for g in opt.param_groups)


def test_gpt2_fused_qkv_is_whitened_per_column_block():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    torch.manual_seed(5)
    model = transformers.GPT2LMHeadModel(cfg).double()
    groups = swan_param_groups(model, lr=1e-2)
    qkv = [g for g in groups if g.get("blocks") == 3]
    assert (
        len(qkv) == 1
        and qkv[0]["norm_dim"] == 0
        and qkv[0]["names"] == ["transformer.h.0.attn.c_attn.weight"]
    )
    opt = SWAN(groups, whitening="svd", compute_dtype=D)
    ids = torch.randint(0, 50, (8, 24))
    model(input_ids=ids, labels=ids).loss.backward()
    W = model.transformer.h[0].attn.c_attn.weight  # (in = 16, out = 48)
    G = W.grad.detach().clone()
    before = W.detach().clone()
    opt.step()
    step = (before - W.detach()) / 1e-2
    for j in range(3):  # each (16, 16) column block is the SWAN direction of its own gradient
        blk = slice(16 * j, 16 * (j + 1))
        want = swan_direction(G[:, blk], norm_dim=0, whitening="svd", compute_dtype=D)
        assert torch.allclose(step[:, blk], want, atol=1e-8)
