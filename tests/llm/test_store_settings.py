"""JsonlStore(settings=...): a row is keyed by the fingerprint of everything that made it, so a
rerun with other settings refuses or keeps both runs apart; it never returns the other's rows."""

from __future__ import annotations

import json

import pytest

from icml25.llm.store import (
    JsonlStore,
    SettingsMismatch,
    backend_identity,
    content_hash,
    run_resumable,
    settings_fingerprint,
)

A = {"backend": {"class": "OpenAIChat", "name": "openai:teacher-a@http://x"}, "k": 4, "t": 0.7}
B = {"backend": {"class": "OpenAIChat", "name": "openai:teacher-b@http://x"}, "k": 4, "t": 0.7}


def _fill(path, settings, tag, **kw):
    calls = []

    def work(item):
        calls.append(item)
        return {"answer": f"{tag}:{item}"}

    with JsonlStore(path, "id", settings=settings, **kw) as st:
        run_resumable(["q1", "q2"], work, st, key=lambda i, x: {"id": x}, progress=False)
        return calls, {r["id"]: r["answer"] for r in st.records()}


def test_same_settings_resume_other_settings_refuse_naming_the_field(tmp_path):
    path = tmp_path / "rows.jsonl"
    calls, rows = _fill(path, A, "a")
    assert sorted(calls) == ["q1", "q2"]
    again, rows2 = _fill(path, dict(reversed(list(A.items()))), "a")  # same settings, other order
    assert again == [] and rows2 == rows
    with pytest.raises(
        SettingsMismatch, match=r"backend.name: 'openai:teacher-a@http://x' -> 'openai:teacher-b"
    ):
        JsonlStore(path, "id", settings=B)
    # one strict-JSON row per item, stamped; the full settings sit beside the file
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 2 and all(x["_settings"] == settings_fingerprint(A) for x in lines)
    beside = json.loads((tmp_path / "rows.jsonl.settings.json").read_text())
    assert beside[settings_fingerprint(A)]["backend"] == A["backend"]


def test_keep_both_runs_apart(tmp_path):
    path = tmp_path / "rows.jsonl"
    _fill(path, A, "a")
    calls, rows = _fill(path, B, "b", on_mismatch="separate")
    assert sorted(calls) == ["q1", "q2"]  # teacher B was asked; A's rows were not served
    assert rows == {"q1": "b:q1", "q2": "b:q2"}
    _, rows_a = _fill(path, A, "never", on_mismatch="separate")
    assert rows_a == {"q1": "a:q1", "q2": "a:q2"}
    st = JsonlStore(path, "id", settings=B, on_mismatch="separate")
    assert len(st) == 2 and st.get("q1")["answer"] == "b:q1"


def test_rows_without_settings_are_not_reused(tmp_path):
    path = tmp_path / "old.jsonl"
    with JsonlStore(path, "id") as st:  # an older file: no fingerprint
        st.append({"id": "q1", "answer": "old"})
        assert "_settings" not in json.loads(path.read_text())
    with pytest.raises(SettingsMismatch, match="1 rows written without a settings fingerprint"):
        JsonlStore(path, "id", settings=A)
    calls, rows = _fill(path, A, "a", on_mismatch="separate")
    assert sorted(calls) == ["q1", "q2"] and rows["q1"] == "a:q1"


def test_errors_are_keyed_and_retried_per_settings(tmp_path):
    path = tmp_path / "rows.jsonl"

    def boom(item):
        raise RuntimeError("server down")

    with JsonlStore(path, "id", settings=A) as st:
        rep = run_resumable(["q1"], boom, st, key=lambda i, x: {"id": x}, progress=False)
    assert rep.n_failed == 1 and rep.failures[0].key == ("q1",)
    calls, rows = _fill(path, B, "b", on_mismatch="separate")
    assert "q1" in calls and rows["q1"] == "b:q1"  # A's error row does not block B


def test_fingerprints_content_hashes_and_identity(tmp_path):
    assert settings_fingerprint({"a": 1, "b": [1, 2]}) == settings_fingerprint(
        {"b": [1, 2], "a": 1}
    )
    assert settings_fingerprint({"a": 1}) != settings_fingerprint({"a": 2})
    assert settings_fingerprint({"x": float("nan")}) == settings_fingerprint({"x": None})
    img = tmp_path / "img.png"
    img.write_bytes(b"first")
    h1 = content_hash(img)
    img.write_bytes(b"second")  # overwritten in place: same name, new key
    assert content_hash(img) != h1 and content_hash(b"first") == h1
    with pytest.raises(TypeError, match="bytes or a file path"):
        content_hash(3)

    class Fake:
        name = "openai:m@http://h"
        extra_body = {"top_k": 5}

    assert backend_identity(Fake()) == {
        "class": "Fake",
        "name": "openai:m@http://h",
        "extra_body": {"top_k": 5},
    }
    with pytest.raises(ValueError, match="on_mismatch must be 'refuse' or 'separate'"):
        JsonlStore(tmp_path / "x.jsonl", "id", settings=A, on_mismatch="merge")


def test_a_file_keeping_both_reopens_with_either_but_refuses_a_third(tmp_path):
    path = tmp_path / "rows.jsonl"
    _fill(path, A, "a")
    _fill(path, B, "b", on_mismatch="separate")
    calls, rows = _fill(path, A, "never")  # A's rows are in the file, keyed apart: resume
    assert calls == [] and rows == {"q1": "a:q1", "q2": "a:q2"}
    with pytest.raises(SettingsMismatch, match="k: 4 -> 5"):
        JsonlStore(path, "id", settings={**A, "k": 5})
