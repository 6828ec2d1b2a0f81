"""What made a row: fingerprints of settings, content and functions, and the description of
any object a pipeline was configured with (a backend, a prompt template, a filter, a judge).

``JsonlStore(settings=...)`` (``store.py``) stamps each record with :func:`settings_fingerprint`
and names the fields that differ (:func:`settings_differences`) when a file was made with other
settings; the backends (``base.py``) describe a wrapped Python function by
:func:`wrapped_function_identity`. Only the standard library is imported here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

__all__ = [
    "backend_identity",
    "content_hash",
    "describe",
    "describe_function",
    "function_fingerprint",
    "json_safe",
    "settings_differences",
    "settings_fingerprint",
    "wrapped_function_identity",
]

#: each function's description, made when it is first described in this process: a closure over
#: state that its calls change (a call log, a counter) keeps one identity for its whole life
_DESCRIBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (recursively through dicts,
    lists and tuples; numpy and torch scalars become Python numbers, arrays and tensors lists).
    Anything else is left for ``json.dumps`` to accept or refuse."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return json_safe(value.item())  # numpy / torch scalars
    if callable(getattr(value, "tolist", None)):
        return json_safe(value.tolist())  # numpy arrays, torch tensors
    return value


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    """A 16-hex-digit SHA-256 fingerprint of ``settings`` (keys sorted, non-finite floats as
    ``null``): equal settings, equal fingerprint, whatever the dict's order."""
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a dict, got {type(settings).__name__}")
    text = json.dumps(json_safe(dict(settings)), sort_keys=True, ensure_ascii=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def content_hash(data: bytes | str | os.PathLike) -> str:
    """SHA-256 (hex) of ``data``: bytes as they are, a path's file content (not its name), so a
    file overwritten in place gets a new key."""
    h = hashlib.sha256()
    if isinstance(data, (bytes, bytearray, memoryview)):
        h.update(bytes(data))
    elif isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    else:
        raise TypeError(f"content_hash takes bytes or a file path, got {type(data).__name__}")
    return h.hexdigest()


def backend_identity(chat: Any) -> dict[str, Any]:
    """What identifies a chat backend's answers: its class, its ``name`` (``openai:MODEL@URL``,
    ``hf:PATH``...), and an OpenAI client's ``extra_body``. Sampling settings given per call
    belong in the pipeline's settings beside it."""
    ident: dict[str, Any] = {"class": type(chat).__name__, "name": getattr(chat, "name", None)}
    extra = getattr(chat, "extra_body", None)
    if extra:
        ident["extra_body"] = dict(extra)
    return ident


#: objects being described on this thread (a closure that refers to its own function, a backend
#: whose function refers back to the backend): met again, they are described by their class only
_DESCRIBING = threading.local()


def describe(obj: Any, *, _depth: int = 0) -> Any:
    """A JSON-able description of what ``obj`` contributes to a row, for a store's settings:
    plain values as they are; an object's ``identity_parts()``, ``cache_identity()`` (a local
    model: its name and a fingerprint of its weights) or ``identity()`` when it has one; a chat
    backend's :func:`backend_identity`; a dataclass's fields; dicts and lists item by item; a
    Python function, lambda or method :func:`describe_function` (its code, defaults and closure,
    not only its name); any other object its class and public attributes, described alike. Never
    a ``repr`` (memory addresses would change the fingerprint at every run). An object that two
    runs would use differently but describe alike should define ``identity()``."""
    import dataclasses
    import types

    if obj is None or isinstance(obj, (str, int, float, bool)):
        return json_safe(obj)
    if _depth > 24:  # a structure nested this deep (or referring to itself): its class only
        return {"class": type(obj).__name__}
    if isinstance(obj, types.ModuleType):
        return {"module": obj.__name__}
    active = getattr(_DESCRIBING, "ids", None)
    if active is None:
        active = _DESCRIBING.ids = set()
    if id(obj) in active:
        return {"class": type(obj).__name__, "refers_to_itself": True}
    active.add(id(obj))
    try:
        return _describe(obj, _depth, dataclasses, types)
    finally:
        active.discard(id(obj))


def _describe(obj: Any, _depth: int, dataclasses: Any, types: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): describe(v, _depth=_depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [describe(v, _depth=_depth + 1) for v in obj]
    if isinstance(obj, (set, frozenset)):
        items = [describe(v, _depth=_depth + 1) for v in obj]
        return sorted(items, key=lambda d: json.dumps(d, sort_keys=True, default=str))
    parts = getattr(obj, "identity_parts", None)
    if callable(parts) and not isinstance(obj, type):
        return {"class": type(obj).__name__, **json_safe(parts())}
    for method in ("cache_identity", "identity"):
        fn = getattr(obj, method, None)
        if callable(fn) and not isinstance(obj, type):
            return {"class": type(obj).__name__, method: json_safe(fn())}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {
            f.name: describe(getattr(obj, f.name), _depth=_depth + 1)
            for f in dataclasses.fields(obj)
        }
        return {"class": type(obj).__name__, **fields}
    if hasattr(obj, "name") and hasattr(obj, "chat"):
        return backend_identity(obj)
    import functools

    kinds = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    if isinstance(obj, kinds):
        return describe_function(obj, _depth=_depth)
    if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")):
        return {"callable": f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"}
    # any other object: its class and its public attributes (a filter's thresholds, a judge)
    out: dict[str, Any] = {"class": type(obj).__name__}
    if _depth < 4:
        for k, v in sorted(getattr(obj, "__dict__", {}).items()):
            if not k.startswith("_"):
                out[k] = describe(v, _depth=_depth + 1)
    return out


#: a function's closure or defaults whose description is longer than this many characters are
#: kept as a digest (a captured data set would otherwise fill the settings file)
_LONGEST_SHOWN = 2000


def describe_function(fn: Any, *, _depth: int = 0) -> dict[str, Any]:
    """What a Python function, lambda, method, ``functools.partial`` or callable object computes,
    for a store's settings (a callable object: its class, its ``__call__``'s code and its state
    as :func:`describe` gives it): its qualified name, ``code`` (a digest of its bytecode, constants, nested
    functions' code and the global names it reads), its ``defaults`` and the values of its
    ``closure`` cells (each described by :func:`describe`; an odd value by its class), and for
    a bound method the object it is bound to. Two closures of one factory with other captured
    values differ, an edited function differs, and the same function is described alike in two
    processes (no memory address, no ``id``). The values of the globals it reads are not part of
    it. A function's description is made when it is first described in this process and kept
    for its life, so a closure over state its own calls change (a call log, a counter) keeps one
    identity; a new closure, or one whose code or defaults were replaced, is described anew. A built-in function is described by its name."""
    import functools

    if isinstance(fn, functools.partial):
        return {
            "callable": "functools.partial",
            "func": describe(fn.func, _depth=_depth + 1),
            "args": _bounded(describe(list(fn.args), _depth=_depth + 1)),
            "keywords": _bounded(describe(dict(fn.keywords), _depth=_depth + 1)),
        }
    import types

    if isinstance(fn, types.FunctionType):
        made_of: tuple = (fn.__code__, fn.__defaults__, fn.__kwdefaults__)
    elif isinstance(fn, (types.MethodType, types.BuiltinFunctionType, type)):
        return _describe_function(fn, _depth)
    elif callable(fn):  # a callable object: its class's __call__ and its state
        made_of = ()
    else:
        raise TypeError(f"describe_function takes a callable, got {type(fn).__name__}")
    try:
        with _DESCRIBED_LOCK:
            known = _DESCRIBED.get(fn)
    except TypeError:  # neither weakly referable nor hashable: described afresh every time
        return _describe_function(fn, _depth)
    if known is None or any(a is not b for a, b in zip(known[0], made_of)):
        known = (made_of, _describe_function(fn, _depth))  # new, or its code was replaced
        with _DESCRIBED_LOCK:
            _DESCRIBED[fn] = known
    return json.loads(json.dumps(known[1]))  # a copy: the caller may change it


_DESCRIBED_LOCK = threading.Lock()


def _describe_function(fn: Any, _depth: int) -> dict[str, Any]:
    import types

    if not isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, type)):
        cls = type(fn)
        out = {"callable": f"{cls.__module__}.{cls.__qualname__}"}
        call = next((c.__dict__["__call__"] for c in cls.__mro__ if "__call__" in c.__dict__), None)
        code = getattr(call, "__code__", None)
        if code is not None:
            out["code"] = hashlib.sha256(_code_text(code).encode("utf-8")).hexdigest()[:16]
        out["state"] = _bounded(_describe_odd(fn, _depth))
        return out
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", type(fn).__name__)
    out: dict[str, Any] = {"callable": f"{getattr(fn, '__module__', None) or ''}.{name}"}
    bound = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", fn)  # a bound method: its function
    code = getattr(func, "__code__", None)
    if code is not None:
        out["code"] = hashlib.sha256(_code_text(code).encode("utf-8")).hexdigest()[:16]
    defaults = getattr(func, "__defaults__", None)
    kwdefaults = getattr(func, "__kwdefaults__", None)
    if defaults:
        out["defaults"] = _bounded(_describe_odd(list(defaults), _depth))
    if kwdefaults:
        out["kwdefaults"] = _bounded(_describe_odd(dict(kwdefaults), _depth))
    cells = getattr(func, "__closure__", None)
    if cells and code is not None:
        closure = {}
        for var, cell in zip(code.co_freevars, cells):
            try:
                value = cell.cell_contents
            except ValueError:  # a cell not filled yet
                closure[var] = "<empty>"
                continue
            closure[var] = _describe_odd(value, _depth)
        out["closure"] = _bounded(closure)
    if bound is not None and not isinstance(bound, __import__("types").ModuleType):
        out["self"] = _bounded(_describe_odd(bound, _depth))
    return out


def _describe_odd(value: Any, _depth: int) -> Any:
    """:func:`describe` of a captured value; one that cannot be described, by its class."""
    try:
        return describe(value, _depth=_depth + 1)
    except Exception:  # noqa: BLE001 - an odd object (a lock, a socket...) is named by its class
        return {"class": type(value).__name__}


def _bounded(desc: Any) -> Any:
    """``desc``, or a digest of it when its JSON is longer than ``_LONGEST_SHOWN`` characters."""
    text = json.dumps(json_safe(desc), sort_keys=True, ensure_ascii=True, default=str)
    if len(text) <= _LONGEST_SHOWN:
        return desc
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16], "chars": len(text)}


def _code_text(code: Any) -> str:
    """A text that changes with a code object's bytecode, constants (nested code objects
    recursively, sets in sorted order) and the names it reads, and with nothing else (not its
    file, line or address)."""

    def const(c: Any) -> str:
        if hasattr(c, "co_code"):
            return "code(" + _code_text(c) + ")"
        if isinstance(c, (frozenset, set)):
            return "{" + ",".join(sorted(const(x) for x in c)) + "}"
        if isinstance(c, tuple):
            return "(" + ",".join(const(x) for x in c) + ")"
        return f"{type(c).__name__}:{c!r}"

    consts = ",".join(const(c) for c in code.co_consts)
    return f"{code.co_code.hex()}|{consts}|{','.join(code.co_names)}"


def wrapped_function_identity(fn: Any) -> Any:
    """What a wrapper of a Python callable (:class:`~icml25.llm.CallableChat`,
    :class:`~icml25.llm.CallableReward`) adds to its identity: a function, lambda, method or
    ``functools.partial`` by :func:`describe_function`; a callable object that defines
    ``identity()``, ``cache_identity()`` or ``identity_parts()`` by :func:`describe`; ``None``
    for any other callable object (its state is usually a call log or counter, so it is left
    out: such an object is identified by the wrapper's name, or by an ``identity()`` it defines)."""
    import functools
    import types

    kinds = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    if isinstance(fn, kinds):
        return describe_function(fn)
    if any(
        callable(getattr(fn, m, None)) for m in ("identity_parts", "cache_identity", "identity")
    ):
        return describe(fn)
    return None


def function_fingerprint(fn: Any) -> str:
    """The 16-hex-digit fingerprint of :func:`describe_function` ``(fn)``: the same function,
    defaults and closure values give the same fingerprint in every process."""
    return settings_fingerprint({"fn": describe_function(fn)})


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted.path: leaf}``: dicts by key, lists by position (``moderators.0.temperature``)."""
    items = d.items() if isinstance(d, Mapping) else enumerate(d) if isinstance(d, list) else None
    if items is None:
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(_flatten(v, f"{prefix}{k}."))
    return out or {prefix.rstrip("."): type(d)()}


_ABSENT = "<absent>"


def _differences(x: Any, y: Any, path: str, out: dict[str, tuple[Any, Any]]) -> None:
    """Collect ``{path: (old, new)}`` where ``x`` and ``y`` differ: two non-empty dicts (or
    lists) by key (position), a field only one side has by the dotted paths of its leaves, and
    anything else (an empty container against a full one, another type) as one value pair."""
    if x == y and type(x) is type(y):
        return
    both = (isinstance(x, Mapping) and isinstance(y, Mapping)) or (
        isinstance(x, list) and isinstance(y, list)
    )
    if both and ((x and y) or not path):
        if isinstance(x, Mapping):
            keys = sorted(set(x) | set(y), key=str)
            pairs = [(k, x.get(k, _ABSENT), y.get(k, _ABSENT)) for k in keys]
        else:
            pairs = [
                (i, x[i] if i < len(x) else _ABSENT, y[i] if i < len(y) else _ABSENT)
                for i in range(max(len(x), len(y)))
            ]
        for k, a, b in pairs:
            _differences(a, b, f"{path}.{k}" if path else str(k), out)
        return
    if x is _ABSENT or y is _ABSENT:  # a field only one side has: its leaves, one by one
        side = _flatten(y if x is _ABSENT else x, f"{path}.")
        for leaf, v in side.items():
            out[leaf] = (_ABSENT, v) if x is _ABSENT else (v, _ABSENT)
        return
    out[path] = (x, y)


def settings_differences(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """``"field.path: old -> new"`` for every field where two settings differ (nested dicts and
    lists by dotted path; a field only one side has reads ``<absent>`` on the other; an empty
    list or dict against a full one reads as one line, ``accept_prefixes: [] -> ['Certainly']``)."""
    found: dict[str, tuple[Any, Any]] = {}
    _differences(json_safe(dict(old or {})), json_safe(dict(new)), "", found)
    return [f"{k}: {_where_they_differ(repr(x), repr(y))}" for k, (x, y) in sorted(found.items())]


def _where_they_differ(x: str, y: str, width: int = 60) -> str:
    """``x -> y``, each cut to about ``width`` characters around where they first differ (two
    long model paths that differ in their last characters stay readable)."""
    if len(x) <= width and len(y) <= width:
        return f"{x} -> {y}"
    first = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    start = max(0, first - width // 3)

    def cut(t: str) -> str:
        part = t[start : start + width]
        return ("..." if start else "") + part + ("..." if start + width < len(t) else "")

    return f"{cut(x)} -> {cut(y)}"
