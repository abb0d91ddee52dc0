"""Small classifiers (an MLP and an 8x8 CNN) initialised from an explicit torch.Generator.

Models are built on the ``meta`` device and then initialised, so building one never
touches (or depends on) torch's global random state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

__all__ = [
    "MLP",
    "CNN",
    "Dropout",
    "MODELS",
    "build_model",
    "count_parameters",
    "init_weights",
    "set_dropout_generator",
]

MODELS = ("mlp", "cnn")


class Dropout(nn.Module):
    """Inverted dropout whose masks come from ``generator`` instead of the global RNG.

    The generator must live on the device of the inputs; set it with
    :func:`set_dropout_generator` after moving the model.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout={p!r}: must be in [0, 1)")
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.generator is None:
            raise RuntimeError("Dropout has no generator; call set_dropout_generator(model, generator)")
        keep = torch.empty_like(x).bernoulli_(1.0 - self.p, generator=self.generator)
        return x * keep / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class MLP(nn.Sequential):
    """Flatten, ``depth`` hidden layers of ``hidden`` units (ReLU, dropout), then a linear head."""

    def __init__(self, input_dim: int, hidden: int, depth: int, n_classes: int, dropout: float = 0.0) -> None:
        layers: list[nn.Module] = [nn.Flatten()]
        width = input_dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU(), Dropout(dropout)]
            width = hidden
        layers.append(nn.Linear(width, n_classes))
        super().__init__(*layers)


class CNN(nn.Sequential):
    """Two 3x3 conv layers (``channels``, then ``2 * channels``), each with 2x2 max pooling, then a linear head."""

    def __init__(
        self, in_channels: int, height: int, width: int, channels: int, n_classes: int, dropout: float = 0.0
    ) -> None:
        if height < 4 or width < 4:
            raise ValueError(f"CNN input {height}x{width}: needs at least 4x4 pixels (two 2x2 poolings)")
        super().__init__(
            nn.Conv2d(in_channels, channels, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            Dropout(dropout),
            nn.Linear(2 * channels * (height // 4) * (width // 4), n_classes),
        )


def init_weights(model: nn.Module, generator: torch.Generator) -> None:
    """PyTorch's default init for Linear/Conv layers (BatchNorm: ones and zeros), drawn from ``generator``."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=generator)
            if module.bias is not None:
                fan_in = module.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in)
                nn.init.uniform_(module.bias, -bound, bound, generator=generator)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"init_weights: no initialiser for {type(module).__name__}")


def set_dropout_generator(model: nn.Module, generator: torch.Generator) -> None:
    """Make every :class:`Dropout` in ``model`` draw its masks from ``generator``."""
    for module in model.modules():
        if isinstance(module, Dropout):
            module.generator = generator


def _construct(params: Mapping[str, Any], input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    kind = params.get("model", "mlp")
    dropout = float(params.get("dropout", 0.0))
    if kind == "mlp":
        return MLP(math.prod(input_shape), int(params["hidden"]), int(params["depth"]), n_classes, dropout)
    if kind == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f"model='cnn' needs image inputs (channels, height, width), got shape {input_shape}")
        return CNN(*input_shape, channels=int(params["channels"]), n_classes=n_classes, dropout=dropout)
    raise ValueError(f"model={kind!r}: unknown; valid models: {list(MODELS)}")


def build_model(
    params: Mapping[str, Any], input_shape: tuple[int, ...], n_classes: int, generator: torch.Generator
) -> nn.Module:
    """Build ``params["model"]`` ("mlp": hidden, depth, dropout; "cnn": channels, dropout) on the CPU.

    Every weight is drawn from ``generator`` (a CPU generator), so the same seed gives
    the same model in any process, whatever else has used torch's global RNG.
    """
    with torch.device("meta"):
        model = _construct(params, input_shape, n_classes)
    model = model.to_empty(device="cpu")
    init_weights(model, generator)
    return model


def count_parameters(model: nn.Module) -> int:
    """The number of trainable scalars in ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
