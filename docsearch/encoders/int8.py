"""int8 inference for a transformer's Linear layers, close enough to fp32 to pass the quality gate.

Each `nn.Linear` becomes an `Int8Linear`: int8 weights with one scale per output channel, int8
activations with one scale per token (per row), an int32 product (`torch._int_mm`, exact), and
two fixes for the few input channels whose activations are far larger than the rest (BERT's
LayerNorm and GELU outputs have them), calibrated once from the model's activations on a fixed
sample of text:

- smoothing (as in SmoothQuant): input channel j is divided by s_j = sqrt(max|x_j| / max|W_j|)
  and the weights' column j multiplied by it, the same product with flatter activations;
- the KEPT_CHANNELS largest input channels after smoothing stay in fp32: their slice of the
  product is a small fp32 matmul added to the int8 one.

Two kernels run the integer product exactly (`kernel_here` picks): "dot", symmetric int8
activations and `torch._int_mm`, on CPUs with int8 dot-product instructions (VNNI, AMX, Arm
dotprod); "fbgemm", each token mapped affinely onto 0..127 and fbgemm's dynamic Linear, on other
x86 CPUs (AVX2 only), where a full 8-bit product would saturate its 16-bit pair sums.

Measured on MiniLM against fp32 (mean cosine; 96 windows of scifact, and where named of qmsum
and cuad too; calibrated on the built-in sample only): torch's dynamic quantisation (per-tensor,
7-bit activations on x86) 0.983; per-token activations 0.9976; with smoothing 0.9989-0.9990;
with 8 kept channels 0.9993-0.9995 (all three sets); the fbgemm kernel's 7-bit affine tokens
0.9993-0.9994 (with torch's kernels held to AVX2: benchmarks/results/precision_avx2.md and
peers_avx2.md). benchmarks/precision.py measures the gate on the real sets. The calibration is
run again by each process that builds an int8 encoder: 0.45 s for MiniLM on 2 cores, beside the
2.2 s of loading it.

Not here: when int8 is used (precision.py), the calibration texts (sample_texts.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from docsearch.encoders.file_pages import drop_pages

# The SmoothQuant exponent: 0.5 splits a channel's range evenly between activations and
# weights (0.4-0.6 measured alike, 0 and 0.85 far worse).
SMOOTHING = 0.5
KEPT_CHANNELS = 8  # 8 and 16 measured alike; with none, 1 - cosine went from 0.0006 to 0.0011
_LEVELS = 127.0  # symmetric int8: -127..127


# Where the CPU has no int8 dot products (x86 with AVX2 only), an int8 matmul sums pairs of
# u8 x s8 products in 16 bits and saturates unless the u8 side stays within 7 bits; fbgemm's
# dynamic Linear holds it there (`reduce_range`). So that kernel maps each token affinely onto
# 0..127 (its minimum to 0: GELU and LayerNorm outputs are lopsided, and an affine grid spends
# no level on the side they lack) and hands fbgemm the rows already on that grid.
AFFINE_LEVELS = 127.0
KERNELS = ("dot", "fbgemm")


def kernel_here() -> str | None:
    """The exact int8 kernel this CPU runs fast: "dot" (`torch._int_mm`) with int8 dot-product
    instructions, "fbgemm" (7-bit activations) on other x86 CPUs, None elsewhere."""
    from docsearch.encoders.device import cpu_has_int8_dot

    if cpu_has_int8_dot() and hasattr(torch, "_int_mm"):
        return "dot"
    return "fbgemm" if "fbgemm" in torch.backends.quantized.supported_engines else None


class Int8Linear(nn.Module):
    """`linear`'s product in int8, given the largest |activation| each input channel reached
    on the calibration sample (`input_max`, shape (in_features,)), by `kernel` (KERNELS;
    default `kernel_here()`)."""

    kept: torch.Tensor  # input channels kept in fp32, ascending
    kept_weight: torch.Tensor  # (kept, out) fp32
    weight: torch.Tensor  # "dot": (in, out) int8, the kept rows zero
    weight_scale: torch.Tensor  # "dot": (out,) one scale per output channel
    weight_sum: torch.Tensor  # "fbgemm": (out,) each output's sum of its int8 weights as floats
    unsmooth: torch.Tensor  # (in,) 1 / the smoothing factors
    bias: torch.Tensor  # (out,) zero when the layer has none

    def __init__(
        self, linear: nn.Linear, input_max: torch.Tensor, kernel: str | None = None
    ) -> None:
        super().__init__()
        self.kernel = kernel or kernel_here()
        if self.kernel not in KERNELS:
            raise ValueError(f"no int8 kernel {self.kernel!r} here; one of {', '.join(KERNELS)}")
        weight = linear.weight.detach().float()
        weight_max = weight.abs().amax(0).clamp(min=1e-5)
        smooth = input_max.float().clamp(min=1e-5) ** SMOOTHING / weight_max ** (1 - SMOOTHING)
        smooth = smooth.clamp(min=1e-5)
        weight = weight * smooth
        kept = (input_max / smooth).topk(min(KEPT_CHANNELS, weight.shape[1])).indices.sort()[0]
        self.register_buffer("kept", kept)
        self.register_buffer("kept_weight", weight[:, kept].t().contiguous())  # (kept, out)
        weight[:, kept] = 0.0
        scale = weight.abs().amax(1).clamp(min=1e-12) / _LEVELS  # per output channel
        quantised = (weight / scale[:, None]).round().clamp(-_LEVELS, _LEVELS)
        if self.kernel == "dot":
            self.register_buffer("weight", quantised.to(torch.int8).t().contiguous())
            self.register_buffer("weight_scale", scale)
        else:
            self.packed = _fbgemm_weight(quantised, scale)
            self.register_buffer("weight_sum", (quantised * scale[:, None]).sum(1))
        self.register_buffer("unsmooth", 1.0 / smooth)
        bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros(len(scale))
        self.register_buffer("bias", bias)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1]).float() * self.unsmooth  # a fresh tensor: edited below
        # (index_select and index_fill_: the same values as rows[:, kept] and its assignment,
        # 4-6x and 1.6x faster on 1024-row batches.)
        kept = rows.index_select(1, self.kept)
        rows.index_fill_(1, self.kept, 0.0)
        out = self._dot(rows) if self.kernel == "dot" else self._fbgemm(rows)
        out.addmm_(kept, self.kept_weight)
        return out.view(*shape[:-1], self.out_features).to(x.dtype)

    def _dot(self, rows: torch.Tensor) -> torch.Tensor:
        """Symmetric int8 per token, an exact int32 product."""
        # max |x| per row as max(max x, -min x): exactly the same value without writing |x| to a
        # fresh tensor, whose first touch cost 12 ms of a 172 ms MiniLM forward (4 windows, one
        # thread); aminmax and the inf-norm measured 10x slower.
        peak = torch.maximum(rows.amax(1, keepdim=True), rows.amin(1, keepdim=True).neg_())
        scale = peak.clamp_(min=1e-12).div_(_LEVELS)
        quantised = rows.div_(scale).round_().to(torch.int8)
        out = torch._int_mm(quantised, self.weight).float().mul_(scale)
        return torch.addcmul(self.bias, out, self.weight_scale)

    def _fbgemm(self, rows: torch.Tensor) -> torch.Tensor:
        """Affine 7-bit per token: each row as low + step * (0..127). fbgemm quantises the
        whole input with one scale from its range, here exactly that grid (0 to 127)."""
        low = rows.amin(1, keepdim=True)
        step = (rows.amax(1, keepdim=True) - low).clamp_(min=1e-12).div_(AFFINE_LEVELS)
        grid = rows.sub_(low).div_(step)
        out = torch.ops.quantized.linear_dynamic(grid, self.packed, True)  # 7-bit activations
        out = torch.addcmul(self.bias, out, step)
        return out.addmm_(low, self.weight_sum[None, :])  # the rows' lows times the weights

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 {self.kernel}"
        )


def _fbgemm_weight(quantised: torch.Tensor, scale: torch.Tensor) -> Any:
    """fbgemm's packed form of (out, in) int8 weights with one scale per output channel."""
    import warnings

    with warnings.catch_warnings():  # torch marks its quantised tensors as deprecated
        warnings.simplefilter("ignore", UserWarning)
        zero = torch.zeros(len(scale), dtype=torch.long)
        weight = torch._make_per_channel_quantized_tensor(
            quantised.to(torch.int8), scale.double(), zero, 0
        )
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "fbgemm"  # the packed weights carry their kernel with them
    try:
        return torch.ops.quantized.linear_prepack(weight, None)
    finally:
        torch.backends.quantized.engine = engine


def quantise(model: nn.Module, run_sample: Callable[[nn.Module], Any]) -> nn.Module:
    """`model` with every `nn.Linear` replaced, in place, by an `Int8Linear` calibrated on the
    activations `run_sample(model)` produces in fp32. An attention block that offers a `fused`
    slot (bert_folder's) gets its query, key and value as one Int8Linear there."""
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    seen: dict[str, torch.Tensor] = {}

    def recorder(name: str) -> Callable[..., None]:
        def record(_module: nn.Module, inputs: tuple[torch.Tensor, ...], _output: Any) -> None:
            peak = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).abs().amax(0).float()
            seen[name] = torch.maximum(seen[name], peak) if name in seen else peak

        return record

    hooks = [m.register_forward_hook(recorder(name)) for name, m in linears.items()]
    try:
        with torch.inference_mode():
            run_sample(model)
    finally:
        for hook in hooks:
            hook.remove()
    fused = _fuse_projections(model, seen)
    for name, linear in linears.items():
        if name not in seen or name in fused:  # a training head the sample skips: left as is
            continue
        parent, _, leaf = name.rpartition(".")
        with torch.no_grad():
            setattr(model.get_submodule(parent), leaf, Int8Linear(linear, seen[name]))
    # The fp32 weights replaced (and those fused, kept but never read again) were read by the
    # calibration: where they are pages of a mapped weights file, those would stay resident.
    drop_pages(linears[name].weight for name in seen if name in linears)
    return model


def _fuse_projections(model: nn.Module, seen: dict[str, torch.Tensor]) -> set[str]:
    """Fill each `fused` slot with one Int8Linear over its block's query, key and value (their
    weights stacked; they share one input, so one activation maximum); the names fused."""
    done: set[str] = set()
    leaves = ("query", "key", "value")
    for name, block in model.named_modules():
        parts = [f"{name}.{leaf}" if name else leaf for leaf in leaves]
        if not hasattr(block, "fused") or block.fused is not None or parts[0] not in seen:
            continue
        layers = [getattr(block, leaf) for leaf in leaves]
        if any(m.bias is None for m in layers):
            continue
        stacked = nn.Linear(layers[0].in_features, sum(m.out_features for m in layers))
        with torch.no_grad():
            stacked.weight.copy_(torch.cat([m.weight for m in layers]))
            stacked.bias.copy_(torch.cat([m.bias for m in layers]))
            block.fused = Int8Linear(stacked, seen[parts[0]])
        done.update(parts)
    return done
