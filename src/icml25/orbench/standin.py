"""Scripted stand-ins for the pipeline's LLM roles on the toy request language (docs/orbench.md,
"Reproduction"): a toxic-seed generator, a rewriter and noisy moderators.

They sit behind :class:`~icml25.llm.CallableChat`, read the *rendered* default templates of
:class:`~icml25.orbench.PromptTemplates` and answer in the real formats (``[[prompt]]`` items,
``[[1. rewrite]]`` lines, ``[[k. category]]`` choices), so parsing, dedupe, retries and stores
run end to end. Each reply is drawn from a generator seeded by a hash of (messages, seed,
sample index): the same request gets the same reply at any concurrency.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

from icml25.llm.scripted import CallableChat
from icml25.orbench.categories import CATEGORIES, NONE_OF_THE_ABOVE
from icml25.toy.overrefusal_lang import OverRefusalWorld

__all__ = ["MODERATION_CATEGORY", "scripted_generator", "scripted_moderator", "scripted_rewriter"]

_CATEGORY = re.compile(r'category "([^"]+)"')
_SEED_REQUEST = re.compile(r"Harmful request:\s*(.+?)\s*$", re.S)
_USER_QUESTION = re.compile(r"\[User Question\]\n(.*?)\n\[End of User Question\]", re.S)
_COUNT = re.compile(r"Write (\d+) ")

#: the moderation answer of each category: ``[[k. name]]`` with the prompt's numbering
MODERATION_CATEGORY = {c: f"[[{i}. {c}]]" for i, c in enumerate(CATEGORIES, 1)}


def _rng(messages: list[dict[str, Any]], seed: int | None, salt: str, index: int) -> random.Random:
    blob = json.dumps([messages, seed, salt, index], sort_keys=True, ensure_ascii=True)
    return random.Random(int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "big"))


def _user_text(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1]["content"])


def scripted_generator(
    world: OverRefusalWorld, *, name: str = "scripted-generator"
) -> CallableChat:
    """Algorithm 1's generator G: ``n`` toxic requests of the asked category per call, one
    ``[[request]]`` per line (repeats happen, as with a real model)."""

    def respond(messages, *, seed=None, sample_index=0, **_: Any) -> str:
        text = _user_text(messages)
        m = _CATEGORY.search(text)
        if m is None or m.group(1) not in world.topics:
            return "I can only write requests for a known category."
        count = _COUNT.search(text)
        n = int(count.group(1)) if count else 20
        rng = _rng(messages, seed, "G", sample_index)
        lines = [f"[[{world.toxic(m.group(1), rng)}]]" for _ in range(n)]
        return "Here are the requests:\n" + "\n".join(lines)

    return CallableChat(respond, name=name, concurrency=16)


def scripted_rewriter(
    world: OverRefusalWorld,
    *,
    p_failed: float = 0.2,
    p_benign_verb: float = 0.4,
    name: str = "scripted-rewriter",
) -> CallableChat:
    """Algorithm 2's rewriter R: ``n`` rewrites per seed that keep its topic; each is a failed
    rewrite (still toxic: another harmful verb) with probability ``p_failed``, else a benign verb
    (``p_benign_verb``) or a mitigating word (the rest)."""

    def respond(messages, *, seed=None, sample_index=0, **_: Any) -> str:
        text = _user_text(messages)
        m = _SEED_REQUEST.search(text)
        parsed = world.parse(m.group(1)) if m else None
        if parsed is None:
            return "I could not read the request."
        count = _COUNT.search(text.replace("Rewrite it into", "Write"))
        n = int(count.group(1)) if count else 5
        _, topic, _ = parsed
        rng = _rng(messages, seed, "R", sample_index)
        out = []
        for i in range(1, n + 1):
            u = rng.random()
            if u < p_failed:
                words = (rng.choice(world.harmful_verbs), topic, rng.choice(world.fillers))
            elif u < p_failed + p_benign_verb:
                words = (rng.choice(world.benign_verbs), topic, rng.choice(world.fillers))
            else:
                words = (rng.choice(world.harmful_verbs), topic, rng.choice(world.mitigating))
            out.append(f"[[{i}. {' '.join(words)}]]")
        return "Rewritten requests:\n" + "\n".join(out)

    return CallableChat(respond, name=name, concurrency=16)


def scripted_moderator(
    world: OverRefusalWorld,
    index: int,
    *,
    blind_fraction: float = 0.15,
    name: str | None = None,
) -> CallableChat:
    """Algorithm 3's moderator M_index: the ground truth, except on its own random "blind spot"
    (a ``blind_fraction`` of all (verb, noun) pairs, drawn from the world's seed and ``index``)
    where it answers the opposite."""
    rng = random.Random(f"moderator-{world.seed}-{index}")
    pairs = [(v, n) for v in world.verbs for n in world.nouns]
    blind = set(rng.sample(pairs, round(blind_fraction * len(pairs))))

    def respond(messages, **_: Any) -> str:
        m = _USER_QUESTION.search(_user_text(messages))
        prompt = m.group(1).strip() if m else ""
        parsed = world.parse(prompt)
        toxic = world.is_toxic(prompt)
        if parsed is not None and (parsed[0], parsed[1]) in blind:
            toxic = not toxic
        if not toxic:
            return f"The request seeks no harm. [[{len(CATEGORIES) + 1}. {NONE_OF_THE_ABOVE}]]"
        category = world.category_of(prompt) or "harmful"
        return f"The request asks for harm. {MODERATION_CATEGORY[category]}"

    return CallableChat(respond, name=name or f"scripted-moderator-{index}", concurrency=16)
