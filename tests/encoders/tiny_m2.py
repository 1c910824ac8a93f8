"""Tiny random M2-BERT checkpoints in the released layout, for tests and the GPU benchmark.

`build_tokenizer(words)` is a small uncased WordPiece tokenizer laid out like
bert-base-uncased; `save_random_checkpoint(folder)` writes config.json (`model_type` m2_bert,
the `TINY_CONFIG` shape unless overridden), model.safetensors (`bert.*` keys, six freq aliases
per filter) and that tokenizer, which `get_encoder("m2-bert", model=folder)` loads offline.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from docsearch.encoders.m2_bert import TINY_CONFIG, M2BertModel, M2Config, save_checkpoint

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BASIC_WORDS = """the of and to in a is that for it as with was on be by this are or from at an not
which have has had were but all can will one its their more also other may been into such
than any these only two no new some would there time each first between under after used
document section clause party agreement contract court patient study data model method results
table figure page report law act shall must said number system use case""".split()


def build_tokenizer(words: Sequence[str] = (), max_length: int = 512) -> PreTrainedTokenizerFast:
    """`[PAD]` is id 0, texts become `[CLS] ... [SEP]`; single characters and their `##`
    continuations cover any ASCII text, `words` (plus a few common ones) become single tokens."""
    chars = string.ascii_lowercase + string.digits
    pieces = [*chars, *string.punctuation, *(f"##{c}" for c in chars)]
    vocab = list(dict.fromkeys([*SPECIALS, *pieces, *BASIC_WORDS, *(w.lower() for w in words)]))
    ids = {token: i for i, token in enumerate(vocab)}
    raw = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    raw.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        model_max_length=max_length,
        **{f"{name}_token": f"[{name.upper()}]" for name in ("pad", "unk", "cls", "sep", "mask")},
    )


def save_random_checkpoint(
    folder: str | Path, *, seed: int = 0, words: Sequence[str] = (), **overrides: Any
) -> Path:
    """Write a tiny random M2-BERT folder in the released layout and return its path."""
    tokenizer = build_tokenizer(words)
    vocab_size = -(-len(tokenizer) // 8) * 8  # padded to a multiple of 8, like 30522 -> 30528
    config = M2Config(**{**TINY_CONFIG, "vocab_size": vocab_size, **overrides})
    torch.manual_seed(seed)
    return save_checkpoint(M2BertModel(config), folder, tokenizer=tokenizer)
