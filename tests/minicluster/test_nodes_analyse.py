"""``workbench analyse --minicluster``: a run that one node's memory cannot hold, analysed in rank groups on the
nodes' engines, each node reading its groups' ranks from the run directory they all see."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.analysis.run_analysis import SplitAnalysis
from workbench.cli import main
from workbench.datasets.made_traces.job import write_made_run
from workbench.rank_groups import analyse_split

#: Each node's memory here: a whole-run analysis of the run below peaks near 1.1 GB; a rank group of 8 of its
#: 64 ranks, on an engine, near 0.35 GB (measured on this machine kind, ``workbench analyse`` in one process).
NODE_MEMORY = "640m"
EVENTS, RANKS = 2_000_000, 64


@pytest.fixture
def limited(mini):
    """The nodes with ``NODE_MEMORY`` each, as the session made them again afterwards."""
    for node in mini.node_names:
        mini.set_memory(node, NODE_MEMORY)
    yield mini
    for node in mini.node_names:
        mini.set_memory(node, None)


def test_a_run_one_node_cannot_hold_is_analysed_in_groups_on_the_nodes(limited, tmp_path, capsys):
    path = write_made_run(tmp_path, EVENTS, RANKS, ranks_per_node=8, slow_nodes=1, straggler_share=0.02)
    # the whole run in one process on a node: the kernel kills it at the node's memory
    whole = limited.popen(
        "node1",
        [sys.executable, "-m", "workbench._entry", "analyse", str(path), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, err = whole.communicate(timeout=600)
    assert whole.returncode in (-9, 137), err[-2000:]
    # the rank groups on the four nodes' engines, one each
    assert main(["analyse", str(path), "--minicluster", "--group-ranks", "8", "--json"]) == 0
    captured = capsys.readouterr()
    assert "rank groups on 4 engines on the miniature cluster's nodes" in captured.err
    grouped = json.loads(captured.out)
    assert grouped["split"]["groups"] == RANKS // 8 and len(grouped["split"]["worker_peak_mb"]) == 4
    assert max(grouped["split"]["worker_peak_mb"]) < 640 * 1.048576  # MiB of the limit, in MB
    # the same numbers as the groups analysed here, where memory is not short
    here = analyse_split(path, group_ranks=8)
    assert isinstance(here, SplitAnalysis)
    assert grouped["findings"] == json.loads(json.dumps(here.to_dict()["findings"]))
    assert grouped["breakdown"] == here.to_dict()["breakdown"]
    assert grouped["lateness"] == json.loads(json.dumps(here.to_dict()["lateness"]))
