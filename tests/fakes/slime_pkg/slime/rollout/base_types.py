from dataclasses import dataclass
from typing import Any


@dataclass
class RolloutFnTrainOutput:
    samples: list
    metrics: dict[str, Any] = None


@dataclass
class RolloutFnEvalOutput:
    data: dict
    metrics: dict[str, Any] = None
