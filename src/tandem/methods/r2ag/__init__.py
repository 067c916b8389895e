"""R2AG, in one folder: the algorithm (``algorithm``, its docstring the algorithm box), the prompts (``prompts``)
and the settings (``settings``). Importing the package registers the method."""

from tandem.methods.r2ag.algorithm import R2AG
from tandem.methods.r2ag.settings import R2AGSettings

__all__ = ["R2AG", "R2AGSettings"]
