"""A model folder's fast tokenizer run by `tokenizers` straight from its tokenizer.json, with the
part of transformers' tokenizer call that the BERT folder's encoder uses.

Why: `from transformers import AutoTokenizer` imports transformers, which scans every model it
ships to build its lazy namespace: 1-2 s of every process that encodes (each `docsearch index`,
each cold hybrid search), more than loading MiniLM's weights. transformers' fast tokenizer is
this same file run by this same library: it sets truncation and padding on it per call, as
`__call__` here does. Used only where transformers would run the file as it is: a BERT
tokenizer whose normalizer says what tokenizer_config.json says, or the generic fast class;
anything else (and a folder without tokenizer.json) is loaded by AutoTokenizer
(`load_tokenizer`). Tested token for token against AutoTokenizer on MiniLM's folder.
Not here: slow (Python) tokenizers, pairs of texts, decoding, training (which loads the
sentence-transformers model with transformers' own tokenizer).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# What transformers reports as the limit of a tokenizer whose config names none.
NO_LIMIT = int(1e30)
_BERT = ("BertTokenizer", "BertTokenizerFast")
# The generic fast class, by its names before and since transformers 5: it runs the file as is.
_GENERIC = ("PreTrainedTokenizerFast", "TokenizersBackend")
# What each kind returns, unless its config names them (`model_input_names`), as transformers does.
_BERT_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
_GENERIC_INPUTS = ("input_ids", "attention_mask")
_FIELDS = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}


def load_tokenizer(folder: Path) -> Any:
    """`folder`'s tokenizer: a FolderTokenizer where it runs the file as transformers would,
    else transformers' AutoTokenizer."""
    found = FolderTokenizer.of(folder)
    if found is not None:
        return found
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _runs_as_written(config: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether transformers would run tokenizer.json (`spec`) unchanged for this config: its
    BERT class rebuilds the normalizer when the config's case and accent settings differ."""
    kind = config.get("tokenizer_class")
    if kind in _GENERIC:
        return True
    if kind not in _BERT:
        return False
    norm = spec.get("normalizer") or {}
    return (
        norm.get("type") == "BertNormalizer"
        and norm.get("lowercase") == config.get("do_lower_case", True)
        and norm.get("strip_accents") == config.get("strip_accents")
        and norm.get("handle_chinese_chars") == config.get("tokenize_chinese_chars", True)
    )


class FolderTokenizer:
    """Called as transformers' tokenizers are, for one text or a list: token ids (lists, or
    tensors with `return_tensors="pt"`), attention mask and token types, offsets on request;
    `padding` to the longest, `truncation` to `max_length`."""

    def __init__(
        self, spec: str, pad_token: str, model_max_length: int, inputs: Sequence[str]
    ) -> None:
        from tokenizers import Tokenizer

        self._plain = Tokenizer.from_str(spec)
        self._plain.no_truncation()  # the file may carry the settings it was saved with
        self._plain.no_padding()
        # Truncation and padding are settings of the tokenizer object: a second one holds them,
        # set under a lock, so counting on another thread never sees them.
        self._shaped = Tokenizer.from_str(spec)
        self._shaping = threading.Lock()
        self.pad_token = pad_token
        self.pad_token_id = self._plain.token_to_id(pad_token)
        self.model_max_length = model_max_length
        self.model_input_names = list(inputs)
        self._spec = spec

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what it is made from (a lock does not pickle)."""
        made = (self._spec, self.pad_token, self.model_max_length, self.model_input_names)
        return (FolderTokenizer, made)

    def __deepcopy__(self, memo: dict[int, Any]) -> FolderTokenizer:
        """Itself: nothing in it changes but under its own lock, so copies of a model (the
        precision conversions) share it."""
        return self

    @classmethod
    def of(cls, folder: Path) -> FolderTokenizer | None:
        """`folder`'s tokenizer, or None where transformers would not run its file as written
        (or it names no padding token, which padding needs, or inputs this class does not make)."""
        try:
            spec = (folder / "tokenizer.json").read_text(encoding="utf-8")
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        pad = config.get("pad_token")
        if not isinstance(pad, str) or not _runs_as_written(config, json.loads(spec)):
            return None
        default = _GENERIC_INPUTS if config.get("tokenizer_class") in _GENERIC else _BERT_INPUTS
        inputs = config.get("model_input_names") or default
        if not set(inputs) <= set(_FIELDS):
            return None
        found = cls(spec, pad, int(config.get("model_max_length") or NO_LIMIT), inputs)
        return found if found.pad_token_id is not None else None

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        return_tensors: str | None = None,
        return_offsets_mapping: bool = False,
        verbose: bool = True,  # noqa: ARG002 - transformers' length warning: none is given
    ) -> dict[str, Any]:
        one = isinstance(text, str)
        texts = [text] if one else list(text)
        truncate = truncation not in (None, False, "do_not_truncate")
        pad = padding not in (False, "do_not_pad")
        if truncate and truncation not in (True, "longest_first"):
            raise ValueError(f"truncation {truncation!r} is not supported here")
        if truncate or pad:
            with self._shaping:
                self._shape(self._limit(max_length) if truncate else None, pad)
                found = self._shaped.encode_batch(texts, add_special_tokens=add_special_tokens)
        else:
            found = self._plain.encode_batch(texts, add_special_tokens=add_special_tokens)
        out = {key: [getattr(e, _FIELDS[key]) for e in found] for key in self.model_input_names}
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets for e in found]
        if return_tensors == "pt":
            import torch

            return {key: torch.tensor(value) for key, value in out.items()}
        if return_tensors is not None:
            raise ValueError(f"return_tensors {return_tensors!r} is not supported here")
        return {key: value[0] for key, value in out.items()} if one else out

    def _limit(self, max_length: int | None) -> int | None:
        """The length to truncate to: `max_length`, else the tokenizer's own (if it has one)."""
        limit = max_length if max_length is not None else self.model_max_length
        return limit if limit < NO_LIMIT else None

    def _shape(self, max_length: int | None, pad: bool) -> None:
        if max_length is None:
            self._shaped.no_truncation()
        else:
            self._shaped.enable_truncation(max_length, strategy="longest_first")
        if pad:
            self._shaped.enable_padding(pad_id=self.pad_token_id, pad_token=self.pad_token)
        else:
            self._shaped.no_padding()
