"""Oracle, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.oracle.algorithm import Oracle
from tandem.methods.oracle.settings import OracleSettings

__all__ = ["Oracle", "OracleSettings"]
