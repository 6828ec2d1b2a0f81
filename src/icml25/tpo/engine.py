"""The TPO loop (paper §3, official ``run.py``/``tpo_utils.py``): sample, score, contrast the best
and worst cached responses into a textual loss, turn it into a textual gradient, regenerate, repeat.

Cost per query: ``1 + 3 D`` policy calls and ``N (D + 1)`` sampled and scored responses (fewer when
update outputs lack the improved-variable tags: those are dropped and counted).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Literal

from icml25._validate import as_int, as_real
from icml25.llm.store import json_safe
from icml25.tpo.prompts import PromptSet, extract_tagged

__all__ = [
    "CacheEntry",
    "IterationLog",
    "TPOConfig",
    "TPOResult",
    "best_of_n",
    "tpo_batch",
    "tpo_optimize",
]


@dataclass
class TPOConfig:
    """TPO's settings, defaults from the paper and the official code (each commented)."""

    width: int = 5  # N, official sample_size
    depth: int = 2  # D, the paper's main setting (code default 5)
    mode: Literal["tpo", "revision", "bon"] = "tpo"
    temperature: float = 0.7  # official sampling
    top_p: float = 0.95  # official sampling
    seed: int | None = 7  # official: seed 7 on candidate generation and update calls only
    # "fixed" (official) | "increment" (seed + k on the k-th seeded call)
    seed_policy: Literal["fixed", "increment"] = "fixed"
    max_tokens_response: int = 2048  # official
    feedback_temperature: float = 0.7  # official loss/gradient calls
    feedback_top_p: float = 0.99  # official loss/gradient calls
    max_tokens_feedback: int = 4096  # (unverified) paper summary: 4096-token context
    truncate_tokens: int | None = 2048  # official: chosen/rejected cut to 2048 RM tokens
    # (text, n_tokens) -> text; None: the reward model's own ``truncate`` when it has one
    # (HFRewardModel: its tokenizer, as the official truncate_text), else no truncation
    truncate_fn: object = None
    pair_selection: Literal["extreme", "median"] = "extreme"  # "extreme" (official)
    nan_policy: Literal["worst", "raise"] = "worst"  # "worst": NaN/inf rewards never chosen

    def __post_init__(self) -> None:
        # checked and converted at construction (issue 49): a config never holds numpy scalars
        self.validate()

    def validate(self) -> None:
        """``ValueError`` naming the field and the value; numbers given as numpy or 0-d torch
        scalars are stored back as Python ``int``/``float`` (so a run's settings serialise).
        Runs at construction; call it again after changing a field."""
        self.width = as_int("width", self.width, 1)
        self.depth = as_int("depth", self.depth, 0)
        if self.seed is not None:
            self.seed = as_int("TPOConfig.seed", self.seed)
        for name, value, valid in (
            ("mode", self.mode, ("tpo", "revision", "bon")),
            ("seed_policy", self.seed_policy, ("fixed", "increment")),
            ("pair_selection", self.pair_selection, ("extreme", "median")),
            ("nan_policy", self.nan_policy, ("worst", "raise")),
        ):
            if value not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {value!r}")
        for name in ("max_tokens_response", "max_tokens_feedback"):
            setattr(self, name, as_int(f"TPOConfig.{name}", getattr(self, name), 1))
        if self.truncate_tokens is not None:
            self.truncate_tokens = as_int("TPOConfig.truncate_tokens", self.truncate_tokens, 1)
        for name in ("temperature", "feedback_temperature"):
            if getattr(self, name) is not None:
                setattr(self, name, as_real(f"TPOConfig.{name}", getattr(self, name), low=0))
        for name in ("top_p", "feedback_top_p"):
            if getattr(self, name) is not None:
                setattr(
                    self,
                    name,
                    as_real(f"TPOConfig.{name}", getattr(self, name), low=0, high=1, low_open=True),
                )
        if self.truncate_fn is not None and not callable(self.truncate_fn):
            raise ValueError(
                f"TPOConfig.truncate_fn must be callable or None, got {self.truncate_fn!r}"
            )


@dataclass
class CacheEntry:
    """One scored response in TPO's cache: the iteration it came from (-1: initial samples), the
    text and its reward."""

    iteration: int  # -1 for the initial samples
    text: str
    reward: float


@dataclass
class IterationLog:
    """What one TPO iteration did: the chosen and rejected responses, the textual loss and
    gradient, the update prompt, how many candidates were parsed or dropped and their rewards."""

    chosen: str
    rejected: str | None
    loss_text: str
    gradient_text: str
    update_prompt: str
    n_parsed: int
    n_dropped: int
    new_rewards: list[float]
    same_pair: bool = False  # chosen and rejected were the same entry (N = 1 or all rewards equal)


@dataclass
class TPOResult:
    """The outcome of TPO on one query: the best response and its reward, the cache, the
    per-iteration log and the number of policy and reward calls."""

    query: str
    best_response: str
    best_reward: float
    cache: list[CacheEntry] = field(default_factory=list)
    iterations: list[IterationLog] = field(default_factory=list)
    n_policy_calls: int = 0
    n_reward_calls: int = 0

    def to_dict(self) -> dict:
        """JSON-safe form: non-finite rewards (NaN/inf, or ``-inf`` for a NaN under
        ``nan_policy="worst"``) become ``None``; :meth:`from_dict` reads them back as ``-inf``."""
        return json_safe(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False)

    def best_reward_at(self, depth: int) -> float:
        """The best cached reward after ``depth`` iterations (0 = Best-of-N of the initial
        samples). Iteration ``i`` depends only on iterations before it, so this equals the final
        reward of a run with ``depth`` iterations and the same seeds: one deep run gives the
        whole depth curve."""
        done = len(self.iterations)
        depth = as_int("depth (of this result)", depth, 0, done)
        return max(e.reward for e in self.cache if e.iteration < depth)

    @classmethod
    def from_dict(cls, d: dict) -> TPOResult:
        def reward(v) -> float:
            return -math.inf if v is None else float(v)

        cache = [CacheEntry(c["iteration"], c["text"], reward(c["reward"])) for c in d["cache"]]
        logs = [
            IterationLog(**{**i, "new_rewards": [reward(v) for v in i["new_rewards"]]})
            for i in d["iterations"]
        ]
        return cls(
            d["query"],
            d["best_response"],
            reward(d["best_reward"]),
            cache,
            logs,
            d["n_policy_calls"],
            d["n_reward_calls"],
        )


class _Caller:
    """Counts calls, applies the seed policy and enforces the exactly-``n`` contract.

    Only candidate generation and the update are seeded (official ``tpo_utils.py``: the
    generation parameters with ``seed`` go to the initial sampling and ``optimizer.step``; the
    loss and gradient calls go through TextGrad's engine defaults, which send no seed)."""

    def __init__(self, config: TPOConfig) -> None:
        self.config, self.calls, self.seeded_calls = config, 0, 0

    def __call__(
        self, backend, messages, *, n, temperature, top_p, max_tokens, seeded: bool
    ) -> list[str]:
        c = self.config
        seed = None
        if seeded and c.seed is not None:
            seed = c.seed if c.seed_policy == "fixed" else c.seed + self.seeded_calls
            self.seeded_calls += 1
        out = backend.chat(
            messages, n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed
        )
        self.calls += 1
        texts = [getattr(o, "text", o) for o in out]
        if len(texts) != n:
            raise RuntimeError(f"the backend returned {len(texts)} completions for n={n}")
        return [t if isinstance(t, str) else str(t) for t in texts]


def _check_roles(backend, reward, feedback_backend) -> None:
    for label, obj in (("backend", backend), ("feedback_backend", feedback_backend)):
        if obj is not None and not callable(getattr(obj, "chat", None)):
            raise TypeError(
                f"{label} must be a chat backend with .chat() (icml25.llm.OpenAIChat, HFChat, ...; "
                f"wrap a function in icml25.llm.CallableChat), got {type(obj).__name__}"
            )
    if not callable(getattr(reward, "score", None)):
        raise TypeError(
            "reward must be a reward model with .score(queries, responses) (icml25.llm."
            f"HFRewardModel; wrap a function in icml25.llm.CallableReward), got {type(reward).__name__}"
        )


def _score(reward, query: str, texts: list[str], policy: str) -> list[float]:
    if not texts:
        return []
    vals = [float(v) for v in reward.score([query] * len(texts), texts)]
    if len(vals) != len(texts):
        raise RuntimeError(
            f"the reward model returned {len(vals)} scores for {len(texts)} responses"
        )
    out = []
    for v, t in zip(vals, texts):
        if not math.isfinite(v):
            if policy == "raise":
                raise ValueError(f"the reward model returned {v} for response {t[:80]!r}")
            v = -math.inf
        out.append(v)
    return out


def _select(cache: list[CacheEntry], how: str) -> tuple[int, int]:
    """Chosen = argmax, rejected = argmin (or the lower median) over the whole cache; ties go to
    the earliest entry (numpy argmax/argmin)."""
    rewards = [e.reward for e in cache]
    best = max(range(len(rewards)), key=lambda i: (rewards[i], -i))
    if how == "extreme":
        worst = min(range(len(rewards)), key=lambda i: (rewards[i], i))
    else:
        order = sorted(range(len(rewards)), key=lambda i: (rewards[i], i))
        worst = order[(len(order) - 1) // 2]
    return best, worst


def tpo_optimize(
    query: str,
    backend,
    reward,
    config: TPOConfig | None = None,
    prompts: PromptSet | None = None,
    *,
    feedback_backend=None,
) -> TPOResult:
    """Test-time preference optimisation of one query (``config.mode``: ``"tpo"``, ``"revision"``
    or ``"bon"``). ``backend`` is any :class:`icml25.llm.ChatBackend`; ``reward`` any
    :class:`icml25.llm.RewardModel`; ``feedback_backend`` (default: ``backend``, as in the paper)
    serves the loss, gradient and update calls."""
    config = config or TPOConfig()
    config.validate()
    prompts = prompts or PromptSet.default()
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"query must be a non-empty string, got {query!r}")
    _check_roles(backend, reward, feedback_backend)
    fb = feedback_backend or backend
    call = _Caller(config)
    N = config.width
    truncate = config.truncate_fn
    if truncate is None:
        truncate = getattr(reward, "truncate", None)
    cut = (
        (lambda t: truncate(t, config.truncate_tokens))
        if callable(truncate) and config.truncate_tokens is not None
        else (lambda t: t)
    )
    sample_args = dict(
        temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens_response
    )
    feedback_args = dict(
        temperature=config.feedback_temperature,
        top_p=config.feedback_top_p,
        max_tokens=config.max_tokens_feedback,
    )
    first = call(backend, prompts.generation_messages(query), n=N, seeded=True, **sample_args)
    scores = _score(reward, query, first, config.nan_policy)
    cache = [CacheEntry(-1, t, r) for t, r in zip(first, scores)]
    n_scored = len(first)
    logs: list[IterationLog] = []
    depth = 0 if config.mode == "bon" else config.depth
    warned = False
    for i in range(depth):
        b, w = _select(cache, config.pair_selection)
        chosen = cut(cache[b].text)
        rejected = None if config.mode == "revision" else cut(cache[w].text)
        loss_msgs = prompts.loss_messages(query, chosen, rejected)
        loss = call(fb, loss_msgs, n=1, seeded=False, **feedback_args)[0]
        grad_msgs = prompts.gradient_messages(query, chosen, rejected, loss)
        grad = call(fb, grad_msgs, n=1, seeded=False, **feedback_args)[0]
        upd_msgs = prompts.update_messages(query, chosen, rejected, loss, grad)
        outs = call(fb, upd_msgs, n=N, seeded=True, **sample_args)
        parsed = [
            p
            for p in (extract_tagged(o, prompts.start_tag, prompts.end_tag) for o in outs)
            if p is not None
        ]
        if not parsed and not warned:
            warnings.warn(
                f"no update output carried {prompts.start_tag}...{prompts.end_tag} at iteration {i}; "
                "continuing with the cache",
                UserWarning,
                stacklevel=2,
            )
            warned = True
        new = _score(reward, query, parsed, config.nan_policy)
        n_scored += len(parsed)
        cache += [CacheEntry(i, t, r) for t, r in zip(parsed, new)]
        logs.append(
            IterationLog(
                chosen=chosen,
                rejected=rejected,
                loss_text=loss,
                gradient_text=grad,
                update_prompt=upd_msgs[-1]["content"],
                n_parsed=len(parsed),
                n_dropped=len(outs) - len(parsed),
                new_rewards=new,
                same_pair=(b == w),
            )
        )
    best, _ = _select(cache, "extreme")
    return TPOResult(
        query=query,
        best_response=cache[best].text,
        best_reward=cache[best].reward,
        cache=cache,
        iterations=logs,
        n_policy_calls=call.calls,
        n_reward_calls=n_scored,
    )


def best_of_n(query: str, backend, reward, n: int, config: TPOConfig | None = None) -> TPOResult:
    """Best-of-N (the paper's baseline): one call with ``n`` samples, the best-scoring one."""
    base = config or TPOConfig()
    cfg = TPOConfig(**{**base.__dict__, "width": n, "mode": "bon"})
    return tpo_optimize(query, backend, reward, cfg)


def tpo_batch(
    queries: list[str],
    backend,
    reward,
    config: TPOConfig | None = None,
    prompts: PromptSet | None = None,
    *,
    num_threads: int = 4,
    out_path=None,
    resume: bool = True,
    retry_errors: bool = False,
    errors: str = "raise",
    feedback_backend=None,
    progress: bool | None = None,
    keep_both: bool = False,
) -> list:
    """TPO over many queries with a thread pool (like the official runner).

    With ``out_path`` every query's outcome is appended to a JSONL file as it finishes
    (:class:`icml25.llm.JsonlStore`; rows ``{"index", "query", "result"}``): a crash loses at
    most the queries in flight and a rerun (``resume``) skips the queries already there. A query
    that raises (a 400 "context length exceeded", a reward-model error) becomes an error row
    ``{"index", "query", "error": {"type", "message"}}`` and the others go on; a rerun retries
    error rows only with ``retry_errors``. ``errors="raise"`` (default): once every query was
    tried and saved, :class:`icml25.llm.BatchFailed` is raised if any failed (its ``report``
    and ``results`` say which and hold the rest); ``errors="return"``: failed queries appear as
    :class:`icml25.llm.ItemError` in the returned list. Queries share nothing mutable.

    The rows are keyed by everything that makes them (:class:`icml25.llm.JsonlStore`'s
    ``settings``): the policy and feedback backends' identity, the reward model's, the config
    (depth, width, temperature, seed...) and the prompts. Rerun into the same file with any of
    these changed, it raises :class:`icml25.llm.store.SettingsMismatch` naming what differs;
    ``keep_both=True`` keeps both runs' rows in the file, each run reading only its own."""
    import tempfile
    from pathlib import Path

    from icml25.llm.store import BatchFailed, ItemError, JsonlStore, describe, run_resumable

    if isinstance(queries, str) or not all(isinstance(q, str) for q in queries):
        raise ValueError("queries must be a list of strings")
    num_threads = as_int("num_threads", num_threads, 1)
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
    config = config or TPOConfig()
    config.validate()
    tmp = None
    if out_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="tpo_batch_")
        out_path = Path(tmp.name) / "results.jsonl"
    elif not resume and Path(out_path).exists():
        Path(out_path).unlink()
    try:
        settings = {
            "pipeline": "tpo_batch",
            "backend": describe(backend),
            "feedback_backend": describe(feedback_backend),
            "reward": describe(reward),
            "config": describe(config),
            "prompts": describe(prompts or PromptSet.default()),
        }
        on_mismatch = "separate" if keep_both else "refuse"
        with JsonlStore(out_path, "index", settings=settings, on_mismatch=on_mismatch) as store:
            for rec in list(store.records()) + [store.get(e.key) for e in store.errors()]:
                i = rec["index"]
                if not isinstance(i, int) or i >= len(queries) or rec.get("query") != queries[i]:
                    raise ValueError(
                        f"{out_path} holds a result for query {i} that is not this query list's; "
                        "use another out_path or resume=False"
                    )

            def work(q: str) -> dict:
                res = tpo_optimize(
                    q, backend, reward, config, prompts, feedback_backend=feedback_backend
                )
                return {"result": res.to_dict()}

            report = run_resumable(
                queries,
                work,
                store,
                key=lambda i, q: {"index": i, "query": q},
                concurrency=num_threads,
                retry_errors=retry_errors,
                progress=progress,
                desc="TPO",
            )
            out: list = []
            for i in range(len(queries)):
                rec = store.get(i)
                if rec is not None and "result" in rec:
                    out.append(TPOResult.from_dict(rec["result"]))
                else:
                    err = (rec or {}).get("error") or {}
                    out.append(
                        ItemError((i,), str(err.get("type", "")), str(err.get("message", "")))
                    )
    finally:
        if tmp is not None:
            tmp.cleanup()
    if errors == "raise" and report.failures:
        raise BatchFailed(report, [r if isinstance(r, TPOResult) else None for r in out])
    return out
