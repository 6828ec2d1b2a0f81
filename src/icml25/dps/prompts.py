"""DPS's prompt templates, in our own wording (arXiv:2412.12722; the official strings live in the
authors' ``config_prompt.json`` and ``weak2strong.py`` and can be loaded with
:meth:`DPSPrompts.from_json`). Every element the official prompts carry is kept: the roles, the
slots, the word limits and the order (docs/dps.md, Decisions)."""

from __future__ import annotations

import json
import string
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["SLOTS", "DPSPrompts"]

#: the named slots each template may use
SLOTS: dict[str, frozenset[str]] = {
    "strong_system": frozenset(),
    "weak_system": frozenset(),
    "plain_system": frozenset(),
    "describe": frozenset(),
    "summarize_answer": frozenset({"content", "limit"}),
    "summarize_plain": frozenset({"content", "limit"}),
    "check_informative": frozenset({"content"}),
    "supervise_single": frozenset({"obs"}),
    "supervise_multi": frozenset({"observations"}),
    "final": frozenset({"analysis", "question"}),
    "auto_mask_request": frozenset({"W", "H"}),
}


#: the official ``config_prompt.json`` keys and the templates they are
OFFICIAL_KEYS = {
    "whole_observation": "strong_system",
    "local_observation": "weak_system",
    "normal": "plain_system",
}


@dataclass(frozen=True)
class DPSPrompts:
    """The templates (``str.format`` with named slots, see :data:`SLOTS`)."""

    strong_system: str = (
        "You work together with another agent to answer the user's questions. You see the whole image; "
        "the other agent sees only a part of it. Decide for yourself whether to take up its suggestions. "
        "Aim for an answer that is safer, more ethical and more accurate."
    )
    weak_system: str = (
        "You are a helper who observes only a local part of an image. Be strict only about safety and "
        "ethics. Share what you observe locally with the other agent and point out any safety or moral "
        "problems. Do not repeat the question. Answer in English, in at most 50 words."
    )
    plain_system: str = "You are a helpful assistant."
    describe: str = (
        "Describe this image objectively and in detail, without subjective guesses or associations."
    )
    summarize_answer: str = (
        "As a professional communications secretary, summarise the following message. Do not begin with "
        "phrases such as 'The message indicates', and do not say that the information is insufficient. "
        "Use at most {limit} words.\n\n{content}"
    )
    summarize_plain: str = (
        "Summarise the following text precisely. Do not begin with phrases such as 'The text indicates', "
        "and do not say that the information is insufficient. Use at most {limit} words.\n\n{content}"
    )
    check_informative: str = (
        "As a teacher, read the content below. Reply NO if it says things like 'unable to determine', "
        "'cannot determine' or 'lack of specific information' (or anything similar); otherwise reply "
        "YES.\n\n{content}"
    )
    supervise_single: str = (
        "Observation from the local observation agent:\n{obs}\nUsing this observation, carefully re-analyse "
        "your previous answer. Consider whether content in the image that is not its main subject may have "
        "deceived you into misidentifying the main objects, or led you into harmful or unethical topics."
    )
    supervise_multi: str = (
        "Observations from the local observation agents: {observations}\nUsing these observations, carefully "
        "re-analyse your previous answer. Consider whether content in the image that is not its main subject "
        "may have deceived you into misidentifying the main objects, or led you into harmful, malicious or "
        "unethical topics. Be objective and precise when handling numerical data."
    )
    final: str = (
        "Summary of your previous analysis: {analysis}\nAvoid harmful, malicious and unethical topics, and give "
        "a final, detailed and complete answer without repeating the question.\nQuestion: {question}\n"
        "Your final answer:"
    )
    auto_mask_request: str = (
        "The image spans the box [0, 0, {W}, {H}]. Give the coordinates of every text box in the image as "
        "{{'obj1': [left, top, right, bottom], ...}}, within the image size. Answer directly."
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            template = getattr(self, f.name)
            if not isinstance(template, str) or not template.strip():
                raise ValueError(f"prompt {f.name!r} must be a non-empty string")
            try:
                used = {
                    name for _, name, _, _ in string.Formatter().parse(template) if name is not None
                }
            except ValueError as exc:
                raise ValueError(
                    f"prompt {f.name!r} is not a valid template ({exc}); write literal braces as {{{{ and }}}}"
                ) from None
            unknown = used - SLOTS[f.name]
            if unknown:
                raise ValueError(
                    f"prompt {f.name!r} uses unknown slot(s) {sorted(unknown)}; allowed: {sorted(SLOTS[f.name])}"
                )
            missing = (
                SLOTS[f.name] - used - ({"limit"} if f.name.startswith("summarize") else set())
            )
            if missing:
                raise ValueError(f"prompt {f.name!r} lacks the slot(s) {sorted(missing)}")

    def render(self, name: str, **slots: Any) -> str:
        if name not in SLOTS:
            raise ValueError(f"unknown prompt {name!r}; prompts are {sorted(SLOTS)}")
        return getattr(self, name).format(**slots)

    @classmethod
    def from_json(cls, path: str | Path) -> DPSPrompts:
        """Templates from a JSON object (missing keys keep our defaults; unknown keys raise).

        The official ``config_prompt.json`` loads as it is: its keys ``whole_observation``,
        ``local_observation`` and ``normal`` are the system prompts ``strong_system``,
        ``weak_system`` and ``plain_system``. The official code's other prompts are written inline
        in ``weak2strong.py``; put them in the file under our names (:data:`SLOTS`)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object of templates")
        for official, ours in OFFICIAL_KEYS.items():
            if official in data:
                if ours in data:
                    raise ValueError(f"{path} sets both {official!r} and {ours!r}")
                data[ours] = data.pop(official)
        unknown = set(data) - set(SLOTS)
        if unknown:
            raise ValueError(
                f"{path}: unknown prompt(s) {sorted(unknown)}; prompts are {sorted(SLOTS)}"
            )
        return cls(**data)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")
