"""A real third-party OpenAI-compatible server for the integration tests: ``transformers serve``.

The session fixture ``transformers_server`` writes a tiny random-init Llama (``icml25.toy``) to a
temporary folder, starts ``transformers serve <folder>`` on a free loopback port, offline, waits for
``GET /health`` and stops the server at the end of the session, also when a test failed. Where the
server cannot start (the ``serve`` extra is missing, the installed transformers has no ``serve``
command, it does not come up within ``STARTUP_TIMEOUT`` seconds) the tests skip and the reason
carries the server's last stderr lines; ``ICML25_REQUIRE_SERVER=1`` turns that skip into a failure
(for a CI that installs the extra and wants to know). The module fixture ``vision_server`` serves
a tiny random-init LLaVA the same way (``write_tiny_vlm``), for the DPS tests.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

STARTUP_TIMEOUT = 60.0  # seconds; a cold start here takes ~7 s (imports) on 2 busy cores
SERVE_DEPS = ("fastapi", "uvicorn", "openai", "httpx")
#: words the tokenizer is trained on; byte-level BPE keeps every other string encodable
WORDS = (
    "the cat sat on a mat red blue green sun moon dog bird tree river stone cloud rain wind fire"
)


@dataclass
class ServeProcess:
    """A running ``transformers serve``: ``url`` for ``OpenAIChat``, ``model`` its model name."""

    url: str
    model: str
    proc: subprocess.Popen
    stdout_path: Path
    stderr_path: Path

    def chat_requests(self) -> int:
        """Chat requests the server answered with HTTP 200, counted in uvicorn's access log (one
        line per request, flushed before the response body is sent)."""
        text = self.stdout_path.read_text(encoding="utf-8", errors="replace")
        return text.count('"POST /v1/chat/completions HTTP/1.1" 200')

    def stderr_tail(self, n: int = 15) -> str:
        lines = self.stderr_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(lines[-n:])


def write_tiny_model(folder: Path) -> Path:
    """A random-init Llama + byte-level BPE tokenizer with a chat template, saved for
    ``from_pretrained``. Untied embeddings: with tied ones greedy decoding repeats the last prompt
    token (a special ``<|assistant|>``, decoded to ""). ``do_sample=True`` in its generation
    config: ``transformers serve`` never turns sampling on itself, so without it every request
    is greedy whatever its temperature."""
    from icml25.toy import build_tokenizer, tiny_causal_lm

    words = WORDS.split()
    texts = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 3
    tokenizer = build_tokenizer(texts, 300)
    model = tiny_causal_lm(
        tokenizer, d_model=32, n_layers=1, n_heads=2, max_positions=4096, tie_embeddings=False
    )
    model.generation_config.do_sample = True
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGTERM when pytest dies, even by SIGKILL (no orphaned server)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def server_env() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",  # the CLI otherwise asks PyPI for a newer release
        "OMP_NUM_THREADS": "1",  # a tiny model; the machine's cores are shared
        "PYTHONUNBUFFERED": "1",
    }


def start_server(model_dir: Path, log_dir: Path) -> ServeProcess:
    """Start ``transformers serve`` and wait for ``/health``; raises ``RuntimeError`` with the
    server's stderr tail when it exits or does not come up in time."""
    import httpx

    port = free_port()
    out, err = log_dir / "serve.stdout", log_dir / "serve.stderr"
    cmd = [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        str(model_dir),  # FORCE_MODEL: preloaded, and the only model the server answers for
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
    ]
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(
            cmd,
            stdout=fo,
            stderr=fe,
            stdin=subprocess.DEVNULL,
            env=server_env(),
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    server = ServeProcess(f"http://127.0.0.1:{port}/v1", str(model_dir), proc, out, err)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"transformers serve exited with code {proc.returncode} before /health answered; "
                f"stderr tail:\n{server.stderr_tail()}"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise RuntimeError(
        f"transformers serve did not answer /health within {STARTUP_TIMEOUT:g} s; "
        f"stderr tail:\n{server.stderr_tail()}"
    )


def stop_server(server: ServeProcess) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=10)


def _cannot_start(reason: str) -> None:
    if os.environ.get("ICML25_REQUIRE_SERVER") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _need_serve_deps() -> None:
    """Skip (or fail, with ``ICML25_REQUIRE_SERVER=1``) where ``transformers serve`` cannot run."""
    missing = [m for m in SERVE_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        _cannot_start(f"transformers serve needs {', '.join(missing)}: pip install -e '.[serve]'")
    pytest.importorskip("transformers")


def _serving(model_dir: Path, root: Path):
    """Start the server on ``model_dir`` (three tries: ``free_port()`` releases the port before
    the server binds it, so another process may win it), yield it, stop it."""
    for attempt in range(3):
        try:
            server = start_server(model_dir, root)
            break
        except RuntimeError as exc:
            if "address already in use" not in str(exc).lower() or attempt == 2:
                _cannot_start(str(exc))
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="session")
def transformers_server(tmp_path_factory: pytest.TempPathFactory):
    _need_serve_deps()
    root = tmp_path_factory.mktemp("transformers-serve")
    model_dir = write_tiny_model(root / "tiny-llama")
    yield from _serving(model_dir, root)


def write_tiny_vlm(folder: Path, words: str = WORDS) -> Path:
    """A random-init LLaVA + ``LlavaProcessor`` saved for ``from_pretrained``, built offline.

    Byte-level BPE tokenizer (``icml25.toy.build_tokenizer``) plus an ``<image>`` token; a CLIP
    vision tower on 32 x 32 images in 16-pixel patches (4 image tokens per image, the CLS token
    dropped); a 1-layer Llama with 4096 positions (DPS conversations run to a few hundred tokens)
    and untied embeddings. The image processor is the PIL one (no torchvision needed). The chat
    template puts ``<image>`` where each image part is, so any number of images per request work.
    """
    import torch
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    from icml25.toy import build_tokenizer

    w = words.split()
    tok = build_tokenizer([" ".join(w[i:] + w[:i]) for i in range(len(w))] * 3, 300)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    vision = CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=16,
        projection_dim=16,
    )
    text = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=4,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config).eval()
    template = (
        "{% for m in messages %}<|{{ m['role'] }}|>"
        "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
        "{% if p['type'] == 'image' %}<image>{% elif p['type'] == 'text' %}{{ p['text'] }}"
        "{% endif %}{% endfor %}{% endif %}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    images = CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=16,
        vision_feature_select_strategy="default",
        chat_template=template,
        num_additional_image_tokens=1,
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory: pytest.TempPathFactory):
    """``transformers serve`` on :func:`write_tiny_vlm`'s LLaVA (for the DPS tests), per module."""
    _need_serve_deps()
    root = tmp_path_factory.mktemp("transformers-serve-vision")
    try:
        model_dir = write_tiny_vlm(root / "tiny-llava", WORDS)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        # an older or newer transformers without these classes or arguments
        _cannot_start(f"cannot build the tiny LLaVA: {type(exc).__name__}: {exc}")
    yield from _serving(model_dir, root)
