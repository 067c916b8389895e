"""CoopRAG, in one folder: the algorithm (``algorithm``, its docstring the algorithm box), the prompts (``prompts``),
the settings (``settings``) and the retriever fine-tuning, ``tandem train retriever`` (its settings and entry in
``trainer``, the training code in ``train_retriever``). Importing the package registers the method and the trainer."""

from tandem.methods.cooprag.algorithm import CoopRAG
from tandem.methods.cooprag.settings import CoopRAGSettings
from tandem.methods.cooprag.trainer import RetrieverTrainRun, RetrieverTrainSettings

__all__ = ["CoopRAG", "CoopRAGSettings", "RetrieverTrainRun", "RetrieverTrainSettings"]
