"""Progress display shared by every long-running piece of icml25, silenced in one place.

``icml25 repro --quiet`` (or ``ICML25_QUIET=1`` in the environment) silences all of it; a library
user can pass ``disable=True`` to a single call.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["is_quiet", "set_quiet", "track"]

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


def track(
    iterable: Iterable[T],
    description: str = "",
    *,
    total: int | None = None,
    disable: bool | None = None,
) -> Iterator[T]:
    """Iterate with a rich progress bar on stderr (transient), unless silenced.

    Only one live display may exist at a time in rich; nested calls fall back to plain iteration
    instead of raising.
    """
    if disable is None:
        # silenced, or nobody to show it to (a log file or pipe would only get a blank line)
        disable = is_quiet() or not _stderr_is_terminal()
    if disable:
        yield from iterable
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
