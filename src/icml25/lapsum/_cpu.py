"""LapSum's compiled CPU path (docs/lapsum.md, "Backends and precision").

``torch.sort`` sorts the rows; everything after it (the sorted statistics' scans, the closed-form
inverse, the scatter back, and the closed-form backward passes) is one fused C++ loop per row in
``_cpu.cpp``, in float64 whatever the input dtype, like the torch path on CPU (:mod:`._ref`).

Why ctypes and not a torch C++ extension: the kernels need no torch API (they read and write
contiguous buffers), so the source is plain C++ with a C ABI. It compiles in about 2 s where a
source including torch's headers takes about a minute, it cannot break when torch is upgraded, and
a ctypes call costs about a microsecond where a Python-defined custom op costs about twenty.
The shared library is built on first use with the system's C++ compiler (``$CXX``, ``c++`` or
``g++``) into ``$ICML25_LAPSUM_BUILD_DIR`` (default ``~/.cache/icml25``), named by a hash of the
source and the flags, so an edited source is rebuilt. Without a compiler, or with
``ICML25_LAPSUM_CPU=0``, ``backend="auto"`` is the torch path.

``torch.compile`` and ``torch.func`` see the kernels as custom operators (``icml25_lapsum::*``)
with fake implementations and vmap rules (the batch axes fold into the rows); eager calls skip the
dispatcher and call the library directly.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from icml25.lapsum._ref import _First, save_topk_context

_SOURCE = Path(__file__).with_name("_cpu.cpp")
# -fno-trapping-math and -fno-math-errno let the compiler vectorise the branch-free exp / log and
# sqrt (no floating-point traps or errno are used); no -march: the library may sit in a home directory shared by different machines (the
# source picks an AVX2 clone at load time itself)
_FLAGS = (
    "-O3",
    "-fno-trapping-math",
    "-fno-math-errno",
    "-pthread",
    "-shared",
    "-fPIC",
    "-std=c++17",
)
_KERNEL_DTYPES = {torch.float32: "f32", torch.float64: "f64"}

_lock = threading.Lock()
_state: dict[str, object] = {}


#: values of an on/off environment variable that mean off
_OFF = ("0", "false", "off", "no")


def _build_dir() -> Path:
    env = os.environ.get("ICML25_LAPSUM_BUILD_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "icml25"


def _compile(cxx: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.stem + ".", suffix=".so.tmp", dir=out.parent)
    os.close(fd)
    try:
        # CXX may carry a launcher or flags ("ccache g++"), as make and CMake read it
        proc = subprocess.run(
            [*shlex.split(cxx), *_FLAGS, str(_SOURCE), "-o", tmp],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{cxx} failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
            )
        os.replace(tmp, out)  # atomic: a concurrent build by another process is harmless
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, f64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int
    sig = {  # name: (argument types, return type); forward kernels count non-finite inputs
        "rank_fwd": ([p, p, p, i64, i64, i32, p, p], i64),
        "rank_bwd": ([p, p, p, p, p, i64, i64, i32, p, p], None),
        "inverse_fwd": ([p, p, p, i64, i64, i64, i32, p, p], i64),
        "inverse_bwd": ([p, p, p, p, p, i64, i64, i64, i32, p, p, p], None),
        "topk_fwd": ([p, p, p, p, i64, i64, i64, i32, i32, p, p], i64),
        "topk_bwd": ([p, p, p, p, i64, i64, i64, i32, f64, i32, p, p, p], None),
    }
    for name, (args, ret) in sig.items():
        for suffix in _KERNEL_DTYPES.values():
            fn = getattr(lib, f"lapsum_{name}_{suffix}")
            fn.argtypes, fn.restype = args, ret
    for name in ("lapsum_exp_nonpos", "lapsum_log_pos"):
        getattr(lib, name).argtypes, getattr(lib, name).restype = [p, i64, p], None


def _load() -> tuple[ctypes.CDLL | None, str]:
    """The compiled library (built on first use), or None and why not."""
    if "lib" in _state:
        return _state["lib"], _state["why"]  # type: ignore[return-value]
    with _lock:
        if "lib" in _state:
            return _state["lib"], _state["why"]  # type: ignore[return-value]
        lib, why = None, ""
        cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
        if not cxx:
            why = "no C++ compiler found (set CXX, or install g++)"
        else:
            key = hashlib.sha256(_SOURCE.read_bytes() + repr((cxx, _FLAGS)).encode()).hexdigest()
            so = _build_dir() / f"lapsum_cpu_{key[:16]}.so"
            built = False
            try:
                if not so.exists():
                    _compile(cxx, so)
                    built = True
                lib = ctypes.CDLL(str(so))
                _declare(lib)
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
                lib, why = None, f"the C++ kernels did not build or load: {exc}"
                if "undefined symbol" in str(exc):
                    why += f" (CXX={cxx!r} must be a C++ compiler, e.g. g++ or clang++)"
                if built and so.exists():  # a library that does not load is not kept
                    so.unlink()
        if lib is None:  # once per process: the fallback works, but the user should know
            warnings.warn(
                f"LapSum's compiled CPU kernels are not available ({why}); the torch path runs "
                "instead (slower, docs/lapsum.md 'Backends and precision')",
                RuntimeWarning,
                stacklevel=3,
            )
        _state["lib"], _state["why"] = lib, why
        return lib, why


@torch.compiler.assume_constant_result
def usable() -> bool:
    """``available()[0]``, evaluated once at trace time under torch.compile (building the library
    is not traceable)."""
    return available()[0]


def available() -> tuple[bool, str]:
    """Whether the compiled CPU kernels can be used, and why not (``ICML25_LAPSUM_CPU=0`` turns
    them off; the torch path is then used)."""
    if os.environ.get("ICML25_LAPSUM_CPU", "").strip().lower() in _OFF:
        return False, f"turned off by ICML25_LAPSUM_CPU={os.environ['ICML25_LAPSUM_CPU']}"
    lib, why = _load()
    return lib is not None, why


def _fn(name: str, dtype: torch.dtype):
    lib = _state.get("lib")
    if lib is None:
        lib, why = _load()
        if lib is None:
            raise RuntimeError(f"LapSum's compiled CPU kernels are not available: {why}")
    return getattr(lib, f"lapsum_{name}_{_KERNEL_DTYPES[dtype]}")


# -- the kernels on plain tensors ---------------------------------------------------------------
def _p(t: torch.Tensor) -> int:
    return t.data_ptr()


def _threads() -> int:
    return torch.get_num_threads()


def _check(nonfinite: int, check: bool) -> None:
    if check and nonfinite:
        from icml25.lapsum.functional import NONFINITE

        raise ValueError(NONFINITE.format(name="x"))


def _rank_fwd(sv, perm, alpha, check):
    R, n = sv.shape
    rank = torch.empty_like(sv)
    k1 = torch.empty((R, n), dtype=torch.float64)
    bad = _fn("rank_fwd", sv.dtype)(_p(sv), _p(perm), _p(alpha), R, n, _threads(), _p(rank), _p(k1))
    _check(bad, check)
    return rank, k1


def _rank_bwd(v, sv, perm, k1, alpha):
    R, n = sv.shape
    g_r = torch.empty_like(sv)
    g_alpha = torch.empty(R, dtype=torch.float64)
    _fn("rank_bwd", sv.dtype)(
        _p(v),
        _p(sv),
        _p(perm),
        _p(k1),
        _p(alpha),
        R,
        n,
        _threads(),
        _p(g_r),
        _p(g_alpha),
    )
    return g_r, g_alpha


def _inverse_fwd(sv, alpha, w, check):
    (R, n), m = sv.shape, w.shape[-1]
    t = torch.empty((R, m), dtype=sv.dtype)
    t64 = torch.empty((R, m), dtype=torch.float64)
    bad = _fn("inverse_fwd", sv.dtype)(
        _p(sv), _p(alpha), _p(w), R, n, m, _threads(), _p(t), _p(t64)
    )
    _check(bad, check)
    return t, t64


def _inverse_bwd(u, sv, perm, t64, alpha):
    (R, n), m = sv.shape, t64.shape[-1]
    g_r = torch.empty_like(sv)
    g_w = torch.empty((R, m), dtype=torch.float64)
    g_alpha = torch.empty(R, dtype=torch.float64)
    _fn("inverse_bwd", sv.dtype)(
        _p(u),
        _p(sv),
        _p(perm),
        _p(t64),
        _p(alpha),
        R,
        n,
        m,
        _threads(),
        _p(g_r),
        _p(g_w),
        _p(g_alpha),
    )
    return g_r, g_w, g_alpha


def _topk_fwd(r, sv, alpha, k, log, check):
    (R, n), m = r.shape, k.shape[-1]
    out = torch.empty((R, m, n), dtype=r.dtype)
    t64 = torch.empty((R, m), dtype=torch.float64)
    bad = _fn("topk_fwd", r.dtype)(
        _p(r),
        _p(sv),
        _p(alpha),
        _p(k),
        R,
        n,
        m,
        int(log),
        _threads(),
        _p(out),
        _p(t64),
    )
    _check(bad, check)
    return out, t64


def _topk_bwd(v, r, t64, alpha, log, k_max):
    (R, n), m = r.shape, t64.shape[-1]
    g_r = torch.empty_like(r)
    g_k = torch.empty((R, m), dtype=torch.float64)
    g_alpha = torch.empty(R, dtype=torch.float64)
    _fn("topk_bwd", r.dtype)(
        _p(v),
        _p(r),
        _p(t64),
        _p(alpha),
        R,
        n,
        m,
        int(log),
        float(k_max),
        _threads(),
        _p(g_r),
        _p(g_k),
        _p(g_alpha),
    )
    return g_r, g_k, g_alpha


def _elementwise(name: str, x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.float64).contiguous()
    out = torch.empty_like(x)
    lib, why = _load()
    if lib is None:
        raise RuntimeError(f"LapSum's compiled CPU kernels are not available: {why}")
    getattr(lib, name)(_p(x), x.numel(), _p(out))
    return out


def exp_nonpos(x: torch.Tensor) -> torch.Tensor:
    """The kernels' vectorised ``exp`` on float64 values ``<= 0`` (for its accuracy test)."""
    return _elementwise("lapsum_exp_nonpos", x)


def log_pos(x: torch.Tensor) -> torch.Tensor:
    """The kernels' vectorised ``log`` on float64 values (for its accuracy test)."""
    return _elementwise("lapsum_log_pos", x)


# -- the same kernels as custom operators, for torch.compile and torch.func ---------------------
_LIB = "icml25_lapsum"
Tensor = torch.Tensor


@torch.library.custom_op(f"{_LIB}::rank_fwd", mutates_args=())
def rank_fwd_op(sv: Tensor, perm: Tensor, alpha: Tensor, check: bool) -> tuple[Tensor, Tensor]:
    return _rank_fwd(sv, perm, alpha, check)


@rank_fwd_op.register_fake
def _(sv, perm, alpha, check):
    return torch.empty_like(sv), sv.new_empty(sv.shape, dtype=torch.float64)


@torch.library.custom_op(f"{_LIB}::rank_bwd", mutates_args=())
def rank_bwd_op(
    v: Tensor, sv: Tensor, perm: Tensor, k1: Tensor, alpha: Tensor
) -> tuple[Tensor, Tensor]:
    return _rank_bwd(v, sv, perm, k1, alpha)


@rank_bwd_op.register_fake
def _(v, sv, perm, k1, alpha):
    return torch.empty_like(sv), sv.new_empty(sv.shape[:1], dtype=torch.float64)


@torch.library.custom_op(f"{_LIB}::inverse_fwd", mutates_args=())
def inverse_fwd_op(sv: Tensor, alpha: Tensor, w: Tensor, check: bool) -> tuple[Tensor, Tensor]:
    return _inverse_fwd(sv, alpha, w, check)


@inverse_fwd_op.register_fake
def _(sv, alpha, w, check):
    shape = (sv.shape[0], w.shape[-1])
    return sv.new_empty(shape), sv.new_empty(shape, dtype=torch.float64)


@torch.library.custom_op(f"{_LIB}::inverse_bwd", mutates_args=())
def inverse_bwd_op(
    u: Tensor, sv: Tensor, perm: Tensor, t64: Tensor, alpha: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    return _inverse_bwd(u, sv, perm, t64, alpha)


@inverse_bwd_op.register_fake
def _(u, sv, perm, t64, alpha):
    return (
        torch.empty_like(sv),
        t64.new_empty(t64.shape),
        sv.new_empty(sv.shape[:1], dtype=torch.float64),
    )


@torch.library.custom_op(f"{_LIB}::topk_fwd", mutates_args=())
def topk_fwd_op(
    r: Tensor, sv: Tensor, alpha: Tensor, k: Tensor, log: bool, check: bool
) -> tuple[Tensor, Tensor]:
    return _topk_fwd(r, sv, alpha, k, log, check)


@topk_fwd_op.register_fake
def _(r, sv, alpha, k, log, check):
    (R, n), m = r.shape, k.shape[-1]
    return r.new_empty((R, m, n)), r.new_empty((R, m), dtype=torch.float64)


@torch.library.custom_op(f"{_LIB}::topk_bwd", mutates_args=())
def topk_bwd_op(
    v: Tensor, r: Tensor, t64: Tensor, alpha: Tensor, log: bool, k_max: float
) -> tuple[Tensor, Tensor, Tensor]:
    return _topk_bwd(v, r, t64, alpha, log, k_max)


@topk_bwd_op.register_fake
def _(v, r, t64, alpha, log, k_max):
    return (
        torch.empty_like(r),
        t64.new_empty(t64.shape),
        r.new_empty(r.shape[:1], dtype=torch.float64),
    )


def _fold_rows(info, in_dims, *args):
    """vmap rule of every kernel: each takes rows (R, ...) and treats them independently, so the
    vmapped axis folds into R (inputs without it are expanded) and unfolds from the outputs."""
    size = info.batch_size
    folded = []
    for arg, bdim in zip(args, in_dims):
        if not isinstance(arg, torch.Tensor):
            folded.append(arg)
            continue
        arg = arg.unsqueeze(0).expand(size, *arg.shape) if bdim is None else arg.movedim(bdim, 0)
        folded.append(arg.reshape(size * arg.shape[1], *arg.shape[2:]).contiguous())
    return folded, size


def _vmap(op):
    def rule(info, in_dims, *args):
        folded, size = _fold_rows(info, in_dims, *args)
        outs = op(*folded)
        return tuple(o.reshape(size, -1, *o.shape[1:]) for o in outs), (0,) * len(outs)

    torch.library.register_vmap(op, rule)


for _op in (rank_fwd_op, rank_bwd_op, inverse_fwd_op, inverse_bwd_op, topk_fwd_op, topk_bwd_op):
    _vmap(_op)


#: the dispatch key of the batched tensors of the older ``torch._vmap_internals`` (used by
#: ``torch.autograd.functional.jacobian(..., vectorize=True)``), which functorch's check misses
_LEGACY_BATCHED = torch._C._parse_dispatch_key("Batched")


def _direct(*tensors: torch.Tensor) -> bool:
    """Eager plain tensors: call the library without the dispatcher. Under torch.compile, export
    or a vmap / torch.func transform (wrapped, batched or fake tensors), go through the custom
    operator, whose fake implementation and vmap rule those need."""
    if torch.compiler.is_compiling():
        return False
    for t in tensors:
        if (
            type(t) is not torch.Tensor
            or torch._C._functorch.is_functorch_wrapped_tensor(t)
            or torch._C._dispatch_keys(t).has(_LEGACY_BATCHED)
        ):
            return False
    return True


def _prep(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x`` as a contiguous tensor of a kernel dtype (``dtype``, or x's own when the kernels
    have it, else float32: half precision runs in float32 and is cast back)."""
    if dtype is None:
        dtype = x.dtype if x.dtype in _KERNEL_DTYPES else torch.float32
    if x.dtype != dtype:
        x = x.to(dtype)
    return x.contiguous()


# -- autograd functions (same conventions as icml25.lapsum._ref) --------------------------------
def _cast(g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return g if g.dtype == dtype else g.to(dtype)


class _SoftRankFn(torch.autograd.Function):
    """0-based ascending soft rank of rows ``r`` (R, n), alpha (R, 1): as ``_ref._SoftRankFn``.

    Returns ``(rank, sorted r, perm, k1)``; the last three are non-differentiable outputs saved for
    backward (4 + 8 + 8 bytes per float32 element, the input itself is not kept)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(r, alpha, check: bool):
        sv, perm = torch.sort(_prep(r), dim=-1)
        a = _prep(alpha.detach(), torch.float64)  # (R, 1): R contiguous values
        if _direct(sv, perm, a):
            rank, k1 = _rank_fwd(sv, perm, a, check)
        else:
            rank, k1 = rank_fwd_op(sv, perm, a, check)
        return _cast(rank, r.dtype), sv, perm, k1

    @staticmethod
    def setup_context(ctx, inputs, output):
        r, alpha, _check = inputs
        _, sv, perm, k1 = output
        ctx.mark_non_differentiable(sv, perm, k1)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(sv, perm, k1, alpha)
        ctx.r_dtype = r.dtype

    @staticmethod
    @once_differentiable
    def backward(ctx, v, *_saved_outputs_grads):
        sv, perm, k1, alpha = ctx.saved_tensors
        if v is None:
            return None, None, None
        vk = _prep(v, sv.dtype)
        a = _prep(alpha.detach(), torch.float64)
        if _direct(vk, sv, perm, k1, a):
            g_r, g_alpha = _rank_bwd(vk, sv, perm, k1, a)
        else:
            g_r, g_alpha = rank_bwd_op(vk, sv, perm, k1, a)
        return (
            _cast(g_r, ctx.r_dtype) if ctx.needs_input_grad[0] else None,
            _cast(g_alpha.reshape(alpha.shape), alpha.dtype) if ctx.needs_input_grad[1] else None,
            None,
        )


class _LapSumInverseFn(torch.autograd.Function):
    """``t = LapSum^{-1}(r; w)``: r (R, n), w (R, m) in (0, n), alpha (R, 1); as ``_ref``'s.

    Returns ``(t, sorted r, perm, t in float64)``, the last three saved for backward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(r, w, alpha, check: bool):
        sv, perm = torch.sort(_prep(r), dim=-1)
        a = _prep(alpha.detach(), torch.float64)
        w64 = _prep(w.detach(), torch.float64)
        if _direct(sv, a, w64):
            t, t64 = _inverse_fwd(sv, a, w64, check)
        else:
            t, t64 = inverse_fwd_op(sv, a, w64, check)
        return _cast(t, r.dtype), sv, perm, t64

    @staticmethod
    def setup_context(ctx, inputs, output):
        r, w, alpha, _check = inputs
        _, sv, perm, t64 = output
        ctx.mark_non_differentiable(sv, perm, t64)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(sv, perm, t64, alpha)
        ctx.r_dtype, ctx.w_dtype = r.dtype, w.dtype

    @staticmethod
    @once_differentiable
    def backward(ctx, u, *_saved_outputs_grads):
        sv, perm, t64, alpha = ctx.saved_tensors
        if u is None:
            return None, None, None, None
        u64 = _prep(u, torch.float64)
        a = _prep(alpha.detach(), torch.float64)
        if _direct(u64, sv, perm, t64, a):
            g_r, g_w, g_alpha = _inverse_bwd(u64, sv, perm, t64, a)
        else:
            g_r, g_w, g_alpha = inverse_bwd_op(u64, sv, perm, t64, a)
        return (
            _cast(g_r, ctx.r_dtype) if ctx.needs_input_grad[0] else None,
            _cast(g_w, ctx.w_dtype) if ctx.needs_input_grad[1] else None,
            _cast(g_alpha.reshape(alpha.shape), alpha.dtype) if ctx.needs_input_grad[2] else None,
            None,
        )


class _SoftTopKFn(torch.autograd.Function):
    """Soft top-k ("largest") of rows r (R, n) for k (R, m): (R, m, n); as ``_ref._SoftTopKFn``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(r, k, alpha, log: bool, check: bool):
        rk = _prep(r)
        sv, _ = torch.sort(rk, dim=-1)
        a = _prep(alpha.detach(), torch.float64)  # (R, 1): R contiguous values
        k64 = _prep(k.detach(), torch.float64)
        if _direct(rk, sv, a, k64):
            out, t64 = _topk_fwd(rk, sv, a, k64, log, check)
        else:
            out, t64 = topk_fwd_op(rk, sv, a, k64, log, check)
        return _cast(out, r.dtype), t64

    @staticmethod
    def setup_context(ctx, inputs, output):
        save_topk_context(ctx, *inputs[:4], output[1])

    @staticmethod
    @once_differentiable
    def backward(ctx, v, _t_grad=None):
        r, t64, alpha = ctx.saved_tensors
        if v is None:
            return None, None, None, None, None
        rk = _prep(r)
        vk = _prep(v, rk.dtype)
        a = _prep(alpha.detach(), torch.float64)
        k_max = torch.finfo(ctx.k_dtype).max
        if _direct(vk, rk, t64, a):
            g_r, g_k, g_alpha = _topk_bwd(vk, rk, t64, a, ctx.log, k_max)
        else:
            g_r, g_k, g_alpha = topk_bwd_op(vk, rk, t64, a, ctx.log, k_max)
        return (
            _cast(g_r, r.dtype) if ctx.needs_input_grad[0] else None,
            _cast(g_k, ctx.k_dtype) if ctx.needs_input_grad[1] else None,
            _cast(g_alpha.reshape(alpha.shape), alpha.dtype) if ctx.needs_input_grad[2] else None,
            None,
            None,
        )


SoftRankFn = _First(_SoftRankFn)
LapSumInverseFn = _First(_LapSumInverseFn)
SoftTopKFn = _First(_SoftTopKFn)
