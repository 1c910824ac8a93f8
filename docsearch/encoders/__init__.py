"""Encoders: the `Encoder` protocol, the registry, and one module per family.

Families are imported only when asked for, so listing or searching lexically never loads torch.
"""

from docsearch.encoders.base import Encoder, available, encoder_from_spec, get_encoder, register

__all__ = ["Encoder", "available", "encoder_from_spec", "get_encoder", "register"]
