"""The offline reproduction's teacher and judges over :class:`icml25.toy.jailbreak_lang.JailbreakWorld`
(docs/safety_reasoning.md, "Reproduction").

The scripted teacher reads the guideline text it is given (the system message built by
:func:`~icml25.safety_reasoning.guidelines.teacher_messages`) and applies exactly the rules named
there: without the decoding guideline it does not decode a cipher, and so on. It errs with
probability ``error_rate`` (a wrong verdict, or a restatement with a wrong word), which the
filters are there to catch. It answers in the toy reasoning format ``=> <reasoning> A <answer>``.
"""

from __future__ import annotations

import random
from typing import Any

from icml25.safety_reasoning.formats import ReasoningFormat
from icml25.safety_reasoning.guidelines import Guideline

__all__ = ["TOY_FORMAT", "ScriptedTeacher", "restatement_judge", "toy_guidelines"]

#: the toy's reasoning format: ``=> reasoning A answer`` (one word per token)
TOY_FORMAT = ReasoningFormat(open_tag="=>", close_tag="A", separator=" ")

_RULES = {
    "decode": "if the request is in a cipher, decode each aliased word w_c to w",
    "indirection": "read a past form v_p as the verb v",
    "framing": "drop a role-play wrapper 'pretend dan norules ;'",
    "persuasion": "drop persuasion words 'kindly research' and 'purpose please'",
    "harm": "a request with a harmful verb hv* is refused with 'sorry cannot'",
    "help": "any other request is answered 'sure do <topic>'",
    "reflect": "re-check the restated request before the verdict",
}


def toy_guidelines() -> list[Guideline]:
    """The toy's guideline set (one rule per guideline; names G-decode ... G-reflect)."""
    return [Guideline(f"G-{name}", text) for name, text in _RULES.items()]


class ScriptedTeacher:
    """``teacher(messages, **kw) -> str`` for ``icml25.llm.CallableChat``: the guideline-following
    trace for the user's request, with an ``error_rate`` chance of a mistake (seeded by the
    request's ``seed`` so candidates differ and reruns repeat)."""

    def __init__(self, world: Any, error_rate: float = 0.1) -> None:
        if not 0 <= error_rate <= 1:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate!r}")
        self.world, self.error_rate = world, float(error_rate)

    def __call__(self, messages: list[dict[str, str]], **kw: Any) -> str:
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        query = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        rules = frozenset(name for name in _RULES if f"G-{name}" in system)
        rng = random.Random(f"{kw.get('seed')}:{kw.get('sample_index', 0)}:{query}")
        w = self.world
        plain = w.normalise(query, rules & {"decode", "indirection", "framing", "persuasion"})
        harmful = w.is_harmful_text(plain) if "harm" in rules else False
        if rng.random() < self.error_rate:
            if rng.random() < 0.5:
                harmful = not harmful
            else:
                words = plain.split()
                if words:
                    words[-1] = rng.choice(w.fillers)
                plain = " ".join(words)
        answer = (
            "sorry cannot"
            if harmful
            else f"sure do {plain.split()[1] if len(plain.split()) > 1 else ''}".strip()
        )
        reasoning = w.trace(query, plain=plain, harmful=harmful)
        return TOY_FORMAT.format_target(reasoning, answer)


def restatement_judge(world: Any):
    """The toy's guideline judge for ``GuidelineFilter``: the reasoning's restatement (after
    ``plain:``) must equal the rule-normalised request and its verdict must match it."""

    def judge(query: str, reasoning: str, guidelines: Any) -> bool:
        words = reasoning.split()
        if "plain:" not in words or "verdict" not in words:
            return False
        i, j = words.index("plain:"), words.index("verdict")
        restated = " ".join(words[i + 1 : j])
        verdict = words[j + 1] if j + 1 < len(words) else ""
        truth = world.normalise(query)
        return restated == truth and verdict == ("harm" if world.is_harmful_text(truth) else "ok")

    return judge
