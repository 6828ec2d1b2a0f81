"""Names that left a package's ``__all__`` for one of its submodules (or a shared layer).

A package keeps its users' entry points in ``__all__`` (CONTRIBUTING.md, "Public names"); the
building blocks live in the submodule that defines them. Importing a moved name from the package
still works until 0.3.0, with a ``DeprecationWarning`` that names its new place. CHANGELOG.md lists
every move.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

#: the release whose package namespaces no longer resolve moved names
REMOVED_IN = "0.3.0"


def moved(
    package: str, where: Mapping[str, str], *, lazy: Mapping[str, Callable[[], Any]] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that resolves each moved name from its new module.

    ``where`` maps a name to the module that now holds it: a submodule's name relative to the
    package (``"masks"``) or an absolute module (``"icml25.llm.moderation"``). ``lazy`` maps the
    package's own public names that load on first use (a trainer that imports TRL) to the
    function that loads them; they resolve without a warning.
    """
    table = dict(where)
    loaders = dict(lazy or {})

    def __getattr__(name: str) -> Any:
        if name in loaders:
            return loaders[name]()
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = module if module.startswith("icml25.") else f"{package}.{module}"
        warnings.warn(
            f"{package}.{name} moved to {target}.{name}; import it from {target} "
            f"(the package-level name goes in icml25 {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(target), name)

    __getattr__.moved = table  # type: ignore[attr-defined]  # read by tests and the docs hook
    return __getattr__
