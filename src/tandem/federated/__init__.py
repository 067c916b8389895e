"""CoRAG: collaborative retrieval-augmented QA trained with FedAvg on Flower, and the CRAB bench builder.

Modules: ``bench`` (CRAB splits and stores, pure), ``bench_io`` (bench folders), ``model`` (query
encoder over a frozen index + reader, perplexity distillation), ``local`` (one client's training and
evaluation), ``fedavg`` (weighted averaging), ``apps`` (Flower ServerApp / ClientApp), ``corag``
(Algorithm 1 and the baselines). Flower is imported only by ``apps`` and ``corag.simulate``.
"""
