"""Kernel types and top kernels (``analysis.kernels``): a hand-made timeline, and HTA 0.5.0's
``get_gpu_kernel_breakdown`` on its own samples (measured in its environment by ``benchmarks/peers.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.analysis.devices import without_last_step
from workbench.analysis.kernels import kernel_type_breakdown, top_kernels
from workbench.formats import kineto
from workbench.formats.gpu_trace import activity_frame, concat_activity

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "traces" / "hta_trace_filter"
#: HTA's kernel-type breakdown of its two samples (µs, both ranks summed).
HTA_KERNEL_TYPES_US = {
    "communication": 305584,
    "computation": 185023,
    "computation overlapping communication": 56747,
    "memory": 2288,
    "communication overlapping memory": 1011,
    "computation overlapping memory": 18,
    "computation overlapping communication overlapping memory": 12,
}
#: Each rank's compute kernel with the most time, by HTA (µs).
HTA_TOP_COMPUTE_US = {0: 11773, 1: 28836}


def test_kernel_types_on_a_hand_made_timeline():
    # compute [0, 10] and [5, 15] (merged: [0, 15]), a collective [12, 20], a copy [18, 25] (µs)
    rows = [("kernel", 0, 10), ("kernel", 5, 15), ("collective", 12, 20), ("memcpy_h2d", 18, 25)]
    activity = activity_frame(
        {
            "host": "h",
            "device": "GPU:0",
            "stream": "stream 7",
            "kind": [kind for kind, _s, _e in rows],
            "name": [kind for kind, _s, _e in rows],
            "start_ns": np.asarray([s for _k, s, _e in rows]) * 1000,
            "end_ns": np.asarray([e for _k, _s, e in rows]) * 1000,
        }
    ).assign(rank=0)
    found = kernel_type_breakdown(activity).set_index("kernel_type")["seconds"] * 1e6
    assert found.round(6).to_dict() == {
        "computation": 12,
        "computation overlapping communication": 3,
        "communication": 3,
        "communication overlapping memory": 2,
        "memory": 5,
    }
    top = top_kernels(activity, count=1)
    assert top["kind"].tolist() == ["kernel"] and top["total_s"].iloc[0] == pytest.approx(20e-6)
    assert top["share"].iloc[0] == pytest.approx(20 / 28)


def test_htas_samples_give_htas_kernel_breakdown():
    parts = []
    for path in sorted(SAMPLES.glob("*.json.gz")):
        trace = kineto.read_kineto_activity(path)
        parts.append(trace.activity.assign(rank=trace.rank))
    activity = without_last_step(concat_activity(parts))
    job = kernel_type_breakdown(activity).groupby("kernel_type")["seconds"].sum() * 1e6
    assert job.round().astype(int).to_dict() == HTA_KERNEL_TYPES_US
    compute = top_kernels(activity[(activity["kind"] == "kernel").to_numpy()], count=1).set_index("rank")
    for rank, microseconds in HTA_TOP_COMPUTE_US.items():
        assert compute.loc[rank, "total_s"] * 1e6 == pytest.approx(microseconds)
        assert str(compute.loc[rank, "name"]).startswith("void split_embedding_backward_codegen_rowwise_adagrad")


def test_no_gpu_activity_gives_empty_tables():
    empty = activity_frame({}).assign(rank=pd.Series(dtype="int64"))
    assert kernel_type_breakdown(empty).empty and top_kernels(empty).empty
