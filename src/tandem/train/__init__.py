"""Training pieces shared by several trainers: the lazy builder and ``--llm-opt`` check of a trainer's entry
(``specs``), the resumable trainer state (``state``) and the scores retriever fine-tuning puts inside its InfoNCE
logit (``scores``). Each method's own trainer lives in its folder (``tandem.methods.NAME.trainer``: its settings and
its entry in :data:`tandem.registry.TRAINERS`), e.g. ``tandem train retriever`` in CoopRAG's folder. This package
imports no method: the methods import it."""
