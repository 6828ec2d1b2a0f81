"""The Python blocks of docs/elicitation.md run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "elicitation.md"


def test_docs_examples_run(capsys):
    pytest.importorskip("trl")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    mix = ns["mixture"]
    assert len(mix.members) == 2 and mix.weights == pytest.approx([0.5, 0.5])
    assert set(mix.history[1][-1]["spread"]) == {
        "reward_std",
        "penalty_std",
        "lam",
        "swamped_behaviors",
    }
    assert "SFT success" in capsys.readouterr().out


def test_doc_names_are_public():
    """Every `name(` the page calls is public: in the package's ``__all__`` or in the ``__all__``
    of the submodule that holds it (CONTRIBUTING.md, "Public names")."""
    import importlib
    import pkgutil

    import icml25.elicitation as el

    text = DOC.read_text(encoding="utf-8")
    names = set(re.findall(r"`([A-Za-z_]\w+)\(", text))
    external = {"AutoModelForCausalLM", "OpenAIChat", "DPOConfig", "q_SFT", "q_θ", "exp"}
    external |= {"load"}  # Investigator.load / HFTargetModel.load
    assert hasattr(el.Investigator, "load") and hasattr(el.HFTargetModel, "load")
    public = set(el.__all__)
    for info in pkgutil.iter_modules(el.__path__):
        if not info.name.startswith("_"):
            sub = importlib.import_module(f"icml25.elicitation.{info.name}")
            public |= set(getattr(sub, "__all__", []))
    missing = [n for n in names - external if n not in public]
    assert not missing, missing
