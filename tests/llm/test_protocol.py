"""What real endpoints expect: provider defaults, reasoning models' token field, the official
client's environment variables, image parts, chat and prompt log-probs."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("httpx")

from icml25.llm import CachedChat, CallableChat, ChatServer, OpenAIChat, validate_messages  # noqa: E402

USER = [{"role": "user", "content": "hello"}]
ECHO = CallableChat(lambda m, **k: "hi there")


def test_unset_sampling_fields_are_not_sent_and_reasoning_models_get_max_completion_tokens():
    with ChatServer(ECHO) as server:
        with OpenAIChat(server.url, "llama") as chat:
            chat.chat(USER)
            chat.chat(USER, temperature=0.2, max_tokens=9)
        with OpenAIChat(server.url, "o3-mini") as chat:
            chat.chat(USER, max_tokens=9)
        with OpenAIChat(server.url, "openai/gpt-5") as chat:
            chat.chat(USER, max_tokens=9)
        with OpenAIChat(server.url, "m", max_tokens_field="max_completion_tokens") as chat:
            chat.chat(USER, max_tokens=9)
    plain, set_, o3, gpt5, forced = server.requests
    assert set(plain) == {
        "model",
        "messages",
    }  # no temperature/top_p/max_tokens the caller left out
    assert set_["temperature"] == 0.2 and set_["max_tokens"] == 9 and "top_p" not in set_
    for body in (o3, gpt5, forced):
        assert body["max_completion_tokens"] == 9 and "max_tokens" not in body
        assert "temperature" not in body and "top_p" not in body
    with pytest.raises(ValueError, match="max_tokens_field must be"):
        OpenAIChat(server.url, "m", max_tokens_field="tokens")


def test_base_url_and_key_come_from_the_environment(monkeypatch):
    with ChatServer(ECHO) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        chat = OpenAIChat(model="m")
        assert chat.base_url == server.url and chat.chat(USER) == ["hi there"]
        assert server.authorizations == ["Bearer sk-env"]
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIChat(model="gpt-4o").base_url == "https://api.openai.com/v1"
    assert OpenAIChat(model="gpt-4o").max_tokens_field == "max_completion_tokens"


def test_stop_string_is_cut_when_a_server_keeps_it():
    keeps = CallableChat(lambda m, **k: "first part STOP second part")
    with ChatServer(keeps) as server, OpenAIChat(server.url, "m") as chat:
        assert chat.chat(USER, stop=["STOP"]) == ["first part "]


@pytest.mark.parametrize(
    ("part", "match"),
    [
        ({"type": "image_url", "image_url": "http://x/a.png"}, "must carry"),
        ({"type": "image_url", "image_url": {"url": "file:///a.png"}}, "must carry"),
        ({"type": "image_url", "image_url": {"url": "data:image/png,AAAA"}}, "base64"),
        ({"type": "text"}, "no string 'text'"),
    ],
)
def test_image_parts_are_validated(part, match):
    with pytest.raises(ValueError, match=match):
        validate_messages([{"role": "user", "content": [part]}])
    ok = {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}}
    assert validate_messages([{"role": "user", "content": [ok]}])


def test_chat_logprobs_over_http_are_parsed_cached_and_replayed(tmp_path, tiny_chat):
    msgs = [{"role": "user", "content": "reverse red cat"}]
    local = tiny_chat.complete(msgs, temperature=0, max_tokens=4, top_logprobs=2)[0]
    assert local.logprobs and all(len(t.top) == 2 for t in local.logprobs)
    assert local.logprobs[0].logprob == pytest.approx(local.logprobs[0].top[0][1])  # greedy = top
    with ChatServer(tiny_chat) as server:
        remote = OpenAIChat(server.url, "tiny")
        got = remote.complete(msgs, temperature=0, max_tokens=4, top_logprobs=2)[0]
        assert server.requests[0]["logprobs"] is True and server.requests[0]["top_logprobs"] == 2
        assert got.text == local.text
        assert [t.token for t in got.logprobs] == [t.token for t in local.logprobs]
        assert [t.logprob for t in got.logprobs] == pytest.approx(
            [t.logprob for t in local.logprobs], abs=1e-6
        )
        cached = CachedChat(remote, tmp_path / "c.sqlite")
        first = cached.complete(msgs, temperature=0, max_tokens=4, top_logprobs=2)[0]
        again = CachedChat(remote, tmp_path / "c.sqlite")
        replay = again.complete(msgs, temperature=0, max_tokens=4, top_logprobs=2)[0]
        assert again.hits == 1 and replay.logprobs == first.logprobs
        assert len(server.requests) == 2  # the replay never reached the server


def test_prompt_logprobs_through_completions_echo(tiny_chat):
    torch = pytest.importorskip("torch")
    prompt, cont = "reverse red cat", " cat red"
    local = tiny_chat.continuation_logprobs(prompt, cont)
    ids = tiny_chat.tokenizer(prompt + cont)["input_ids"]
    n_prompt = len(tiny_chat.tokenizer(prompt)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(tiny_chat.model(input_ids=torch.tensor([ids])).logits[0], -1)
    manual = [float(logp[t - 1, ids[t]]) for t in range(n_prompt, len(ids))]
    assert local == pytest.approx(manual, abs=1e-5) and len(local) == len(ids) - n_prompt
    with ChatServer(tiny_chat) as server:
        remote = OpenAIChat(server.url, "tiny").continuation_logprobs(prompt, cont)
        body = server.requests[0]
        assert body["echo"] is True and body["logprobs"] == 1
    assert remote == pytest.approx(local, abs=1e-6)
    assert all(math.isfinite(v) and v <= 0 for v in remote)
    with ChatServer(ECHO) as server:  # a server that cannot score prompts
        with pytest.raises(NotImplementedError, match="does not score prompts"):
            OpenAIChat(server.url, "m", backoff=0.01).continuation_logprobs("a", " b")
    with pytest.raises(ValueError, match="continuation must not be empty"):
        tiny_chat.continuation_logprobs("a", "")
