"""DualRAG (Cheng et al., ACL 2025), in one folder: the loop (``algorithm``, its docstring the algorithm box),
the roles' prompts and schemas (``prompts``), the readers of their replies (``parse``) and the settings
(``settings``). Importing the package registers the method."""

from tandem.methods.dualrag.algorithm import DualRAG, Knowledge, Outline, union_by_id
from tandem.methods.dualrag.settings import DualRAGSettings

__all__ = ["DualRAG", "DualRAGSettings", "Knowledge", "Outline", "union_by_id"]
