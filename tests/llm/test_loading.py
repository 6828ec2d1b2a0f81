"""``icml25.llm.load_model`` and friends: device, dtype, kinds, flags and bad input."""

from __future__ import annotations

import argparse

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icml25.llm import (  # noqa: E402
    add_model_args,
    check_context_length,
    context_length,
    load_model,
    load_tokenizer,
    model_kwargs,
    resolve_device,
    resolve_dtype,
)


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory):
    """A tiny Llama saved in bf16 (as every Llama-3.1 checkpoint is) with its tokenizer."""
    from icml25.toy import build_tokenizer, tiny_causal_lm

    tok = build_tokenizer(["hello world", "a b c"], vocab_size=280)
    model = tiny_causal_lm(tok, d_model=32, n_layers=1, n_heads=2, max_positions=64)
    path = tmp_path_factory.mktemp("llama-bf16")
    model.to(torch.bfloat16).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_dtype_auto_keeps_the_checkpoints_dtype(saved_llama):
    m = load_model(saved_llama, device="cpu")
    assert next(m.parameters()).dtype == torch.bfloat16 and not m.training


@pytest.mark.parametrize(
    ("spelling", "dtype"),
    [
        ("fp32", torch.float32),
        ("float16", torch.float16),
        ("bf16", torch.bfloat16),
        (torch.float32, torch.float32),
    ],
)
def test_dtype_spellings(saved_llama, spelling, dtype):
    m = load_model(saved_llama, dtype=spelling, device="cpu")
    assert {p.dtype for p in m.parameters()} == {dtype}


def test_device_auto_is_the_gpu_when_there_is_one():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(None).type == expected


def test_same_outputs_after_save_and_reload(saved_llama, tmp_path):
    m = load_model(saved_llama, dtype="fp32", device="cpu")
    ids = torch.tensor([[1, 5, 7, 9]])
    m.save_pretrained(tmp_path)
    again = load_model(tmp_path, device="cpu")
    assert torch.equal(m(input_ids=ids).logits, again(input_ids=ids).logits)


def test_kinds_other_than_causal(saved_llama):
    m = load_model(saved_llama, "seq_cls", dtype="fp32", device="cpu", num_labels=1)
    assert m.config.num_labels == 1 and type(m).__name__ == "LlamaForSequenceClassification"
    enc = load_model(saved_llama, "encoder", device="cpu")
    assert type(enc).__name__ == "LlamaModel"


def test_bad_input_names_the_value(saved_llama, tmp_path):
    with pytest.raises(ValueError, match="kind must be one of"):
        load_model(saved_llama, "causal")
    with pytest.raises(ValueError, match="dtype must be"):
        load_model(saved_llama, dtype="int8")
    with pytest.raises(ValueError, match="floating"):
        resolve_dtype(torch.int64)
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")
    with pytest.raises(FileNotFoundError, match="no model folder"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="no model folder"):
        load_tokenizer(str(tmp_path / "missing"))
    with pytest.raises(TypeError, match="local folder or a hub id"):
        load_model(42)


def test_context_length_and_its_check(saved_llama):
    m = load_model(saved_llama, device="cpu")
    assert context_length(m) == 64
    check_context_length(m, 60, 4)
    with pytest.raises(
        ValueError, match="61 tokens \\+ 4 new tokens, more than the model's context of 64"
    ):
        check_context_length(m, 61, 4)
    assert context_length(object()) is None


def test_command_line_flags():
    parser = add_model_args(argparse.ArgumentParser())
    args = parser.parse_args(["--device", "cpu", "--dtype", "bf16"])
    assert model_kwargs(args) == {"device": "cpu", "dtype": "bf16", "device_map": None}
    assert model_kwargs(parser.parse_args([]))["dtype"] == "auto"
    with pytest.raises(ValueError, match="--dtype: dtype must be"):
        model_kwargs(parser.parse_args(["--dtype", "fp8"]))
    with pytest.raises(ValueError, match="--device:"):
        model_kwargs(parser.parse_args(["--device", "tpu"]))


def test_load_or_place_loads_a_path_and_places_a_model(saved_llama):
    from icml25.llm import load_or_place

    m = load_or_place(saved_llama, dtype="fp32")
    assert next(m.parameters()).dtype == torch.float32
    assert load_or_place(m) is m  # a loaded model stays as it is
    assert next(load_or_place(m, dtype="bf16").parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="device_map applies when a path is loaded"):
        load_or_place(m, device_map="auto")
    with pytest.raises(ValueError, match="dtype must be"):
        load_or_place(saved_llama, dtype="int4")


def test_a_folder_is_checked_before_anything_loads(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json: not a save_pretrained folder"):
        load_model(str(empty))
    mps = getattr(torch.backends, "mps", None)
    if not (mps is not None and mps.is_available()):
        with pytest.raises(ValueError, match="no MPS device"):
            resolve_device("mps")


def test_a_classifier_loaded_as_a_causal_lm_warns(tmp_path):
    from icml25.toy import save_tiny

    path = save_tiny("seq_cls", tmp_path / "rm")
    with pytest.warns(UserWarning, match="saved as LlamaForSequenceClassification"):
        load_model(path, "causal_lm", device="cpu")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        load_model(path, "seq_cls", device="cpu")
