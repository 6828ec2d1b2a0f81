"""The four TPO prompts (paper §3; structure from the official code, wording ours).

Roles: *generate* (the plain query), *loss* (a critique of the chosen response against the rejected
one), *gradient* (improvement instructions given the critique), *update* (a new response, answered
between ``<IMPROVED_VARIABLE>`` tags). The tag vocabulary and block order follow TextGrad's, as used
by TPO: ``<ROLE>``, ``<LM_SYSTEM_PROMPT>``, ``<LM_INPUT>``, ``<LM_OUTPUT>``, ``<OBJECTIVE_FUNCTION>``,
``<VARIABLE>``, ``<CONTEXT>``, ``<CONVERSATION>``, ``<FEEDBACK>``, ``<CONSTRAINTS>``. Placeholders are
filled in one pass, so user text with ``{braces}`` or placeholder names is never re-interpreted; every
rendered prompt can be parsed back (``parse_*``), which lets an offline policy read real prompts.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from icml25._validate import as_int

__all__ = ["PromptSet", "extract_tagged", "short_value"]

_PLACEHOLDER = re.compile(r"\{(query|rejected|start_tag|end_tag)\}")


def _fill(template: str, **values: str) -> str:
    """Replace ``{name}`` for the given names in one pass (inserted text is not re-scanned)."""
    return _PLACEHOLDER.sub(
        lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template
    )


def short_value(text: str, n_words: int = 10) -> str:
    """TextGrad's ``get_short_value``: split on single spaces; more than ``2 n_words`` pieces become
    the first ``n_words`` + ``" (...) "`` + the last ``n_words`` (``n_words >= 1``)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    # n_words = 0 would keep the whole text after the marker (pieces[-0:] is every piece)
    n_words = as_int("n_words", n_words, 1)
    pieces = text.split(" ")
    if len(pieces) <= 2 * n_words:
        return text
    return " ".join(pieces[:n_words]) + " (...) " + " ".join(pieces[-n_words:])


def extract_tagged(text: str, start: str, end: str) -> str | None:
    """The text after the first ``start`` and before the next ``end``, stripped; None if either
    tag is missing."""
    i = text.find(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    if j < 0:
        return None
    return text[i + len(start) : j].strip()


def _template_regex(template: str) -> re.Pattern[str]:
    """A regex that matches ``template`` rendered by :func:`_fill` and captures the inserted
    ``query`` / ``rejected`` values (non-greedy, whole text)."""
    parts, last = [], 0
    for m in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[last : m.start()]))
        name = m.group(1)
        parts.append(f"(?P<{name}>.*?)" if name in ("query", "rejected") else re.escape(m.group(0)))
        last = m.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.DOTALL)


def _block(tag: str, value: str) -> str:
    return f"<{tag}> {value} </{tag}>"


def _unblock(text: str, tag: str, spaced: bool = True) -> str:
    """Inverse of :func:`_block` for the first block of ``tag`` (exact, no stripping);
    ``spaced=False`` reads ``<TAG>value</TAG>`` (some of TextGrad's blocks)."""
    pad = " " if spaced else ""
    start, end = f"<{tag}>{pad}", f"{pad}</{tag}>"
    i = text.find(start)
    if i < 0:
        raise ValueError(f"no <{tag}> block in the prompt")
    j = text.find(end, i + len(start))
    if j < 0:
        raise ValueError(f"no </{tag}> after <{tag}> in the prompt")
    return text[i + len(start) : j]


_LOSS = (
    "You compare two responses to a user query: a chosen one and a rejected one. Go through the "
    "strengths and weaknesses of each, step by step, and say why the first is preferred and the "
    "second is not. Do not answer the query yourself, and keep it short.\n\n"
    "<QUERY>{query}</QUERY>\n\n<REJECTED_RESPONSE>{rejected}</REJECTED_RESPONSE>\n\n"
    "The chosen response is the next message."
)
_LOSS_REVISION = (
    "You review a response to a user query. Go through its strengths and weaknesses, step by "
    "step. Do not answer the query yourself, and keep it short.\n\n<QUERY>{query}</QUERY>\n\n"
    "The response is the next message."
)
_BACKWARD = (
    "You are the feedback step of an optimisation loop over text. You receive a variable and an "
    "objective in <OBJECTIVE_FUNCTION> tags and write criticism and concrete ways to improve the "
    "variable for that objective. Do not write a new version of the variable. If the variable "
    "already serves the objective, say that no change is needed.\n"
    "Tags: <LM_SYSTEM_PROMPT> the system prompt of a language-model call; <LM_INPUT> its input; "
    "<LM_OUTPUT> its output; <OBJECTIVE_FUNCTION> what to optimise; <VARIABLE> the text to "
    "criticise; <ROLE> what the variable is for."
)
_OPTIMIZER = (
    "You improve a text variable in an optimisation loop, using feedback that may be noisy. Keep "
    "to the variable's role and context. Answer with the improved variable between {start_tag} and "
    "{end_tag}; the text between the tags replaces the variable.\n"
    "Tags: <LM_SYSTEM_PROMPT>, <LM_INPUT>, <LM_OUTPUT> the parts of a language-model call; "
    "<FEEDBACK> the feedback on the variable; <CONVERSATION> the call the variable took part in; "
    "<FOCUS> what to focus on; <ROLE> what the variable is for."
)


@dataclass
class PromptSet:
    """Templates and renderers of the four roles (``{query}``, ``{rejected}``, ``{start_tag}`` and
    ``{end_tag}`` placeholders). :meth:`default` is our wording with TPO's tag vocabulary."""

    generation_system: str | None = "You are a helpful assistant."
    loss_template: str = _LOSS
    loss_template_revision: str = _LOSS_REVISION
    backward_system: str = _BACKWARD
    optimizer_system: str = _OPTIMIZER
    role_tpo: str = "a chosen response to a user query"
    role_revision: str = "a model response to a user query"
    response_desc: str = "the language model's response"
    constraints_tpo: tuple[str, ...] = (
        "only generate a chosen response",
        "do NOT generate a rejected response",
    )
    constraints_revision: tuple[str, ...] = ("only generate a model response",)
    start_tag: str = "<IMPROVED_VARIABLE>"
    end_tag: str = "</IMPROVED_VARIABLE>"
    # TextGrad's own gradient/update templates (set by from_textgrad; None = our wording)
    textgrad: dict[str, str] | None = None

    @classmethod
    def default(cls) -> PromptSet:
        return cls()

    @classmethod
    def from_textgrad(cls, loss_template: str | None = None, **overrides) -> PromptSet:
        """Gradient and update prompts byte-identical to TextGrad's (``LLMCall`` backward without
        an output gradient, ``TextualGradientDescent._update_prompt`` with constraints), built
        from the constants of the installed ``textgrad`` package (PyPI ``textgrad``). TPO's loss
        template lives only in the TPO repository: pass it as ``loss_template`` (placeholders
        ``{query}`` and ``{rejected}``), or our wording is kept; :meth:`from_official` reads all
        of TPO's own prompts from a checkout. The response description is TextGrad's default
        output role."""
        import os

        # textgrad imports litellm, which otherwise tries to fetch a price list from the network
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            from textgrad import defaults as tg_defaults
            from textgrad.autograd import llm_backward_prompts as bp
            from textgrad.optimizer import optimizer_prompts as op
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "PromptSet.from_textgrad needs the textgrad package: pip install textgrad"
            ) from e
        if loss_template is not None:
            overrides["loss_template"] = loss_template
        return cls._with_textgrad(vars(bp), vars(op), vars(tg_defaults), overrides)

    @classmethod
    def _with_textgrad(cls, bp: dict, op: dict, defaults: dict, overrides: dict) -> PromptSet:
        start = overrides.pop("start_tag", cls.start_tag)
        end = overrides.pop("end_tag", cls.end_tag)
        templates = {
            "conversation": bp["CONVERSATION_TEMPLATE"],
            "backward_start": bp["CONVERSATION_START_INSTRUCTION_BASE"],
            "backward_objective": bp["OBJECTIVE_INSTRUCTION_BASE"],
            "backward_evaluate": bp["EVALUATE_VARIABLE_INSTRUCTION"],
            "gradient_context": op["GRADIENT_TEMPLATE"],
            "tgd_prefix": op["TGD_PROMPT_PREFIX"],
            "tgd_constraints": op["CONSTRAINT_PROMPT_ADDITION"],
            "tgd_suffix": op["TGD_PROMPT_SUFFIX"],
        }
        fields = dict(
            backward_system=bp["BACKWARD_SYSTEM_PROMPT"],
            optimizer_system=op["OPTIMIZER_SYSTEM_PROMPT"].format(
                new_variable_start_tag=start, new_variable_end_tag=end
            ),
            response_desc=defaults["VARIABLE_OUTPUT_DEFAULT_ROLE"],
            start_tag=start,
            end_tag=end,
            textgrad=templates,
        )
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_official(cls, repo: str | Path, **overrides) -> PromptSet:
        """Every prompt of the official TPO code, read from a local checkout of
        ``yafuly/TPO`` (nothing is executed: the files are parsed with ``ast``):

        - ``tpo_utils.py``: the loss templates (``EVALUATION_SYS_TEMPLATE``,
          ``EVALUATION_SYS_TEMPLATE_REVISION``), the variable roles and the constraint strings
          of ``run_test_time_training_tpo``;
        - ``textgrad-main/textgrad/``: the (patched) TextGrad backward and optimizer prompts and
          the default output role, as :meth:`from_textgrad`;
        - ``textgrad-main/textgrad/engine/openai.py``: ``VllmServer.DEFAULT_SYSTEM_PROMPT``, the
          system prompt of candidate generation.

        Remaining differences from the official requests are listed in ``docs/tpo.md``.
        """
        root = Path(repo)
        tg = root / "textgrad-main" / "textgrad"
        files = {
            "tpo": root / "tpo_utils.py",
            "bp": tg / "autograd" / "llm_backward_prompts.py",
            "op": tg / "optimizer" / "optimizer_prompts.py",
            "defaults": tg / "defaults.py",
            "engine": tg / "engine" / "openai.py",
        }
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{root} does not look like a checkout of the official TPO repository "
                f"(yafuly/TPO): missing {', '.join(missing)}"
            )
        tpo = _module_strings(files["tpo"])
        loss = _from_format(_need(tpo, "EVALUATION_SYS_TEMPLATE", files["tpo"]))
        loss_rev = _from_format(_need(tpo, "EVALUATION_SYS_TEMPLATE_REVISION", files["tpo"]))
        choices = _revision_choices(files["tpo"])
        for name in ("response_role", "constraints"):
            if name not in choices:
                raise ValueError(f"{files['tpo']}: no '{name} = (... if ... else ...)' found")
        (role_rev, role_tpo), (cons_rev, cons_tpo) = (
            choices["response_role"],
            choices["constraints"],
        )
        system = _class_string(files["engine"], "VllmServer", "DEFAULT_SYSTEM_PROMPT")
        fields = dict(
            generation_system=system,
            loss_template=loss,
            loss_template_revision=loss_rev,
            role_tpo=role_tpo,
            role_revision=role_rev,
            constraints_tpo=tuple(cons_tpo),
            constraints_revision=tuple(cons_rev),
        )
        fields.update(overrides)
        return cls._with_textgrad(
            _module_strings(files["bp"]),
            _module_strings(files["op"]),
            _module_strings(files["defaults"]),
            fields,
        )

    # ------------------------------------------------------------------ renderers
    def generation_messages(self, query: str) -> list[dict[str, str]]:
        msgs = (
            []
            if self.generation_system is None
            else [{"role": "system", "content": self.generation_system}]
        )
        return msgs + [{"role": "user", "content": query}]

    def loss_system(self, query: str, rejected: str | None) -> str:
        if rejected is None:
            return _fill(self.loss_template_revision, query=query)
        return _fill(self.loss_template, query=query, rejected=rejected)

    def loss_messages(self, query: str, chosen: str, rejected: str | None) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.loss_system(query, rejected)},
            {"role": "user", "content": chosen},
        ]

    def _role(self, rejected: str | None) -> str:
        return self.role_revision if rejected is None else self.role_tpo

    def _conversation(self, loss_system: str, chosen: str, critique: str) -> str:
        return "\n\n".join(
            [
                _block("LM_SYSTEM_PROMPT", loss_system),
                _block("LM_INPUT", chosen),
                _block("LM_OUTPUT", critique),
            ]
        )

    def _tg_conversation(self, query: str, chosen: str, rejected: str | None, critique: str):
        return self.textgrad["conversation"].format(
            system_prompt=self.loss_system(query, rejected), prompt=chosen, response_value=critique
        )

    def gradient_messages(
        self, query: str, chosen: str, rejected: str | None, critique: str
    ) -> list[dict[str, str]]:
        role = self._role(rejected)
        if self.textgrad is not None:  # str.format never re-scans inserted values: safe on braces
            t = self.textgrad
            user = (
                t["backward_start"].format(
                    variable_desc=role,
                    conversation=self._tg_conversation(query, chosen, rejected, critique),
                )
                + t["backward_objective"]
                + t["backward_evaluate"].format(
                    variable_desc=role, variable_short=short_value(chosen)
                )
            )
            return [
                {"role": "system", "content": self.backward_system},
                {"role": "user", "content": user},
            ]
        user = (
            f"You give feedback to a variable whose role is {_block('ROLE', role)}. A language model "
            "evaluated the variable as follows:\n\n"
            + self._conversation(self.loss_system(query, rejected), chosen, critique)
            + "\n\n<OBJECTIVE_FUNCTION>Criticise the variable in the light of the evaluation output "
            "above; improving that evaluation is the only goal.</OBJECTIVE_FUNCTION>\n\n"
            f"Give feedback on {self.response_desc} in this conversation, on this span:\n\n"
            + _block("VARIABLE", short_value(chosen))
            + f"\n\nDescribe how {self.response_desc} could be improved for the objective. Be "
            "critical and creative."
        )
        return [
            {"role": "system", "content": self.backward_system},
            {"role": "user", "content": user},
        ]

    def update_messages(
        self,
        query: str,
        chosen: str,
        rejected: str | None,
        critique: str,
        gradient: str,
    ) -> list[dict[str, str]]:
        role = self._role(rejected)
        cons = self.constraints_revision if rejected is None else self.constraints_tpo
        if self.textgrad is not None:
            t = self.textgrad
            info = {
                "variable_desc": role,
                "variable_short": short_value(chosen),
                "variable_grad": t["gradient_context"].format(
                    context=self._tg_conversation(query, chosen, rejected, critique),
                    response_desc=self.response_desc,
                    variable_desc=role,
                    feedback=gradient,
                ),
                "constraint_text": "\n".join(
                    f"Constraint {i + 1}: {c}" for i, c in enumerate(cons)
                ),
                "new_variable_start_tag": self.start_tag,
                "new_variable_end_tag": self.end_tag,
            }
            user = t["tgd_prefix"].format(**info)
            if cons:
                user += t["tgd_constraints"].format(**info)
            user += t["tgd_suffix"].format(**info)
            return [
                {"role": "system", "content": self.optimizer_system},
                {"role": "user", "content": user},
            ]
        constraints = "\n".join(f"Constraint {i + 1}: <{c}>" for i, c in enumerate(cons))
        user = (
            f"The variable to improve has the role {_block('ROLE', role)}.\n\n"
            f"The variable is the text in this span: {_block('VARIABLE', short_value(chosen))}\n\n"
            "Context and feedback for the variable:\n\n<CONTEXT>\n<CONVERSATION>"
            + self._conversation(self.loss_system(query, rejected), chosen, critique)
            + f"</CONVERSATION>\n\nThe output is used as {self.response_desc}.\n\n"
            f"Feedback on {self.response_desc}:\n\n"
            + _block("FEEDBACK", gradient)
            + "\n</CONTEXT>\n\n"
            f"Improve the variable ({role}) with the feedback in <FEEDBACK>.\n\n"
            f"<CONSTRAINTS>{constraints}</CONSTRAINTS>\n\n"
            f"Answer in this format: {self.start_tag}the improved variable{self.end_tag}, and "
            "nothing else."
        )
        return [
            {
                "role": "system",
                "content": _fill(
                    self.optimizer_system, start_tag=self.start_tag, end_tag=self.end_tag
                ),
            },
            {"role": "user", "content": user},
        ]

    # ------------------------------------------------------------------ parsers
    def detect_role(self, messages: list[dict[str, str]]) -> str:
        """``"generate"``, ``"loss"``, ``"gradient"`` or ``"update"`` for a rendered prompt."""
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        if system == self.backward_system:
            return "gradient"
        if system == _fill(self.optimizer_system, start_tag=self.start_tag, end_tag=self.end_tag):
            return "update"
        if self._match_loss(system) is not None:
            return "loss"
        return "generate"

    def _match_loss(self, system: str) -> dict[str, str | None] | None:
        for template in (self.loss_template, self.loss_template_revision):
            m = _template_regex(template).fullmatch(system)
            if m is not None:
                got = m.groupdict()
                return {"query": got.get("query"), "rejected": got.get("rejected")}
        return None

    def parse_loss(self, messages: list[dict[str, str]]) -> dict[str, str | None]:
        """``query``, ``chosen`` and ``rejected`` (``None`` in revision mode) of a loss prompt,
        read back through the loss templates themselves."""
        system, chosen = messages[0]["content"], messages[1]["content"]
        got = self._match_loss(system)
        if got is None:
            raise ValueError("the system prompt matches neither loss template of this PromptSet")
        return {"query": got["query"], "chosen": chosen, "rejected": got["rejected"]}

    def _parse_conversation(self, user: str, spaced_role: bool) -> dict[str, str | None]:
        loss_system = _unblock(user, "LM_SYSTEM_PROMPT")
        out = self.parse_loss(
            [{"role": "system", "content": loss_system}, {"role": "user", "content": ""}]
        )
        return {
            "query": out["query"],
            "rejected": out["rejected"],
            "chosen": _unblock(user, "LM_INPUT"),
            "critique": _unblock(user, "LM_OUTPUT"),
            "role": _unblock(user, "ROLE", spaced=spaced_role),
        }

    def parse_gradient(self, messages: list[dict[str, str]]) -> dict[str, str | None]:
        return self._parse_conversation(messages[-1]["content"], spaced_role=True)

    def parse_update(self, messages: list[dict[str, str]]) -> dict[str, str | None]:
        # TextGrad's update prompt writes <ROLE>..</ROLE> and <FEEDBACK>..</FEEDBACK> without
        # inner spaces; ours and both styles' gradient prompts use "<TAG> value </TAG>"
        user, ours = messages[-1]["content"], self.textgrad is None
        out = self._parse_conversation(user, spaced_role=ours)
        out["gradient"] = _unblock(user, "FEEDBACK", spaced=ours)
        return out


def extract_exact(text: str, start: str, end: str) -> str:
    """The text between the first ``start`` and the next ``end``, unstripped."""
    i = text.find(start)
    j = text.find(end, i + len(start)) if i >= 0 else -1
    if i < 0 or j < 0:
        raise ValueError(f"no {start}...{end} block in the prompt")
    return text[i + len(start) : j]


# -- reading the official repository's constants without running it -----------------------------
def _eval_str(node: ast.AST, env: dict[str, str]) -> str | None:
    """The value of a string expression built from literals, earlier module constants, ``+``
    and f-strings of names; ``None`` for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _eval_str(node.left, env), _eval_str(node.right, env)
        return None if a is None or b is None else a + b
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue) and v.conversion == -1 and v.format_spec is None:
                piece = _eval_str(v.value, env)
            else:
                piece = _eval_str(v, env)
            if piece is None:
                return None
            out.append(piece)
        return "".join(out)
    return None


def _assigned(body: list[ast.stmt], env: dict[str, str]) -> dict[str, str]:
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                value = _eval_str(node.value, env)
                if value is not None:
                    env[target.id] = value
    return env


def _module_strings(path: Path) -> dict[str, str]:
    return _assigned(ast.parse(path.read_text(encoding="utf-8")).body, {})


def _need(env: dict[str, str], name: str, path: Path) -> str:
    if name not in env:
        raise ValueError(f"{path} defines no string constant {name}")
    return env[name]


def _class_string(path: Path, cls: str, name: str) -> str:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            env = _assigned(node.body, {})
            if name in env:
                return env[name]
    raise ValueError(f"{path}: no string {cls}.{name}")


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _revision_choices(path: Path) -> dict[str, tuple]:
    """``{name: (revision value, tpo value)}`` for assignments ``name = (A if tpo_mode ==
    "revision" else B)`` in the official ``tpo_utils.py``."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.IfExp)
        ):
            continue
        test = node.value.test
        if not (
            isinstance(test, ast.Compare)
            and len(test.comparators) == 1
            and _literal(test.comparators[0]) == "revision"
            and isinstance(test.ops[0], ast.Eq)
        ):
            continue
        body, orelse = _literal(node.value.body), _literal(node.value.orelse)
        if body is not None and orelse is not None:
            out[node.targets[0].id] = (body, orelse)
    return out


def _from_format(template: str) -> str:
    """An official ``str.format`` loss template in our placeholder names: ``{rejected_response}``
    becomes ``{rejected}`` and doubled braces become single ones (what ``format`` prints)."""
    names = set(re.findall(r"(?<!\{)\{(\w+)\}(?!\})", template))
    unknown = names - {"query", "rejected_response"}
    if unknown:
        raise ValueError(f"unexpected placeholders {sorted(unknown)} in an official loss template")
    out = template.replace("{rejected_response}", "{rejected}")
    return out.replace("{{", "{").replace("}}", "}")
