"""Exact memory accounting for optimizers (docs/swan.md) and a peak-memory helper."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "analytic_table",
    "expected_adamw_state_bytes",
    "model_bytes",
    "optimizer_state_bytes",
    "tensor_bytes",
]


def tensor_bytes(obj) -> int:
    """``numel * element_size`` summed over every tensor in ``obj`` (dicts, lists, tuples)."""
    if isinstance(obj, Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    """Exact bytes held in ``opt.state`` (SWAN parameters hold none)."""
    return sum(tensor_bytes(s) for s in opt.state.values())


def expected_adamw_state_bytes(params) -> int:
    """What ``torch.optim.AdamW`` keeps: two moments in the parameter dtype + a 4-byte ``step``."""
    params = list(params)
    return sum(2 * p.numel() * p.element_size() + 4 for p in params)


def model_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Exact bytes of the parameters and of the gradients currently allocated."""
    params = list(model.parameters())
    return {
        "params": sum(p.numel() * p.element_size() for p in params),
        "grads": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
    }


# GaLore benchmark LLaMA configs (hidden, ff, layers) with vocab 32 000 and an untied head (§7).
GALORE_CONFIGS = {
    "60M": (512, 1376, 8),
    "130M": (768, 2048, 12),
    "350M": (1024, 2736, 24),
    "1B": (2048, 5461, 24),
}


def analytic_table(bytes_per_value: int = 2, vocab: int = 32_000) -> list[dict]:
    """params + grads + optimizer-state bytes of AdamW vs SWAN for the GaLore configs (docs/swan.md).

    With bf16 weights, grads and Adam moments (``bytes_per_value=2``): AdamW 8 B/param, SWAN
    matrices 4 B/param, embeddings/head/norms keep AdamW's 8.
    """
    rows = []
    for name, (d, ff, layers) in GALORE_CONFIGS.items():
        hidden = layers * (4 * d * d + 3 * d * ff)
        other = 2 * vocab * d + (2 * layers + 1) * d
        b = bytes_per_value
        adamw = (hidden + other) * 4 * b
        swan = hidden * 2 * b + other * 4 * b
        rows.append(
            {
                "config": name,
                "hidden_params": hidden,
                "other_params": other,
                "adamw_bytes": adamw,
                "swan_bytes": swan,
                "ratio": swan / adamw,
            }
        )
    return rows


_PEAK_SCRIPT = """
import resource, sys, torch
from icml25.swan.training import ModelConfig, build_model, make_optimizer
name, vocab, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
cfg = ModelConfig(vocab=vocab)
model = build_model(cfg, 0)
opt = None if name == "none" else make_optimizer(name, model, 1e-3)
g = torch.Generator().manual_seed(0)
for _ in range(steps):
    ids = torch.randint(vocab, (16, cfg.seq + 1), generator=g)
    out = model(input_ids=ids[:, :-1])
    torch.nn.functional.cross_entropy(out.logits.reshape(-1, vocab), ids[:, 1:].reshape(-1)).backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_step_memory(
    optimizers=("adamw", "swan", "sgd"), vocab: int = 2048, steps: int = 3, device: str = "cpu"
) -> dict[str, int]:
    """Peak memory of training steps per optimizer, minus forward/backward alone, in bytes.

    On CUDA: ``torch.cuda.max_memory_allocated`` around the steps, in this process. On CPU each
    optimizer runs in a fresh subprocess and the peak resident set size (``ru_maxrss``) is
    compared with a subprocess that does forward/backward only; for a small model these numbers
    are within allocator noise, which is why the exact byte counts sit next to them.
    """
    import subprocess
    import sys

    if device != "cpu":
        raise ValueError(
            "peak_step_memory measures CPU processes; use torch.cuda.max_memory_allocated on GPU"
        )

    # the processes run side by side: each one's peak is its own, whatever runs beside it
    names = ["none", *optimizers]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PEAK_SCRIPT, name, str(vocab), str(steps)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    outputs = [proc.communicate() for proc in procs]  # all of them end before any is read
    peaks = {}
    for name, proc, (out, err) in zip(names, procs, outputs):
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
        peaks[name] = int(out.strip().splitlines()[-1]) * 1024  # KiB on Linux
    return {name: peaks[name] - peaks["none"] for name in optimizers}
