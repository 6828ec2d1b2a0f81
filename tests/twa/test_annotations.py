"""MQM annotations: the <v> parser, severity weights and the TSV loader (paper §2; the format of
google/wmt-mqm-human-evaluation), on an inline fixture of our own sentences."""

from __future__ import annotations

import io

import pytest

from icml25.twa import AnnotatedTranslation, ErrorSpan, load_mqm_tsv
from icml25.twa.annotations import DEFAULT_SEVERITY_WEIGHTS, parse_marked_text, severity_weight

HEADER = "system\tdoc\tdoc_id\tseg_id\trater\tsource\ttarget\tcategory\tseverity\tcomment\n"
ROWS = [
    # sys A, seg 1, rater r1: two errors (a Major with a trailing space inside the tags, a Minor)
    "A\td1\t1\t1\tr1\tThe cat sleeps.\tDie <v>Hund </v>schläft.\tAccuracy/Mistranslation\tMajor\t",
    "A\td1\t1\t1\tr1\tThe cat sleeps.\tDie Hund schläft<v>.</v>\tFluency/Punctuation\tMinor\t",
    # the same segment by rater r2: one identical span and a neutral record
    "A\td1\t1\t1\tr2\tThe cat sleeps.\tDie <v>Hund </v>schläft.\tAccuracy/Mistranslation\tMajor\t",
    "A\td1\t1\t1\tr2\tThe cat sleeps.\tDie Hund <v>schläft</v>.\tStyle/Awkward\tNeutral\t",
    # sys B: no error
    "B\td1\t1\t1\tr1\tThe cat sleeps.\tDie Katze schläft.\tNo-error\tNo-error\t",
    # sys C: an omission marked in the source (unlocalizable in the target)
    "C\td1\t1\t1\tr1\tThe <v>black</v> cat sleeps.\tDie Katze schläft.\tAccuracy/Omission\tMajor\t",
    # sys D: non-translation
    "D\td1\t1\t1\tr1\tThe cat sleeps.\tzzz qqq\tNon-translation!\tMajor\t",
]


def fixture(rows=ROWS):
    return io.StringIO(HEADER + "\n".join(rows) + "\n")


def test_parse_marked_text():
    clean, spans = parse_marked_text("a <v>bc</v> d <v>é</v>")
    assert clean == "a bc d é" and spans == [(2, 4), (7, 8)]
    for bad in ("a <v>b", "a </v>b", "<v>a <v>b</v></v>"):
        with pytest.raises(ValueError, match="unclosed|without|nested"):
            parse_marked_text(bad)


def test_severity_weights():
    assert severity_weight("Major", "Accuracy/Mistranslation") == 5.0
    assert severity_weight("minor", "Fluency/Grammar") == 1.0
    assert severity_weight("Minor", "Fluency/Punctuation") == 0.1
    assert severity_weight("Minor", "Non-translation!") == 5.0
    assert severity_weight("Neutral", "Style/Awkward") == 0.0
    assert severity_weight("Minor", "Fluency/Punctuation", "uniform") == 1.0
    with pytest.raises(ValueError, match="unknown severity 'Critical-ish'"):
        severity_weight("Critical-ish")
    assert DEFAULT_SEVERITY_WEIGHTS["Major"] == 5.0


def test_load_mqm_tsv_per_rater():
    data = load_mqm_tsv(fixture())
    keys = [(d.system, d.rater) for d in data]
    assert keys == [("A", "r1"), ("A", "r2"), ("B", "r1"), ("C", "r1"), ("D", "r1")]
    a1 = data[0]
    assert a1.target == "Die Hund schläft."
    # the trailing space inside the tags is trimmed
    assert [(s.start, s.end, s.weight) for s in a1.spans] == [(4, 8, 5.0), (16, 17, 0.1)]
    assert a1.target[4:8] == "Hund" and a1.mqm_penalty() == pytest.approx(5.1)
    assert data[1].spans == [ErrorSpan(4, 8, "Major", "Accuracy/Mistranslation", "target", 5.0)]
    assert not data[2].has_error and data[2].spans == []
    (om,) = data[3].spans
    assert om.side == "source" and data[3].source[om.start : om.end] == "black"
    (nt,) = data[4].spans
    assert (nt.start, nt.end) == (0, len("zzz qqq")) and data[4].mqm_penalty() == 5.0
    with_neutral = load_mqm_tsv(fixture(), keep_neutral=True)
    assert len(with_neutral[1].spans) == 2 and not any(
        s.weight for s in with_neutral[1].spans if s.severity == "Neutral"
    )


def test_load_mqm_tsv_merged_raters():
    data = load_mqm_tsv(fixture(), merge_raters=True)
    a = data[0]
    assert a.rater is None and len(data) == 4
    # the identical Major span of r1 and r2 is kept once
    assert sorted((s.start, s.end) for s in a.spans) == [(4, 8), (16, 17)]


def test_bad_files_name_the_line():
    rows = [*ROWS[:1], "A\td1\t1\t1\tr1\tThe cat sleeps.\tDer Hund schläft.\tFluency\tMinor\t"]
    with pytest.raises(ValueError, match="line 3: the clean target differs from line 2"):
        load_mqm_tsv(fixture(rows))
    with pytest.raises(ValueError, match="line 2: unknown severity 'Huge'"):
        load_mqm_tsv(fixture(["A\td\t1\t1\tr\ts\t<v>t</v>\tAccuracy\tHuge\t"]))
    with pytest.raises(ValueError, match="line 2: unclosed"):
        load_mqm_tsv(fixture(["A\td\t1\t1\tr\ts\t<v>t\tAccuracy\tMajor\t"]))
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['severity'\]"):
        load_mqm_tsv(io.StringIO("system\tdoc\tdoc_id\tseg_id\trater\tsource\ttarget\tcategory\n"))
    with pytest.raises(ValueError, match="outside the target string"):
        AnnotatedTranslation("s", "abc", [ErrorSpan(1, 9, "Major")])
    with pytest.raises(ValueError, match="0 <= start <= end"):
        ErrorSpan(3, 1, "Minor")


def test_a_file_on_disk(tmp_path):
    p = tmp_path / "mqm.tsv"
    p.write_text(HEADER + "\n".join(ROWS) + "\n", encoding="utf-8")
    assert len(load_mqm_tsv(p)) == 5 and len(load_mqm_tsv(str(p))) == 5


def test_jsonl_and_records_round_trip(tmp_path):
    from icml25.twa.annotations import from_records, load_jsonl, save_jsonl, to_records

    data = load_mqm_tsv(fixture())
    p = tmp_path / "mqm.jsonl"
    save_jsonl(data, p)
    back = load_jsonl(p)
    assert back == data  # dataclass equality: every field and span
    assert from_records(to_records(data)) == data
    (tmp_path / "bad.jsonl").write_text('{"source": "a", "target": "b"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        load_jsonl(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="row 0 needs 'source' and 'target'"):
        from_records([{"src": "a"}])


def test_chrf():
    pytest.importorskip("sacrebleu")
    from icml25.twa.metrics import chrf

    assert chrf(["the cat sleeps"], ["the cat sleeps"]) == pytest.approx(100.0)
    assert 0 < chrf(["the dog sleeps"], ["the cat sleeps"]) < 100
    with pytest.raises(ValueError, match="as many hypotheses as references"):
        chrf(["a"], [])


def test_translations_through_a_chat_backend_resume_and_keep_failures(tmp_path):
    from icml25.llm import CallableChat
    from icml25.twa import translate_with_backend

    calls = []

    def fn(messages, **kw):
        src = messages[-1]["content"].rsplit("\n", 1)[-1]
        calls.append(src)
        if src == "boom":
            raise RuntimeError("server error")
        return f" {src.upper()} "

    store = tmp_path / "tr.jsonl"
    out = translate_with_backend(
        CallableChat(fn), ["a b", "boom", "c"], store=store, progress=False
    )
    assert out == ["A B", None, "C"]  # the failing item is an error row; the others are kept
    calls.clear()
    again = translate_with_backend(
        CallableChat(fn), ["a b", "boom", "c"], store=store, progress=False
    )
    assert again == out and calls == []  # resumed: nothing asked twice (errors kept as errors)
    with pytest.raises(ValueError, match="must contain"):
        translate_with_backend(CallableChat(fn), ["a"], prompt_template="x")
    assert translate_with_backend(CallableChat(fn), ["z"], progress=False) == ["Z"]  # no store
    # another source list into the same file: each source is translated, never another's row
    calls.clear()
    assert translate_with_backend(CallableChat(fn), ["c", "a b"], store=store, progress=False) == [
        "C",
        "A B",
    ]
    assert calls == ["c", "a b"]
    # another model into the same file is refused, naming it
    from icml25.llm.store import SettingsMismatch

    with pytest.raises(SettingsMismatch, match=r"backend.cache_identity: 'callable' -> 'other'"):
        translate_with_backend(CallableChat(fn, name="other"), ["a b"], store=store, progress=False)
