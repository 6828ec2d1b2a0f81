"""The 19 papers of icml25: one entry each, implemented or planned, never hidden.

A paper is *implemented* once its package ships a reproduction; the entry then names it as
``"module:function"`` in :attr:`Paper.repro`. ``tests/test_registry.py`` keeps this table in step
with the files on disk, with the project's paper notes (outside this repository) and with the README table.

This module imports nothing heavy: ``icml25 list`` must stay instant.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["PAPERS", "Paper", "get", "load_entry_point", "load_repro", "resolve", "slugs"]


@dataclass(frozen=True)
class Paper:
    """One ICML 2025 paper and where its implementation lives.

    Attributes:
        number: the paper's number in the library (1..19).
        slug: the package name under ``icml25`` and of its page ``docs/<slug>.md``.
        title: the paper's full title.
        link: the arXiv id (``arXiv:YYMM.NNNNN``) or, where there is none, the PMLR/OpenReview link.
        repro: entry point ``"module:function"`` of the reproduction, or ``None`` while planned.
        usage: one line of Python showing the method on the user's own data (README table).
        cli: entry point ``"module:function"`` adding a per-paper subcommand, or ``None``. The
            function receives argparse's subparsers object and must not import torch at module level.
    """

    number: int
    slug: str
    title: str
    link: str
    repro: str | None = None
    usage: str | None = None
    cli: str | None = None

    @property
    def module(self) -> str:
        return f"icml25.{self.slug}"

    @property
    def status(self) -> str:
        return "implemented" if self.repro else "planned"

    @property
    def url(self) -> str:
        if self.link.startswith("arXiv:"):
            return f"https://arxiv.org/abs/{self.link.removeprefix('arXiv:')}"
        return self.link


PAPERS: tuple[Paper, ...] = (
    Paper(
        1,
        "contrastive",
        "On the Similarities of Embeddings in Contrastive Learning",
        "arXiv:2506.09781",
        repro="icml25.contrastive.repro:run",
        usage='icml25.contrastive.ContrastiveLoss("simclr", 0.2, vrns_weight=30, n_train=N)(z1, z2)',
    ),
    Paper(
        2,
        "distinguishability",
        "Comparing Comparisons: Informative and Easy Human Feedback with Distinguishability Queries",
        "https://openreview.net/forum?id=Cf8gsqWrua",
        repro="icml25.distinguishability.repro:run",
        usage="icml25.distinguishability.select_dq(RewardEnsemble(obs_dim, act_dim), segments, 10)  # in SB3: model.learn(n, callback=sb3.PreferenceFeedbackCallback(learner, teacher))",
    ),
    Paper(
        3,
        "orbench",
        "OR-Bench: An Over-Refusal Benchmark for Large Language Models",
        "arXiv:2405.20947",
        repro="icml25.orbench.repro:run",
        usage="icml25.orbench.evaluate(icml25.llm.OpenAIChat(url, model), icml25.orbench.load_orbench(path, 'hard-1k'))",
        cli="icml25.orbench.cli:add_parser",
    ),
    Paper(
        4,
        "lapsum",
        "LapSum – One Method to Differentiate Them All: Ranking, Sorting and Top-k Selection",
        "arXiv:2503.06242",
        repro="icml25.lapsum.repro:run",
        usage="icml25.lapsum.soft_topk(scores, k=5, alpha=0.1)",
    ),
    Paper(
        5,
        "swan",
        "SWAN: SGD with Normalization and Whitening Enables Stateless LLM Training",
        "arXiv:2412.13148",
        repro="icml25.swan.repro:run",
        usage="icml25.swan.SWAN(icml25.swan.swan_param_groups(model, lr=1e-3))",
    ),
    Paper(
        6,
        "cdkf",
        "Optimal Sensor Scheduling and Selection for Continuous-Discrete Kalman Filtering with "
        "Auxiliary Dynamics",
        "arXiv:2507.11240",
        repro="icml25.cdkf.repro:run",
        usage="icml25.cdkf.SchedulingProblem(sde, sensors, T, budget=B).solve().schedule()",
    ),
    Paper(
        7,
        "future_of_work",
        "Position: AI Safety Should Prioritize the Future of Work",
        "arXiv:2504.13959",
        repro="icml25.future_of_work.repro:run",
        usage="pool = CollectiveLicensingPool(works, PerUnit('0.01')); pool.collect(licensees); pool.distribute('attribution', values=shapley_exact(GroupUtility(LogisticRegression(), X, y, owners, X_val, y_val), holders))  # icml25.future_of_work",
        cli="icml25.future_of_work.cli:add_parser",
    ),
    Paper(
        8,
        "dps",
        "Defending LVLMs Against Vision Attacks through Partial-Perception Supervision",
        "arXiv:2412.12722",
        repro="icml25.dps.repro:run",
        usage="icml25.dps.DPSDefense(OpenAIChat(url, 'my-vision-model'), crop='center').respond(image, question).final",
        cli="icml25.dps.cli:add_parser",
    ),
    Paper(
        9,
        "topo_detect",
        "Topological Signatures of Adversaries in Multimodal Alignments",
        "arXiv:2501.18006",
        repro="icml25.topo_detect.repro:run",
        usage="icml25.topo_detect.tp_loss(image_emb, text_emb)  # or mk_loss, sample_signatures, TopologicalMMD(DeepKernelMMD(), sig).fit(P, Q).test(P2, Q2)",
    ),
    Paper(
        10,
        "proxy_feedback",
        "When Can Proxies Improve the Sample Complexity of Preference Learning?",
        "arXiv:2412.16475",
        repro="icml25.proxy_feedback.repro:run",
        usage="m = SimplexPolicy(d_x, K, D); fit_proxy_stage(m, proxy); fit_true_stage(m, expert); check_conditions(expert_policy, proxy_policy, x)  # icml25.proxy_feedback",
        cli="icml25.proxy_feedback.cli:add_parser",
    ),
    Paper(
        11,
        "safety_reasoning",
        "Safety Reasoning with Guidelines",
        "arXiv:2502.04040",
        repro="icml25.safety_reasoning.repro:run",
        usage="icml25.safety_reasoning.synthesize(teacher, load_queries('q.jsonl'), filters=[FormatFilter(), OutcomeFilter(KeywordRefusalDetector.default())])  # then sft(model, tok, build_srg_dataset(report.examples)); best_of_n(HFChat(model, tok), prompts, LlamaGuardJudge(guard))",
        cli="icml25.safety_reasoning.cli:add_parser",
    ),
    Paper(
        12,
        "twa",
        "Learning from others' mistakes: Finetuning machine translation models with span-level error "
        "annotations",
        "arXiv:2410.16509",
        repro="icml25.twa.repro:run",
        usage="icml25.twa.train_twa(model, tokenizer, icml25.twa.load_mqm_tsv('mqm.tsv'))  # or twa_loss(logits, labels, positive, span_ids, span_weights)",
    ),
    Paper(
        13,
        "fpo",
        "Constrain Alignment with Sparse Autoencoders (FPO: Feature-level constrained Preference "
        "Optimization)",
        "arXiv:2411.07618",
        repro="icml25.fpo.repro:run",
        usage="icml25.fpo.train_preference(model, tok, 'pairs.jsonl', icml25.fpo.PreferenceConfig(layer=25), sae=icml25.fpo.load_gemma_scope_npz('params.npz'), ref_model=sft_model)  # or FPOTrainer (TRL), fpo_loss(...)",
    ),
    Paper(
        14,
        "knowledge_swap",
        "Knowledge Swapping via Learning and Unlearning",
        "arXiv:2502.08075",
        repro="icml25.knowledge_swap.repro:run",
        usage="inject_lora(model, ['fc1', 'fc2']); icml25.knowledge_swap.KnowledgeSwapper(model).fit(retain, forget, learn); icml25.lora.unload_lora(model)",
    ),
    Paper(
        15,
        "elicitation",
        "Eliciting Language Model Behaviors with Investigator Agents",
        "arXiv:2502.01236",
        repro="icml25.elicitation.repro:run",
        usage="icml25.elicitation.frank_wolfe(behaviors, t, reverse_sft(Investigator(inv_model, tok), build_reverse_pairs(t, prompts)), lam=0.1)  # t = HFTargetModel(target_model, tok, use_chat_template=True)",
    ),
    Paper(
        16,
        "tpo",
        "Test-Time Preference Optimization: On-the-Fly Alignment via Iterative Textual Feedback",
        "arXiv:2501.12895",
        repro="icml25.tpo.repro:run",
        usage="icml25.tpo.tpo_optimize(query, icml25.llm.OpenAIChat(url, model), reward_model)",
        cli="icml25.tpo.cli:add_parser",
    ),
    Paper(
        17,
        "antidote",
        "Antidote: Post-fine-tuning Safety Alignment for Large Language Models against Harmful "
        "Fine-tuning",
        "arXiv:2408.09600",
        repro="icml25.antidote.repro:run",
        usage="icml25.antidote.antidote_prune(peft_model, make_realign_batches(tokenizer, harmful_pairs), AntidoteConfig(dense_ratio=0.1))",
        cli="icml25.antidote.cli:add_parser",
    ),
    Paper(
        18,
        "rlthf",
        "RLTHF: Targeted Human Feedback for LLM Alignment",
        "arXiv:2502.13417",
        repro="icml25.rlthf.repro:run",
        usage="icml25.rlthf.run_rlthf(pairs, *icml25.rlthf.ChatLabeler(backend).label(pairs, None), icml25.rlthf.HumanOracle(pairs.human_labels), icml25.rlthf.EmbeddingRewardModel())  # pairs = PreferencePairs.from_trl('prefs.jsonl')",
        cli="icml25.rlthf.cli:add_parser",
    ),
    Paper(
        19,
        "certificates",
        "Safety Certificate against Latent Variables with Partially Unidentifiable Dynamics",
        "arXiv:2506.17927",
        repro="icml25.certificates.repro:run",
        usage="icml25.certificates.SafetyCertificate(icml25.certificates.FrontDoorFQE(H, safe).fit(data)).filter(x, t, u_nominal)",
    ),
)

_BY_SLUG = {p.slug: p for p in PAPERS}


def slugs() -> list[str]:
    """All 19 slugs in paper order."""
    return [p.slug for p in PAPERS]


def get(slug: str) -> Paper:
    """The paper with this slug; ``ValueError`` naming the valid slugs otherwise."""
    try:
        return _BY_SLUG[slug]
    except KeyError:
        raise ValueError(f"unknown paper {slug!r}; valid slugs: {', '.join(slugs())}") from None


def resolve(names: Iterable[str]) -> list[Paper]:
    """Papers for the given slugs (or paper numbers like ``4``/``04``), in paper order, deduplicated.

    An empty selection means all papers. Every unknown name is reported in one ``ValueError``.
    """
    names = list(names)
    if not names:
        return list(PAPERS)
    by_number = {p.number: p for p in PAPERS}
    chosen: set[str] = set()
    unknown: list[str] = []
    for name in names:
        if name in _BY_SLUG:
            chosen.add(name)
        elif name.isdigit() and int(name) in by_number:
            chosen.add(by_number[int(name)].slug)
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(
            f"unknown paper(s) {', '.join(repr(u) for u in unknown)}; "
            f"valid slugs (or numbers 1-{len(PAPERS)}): {', '.join(slugs())}"
        )
    return [p for p in PAPERS if p.slug in chosen]


def load_entry_point(target: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` and return the function."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point {target!r} is not of the form 'module:function'")
    return getattr(importlib.import_module(module_name), attr)


def load_repro(paper: Paper) -> Callable[..., Any]:
    """The paper's ``run(quick, seed, out) -> ReproResult``; ``LookupError`` while it is planned."""
    if paper.repro is None:
        raise LookupError(
            f"paper {paper.number:02d} ({paper.slug}) has no reproduction yet (planned)"
        )
    return load_entry_point(paper.repro)
