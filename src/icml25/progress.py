"""Progress display shared by every long-running piece of icml25, silenced in one place.

On a terminal, :func:`track` draws a transient rich progress bar on stderr. Without one (nohup, CI,
``| tee``) a bar would be invisible, so the outermost :func:`track` prints one plain line per item
(per seed in a reproduction; every tenth of a long loop) with the elapsed time, and :func:`stage`
prints a line when a named stage starts and ends. ``icml25 repro --quiet`` (or ``ICML25_QUIET=1``
in the environment) silences all of it; a library user can pass ``disable=True`` to a single call.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["is_quiet", "set_quiet", "stage", "track"]

T = TypeVar("T")
_ENV = "ICML25_QUIET"


def is_quiet() -> bool:
    """True when progress output is silenced for this process (``ICML25_QUIET`` set and not 0)."""
    return os.environ.get(_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def set_quiet(quiet: bool = True) -> None:
    """Silence (or re-enable) progress output for this process and the processes it starts."""
    if quiet:
        os.environ[_ENV] = "1"
    else:
        os.environ.pop(_ENV, None)


_depth = 0  # nesting of plain-line tracking: only the outermost loop prints lines


def _line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _plain_track(iterable: Iterable[T], description: str, total: int | None) -> Iterator[T]:
    """One line per item (at most about ten for a long loop) with the elapsed time."""
    global _depth
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    every = 1 if total is None or total <= 20 else max(1, total // 10)
    _depth += 1
    t0 = time.perf_counter()
    try:
        outer = _depth == 1
        for i, item in enumerate(iterable, 1):
            yield item
            if outer and (i % every == 0 or i == total):
                of = f"/{total}" if total is not None else ""
                _line(
                    f"{description or 'progress'}: {i}{of} done, {time.perf_counter() - t0:.0f} s"
                )
    finally:
        _depth -= 1


@contextlib.contextmanager
def stage(description: str, *, disable: bool | None = None) -> Iterator[None]:
    """Announce a named stage of a long run without a terminal: a line when it starts and one with
    its time when it ends (nothing on a terminal, where the progress bars show it, or when
    silenced)."""
    if disable is None:
        disable = is_quiet() or _stderr_is_terminal()
    if disable:
        yield
        return
    _line(f"{description}…")
    t0 = time.perf_counter()
    yield
    _line(f"{description}: done in {time.perf_counter() - t0:.0f} s")


def track(
    iterable: Iterable[T],
    description: str = "",
    *,
    total: int | None = None,
    disable: bool | None = None,
) -> Iterator[T]:
    """Iterate with a rich progress bar on stderr (transient), unless silenced; without a terminal
    the outermost loop prints plain lines instead (module docstring).

    Only one live display may exist at a time in rich; nested calls fall back to plain iteration
    instead of raising.
    """
    if disable or (disable is None and is_quiet()):
        yield from iterable
        return
    if not _stderr_is_terminal():
        yield from _plain_track(iterable, description, total)
        return
    from rich.console import Console
    from rich.errors import LiveError
    from rich.progress import track as rich_track

    first = True
    try:
        gen = rich_track(
            iterable,
            description=description,
            total=total,
            transient=True,
            console=Console(stderr=True),
        )
        for item in gen:
            first = False
            yield item
    except LiveError:
        if not first:
            raise
        yield from iterable


@contextlib.contextmanager
def counter(description: str, total: int | None = None, *, disable: bool | None = None):
    """A progress bar advanced by hand, for loops that live inside another library (an optimiser's
    ``callback``): ``with counter("SLSQP", maxiter) as step: minimize(..., callback=lambda z:
    step())``. Silent under ``ICML25_QUIET`` or without a terminal, like :func:`track`."""
    if disable is None:
        disable = is_quiet() or not _stderr_is_terminal()
    if disable:
        yield lambda *args, **kwargs: None
        return
    from rich.console import Console
    from rich.errors import LiveError
    from rich.progress import Progress

    progress = Progress(transient=True, console=Console(stderr=True))
    try:
        progress.start()
    except LiveError:  # another live display is running: stay silent
        yield lambda *args, **kwargs: None
        return
    try:
        task = progress.add_task(description, total=total)
        yield lambda *args, **kwargs: progress.advance(task)
    finally:
        progress.stop()
