"""CoopRAG, in one folder: the algorithm (``algorithm``, its docstring the algorithm box), the prompts (``prompts``) and the settings (``settings``).
Importing the package registers the method."""

from tandem.methods.cooprag.algorithm import CoopRAG
from tandem.methods.cooprag.settings import CoopRAGSettings

__all__ = ["CoopRAG", "CoopRAGSettings"]
