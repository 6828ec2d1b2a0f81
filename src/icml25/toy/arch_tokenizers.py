"""Tokenizers, processors and chat templates for the architecture matrix (:mod:`icml25.toy.archs`).

Every tokenizer is a byte-level BPE trained in milliseconds on :func:`corpus`, wrapped as a
``transformers.PreTrainedTokenizerFast`` and given the *real* special tokens of the family it stands
for, at the positions the real vocabulary puts them (GPT-2, Llama-3, Qwen2 and CLIP append theirs
after the BPE vocabulary; Gemma, Mistral, OPT and T5 start with them; Marian starts with ``</s>``
and ends with ``<pad>``). The real families use SentencePiece for some of these; the byte-level
model is the one deviation, and it keeps every string encodable.

What is worth copying is where the real families differ from each other: which token ends a
turn versus which ends the text, whether a BOS is prepended, whether a pad token exists, whether
the template injects a system message or refuses one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHAT_TEMPLATES", "build_family_tokenizer", "corpus"]

# An image part of a message ({"type": "image"} or {"image": ...}) renders as the family's placeholder.
_CONTENT_MACRO = (
    "{%- macro render(content, image) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- elif part['type'] == 'image' or 'image' in part -%}{{ image }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)

#: Jinja chat templates as the real families ship them (content may be a string or a list of
#: ``{"type": "text"|"image", ...}`` parts, as ``transformers`` processors expect).
CHAT_TEMPLATES: dict[str, str] = {
    # Qwen2 / Qwen2.5 / Qwen2-VL: ChatML with a default system message when none is given; image
    # parts become <|vision_start|><|image_pad|><|vision_end|> as in Qwen2-VL.
    "chatml": _CONTENT_MACRO + "{%- if messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{{ render(message['content'], '<|vision_start|><|image_pad|><|vision_end|>') }}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}",
    # Meta Llama-3: BOS, then a header per message, content trimmed, each turn closed by <|eot_id|>
    # (not by the EOS <|end_of_text|>); image parts become <image> as in llama3-llava-next.
    "llama3": _CONTENT_MACRO + "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ render(message['content'], '<image>') | trim }}{{ '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif -%}",
    # Google Gemma / Gemma-2: BOS, the assistant speaks as "model", a system message raises, roles
    # must alternate, each turn closed by <end_of_turn> (not by the EOS <eos>).
    "gemma": _CONTENT_MACRO + "{{- bos_token -}}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{ raise_exception('System role not supported') }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' }}{{ render(message['content'], '') | trim }}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}",
    # Mistral-7B-Instruct: <s>[INST] user [/INST]assistant</s>: the assistant turn ends with the
    # EOS itself; the prompt ends at [/INST], so there is no separate generation prompt. A system
    # message is folded into the first user turn (Mistral's templates have no system role).
    "mistral": _CONTENT_MACRO + "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set system_message = messages[0]['content'] -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'user' -%}"
    "{%- if loop.first and system_message is defined -%}"
    "{{ '[INST] ' + system_message + '\\n\\n' + render(message['content'], '') + ' [/INST]' }}"
    "{%- else -%}{{ '[INST] ' + render(message['content'], '') + ' [/INST]' }}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ render(message['content'], '') + eos_token }}"
    "{%- else -%}"
    "{{ raise_exception('Only user and assistant roles are supported, with an optional first system message') }}"
    "{%- endif -%}"
    "{%- endfor -%}",
}

_SUBJECTS = (
    "the cat",
    "a dog",
    "the model",
    "my friend",
    "the teacher",
    "a student",
    "the user",
    "the assistant",
    "our team",
    "the robot",
    "a child",
    "the doctor",
)
_VERBS = (
    "reads",
    "writes",
    "answers",
    "asks about",
    "likes",
    "finds",
    "explains",
    "opens",
    "counts",
    "draws",
    "helps with",
    "forgets",
)
_OBJECTS = (
    "the red book",
    "a long letter",
    "the hard question",
    "a small image",
    "the blue house",
    "three green apples",
    "the old map",
    "a short story",
    "the new code",
    "seven white birds",
    "the weather report",
    "a simple answer",
    "the last page",
)
_ENDINGS = (
    "today",
    "in the morning",
    "at night",
    "very slowly",
    "with care",
    "again",
    "before lunch",
    "after school",
    "for a while",
    "without help",
    "every day",
)
_QUESTIONS = (
    "What is {o}?",
    "Why does {s} like {o}?",
    "Can you describe {o}?",
    "Where is {o}?",
    "How many words are in {o}?",
    "Please summarize {o}.",
    "Hello! Tell me about {o}.",
)


def corpus(n: int = 480) -> list[str]:
    """``n`` short English sentences (statements and chat-like questions), the same on every call.

    Built from fixed word lists with coprime strides, so no RNG is involved.
    """
    out = []
    for i in range(n):
        s, o = _SUBJECTS[i % len(_SUBJECTS)], _OBJECTS[(3 * i) % len(_OBJECTS)]
        if i % 4 == 3:
            out.append(_QUESTIONS[(i // 4) % len(_QUESTIONS)].format(s=s, o=o))
        else:
            v, e = _VERBS[(5 * i) % len(_VERBS)], _ENDINGS[(7 * i) % len(_ENDINGS)]
            out.append(f"{s.capitalize()} {v} {o} {e}. It is number {i % 100}.")
    return out


def _bpe(head: list[str], tail: list[str], *, vocab_size: int = 512, lowercase: bool = False):
    """A byte-level BPE over :func:`corpus` with special tokens ``head`` at ids ``0..`` and
    ``tail`` appended after the learned vocabulary (where each real family puts them)."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    if lowercase:
        tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(tail),
        special_tokens=head,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tail])
    return tok


# Per family: special tokens at the start / end of the vocabulary, the named special tokens, whether
# the tokenizer prepends BOS / appends EOS, and the chat template.
_FAMILIES: dict[str, dict[str, Any]] = {
    # GPT-2 has one special token for everything and no pad; ChatML markers added as a fine-tune would.
    "gpt2": dict(
        head=[],
        tail=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos="<|endoftext|>",
        eos="<|endoftext|>",
        unk="<|endoftext|>",
        pad=None,
        template="chatml",
    ),
    # Llama-3.1 base: BOS prepended, EOS <|end_of_text|>, turns end with <|eot_id|>, no pad.
    "llama": dict(
        head=[],
        tail=[
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|finetune_right_pad_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ],
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        pad=None,
        add_bos=True,
        template="llama3",
    ),
    # Qwen2.5 base: no BOS, EOS = pad = <|endoftext|>, turns end with <|im_end|>.
    "qwen2": dict(
        head=[],
        tail=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos=None,
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        template="chatml",
    ),
    # Gemma-2: <pad>=0, <eos>=1, <bos>=2, <unk>=3; BOS prepended; turns end with <end_of_turn>.
    "gemma2": dict(
        head=["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"],
        tail=[],
        bos="<bos>",
        eos="<eos>",
        unk="<unk>",
        pad="<pad>",
        add_bos=True,
        template="gemma",
    ),
    # Mistral: <unk>=0, <s>=1, </s>=2, [INST]/[/INST] as control tokens (v0.3); no pad.
    "mistral": dict(
        head=["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
        tail=[],
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        pad=None,
        add_bos=True,
        template="mistral",
    ),
    # OPT: <s>=0, <pad>=1, </s>=2, <unk>=3, and </s> is also the BOS it prepends.
    "opt": dict(
        head=["<s>", "<pad>", "</s>", "<unk>"],
        tail=["<|im_start|>", "<|im_end|>"],
        bos="</s>",
        eos="</s>",
        unk="<unk>",
        pad="<pad>",
        add_bos=True,
        template="chatml",
    ),
    # T5: <pad>=0, </s>=1, <unk>=2, EOS appended, sentinels at the end (<extra_id_0> last).
    "t5": dict(
        head=["<pad>", "</s>", "<unk>"],
        tail=[f"<extra_id_{i}>" for i in reversed(range(4))],
        bos=None,
        eos="</s>",
        unk="<unk>",
        pad="<pad>",
        add_eos=True,
        template=None,
    ),
    # Marian (opus-mt): </s>=0, <unk>=1, EOS appended, <pad> is the last id.
    "marian": dict(
        head=["</s>", "<unk>"],
        tail=["<pad>"],
        bos=None,
        eos="</s>",
        unk="<unk>",
        pad="<pad>",
        add_eos=True,
        template=None,
    ),
    # Qwen2-VL-Instruct: EOS is <|im_end|> (the turn end), pad <|endoftext|>, vision markers.
    "qwen2_vl": dict(
        head=[],
        tail=[
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|image_pad|>",
            "<|video_pad|>",
        ],
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        template="chatml",
    ),
    # LLaVA on a Llama-3 backbone (llama3-llava-next style): Llama-3 tokens plus <image> and <pad>.
    "llava": dict(
        head=[],
        tail=[
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<image>",
            "<pad>",
        ],
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        pad="<pad>",
        add_bos=True,
        template="llama3",
    ),
    # A Llama-3.1 reward model: as "llama", with the reserved pad token used as pad.
    "seq_cls": dict(
        head=[],
        tail=[
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|finetune_right_pad_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ],
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        pad="<|finetune_right_pad_id|>",
        add_bos=True,
        template="llama3",
    ),
    # CLIP: lower-cased text wrapped in <|startoftext|> ... <|endoftext|>; pad = EOS; 77 positions.
    "clip": dict(
        head=[],
        tail=["<|startoftext|>", "<|endoftext|>"],
        bos="<|startoftext|>",
        eos="<|endoftext|>",
        unk="<|endoftext|>",
        pad="<|endoftext|>",
        add_bos=True,
        add_eos=True,
        template=None,
        lowercase=True,
        max_length=77,
    ),
}


def build_family_tokenizer(family: str):
    """The ``PreTrainedTokenizerFast`` of ``family`` (a key of :data:`icml25.toy.ARCHITECTURES`)."""
    from transformers import PreTrainedTokenizerFast

    fam = _FAMILIES[family]
    named = {fam.get(k) for k in ("bos", "eos", "unk", "pad")}
    extra = [t for t in fam["head"] + fam["tail"] if t not in named]
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(fam["head"], fam["tail"], lowercase=fam.get("lowercase", False)),
        bos_token=fam.get("bos"),
        eos_token=fam.get("eos"),
        unk_token=fam.get("unk"),
        pad_token=fam.get("pad"),
        additional_special_tokens=extra,
        add_bos_token=fam.get("add_bos", False),
        add_eos_token=fam.get("add_eos", False),
        model_max_length=fam.get("max_length", 128),
    )
    if fam["template"] is not None:
        tok.chat_template = CHAT_TEMPLATES[fam["template"]]
    return tok
