"""``benchmarks/fusion_copy.py``'s measurement on 2 real ranks: the step's gradient tensors against one tensor."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from workbench.config import ClusterConfig

pytestmark = pytest.mark.mpi

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PROGRAM = """
import json, sys
sys.path.insert(0, sys.argv[1])
from mpi4py import MPI
from fusion_copy import measure_on_rank
result = measure_on_rank(75, 2)
if MPI.COMM_WORLD.Get_rank() == 0:
    open(sys.argv[2], "w").write(json.dumps(result))
"""


def test_two_ranks_time_the_steps_tensors_one_tensor_mpi_and_a_copy(tmp_path):
    config = ClusterConfig(n=2)
    if config.mpi != "openmpi":
        pytest.skip("Horovod is built against Open MPI here")
    out = tmp_path / "result.json"
    completed = config.launch([sys.executable, "-c", PROGRAM, str(BENCHMARKS), str(out)], timeout_s=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(out.read_text())
    # InceptionV3 at 75 px, 10 classes: 190 trainable tensors (94 kernels, 94 batch-norm betas, the head's
    # kernel and bias), the 87 155 368 bytes of gradients the ps-vs-allreduce case records per step
    assert result["tensors"] == 190 and result["bytes"] == 87_155_368
    for name in ("grouped_s", "one_tensor_s", "mpi_s", "copy_s"):
        assert len(result["each"][name]) == result["rounds"] == 2
        assert math.isfinite(result[name]) and result[name] > 0
        assert result[name] == pytest.approx(statistics.median(result["each"][name]))  # the rounds' median
