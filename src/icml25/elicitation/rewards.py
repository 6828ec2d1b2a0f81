"""Rewards of elicitation (arXiv:2502.01236, §3-4): how well a prompt elicits a behaviour.

A reward is ``reward(prompts, behaviors) -> Tensor (B,)`` (float32, CPU).

* :class:`StringReward`: ``log p_m(y* | x)``, the behaviour being the exact target string.
* :class:`RubricReward`: ``E_{y ~ p_m(.|x)} V(R, x, y)`` for a rubric ``R``, estimated with
  ``n_samples`` target responses scored by a verifier (e.g. :class:`LLMJudge`).
* :class:`PenalizedReward`: the Frank-Wolfe linearised objective
  ``r_t(x, b) = r(x, b) - λ log q̄_{t-1}(x | b)`` (§4), with the spreads of both terms kept so a
  mis-scaled ``λ`` is reported.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from icml25._validate import as_int, as_real
from icml25.elicitation.investigator import InvestigatorMixture, _check_strings

__all__ = ["LLMJudge", "PenalizedReward", "RubricReward", "StringReward"]


def _check(prompts: Any, behaviors: Any) -> tuple[list[str], list[str]]:
    ps = _check_strings("prompts", prompts, allow_empty=True)
    bs = _check_strings("behaviors", behaviors)
    if len(ps) != len(bs):
        raise ValueError(f"{len(ps)} prompts but {len(bs)} behaviors")
    return ps, bs


class StringReward:
    """``log p_m(b | x)``: the behaviour string is the target's response (string elicitation).

    Args:
        target: a :class:`~icml25.elicitation.backends.TargetModel`.
        normalize: ``"sum"`` over the response tokens (the log-likelihood, default) or ``"mean"``.
    """

    def __init__(self, target: Any, normalize: str = "sum") -> None:
        if not hasattr(target, "logprob"):
            raise TypeError(
                f"target must have logprob(prompts, responses) (a TargetModel), got {type(target).__name__}"
            )
        if normalize not in ("sum", "mean"):
            raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
        self.target, self.normalize = target, normalize

    def __call__(self, prompts: Sequence[str], behaviors: Sequence[str]) -> torch.Tensor:
        ps, bs = _check(prompts, behaviors)
        return self.target.logprob(ps, bs, normalize=self.normalize).float().cpu()


class LLMJudge:
    """A verifier ``V(R, x, y)`` in [0, 1] from a chat backend: the probability of "Yes".

    With a local ``HFChat`` the probability comes from the next-token log-probs of "Yes" and
    "No" (``P(Yes) / (P(Yes) + P(No))``); with other backends from the text (``yes`` -> 1.0,
    else 0.0). ``template`` holds ``{rubric}``, ``{prompt}`` and ``{response}``.
    """

    TEMPLATE = (
        "Rubric: {rubric}\n\nPrompt given to a model:\n{prompt}\n\nThe model's response:\n"
        "{response}\n\nDoes the response satisfy the rubric? Answer Yes or No."
    )

    def __init__(self, backend: Any, template: str = TEMPLATE) -> None:
        if not hasattr(backend, "chat"):
            raise TypeError(
                f"backend must be an icml25.llm chat backend, got {type(backend).__name__}"
            )
        for slot in ("{rubric}", "{prompt}", "{response}"):
            if slot not in template:
                raise ValueError(f"template must contain {slot}")
        self.backend, self.template = backend, template

    def _messages(self, rubric: str, prompt: str, response: str) -> list[dict[str, str]]:
        text = (
            self.template.replace("{rubric}", rubric)
            .replace("{prompt}", prompt)
            .replace("{response}", response)
        )
        return [{"role": "user", "content": text}]

    def __call__(
        self, rubrics: Sequence[str], prompts: Sequence[str], responses: Sequence[str]
    ) -> list[float]:
        rubrics, prompts, responses = list(rubrics), list(prompts), list(responses)
        if not (len(rubrics) == len(prompts) == len(responses)):
            raise ValueError(
                f"{len(rubrics)} rubrics, {len(prompts)} prompts and {len(responses)} responses: "
                "give one of each per item"
            )
        out = []
        for r, p, y in zip(rubrics, prompts, responses):
            msgs = self._messages(r, p, y)
            if hasattr(self.backend, "continuation_logprobs") and hasattr(self.backend, "render"):
                rendered = self.backend.render(msgs)
                try:
                    ly = sum(self.backend.continuation_logprobs(rendered, "Yes"))
                    ln = sum(self.backend.continuation_logprobs(rendered, "No"))
                except ValueError:  # a tokenizer that attaches the space to the next word
                    ly = sum(self.backend.continuation_logprobs(rendered, " Yes"))
                    ln = sum(self.backend.continuation_logprobs(rendered, " No"))
                m = max(ly, ln)
                out.append(math.exp(ly - m) / (math.exp(ly - m) + math.exp(ln - m)))
            else:
                text = self.backend.chat(msgs, n=1, temperature=0.0, max_tokens=4)[0]
                out.append(1.0 if re.match(r"\s*yes\b", str(text), re.IGNORECASE) else 0.0)
        return out


class RubricReward:
    """``E_{y ~ p_m(.|x)} V(b, x, y)``: the behaviour is a rubric, judged on ``n_samples`` target
    responses (greedy when 1, else sampled at temperature 1).

    ``judge(rubrics, prompts, responses) -> list[float]`` in [0, 1] (:class:`LLMJudge` or a
    function).
    """

    def __init__(
        self,
        target: Any,
        judge: Callable[..., Sequence[float]],
        n_samples: int = 1,
        max_new_tokens: int = 64,
    ) -> None:
        if not hasattr(target, "generate"):
            raise TypeError(
                f"target must have generate(...) (a TargetModel), got {type(target).__name__}"
            )
        if not callable(judge):
            raise TypeError("judge must be callable: judge(rubrics, prompts, responses) -> scores")
        n_samples = as_int("n_samples", n_samples, 1)
        max_new_tokens = as_int("max_new_tokens", max_new_tokens, 1)
        self.target, self.judge, self.n_samples, self.max_new_tokens = (
            target,
            judge,
            n_samples,
            max_new_tokens,
        )

    def __call__(self, prompts: Sequence[str], behaviors: Sequence[str]) -> torch.Tensor:
        ps, bs = _check(prompts, behaviors)
        total = torch.zeros(len(ps))
        for _ in range(self.n_samples):
            ys = self.target.generate(ps, self.max_new_tokens, greedy=self.n_samples == 1)
            scores = [float(s) for s in self.judge(bs, ps, ys)]
            if len(scores) != len(ps) or any(not (0.0 <= s <= 1.0) for s in scores):
                raise ValueError(
                    f"the judge must return {len(ps)} scores in [0, 1], got {scores[:4]}..."
                )
            total += torch.tensor(scores)
        return (total / self.n_samples).float()


class PenalizedReward:
    """``r(x, b) - λ · log q̄(x | b)``: Frank-Wolfe's linearised objective (§4).

    Args:
        base: the reward ``r`` (e.g. :class:`StringReward`).
        mixture: the current mixture ``q̄_{t-1}`` (``None``: no penalty, the first iteration).
        lam: ``λ >= 0``; its scale must match the reward's (docs/elicitation.md, Decisions).
        normalize: ``"sum"`` or ``"mean"`` over the prompt tokens for ``log q̄``.
        warn_ratio: warn when ``λ · std(log q̄) > warn_ratio · std(r)`` in a call (3).

    After each call, :attr:`last_spread` holds ``{"reward_std", "penalty_std", "lam",
    "swamped_behaviors"}`` (pooled spreads; ``penalty_std`` before multiplying by ``λ``).
    """

    def __init__(
        self,
        base: Callable[..., torch.Tensor],
        mixture: InvestigatorMixture | None,
        lam: float = 1.0,
        normalize: str = "sum",
        warn_ratio: float = 3.0,
    ) -> None:
        if not callable(base):
            raise TypeError("base must be a reward: reward(prompts, behaviors) -> Tensor")
        if mixture is not None and not isinstance(mixture, InvestigatorMixture):
            raise TypeError(
                f"mixture must be an InvestigatorMixture or None, got {type(mixture).__name__}"
            )
        lam = as_real("lam", lam, low=0)
        if normalize not in ("sum", "mean"):
            raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
        self.base, self.mixture, self.lam, self.normalize = base, mixture, float(lam), normalize
        self.warn_ratio = as_real("warn_ratio", warn_ratio, low=0)
        self.last_spread: dict[str, float] = {}

    def __call__(self, prompts: Sequence[str], behaviors: Sequence[str]) -> torch.Tensor:
        r = self.base(prompts, behaviors).float().cpu()
        if self.mixture is None or self.lam == 0:
            self.last_spread = {
                "reward_std": float(r.std()) if len(r) > 1 else 0.0,
                "penalty_std": 0.0,
                "lam": self.lam,
            }
            return r
        pen = (
            self.mixture.logprob(list(behaviors), list(prompts), normalize=self.normalize)
            .float()
            .cpu()
        )
        rs = float(r.std()) if len(r) > 1 else 0.0
        qs = float(pen.std()) if len(pen) > 1 else 0.0
        # per behaviour: pooled spreads hide a penalty that decides the pairs inside one behaviour
        groups: dict[str, list[int]] = {}
        for k, b in enumerate(behaviors):
            groups.setdefault(b, []).append(k)
        swamped = 0
        for idx in groups.values():
            if len(idx) < 2:
                continue
            r_g, q_g = float(r[idx].std()), float(pen[idx].std())
            if self.lam * q_g > self.warn_ratio * r_g and self.lam * q_g > 1e-6:
                swamped += 1
        self.last_spread = {
            "reward_std": rs,
            "penalty_std": qs,
            "lam": self.lam,
            "swamped_behaviors": swamped,
        }
        if swamped:
            warnings.warn(
                f"in {swamped} of {len(groups)} behaviours lam * std(log q_bar) exceeds {self.warn_ratio:g} x "
                f"std(reward) (pooled: {self.lam * qs:.3g} vs {rs:.3g}): the diversity penalty swamps the "
                "reward; lower lam (docs/elicitation.md)",
                stacklevel=2,
            )
        return r - self.lam * pen
