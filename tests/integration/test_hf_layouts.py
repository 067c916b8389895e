"""dev500 in the Hugging Face ``hotpot_qa`` layout as Parquet, end to end through the CLI: the same
questions, pool and gold as the original file, indexed, evaluated and exported as TREC files whose
recall equals the run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import benchmark_script, shared, tandem

from tandem.corpus import load_dataset

pytestmark = pytest.mark.integration



def test_dev500_parquet_in_the_hf_layout_end_to_end(tmp_path: Path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from tandem.io import read_jsonl

    dev500 = shared("hotpotqa/dev500.jsonl")
    script = benchmark_script("hf_layouts")
    parquet = tmp_path / "validation.parquet"
    pq.write_table(pa.Table.from_pylist([script.to_hf_layout(rec) for _, rec in read_jsonl(dev500)]), parquet)
    hf, original = load_dataset(parquet), load_dataset(dev500)
    assert hf.format == "hotpotqa" and script.same(hf, original)

    res = tandem("index", "--dataset", str(parquet), "--kind", "bm25", "--out", str(tmp_path / "idx"))
    assert res.returncode == 0, res.stderr
    res = tandem("eval", "retrieval", "--dataset", str(parquet), "--index", str(tmp_path / "idx"), "--limit", "100",
                 "--out", str(tmp_path / "run"), "--json")
    assert res.returncode == 0, res.stderr
    metrics = json.loads(res.stdout)
    res = tandem("export", "trec", str(tmp_path / "run"), "--out", str(tmp_path / "run.trec"))
    assert res.returncode == 0, res.stderr
    ranked: dict[str, list[str]] = {}
    for line in (tmp_path / "run.trec").read_text().splitlines():
        qid, _, doc, _rank, _score, _tag = line.split()
        ranked.setdefault(qid, []).append(doc)
    gold: dict[str, set[str]] = {}
    for line in (tmp_path / "run.trec.qrels").read_text().splitlines():
        qid, _, doc, _ = line.split()
        gold.setdefault(qid, set()).add(doc)
    assert len(ranked) == len(gold) == 100
    for k in (2, 5, 10):
        recall = sum(len(gold[q] & set(ranked[q][:k])) / len(gold[q]) for q in gold) / len(gold)
        assert recall == pytest.approx(metrics[f"recall@{k}"])
