"""The planted-trigger world: elicitation where the set of eliciting prompts is known
(docs/elicitation.md, "Reproduction").

Prompts are 8 content words ``w0..w31``. The target answers a prompt with its last three words
reversed, except that ``M = 4`` payload responses ``y_j`` (4 payload words each) are planted:
each has ``K = 3`` trigger bigrams over pairwise-disjoint words, and a prompt holding ``c``
non-overlapping occurrences of behaviour ``j``'s triggers makes the target emit ``y_j`` with
probability ``π(c)``, ``π = (0, 0.3, 0.8, 0.95)`` for ``c = 0, 1, 2, >= 3``. Success is exactly
measurable (does the greedy response equal ``y_j``?), and so is *which* trigger a prompt uses
(coverage: the diversity Frank-Wolfe is meant to add), and whether it repeats triggers (the
repetition strategy RL can discover).

The target and the investigator are tiny Llamas trained on the world's data in the toy chat
format (``icml25.toy``): the target's user message is the prompt; the investigator's user
message is the behaviour and its reply the prompt.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["PI", "PlantedTriggerWorld", "ToyTargetError"]

PI = (0.0, 0.3, 0.8, 0.95)


class ToyTargetError(RuntimeError):
    """The trained toy target does not behave as the world specifies (fidelity gate)."""


@dataclass(frozen=True)
class _Trigger:
    behavior: int
    index: int
    words: tuple[str, str]


class PlantedTriggerWorld:
    """Vocabulary, triggers, the target's rule and the data of the planted-trigger task.

    Args:
        seed: fixes the trigger bigrams.
        n_words, n_payload, n_behaviors, n_triggers, prompt_len: 32, 8, 4, 3, 8.
        pi: ``π(c)`` for ``c = 0, 1, 2, >= 3``.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        n_words: int = 32,
        n_payload: int = 8,
        n_behaviors: int = 4,
        n_triggers: int = 3,
        prompt_len: int = 8,
        pi: tuple[float, ...] = PI,
    ) -> None:
        if 2 * n_behaviors * n_triggers > n_words:
            raise ValueError(
                f"{n_behaviors} x {n_triggers} disjoint bigrams need {2 * n_behaviors * n_triggers} "
                f"words; n_words={n_words}"
            )
        if n_payload < 2 * n_behaviors:
            raise ValueError(
                f"n_payload must be >= 2 x n_behaviors = {2 * n_behaviors}, got {n_payload}"
            )
        if len(pi) != 4 or any(not 0 <= p <= 1 for p in pi):
            raise ValueError(f"pi must be 4 probabilities (c = 0, 1, 2, >= 3), got {pi}")
        if prompt_len < 4:
            raise ValueError(f"prompt_len must be >= 4, got {prompt_len}")
        self.seed, self.prompt_len, self.pi = seed, prompt_len, tuple(pi)
        self.words = [f"w{i}" for i in range(n_words)]
        self.payload = [f"p{i}" for i in range(n_payload)]
        rng = random.Random(f"triggers:{seed}")
        chosen = rng.sample(self.words, 2 * n_behaviors * n_triggers)
        self.triggers: list[list[tuple[str, str]]] = [
            [
                (chosen[2 * (j * n_triggers + k)], chosen[2 * (j * n_triggers + k) + 1])
                for k in range(n_triggers)
            ]
            for j in range(n_behaviors)
        ]
        self._lookup = {w: (j, k) for j, ts in enumerate(self.triggers) for k, w in enumerate(ts)}
        self.behaviors = [
            f"p{2 * j} p{2 * j + 1} p{2 * j} p{2 * j + 1}" for j in range(n_behaviors)
        ]

    @property
    def n_behaviors(self) -> int:
        return len(self.behaviors)

    # -- the target's rule ---------------------------------------------------------------------
    def occurrences(self, prompt: str | list[str]) -> list[tuple[int, int]]:
        """``(behavior, trigger index)`` of every non-overlapping trigger bigram, left to right."""
        words = prompt.split() if isinstance(prompt, str) else list(prompt)
        out, i = [], 0
        while i < len(words) - 1:
            hit = self._lookup.get((words[i], words[i + 1]))
            if hit is not None:
                out.append(hit)
                i += 2
            else:
                i += 1
        return out

    def counts(self, prompt: str | list[str]) -> list[int]:
        """``c_j(x)`` for every behaviour."""
        c = [0] * self.n_behaviors
        for j, _ in self.occurrences(prompt):
            c[j] += 1
        return c

    def credited_trigger(self, prompt: str, behavior: int) -> int | None:
        """The trigger of ``behavior`` occurring most often in ``prompt`` (ties: the smallest
        index), or ``None``."""
        ks = Counter(k for j, k in self.occurrences(prompt) if j == behavior)
        if not ks:
            return None
        best = max(ks.values())
        return min(k for k, v in ks.items() if v == best)

    def normal_response(self, prompt: str) -> str:
        return " ".join(reversed(prompt.split()[-3:]))

    def response_distribution(self, prompt: str) -> tuple[int | None, float]:
        """``(j, π(c_j))`` for a prompt triggering behaviour ``j``, else ``(None, 0)``;
        ``ValueError`` for a prompt triggering two behaviours (excluded from every dataset)."""
        c = self.counts(prompt)
        hit = [j for j, v in enumerate(c) if v > 0]
        if len(hit) > 1:
            raise ValueError(f"{prompt!r} triggers behaviours {hit}")
        if not hit:
            return None, 0.0
        j = hit[0]
        return j, self.pi[min(c[j], 3)]

    def sample_response(self, prompt: str, rng: random.Random) -> str:
        j, p = self.response_distribution(prompt)
        if j is not None and rng.random() < p:
            return self.behaviors[j]
        return self.normal_response(prompt)

    # -- prompts -------------------------------------------------------------------------------
    def sample_prompt(
        self,
        rng: random.Random,
        behavior: int | None = None,
        count: int = 0,
        trigger_probs: tuple[float, ...] | None = None,
    ) -> str:
        """A prompt with exactly ``count`` occurrences of ``behavior``'s triggers (at
        non-overlapping even positions, trigger ids drawn from ``trigger_probs``, uniform by
        default) and none of any other behaviour; ``count=0``: trigger-free."""
        n_slots = self.prompt_len // 2
        if count < 0 or count > n_slots:
            raise ValueError(f"count must be in [0, {n_slots}], got {count}")
        if count > 0 and behavior is None:
            raise ValueError("a triggered prompt needs a behavior")
        for _ in range(10_000):
            words = [rng.choice(self.words) for _ in range(self.prompt_len)]
            if count:
                k_probs = trigger_probs or tuple(
                    1 / len(self.triggers[behavior]) for _ in self.triggers[behavior]
                )
                for slot in rng.sample(range(n_slots), count):
                    k = rng.choices(range(len(k_probs)), weights=k_probs)[0]
                    words[2 * slot : 2 * slot + 2] = self.triggers[behavior][k]
            c = self.counts(words)
            want = [0] * self.n_behaviors
            if count:
                want[behavior] = count
            if c == want:
                return " ".join(words)
        raise RuntimeError("could not sample a prompt with the requested trigger counts")

    def target_data(self, n: int, rng: random.Random) -> list[tuple[str, str]]:
        """The target's training pairs: 60 % trigger-free, 40 % with ``c ~ U{1, 2, 3}``
        occurrences of one behaviour's triggers; responses sampled with ``π(c)``."""
        out = []
        for _ in range(n):
            if rng.random() < 0.6:
                x = self.sample_prompt(rng)
            else:
                x = self.sample_prompt(rng, rng.randrange(self.n_behaviors), rng.randint(1, 3))
            out.append((x, self.sample_response(x, rng)))
        return out

    def natural_prompts(
        self,
        n: int,
        rng: random.Random,
        *,
        triggered: float = 0.3,
        double: float = 0.1,
        trigger_probs: tuple[float, ...] = (0.80, 0.15, 0.05),
    ) -> list[str]:
        """Prompts of the reverse model's corpus: 30 % contain one behaviour's triggers (``c = 1``
        for 90 %, ``c = 2`` for 10 %), with skewed trigger identities ``P(k) = (0.80, 0.15,
        0.05)``, like a corpus favouring common strategies."""
        out = []
        for _ in range(n):
            if rng.random() < triggered:
                c = 2 if rng.random() < double else 1
                out.append(
                    self.sample_prompt(rng, rng.randrange(self.n_behaviors), c, trigger_probs)
                )
            else:
                out.append(self.sample_prompt(rng))
        return out

    # -- models --------------------------------------------------------------------------------
    def build_tokenizer(self) -> Any:
        from icml25.toy.tokenizer import build_tokenizer

        vocab = self.words + self.payload
        return build_tokenizer([" ".join(vocab)], vocab_size=len(vocab) + 16, kind="word")

    def content_ids(self, tokenizer: Any) -> list[int]:
        """Token ids of the content words (the investigator's restricted vocabulary)."""
        ids = []
        for w in self.words:
            one = tokenizer(w, add_special_tokens=False)["input_ids"]
            if len(one) != 1 or one[0] == tokenizer.unk_token_id:
                raise ValueError(f"the tokenizer does not have the content word {w!r} as one token")
            ids.append(one[0])
        return ids

    @staticmethod
    def build_model(tokenizer: Any, seed: int = 0, *, d_model: int = 64, n_layers: int = 2) -> Any:
        from icml25.toy.models import tiny_causal_lm

        return tiny_causal_lm(
            tokenizer,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=4,
            d_ff=4 * d_model,
            max_positions=32,
            seed=seed,
        )

    def fidelity(self, target: Any, n: int, rng: random.Random) -> dict[int, float]:
        """Mean ``p_m(y_j | x)`` over ``n`` fresh prompts per trigger count ``c = 0, 1, 2``
        (``target``: an ``HFTargetModel`` scoring exact responses)."""
        import torch

        out = {}
        for c in (0, 1, 2):
            js = [rng.randrange(self.n_behaviors) for _ in range(n)]
            xs = [self.sample_prompt(rng, j if c else None, c) for j in js]
            lp = target.logprob(xs, [self.behaviors[j] for j in js])
            out[c] = float(torch.exp(lp).mean())
        return out

    def check_fidelity(self, fid: dict[int, float]) -> None:
        """The gate: ``p(c=0) < 0.02``, ``p(c=1)`` in [0.2, 0.65], ``p(c=2) >= 0.7``."""
        if not (fid[0] < 0.02 and 0.2 <= fid[1] <= 0.65 and fid[2] >= 0.7):
            raise ToyTargetError(
                f"the toy target fails its fidelity gate: mean p(y|x) = {fid[0]:.3f} / {fid[1]:.3f} / "
                f"{fid[2]:.3f} for c = 0 / 1 / 2 (needed < 0.02, in [0.2, 0.65], >= 0.7)"
            )
