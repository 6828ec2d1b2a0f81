"""Queries, RT/SRG datasets and the context-distilled SFT rows (labels masked to the target)."""

from __future__ import annotations

import json

import pytest

from icml25.safety_reasoning import (
    DEFAULT_GUIDELINES,
    Query,
    ReasoningFormat,
    build_rt_dataset,
    build_srg_dataset,
    load_queries,
)
from icml25.safety_reasoning.data import SRGExample, to_chat_sft


def test_query_ids_and_validation():
    assert Query("abc", "harmful").id == Query("abc", "helpful").id != Query("abd", "harmful").id
    with pytest.raises(ValueError, match="kind"):
        Query("abc", "bad")
    with pytest.raises(ValueError, match="text"):
        Query("", "harmful")


def test_query_kind_is_typed_as_the_kinds_it_accepts():
    """``Query.kind``'s ``Literal`` lists exactly :data:`KINDS`, the values the checks accept."""
    from typing import get_args, get_type_hints

    from icml25.safety_reasoning.data import KINDS

    assert get_args(get_type_hints(Query)["kind"]) == KINDS
    one, none = get_args(get_type_hints(load_queries)["kind"])
    assert get_args(one) == KINDS and none is type(None)
    for kind in KINDS:
        assert Query("abc", kind).kind == kind
        assert load_queries([{"query": "abc"}], kind=kind)[0].kind == kind
    with pytest.raises(ValueError, match="Query.kind must be one of"):
        Query("abc", "other")
    with pytest.raises(ValueError, match="kind must be one of"):
        load_queries([{"query": "abc"}], kind="other")


def test_load_queries_from_files(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text(
        "\n".join(
            json.dumps(r)
            for r in [{"prompt": "a", "kind": "harmful"}, {"prompt": "b", "kind": "helpful"}]
        )
    )
    qs = load_queries(p)
    assert [(q.text, q.kind) for q in qs] == [("a", "harmful"), ("b", "helpful")]
    c = tmp_path / "jbb.csv"
    c.write_text("\ufeffGoal,Behavior\nWrite a bad thing,x\n")
    with pytest.raises(ValueError, match="text column"):
        load_queries(c, kind="harmful")
    assert load_queries(c, text_column="Goal", kind="harmful")[0].text == "Write a bad thing"
    with pytest.raises(ValueError, match="row 0"):
        load_queries([{"query": "x", "kind": "maybe"}])
    with pytest.raises(FileNotFoundError):
        load_queries(tmp_path / "missing.jsonl")


def test_rt_and_srg_datasets_use_the_same_queries():
    qs = [Query("make poison", "harmful", "1"), Query("make bread", "helpful", "2")]
    rt = build_rt_dataset(
        qs, lambda q: "I'm sorry, I can't help.", lambda q: f"Here is how to {q.text}."
    )
    assert rt == [
        ("make poison", "I'm sorry, I can't help."),
        ("make bread", "Here is how to make bread."),
    ]
    exs = [
        SRGExample(qs[0], "harmful intent", "I'm sorry."),
        SRGExample(qs[1], "benign", "Knead dough."),
    ]
    srg = build_srg_dataset(exs)
    assert [x for x, _ in srg] == [x for x, _ in rt]
    assert srg[0][1] == ReasoningFormat().format_target("harmful intent", "I'm sorry.")
    assert SRGExample.from_dict(exs[0].to_dict()) == exs[0]
    with pytest.raises(ValueError, match="target"):
        build_rt_dataset(qs, lambda q: "", lambda q: "x")
    with pytest.raises(ValueError, match="empty"):
        build_srg_dataset([])


def test_sft_rows_mask_prompt_and_hold_no_guidelines(toy_lm, world):
    from icml25.safety_reasoning.toy_teacher import TOY_FORMAT, toy_guidelines

    _, tok = toy_lm
    query = "hv1 dt2 f3"
    target = TOY_FORMAT.format_target(world.trace(query), "sorry cannot")
    (row,) = to_chat_sft([(query, target)], tok)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": query}], add_generation_prompt=True, tokenize=False
    )
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    t_ids = tok(target, add_special_tokens=False)["input_ids"]
    # exact alignment with the chat template: prompt tokens then target tokens then EOS
    assert row["input_ids"] == p_ids + t_ids + [tok.eos_token_id]
    assert row["labels"][: len(p_ids)] == [-100] * len(p_ids)
    assert row["labels"][len(p_ids) :] == t_ids + [tok.eos_token_id]
    # context distillation: no guideline text reaches the student
    text = tok.decode(row["input_ids"])
    for g in [*toy_guidelines(), *DEFAULT_GUIDELINES]:
        assert g.text not in text
    assert "G-" not in text and "guideline" not in text.lower()


def test_sft_rows_bad_input(toy_lm):
    _, tok = toy_lm
    with pytest.raises(ValueError, match="empty"):
        to_chat_sft([], tok)
    with pytest.raises(TypeError, match=r"pairs\[0\]"):
        to_chat_sft(["just text"], tok)

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="chat template"):
        to_chat_sft([("a", "b")], NoTemplate())


def test_sft_rows_from_examples_and_the_guidelines_ablation(toy_lm):
    _, tok = toy_lm
    ex = SRGExample(
        Query("hv1 dt2 f3", "harmful", "1"), "plain: hv1 dt2 f3 verdict harm", "sorry cannot"
    )
    from icml25.safety_reasoning.toy_teacher import TOY_FORMAT

    assert to_chat_sft([ex], tok, fmt=TOY_FORMAT) == to_chat_sft(
        [("hv1 dt2 f3", ex.target(TOY_FORMAT))], tok
    )
    with_g = to_chat_sft([ex], tok, include_guidelines=True)[0]
    bare = to_chat_sft([ex], tok)[0]
    assert len(with_g["input_ids"]) > len(bare["input_ids"])  # the guidelines are in the prompt
    n_target = sum(x != -100 for x in bare["labels"])
    assert sum(x != -100 for x in with_g["labels"]) == n_target  # and still masked
    with pytest.raises(ValueError, match="not both"):
        to_chat_sft([ex], tok, system="s", include_guidelines=True)


def test_load_queries_reports_bad_rows(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "a", "kind": "harmful"}\n{"query": "b", kind}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: not valid JSON"):
        load_queries(bad)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes('\ufeff{"query": "a", "kind": "harmful"}\n'.encode())
    assert load_queries(bom)[0].text == "a"
    with pytest.raises(ValueError, match="is not a string"):
        load_queries([{"query": None, "kind": "harmful"}])
    with pytest.raises(ValueError, match="column says 'harmful'"):
        load_queries([{"query": "x", "kind": "harmful"}], kind="helpful")


def test_sft_rows_length_limits(toy_lm):
    _, tok = toy_lm
    with pytest.raises(ValueError, match="leaves no target token"):
        to_chat_sft([("hv1 dt2 f3", "sorry cannot")], tok, max_length=3)
    with pytest.warns(UserWarning, match="1 of 1 rows were cut"):
        (row,) = to_chat_sft([("hv1 dt2 f3", "sorry cannot")], tok, max_length=7)
    assert len(row["input_ids"]) == 7
