"""An architecture matrix: tiny random-init models of real Hugging Face families, offline.

Each entry builds a model from the family's *real* config class (``GPT2Config``, ``LlamaConfig``,
``Qwen2Config``, ``Gemma2Config``, ``MistralConfig``, ``OPTConfig``, ``MarianConfig``,
``T5Config``, ``Qwen2VLConfig``, ``LlavaConfig``, ``CLIPConfig``) at a width of 32, two layers and
128 positions (CLIP: 77), with a tokenizer that carries the family's real special tokens and chat
template (:mod:`icml25.toy.arch_tokenizers`). The point is the differences a library has to get
right on real checkpoints and never meets on one toy Llama:

* the end of a turn is not always the EOS (Llama-3 ``<|eot_id|>`` vs ``<|end_of_text|>``, Qwen2
  ``<|im_end|>`` vs ``<|endoftext|>``, Gemma ``<end_of_turn>`` vs ``<eos>``), but is for Mistral;
* some tokenizers prepend a BOS (Llama-3, Gemma, Mistral, OPT), some do not (GPT-2, Qwen2);
* some have no pad token at all (GPT-2, Llama-3, Mistral);
* some templates add a system message (Qwen), refuse one (Gemma) or fold it into a turn (Mistral);
* GPT-2, OPT, T5 and Marian train with dropout on by default;
* ``generation_config.eos_token_id`` is a list for instruct-style checkpoints (Llama-3.1, Qwen2.5,
  Gemma-2: the EOS and the turn end).

The entries and what each one stands for:

========  ==========================================================================================
gpt2      GPT-2: ``<|endoftext|>`` is BOS, EOS and UNK, no pad, dropout 0.1; ChatML markers added
          as a chat fine-tune would (turn end ``<|im_end|>`` differs from the EOS).
llama     Llama-3.1: BOS ``<|begin_of_text|>`` prepended, EOS ``<|end_of_text|>``, turn end
          ``<|eot_id|>``, no pad, grouped-query attention, untied head.
qwen2     Qwen2.5 base: no BOS, EOS = pad = ``<|endoftext|>``, turn end ``<|im_end|>``, ChatML
          with a default system message, tied embeddings.
gemma2    Gemma-2: ``<pad>``/``<eos>``/``<bos>`` at ids 0/1/2, turn end ``<end_of_turn>``, role
          ``model``, no system role, logit soft-capping, alternating sliding-window layers.
mistral   Mistral-7B-Instruct: ``<s>[INST] ... [/INST]answer</s>``: the turn end *is* the EOS;
          no pad.
opt       OPT: ``</s>`` is BOS and EOS, ``<pad>`` at id 1, dropout 0.1; ChatML attached.
seq_cls   A Llama-3.1 reward model: ``LlamaForSequenceClassification``, one label, pad set.
marian    opus-mt (``MarianMTModel``): EOS ``</s>`` = id 0, pad (the last id) starts the decoder.
t5        T5 v1.0: pad/EOS/UNK at ids 0/1/2, sentinels at the end, dropout 0.1, relative positions.
qwen2_vl  Qwen2-VL-Instruct: EOS = turn end = ``<|im_end|>``, image tokens ``<|image_pad|>``, 3-D
          rotary positions; its processor needs ``torchvision``.
llava     LLaVA with a CLIP vision tower and a Llama-3 text model (llama3-llava-next style),
          ``<image>`` placeholder, ``<pad>`` added.
clip      CLIP: lower-cased text between ``<|startoftext|>`` and ``<|endoftext|>``, 77 positions,
          contrastive image-text logits.
========  ==========================================================================================

Usage::

    from icml25.toy import ARCHITECTURES, save_tiny
    path = save_tiny("qwen2", tmp_path / "qwen2")
    model = AutoModelForCausalLM.from_pretrained(path)
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icml25.toy.arch_tokenizers import CHAT_TEMPLATES, build_family_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast, ProcessorMixin

__all__ = [
    "ARCHITECTURES",
    "CHAT_TEMPLATES",
    "ArchSpec",
    "default_matrix",
    "full_matrix",
    "save_tiny",
    "tiny_model",
    "tiny_tokenizer",
]


@dataclass(frozen=True)
class ArchSpec:
    """One architecture of the matrix.

    Attributes:
        name: short name, the key in :data:`ARCHITECTURES`.
        kind: ``"causal_lm"``, ``"seq2seq"``, ``"vision_lm"``, ``"seq_cls"`` or ``"clip"``.
        template: key of :data:`CHAT_TEMPLATES` (``None``: the tokenizer has no chat template).
        eos_token: the tokenizer's EOS.
        end_of_turn: the token that closes an assistant turn in the template (``None``: no template).
        has_dropout: the real config trains with nonzero dropout, so ``train()`` is stochastic.
        slow: part of the wider matrix only (tests mark it ``slow``).
        auto_model: the ``transformers`` Auto class that reloads a :func:`save_tiny` folder.
    """

    name: str
    kind: str
    template: str | None
    eos_token: str | None
    end_of_turn: str | None
    has_dropout: bool
    slow: bool
    auto_model: str


def _spec(name, kind, template, eos, eot, dropout, slow, auto="AutoModelForCausalLM") -> ArchSpec:
    return ArchSpec(name, kind, template, eos, eot, dropout, slow, auto)


#: The matrix, keyed by short name.
ARCHITECTURES: dict[str, ArchSpec] = {
    s.name: s
    for s in (
        _spec("gpt2", "causal_lm", "chatml", "<|endoftext|>", "<|im_end|>", True, False),
        _spec("llama", "causal_lm", "llama3", "<|end_of_text|>", "<|eot_id|>", False, False),
        _spec("qwen2", "causal_lm", "chatml", "<|endoftext|>", "<|im_end|>", False, False),
        _spec("gemma2", "causal_lm", "gemma", "<eos>", "<end_of_turn>", False, False),
        _spec("mistral", "causal_lm", "mistral", "</s>", "</s>", False, False),
        _spec("opt", "causal_lm", "chatml", "</s>", "<|im_end|>", True, False),
        _spec(
            "seq_cls",
            "seq_cls",
            "llama3",
            "<|end_of_text|>",
            "<|eot_id|>",
            False,
            False,
            "AutoModelForSequenceClassification",
        ),
        _spec("marian", "seq2seq", None, "</s>", None, True, True, "AutoModelForSeq2SeqLM"),
        _spec("t5", "seq2seq", None, "</s>", None, True, True, "AutoModelForSeq2SeqLM"),
        _spec(
            "qwen2_vl",
            "vision_lm",
            "chatml",
            "<|im_end|>",
            "<|im_end|>",
            False,
            True,
            "AutoModelForImageTextToText",
        ),
        _spec(
            "llava",
            "vision_lm",
            "llama3",
            "<|end_of_text|>",
            "<|eot_id|>",
            False,
            True,
            "AutoModelForImageTextToText",
        ),
        _spec("clip", "clip", None, "<|endoftext|>", None, False, True, "AutoModel"),
    )
}

_WIDTH, _FF, _LAYERS, _POSITIONS = 32, 64, 2, 128
_IMAGE = 28  # CLIP/LLaVA image side: 2 x 2 patches of 14 pixels
# Qwen2-VL resizes every image to 56 x 56: 4 x 4 patches of 14, 4 tokens after the 2 x 2 merge.
_QWEN_VL_PIXELS = 56 * 56


def _check(arch: str) -> ArchSpec:
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; valid: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def default_matrix() -> list[str]:
    """Names of the fast architectures (``slow=False``): the default test run covers these."""
    return [name for name, info in ARCHITECTURES.items() if not info.slow]


def full_matrix() -> list[str]:
    """Names of every architecture."""
    return list(ARCHITECTURES)


def tiny_tokenizer(arch: str) -> PreTrainedTokenizerFast | ProcessorMixin:
    """The tokenizer of ``arch`` (a ``PreTrainedTokenizerFast``), or for ``vision_lm`` and
    ``clip`` its processor (``Qwen2VLProcessor``, ``LlavaProcessor``, ``CLIPProcessor``) whose
    ``.tokenizer`` is that tokenizer. Trained afresh in ~10 ms; the same on every call.

    Vocabulary: 512 entries, special tokens included; ``model_max_length`` 128 (CLIP: 77). Image
    processors are tiny: LLaVA and CLIP take 28 x 28 images (4 patch tokens), Qwen2-VL resizes
    to 56 x 56 (4 image tokens).

    Raises:
        ImportError: ``"qwen2_vl"`` without ``torchvision`` (Qwen2-VL's video processor needs it).
    """
    _check(arch)
    tok = build_family_tokenizer(arch)
    if arch == "qwen2_vl":
        import importlib.util

        if importlib.util.find_spec("torchvision") is None:
            raise ImportError(
                "the Qwen2-VL processor needs torchvision (its video processor is torchvision-only):"
                " pip install 'icml25[vision]' (torchvision paired with your torch)"
            )
        from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

        size = {"shortest_edge": _QWEN_VL_PIXELS, "longest_edge": _QWEN_VL_PIXELS}
        return Qwen2VLProcessor(
            image_processor=Qwen2VLImageProcessor(size=size),
            tokenizer=tok,
            video_processor=Qwen2VLVideoProcessor(size=size),
            chat_template=tok.chat_template,
        )
    if arch in ("llava", "clip"):
        from transformers import CLIPProcessor, LlavaProcessor
        from transformers.utils import is_torchvision_available

        # The backend AutoProcessor.from_pretrained picks too, so a reload is bit-identical.
        if is_torchvision_available():
            from transformers.models.clip.image_processing_clip import CLIPImageProcessor
        else:
            from transformers import CLIPImageProcessorPil as CLIPImageProcessor
        images = CLIPImageProcessor(
            size={"shortest_edge": _IMAGE}, crop_size={"height": _IMAGE, "width": _IMAGE}
        )
        if arch == "clip":
            return CLIPProcessor(image_processor=images, tokenizer=tok)
        # CLS + 4 patch tokens, CLS dropped by the "default" feature strategy: 4 image tokens.
        return LlavaProcessor(
            image_processor=images,
            tokenizer=tok,
            patch_size=14,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
            chat_template=tok.chat_template,
        )
    return tok


def _text_ids(tok) -> dict[str, Any]:
    return dict(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def _llama_dims() -> dict[str, Any]:
    return dict(
        hidden_size=_WIDTH,
        intermediate_size=_FF,
        num_hidden_layers=_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as the real 7B+ checkpoints
        max_position_embeddings=_POSITIONS,
    )


def _build(arch: str, tok) -> tuple[Any, list[int] | int | None]:
    """The model of ``arch`` (random init under the caller's seed) and its generation EOS."""
    import transformers as tf

    ids = _text_ids(tok)
    eot = tok.convert_tokens_to_ids(ARCHITECTURES[arch].end_of_turn or tok.eos_token)
    instruct_eos = [tok.eos_token_id, eot]  # instruct checkpoints stop at either
    if arch == "gpt2":
        # n_positions 128; resid/embd/attn dropout keep GPT-2's 0.1 defaults.
        config = tf.GPT2Config(
            n_embd=_WIDTH, n_layer=_LAYERS, n_head=2, n_positions=_POSITIONS, **ids
        )
        return tf.GPT2LMHeadModel(config), tok.eos_token_id
    if arch in ("llama", "seq_cls"):
        config = tf.LlamaConfig(
            **_llama_dims(), **ids, rope_theta=500000.0, tie_word_embeddings=False, num_labels=1
        )
        if arch == "seq_cls":
            return tf.LlamaForSequenceClassification(config), None
        return tf.LlamaForCausalLM(config), instruct_eos  # Llama-3.1-Instruct generation_config
    if arch == "qwen2":
        config = tf.Qwen2Config(**_llama_dims(), **ids, tie_word_embeddings=True)  # as Qwen2.5-0.5B
        return tf.Qwen2ForCausalLM(config), [eot, tok.eos_token_id]  # Qwen2.5-Instruct order
    if arch == "gemma2":
        config = tf.Gemma2Config(
            **{**_llama_dims(), "num_attention_heads": 2, "num_key_value_heads": 1},
            **ids,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=64,  # alternating local/global layers, as Gemma-2
        )
        return tf.Gemma2ForCausalLM(config), instruct_eos  # gemma-2-it generation_config
    if arch == "mistral":
        config = tf.MistralConfig(**_llama_dims(), **ids, head_dim=8, sliding_window=None)
        return tf.MistralForCausalLM(config), tok.eos_token_id
    if arch == "opt":
        config = tf.OPTConfig(
            hidden_size=_WIDTH,
            word_embed_proj_dim=_WIDTH,
            ffn_dim=_FF,
            num_hidden_layers=_LAYERS,
            num_attention_heads=2,
            max_position_embeddings=_POSITIONS,
            dropout=0.1,  # OPT's default
            **ids,
        )
        return tf.OPTForCausalLM(config), tok.eos_token_id
    if arch == "marian":
        config = tf.MarianConfig(
            d_model=_WIDTH,
            encoder_layers=_LAYERS,
            decoder_layers=_LAYERS,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=_FF,
            decoder_ffn_dim=_FF,
            max_position_embeddings=_POSITIONS,
            dropout=0.1,  # Marian's default
            scale_embedding=True,  # as the opus-mt checkpoints
            decoder_start_token_id=tok.pad_token_id,
            forced_eos_token_id=tok.eos_token_id,
            **ids,
        )
        return tf.MarianMTModel(config), tok.eos_token_id
    if arch == "t5":
        config = tf.T5Config(
            d_model=_WIDTH,
            d_kv=16,
            d_ff=_FF,
            num_layers=_LAYERS,
            num_heads=2,
            dropout_rate=0.1,  # T5's default
            decoder_start_token_id=tok.pad_token_id,
            **ids,
        )
        return tf.T5ForConditionalGeneration(config), tok.eos_token_id
    if arch == "qwen2_vl":
        text = dict(
            **{**_llama_dims(), "num_attention_heads": 2, "num_key_value_heads": 1},
            **ids,
            # 3-D rotary positions (time, height, width) over head_dim/2 = 8 frequencies.
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3]},
        )
        vision = dict(depth=_LAYERS, embed_dim=_WIDTH, hidden_size=_WIDTH, num_heads=2, mlp_ratio=2)
        config = tf.Qwen2VLConfig(
            text_config=text,
            vision_config=vision,
            image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
            video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
            vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
            vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
            **ids,
        )
        return tf.Qwen2VLForConditionalGeneration(config), [eot, tok.pad_token_id]
    if arch in ("llava", "clip"):
        vision = dict(
            hidden_size=_WIDTH,
            intermediate_size=_FF,
            num_hidden_layers=_LAYERS,
            num_attention_heads=2,
            image_size=_IMAGE,
            patch_size=14,
        )
        if arch == "clip":
            text = dict(
                hidden_size=_WIDTH,
                intermediate_size=_FF,
                num_hidden_layers=_LAYERS,
                num_attention_heads=2,
                max_position_embeddings=tok.model_max_length,  # CLIP's 77
                **ids,
            )
            config = tf.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
            return tf.CLIPModel(config), None
        text = dict(model_type="llama", **_llama_dims(), **ids, tie_word_embeddings=False)
        config = tf.LlavaConfig(
            vision_config=dict(model_type="clip_vision_model", **vision),
            text_config=text,
            image_token_index=tok.convert_tokens_to_ids("<image>"),
            image_seq_length=4,
            vision_feature_select_strategy="default",
            vision_feature_layer=-2,
        )
        return tf.LlavaForConditionalGeneration(config), instruct_eos
    raise AssertionError(arch)


def _dtype(dtype: Any) -> torch.dtype | None:
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    raise TypeError(f"dtype must be a torch.dtype or its name (e.g. 'bfloat16'), got {dtype!r}")


def tiny_model(
    arch: str, *, dtype: torch.dtype | str | None = None, seed: int = 0
) -> PreTrainedModel:
    """A random-init model of ``arch`` in ``eval()`` mode (as ``from_pretrained`` returns it).

    Args:
        arch: a key of :data:`ARCHITECTURES`.
        dtype: parameter dtype (default float32), e.g. ``torch.bfloat16`` or ``"bfloat16"``.
        seed: seeds the initialisation; the global torch RNG is left untouched.

    Returns:
        The ``transformers`` model (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...), with the
        vocabulary and token ids of ``tiny_tokenizer(arch)`` and, for generative models, the
        family's ``generation_config.eos_token_id`` (a list where the instruct checkpoints use one).
    """
    import torch

    _check(arch)
    dtype = _dtype(dtype)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    tok = build_family_tokenizer(arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, generation_eos = _build(arch, tok)
    if generation_eos is not None:
        model.generation_config.eos_token_id = generation_eos
        model.generation_config.bos_token_id = tok.bos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


def save_tiny(
    arch: str,
    path: str | pathlib.Path,
    *,
    dtype: torch.dtype | str | None = None,
    seed: int = 0,
) -> pathlib.Path:
    """Write ``tiny_model(arch)`` and ``tiny_tokenizer(arch)`` to the folder ``path`` with
    ``save_pretrained``; returns the folder.

    Reload with ``getattr(transformers, ARCHITECTURES[arch].auto_model).from_pretrained(path)`` and
    ``AutoTokenizer`` (``AutoProcessor`` for ``vision_lm`` and ``clip``). Saved in ``dtype``, so
    ``from_pretrained(path, dtype="auto")`` gives that dtype back.
    """
    out = pathlib.Path(path)
    tokenizer = tiny_tokenizer(arch)  # first: a missing torchvision fails before anything is built
    model = tiny_model(arch, dtype=dtype, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
