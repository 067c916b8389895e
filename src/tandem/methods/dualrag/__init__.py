"""DualRAG (Cheng et al., ACL 2025), in one folder: the loop (``algorithm``, its docstring the algorithm box),
the roles' prompts and schemas (``prompts``), the readers of their replies (``parse``), the settings
(``settings``) and DualRAG-FT - the roles' fine-tuning data (``sft_export``, ``tandem export sft``) and LoRA
training (``finetune``, ``tandem train sft``; its settings and entry in ``trainer``). Importing the package
registers the method and the trainer."""

from tandem.methods.dualrag.algorithm import DualRAG, Knowledge, Outline, union_by_id
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.methods.dualrag.trainer import SFTRun, SFTSettings

__all__ = ["DualRAG", "DualRAGSettings", "Knowledge", "Outline", "SFTRun", "SFTSettings", "union_by_id"]
