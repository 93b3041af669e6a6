"""Tree policies: how a draft tree is shaped from a drafter's proposals (one policy per file)."""

from specdec.trees.adaptive import AdaptiveTreePolicy
from specdec.trees.by_temperature import ByTemperature
from specdec.trees.composite import CompositeTreePolicy
from specdec.trees.dynamic import DynamicTreePolicy
from specdec.trees.menu import SampledMenuPolicy
from specdec.trees.ranked import RankedSampledPolicy
from specdec.trees.static import EAGLE1_DEFAULT_PATHS, StaticTreePolicy, validate_paths
from specdec.trees.stochastic import StochasticTreePolicy

__all__ = [
    "AdaptiveTreePolicy",
    "ByTemperature",
    "CompositeTreePolicy",
    "EAGLE1_DEFAULT_PATHS",
    "DynamicTreePolicy",
    "RankedSampledPolicy",
    "SampledMenuPolicy",
    "StaticTreePolicy",
    "StochasticTreePolicy",
    "validate_paths",
]
