"""Encoding shards on a local Ray: the index equals the single-process build (and the real encoder,
loaded by name on each worker, gives the vectors it gives in this process)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.test_index_stream import assert_same_index, corpus, vectors

from tandem.index import build_index
from tandem.index.stream import RayEncoding
from tandem.testing.encoders import HashingEncoder

pytestmark = pytest.mark.integration


def test_ray_build_equals_the_single_process_build(tmp_path):
    ray = pytest.importorskip("ray")
    docs = corpus(60)
    build_index(docs, tmp_path / "local", encoder=HashingEncoder(), shard_size=7)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        build_index(iter(docs), tmp_path / "ray", encoder=HashingEncoder(), shard_size=7,
                    encoding=RayEncoding(HashingEncoder(), workers=2))
        assert_same_index(tmp_path / "local", tmp_path / "ray")
        build_index(docs[:20], tmp_path / "minilm-local", kind="dense", encoder="minilm", shard_size=8)
        build_index(docs[:20], tmp_path / "minilm-ray", kind="dense", encoder="minilm", shard_size=8,
                    encoding=RayEncoding("minilm", workers=2))
        np.testing.assert_allclose(vectors(tmp_path / "minilm-ray"), vectors(tmp_path / "minilm-local"), atol=1e-6)
    finally:
        ray.shutdown()
