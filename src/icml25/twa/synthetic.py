"""A synthetic language pair with MQM-style annotations, for the offline reproduction
(docs/twa.md "Reproduction").

Source words are ``s{lemma}`` (singular) or ``s{lemma}p`` (plural) over 24 lemmas (adjectives
0-5, nouns 6-17, verbs 18-23), in five templates (``N V``, ``A N V``, ``N V N``, ``A N V A N``,
``N V A N``); adjectives agree in number with the next noun, verbs with the first noun. The gold
translation turns every word into a stem ``t{sigma(lemma)}`` and a suffix ``-a0/-a1``,
``-n0/-n1``, ``-v0/-v1`` (class, number) and swaps every ``A N`` into ``N A``.

"Other" systems make five kinds of errors (stem confusion within a class pair: Major
mistranslation; suffix number flip: Minor grammar; an ``A N`` pair left in source order: Minor
word order; a dropped word: Major omission, marked in the source; an inserted word: Major
addition). The training annotator marks them at word level (coarser than the wrong token, as
human spans are), keeps at most 3 per segment and misses each with probability 0.15; it writes
MQM TSV rows that :func:`load_mqm_tsv` reads back. The evaluation annotator scores any output
against the gold translation with a Damerau-Levenshtein word alignment.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field

from icml25.twa.annotations import AnnotatedTranslation, load_mqm_tsv

__all__ = [
    "BASE_RATES",
    "SYSTEM_MULTIPLIERS",
    "SyntheticMT",
    "Translation",
    "base_rates_pairs",
    "evaluate_output",
    "translate_greedy",
]

ADJ, NOUN, VERB = range(0, 6), range(6, 18), range(18, 24)
CLASS = {**dict.fromkeys(ADJ, "a"), **dict.fromkeys(NOUN, "n"), **dict.fromkeys(VERB, "v")}
TEMPLATES = (
    ("N", "V"),
    ("A", "N", "V"),
    ("N", "V", "N"),
    ("A", "N", "V", "A", "N"),
    ("N", "V", "A", "N"),
)
#: per-word rates of stem confusion, agreement flip, omission, addition; per A N pair: order
BASE_RATES = {"stem": 0.12, "agr": 0.12, "ord": 0.30, "om": 0.04, "add": 0.04}
SYSTEM_MULTIPLIERS = (0.5, 1.0, 1.5, 2.0)
SEVERITY = {"stem": "Major", "agr": "Minor", "ord": "Minor", "om": "Major", "add": "Major"}
CATEGORY = {
    "stem": "Accuracy/Mistranslation",
    "agr": "Fluency/Grammar",
    "ord": "Fluency/Word order",
    "om": "Accuracy/Omission",
    "add": "Accuracy/Addition",
}
WEIGHT = {"Major": 5.0, "Minor": 1.0}


@dataclass
class Word:
    """A target word: stem lemma (its source lemma), class, number."""

    lemma: int
    number: int

    @property
    def cls(self) -> str:
        return CLASS[self.lemma]


@dataclass
class Translation:
    """A system output as words plus the errors injected into it: ``errors`` are
    ``(kind, word index range in the output, source word index for omissions)``."""

    words: list[tuple[int, int]]  # (stem lemma, number), in output order
    errors: list[tuple[str, tuple[int, int], int | None]] = field(default_factory=list)


class SyntheticMT:
    """The task for one seed: the stem permutation and the confusion pairs."""

    def __init__(self, seed: int = 0) -> None:
        r = random.Random(seed)
        perm = list(range(24))
        r.shuffle(perm)
        self.sigma = perm  # target stem id of each lemma
        self.partner: dict[int, int] = {}
        for group in (ADJ, NOUN, VERB):
            g = list(group)
            r.shuffle(g)
            for a, b in zip(g[::2], g[1::2]):
                self.partner[a], self.partner[b] = b, a
        self.seed = seed

    # -- vocabulary --------------------------------------------------------------------------
    def vocabulary(self) -> list[str]:
        src = [f"s{i}" for i in range(24)] + [f"s{i}p" for i in range(24)]
        tgt = [f"t{i}" for i in range(24)] + [f"-{c}{n}" for c in "anv" for n in (0, 1)]
        return src + tgt + ["="]

    # -- sources -----------------------------------------------------------------------------
    def sample_source(self, r: random.Random) -> list[tuple[int, int]]:
        """``[(lemma, number)]`` in source order, agreement applied."""
        tpl = r.choice(TEMPLATES)
        out: list[tuple[int, int]] = []
        for c in tpl:
            pool = {"A": ADJ, "N": NOUN, "V": VERB}[c]
            out.append((r.choice(list(pool)), r.randrange(2)))
        for i, c in enumerate(tpl):  # agreement
            if c == "A":
                out[i] = (out[i][0], out[i + 1][1])
            elif c == "V":
                first_noun = next(j for j, d in enumerate(tpl) if d == "N")
                out[i] = (out[i][0], out[first_noun][1])
        return out

    @staticmethod
    def source_text(src: list[tuple[int, int]]) -> str:
        return " ".join(f"s{lem}" + ("p" if num else "") for lem, num in src)

    @staticmethod
    def gold_words(src: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Target word order: every ``A N`` becomes ``N A``."""
        out, i = [], 0
        while i < len(src):
            if CLASS[src[i][0]] == "a" and i + 1 < len(src) and CLASS[src[i + 1][0]] == "n":
                out += [src[i + 1], src[i]]
                i += 2
            else:
                out.append(src[i])
                i += 1
        return out

    def word_text(self, w: tuple[int, int]) -> str:
        lem, num = w
        return f"t{self.sigma[lem]} -{CLASS[lem]}{num}"

    def target_text(self, words: list[tuple[int, int]]) -> str:
        return " ".join(self.word_text(w) for w in words)

    def gold(self, src: list[tuple[int, int]]) -> str:
        return self.target_text(self.gold_words(src))

    # -- systems ------------------------------------------------------------------------------
    def translate(self, src, r: random.Random, rates: dict[str, float]) -> Translation:
        """An erroneous translation of ``src`` with errors at ``rates``."""
        words: list[list] = []  # [lemma, number, source index]
        errors = []
        i = 0
        while i < len(src):
            if CLASS[src[i][0]] == "a" and i + 1 < len(src) and CLASS[src[i + 1][0]] == "n":
                if r.random() < rates["ord"]:
                    words += [[*src[i], i, "ord0"], [*src[i + 1], i + 1, "ord1"]]
                else:
                    words += [[*src[i + 1], i + 1, None], [*src[i], i, None]]
                i += 2
            else:
                words.append([*src[i], i, None])
                i += 1
        out: list[list] = []
        kinds: list[list[str]] = []
        tags: list[str | None] = []
        for w in words:
            lem, num, si, tag = w
            ks = []
            if r.random() < rates["om"]:
                errors.append(("om", (len(out), len(out)), si))
                continue
            if r.random() < rates["stem"]:
                lem, ks = self.partner[lem], ks + ["stem"]
            if r.random() < rates["agr"]:
                num, ks = 1 - num, ks + ["agr"]
            out.append([lem, num])
            kinds.append(ks)
            tags.append(tag)
            if r.random() < rates["add"] and tag != "ord0":  # never inside a kept A N pair
                out.append([r.randrange(24), r.randrange(2)])
                kinds.append(["add"])
                tags.append(None)
        for k, ks in enumerate(kinds):
            if tags[k] == "ord0" and k + 1 < len(tags) and tags[k + 1] == "ord1":
                errors.append(("ord", (k, k + 2), None))  # the pair left in source order
            for kind in ks:
                errors.append((kind, (k, k + 1), None))
        return Translation([tuple(w) for w in out], errors)

    # -- annotation ---------------------------------------------------------------------------
    def annotate(
        self,
        src,
        tr: Translation,
        r: random.Random,
        *,
        system: str,
        seg_id: str,
        max_errors: int = 3,
        miss: float = 0.15,
    ) -> list[list[str]]:
        """MQM TSV rows (without the header) for one system output: word-level spans, at most
        ``max_errors`` (most severe first, then left to right), each missed with prob ``miss``."""
        srct = self.source_text(src)
        tgt = self.target_text(list(tr.words))
        starts, pos = [], 0
        for w in tr.words:
            starts.append(pos)
            pos += len(self.word_text(w)) + 1
        errs = sorted(tr.errors, key=lambda e: (-WEIGHT[SEVERITY[e[0]]], e[1][0]))[:max_errors]
        errs = [e for e in errs if r.random() >= miss]
        base = [system, "doc", "0", seg_id, "rater1"]
        if not errs:
            return [[*base, srct, tgt, "No-error", "No-error"]]
        rows = []
        for kind, (a, b), si in errs:
            if kind == "om":
                words = srct.split(" ")
                marked = " ".join(f"<v>{x}</v>" if j == si else x for j, x in enumerate(words))
                rows.append([*base, marked, tgt, CATEGORY[kind], SEVERITY[kind]])
                continue
            ca = starts[a]
            cb = starts[b - 1] + len(self.word_text(tr.words[b - 1]))
            rows.append(
                [
                    *base,
                    srct,
                    f"{tgt[:ca]}<v>{tgt[ca:cb]}</v>{tgt[cb:]}",
                    CATEGORY[kind],
                    SEVERITY[kind],
                ]
            )
        return rows

    def annotated_data(
        self, n_sources: int, seed: int, *, rates=BASE_RATES, multipliers=SYSTEM_MULTIPLIERS
    ) -> tuple[list[AnnotatedTranslation], list]:
        """``n_sources`` fresh sources x the systems, annotated and loaded through
        :func:`load_mqm_tsv`. Returns the records and the sources ``[(lemma, number)]``."""
        r = random.Random(seed)
        lines = ["system\tdoc\tdoc_id\tseg_id\trater\tsource\ttarget\tcategory\tseverity"]
        sources = []
        for s in range(n_sources):
            src = self.sample_source(r)
            sources.append(src)
            for k, m in enumerate(multipliers):
                tr = self.translate(src, r, {key: v * m for key, v in rates.items()})
                for row in self.annotate(src, tr, r, system=f"sys{k}", seg_id=str(s)):
                    lines.append("\t".join(row))
        data = load_mqm_tsv(io.StringIO("\n".join(lines) + "\n"))
        return data, sources

    # -- evaluation ---------------------------------------------------------------------------
    def parse_output(self, text: str) -> tuple[list[tuple[int, int] | None], int]:
        """Output words as ``(lemma, number)`` (None for a malformed word) and the number of
        malformed tokens."""
        inv = {f"t{s}": lem for lem, s in enumerate(self.sigma)}
        toks = text.split()
        words: list[tuple[int, int] | None] = []
        bad, i = 0, 0
        while i < len(toks):
            t = toks[i]
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if (
                t in inv
                and nxt is not None
                and len(nxt) == 3
                and nxt[0] == "-"
                and nxt[1] in "anv"
                and nxt[2] in "01"
            ):
                lem = inv[t]
                if nxt[1] == CLASS[lem]:
                    words.append((lem, int(nxt[2])))
                else:
                    words.append(None)
                    bad += 2
                i += 2
            else:
                words.append(None)
                bad += 1
                i += 1
        return words, bad


def _sub_cost(w, g) -> float:
    """Alignment cost of output word ``w`` against gold word ``g``: 0 equal, 0.5 same stem
    (agreement), 1 another stem of the same class, 1.5 otherwise (so that an alignment pairs a
    word with the gold word it most resembles)."""
    if w == g:
        return 0.0
    if w is None:
        return 1.0
    if w[0] == g[0]:
        return 0.5
    return 1.0 if CLASS[w[0]] == CLASS[g[0]] else 1.5


def _classify_sub(w, g, counts: dict) -> None:
    if w == g:
        return
    if w is None:
        counts["fluency"] += 1
        return
    if w[0] != g[0]:
        counts["mistranslation"] += 1
    if w[1] != g[1]:
        counts["agreement"] += 1


def evaluate_output(task: SyntheticMT, src, output: str) -> dict:
    """MQM-style penalty of ``output`` against the gold translation of ``src``.

    Output words are aligned to the gold words by a weighted Damerau-Levenshtein alignment
    (substitution 0.5 for the same stem, 1 for another stem of the same class, 1.5 otherwise;
    insertion, deletion 1; an adjacent ``A N``/``N A`` swap 1 plus its two substitutions; ties:
    match > substitution > swap > deletion > insertion). A substituted word counts a Major
    mistranslation when its stem differs and a Minor agreement error when its number differs
    (both when both differ); a swapped ``A N`` pair a Minor order error; a deletion a Major
    omission; an insertion a Major addition; a malformed word a Minor fluency error. Penalty: 5
    per Major, 1 per Minor; 25 (non-translation) for an empty output or one with more than half
    of its tokens malformed. (Unit costs, as first planned, tie between alignments and misread
    outputs with several errors; docs/twa.md.)"""
    gold = task.gold_words(src)
    words, bad = task.parse_output(output)
    n_tok = len(output.split())
    counts = {
        "mistranslation": 0,
        "agreement": 0,
        "order": 0,
        "omission": 0,
        "addition": 0,
        "fluency": 0,
    }
    if n_tok == 0 or bad * 2 > n_tok:
        return {"penalty": 25.0, "exact": False, "non_translation": True, **counts}
    n, m = len(words), len(gold)
    INF = float("inf")
    cost = [[INF] * (m + 1) for _ in range(n + 1)]
    back: list[list[str | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    rank = {"match": 0, "sub": 1, "swap": 2, "del": 3, "ins": 4}

    def swappable(i: int, j: int) -> bool:
        a, b = gold[j - 2], gold[j - 1]
        x, y = words[i - 2], words[i - 1]
        if x is None or y is None or {CLASS[a[0]], CLASS[b[0]]} != {"a", "n"}:
            return False
        return CLASS[x[0]] == CLASS[b[0]] and CLASS[y[0]] == CLASS[a[0]]

    for i in range(n + 1):
        for j in range(m + 1):
            if i == j == 0:
                continue
            opts = []
            if i and j:
                c = _sub_cost(words[i - 1], gold[j - 1])
                opts.append((cost[i - 1][j - 1] + c, "match" if c == 0 else "sub"))
            if i > 1 and j > 1 and swappable(i, j):
                c = 1 + _sub_cost(words[i - 2], gold[j - 1]) + _sub_cost(words[i - 1], gold[j - 2])
                opts.append((cost[i - 2][j - 2] + c, "swap"))
            if j:
                opts.append((cost[i][j - 1] + 1, "del"))  # a gold word missing from the output
            if i:
                opts.append((cost[i - 1][j] + 1, "ins"))  # an output word not in the gold
            c, op = min(opts, key=lambda o: (o[0], rank[o[1]]))
            cost[i][j], back[i][j] = c, op
    i, j = n, m
    while i or j:
        op = back[i][j]
        if op in ("match", "sub"):
            _classify_sub(words[i - 1], gold[j - 1], counts)
            i, j = i - 1, j - 1
        elif op == "swap":
            counts["order"] += 1
            _classify_sub(words[i - 2], gold[j - 1], counts)
            _classify_sub(words[i - 1], gold[j - 2], counts)
            i, j = i - 2, j - 2
        elif op == "del":
            counts["omission"] += 1
            j -= 1
        else:
            if words[i - 1] is None:
                counts["fluency"] += 1
            else:
                counts["addition"] += 1
            i -= 1
    major = counts["mistranslation"] + counts["omission"] + counts["addition"]
    minor = counts["agreement"] + counts["order"] + counts["fluency"]
    pen = 5.0 * major + 1.0 * minor
    return {"penalty": pen, "exact": pen == 0 and words == gold, "non_translation": False, **counts}


def base_rates_pairs(
    task: SyntheticMT,
    n: int,
    seed: int,
    *,
    p_stem: float = 0.20,
    p_agr: float = 0.15,
    p_ord: float = 0.30,
) -> list[tuple[str, str]]:
    """``(source, target)`` pairs for the base ("pretrained") model: gold targets corrupted by
    its error profile, stem confusions only on a fixed half of the confusion pairs (its blind
    spots: one lemma of every second pair, both directions), number flips and A N orders."""
    r = random.Random(seed)
    pairs = sorted({tuple(sorted(p)) for p in task.partner.items()})
    blind = {x for a, b in pairs[::2] for x in (a, b)}
    out = []
    for _ in range(n):
        src = task.sample_source(r)
        tr = task.translate(
            src, r, {"stem": 0.0, "agr": p_agr, "ord": p_ord, "om": 0.0, "add": 0.0}
        )
        words = [
            (task.partner[lem], num) if lem in blind and r.random() < p_stem else (lem, num)
            for lem, num in tr.words
        ]
        out.append((task.source_text(src), task.target_text(words)))
    return out


def translate_greedy(
    model,
    tokenizer,
    sources: list[str],
    prompt_fn,
    *,
    max_new_tokens: int = 30,
    batch_size: int = 128,
) -> list[str]:
    """Greedy translations of ``sources`` (prompts from ``prompt_fn``) with the library's
    decoder (:mod:`icml25.llm.sampling`), as text."""
    import torch

    from icml25.llm.sampling import make_decoder, sample

    model.eval()
    dec = make_decoder(model)
    dev = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out: list[str] = []
    for s in range(0, len(sources), batch_size):
        prompts = [prompt_fn(x) for x in sources[s : s + batch_size]]
        with torch.no_grad():
            ids = sample(
                dec,
                prompts,
                max_new_tokens=max_new_tokens,
                temperature=0.0,
                top_p=1.0,
                eos_ids=[tokenizer.eos_token_id],
                pad_id=pad,
                generators=[None] * len(prompts),
                device=dev,
            )
        out += [tokenizer.decode(x, skip_special_tokens=True).strip() for x in ids]
    return out
