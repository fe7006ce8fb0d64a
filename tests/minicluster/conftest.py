"""A 4-node miniature cluster for the tests in this folder (workbench.minicluster), down at the end.

Where it cannot run (not root, Slurm or cgroups missing) the tests skip with the one line
``check_host`` gives, unless `make test` (or CI) promised the parts (WORKBENCH_REQUIRE_SLURM=1,
CI=true): then they fail, so a broken install is not a quiet skip.
"""

from __future__ import annotations

import os

import pytest

from workbench import minicluster
from workbench.minicluster import MiniClusterError

NODES = 4
CPUS_PER_NODE = 0.4
LINK = "1gbit"


def _required() -> bool:
    return os.environ.get("WORKBENCH_REQUIRE_SLURM") == "1" or os.environ.get("CI", "").lower() in ("1", "true")


@pytest.fixture(scope="package")
def mini():
    """The running cluster: node1..node4, 0.4 of a core and a 1 Gbit/s link each."""
    _check_or_skip()
    if minicluster.status() is not None:
        minicluster.down()  # one left by an interrupted run: these tests need their own
    previous = os.environ.get("SLURM_CONF")
    cluster = minicluster.up(NODES, cpus_per_node=CPUS_PER_NODE, link=LINK)
    try:
        yield cluster
    finally:
        minicluster.down()
        if previous is not None:
            os.environ["SLURM_CONF"] = previous


@pytest.fixture
def restored(mini):
    """The cluster as the session made it again after a test that slowed a node or a link."""
    yield mini
    for node in mini.node_names:
        if not mini.daemons_alive().get(f"slurmd-{node}", True):
            mini.restart_node(node)  # a test killed it
        mini.thaw(node)
        mini.set_link(node, up=True)
        mini.set_cpus(node, CPUS_PER_NODE)
        mini.shape(node, LINK)


@pytest.fixture
def mini_checked_host():
    """Skip (or fail, where promised) as ``mini`` does, without starting a cluster."""
    _check_or_skip()


def _check_or_skip() -> None:
    try:
        minicluster.check_host()
    except MiniClusterError as error:
        if _required():
            pytest.fail(f"{error}; WORKBENCH_REQUIRE_SLURM/CI says the miniature cluster must run", pytrace=False)
        pytest.skip(str(error))
