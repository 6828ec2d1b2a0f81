"""The AI labeller through icml25.llm backends, and the human labellers."""

import numpy as np
import pytest

from icml25.llm import CallableChat, ChatServer, OpenAIChat
from icml25.rlthf import (
    AnnotationPending,
    BudgetExceeded,
    CallbackHumanLabeler,
    ChatLabeler,
    CSVHumanLabeler,
    HumanOracle,
    PreferencePairs,
)
from icml25.rlthf.labelers import SyntheticLabeler, parse_choice


@pytest.mark.parametrize(
    "text, want",
    [
        ("A", "A"),
        ("b.", "B"),
        (" Response B", "B"),
        ("a", "A"),
        ("A or B", None),
        ("C", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_choice(text, want):
    assert parse_choice(text) == want


def _judge(script):
    """A backend whose answer depends on which text is shown as response A."""
    calls = []

    def fn(messages, **kw):
        user = messages[-1]["content"]
        a_text = user.split("Response A:\n")[1].split("\n\nResponse B:")[0]
        calls.append(a_text)
        return script(a_text, len(calls))

    return CallableChat(fn), calls


def test_chat_labeler_labels_swaps_and_retries(small_pairs):
    # prefers whichever response contains "well"/"right"/"zz"; answers garbage once for "z"
    good = {"do x well", "y done right", "zz"}

    def script(a_text, n):
        if a_text == "z" and n % 2:  # first ask about pair 2 (A = "z") is garbage
            return "I cannot decide"
        return "A" if a_text in good else "b."

    backend, calls = _judge(script)
    labels, conf = ChatLabeler(backend, concurrency=1).label(small_pairs, None)
    assert labels.tolist() == [1, 0, 0] and conf.tolist() == [1.0, 1.0, 1.0]


def test_swap_check_marks_position_bias_uncertain(small_pairs):
    backend, _ = _judge(lambda a_text, n: "A")  # always says A: inconsistent under the swap
    labels, conf = ChatLabeler(backend).label(small_pairs, [0, 1])
    assert conf.tolist() == [0.5, 0.5] and labels.tolist() == [1, 1]  # first answer kept
    labels, conf = ChatLabeler(backend, swap_check=False).label(small_pairs, [0, 1])
    assert conf.tolist() == [1.0, 1.0]


def test_unparsable_answers_are_uncertain_not_a(small_pairs):
    backend, calls = _judge(lambda a_text, n: "no idea")
    lab = ChatLabeler(backend, max_retries=1)
    labels, conf = lab.label(small_pairs, None)
    assert (conf == 0.5).all() and lab.calls == 3 * 2 * 2  # 2 tries x 2 orders x 3 pairs
    assert set(labels.tolist()) <= {0, 1}


def test_jsonl_cache_makes_rerun_free(small_pairs, tmp_path):
    backend, calls = _judge(lambda a_text, n: "A" if "well" in a_text or "right" in a_text else "B")
    path = tmp_path / "ai.jsonl"
    first = ChatLabeler(backend, cache_path=path).label(small_pairs, None)
    n = len(calls)
    assert n > 0 and path.exists()
    again = ChatLabeler(backend, cache_path=path)
    second = again.label(small_pairs, None)
    assert len(calls) == n and again.calls == 0
    np.testing.assert_array_equal(first[0], second[0])


def test_chat_labeler_over_http(small_pairs):
    backend, _ = _judge(
        lambda a_text, n: "A" if a_text in {"do x well", "y done right", "zz"} else "B"
    )
    with ChatServer(backend) as server, OpenAIChat(server.url, "judge") as chat:
        labels, _ = ChatLabeler(chat).label(small_pairs, None)
    assert labels.tolist() == [1, 0, 0]


def test_chat_labeler_local_hf_logprobs(small_pairs):
    pytest.importorskip("transformers")
    from icml25.toy import tiny_chat_model

    chat, _ = tiny_chat_model([("Which?", "A"), ("Which one?", "B")], steps=5, vocab_size=300)
    labels, conf = ChatLabeler(chat).label(small_pairs, None)
    assert set(labels.tolist()) <= {0, 1} and ((conf >= 0.5) & (conf <= 1)).all()
    with pytest.raises(ValueError, match="logprobs"):
        ChatLabeler(CallableChat(lambda m, **k: "A"), use_logprobs=True)


def test_human_oracle_budget(small_pairs):
    h = HumanOracle(small_pairs.human_labels, budget=2)
    assert h.label(small_pairs, [2])[0].tolist() == [1]
    with pytest.raises(BudgetExceeded, match="1 of the budget 2"):
        h.label(small_pairs, [0, 1])
    assert h.calls == 1
    with pytest.raises(ValueError, match=r"labels\[0\]"):
        HumanOracle([3, 1])


def test_callback_and_synthetic_labelers(small_pairs):
    cb = CallbackHumanLabeler(lambda p, a, b: [1 if "well" in x else 0 for x in a])
    assert cb.label(small_pairs, [0, 1])[0].tolist() == [1, 0]
    bad = CallbackHumanLabeler(lambda p, a, b: ["yes"] * len(p))
    with pytest.raises(TypeError, match="0/1"):
        bad.label(small_pairs, [0])
    syn = SyntheticLabeler(lambda p, r: len(r), beta=float("inf"))
    assert syn.label(small_pairs, [0, 1, 2])[0].tolist() == [1, 0, 0]  # the longer wins


def test_csv_round_trip(small_pairs, tmp_path):
    path = tmp_path / "to_label.csv"
    lab = CSVHumanLabeler(path)
    with pytest.raises(AnnotationPending, match="3 of 3"):
        lab.label(small_pairs, [0, 1, 2])
    text = path.read_text().splitlines()
    assert text[0] == "index,prompt,response_a,response_b,label"
    filled = [text[0]] + [line + ans for line, ans in zip(text[1:], ["A", "b", "tie"])]
    path.write_text("\n".join(filled) + "\n")
    labels, _ = lab.label(small_pairs, [0, 1, 2])
    assert labels.tolist() == [1, 0, -1]
    path.write_text(text[0] + "\n" + text[1] + "maybe\n")
    with pytest.raises(ValueError, match="maybe"):
        lab.label(small_pairs, [0])


def test_labelers_refuse_foreign_input():
    with pytest.raises(TypeError, match="PreferencePairs"):
        HumanOracle([1, 0]).label({"prompts": []}, [0])
    with pytest.raises(TypeError, match="chat backend"):
        ChatLabeler(object())
    pairs = PreferencePairs(["q"], ["a"], ["b"])
    with pytest.raises(ValueError, match="outside"):
        HumanOracle([1]).label(pairs, [4])


def test_one_failing_pair_loses_nothing_else(small_pairs, tmp_path):
    from icml25.llm import BatchFailed

    state = {"broken": True}
    asked = []

    def fn(messages, **kw):
        user = messages[-1]["content"]
        asked.append(user)
        if state["broken"] and "How do I y?" in user:
            raise ConnectionError("server hiccup")
        return "A"

    path = tmp_path / "ai.jsonl"
    with pytest.raises(BatchFailed, match="1 failed"):
        ChatLabeler(CallableChat(fn), swap_check=False, cache_path=path).label(small_pairs, None)
    assert path.read_text().count('"label"') == 2  # the two good answers are on disk
    state["broken"], n = False, len(asked)
    labels, _ = ChatLabeler(CallableChat(fn), swap_check=False, cache_path=path).label(
        small_pairs, None
    )
    assert labels.tolist() == [1, 1, 1] and len(asked) == n + 1  # only the failed pair again


def test_cache_is_keyed_by_the_judge(small_pairs, tmp_path):
    """Another judge sharing the cache file asks afresh: its answers are not the first judge's."""
    path = tmp_path / "ai.jsonl"
    always_a = CallableChat(lambda m, **k: "A", name="judge-a")
    always_b = CallableChat(lambda m, **k: "B", name="judge-b")
    la, _ = ChatLabeler(always_a, swap_check=False, cache_path=path).label(small_pairs, None)
    second = ChatLabeler(always_b, swap_check=False, cache_path=path)
    lb, _ = second.label(small_pairs, None)
    assert la.tolist() == [1, 1, 1] and lb.tolist() == [0, 0, 0] and second.calls == 3
    again = ChatLabeler(always_a, swap_check=False, cache_path=path)
    assert again.label(small_pairs, None)[0].tolist() == [1, 1, 1] and again.calls == 0


def test_csv_with_byte_order_mark_and_bad_index(small_pairs, tmp_path):
    path = tmp_path / "todo.csv"
    lab = CSVHumanLabeler(path)
    with pytest.raises(AnnotationPending):
        lab.label(small_pairs, [0, 1])
    text = path.read_text(encoding="utf-8").splitlines()
    filled = [text[0]] + [line + ("A" if i == 0 else "B") for i, line in enumerate(text[1:])]
    path.write_text("\n".join(filled) + "\n", encoding="utf-8-sig")  # as spreadsheets save it
    labels, _ = lab.label(small_pairs, [0, 1])
    assert labels.tolist() == [1, 0]
    path.write_text("index,label\nfirst,A\n", encoding="utf-8")
    with pytest.raises(ValueError, match="index 'first' is not an integer"):
        lab.label(small_pairs, [0])


def test_chat_labeler_failure_message_and_bad_concurrency(small_pairs):
    from icml25.llm import BatchFailed

    def fn(messages, **kw):
        if "y is hard" in messages[-1]["content"]:
            raise ConnectionError("server down")
        return "A"

    with pytest.raises(BatchFailed, match="call label\\(\\) again") as err:
        ChatLabeler(CallableChat(fn), swap_check=False).label(small_pairs, None)
    assert "--retry-errors" not in str(err.value)
    with pytest.raises(ValueError, match="concurrency"):
        ChatLabeler(CallableChat(fn), concurrency=0)
