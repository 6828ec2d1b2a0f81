"""An offline TPO policy: a tiny transformer trained from scratch to play the four TPO roles on a
synthetic task, behind a chat backend that reads the *real* rendered prompts (docs/tpo.md, "Reproduction").

Task: the query ``"solve: d0 d1 d2 d3 d4 d5"`` has the hidden answer ``g_i = (d_{5-i} + 1) mod 10``
(reverse and increment); a response is six digits. Reward: the fraction of correct positions minus
``0.25 |m - 6| / 6`` for a response of ``m`` digits. The role model is a noisy generator (each digit
wrong w.p. about ``rho_gen / 2``), a good but imperfect critic (lists the wrong positions, each
label flipped w.p. 0.1), a translator from critique to instruction, and an updater that re-draws
only the flagged positions, no better than fresh sampling (``rho_upd = rho_gen``). Any gain of TPO
over sampling must therefore come from which positions the feedback flags, plus selection.

The compact encoding (ours) left-pads every prompt to ``PROMPT_LEN`` and ends it with the query,
and writes position sets as six aligned ``@i``/``ok`` slots; with it the critic meets the planned
bar within ~750 training steps (docs/tpo.md has the history).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25.llm.base import BaseChat, Completion
from icml25.tpo.prompts import PromptSet

__all__ = [
    "RoleModel",
    "ScrambledCritiqueBackend",
    "TinyRoleBackend",
    "digit_reward",
    "make_query",
    "role_quality",
    "target_of",
    "train_role_model",
]

L = 6
VOCAB = (
    [str(i) for i in range(10)]
    + [f"@{i}" for i in range(L)]
    + [
        "<pad>",
        "<bos>",
        "<eos>",
        "<gen>",
        "<loss>",
        "<lossrev>",
        "<grad>",
        "<upd>",
        "<c>",
        "<r>",
        "<fix>",
        "<out>",
        "bad",
        "fix",
        "none",
        "ok",
    ]
)
TOK = {t: i for i, t in enumerate(VOCAB)}
PAD, EOS = TOK["<pad>"], TOK["<eos>"]
CRITIC_NOISE = 0.1  # each critic label flipped w.p. 0.1 (docs/tpo.md: an imperfect critic)
UPD_FLAG_NOISE = 0.3  # noise of the update instruction's positions (docs/tpo.md: "a noisy version")


def make_query(digits: list[int]) -> str:
    """The task query ``"solve: d0 d1 d2 d3 d4 d5"`` for the given digits (six in the task)."""
    return "solve: " + " ".join(str(d) for d in digits)


def parse_digits(text: str) -> list[int]:
    return [int(c) for c in re.findall(r"\d", text)]


def target_of(query: str) -> list[int]:
    """The hidden answer of a task query, ``g_i = (d_{5-i} + 1) mod 10`` (reverse and add 1);
    ``ValueError`` for a query with fewer than six digits after ``solve:``."""
    d = parse_digits(query.split("solve:", 1)[-1])[:L]
    if len(d) != L:
        raise ValueError(f"not a task query: {query!r}")
    return [(d[L - 1 - i] + 1) % 10 for i in range(L)]


def digit_reward(query: str, response: str) -> float:
    """``#correct positions / 6 - 0.25 |m - 6| / 6``."""
    g, y = target_of(query), parse_digits(response)
    m = len(y)
    hits = sum(1 for i in range(min(L, m)) if y[i] == g[i])
    return hits / L - 0.25 * abs(m - L) / L


# ---------------------------------------------------------------------- the model
class _Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: Tensor) -> Tensor:
        return self.extend(x)[0]

    def extend(
        self, x: Tensor, past: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """The block on ``x`` (causal within it) after the cached keys and values ``past`` of
        the earlier positions, if any (then ``x`` is one new position, which sees them all).
        Returns the output and this block's keys and values up to ``x``'s last position."""
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        shape = (B, T, self.heads, D // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            if T != 1:
                raise ValueError(f"after cached positions, extend one position at a time, got {T}")
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x)), (k, v)


class RoleModel(nn.Module):
    """A GPT-style decoder: 3 layers, 128 wide, 4 heads, 64 positions (the planned GPT-2 size)."""

    def __init__(self, n_layer: int = 3, d: int = 128, heads: int = 4, n_pos: int = 64) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(len(VOCAB), d), nn.Embedding(n_pos, d)
        self.blocks = nn.ModuleList(_Block(d, heads) for _ in range(n_layer))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, len(VOCAB), bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        return self.extend(ids)[0]

    def extend(
        self, ids: Tensor, past: list[tuple[Tensor, Tensor]] | None = None
    ) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """Logits of ``ids`` and every block's keys and values up to its last position; with
        ``past`` (from an earlier call), ``ids`` is the one next position (incremental decoding)."""
        start = 0 if past is None else past[0][0].shape[2]
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.shape[1], device=ids.device))
        cache = []
        for b, p in zip(self.blocks, past or [None] * len(self.blocks)):
            x, kv = b.extend(x, p)
            cache.append(kv)
        return self.head(self.ln(x)), cache


# ---------------------------------------------------------------------- encodings
def _enc(words: list[str]) -> list[int]:
    return [TOK[w] for w in words]


def _digits(ds: list[int]) -> list[str]:
    return [str(d) for d in ds[:L]] + ["0"] * max(0, L - len(ds))


def mask_tokens(positions) -> list[str]:
    """A set of positions as six aligned slots: ``@i`` where flagged, ``ok`` elsewhere (the compact
    encoding of ``bad @i @j ...`` / ``fix @i @j ...``; aligned slots are much easier for a tiny
    model to learn than a variable-length list)."""
    flagged = set(positions)
    return [f"@{i}" if i in flagged else "ok" for i in range(L)]


PROMPT_LEN = 23  # every prompt is left-padded to this length (see prompt_tokens)


def prompt_tokens(role: str, q: list[int], c=None, r=None, positions=None) -> list[str]:
    """The compact encoding of one role's prompt. Every prompt is left-padded to ``PROMPT_LEN``
    and ends with the query followed by ``<out>``, so the query digits and the six output slots sit
    at the same absolute positions in every role: the circuit that maps slot ``k`` to the query's
    digit ``5 - k`` is shared by the generator, the critic and the updater."""
    qd = _digits(q) if role != "grad" else []
    if role == "gen":
        body = []
    elif role in ("loss", "lossrev"):
        body = ["<c>", *_digits(c)] + (["<r>", *_digits(r)] if role == "loss" else [])
    elif role == "grad":
        body = ["bad", *mask_tokens(positions)]
    elif role == "upd":
        body = ["<c>", *_digits(c), "<fix>", *mask_tokens(positions)]
    else:
        raise ValueError(f"unknown role {role!r}; valid: gen, loss, lossrev, grad, upd")
    toks = ["<bos>", f"<{role}>", *body, *qd, "<out>"]
    return ["<pad>"] * (PROMPT_LEN - len(toks)) + toks


def _noisy(g: list[int], p: float, rng: random.Random) -> list[int]:
    return [rng.randrange(10) if rng.random() < p else g[i] for i in range(L)]


def _wrong(c: list[int], g: list[int]) -> list[int]:
    return [i for i in range(L) if c[i] != g[i]]


def _flip(pos: list[int], p: float, rng: random.Random) -> list[int]:
    return [i for i in range(L) if (i in pos) != (rng.random() < p)]


def make_example(rng: random.Random, rho: float = 0.5) -> tuple[list[str], list[str]]:
    """One (prompt, target) pair of a uniformly chosen role (the training data)."""
    q = [rng.randrange(10) for _ in range(L)]
    g = [(q[L - 1 - i] + 1) % 10 for i in range(L)]
    role = rng.choice(["gen", "loss", "lossrev", "grad", "upd"])
    if role == "gen":
        return prompt_tokens("gen", q), _digits(_noisy(g, rho, rng))
    if role in ("loss", "lossrev"):
        a = _noisy(g, rng.random() * 0.8, rng)
        b = _noisy(g, rng.random() * 0.8, rng)
        if len(_wrong(a, g)) > len(_wrong(b, g)):
            a, b = b, a
        pos = _flip(_wrong(a, g), CRITIC_NOISE, rng)
        return prompt_tokens(role, q, a, b), mask_tokens(pos)
    if role == "grad":
        pos = sorted(rng.sample(range(L), rng.randint(0, L)))
        return prompt_tokens("grad", q, positions=pos), mask_tokens(pos)
    c = _noisy(g, rng.random() * 0.8, rng)
    # the instruction is "a noisy version of c's wrong set" (docs/tpo.md; the noise level is ours): with
    # 0.1 the model learns to fix wrong digits by itself and ignore the flags, since they agree
    # with its own check 90% of the time; at 0.3 it has to read them (docs/tpo.md)
    pos = _flip(_wrong(c, g), UPD_FLAG_NOISE, rng)
    out = [
        (rng.randrange(10) if rng.random() < rho else g[i]) if i in pos else c[i] for i in range(L)
    ]
    return prompt_tokens("upd", q, c, positions=pos), _digits(out)


def _batch(examples) -> tuple[Tensor, Tensor]:
    seqs = [_enc(p + t + ["<eos>"]) for p, t in examples]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), PAD, dtype=torch.long)
    loss_mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for k, ((p, _t), s) in enumerate(zip(examples, seqs)):
        ids[k, : len(s)] = torch.tensor(s)
        loss_mask[k, len(p) : len(s)] = True  # predict the output and EOS only
    return ids, loss_mask


@dataclass
class TrainedRoles:
    model: RoleModel
    steps: int
    final_loss: float


def train_role_model(
    steps: int = 1500, batch: int = 128, lr: float = 1e-3, seed: int = 0, rho: float = 0.5
) -> TrainedRoles:
    """AdamW with a cosine schedule on freshly generated examples (docs/tpo.md: quick 1500, full 4000)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = RoleModel()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    loss_v = float("nan")
    model.train()
    for _ in range(steps):
        ids, lmask = _batch([make_example(rng, rho) for _ in range(batch)])
        # no attention mask: the left pads are part of the fixed layout (the same at inference)
        # and the right pads come after every position that is trained
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits[lmask[:, 1:]], ids[:, 1:][lmask[:, 1:]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        loss_v = float(loss.detach())
    model.eval()
    return TrainedRoles(model, steps, loss_v)


@torch.no_grad()
def sample(
    model: RoleModel,
    prompt: list[str],
    n: int,
    temperature: float,
    top_p: float,
    max_new: int = 8,
    generator: torch.Generator | None = None,
) -> list[list[str]]:
    """``n`` continuations of one prompt, decoded as a batch: the prompt runs once and its keys
    and values are shared by the ``n`` rows, then one position a step from the cache."""
    logits, past = model.extend(torch.tensor([_enc(prompt)]))
    past = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in past]
    logits = logits[:, -1].float().expand(n, -1)
    done = torch.zeros(n, dtype=torch.bool)
    outs: list[list[str]] = [[] for _ in range(n)]
    for step in range(max_new):
        if temperature <= 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1)
            if top_p < 1.0:
                sp, si = probs.sort(-1, descending=True)
                keep = sp.cumsum(-1) - sp < top_p
                sp = sp * keep
                probs = torch.zeros_like(probs).scatter(-1, si, sp)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        for k in range(n):
            if not done[k]:
                if int(nxt[k]) == EOS:
                    done[k] = True
                else:
                    outs[k].append(VOCAB[int(nxt[k])])
        if bool(done.all()) or step == max_new - 1:
            break
        logits, past = model.extend(nxt[:, None], past)
        logits = logits[:, -1].float()
    return outs


def _positions(words: list[str]) -> list[int]:
    return sorted({int(w[1:]) for w in words if re.fullmatch(r"@\d", w) and int(w[1:]) < L})


class TinyRoleBackend(BaseChat):
    """A :class:`~icml25.llm.ChatBackend` over a :class:`RoleModel`: reads the real TPO prompts
    (``PromptSet.parse_*``), runs the model on the compact encoding and renders its output as text
    (update outputs inside the improved-variable tags)."""

    name = "tiny-role-model"

    def __init__(self, model: RoleModel, prompts: PromptSet | None = None, seed: int = 0) -> None:
        self.model, self.prompts = model, prompts or PromptSet.default()
        self._unseeded = torch.Generator().manual_seed(seed)

    def _complete(self, messages, params) -> list[Completion]:
        P = self.prompts
        msgs = [dict(m) for m in messages]
        role = P.detect_role(msgs)
        # like a seeded server: a request with a seed is a deterministic function of the prompt
        # and the seed; without one, draws continue one stream. The prompt enters the seed: a
        # real LLM's logits differ so much between queries that one shared random stream does not
        # correlate their outcomes, but this model's error rates are nearly query-independent,
        # so a shared stream would give every query the same right/wrong pattern
        gen = self._unseeded
        if params.seed is not None:
            key = json.dumps([int(params.seed), msgs], sort_keys=True).encode()
            gen = torch.Generator().manual_seed(
                int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1
            )
        if role == "generate":
            q = parse_digits(msgs[-1]["content"].split("solve:", 1)[-1])
            prompt = prompt_tokens("gen", q)
        elif role == "loss":
            f = P.parse_loss(msgs)
            q = parse_digits(f["query"].split("solve:", 1)[-1])
            prompt = prompt_tokens(
                "loss" if f["rejected"] is not None else "lossrev",
                q,
                parse_digits(f["chosen"]),
                None if f["rejected"] is None else parse_digits(f["rejected"]),
            )
        elif role == "gradient":
            f = P.parse_gradient(msgs)
            prompt = prompt_tokens("grad", [], positions=_positions(f["critique"].split()))
        else:
            f = P.parse_update(msgs)
            q = parse_digits(f["query"].split("solve:", 1)[-1])
            prompt = prompt_tokens(
                "upd", q, parse_digits(f["chosen"]), positions=_positions(f["gradient"].split())
            )
        # None is the provider's default: plain sampling, like a server's generation config
        t = 1.0 if params.temperature is None else params.temperature
        top_p = 1.0 if params.top_p is None else params.top_p
        outs = sample(self.model, prompt, params.n, t, top_p, generator=gen)
        texts = []
        for words in outs:
            if role in ("generate", "update"):
                body = " ".join(w for w in words if w.isdigit())
                texts.append(body if role == "generate" else f"{P.start_tag}{body}{P.end_tag}")
            else:  # render the aligned mask back as the text a critic would write
                head = "bad" if role == "loss" else "fix"
                pos = _positions(words)
                texts.append(f"{head} " + (" ".join(f"@{i}" for i in pos) if pos else "none"))
        return [Completion(t) for t in texts]


class ScrambledCritiqueBackend(BaseChat):
    """The control of the reproduction: every loss (critique) output keeps its number of flagged
    positions but flags a uniformly random set of them.

    The random set is drawn like the model's own sampling: with a request seed it is a
    deterministic function of (control seed, request seed, prompt), so the control differs from
    the real critic only in what the critique says, not in how often it repeats itself (with the
    official fixed seed, an unchanged chosen response gives an identical critique)."""

    name = "scrambled-critiques"

    def __init__(self, inner: TinyRoleBackend, seed: int = 0) -> None:
        self.inner, self.seed = inner, seed
        self.gen = torch.Generator().manual_seed(seed)

    def _complete(self, messages, params) -> list[Completion]:
        msgs = [dict(m) for m in messages]
        out = self.inner._complete(messages, params)
        if self.inner.prompts.detect_role(msgs) != "loss":
            return out
        gen = self.gen
        if params.seed is not None:
            key = json.dumps([self.seed, int(params.seed), msgs], sort_keys=True).encode()
            gen = torch.Generator().manual_seed(
                int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1
            )
        res = []
        for c in out:
            k = len(_positions(c.text.split()))
            pos = sorted(torch.randperm(L, generator=gen)[:k].tolist())
            res.append(Completion("bad " + (" ".join(f"@{i}" for i in pos) if pos else "none")))
        return res


def role_quality(model, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Generator per-digit accuracy (temperature 1, as candidates are sampled), critic
    per-position accuracy against the true wrong set (greedy, and sampled at the feedback
    temperature 0.7 that TPO uses), updater copy rate of unflagged digits (quality bars: 0.55 +/-
    0.07, >= 0.85, >= 0.95), and the updater's fix rate at flagged wrong digits (the training
    data's rate is 0.55; no bar)."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    gen, crit, crit_t, copy, fix = [], [], [], [], []
    for _ in range(n):
        q = [rng.randrange(10) for _ in range(L)]
        tgt = [(q[L - 1 - i] + 1) % 10 for i in range(L)]
        d = [
            int(w)
            for w in sample(model, prompt_tokens("gen", q), 1, 1.0, 1.0, generator=g)[0]
            if w.isdigit()
        ]
        gen.append(sum(1 for i in range(min(L, len(d))) if d[i] == tgt[i]) / L)
        c, r = _noisy(tgt, rng.random() * 0.8, rng), _noisy(tgt, rng.random() * 0.8, rng)
        if len(_wrong(c, tgt)) > len(_wrong(r, tgt)):
            c, r = r, c
        wrong = set(_wrong(c, tgt))
        for temp, acc in ((0.0, crit), (0.7, crit_t)):
            pos = set(
                _positions(
                    sample(model, prompt_tokens("loss", q, c, r), 1, temp, 1.0, generator=g)[0]
                )
            )
            acc.append(sum(1 for i in range(L) if (i in pos) == (i in wrong)) / L)
        # copy: unflagged digits kept under flags drawn independently of correctness (an updater
        # that fixes wrong digits on its own, ignoring the instruction, fails this); fix: the
        # flagged wrong digits that come back right under the exact instruction
        flags = sorted(i for i in range(L) if rng.random() < 0.5)
        for fl, kind in ((flags, "copy"), (sorted(wrong), "fix")):
            d = [
                int(w)
                for w in sample(
                    model, prompt_tokens("upd", q, c, positions=fl), 1, 1.0, 1.0, generator=g
                )[0]
                if w.isdigit()
            ]
            if len(d) != L:
                continue
            if kind == "copy":
                copy += [d[i] == c[i] for i in range(L) if i not in fl]
            else:
                fix += [d[i] == tgt[i] for i in wrong]
    return {
        "gen": statistics.mean(gen),
        "critic": statistics.mean(crit),
        "critic at T=0.7": statistics.mean(crit_t),
        "copy": sum(copy) / max(1, len(copy)),
        "fix": sum(fix) / max(1, len(fix)),
    }
