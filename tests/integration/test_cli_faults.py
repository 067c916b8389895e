"""Ctrl-C during a real index build (the embedded encoder): exit 130, a message, nothing half-built
(only the build's work folder of finished shards, which the same command resumes from)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import shared, sigint_default

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_during_index_exits_130_and_leaves_no_index(tmp_path):
    data = shared("hotpotqa/dev500.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "index", "--dataset", str(data), "--kind", "dense",
                             "--out", str(tmp_path / "idx")], stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=sigint_default)
    assert proc.stderr is not None
    for line in proc.stderr:  # the pool is loaded: encoding (about a minute) has begun
        if "pool of" in line:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    # no index, no temp folder, no lock file: only the resumable work folder of the encoded shards
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], [".idx.work"])
    assert "run the same command again to resume" in err
