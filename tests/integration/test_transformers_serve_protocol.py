"""What ``transformers serve`` does with the OpenAI request fields, pinned at the HTTP level.

These record the behaviours listed in docs/llm.md ("Using a real server"); a failure here means a
transformers release changed one of them: update that list (and the client, where it relies on
it), not only the assertion.
"""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "Name three colours."}]


def _post(srv, endpoint: str, **body):
    import httpx

    response = httpx.post(f"{srv.url}/{endpoint}", json={"model": srv.model, **body}, timeout=60)
    return response.status_code, response.json() if response.status_code < 500 else None


def test_n_logprobs_ignored_usage_reported(transformers_server):
    status, data = _post(
        transformers_server,
        "chat/completions",
        messages=USER,
        n=3,
        logprobs=True,
        top_logprobs=2,
        max_tokens=5,
        temperature=1.0,
        seed=1,
    )
    assert status == 200
    assert len(data["choices"]) == 1  # n is ignored (a warning in the server log)
    choice = data["choices"][0]
    assert choice.get("logprobs") is None  # logprobs / top_logprobs are ignored
    assert set(data["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    usage = data["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 5


def test_stop_string_is_kept_in_the_text(transformers_server):
    args = dict(messages=USER, max_tokens=24, temperature=1.0, seed=11)
    _, full = _post(transformers_server, "chat/completions", **args)
    text = full["choices"][0]["message"]["content"]
    stop = re.findall(r"[a-z]{2,}", text[1:])[0]
    _, cut = _post(transformers_server, "chat/completions", stop=[stop], **args)
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop"
    # OpenAI and vLLM cut the stop string off; transformers serve returns it.
    assert stop in choice["message"]["content"]


def test_temperature_alone_does_not_sample(transformers_server):
    # The server copies temperature into the generation config but never sets do_sample=True:
    # with a generation config without it, two seeds give the same (greedy) text.
    greedy = json.dumps({"do_sample": False})
    texts = [
        _post(
            transformers_server,
            "chat/completions",
            messages=USER,
            max_tokens=8,
            temperature=1.0,
            seed=s,
            generation_config=greedy,
        )[1]["choices"][0]["message"]["content"]
        for s in (1, 2)
    ]
    assert texts[0] == texts[1]


def test_unknown_fields_and_other_models_are_refused(transformers_server):
    status, data = _post(transformers_server, "chat/completions", messages=USER, top_k=5)
    assert status == 422 and "top_k" in str(data)  # vLLM's extra sampling fields
    status, data = _post(
        transformers_server, "chat/completions", messages=USER, max_tokens=2, model="other"
    )
    assert status == 400 and "pinned" in str(data)  # FORCE_MODEL: only its own name


def test_legacy_completions_ignore_echo_and_logprobs(transformers_server):
    prompt = "the cat sat on the mat"
    status, data = _post(
        transformers_server, "completions", prompt=prompt, max_tokens=4, echo=True, logprobs=2
    )
    assert status == 200
    choice = data["choices"][0]
    assert not choice["text"].startswith(prompt)  # no echo of the prompt
    assert choice.get("logprobs") is None  # no token log-probabilities
