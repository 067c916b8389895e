"""Direct, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.direct.algorithm import Direct
from tandem.methods.direct.settings import DirectSettings

__all__ = ["Direct", "DirectSettings"]
