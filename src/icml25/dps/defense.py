"""DPS: defence through partial-perception supervision (arXiv:2412.12722, §4; the official
``weak2strong.py``).

1. The strong agent (the protected model, whole image) answers the question.
2. ``K`` weak agents (the same model, each in a fresh conversation, each seeing one partial view)
   answer the question and then describe their view.
3. The helper shortens long weak answers and descriptions (more than ``weak_word_limit_trigger``
   words, counted with ``split(" ")`` as the official code does) and checks each weak answer;
   an uninformative one ("cannot determine ...") is replaced by the view's description.
4. The strong agent, in its own conversation, re-analyses its answer given the observations (text
   only), the helper summarises that analysis, and the strong agent gives the final answer with
   the image attached again (``image_once=True``: text only, the image being in the history).

Calls per query: strong 3, weak 2K, helper at most 3K + 1, plus one model call for the ``auto``
mode's text-box request. Every call goes through an ``icml25.llm`` chat backend (OpenAI-compatible
server or a local model); a failing call raises :class:`BackendError` with the trace so far,
unless ``on_error="refusal"`` (the official code's silent canned refusal, for exact replication).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from icml25._validate import as_bool, as_int, as_real
from icml25.dps.crops import auto_mask, center_crop, parse_boxes, random_crop
from icml25.dps.helper import Helper, RuleHelper
from icml25.dps.images import IMAGE_FORMATS, JPEG_QUALITY, image_part, to_pil
from icml25.dps.prompts import DPSPrompts

__all__ = ["REFUSAL", "BackendError", "Conversation", "DPSDefense", "DPSResult"]

#: the canned reply of ``on_error="refusal"`` (our wording)
REFUSAL = "I'm sorry, but I can't help with that request."


def _check_seed(seed: object) -> int | None:
    """``None`` (fresh randomness) or an integer >= 0, as Python's ``int``."""
    return None if seed is None else as_int("seed", seed, 0)


class BackendError(RuntimeError):
    """A model call failed; ``trace`` holds the calls made so far in this query."""

    def __init__(self, message: str, trace: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.trace = trace


class Conversation:
    """One agent's conversation: a system prompt, then user turns (text, optionally an image) and
    the replies, all kept and sent with every call (the official agents' memory)."""

    def __init__(
        self,
        backend: Any,
        system_prompt: str,
        *,
        role: str = "agent",
        max_tokens: int = 2000,
        temperature: float = 0.0,
        trace: list[dict[str, Any]] | None = None,
        on_error: str = "raise",
        image_kw: dict[str, Any] | None = None,
    ) -> None:
        if not hasattr(backend, "chat"):
            raise TypeError(
                f"backend must be an icml25.llm chat backend, got {type(backend).__name__}"
            )
        self.backend, self.system_prompt, self.role = backend, system_prompt, role
        self.max_tokens, self.temperature, self.on_error = max_tokens, float(temperature), on_error
        self.trace = trace if trace is not None else []
        self.image_kw = image_kw or {}
        self.history: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]

    def reset(self) -> None:
        self.history = [{"role": "system", "content": self.system_prompt}]

    def ask(self, text: str, image: Any = None, *, template: str = "") -> str:
        content: Any = (
            text
            if image is None
            else [{"type": "text", "text": text}, image_part(image, **self.image_kw)]
        )
        self.history.append({"role": "user", "content": content})
        self.trace.append(
            {
                "role": self.role,
                "template": template,
                "has_image": image is not None,
                "prompt": text,
            }
        )
        try:
            reply = str(
                self.backend.chat(
                    self.history, n=1, temperature=self.temperature, max_tokens=self.max_tokens
                )[0]
            )
        except Exception as exc:  # noqa: BLE001 - recorded, then raised with the trace
            self.trace[-1]["error"] = f"{type(exc).__name__}: {exc}"
            if self.on_error == "refusal":
                reply = REFUSAL
            else:
                raise BackendError(
                    f"{self.role} call ({template or 'chat'}) failed: {exc}", self.trace
                ) from exc
        self.trace[-1]["reply"] = reply
        self.history.append({"role": "assistant", "content": reply})
        return reply


@dataclass
class DPSResult:
    """A DPS answer with its trace (images are kept in :attr:`crops`, left out of ``to_dict``)."""

    final: str
    initial: str
    weak_answers: list[str]
    weak_descriptions: list[str]
    observations: list[str]
    informative: list[bool]
    analysis: str
    analysis_summary: str
    crops: list[Any] = field(default_factory=list)
    n_calls: dict[str, int] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "crops"}


class DPSDefense:
    """DPS around a vision-language chat model.

    Args:
        lvlm: the protected model (an ``icml25.llm`` chat backend that accepts ``image_url``
            parts, e.g. ``OpenAIChat`` on a vLLM/OpenAI vision model).
        helper: summaries and the informativeness check (default :class:`RuleHelper`; the paper
            uses ``LLMHelper(OpenAIChat(..., "gpt-4o-mini"))``).
        crop: ``"center"`` (half width and height), ``"random"`` (ratio ``U(1/4, 1/2)``) or
            ``"auto"`` (text-box mask, centre, random: forces 3 agents).
        n_agents: weak agents ``K`` (1, the official default).
        prompts: templates (default our wording of the official ones).
        summary_limit: words of each summary (20); weak_word_limit_trigger: summarise weak texts
            longer than this (20).
        seed: random crops' seed (``None``: nondeterministic).
        max_tokens: per call (2000, the official value); temperature: per call (0.0: the official
            code leaves the provider default, which a request cannot express; docs/dps.md).
        on_error: ``"raise"`` (:class:`BackendError`) or ``"refusal"`` (official behaviour).
        max_pixels: images above it are shrunk 10x per side before sending (Gemini's rule).
        image_once: ``False`` (the official code): the weak agent's ``describe`` turn and the
            strong agent's ``final`` turn attach their image again, so those requests carry 2
            images. ``True``: each conversation sends its image once, with its first turn; the
            later turns carry their text only and the model sees the image in the conversation's
            history (the same pixels, as the same data URL), so no request holds more than one
            image, for servers limited to one image per request (vLLM's
            ``--limit-mm-per-prompt``, docs/dps.md "Command line").
        crop_format: how the weak agents' views are encoded: ``"png"`` (lossless, our default) or
            ``"jpeg"`` (the official code writes its crops to JPEG files, a lossy step that itself
            weakens pixel-level noise; docs/dps.md "Deviations"). The whole image is always PNG.
        jpeg_quality: JPEG quality of the views when ``crop_format="jpeg"`` (75, PIL's default;
            docs/dps.md "Decisions").
    """

    CROPS = ("center", "random", "auto")

    def __init__(
        self,
        lvlm: Any,
        helper: Helper | None = None,
        crop: str = "center",
        n_agents: int = 1,
        prompts: DPSPrompts | None = None,
        summary_limit: int = 20,
        weak_word_limit_trigger: int = 20,
        seed: int | None = 0,
        max_tokens: int = 2000,
        temperature: float = 0.0,
        on_error: str = "raise",
        max_pixels: int | None = None,
        image_once: bool = False,
        crop_format: str = "png",
        jpeg_quality: int = JPEG_QUALITY,
    ) -> None:
        if not hasattr(lvlm, "chat"):
            raise TypeError(f"lvlm must be an icml25.llm chat backend, got {type(lvlm).__name__}")
        if crop not in self.CROPS:
            raise ValueError(f"crop must be one of {self.CROPS}, got {crop!r}")
        n_agents = as_int("n_agents", n_agents, 1)
        if crop == "auto" and n_agents != 3:
            if n_agents != 1:
                warnings.warn(
                    f"crop='auto' uses 3 agents (text mask, centre, random); n_agents={n_agents} ignored",
                    stacklevel=2,
                )
            n_agents = 3
        for name, v in (
            ("summary_limit", summary_limit),
            ("weak_word_limit_trigger", weak_word_limit_trigger),
            ("max_tokens", max_tokens),
        ):
            as_int(name, v, 1)
        if on_error not in ("raise", "refusal"):
            raise ValueError(f"on_error must be 'raise' or 'refusal', got {on_error!r}")
        temperature = as_real("temperature", temperature, low=0.0, high=2.0)
        seed = _check_seed(seed)
        if prompts is not None and not isinstance(prompts, DPSPrompts):
            raise TypeError(
                f"prompts must be a DPSPrompts (DPSPrompts.from_json(path) for a file), got {type(prompts).__name__}"
            )
        if helper is not None and not (
            hasattr(helper, "summarize") and hasattr(helper, "is_informative")
        ):
            raise TypeError(
                "helper must have summarize(text, limit, style) and is_informative(text): use "
                f"RuleHelper() (offline) or LLMHelper(backend), got {helper!r:.60}"
            )
        if max_pixels is not None:
            max_pixels = as_int("max_pixels", max_pixels, 1)
        image_once = as_bool("image_once", image_once)
        if not isinstance(crop_format, str) or crop_format.lower() not in IMAGE_FORMATS:
            raise ValueError(f"crop_format must be one of {IMAGE_FORMATS}, got {crop_format!r}")
        jpeg_quality = as_int("jpeg_quality", jpeg_quality, 1, 95)
        self.lvlm, self.helper = lvlm, helper or RuleHelper(limit=int(summary_limit))
        self.crop, self.n_agents, self.prompts = crop, int(n_agents), prompts or DPSPrompts()
        self.summary_limit, self.trigger = int(summary_limit), int(weak_word_limit_trigger)
        self.seed, self.max_tokens, self.temperature = seed, int(max_tokens), float(temperature)
        self.on_error = on_error
        self.image_kw = {"max_pixels": int(max_pixels)} if max_pixels is not None else {}
        self.image_once, self.crop_format = image_once, crop_format.lower()
        self.jpeg_quality = int(jpeg_quality)
        self.crop_kw = dict(self.image_kw)
        if self.crop_format == "jpeg":
            self.crop_kw.update(format="jpeg", quality=self.jpeg_quality)
        self._calls = 0

    # -- the views -----------------------------------------------------------------------------
    def views(self, image: Any, rng: np.random.Generator, trace: list[dict[str, Any]]) -> list[Any]:
        """The ``K`` partial views of ``image`` (the ``auto`` mode asks the model for text boxes)."""
        img = to_pil(image)
        if self.crop == "center":
            return [center_crop(img) for _ in range(self.n_agents)]
        if self.crop == "random":
            return [random_crop(img, rng) for _ in range(self.n_agents)]
        conv = self._conversation(self.prompts.plain_system, "lvlm", trace)
        reply = conv.ask(
            self.prompts.render("auto_mask_request", W=img.width, H=img.height),
            img,
            template="auto_mask_request",
        )
        return [
            auto_mask(img, parse_boxes(reply, img.width, img.height)),
            center_crop(img),
            random_crop(img, rng),
        ]

    def _conversation(
        self,
        system: str,
        role: str,
        trace: list[dict[str, Any]],
        image_kw: dict[str, Any] | None = None,
    ) -> Conversation:
        return Conversation(
            self.lvlm,
            system,
            role=role,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            trace=trace,
            on_error=self.on_error,
            image_kw=self.image_kw if image_kw is None else image_kw,
        )

    def _help(self, trace: list[dict[str, Any]], what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        trace.append({"role": "helper", "template": what, "has_image": False})
        try:
            out = fn(*args, **kw)
            trace[-1]["reply"] = out
            return out
        except Exception as exc:  # noqa: BLE001
            trace[-1]["error"] = f"{type(exc).__name__}: {exc}"
            if self.on_error == "refusal":
                # as the official code: the failed helper "answers" the canned refusal, so a
                # summary is the refusal text and the yes/no check reads no "yes"
                return REFUSAL if what.startswith("summarize") else False
            raise BackendError(f"helper call ({what}) failed: {exc}", trace) from exc

    # -- one query ---------------------------------------------------------------------------------
    def respond(self, image: Any, question: str, *, seed: int | None = None) -> DPSResult:
        """The defended answer to ``question`` about ``image``, with its trace."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string, got {question!r:.60}")
        img = to_pil(image)
        rng = np.random.default_rng(self.seed if seed is None else _check_seed(seed))
        trace: list[dict[str, Any]] = []
        strong = self._conversation(self.prompts.strong_system, "strong", trace)
        initial = strong.ask(question, img, template="question")
        crops = self.views(img, rng, trace)
        answers, descriptions = [], []
        for view in crops:
            # a fresh conversation each; its views in crop_format (JPEG: as the official crops)
            weak = self._conversation(self.prompts.weak_system, "weak", trace, self.crop_kw)
            answers.append(weak.ask(question, view, template="question"))
            again = None if self.image_once else view  # image_once: the view is in the history
            descriptions.append(weak.ask(self.prompts.describe, again, template="describe"))
        observations, informative = [], []
        for a, d in zip(answers, descriptions):
            a_s = (
                self._help(
                    trace,
                    "summarize_answer",
                    self.helper.summarize,
                    a,
                    self.summary_limit,
                    style="answer",
                )
                if len(a.split(" ")) > self.trigger
                else a
            )
            d_s = (
                self._help(
                    trace,
                    "summarize_plain",
                    self.helper.summarize,
                    d,
                    self.summary_limit,
                    style="plain",
                )
                if len(d.split(" ")) > self.trigger
                else d
            )
            ok = bool(self._help(trace, "check_informative", self.helper.is_informative, a))
            informative.append(ok)
            observations.append(a_s if ok else d_s)
        if len(observations) == 1:
            message = self.prompts.render("supervise_single", obs=observations[0])
            name = "supervise_single"
        else:
            joined = ", ".join(f"agent {k + 1}: {o}" for k, o in enumerate(observations))
            message = self.prompts.render("supervise_multi", observations=joined)
            name = "supervise_multi"
        analysis = strong.ask(message, template=name)
        summary = self._help(
            trace,
            "summarize_plain",
            self.helper.summarize,
            analysis,
            self.summary_limit,
            style="plain",
        )
        final = strong.ask(
            self.prompts.render("final", analysis=summary, question=question),
            None if self.image_once else img,  # image_once: the image is in the history
            template="final",
        )
        n_calls = {
            "lvlm": sum(t["role"] != "helper" for t in trace),
            "helper": sum(t["role"] == "helper" for t in trace),
        }
        return DPSResult(
            final,
            initial,
            answers,
            descriptions,
            observations,
            informative,
            analysis,
            summary,
            crops,
            n_calls,
            trace,
        )

    def respond_batch(
        self, items: Iterable[tuple[Any, str]], workers: int = 1, errors: str = "raise"
    ) -> list[DPSResult | Exception]:
        """:meth:`respond` for every ``(image, question)``, ``workers`` at a time (each query has
        its own conversations), in input order. Query ``i`` uses seed ``seed + i``.
        Questions are checked before any call. A query fails with :class:`BackendError` (a failed
        call) or ``ValueError``, ``TypeError`` or ``OSError`` (an image that cannot be read).

        ``errors="return"``: a failed query's exception takes its place in the list and the others
        go on. ``errors="raise"``: after the first failure no new query starts; the queries in
        flight finish, and then the failure of the lowest index is raised (a ``BackendError`` as
        it is, an image error as its own type naming ``items[i]``). Nothing finished is lost: the
        raised exception carries ``results`` (the list in input order: a :class:`DPSResult` for
        each finished query, the exception for each failed one, ``None`` for a query never
        started) and ``failures`` (``{index: exception}`` of every failed query)."""
        if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
            raise TypeError(
                f"items must be an iterable of (image, question) pairs, got {type(items).__name__}"
            )
        items = list(items)
        for k, it in enumerate(items):  # every item checked before any model call
            if not (isinstance(it, (tuple, list)) and len(it) == 2 and isinstance(it[1], str)):
                raise TypeError(f"items[{k}] must be an (image, question) pair, got {it!r:.60}")
            if not it[1].strip():
                raise ValueError(
                    f"items[{k}]: the question must be a non-empty string, got {it[1]!r}"
                )
            if it[0] is None:
                raise ValueError(f"items[{k}]: the image is None")
        workers = as_int("workers", workers, 1)
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
        base = 0 if self.seed is None else int(self.seed)
        stop = threading.Event()  # errors="raise": no new query once one has failed

        def one(i: int) -> DPSResult | Exception | None:
            if stop.is_set():
                return None
            img, q = items[i]
            try:
                return self.respond(img, q, seed=None if self.seed is None else base + i)
            except (BackendError, ValueError, TypeError, OSError) as exc:
                # a failed call, or an image that cannot be read (a missing file, a bad array)
                if errors == "raise":
                    stop.set()
                return exc

        if workers <= 1:
            results = [one(i) for i in range(len(items))]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=int(workers)) as pool:
                results = list(pool.map(one, range(len(items))))
        if errors == "return":
            return results  # type: ignore[return-value]
        failures = {i: r for i, r in enumerate(results) if isinstance(r, Exception)}
        if not failures:
            return results  # type: ignore[return-value]
        i, exc = min(failures.items())
        if not isinstance(exc, BackendError):
            try:
                wrapped = type(exc)(f"items[{i}]: {exc}")
            except Exception:  # noqa: BLE001 - an exception type with another signature
                wrapped = ValueError(f"items[{i}]: {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            exc = wrapped
        exc.results, exc.failures = results, failures  # type: ignore[attr-defined]
        raise exc
