"""DPS side by side with the official code: the call graph, then throughput against a server.

**Call graph.** The paper's procedure (arXiv:2412.12722, §3, Fig. 2) is a fixed sequence of model
calls: the strong agent answers, each weak agent answers on its crop and describes it, a helper
summarises long texts and checks whether the weak answer is informative, the strong agent
re-analyses under the supervision and answers again. Given a checkout of the official code
(``git clone https://github.com/tools-only/DPS``; it is a script, not a package), this script
imports its ``weak2strong`` with its API clients replaced by a recorder, runs it and
``icml25.dps.DPSDefense`` on the same scripted replies, and prints both call sequences: who is
called, with or without an image, how long that agent's context is, and which scripted replies
its prompt carries. The only expected difference is the helper's context after its yes/no check,
which the official code forgets to clear (docs/dps.md, Decisions).

**Throughput.** Against one local OpenAI-compatible server that adds ``LATENCY`` seconds to every
request: the official control flow (one query at a time; its 1 s sleep before every call left
out) vs ``respond_batch(workers=16)``. The floor is the larger of one query's chain of
dependent calls and all calls spread over 16 connections.

Run: ``python benchmarks/dps_call_graph.py [--official /path/to/DPS]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from icml25.dps import DPSDefense, LLMHelper
from icml25.llm import CallableChat, ChatServer, OpenAIChat

LATENCY = 0.05
N_QUERIES = 32
WORKERS = 16
LONG = " ".join(["word"] * 24)  # more than 20 words: the helper summarises it
MARK = re.compile(r"mk_\w+")


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict))


def _has_image(content) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content
    )


class Model:
    """Scripted replies by role (read from the system prompt) and turn, recording every call."""

    def __init__(self, weak_answer: str) -> None:
        self.weak_answer, self.calls = weak_answer, []

    def role(self, messages) -> str:
        system = _text(messages[0]["content"]).lower() if messages[0]["role"] == "system" else ""
        if "entire image" in system or "whole image" in system:
            return "strong"
        if "local" in system:
            return "weak"
        return "other"

    def __call__(self, messages, **_) -> str:
        role = self.role(messages)
        users = [m for m in messages if m["role"] == "user"]
        last = _text(users[-1]["content"])
        self.calls.append(
            (
                role,
                _has_image(users[-1]["content"]),
                len(messages),
                tuple(sorted(set(MARK.findall(last)))),
            )
        )
        turn = len(users)
        if role == "strong":
            return f"mk_strong{turn} The picture shows a cat."
        if role == "weak":
            return self.weak_answer if turn == 1 else f"mk_description {LONG}"
        if "coordinates" in last:
            return "{'obj1': [0, 0, 8, 8]}"
        if "YES" in last:  # the informativeness check
            return "NO" if "mk_unsure" in last else "YES"
        return f"mk_summary_of_{(MARK.findall(last) or ['text'])[0][3:]}"


SCENARIOS = [  # (name, official crop, agents, ours crop, weak answer)
    ("centre, short informative answer", "crop", 1, "center", "mk_weak It is a dog."),
    (
        "centre, long uninformative answer",
        "crop",
        1,
        "center",
        f"mk_unsure I cannot determine it. {LONG}",
    ),
    ("random K=3, long answers", "random_crop", 3, "random", f"mk_weak {LONG}"),
    ("auto (K=3)", "auto_crop", 3, "auto", "mk_weak It is a dog."),
]


@contextlib.contextmanager
def official_module(folder: Path):
    """``weak2strong`` of the official checkout with its clients stubbed (nothing is sent)."""
    stubs = {}
    for name in ("dashscope", "google", "google.generativeai", "openai", "datasets"):
        mod = types.ModuleType(name)
        mod.OpenAI = lambda **kw: None
        mod.load_dataset = lambda *a, **kw: None
        mod.configure = lambda **kw: None
        stubs[name] = mod
    stubs["google"].generativeai = stubs["google.generativeai"]
    saved = {k: sys.modules.get(k) for k in (*stubs, "agent", "util", "weak2strong")}
    cwd = os.getcwd()
    sys.modules.update(stubs)
    sys.path.insert(0, str(folder))
    os.chdir(folder)  # the official code reads its prompt files relative to the working folder
    try:
        for k in ("agent", "util", "weak2strong"):
            sys.modules.pop(k, None)
        import weak2strong

        yield weak2strong
    finally:
        os.chdir(cwd)
        sys.path.remove(str(folder))
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def run_official(mod, model: Model, crop: str, k: int, image: Path, tmp: Path) -> list:
    agent = sys.modules["agent"]

    def vlm_query(self, instruction, image_file=None):
        self._add_vlm_event(instruction, image_file)
        self.memory_lst.append({"role": "assistant", "content": model(self.memory_lst)})

    def llm_query(self, instruction):
        self._add_llm_event(instruction)
        self.memory_lst.append({"role": "assistant", "content": model(self.memory_lst)})

    agent.GPTAgent._query, agent.JudgeAgent._query = vlm_query, llm_query
    item = {"whole_image": str(image), "instruction": "What animal is in the picture?"}
    mod.weak2strong(item, "gpt-4o", crop=crop, agent_number=k, folder=str(tmp) + "/")
    return model.calls


def run_ours(model: Model, crop: str, k: int, image: Path) -> list:
    chat = CallableChat(model)
    DPSDefense(chat, LLMHelper(chat), crop=crop, n_agents=k).respond(
        image, "What animal is in the picture?"
    )
    return model.calls


def call_graph(official: Path | None) -> None:
    from PIL import Image

    print("== call graph: (role, image?, context length, scripted replies in the prompt) ==")
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "whole.png"
        Image.fromarray(
            np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
        ).save(image)
        ctx = official_module(official) if official else contextlib.nullcontext()
        with ctx as mod:
            for name, off_crop, k, our_crop, weak in SCENARIOS:
                ours = run_ours(Model(weak), our_crop, k, image)
                theirs = (
                    run_official(mod, Model(weak), off_crop, k, image, Path(tmp)) if mod else None
                )
                print(
                    f"\n-- {name}: {len(ours)} calls (ours)"
                    + ("" if theirs is None else f", {len(theirs)} (official)")
                )
                same_roles = theirs is not None and [c[:2] for c in ours] == [c[:2] for c in theirs]
                for i, c in enumerate(ours):
                    o = theirs[i] if theirs and i < len(theirs) else None
                    flag = "" if o is None or o == c else "   <- differs"
                    print(
                        f"  {i:2d} ours {c!s:70.70s}"
                        + ("" if o is None else f" | official {o!s:70.70s}{flag}")
                    )
                if theirs is not None:
                    diff = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
                    print(
                        f"  roles and image flags identical: {same_roles}; rows that differ: {diff or 'none'}"
                        + (
                            ""
                            if not diff
                            else " (helper context only)"
                            if all(
                                ours[i][0] == "other"
                                and ours[i][1:2] == theirs[i][1:2]
                                and ours[i][3] == theirs[i][3]
                                for i in diff
                            )
                            else ""
                        )
                    )
    if official is None:
        print("\n(official side skipped: pass --official /path/to/a/checkout/of/tools-only/DPS)")


def throughput() -> None:
    from PIL import Image

    model = Model("mk_weak It is a dog.")
    img = Image.fromarray(np.full((32, 32, 3), 128, dtype=np.uint8))
    items = [(img, f"Question {i}: what animal is it?") for i in range(N_QUERIES)]
    print(
        f"\n== throughput: {N_QUERIES} queries, DPS centre K=1, server latency {LATENCY:.2f} s per request =="
    )
    with ChatServer(CallableChat(model), latency=LATENCY, serialize=False) as server:
        with OpenAIChat(server.url, "m", concurrency=WORKERS) as chat:
            dps = DPSDefense(chat, LLMHelper(chat), crop="center")
            per_query = sum(dps.respond(*items[0]).n_calls.values())
            t0 = time.perf_counter()
            for it in items:  # the official control flow: one query at a time
                dps.respond(*it)
            t_loop = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = dps.respond_batch(items, workers=WORKERS)
            t_batch = time.perf_counter() - t0
    assert all(r.final for r in out)
    floor_loop = N_QUERIES * per_query * LATENCY
    floor_batch = max(per_query * LATENCY, N_QUERIES * per_query * LATENCY / WORKERS)
    print(f"{per_query} calls per query (strong 3, weak 2, helper {per_query - 5})")
    print(f"{'client':40s} {'seconds':>8s} {'floor':>7s} {'x floor':>8s}")
    print(
        f"{'one query at a time (official flow)':40s} {t_loop:8.2f} {floor_loop:7.2f} {t_loop / floor_loop:8.2f}"
    )
    print(
        f"{f'respond_batch(workers={WORKERS})':40s} {t_batch:8.2f} {floor_batch:7.2f} {t_batch / floor_batch:8.2f}"
    )
    print(
        f"speed-up over the official flow: {t_loop / t_batch:.1f}x "
        f"(the official code also sleeps 1 s before every call: {N_QUERIES * per_query} s more)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", type=Path, help="a checkout of https://github.com/tools-only/DPS")
    args = ap.parse_args()
    if args.official is not None and not (args.official / "weak2strong.py").is_file():
        ap.error(f"--official {args.official}: no weak2strong.py there")
    call_graph(args.official.resolve() if args.official else None)
    throughput()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
