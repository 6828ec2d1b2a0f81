"""The architecture matrix: real HF families, tiny, saved and reloaded, with their real tokens."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from icml25.toy import (  # noqa: E402
    ARCHITECTURES,
    CHAT_TEMPLATES,
    default_matrix,
    full_matrix,
    save_tiny,
    tiny_model,
    tiny_tokenizer,
)

HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None
USER = {"role": "user", "content": "What is the red book?"}
ASSISTANT = {"role": "assistant", "content": "A short story."}
# What a rendered [user, assistant] conversation ends with, per template.
TURN_SUFFIX = {"chatml": "<|im_end|>\n", "llama3": "<|eot_id|>", "gemma": "<end_of_turn>\n"}
TURN_SUFFIX["mistral"] = "</s>"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Models this small run fastest on one thread (and do not fight other workers for cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _matrix(names):
    return [pytest.param(n, marks=pytest.mark.slow) if ARCHITECTURES[n].slow else n for n in names]


def _needs_vision(arch):
    if arch == "qwen2_vl" and not HAS_TORCHVISION:
        pytest.skip("the Qwen2-VL processor needs torchvision")


def _image():
    from PIL import Image

    return Image.fromarray((torch.arange(40 * 30 * 3) % 251).reshape(40, 30, 3).byte().numpy())


def _inputs(arch, tokenizer):
    """One model input of ``arch`` built the way a user would, through its tokenizer/processor."""
    kind = ARCHITECTURES[arch].kind
    if kind == "vision_lm":
        content = [{"type": "image"}, {"type": "text", "text": "What is this?"}]
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        return dict(tokenizer(images=[_image()], text=[text], return_tensors="pt"))
    if kind == "clip":
        return dict(
            tokenizer(
                text=["a red book", "two birds"],
                images=[_image()],
                return_tensors="pt",
                padding=True,
            )
        )
    enc = dict(tokenizer(["What is the red book?"], return_tensors="pt"))
    if kind == "seq2seq":
        start = tokenizer.pad_token_id  # decoder_start_token_id of both T5 and Marian
        enc["decoder_input_ids"] = torch.tensor([[start, 5, 6, 7]])
    return enc


def _logits(out):
    return out.logits_per_image if hasattr(out, "logits_per_image") else out.logits


def _text_config(model):
    return model.config.get_text_config()


def test_matrix_lists():
    assert default_matrix() == ["gpt2", "llama", "qwen2", "gemma2", "mistral", "opt", "seq_cls"]
    assert set(default_matrix()) < set(full_matrix()) == set(ARCHITECTURES)
    assert {s.kind for s in ARCHITECTURES.values()} == {
        "causal_lm",
        "seq2seq",
        "vision_lm",
        "seq_cls",
        "clip",
    }
    assert {s.template for s in ARCHITECTURES.values()} - {None} == set(CHAT_TEMPLATES)
    with pytest.raises(ValueError, match="unknown architecture 'bert'"):
        tiny_model("bert")
    with pytest.raises(ValueError, match="unknown architecture"):
        tiny_tokenizer("Llama")
    with pytest.raises(TypeError, match="dtype must be"):
        tiny_model("llama", dtype="float33")
    assert tiny_model("llama", dtype="bfloat16").dtype == torch.bfloat16


def test_import_stays_cheap():
    code = "import sys, icml25.toy; print(sorted({'torch', 'transformers', 'tokenizers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("arch", _matrix(full_matrix()))
def test_save_reload_same_logits_and_tokenizer(arch, tmp_path):
    _needs_vision(arch)
    arch_info = ARCHITECTURES[arch]
    path = save_tiny(arch, tmp_path / arch)
    model, tokenizer = tiny_model(arch), tiny_tokenizer(arch)
    loader = transformers.AutoProcessor if arch_info.kind in ("vision_lm", "clip") else None
    reloaded_tok = (loader or transformers.AutoTokenizer).from_pretrained(path)
    reloaded = getattr(transformers, arch_info.auto_model).from_pretrained(path)
    assert type(reloaded) is type(model) and not reloaded.training

    inputs, reloaded_inputs = _inputs(arch, tokenizer), _inputs(arch, reloaded_tok)
    assert inputs.keys() == reloaded_inputs.keys()
    for key in inputs:
        torch.testing.assert_close(inputs[key], reloaded_inputs[key], rtol=0, atol=0)
    with torch.no_grad():
        before, after = _logits(model(**inputs)), _logits(reloaded(**inputs))
    assert torch.isfinite(before).all()
    # same weights; only BLAS may round differently on differently aligned (mmapped) tensors
    torch.testing.assert_close(before, after, rtol=1e-5, atol=1e-6)

    text_tok = getattr(tokenizer, "tokenizer", tokenizer)
    text_reloaded = getattr(reloaded_tok, "tokenizer", reloaded_tok)
    assert text_reloaded.eos_token == text_tok.eos_token == arch_info.eos_token
    assert (text_reloaded.bos_token, text_reloaded.pad_token) == (
        text_tok.bos_token,
        text_tok.pad_token,
    )
    assert text_reloaded.chat_template == text_tok.chat_template
    if arch_info.kind in ("vision_lm", "clip"):
        assert type(reloaded_tok) is type(tokenizer)


@pytest.mark.parametrize("arch", _matrix(full_matrix()))
def test_config_matches_tokenizer(arch):
    _needs_vision(arch)
    arch_info = ARCHITECTURES[arch]
    tok = tiny_tokenizer(arch)
    tok = getattr(tok, "tokenizer", tok)
    model = tiny_model(arch)
    text = _text_config(model)
    embeddings = (model.text_model if arch == "clip" else model).get_input_embeddings()
    assert text.vocab_size == len(tok) == embeddings.num_embeddings
    assert 400 <= len(tok) <= 600
    assert text.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids(arch_info.eos_token)
    assert text.pad_token_id == tok.pad_token_id
    assert tok.model_max_length == (77 if arch == "clip" else 128)
    positions = getattr(text, "max_position_embeddings", getattr(text, "n_positions", None))
    assert positions in (None, tok.model_max_length)  # T5 has relative positions only
    if arch_info.end_of_turn is not None:
        eot = tok.convert_tokens_to_ids(arch_info.end_of_turn)
        assert eot != tok.unk_token_id
        assert tok.encode(arch_info.end_of_turn, add_special_tokens=False) == [eot]
    if arch_info.end_of_turn is not None and arch_info.kind != "seq_cls":
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        # instruct-style generation configs stop at the end of turn as well as at the EOS
        if arch in ("llama", "qwen2", "gemma2", "qwen2_vl", "llava"):
            assert {tok.eos_token_id, eot} <= set(eos)


@pytest.mark.parametrize("arch", _matrix(a for a in full_matrix() if ARCHITECTURES[a].template))
def test_chat_template_turn_end_and_eos(arch):
    _needs_vision(arch)
    arch_info = ARCHITECTURES[arch]
    tok = tiny_tokenizer(arch)
    tok = getattr(tok, "tokenizer", tok)
    text = tok.apply_chat_template([USER, ASSISTANT], tokenize=False)
    assert text.endswith(ASSISTANT["content"] + TURN_SUFFIX[arch_info.template])
    assert arch_info.end_of_turn in text and tok.eos_token == arch_info.eos_token
    # Mistral (and Qwen2-VL-Instruct) end a turn with the EOS itself; the others do not
    assert (arch_info.end_of_turn == arch_info.eos_token) == (arch in ("mistral", "qwen2_vl"))
    if tok.bos_token is not None and tok.bos_token in text:
        ids = tok.apply_chat_template([USER, ASSISTANT], return_dict=True)["input_ids"]
        assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    prompt = tok.apply_chat_template([USER], tokenize=False, add_generation_prompt=True)
    assert text.startswith(prompt)  # the prompt is a prefix of the conversation


def test_chat_templates_render_as_the_real_families():
    qwen = tiny_tokenizer("qwen2")
    assert qwen.apply_chat_template([USER, ASSISTANT], tokenize=False) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the red book?<|im_end|>\n"
        "<|im_start|>assistant\nA short story.<|im_end|>\n"
    )
    assert qwen.eos_token == "<|endoftext|>" and qwen.pad_token == "<|endoftext|>"
    assert qwen.bos_token is None
    llama = tiny_tokenizer("llama")
    assert llama.apply_chat_template([USER], tokenize=False, add_generation_prompt=True) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is the red book?"
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert llama.pad_token is None and tiny_tokenizer("gpt2").pad_token is None
    assert llama("hi")["input_ids"][0] == llama.bos_token_id  # Llama-3 prepends BOS
    assert tiny_tokenizer("qwen2")("hi")["input_ids"][0] != qwen.convert_tokens_to_ids(
        "<|im_start|>"
    )
    gemma = tiny_tokenizer("gemma2")
    assert gemma.apply_chat_template([USER, ASSISTANT], tokenize=False) == (
        "<bos><start_of_turn>user\nWhat is the red book?<end_of_turn>\n"
        "<start_of_turn>model\nA short story.<end_of_turn>\n"
    )
    with pytest.raises(Exception, match="System role not supported"):
        gemma.apply_chat_template([{"role": "system", "content": "x"}, USER], tokenize=False)
    mistral = tiny_tokenizer("mistral")
    assert mistral.apply_chat_template([USER, ASSISTANT], tokenize=False) == (
        "<s>[INST] What is the red book? [/INST]A short story.</s>"
    )
    system = {"role": "system", "content": "Be brief."}
    assert mistral.apply_chat_template([system, USER], tokenize=False) == (
        "<s>[INST] Be brief.\n\nWhat is the red book? [/INST]"
    )


@pytest.mark.parametrize("arch", _matrix(full_matrix()))
def test_bf16_save_reloads_as_bf16(arch, tmp_path):
    _needs_vision(arch)
    path = save_tiny(arch, tmp_path / arch, dtype=torch.bfloat16)
    auto = getattr(transformers, ARCHITECTURES[arch].auto_model)
    model = auto.from_pretrained(path, dtype="auto")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert tiny_model(arch, dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.parametrize("arch", _matrix(full_matrix()))
def test_dropout_flag_is_true_to_the_model(arch):
    _needs_vision(arch)
    model = tiny_model(arch)
    inputs = _inputs(arch, tiny_tokenizer(arch))
    with torch.no_grad():
        model.train()
        a, b = _logits(model(**inputs)), _logits(model(**inputs))
        model.eval()
        c, d = _logits(model(**inputs)), _logits(model(**inputs))
    assert torch.equal(c, d)
    assert (not torch.equal(a, b)) == ARCHITECTURES[arch].has_dropout


@pytest.mark.parametrize(
    "arch", _matrix(a for a in full_matrix() if ARCHITECTURES[a].kind not in ("seq_cls", "clip"))
)
def test_greedy_generation_runs(arch):
    _needs_vision(arch)
    model, tokenizer = tiny_model(arch), tiny_tokenizer(arch)
    inputs = _inputs(arch, tokenizer)
    inputs.pop("decoder_input_ids", None)
    out = model.generate(**inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    prompt = 0 if ARCHITECTURES[arch].kind == "seq2seq" else inputs["input_ids"].shape[1]
    assert out.shape[0] == 1 and out.shape[1] == prompt + 3 + (prompt == 0)  # + decoder start


def test_seed_controls_init_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b, c = tiny_model("llama", seed=0), tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    with pytest.raises(TypeError, match="seed"):
        tiny_model("llama", seed=1.5)


@pytest.mark.skipif(HAS_TORCHVISION, reason="checks the message shown when torchvision is missing")
def test_qwen2_vl_without_torchvision_says_what_to_install(tmp_path):
    with pytest.raises(ImportError, match=r"pip install 'icml25\[vision\]'"):
        tiny_tokenizer("qwen2_vl")
    with pytest.raises(ImportError, match="torchvision"):
        save_tiny("qwen2_vl", tmp_path / "q")
    assert not (tmp_path / "q").exists()
    assert type(tiny_model("qwen2_vl")).__name__ == "Qwen2VLForConditionalGeneration"
