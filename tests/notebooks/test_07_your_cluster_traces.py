"""notebooks/07_your_cluster_traces.ipynb executes end to end (real and made traces, no MPI) and is saved stripped."""

from __future__ import annotations

import re

import pytest
from notebook_run import check_saved, stream_text

NOTEBOOK = "07_your_cluster_traces.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, 'out = "runs"', "steps = 20")


@pytest.mark.notebook
def test_notebook_imports_real_and_made_traces_and_names_their_gpus(tmp_path, run_notebook):
    text = stream_text(run_notebook(NOTEBOOK, {"out": str(tmp_path / "runs"), "steps": 8}))
    # the real 8-GPU profile: three GPUs busy, five named idle
    assert "3 GPUs ran something" in text and "'GPU:0', 'GPU:2', 'GPU:3', 'GPU:5', 'GPU:7'" in text, text[:3000]
    # the made two-host job: the slow GPU (node1's GPU 1, rank 1) named, half its communication hidden
    assert "8 ranks on 2 hosts: node1 (ranks 0–3), node2 (ranks 4–7)" in text
    assert re.search(r"lagging_gpu: .*\n.*rank 1 \(node1 GPU:1\)", text), text
    # the 2019-layout timeline: its ranks and an unaligned clock; the fragments: why no span
    assert "ranks: 4; clocks: unaligned" in text
    assert "4 collectives began and never ended" in text
    assert re.search(r"trace\.json\.gz: \d+ spans of 8 ranks on 2 hosts", text)
