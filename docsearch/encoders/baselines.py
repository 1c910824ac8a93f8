"""The training-free baselines of the KV-Embedding paper, on any HF decoder LLM.

- `last-token`: the final hidden state of the last token of the raw text.
- `mean`: the mean of the final hidden states of the raw text.
- `prompteol`: the last token under `This sentence : "{text}" means in one word:"` (Jiang et al.,
  2023; note the space before the colon and the trailing quote).
- `echo`: the text twice, pooling only the second copy, which has seen the whole text through
  the first (Springer et al., 2024): `Query:{text}\\nQuery again:{text}` for queries and
  `Document:{text}\\nDocument again:{text}` for documents, mean over the second copy.
Every option of `DecoderEncoder` applies (templates, pooling, pool span). They run on the
model's own attention (`sdpa` or `eager`), so they double as the plain-model reference for
KV-Embedding. Not here: Token Prepending (it needs per-layer state surgery, not a template).
"""

from __future__ import annotations

from docsearch.encoders.base import register
from docsearch.encoders.decoder_common import DecoderEncoder

PROMPTEOL = 'This sentence : "{text}" means in one word:"'


@register("last-token")
class LastTokenEncoder(DecoderEncoder):
    """Last-token pooling of the raw text."""

    name = "last-token"
    pooling_default = "last"


@register("mean")
class MeanEncoder(DecoderEncoder):
    """Mean pooling of the raw text."""

    name = "mean"
    pooling_default = "mean"


@register("prompteol")
class PromptEOLEncoder(DecoderEncoder):
    """Last-token pooling under the PromptEOL one-word prompt (same prompt for both sides)."""

    name = "prompteol"
    query_template_default = PROMPTEOL
    document_template_default = PROMPTEOL
    pooling_default = "last"


@register("echo")
class EchoEncoder(DecoderEncoder):
    """Echo embeddings: mean over the second copy of the text."""

    name = "echo"
    query_template_default = "Query:{text}\nQuery again:{text}"
    document_template_default = "Document:{text}\nDocument again:{text}"
    pooling_default = "mean"
    pool_span_default = "text"
