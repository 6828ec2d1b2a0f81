from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("httpx")

from icml25.llm import ChatServer, OpenAIChat  # noqa: E402


def _get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def test_models_route_and_errors(echo):
    with ChatServer(echo, model_name="echo-1") as server:
        assert _get(server.url + "/models")["data"][0]["id"] == "echo-1"
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(server.url + "/nothing")
        assert err.value.code == 404
        req = urllib.request.Request(
            server.url + "/chat/completions", data=b"not json", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 400


def test_unknown_fault_is_rejected(echo):
    with pytest.raises(ValueError, match="unknown fault 'boom'"):
        ChatServer(echo, faults=["boom"])


def test_tiny_hf_model_served_over_http(tiny_chat):
    msgs = [{"role": "user", "content": "reverse red cat sun"}]
    with ChatServer(tiny_chat) as server, OpenAIChat(server.url, "tiny") as client:
        assert client.chat(msgs, temperature=0, max_tokens=8) == ["sun cat red"]
        remote = client.chat(msgs, n=3, temperature=1.0, seed=2, max_tokens=8)
    assert remote == tiny_chat.chat(msgs, n=3, temperature=1.0, seed=2, max_tokens=8)
