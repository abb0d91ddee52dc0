from __future__ import annotations

import pytest
import torch

from trainers.models import CNN, MLP, Dropout, build_model, count_parameters, set_dropout_generator


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_same_generator_seed_same_weights_and_global_rng_untouched() -> None:
    params = {"model": "mlp", "hidden": 16, "depth": 2}
    before = torch.random.get_rng_state()
    a = build_model(params, (1, 8, 8), 10, torch.Generator().manual_seed(3))
    b = build_model(params, (1, 8, 8), 10, torch.Generator().manual_seed(3))
    c = build_model(params, (1, 8, 8), 10, torch.Generator().manual_seed(4))
    assert torch.equal(before, torch.random.get_rng_state())
    assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b)))
    assert not torch.equal(_weights(a)[0], _weights(c)[0])


def test_mlp_parameter_count_and_output() -> None:
    model = build_model({"model": "mlp", "hidden": 128, "depth": 2}, (1, 8, 8), 10, torch.Generator())
    assert isinstance(model, MLP)
    assert count_parameters(model) == 64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10
    assert model(torch.zeros(5, 1, 8, 8)).shape == (5, 10)


def test_cnn_output_shape_and_image_check() -> None:
    model = build_model({"model": "cnn", "channels": 8}, (1, 8, 8), 10, torch.Generator())
    assert isinstance(model, CNN)
    assert model(torch.zeros(4, 1, 8, 8)).shape == (4, 10)
    with pytest.raises(ValueError, match="image inputs"):
        build_model({"model": "cnn", "channels": 8}, (20,), 4, torch.Generator())


def test_unknown_model_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"model='resnet'"):
        build_model({"model": "resnet"}, (20,), 4, torch.Generator())


def test_dropout_draws_from_its_generator_only() -> None:
    model = build_model({"model": "mlp", "hidden": 32, "depth": 1, "dropout": 0.5}, (20,), 4, torch.Generator())
    x = torch.ones(8, 20)
    outs = []
    for _ in range(2):
        set_dropout_generator(model, torch.Generator().manual_seed(11))
        before = torch.random.get_rng_state()
        outs.append(model(x))
        assert torch.equal(before, torch.random.get_rng_state())
    assert torch.equal(outs[0], outs[1])
    model.eval()
    assert torch.equal(model(x), model(x))
    with pytest.raises(ValueError, match="dropout"):
        Dropout(1.0)
