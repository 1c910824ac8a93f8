"""int8 Linear layers (docsearch/encoders/int8.py): the product, the outlier channels, the swap.

Both kernels' integer products are exact (the "dot" kernel's with int8 dot-product
instructions; fbgemm's because its activations keep to 7 bits, so no 16-bit pair sum
saturates), so the bounds below are those of the rounding alone: each weight is within half a
step (its row's max / 127) of the smoothed weight, each activation within half a step (its
token's max / 127 for "dot", its token's range / 127 for fbgemm's affine grid). A kernel's tests
are skipped where it does not run.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from docsearch.encoders import int8
from docsearch.encoders.int8 import KEPT_CHANNELS, Int8Linear, quantise

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DOT = pytest.param(
    "dot", marks=pytest.mark.skipif(int8.kernel_here() != "dot", reason="needs VNNI or AMX")
)
FBGEMM = pytest.param(
    "fbgemm",
    marks=pytest.mark.skipif(
        "fbgemm" not in torch.backends.quantized.supported_engines, reason="fbgemm is x86 only"
    ),
)
KERNELS = [DOT, FBGEMM]


def outlier_inputs(rows: int, width: int, seed: int = 0) -> torch.Tensor:
    """Activations like a LayerNorm's: most channels ~N(0, 1), three channels 60x larger."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g)
    x[:, [3, 17, 40]] *= 60.0
    return x


def rounding_bound(layer: Int8Linear, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The largest error rounding may cause in each output: sum over the int8 channels of
    |x'| dw/2 + |w| dx/2 + dx dw/4 (x' the smoothed activations, w the int8 weights as floats,
    dx, dw the steps)."""
    smooth_x = x * layer.unsmooth
    smooth_x[:, layer.kept] = 0.0
    smooth_w = linear.weight.detach() / layer.unsmooth  # (out, in)
    smooth_w[:, layer.kept] = 0.0
    dw = smooth_w.abs().amax(1) / 127  # (out,)
    weight = (smooth_w / dw[:, None]).round() * dw[:, None]
    if layer.kernel == "dot":
        dx = smooth_x.abs().amax(1, keepdim=True) / 127  # (rows, 1)
    else:
        dx = (smooth_x.amax(1, keepdim=True) - smooth_x.amin(1, keepdim=True)) / 127
    return (
        smooth_x.abs().sum(1, keepdim=True) * dw[None, :] / 2
        + dx / 2 * weight.abs().sum(1)[None, :]
        + smooth_x.shape[1] * dx * dw[None, :] / 4
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_product_is_within_its_rounding_bound(kernel: str) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 24)
    x = outlier_inputs(50, 64)
    layer = Int8Linear(linear, x.abs().amax(0), kernel)
    with torch.no_grad():
        exact, found = linear(x), layer(x)
        error = (found - exact).abs()
        bound = rounding_bound(layer, linear, x)
    # fp32 accumulation adds ~1e-5 relative to the bound itself
    assert torch.all(error <= bound * (1 + 1e-4) + 1e-4)
    assert error.max() > 0  # it did round


@pytest.mark.parametrize("kernel", [DOT])
def test_the_largest_channels_stay_in_fp32(kernel: str) -> None:
    """The three 60x channels are among the kept ones, and keeping them is what holds the error
    down: the same layer with every channel in int8 errs several times more."""
    torch.manual_seed(1)
    linear = nn.Linear(64, 24)
    x = outlier_inputs(50, 64, seed=1)
    layer = Int8Linear(linear, x.abs().amax(0), kernel)
    assert len(layer.kept) == KEPT_CHANNELS and {3, 17, 40} <= set(layer.kept.tolist())
    with torch.no_grad():
        exact = linear(x)
        kept_error = (layer(x) - exact).norm()
        layer.kept = torch.zeros(0, dtype=torch.long)  # nothing kept: the outliers in int8
        layer.kept_weight = torch.zeros(0, 24)
        weight = linear.weight.detach() / layer.unsmooth
        scale = weight.abs().amax(1) / 127
        layer.weight = (weight / scale[:, None]).round().to(torch.int8).t().contiguous()
        layer.weight_scale = scale
        all_int8_error = (layer(x) - exact).norm()
    assert all_int8_error > 3 * kept_error


@pytest.mark.parametrize("kernel", [DOT])
def test_each_token_is_rounded_on_its_own_largest_magnitude(kernel: str) -> None:
    """The "dot" kernel's activations: each token's int8 channels divided by their largest
    |value| / 127 and rounded, the kept channels apart. Written out here with the plain ops
    (|x| and its row maximum, boolean-indexed kept channels): the layer takes cheaper routes to
    the same numbers, so the two agree exactly (the same integer product, the same float steps
    after it). A token whose peak is negative is among them (a scale from max x alone fails)."""
    torch.manual_seed(2)
    linear = nn.Linear(64, 24)
    x = outlier_inputs(40, 64, seed=2)
    x[0] = -x[0].abs()  # every value of the first token negative: its peak is its minimum
    layer = Int8Linear(linear, x.abs().amax(0), kernel)
    rows = x * layer.unsmooth
    kept = rows[:, layer.kept]
    rows[:, layer.kept] = 0.0
    scale = rows.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127
    quantised = (rows / scale).round().to(torch.int8)
    expected = torch._int_mm(quantised, layer.weight).float() * scale
    expected = torch.addcmul(layer.bias, expected, layer.weight_scale).addmm_(
        kept, layer.kept_weight
    )
    with torch.no_grad():
        assert torch.equal(layer(x), expected)


@pytest.mark.parametrize("kernel", KERNELS)
def test_shapes_dtypes_and_a_missing_bias(kernel: str) -> None:
    linear = nn.Linear(16, 8, bias=False)
    x = torch.randn(2, 5, 16)
    layer = Int8Linear(linear, x.reshape(-1, 16).abs().amax(0), kernel)
    out = layer(x)
    assert out.shape == (2, 5, 8) and out.dtype == torch.float32
    with torch.no_grad():
        assert torch.allclose(out, linear(x), atol=0.05 * linear(x).abs().max().item())
    assert torch.equal(layer(torch.zeros(3, 16)), torch.zeros(3, 8))  # no division by zero


@pytest.mark.parametrize("kernel", KERNELS)
def test_quantise_swaps_the_layers_the_sample_reaches(
    kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(int8, "kernel_here", lambda: kernel)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 12))
            self.head = nn.Linear(12, 3)  # never called by the sample: left in fp32

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    torch.manual_seed(2)
    model = Model()
    x = torch.randn(40, 12)
    with torch.no_grad():
        before = model(x)
    quantise(model, lambda m: m(x))
    assert isinstance(model.body[0], Int8Linear) and isinstance(model.body[2], Int8Linear)
    assert model.body[0].kernel == kernel
    assert type(model.head) is nn.Linear
    with torch.no_grad():
        after = model(x)
    cosine = nn.functional.cosine_similarity(before, after, dim=1)
    assert cosine.min() > 0.999 and not torch.equal(before, after)
