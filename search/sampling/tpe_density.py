"""Optuna's TPE mixture density, log p(x), with what depends only on the fit computed once per fit.

Each kernel of a continuous parameter is a normal truncated to the parameter's range; its log-density at x is
``norm_logpdf((x - mu) / sigma) - log_mass(a, b) - log(sigma)``, where ``log_mass`` (the kernel's mass inside the
range, a pure-Python ``erf`` per kernel and parameter) and ``log(sigma)`` depend on the kernel alone. Optuna
recomputes both for every kernel at every ask; :class:`FittedLogPdf` keeps them with the fit
(:class:`search.sampling.tpe.RefitTPESampler` serves many asks from one fit), and computes the rest exactly as
Optuna's ``_MixtureOfProductDistribution.log_pdf`` does, in the same order: the same values, bit for bit (tested).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from search.compat import optuna_private as op

__all__ = ["FittedLogPdf"]

_Continuous = Any  # op.BatchedTruncNorm | op.BatchedTruncLogNorm: no step


class FittedLogPdf:
    """``estimator.log_pdf(samples)``, with each continuous kernel's truncation mass and log scale kept."""

    def __init__(self, estimator: op.ParzenEstimator) -> None:
        mixture = op.mixture_of(estimator)
        self._names = list(op.space_of(estimator))
        self._distributions = mixture.distributions
        self._log_weights = np.log(mixture.weights[np.newaxis])
        self._n = len(mixture.weights)
        self._continuous = [
            i for i, d in enumerate(mixture.distributions) if not isinstance(d, op.BatchedCategorical) and d.step == 0.0
        ]
        if self._continuous:
            dists = [cast(_Continuous, mixture.distributions[i]) for i in self._continuous]
            self._mus = np.asarray([d.mu for d in dists]).T  # kernels x continuous parameters
            self._sigmas = np.asarray([d.sigma for d in dists]).T
            self._lows = np.asarray([d.adapted_low for d in dists])
            self._highs = np.asarray([d.adapted_high for d in dists])
            self._is_log = [d.is_log for d in dists]
            a = (self._lows - self._mus) / self._sigmas
            b = (self._highs - self._mus) / self._sigmas
            self._a, self._b = np.atleast_1d(a, b)
            self._log_mass = op.log_gauss_mass(self._a, self._b)
            self._log_scale = np.log(self._sigmas)
            self._degenerate = bool((self._a == self._b).any())  # a kernel with no width: Optuna's NaN

    def __call__(self, samples: Mapping[str, np.ndarray]) -> np.ndarray:
        """log p(x) of each sample (a column per parameter, as Optuna's ``_ParzenEstimator.log_pdf`` takes them)."""
        x = np.array([samples[name] for name in self._names]).T
        weighted_log_pdf = np.zeros((len(x), self._n), dtype=np.float64)
        for i, d in enumerate(self._distributions):  # categorical and stepped: as Optuna computes them
            if isinstance(d, op.BatchedCategorical):
                xi = x[:, i, np.newaxis, np.newaxis].astype(np.int64)
                weighted_log_pdf += np.log(np.take_along_axis(d.weights[np.newaxis], xi, axis=-1))[..., 0]
                continue
            if (step := d.step) == 0.0:
                continue
            is_log = d.is_log
            xi_uniq, xi_inv = np.unique(x[:, i], return_inverse=True)
            mu_uniq, sigma_uniq, mu_sigma_inv = op.unique_inverse_2d(d.mu, d.sigma)
            left = np.log(xi_uniq - step / 2) if is_log else (xi_uniq - step / 2)
            right = np.log(xi_uniq + step / 2) if is_log else (xi_uniq + step / 2)
            weighted_log_pdf += op.log_gauss_mass_unique(
                (left[:, np.newaxis] - mu_uniq) / sigma_uniq,
                (right[:, np.newaxis] - mu_uniq) / sigma_uniq,
            )[np.ix_(xi_inv, mu_sigma_inv)]
            weighted_log_pdf -= op.log_gauss_mass(
                (d.adapted_low - mu_uniq) / sigma_uniq, (d.adapted_high - mu_uniq) / sigma_uniq
            )[mu_sigma_inv]
        if self._continuous:
            weighted_log_pdf += self._continuous_log_pdf(x).sum(axis=-1)
        weighted_log_pdf += self._log_weights
        max_ = weighted_log_pdf.max(axis=1)
        max_[np.isneginf(max_)] = 0  # avoid (-inf) - (-inf) where the density is zero
        with np.errstate(divide="ignore"):
            return np.log(np.exp(weighted_log_pdf - max_[:, None]).sum(axis=1)) + max_

    def _continuous_log_pdf(self, x: np.ndarray) -> np.ndarray:
        """Optuna's ``_truncnorm.logpdf`` of each sample under each kernel, per continuous parameter, with the
        kernels' log mass and log scale from the fit."""
        columns = np.asarray([np.log(x[:, i]) if log else x[:, i] for i, log in zip(self._continuous, self._is_log)]).T
        z = (columns[:, np.newaxis, :] - self._mus) / self._sigmas
        out = op.norm_logpdf(z) - self._log_mass - self._log_scale
        if not self._degenerate and ((columns >= self._lows) & (columns <= self._highs)).all():
            return out  # every sample in range: x >= low implies z >= a after rounding too (same mu, same sigma)
        z, a, b = np.broadcast_arrays(z, self._a, self._b)
        return np.select([a == b, (z < a) | (z > b)], [np.nan, -np.inf], default=out)
