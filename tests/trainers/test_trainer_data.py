from __future__ import annotations

import pytest
import torch

from trainers.data import load_dataset


def test_digits_shapes_range_and_split_sizes() -> None:
    data = load_dataset("digits")
    assert data.input_shape == (1, 8, 8) and data.n_classes == 10
    assert data.x_train.shape == (1438, 1, 8, 8) and data.x_val.shape == (359, 1, 8, 8)
    assert data.y_train.dtype == torch.int64 and data.x_train.dtype == torch.float32
    assert float(data.x_train.min()) == 0.0 and float(data.x_train.max()) == 1.0
    assert set(data.y_train.tolist()) == set(range(10))


def test_split_depends_only_on_data_seed() -> None:
    a, b = load_dataset("digits"), load_dataset("digits", {"data_seed": 0})
    c = load_dataset("digits", {"data_seed": 1})
    assert torch.equal(a.x_val, b.x_val) and torch.equal(a.y_train, b.y_train)
    assert not torch.equal(a.x_val, c.x_val)


def test_datasets_are_fresh_tensors() -> None:
    a = load_dataset("digits")
    a.x_train.zero_()
    assert float(load_dataset("digits").x_train.max()) == 1.0


def test_synthetic_options_and_determinism() -> None:
    options = {"n_samples": 500, "n_features": 5, "n_classes": 3}
    data = load_dataset("synthetic", options)
    assert data.input_shape == (5,) and data.n_classes == 3
    assert len(data.y_train) == 400 and len(data.y_val) == 100
    assert torch.equal(data.x_train, load_dataset("synthetic", options).x_train)
    assert set(data.y_train.tolist()) == {0, 1, 2}


def test_unknown_dataset_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"mnist.*'digits', 'mnist1d', 'synthetic'"):
        load_dataset("mnist")


def test_bad_option_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"options.n_classes=1"):
        load_dataset("synthetic", {"n_classes": 1})
