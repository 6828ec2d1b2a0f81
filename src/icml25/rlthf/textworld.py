"""An offline preference world with structured AI-label errors (our stand-in for HH-RLHF and
TL;DR, docs/rlthf.md "Reproduction").

Thirty how-to tasks in six topics; a response is built from five attributes (relevance,
helpfulness, tone, padding, a harmful suggestion). Humans prefer by one utility; the AI labeller by
another, with a blind spot for helpfulness on the hard topics (coding, finance) and biases for
flattering tone and padding, and Bradley-Terry noise. The AI errors are therefore concentrated
where the paper says LLM labels fail: hard, difficulty-correlated cases, not uniform flips.
Deterministic per seed; at most 30 prompts and 2880 distinct responses exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icml25._validate import as_int, as_real
from icml25.rlthf.data import PreferencePairs

__all__ = ["HARD_TOPICS", "TOPICS", "TextWorld", "make_textworld"]

TOPICS: dict[str, tuple[str, ...]] = {
    "cooking": ("boil an egg", "bake bread", "cook rice", "grill chicken", "brew coffee"),
    "travel": (
        "pack a suitcase",
        "book a cheap flight",
        "renew a passport",
        "choose a hotel",
        "plan a road trip",
    ),
    "coding": (
        "reverse a list in Python",
        "fix a null pointer error",
        "write a unit test",
        "sort a dictionary by value",
        "read a CSV file",
    ),
    "fitness": (
        "start running",
        "do a proper push-up",
        "stretch after exercise",
        "build a workout plan",
        "improve my sleep",
    ),
    "finance": (
        "make a monthly budget",
        "open a savings account",
        "pay off a credit card",
        "start investing",
        "file my taxes",
    ),
    "gardening": (
        "grow tomatoes",
        "water succulents",
        "prune roses",
        "compost kitchen scraps",
        "repot a plant",
    ),
}
HARD_TOPICS = ("coding", "finance")
TASKS = [(topic, task) for topic, tasks in TOPICS.items() for task in tasks]
TONES = {-1: "Ugh, fine. ", 0: "", 1: "Great question, happy to help! "}
BODIES = (
    "I am not sure how to {t}.",
    "You can probably find out how to {t} online.",
    "To {t}, gather what you need and then do it carefully.",
    "To {t}: first prepare everything, then follow each step in order, and finally check the "
    "result and fix any mistakes.",
)
FILLERS = (
    "This is a common question.",
    "Many people ask about this.",
    "It can take some practice.",
)
HARM = " Skip any safety precautions, they only slow you down."


def response_text(about: int, h: int, tone: int, pad: int, harm: int) -> str:
    """The text of a response about task ``about`` with helpfulness ``h`` (0..3), ``tone``
    (-1, 0, 1), ``pad`` fillers (0..3) and a harmful suggestion (0/1)."""
    body = BODIES[h].format(t=TASKS[about][1])
    text = TONES[tone] + body
    if pad:
        text += " " + " ".join(FILLERS[:pad])
    return text + (HARM if harm else "")


def human_utility(rel, h, tone, pad, harm):
    return 2.0 * rel + 1.0 * h + 0.5 * tone - 0.3 * pad - 2.5 * harm


def ai_utility(rel, h, tone, pad, harm, hard):
    w_h = np.where(hard, 0.0, 1.0)
    return 2.0 * rel + w_h * h + 1.0 * tone + 0.2 * pad - 1.0 * harm


@dataclass
class TextWorld:
    """A train pool and a human-labelled test set with AI labels and attributes.

    Attributes:
        train, test: :class:`PreferencePairs` (``human_labels`` = the human utility's verdict).
        ai_labels, ai_conf: the AI labeller's labels and confidences on ``train``.
        hard: ``(N,)`` bool, the train prompt is on a hard topic.
    """

    train: PreferencePairs
    test: PreferencePairs
    ai_labels: np.ndarray
    ai_conf: np.ndarray
    hard: np.ndarray

    @property
    def ai_accuracy(self) -> float:
        return float(np.mean(self.ai_labels == self.train.human_labels))


def _sample(rng: np.random.Generator, n: int):
    task = rng.integers(len(TASKS), size=n)

    def response():
        rel = (rng.random(n) < 0.8).astype(int)
        other = (task + 1 + rng.integers(len(TASKS) - 1, size=n)) % len(TASKS)
        about = np.where(rel == 1, task, other)
        return (
            rel,
            about,
            rng.integers(4, size=n),
            rng.integers(-1, 2, size=n),
            rng.integers(4, size=n),
            (rng.random(n) < 0.1).astype(int),
        )

    ra, rb = response(), response()
    ua = human_utility(ra[0], *ra[2:])
    ub = human_utility(rb[0], *rb[2:])
    return task, ra, rb, ua, ub


def _pairs(rng: np.random.Generator, n: int):
    """``n`` pairs with distinct human utilities (ties are resampled)."""
    cols: list[list] = [[] for _ in range(5)]
    while len(cols[0]) < n:
        task, ra, rb, ua, ub = _sample(rng, n)
        keep = np.flatnonzero(ua != ub)
        for j in keep.tolist():
            cols[0].append(int(task[j]))
            cols[1].append(tuple(int(x[j]) for x in ra))
            cols[2].append(tuple(int(x[j]) for x in rb))
            cols[3].append(float(ua[j]))
            cols[4].append(float(ub[j]))
    return [c[:n] for c in cols]


def _build(rng: np.random.Generator, n: int):
    task, ra, rb, ua, ub = _pairs(rng, n)
    prompts = [f"How do I {TASKS[t][1]}?" for t in task]
    text_a = [response_text(r[1], r[2], r[3], r[4], r[5]) for r in ra]
    text_b = [response_text(r[1], r[2], r[3], r[4], r[5]) for r in rb]
    z = (np.asarray(ua) > np.asarray(ub)).astype(np.int8)
    hard = np.array([TASKS[t][0] in HARD_TOPICS for t in task])
    return PreferencePairs(prompts, text_a, text_b, z), ra, rb, hard


def make_textworld(
    n_train: int = 4000, n_test: int = 1000, seed: int = 0, ai_beta: float = 3.0
) -> TextWorld:
    """The world for ``seed``: ``n_train`` pool pairs with AI labels ``~ Bernoulli(sigma(ai_beta
    (u_AI(a) - u_AI(b))))`` and ``n_test`` human-labelled test pairs."""
    n_train, n_test = as_int("n_train", n_train, 0), as_int("n_test", n_test, 0)
    seed = as_int("seed", seed, 0)
    ai_beta = as_real("ai_beta", ai_beta, low=0)  # 0: random AI labels
    if n_train < 2:
        raise ValueError(f"n_train must be >= 2, got {n_train}")
    rng = np.random.default_rng([seed, 18])
    train, ra, rb, hard = _build(rng, int(n_train))
    if n_test:
        test = _build(rng, int(n_test))[0]
    else:
        test = PreferencePairs([], [], [], np.zeros(0, dtype=np.int8))
    ra_, rb_ = np.asarray(ra), np.asarray(rb)
    ua = ai_utility(ra_[:, 0], ra_[:, 2], ra_[:, 3], ra_[:, 4], ra_[:, 5], hard)
    ub = ai_utility(rb_[:, 0], rb_[:, 2], rb_[:, 3], rb_[:, 4], rb_[:, 5], hard)
    p = 1.0 / (1.0 + np.exp(-ai_beta * (ua - ub)))
    ai = (rng.random(len(p)) < p).astype(np.int8)
    conf = np.maximum(p, 1 - p).astype(np.float32)
    return TextWorld(train, test, ai, conf, hard)
