"""R2AG, in one folder: the algorithm (``algorithm``, its docstring the algorithm box), the prompts (``prompts``),
the settings (``settings``), R²-Former with its features and checkpoints (``former``) and its training,
``tandem train r2ag`` (its settings and entry in ``trainer``, the training loop in ``train``). Importing the
package registers the method and the trainer."""

from tandem.methods.r2ag.algorithm import R2AG
from tandem.methods.r2ag.settings import R2AGSettings
from tandem.methods.r2ag.trainer import R2AGTrainRun, R2AGTrainSettings

__all__ = ["R2AG", "R2AGSettings", "R2AGTrainRun", "R2AGTrainSettings"]
