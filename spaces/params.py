"""Parameter specs, the search space that holds them, and its TOML parser: the public names, from the modules that
define them (:mod:`spaces.scalar_params`, :mod:`spaces.conditional`, :mod:`spaces.search_space`,
:mod:`spaces.space_table`)."""

from __future__ import annotations

from spaces.conditional import ConditionalParam
from spaces.scalar_params import BatchSizeParam, CategoricalParam, FixedParam, FloatParam, IntParam, Param, Scalar
from spaces.search_space import SearchSpace
from spaces.space_table import (
    CONDITION_KEYS,
    PARAM_TYPES,
    REPEAT_INDEX,
    ParamBuilder,
    parse_space,
    register_param_type,
)

__all__ = [
    "CONDITION_KEYS",
    "PARAM_TYPES",
    "REPEAT_INDEX",
    "BatchSizeParam",
    "CategoricalParam",
    "ConditionalParam",
    "FixedParam",
    "FloatParam",
    "IntParam",
    "Param",
    "ParamBuilder",
    "Scalar",
    "SearchSpace",
    "parse_space",
    "register_param_type",
]
