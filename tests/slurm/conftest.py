"""A private single-node Slurm for the tests in this folder, started by tests/slurm/slurm-local.sh.

Why a module fixture: Slurm is up in about a second, but every test here needs it; all its state
lives in a temporary directory and every daemon it started is stopped at the end, also when a test
failed. Where Slurm is not installed the tests skip, unless `make test` (or CI) promised to install
it (WORKBENCH_REQUIRE_SLURM=1, CI=true): then they fail, so a broken install is not a quiet skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("slurm-local.sh")
NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "srun")


def _slurm_required() -> bool:
    return os.environ.get("WORKBENCH_REQUIRE_SLURM") == "1" or os.environ.get("CI", "").lower() in ("1", "true")


@pytest.fixture(scope="module")
def slurm_conf():
    """SLURM_CONF of a running one-node Slurm (munged, slurmctld, slurmd as root), stopped after the module."""
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing:
        message = f"Slurm is not installed ({', '.join(missing)} missing): run `make slurm` (Debian packages, root)"
        if _slurm_required():
            pytest.fail(message + "; WORKBENCH_REQUIRE_SLURM/CI says it must be there", pytrace=False)
        pytest.skip(message)
    if os.geteuid() != 0:
        message = "the test Slurm runs its daemons as root (SlurmUser=root): run the tests as root"
        if _slurm_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    state = Path(tempfile.mkdtemp(prefix="workbench-slurm-test-"))
    # the daemons outlive the test that first asked for them: keep its name out of their environment
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    started = subprocess.run(
        [str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    previous = os.environ.get("SLURM_CONF")
    try:
        if started.returncode != 0:
            pytest.fail(f"the test Slurm did not start:\n{started.stdout}{started.stderr}", pytrace=False)
        os.environ["SLURM_CONF"] = str(state / "slurm.conf")
        yield state / "slurm.conf"
    finally:
        subprocess.run([str(SCRIPT), "stop", str(state)], capture_output=True, timeout=120, check=False)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(state, ignore_errors=True)
