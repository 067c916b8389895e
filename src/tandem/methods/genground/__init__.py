"""GenGround, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.genground.algorithm import GenGround
from tandem.methods.genground.settings import GenGroundSettings

__all__ = ["GenGround", "GenGroundSettings"]
