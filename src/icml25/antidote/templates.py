"""The Stanford-Alpaca prompt templates the official code trains and evaluates with
(``utils.SupervisedDataset`` for training, ``poison/evaluation/pred.py`` and ``sst2/pred_eval.py``
for evaluation): the instruction alone, or with an ``### Input:`` block."""

from __future__ import annotations

__all__ = ["ALPACA", "ALPACA_INPUT", "render_prompt"]

ALPACA = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)
ALPACA_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
    "{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)


def render_prompt(instruction: str, input: str = "", template: str = "alpaca") -> str:
    """The prompt text the model sees: ``template="alpaca"`` (with the input block when
    ``input`` is non-empty) or ``"none"`` (the instruction as is)."""
    if template not in ("alpaca", "none"):
        raise ValueError(f"template must be 'alpaca' or 'none', got {template!r}")
    if not isinstance(instruction, str):
        raise TypeError(f"an instruction must be a string, got {type(instruction).__name__}")
    if template == "none":
        return instruction
    head = ALPACA_INPUT if input else ALPACA
    # replace, not format: braces in user text must stay as they are
    return head.replace("{instruction}", instruction).replace("{input}", input or "")
