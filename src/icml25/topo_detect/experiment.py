"""The reproduction's experiment (docs/topo_detect.md, "Reproduction"): the attacked two-tower
model on the digits, the signature curve of claim 1, the MMD detection trials of claim 2 with
their non-topological controls, the trained kernels and the (eps, q) sweep.

``repro.py`` checks the claims on what these functions return; they are usable on their own::

    st = Setting(seed=0)                       # trained, frozen model and its PGD test images
    c = curve(st, seed=0, batches=5, fractions=(0.0, 0.5, 1.0))
    det = detection_trials(st, seed=0, trials=10)   # det["H1"]["SA*G_topo"]: one 0/1 per trial
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from icml25.topo_detect.attacks import pgd_linf
from icml25.topo_detect.controls import knn_features
from icml25.topo_detect.models import TinyTwoTower, digit_prompt_embeddings
from icml25.topo_detect.signatures import FRACTIONS, sample_signatures, signature_curve
from icml25.topo_detect.two_sample import (
    DeepKernelMMD,
    GaussianMMD,
    SemanticAwareMMD,
    TopologicalMMD,
)

__all__ = [
    "CONTROLS",
    "CONTROL_TESTS",
    "EPS",
    "N_BATCH",
    "N_PERM",
    "N_TEST",
    "N_TRAIN",
    "Q_ADV",
    "Setting",
    "best_control",
    "curve",
    "detection_trials",
    "make_tests",
    "sweep",
    "trained_tests",
]

EPS = 0.1  # PGD-L-inf radius of the attack
N_BATCH = 100  # claim 1: images per batch
N_TEST, Q_ADV = 100, 0.5  # claim 2: n per sample, adversarial fraction of S_Q
N_PERM = 100  # permutations of every MMD test
N_TRAIN = 100  # per sample of the kernels' training split (a separate 100 + 100)
#: the non-topological controls of check 2d: a Gaussian on k-NN distances (1-NN and mean 3-NN)
#: or on the LID (k = 10), computed in the SAME chunks as the topological signatures, in place
#: of G_topo in each test (alone, times G_emb, times SA); 2d compares SA*G_topo with the SA
#: product of the better control
CONTROLS = ("knn", "lid")
CONTROL_TESTS = tuple(f"{b}G_{c}" for b in ("", "G_emb*", "SA*") for c in CONTROLS)


# -- the model and its samples -------------------------------------------------------------------
class Setting:
    """The trained, frozen two-tower model on the digits split, its clean and PGD test images."""

    def __init__(self, seed: int, eps: float = EPS, epochs: int = 40) -> None:
        from icml25.toy.digits import digits_split

        xtr, ytr, self.x, self.y = digits_split(0.4, seed=0, shape="flat")
        self.T, self.text_info = digit_prompt_embeddings()
        torch.manual_seed(seed)
        self.model = TinyTwoTower(32).fit(xtr, ytr, self.T, epochs=epochs, seed=seed)
        self.model.requires_grad_(False)
        self.adv = pgd_linf(
            self.model,
            self.x,
            self.y,
            self.T,
            eps,
            generator=torch.Generator().manual_seed(1 + seed),
        )
        self.E, self.E_adv = self.model.encode_image(self.x), self.model.encode_image(self.adv)
        self.S, self.S_adv = self.model.penultimate(self.x), self.model.penultimate(self.adv)
        self.Temb = self.model.encode_text_embeddings(self.T)
        self.acc = float((self.model.logits(self.x, self.T).argmax(-1) == self.y).float().mean())
        self.adv_acc = float(
            (self.model.logits(self.adv, self.T).argmax(-1) == self.y).float().mean()
        )

    def paired_text(self, e: torch.Tensor) -> torch.Tensor:
        """The text embedding of the class the model predicts (a detector knows no labels)."""
        return self.Temb[(e @ self.Temb.T).argmax(-1)]

    def sample(self, p_idx, q_idx, k: int, g: torch.Generator, extra: bool) -> tuple[dict, dict]:
        """S_P (clean ``p_idx``) and S_Q (``q_idx``, its first ``k`` adversarial) as dicts of
        features; every signature is computed on the POOLED sample with label-independent chunks
        (TopologicalMMD's validity rule), except the per-group negative control."""
        n = len(p_idx)

        def mix(clean, adv):
            return torch.cat([clean[p_idx], adv[q_idx[:k]], clean[q_idx[k:]]])

        emb, raw, sem = mix(self.E, self.E_adv), mix(self.x, self.adv), mix(self.S, self.S_adv)
        text = self.paired_text(emb)
        state = g.get_state()  # the controls' chunks are the topological signatures' chunks
        f = {"emb": emb, "raw": raw, "sem": sem, "topo": sample_signatures(emb, text, generator=g)}
        for c in CONTROLS:
            f[c] = knn_features(emb, kind=c, generator=torch.Generator().set_state(state))
        f["topo_grad"] = sample_signatures(emb, text, mode="gradient", generator=g)
        if extra:
            f["topo_mk"] = sample_signatures(emb, text, mode="gradient", loss="mk", generator=g)
            f["topo_a2"] = sample_signatures(emb, text, alpha=2.0, generator=g)
            f["topo_pg"] = torch.cat(
                [
                    sample_signatures(emb[:n], text[:n], generator=g),
                    sample_signatures(emb[n:], text[n:], generator=g),
                ]
            )
        return {k_: v[:n] for k_, v in f.items()}, {k_: v[n:] for k_, v in f.items()}


# -- claim 1 -------------------------------------------------------------------------------------
def curve(st: Setting, seed: int, batches: int, fractions=FRACTIONS, alpha: float = 1.0) -> dict:
    """The library's :func:`signature_curve` on the setting's embeddings (predicted pairing)."""
    return signature_curve(
        None,
        st.E,
        st.E_adv,
        st.Temb,
        fractions=fractions,
        batch_size=N_BATCH,
        n_batches=batches,
        alpha=alpha,
        generator=torch.Generator().manual_seed(seed),
        disable_progress=True,
    )


# -- claim 2 -------------------------------------------------------------------------------------
def _sel(key):
    return lambda z: z[key]


def _sig(key):
    return lambda z, generator: z[key]  # computed on the pooled sample in Setting.sample


def make_tests(extra: bool = False) -> dict:
    """The untrained tests of claim 2 as kernel products over the features of Setting.sample."""
    e, r = _sel("emb"), _sel("raw")
    tests = {
        "G_emb": GaussianMMD([e], N_PERM),
        "G_raw": GaussianMMD([r], N_PERM),
        "SA": GaussianMMD([e, r], N_PERM),
        "G_topo": TopologicalMMD(None, _sig("topo"), N_PERM),
        "G_emb*G_topo": TopologicalMMD([e], _sig("topo"), N_PERM),
        "SA*G_topo": TopologicalMMD([e, r], _sig("topo"), N_PERM),
        "G_topo[grad]": TopologicalMMD(None, _sig("topo_grad"), N_PERM),
        "G_emb*G_topo[grad]": TopologicalMMD([e], _sig("topo_grad"), N_PERM),
        "SA*G_topo[grad]": TopologicalMMD([e, r], _sig("topo_grad"), N_PERM),
    }
    for c in CONTROLS:  # the same products with a non-topological feature in place of G_topo
        tests[f"G_{c}"] = GaussianMMD([_sel(c)], N_PERM)
        tests[f"G_emb*G_{c}"] = GaussianMMD([e, _sel(c)], N_PERM)
        tests[f"SA*G_{c}"] = GaussianMMD([e, r, _sel(c)], N_PERM)
    if extra:
        tests["G_emb*G_topo[MK grad]"] = TopologicalMMD([e], _sig("topo_mk"), N_PERM)
        tests["G_emb*G_topo[alpha 2]"] = TopologicalMMD([e], _sig("topo_a2"), N_PERM)
        tests["G_topo[per group]"] = GaussianMMD([_sel("topo_pg")], N_PERM)
    return tests


def trained_tests(st: Setting, train_idx, seed: int, epochs: int) -> tuple[dict, dict]:
    """MMD-D (network on the pixels), SAMMD (the model's penultimate features, learned
    bandwidths) and their topological products, each fitted on a training split (``N_TRAIN``
    clean vs ``N_TRAIN`` with fraction Q_ADV adversarial) disjoint from the test trials, with the
    papers' optimiser settings (docs/topo_detect.md). Returns the tests and their final J."""
    g = torch.Generator().manual_seed(5000 + seed)
    p_idx, q_idx = train_idx[:N_TRAIN], train_idx[N_TRAIN:]
    S_P, S_Q = st.sample(p_idx, q_idx, int(Q_ADV * N_TRAIN), g, extra=False)
    r, sem = _sel("raw"), _sel("sem")
    tests, J = {}, {}
    for name, make in (
        ("MMD-D", lambda: DeepKernelMMD(raw_fn=r, n_perm=N_PERM)),
        ("MMD-D*G_topo", lambda: TopologicalMMD(DeepKernelMMD(raw_fn=r), _sig("topo"), N_PERM)),
        ("SAMMD", lambda: SemanticAwareMMD(sem, raw_fn=r, n_perm=N_PERM)),
        (
            "SAMMD*G_topo",
            lambda: TopologicalMMD(SemanticAwareMMD(sem, raw_fn=r), _sig("topo"), N_PERM),
        ),
    ):
        torch.manual_seed(seed)  # the MMD-D network's initialisation
        tests[name] = make().fit(S_P, S_Q, epochs=epochs, generator=g)
        J[name] = tests[name].history[-1] if tests[name].history else float("nan")
    return tests, J


def detection_trials(
    st: Setting,
    seed: int,
    trials: int,
    q: float = Q_ADV,
    *,
    extra: bool = False,
    pool=None,
    trained: dict | None = None,
) -> dict:
    """Rejections per test under H0 and H1 on disjoint random test images from ``pool`` (all
    test images by default); every test sees the same data in a trial. One trial is one unit:
    a fresh draw of 2n images (and chunks); the lists hold one value per trial, in trial order."""
    tests = {**make_tests(extra), **(trained or {})}
    g = torch.Generator().manual_seed(1000 + seed)
    # the controls draw their permutations from their own stream, so the other tests' draws
    # (and every number they give) do not depend on whether the controls run
    g_control = torch.Generator().manual_seed(2000 + seed)
    pool = torch.arange(len(st.x)) if pool is None else torch.as_tensor(pool)
    out = {h: {name: [] for name in tests} for h in ("H0", "H1")}
    n = N_TEST
    for _ in range(trials):
        for h in ("H0", "H1"):
            idx = pool[torch.randperm(len(pool), generator=g)[: 2 * n]]
            k = int(q * n) if h == "H1" else 0
            S_P, S_Q = st.sample(idx[:n], idx[n:], k, g, extra)
            for name, test in tests.items():
                gen = g_control if name in CONTROL_TESTS else g
                out[h][name].append(float(test.test(S_P, S_Q, generator=gen).reject))
    return out


def best_control(base: str, power: dict) -> str:
    """The control test of the ``base`` family (``""``, ``"G_emb*"``, ``"SA*"``) with the
    highest power: topology must beat every control, so it is compared with the strongest."""
    return max((f"{base}G_{c}" for c in CONTROLS), key=lambda t: (power[t], t))


def sweep(
    seeds: Sequence[int],
    eps_list: Sequence[float],
    q_list: Sequence[float],
    trials: int,
    epochs: int,
    shown: Sequence[str],
) -> list[dict]:
    """Detection trials of the ``shown`` tests per (eps, q), a model and attack per seed and eps:
    ``[{"eps", "q", "H0": {test: rejections}, "H1": {...}}]`` with each list pooled over the
    seeds in seed order."""
    rows = []
    for eps in eps_list:
        sts = [Setting(s, eps=eps, epochs=epochs) for s in seeds]
        for q in q_list:
            det = [detection_trials(st, s, trials, q) for st, s in zip(sts, seeds)]
            h1 = {t: [v for d in det for v in d["H1"][t]] for t in shown}
            h0 = {t: [v for d in det for v in d["H0"][t]] for t in shown}
            rows.append({"eps": eps, "q": q, "H0": h0, "H1": h1})
    return rows
