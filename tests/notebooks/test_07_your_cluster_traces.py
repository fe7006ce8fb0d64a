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
    # the real 8-GPU profile: three GPUs became ranks, the unused_gpu finding names the other five
    assert "3 GPUs ran something" in text, text[:3000]
    assert re.search(r"unused_gpu: 5 GPUs of \S+ \(GPU:0, GPU:2, GPU:3, GPU:5, GPU:7\) ran nothing", text), text[:3000]
    assert re.search(r"idle_gpu: 3 of 3 GPUs were idle", text), text[:3000]
    # the made two-host job: one run, the slow GPU (node1's GPU 1, rank 1) named, half its communication hidden
    assert "8 ranks on 2 hosts: node1 (ranks 0–3), node2 (ranks 4–7)" in text
    assert re.search(r"^lagging_gpu: rank 1 \(node1 GPU:1\)", text, re.M), text
    assert re.search(r"^exposed_communication: .* 50% of it hidden", text, re.M), text
    truth = re.search(r"truth: node1 GPU:1 busy ([\d.]+) ms longer per step", text)
    found = re.search(r"found: rank 1 busy ([\d.]+) ms longer per step", text)
    assert truth and found and truth.group(1) == found.group(1), text
    # the 2019-layout timeline: its ranks and an unaligned clock; the real fragments: no span, and why
    assert "ranks: 4 (made with 4); clocks: unaligned" in text
    assert "4 collectives began and never ended" in text and "spans: 0" in text
    # real files that hold less than they promise: each import line says so
    assert re.search(r"horovod_timeline_small\.json: Horovod timeline, no start record .* -> 8 ranks, 3 spans", text)
    assert re.search(r"trace\.json\.gz: trace_json, .*0 GPU activities on no GPU of 8 GPUs.* -> 0 ranks", text)
    # the Perfetto export of the made job
    assert re.search(r"trace\.json\.gz: \d+ spans of 8 ranks on 2 hosts", text)
