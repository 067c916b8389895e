"""Seconds of one R²-Former training example (forward + backward through the frozen LLM), two ways of
computing L_LM, alternated on the same examples in one process; prints one line per example and variant:

- ``full``: the transformers loss over the whole sequence, prompt positions masked (the LM head at every
  position: how training computed it before);
- ``answer``: :class:`tandem.methods.r2ag.training.LossComputer` (the LM head at the answer positions only).

Both give the same loss (dropout off); the R²-Former is freshly initialised. On NQ-open lists as
``tandem train r2ag`` builds them (gold passage + retrieved distractors, cut to ``--doc-words``)::

    TANDEM_LLM_THREADS=2 python benchmarks/r2ag_train_speed.py --index runs/nq --questions 0:3
"""

from __future__ import annotations

import argparse
import time

import torch

from tandem.corpus import load_dataset
from tandem.index import open_index
from tandem.index.encoder import load_encoder
from tandem.index.store import DocStore
from tandem.llm import load_llm
from tandem.methods.base import Search
from tandem.methods.r2ag.algorithm import embedding_backend, inject
from tandem.methods.r2ag.former import R2Former, R2FormerConfig
from tandem.methods.r2ag.train_lists import RankedList, build_lists
from tandem.methods.r2ag.trainer import R2AGTrainSettings
from tandem.methods.r2ag.training import LossComputer
from tandem.retrieve import open_retriever


def full_loss(comp: LossComputer, ex: RankedList) -> torch.Tensor:
    """L_LM the way transformers computes it from labels: logits at every position."""
    ids, positions, target = comp.tokens(ex)
    vectors, _ = comp.model(torch.from_numpy(ex.feats)[None])
    all_ids = torch.tensor([ids + target])
    embeds = inject(comp.llm.embed_ids(all_ids)[0], positions, vectors[0])
    labels = all_ids.clone()
    labels[0, : len(ids)] = -100
    return comp.llm.forward(inputs_embeds=embeds[None], labels=labels, output_hidden_states=False).loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="../shared/data/nq/nq-open-oracle.jsonl.gz")
    ap.add_argument("--index", required=True, help="an index of the dataset (distractors)")
    ap.add_argument("--questions", default="0:3", help="START:END of the dataset's questions")
    ap.add_argument("--llm", default="local")
    ap.add_argument("--doc-words", type=int, default=24)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    start, end = (int(x) for x in args.questions.split(":"))
    ds = load_dataset(args.dataset)
    idx = open_index(args.index)
    lists = build_lists(ds.questions[start:end], DocStore(ds.passages), load_encoder("minilm"), k=args.k,
                        search=Search(open_retriever(idx), idx.store))
    llm = embedding_backend(load_llm(args.llm, engine="torch"))
    for p in llm.model.parameters():
        p.requires_grad_(False)
    config = R2AGTrainSettings(doc_words=args.doc_words, k=args.k)
    table = llm.input_embeddings().weight
    torch.manual_seed(0)
    model = R2Former(R2FormerConfig(llm_hidden=int(table.shape[1]), d_model=config.d_model,
                                    embed_std=float(table.detach().std()), max_k=64)).eval()
    comp = LossComputer(llm, model, config)
    print(f"threads {torch.get_num_threads()}")
    for ex in lists:
        ids, _, target = comp.tokens(ex)
        for name, loss_of in (("full", lambda ex=ex: full_loss(comp, ex)), ("answer", lambda ex=ex: comp(ex)[0])):
            model.zero_grad()
            t0 = time.perf_counter()
            loss = loss_of()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            print(f"{ex.qid} tokens {len(ids) + len(target)} {name:6s} loss {loss.item():.5f} "
                  f"forward {t1 - t0:.1f} s backward {t2 - t1:.1f} s total {t2 - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
