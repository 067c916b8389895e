"""IterRetGen, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.iter_retgen.algorithm import IterRetGen
from tandem.methods.iter_retgen.settings import IterRetGenSettings

__all__ = ["IterRetGen", "IterRetGenSettings"]
