"""IRCoT, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.ircot.algorithm import IRCoT
from tandem.methods.ircot.settings import IRCoTSettings

__all__ = ["IRCoT", "IRCoTSettings"]
