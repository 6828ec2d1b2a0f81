"""With PromptSet.from_textgrad(), our gradient and update prompts equal the ones
TextGrad itself sends (TextLoss -> backward -> TGD.step) for the same variable and critique.
Skipped when textgrad is not installed."""

from __future__ import annotations

import pytest

tg = pytest.importorskip("textgrad")

from textgrad.engine import EngineLM  # noqa: E402

from icml25.tpo import PromptSet  # noqa: E402


class _Recorder(EngineLM):
    """A TextGrad engine that records (system, prompt) and answers from a script."""

    model_string = "recorder"

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def generate(self, prompt, system_prompt=None, **kwargs):
        self.calls.append((system_prompt, prompt))
        return self.replies.pop(0)

    def __call__(self, prompt, **kwargs):
        return self.generate(prompt, **kwargs)


LONG = " ".join(f"w{i}" for i in range(30)) + " {braces} and {query}\nnew line ü"


@pytest.mark.parametrize("chosen", ["A short chosen answer.", LONG])
@pytest.mark.parametrize("revision", [False, True])
def test_gradient_and_update_prompts_match_textgrad(chosen, revision):
    P = PromptSet.from_textgrad()
    query, rejected = "Explain {x} to me.", (None if revision else "A worse answer {y}.")
    critique, gradient = "The chosen one is clearer.", "Add an example."
    eng = _Recorder([critique, gradient, "<IMPROVED_VARIABLE>new</IMPROVED_VARIABLE>"])
    role = P.role_revision if revision else P.role_tpo
    var = tg.Variable(chosen, requires_grad=True, role_description=role)
    loss = tg.TextLoss(P.loss_system(query, rejected), engine=eng)(var)
    loss.backward(eng)
    cons = P.constraints_revision if revision else P.constraints_tpo
    tg.TGD(parameters=[var], engine=eng, constraints=list(cons)).step()

    (l_sys, l_user), (g_sys, g_user), (u_sys, u_user) = eng.calls
    ours_loss = P.loss_messages(query, chosen, rejected)
    assert (l_sys, l_user) == (ours_loss[0]["content"], ours_loss[1]["content"])
    ours_grad = P.gradient_messages(query, chosen, rejected, critique)
    assert g_sys == ours_grad[0]["content"] and g_user == ours_grad[1]["content"]
    ours_upd = P.update_messages(query, chosen, rejected, critique, gradient)
    assert u_sys == ours_upd[0]["content"] and u_user == ours_upd[1]["content"]
    assert var.value == "new"

    # the parsers read TextGrad's rendering back exactly (the offline policy depends on it)
    assert P.detect_role(ours_grad) == "gradient" and P.detect_role(ours_upd) == "update"
    f = P.parse_update(ours_upd)
    assert (f["query"], f["rejected"], f["chosen"], f["critique"], f["gradient"], f["role"]) == (
        query,
        rejected,
        chosen,
        critique,
        gradient,
        role,
    )
