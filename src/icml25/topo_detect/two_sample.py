"""The MMD two-sample tests of §7: untrained Gaussian products (MMD-G and an untrained SAMMD
analogue), the trained deep-kernel test MMD-D (Liu et al. 2020), the semantic-aware SAMMD (Gao et
al. 2021) and the paper's topological class, which multiplies any of them by a Gaussian on the
per-sample topological signatures of §6.

A test sees a sample as a tensor ``(n, ...)`` or as a dict of equally long tensors (e.g.
``{"emb": ..., "raw": ..., "topo": ...}``); feature maps are callables on the POOLED sample
``S_P`` then ``S_Q``. Trained kernels are fitted on a training split disjoint from the test data
(``fit(S_P_train, S_Q_train)``) by maximising Liu et al.'s ``J = MMD^2_u / sqrt(var_H1 + 1e-8)``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from icml25._validate import as_bool, as_int, as_prob, as_real
from icml25.topo_detect._inputs import plain_array
from icml25.topo_detect.mmd import (
    _sqdist,
    gaussian_gram,
    median_bandwidth,
    mmd2_unbiased,
    mmd_h1_variance,
    permutation_test,
    wild_bootstrap_test,
)

__all__ = [
    "DeepKernelMMD",
    "GaussianMMD",
    "MMDTest",
    "SemanticAwareMMD",
    "TestResult",
    "TopologicalMMD",
]

NULLS = ("permutation", "wild_bootstrap")


@dataclass
class TestResult:
    """``stat``: the observed statistic (MMD^2_u, or SAMMD's V-statistic under the wild
    bootstrap); ``p_value``: ``(1 + #{T_b >= T}) / (B + 1)``; ``reject``: ``p_value <= alpha``."""

    stat: float
    p_value: float
    reject: bool


def _size(S) -> int:
    if isinstance(S, dict):
        if not S:
            raise ValueError("a dict sample needs at least one feature")
        sizes = {len(plain_array(v)) for v in S.values()}
        if len(sizes) != 1:
            raise ValueError(
                f"every feature of a sample must have the same length, got {sorted(sizes)}"
            )
        return sizes.pop()
    S = torch.as_tensor(plain_array(S))
    if S.ndim == 0:
        raise ValueError("a sample must be a tensor (n, ...) or a dict of them, got a scalar")
    return len(S)


def _sizes(S_P, S_Q, equal: bool) -> tuple[int, int]:
    n, m = _size(S_P), _size(S_Q)
    if equal and n != m:
        raise ValueError(
            f"S_P and S_Q must have the same size for the one-sample U-statistic, got {n} and {m} "
            "(use_1sample_u=False allows unequal sizes with the permutation null)"
        )
    if min(n, m) < 2:
        raise ValueError(f"each sample needs at least 2 points, got {n} and {m}")
    return n, m


def _tensor(x, what: str, detach: bool) -> Tensor:
    try:
        t = torch.as_tensor(plain_array(x))
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{what} must be numeric (a tensor or array (n, ...)), got {type(x).__name__}"
            + (f" of {type(x[0]).__name__}" if isinstance(x, (list, tuple)) and x else "")
        ) from None
    return t.detach() if detach else t


def _cat(a: Tensor, b: Tensor, what: str) -> Tensor:
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(
            f"{what} of S_P and S_Q must have the same shape per point, got {tuple(a.shape[1:])} "
            f"and {tuple(b.shape[1:])}"
        )
    return torch.cat([a, b.to(a.device)])


def _pool(S_P, S_Q, *, detach: bool = False):
    """The pooled sample ``S_P`` then ``S_Q``; ``detach`` cuts it from the caller's graph (fit
    never back-propagates into the user's tensors)."""
    if isinstance(S_P, dict) != isinstance(S_Q, dict):
        raise TypeError("S_P and S_Q must both be tensors or both dicts")
    if isinstance(S_P, dict):
        if set(S_P) != set(S_Q):
            raise ValueError(f"S_P and S_Q have different keys: {sorted(S_P)} vs {sorted(S_Q)}")
        return {
            k: _cat(
                _tensor(S_P[k], f"feature {k!r}", detach),
                _tensor(S_Q[k], f"feature {k!r}", detach),
                f"feature {k!r}",
            )
            for k in S_P
        }
    return _cat(_tensor(S_P, "S_P", detach), _tensor(S_Q, "S_Q", detach), "the points")


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r}")


def _flat(x) -> Tensor:
    if isinstance(x, dict):
        raise TypeError(
            f"a feature map returned the dict sample itself (keys {sorted(x)}): with dict samples "
            "pass feature callables that pick a tensor, e.g. GaussianMMD([lambda s: s['emb']])"
        )
    x = torch.as_tensor(plain_array(x))
    x = x.reshape(len(x), -1)
    if not x.is_floating_point():
        x = x.float()
    if not bool(torch.isfinite(x).all()):
        raise ValueError("features must be finite")
    return x


def _identity(z):
    return z


def _objective(K: Tensor, n: int) -> Tensor:
    """Liu et al.'s training objective ``J = MMD^2_u / sqrt(var_H1 + 1e-8)`` (DK-for-TST)."""
    return mmd2_unbiased(K, n) / torch.sqrt(mmd_h1_variance(K, n) + 1e-8)


def _train(
    kernel: Callable[[], Tensor], params: list[Tensor], n: int, epochs: int, lr: float
) -> list[float]:
    """Adam on ``-J`` over the full training sample; returns J per epoch."""
    epochs = as_int("epochs", epochs, 0)
    lr = as_real("lr", lr, low=0, low_open=True)
    history = []
    if not params or epochs == 0:
        return history
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(epochs):
        J = _objective(kernel(), n)
        if not bool(torch.isfinite(J)):
            raise FloatingPointError(
                f"the training objective J became {float(J)}: lower lr (got {lr})"
            )
        opt.zero_grad()
        (-J).backward()
        opt.step()
        history.append(float(J.detach()))
    return history


class MMDTest:
    """Base class: a Gram matrix on the pooled sample (:meth:`kernel`), a null and a decision.

    ``n_perm``: permutations or bootstrap draws (B = 100, SAMMD's; the reproduction's);
    ``alpha``: the level (0.05); ``null``: ``"permutation"`` (default) or ``"wild_bootstrap"``
    (SAMMD's; equal sizes); ``use_1sample_u``: Liu et al.'s one-sample U cross term (equal
    sizes; ``False`` for unequal sizes with the permutation null)."""

    default_epochs, default_lr = 1000, 2e-4

    def __init__(
        self,
        *,
        n_perm: int = 100,
        alpha: float = 0.05,
        null: str = "permutation",
        use_1sample_u: bool = True,
    ) -> None:
        from icml25.topo_detect.mmd import _check_draws

        alpha = as_prob("alpha", alpha, low_open=True, high_open=True)
        if null not in NULLS:
            raise ValueError(f"null must be one of {NULLS}, got {null!r}")
        if null == "wild_bootstrap" and not use_1sample_u:
            raise ValueError("the wild bootstrap needs equal sizes: use_1sample_u must be True")
        n_perm = _check_draws("n_perm", n_perm, alpha)  # warns when it can never reject
        self.n_perm, self.alpha, self.null = n_perm, alpha, null
        self.use_1sample_u = as_bool("use_1sample_u", use_1sample_u)
        self.history: list[float] = []

    # -- to override -------------------------------------------------------------------------
    def kernel(self, pooled, extra: Tensor | None = None) -> Tensor:
        """The Gram matrix ``(N, N)`` of the pooled sample, differentiable in the trainable
        parameters. ``extra``: features appended to the kernel's feature map (``fusion="concat"``
        of :class:`TopologicalMMD`), for tests that have one."""
        raise NotImplementedError

    def parameters(self) -> list[Tensor]:
        """The trainable parameters (none for untrained tests)."""
        return []

    def _prepare(self, pooled, n: int) -> None:
        """Initialise data-dependent parameters before training (e.g. median bandwidths)."""

    def _check_ready(self) -> None:
        """Raise when the test must be fitted before use."""

    # -- the shared machinery ----------------------------------------------------------------
    def gram(self, pooled, generator=None) -> Tensor:
        """The detached float64 Gram matrix the null is computed from."""
        self._check_ready()
        with torch.no_grad():
            return self.kernel(pooled).detach().double()

    def test(self, S_P, S_Q, generator: torch.Generator | None = None) -> TestResult:
        """Test ``S_P`` (reference) against ``S_Q``; ``generator`` (CPU) draws the permutations or
        multipliers (and, for topological tests, the label-independent chunks)."""
        _check_generator(generator)
        n, _ = _sizes(S_P, S_Q, self.use_1sample_u or self.null == "wild_bootstrap")
        K = self.gram(_pool(S_P, S_Q), generator)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # n_perm was checked at construction
            if self.null == "permutation":
                stat, p = permutation_test(
                    K,
                    n,
                    self.n_perm,
                    generator,
                    use_1sample_u=self.use_1sample_u,
                    alpha=self.alpha,
                )
            else:
                stat, p = wild_bootstrap_test(K, n, self.n_perm, generator, alpha=self.alpha)
        return TestResult(stat, p, p <= self.alpha)

    def fit(
        self,
        S_P,
        S_Q,
        *,
        epochs: int | None = None,
        lr: float | None = None,
        generator: torch.Generator | None = None,
    ) -> MMDTest:
        """Train the kernel's parameters on a training split (equal sizes) by maximising ``J``;
        a no-op for untrained tests. ``self.history`` holds J per epoch. The samples are
        detached (training never writes into the caller's graph or ``.grad``); ``generator``
        seeds the default network's initial weights (MMD-D), so a fit is reproducible."""
        _check_generator(generator)
        n, _ = _sizes(S_P, S_Q, True)
        pooled = _pool(S_P, S_Q, detach=True)
        self._generator = generator
        self._prepare(pooled, n)
        epochs = self.default_epochs if epochs is None else epochs
        lr = self.default_lr if lr is None else lr
        self.history = _train(lambda: self.kernel(pooled), self.parameters(), n, epochs, lr)
        self._fitted = True
        return self


class GaussianMMD(MMDTest):
    """An untrained product of Gaussian kernels ``prod_f exp(-|f(a) - f(b)|^2 / h_f)`` with
    median-heuristic bandwidths on the pooled sample. ``features``: callables on the pooled sample
    (identity: the samples themselves, MMD-G); ``[emb, pixels]`` is an untrained SAMMD analogue."""

    def __init__(
        self,
        features: Sequence[Callable] = (_identity,),
        n_perm: int = 100,
        alpha: float = 0.05,
        **kw,
    ) -> None:
        if callable(features):
            features = [features]
        features = list(features)
        if not features or not all(callable(f) for f in features):
            raise TypeError(f"features must be a non-empty list of callables, got {features!r}")
        super().__init__(n_perm=n_perm, alpha=alpha, **kw)
        self.features = features

    def kernel(self, pooled, extra: Tensor | None = None) -> Tensor:
        if extra is not None:
            raise ValueError(
                "fusion='concat' needs a test with a learned feature map (DeepKernelMMD, "
                "SemanticAwareMMD); use fusion='product' with GaussianMMD"
            )
        K = None
        for f in self.features:
            G = gaussian_gram(_flat(f(pooled)))
            K = G if K is None else K * G
        return K


class _SmoothKernelMMD(MMDTest, nn.Module):
    """Liu et al.'s "smooth" deep kernel ``(1 - eps) exp(-|phi(a) - phi(b)|^2 / s_phi - |a - b|^2
    / s_q) + eps exp(-|a - b|^2 / s_q)`` with learnable ``eps = sigmoid(eps_raw)`` and bandwidths
    stored as square roots (DK-for-TST's ``sigmaOPT ** 2``)."""

    def __init__(
        self,
        raw_fn: Callable,
        *,
        eps_init: float,
        n_perm: int,
        alpha: float,
        null: str,
        use_1sample_u: bool = True,
    ) -> None:
        nn.Module.__init__(self)
        MMDTest.__init__(self, n_perm=n_perm, alpha=alpha, null=null, use_1sample_u=use_1sample_u)
        if not callable(raw_fn):
            raise TypeError(f"raw_fn must be callable, got {raw_fn!r}")
        eps_init = as_prob("eps_init", eps_init, low_open=True, high_open=True)
        self.raw_fn, self.eps_init = raw_fn, eps_init
        self._fitted = False

    def _phi(self, pooled) -> Tensor:
        raise NotImplementedError

    def _init_params(self, raw: Tensor, phi: Tensor, n: int) -> tuple[float, float]:
        raise NotImplementedError

    def _prepare(self, pooled, n: int) -> None:
        raw = _flat(self.raw_fn(pooled))
        self._dim = raw.shape[1]
        self._build(raw)
        with torch.no_grad():
            phi = self._phi(pooled)
        s_q, s_phi = self._init_params(raw, phi, n)
        kw = {"dtype": raw.dtype, "device": raw.device}
        # eps = sigmoid(eps_raw): eps_raw = log(eps / (1 - eps)), DK-for-TST's log-scale start
        logit = math.log(self.eps_init / (1 - self.eps_init))
        self.eps_raw = nn.Parameter(torch.tensor(logit, **kw))
        self.sigma_q_sqrt = nn.Parameter(torch.tensor(math.sqrt(s_q), **kw))
        self.sigma_phi_sqrt = nn.Parameter(torch.tensor(math.sqrt(s_phi), **kw))

    def _build(self, raw: Tensor) -> None:
        """Create the feature network once the input size is known (MMD-D)."""

    def _check_ready(self) -> None:
        if not self._fitted:
            raise RuntimeError(
                f"{type(self).__name__} is trained: call .fit(S_P_train, S_Q_train) on data "
                "disjoint from the test samples first"
            )

    @property
    def epsilon(self) -> float:
        self._check_ready()
        return float(torch.sigmoid(self.eps_raw.detach()))

    @property
    def bandwidths(self) -> dict[str, float]:
        """The learned ``sigma_q`` (raw inputs) and ``sigma_phi`` (features)."""
        self._check_ready()
        return {
            "sigma_q": float(self.sigma_q_sqrt.detach() ** 2),
            "sigma_phi": float(self.sigma_phi_sqrt.detach() ** 2),
        }

    def kernel(self, pooled, extra: Tensor | None = None) -> Tensor:
        raw = _flat(self.raw_fn(pooled)).to(self.sigma_q_sqrt)
        if raw.shape[1] != self._dim:
            raise ValueError(
                f"{type(self).__name__} was fitted on inputs of {self._dim} features per point, "
                f"got {raw.shape[1]}; fit it again on data of this size"
            )
        phi = self._phi(pooled).to(raw)
        if extra is not None:
            phi = torch.cat([phi, _flat(extra).to(raw)], 1)
        Dq = _sqdist(raw, raw) / self.sigma_q_sqrt**2
        Dphi = _sqdist(phi, phi) / self.sigma_phi_sqrt**2
        eps = torch.sigmoid(self.eps_raw)
        return (1 - eps) * torch.exp(-Dphi - Dq) + eps * torch.exp(-Dq)

    def parameters(self, recurse: bool = True) -> list[Tensor]:  # type: ignore[override]
        return [p for p in nn.Module.parameters(self, recurse) if p.requires_grad]


class DeepKernelMMD(_SmoothKernelMMD):
    """MMD-D (Liu et al. 2020): the smooth kernel with a trained network ``phi_w`` on the inputs.

    ``net``: any ``nn.Module`` on the flattened inputs; by default DK-for-TST's ``ModelLatentF``
    layout for vectors, ``Linear-Softplus x3 + Linear`` with hidden = out = ``3 * dim`` (built at
    :meth:`fit`, on the input's device and dtype). ``raw_fn`` selects the inputs from a sample
    (identity). Initial values follow DK-for-TST's HDGM script: ``sigma_q = 2 dim``, ``sigma_phi =
    0.1``, ``eps = 1e-10``; training: Adam, lr 5e-5, 1000 epochs (full batch here)."""

    default_epochs, default_lr = 1000, 5e-5  # DK-for-TST, HDGM

    def __init__(
        self,
        net: nn.Module | None = None,
        *,
        raw_fn: Callable = _identity,
        eps_init: float = 1e-10,
        n_perm: int = 100,
        alpha: float = 0.05,
        null: str = "permutation",
        use_1sample_u: bool = True,
    ) -> None:
        super().__init__(
            raw_fn,
            eps_init=eps_init,
            n_perm=n_perm,
            alpha=alpha,
            null=null,
            use_1sample_u=use_1sample_u,
        )
        if net is not None and not isinstance(net, nn.Module):
            raise TypeError(f"net must be an nn.Module, got {type(net).__name__}")
        self.net, self._own_net = net, net is None

    def _build(self, raw: Tensor) -> None:
        d = raw.shape[1]
        if self._own_net and (self.net is None or self.net[0].in_features != d):
            h = 3 * d
            gen = getattr(self, "_generator", None)
            with torch.random.fork_rng(devices=[]):
                if gen is not None:  # the initial weights follow the fit's generator
                    torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
                self.net = nn.Sequential(
                    nn.Linear(d, h),
                    nn.Softplus(),
                    nn.Linear(h, h),
                    nn.Softplus(),
                    nn.Linear(h, h),
                    nn.Softplus(),
                    nn.Linear(h, h),
                )
        self.net.to(device=raw.device, dtype=raw.dtype)

    def _phi(self, pooled) -> Tensor:
        raw = _flat(self.raw_fn(pooled))
        p = next(self.net.parameters(), None)
        return self.net(raw if p is None else raw.to(p)).reshape(len(raw), -1)

    def _init_params(self, raw, phi, n):
        return 2.0 * raw.shape[1], 0.1


class SemanticAwareMMD(_SmoothKernelMMD):
    """SAMMD (Gao et al. 2021): the smooth kernel with FIXED semantic features ``feature_fn``
    (the attacked model's penultimate features in their code) and raw inputs ``raw_fn``; only
    ``sigma_phi`` (start: the median of the squared feature distances between S_P and S_Q),
    ``sigma_q`` (start: twice the raw input size, SAMMD's ``2 * 32 * 32`` for CIFAR) and ``eps``
    are learned, Adam lr 2e-4 for 1000 epochs. SAMMD tests with the wild-bootstrap null
    (``null="wild_bootstrap"``, conservative beyond 2-D: type-I error 0.006-0.020 at alpha 0.05
    in 32-D, :func:`~icml25.topo_detect.mmd.wild_bootstrap_test`); the default here is the
    permutation null."""

    default_epochs, default_lr = 1000, 2e-4  # SAMMD's code

    def __init__(
        self,
        feature_fn: Callable,
        *,
        raw_fn: Callable = _identity,
        eps_init: float = 1e-10,
        n_perm: int = 100,
        alpha: float = 0.05,
        null: str = "permutation",
        use_1sample_u: bool = True,
    ) -> None:
        super().__init__(
            raw_fn,
            eps_init=eps_init,
            n_perm=n_perm,
            alpha=alpha,
            null=null,
            use_1sample_u=use_1sample_u,
        )
        if not callable(feature_fn):
            raise TypeError(f"feature_fn must be callable, got {feature_fn!r}")
        self.feature_fn = feature_fn

    def _phi(self, pooled) -> Tensor:
        with torch.no_grad():
            return _flat(self.feature_fn(pooled)).detach()

    def _init_params(self, raw, phi, n):
        cross = _sqdist(phi[:n].double(), phi[n:].double())
        med = float(cross[cross > 0].median()) if bool((cross > 0).any()) else 1.0
        return 2.0 * raw.shape[1], med


class TopologicalMMD(MMDTest):
    """The paper's topological tests: ``k_topo(a, b) = k_base(a, b) exp(-|g_a - g_b|^2 / s_g)``
    (``fusion="product"``, the default) with ``g`` the per-sample topological signatures of §6,
    or the base's feature map extended by ``concat_scale * g`` (``fusion="concat"``, for bases
    with a feature map: DeepKernelMMD, SemanticAwareMMD).

    ``base``: an :class:`MMDTest`, a list of feature callables (an untrained
    :class:`GaussianMMD`), or None / ``[]`` for the topological Gaussian alone.
    ``signature_fn(pooled, generator) -> (N, F)`` is ALWAYS applied to the pooled sample with
    label-independent chunking: computing signatures per group breaks exchangeability under H0
    and with it the validity of the null (the API offers no per-group option). ``s_g`` is the
    median heuristic on the pooled sample, or learned with the base's parameters by :meth:`fit`.
    """

    def __init__(
        self,
        base,
        signature_fn: Callable,
        n_perm: int | None = None,
        alpha: float | None = None,
        fusion: str = "product",
        *,
        concat_scale: float = 1.0,
        null: str | None = None,
        use_1sample_u: bool | None = None,
    ) -> None:
        # unset settings follow the base test (else 100 permutations, 0.05, permutation null)
        ref = base if isinstance(base, MMDTest) else None
        n_perm = n_perm if n_perm is not None else (ref.n_perm if ref else 100)
        alpha = alpha if alpha is not None else (ref.alpha if ref else 0.05)
        null = null if null is not None else (ref.null if ref else "permutation")
        if use_1sample_u is None:
            use_1sample_u = ref.use_1sample_u if ref else True
        super().__init__(n_perm=n_perm, alpha=alpha, null=null, use_1sample_u=use_1sample_u)
        if fusion not in ("product", "concat"):
            raise ValueError(f"fusion must be 'product' or 'concat', got {fusion!r}")
        if not callable(signature_fn):
            raise TypeError(f"signature_fn must be callable, got {signature_fn!r}")
        if base is not None and not isinstance(base, MMDTest):
            base = list(base) if not callable(base) else [base]
            base = GaussianMMD(base, n_perm, alpha, use_1sample_u=use_1sample_u) if base else None
        if fusion == "concat" and not isinstance(base, _SmoothKernelMMD):
            raise ValueError(
                "fusion='concat' appends the signatures to a learned feature map: base must be a "
                f"DeepKernelMMD or SemanticAwareMMD, got {type(base).__name__}"
            )
        concat_scale = as_real("concat_scale", concat_scale, low=0, low_open=True)
        self.base, self.signature_fn, self.fusion = base, signature_fn, fusion
        self.concat_scale = concat_scale
        self.sigma_g_sqrt: Tensor | None = None  # learned by fit (product fusion)
        self._signatures = None

    @property
    def default_epochs(self):  # type: ignore[override]
        return self.base.default_epochs if self.base is not None else MMDTest.default_epochs

    @property
    def default_lr(self):  # type: ignore[override]
        return self.base.default_lr if self.base is not None else MMDTest.default_lr

    def signatures(self, pooled, generator=None) -> Tensor:
        g = _flat(self.signature_fn(pooled, generator))
        N = _size(pooled)
        if g.shape[0] != N:
            raise ValueError(
                f"signature_fn must return one row per pooled sample, ({N}, F); got {tuple(g.shape)}"
            )
        return g

    def kernel(self, pooled, extra: Tensor | None = None, g: Tensor | None = None) -> Tensor:
        if g is None:
            g = self.signatures(pooled)
        if self.fusion == "concat":
            return self.base.kernel(pooled, extra=self.concat_scale * g)
        if self.sigma_g_sqrt is not None:
            Kg = torch.exp(
                -_sqdist(g.to(self.sigma_g_sqrt), g.to(self.sigma_g_sqrt)) / self.sigma_g_sqrt**2
            )
        else:
            Kg = gaussian_gram(g)
        if self.base is None:
            return Kg
        Kb = self.base.kernel(pooled)
        return Kb.to(torch.promote_types(Kb.dtype, Kg.dtype)) * Kg.to(Kb.device)

    def gram(self, pooled, generator=None) -> Tensor:
        if self.base is not None:
            self.base._check_ready()
        g = self.signatures(pooled, generator)
        with torch.no_grad():
            return self.kernel(pooled, g=g).detach().double()

    def parameters(self) -> list[Tensor]:
        own = [self.sigma_g_sqrt] if self.sigma_g_sqrt is not None else []
        return (self.base.parameters() if self.base is not None else []) + own

    def fit(
        self,
        S_P,
        S_Q,
        *,
        epochs: int | None = None,
        lr: float | None = None,
        generator: torch.Generator | None = None,
    ) -> TopologicalMMD:
        """Train the base's parameters and ``s_g`` (started at the median heuristic) jointly by
        maximising J on a training split; signatures come from the pooled training sample (the
        samples are detached, as in :meth:`MMDTest.fit`)."""
        _check_generator(generator)
        n, _ = _sizes(S_P, S_Q, True)
        pooled = _pool(S_P, S_Q, detach=True)
        g = self.signatures(pooled, generator).detach()
        if self.base is not None:
            self.base._generator = generator
            self.base._prepare(pooled, n)
            self.base._fitted = True
        if self.fusion == "product":
            ref = (
                self.base.parameters()[0] if self.base is not None and self.base.parameters() else g
            )
            dtype = ref.dtype if ref.is_floating_point() else torch.float64
            self.sigma_g_sqrt = nn.Parameter(
                torch.tensor(math.sqrt(median_bandwidth(g)), dtype=dtype, device=ref.device)
            )
        epochs = self.default_epochs if epochs is None else epochs
        lr = self.default_lr if lr is None else lr
        self.history = _train(lambda: self.kernel(pooled, g=g), self.parameters(), n, epochs, lr)
        return self
