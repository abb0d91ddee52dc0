"""What can be searched: parameters, LR schedules and batch sizes."""

from spaces.architecture import GenomeParam, genome_from_string  # registers "layers" and "cell"
from spaces.batch import LRScaling, power_of_two_sizes
from spaces.errors import SpaceError
from spaces.params import (
    PARAM_TYPES,
    BatchSizeParam,
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    SearchSpace,
    parse_space,
    register_param_type,
)
from spaces.schedules import (
    SCHEDULE_FAMILIES,
    Constant,
    Cosine,
    Exponential,
    OneCycle,
    Piecewise,
    Schedule,
    StepDecay,
    WarmupCosine,
    make_schedule,
    schedule_from_dict,
)

__all__ = [
    "PARAM_TYPES",
    "SCHEDULE_FAMILIES",
    "BatchSizeParam",
    "CategoricalParam",
    "Constant",
    "Cosine",
    "Exponential",
    "FixedParam",
    "FloatParam",
    "GenomeParam",
    "IntParam",
    "LRScaling",
    "OneCycle",
    "Param",
    "Piecewise",
    "Schedule",
    "SearchSpace",
    "SpaceError",
    "StepDecay",
    "WarmupCosine",
    "genome_from_string",
    "make_schedule",
    "parse_space",
    "power_of_two_sizes",
    "register_param_type",
    "schedule_from_dict",
]
