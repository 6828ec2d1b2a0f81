"""Backends without a model: a Python function, or a script of canned replies that records calls.

They exist for unit tests of the pipelines built on :class:`~icml25.llm.base.ChatBackend` and for
rule-based agents that must answer the real prompts in the real format.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from icml25.llm.base import BaseChat, Completion, SamplingParams

__all__ = ["CallableChat", "ScriptedChat"]

Responder = Callable[..., "str | list[str]"]


class CallableChat(BaseChat):
    """Wrap ``fn(messages, *, n, temperature, top_p, max_tokens, seed, stop) -> str | list[str]``.

    A string return is one completion (``fn`` is called ``n`` times, ``sample_index`` telling
    which); a list return must hold exactly ``n`` strings.
    """

    def __init__(self, fn: Responder, *, name: str = "callable", concurrency: int = 1) -> None:
        if not callable(fn):
            raise TypeError(f"CallableChat needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name
        self.concurrency = concurrency
        self._accepts_index = _takes_index(fn)

    def _respond(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[str]:
        kwargs = params.as_dict()

        def call(i: int) -> Any:
            extra = {"sample_index": i} if self._accepts_index else {}
            return self.fn(messages, **kwargs, **extra)

        out = call(0)
        if not isinstance(out, (str, list, tuple)):
            raise TypeError(
                f"responder of {self.name!r} must return a string (or a list of n strings), "
                f"got {type(out).__name__}: {out!r:.80}"
            )
        texts = [out, *(call(i) for i in range(1, params.n))] if isinstance(out, str) else list(out)
        if any(not isinstance(t, str) for t in texts):
            raise TypeError(f"responder of {self.name!r} must return strings, got {texts!r:.120}")
        return texts

    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        return [Completion(t, finish_reason="stop") for t in self._respond(messages, params)]


def _takes_index(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return "sample_index" in sig.parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()
    )


class ScriptedChat(CallableChat):
    """Replies from a script and a record of every call (``.calls``: messages and sampling args).

    ``replies`` is either an iterable of strings, consumed in order one completion at a time
    (running out raises ``RuntimeError``), or a responder function as for :class:`CallableChat`.
    """

    def __init__(self, replies: Iterable[str] | Responder, *, name: str = "scripted") -> None:
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        if callable(replies):
            fn = replies
        else:
            queue = list(replies)
            if any(not isinstance(r, str) for r in queue):
                raise TypeError("ScriptedChat replies must be strings")
            self._queue = queue

            def fn(messages: Any, **params: Any) -> list[str]:
                if len(self._queue) < params["n"]:
                    raise RuntimeError(
                        f"ScriptedChat ran out of replies: {params['n']} requested, "
                        f"{len(self._queue)} left"
                    )
                taken, self._queue[: params["n"]] = self._queue[: params["n"]], []
                return taken

        super().__init__(fn, name=name, concurrency=1)

    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        with self._lock:
            self.calls.append({"messages": messages, **params.as_dict()})
            return super()._complete(messages, params)
