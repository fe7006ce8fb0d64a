"""The host's speed sampled beside a sweep, and read back per run window (hand-made samples)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from docsbench.projection_check import _host_slowdown
from workbench import hostspeed


def test_samples_are_one_per_core_a_round_and_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / hostspeed.SAMPLES_FILE
    hostspeed.sample(path, interval_s=0.0, rounds=3)
    with open(path, "a") as handle:
        handle.write("1234 0")  # the probe killed mid-line
    samples = hostspeed.read_samples(path)
    cores = sorted(os.sched_getaffinity(0))
    assert samples.shape == (3 * len(cores), 3)
    assert sorted(set(samples[:, 1].tolist())) == cores
    assert (samples[:, 2] > 0).all() and (np.diff(samples[:, 0]) >= 0).all()


def test_speed_in_a_window_is_units_per_cpu_second_from_the_median_sample():
    # 1 ms per unit from 0 to 9 s, then 2 ms per unit from 10 to 19 s; core 1's samples at 4 ms
    samples = np.array(
        [[s * 10**9, 0, 1_000_000 if s < 10 else 2_000_000] for s in range(20)]
        + [[s * 10**9, 1, 4_000_000] for s in range(20)]
    )
    assert hostspeed.speed_in_window(samples, 0, 9 * 10**9, cores={0}) == pytest.approx(1000.0)
    assert hostspeed.speed_in_window(samples, 10 * 10**9, 19 * 10**9, cores={0}) == pytest.approx(500.0)
    # both cores from 0 to 9 s: medians of 1 ms x 10 and 4 ms x 10 -> 2.5 ms
    assert hostspeed.speed_in_window(samples, 0, 9 * 10**9) == pytest.approx(400.0)
    assert hostspeed.speed_in_window(samples, 0, 3 * 10**9, cores={0}) is None  # 4 samples: too few to judge


def test_a_run_in_a_slower_window_than_its_base_run_reads_as_that_slowdown():
    samples = np.array([[s * 10**9, 0, 1_000_000 if s < 10 else 1_500_000] for s in range(20)])

    def run_between(start_s, end_s):
        return pd.DataFrame({"start_ns": [start_s * 10**9], "end_ns": [end_s * 10**9]})

    assert _host_slowdown(samples, run_between(0, 9), run_between(10, 19)) == pytest.approx(1.5)
    assert _host_slowdown(samples, run_between(0, 9), run_between(30, 40)) is None  # not sampled then
    assert _host_slowdown(samples, run_between(0, 9), run_between(0, 0).iloc[:0]) is None  # no events


def test_the_probe_samples_while_its_block_runs_and_stops_after(tmp_path):
    with hostspeed.HostSpeedProbe(tmp_path, interval_s=0.02) as probe:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not probe.path.exists() or len(hostspeed.read_samples(probe.path)) < 4):
            time.sleep(0.05)
        process = probe._process
    assert process is not None and process.poll() is not None  # stopped with the block
    count = len(hostspeed.read_samples(probe.path))
    assert count >= 4
    time.sleep(0.2)
    assert len(hostspeed.read_samples(probe.path)) == count  # nothing written after


def test_the_probe_stops_by_itself_when_the_sweep_that_started_it_is_killed(tmp_path):
    """A sweep killed by SIGKILL or an unhandled SIGTERM cannot stop its probe: the probe notices its parent gone."""
    path = tmp_path / hostspeed.SAMPLES_FILE
    # a shell stands in for the sweep: it starts the probe with its own pid as the parent, prints the probe's pid
    # and exits at once, so the probe is handed to another parent
    script = f"{sys.executable} -m workbench.hostspeed {path} --interval 0.01 --parent $$ >/dev/null 2>&1 & echo $!"
    orphan = int(subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout)

    def running() -> bool:  # an exited orphan may linger as a zombie until its new parent reaps it
        try:
            return Path(f"/proc/{orphan}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and running():
        time.sleep(0.05)
    alive = running()
    if alive:
        os.kill(orphan, signal.SIGKILL)
    assert not alive, "the probe kept sampling after its parent was gone"
