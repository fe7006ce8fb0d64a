"""The controller's heartbeat settings and how a stopped cluster's processes are waited for."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from workbench.cluster import controller_heartbeat_args, wait_ended


def test_the_heartbeat_period_grows_with_the_engines_and_the_missed_time_stays_30_s():
    assert controller_heartbeat_args(2) == ["--HeartMonitor.period=500", "--HeartMonitor.max_heartmonitor_misses=60"]
    # 64 engines: 8 ms an engine, 512 ms; 59 misses of 512 ms is the first count past 30 s
    assert controller_heartbeat_args(64) == ["--HeartMonitor.period=512", "--HeartMonitor.max_heartmonitor_misses=59"]
    # ipyparallel's own period and misses from 375 engines on
    assert controller_heartbeat_args(1024) == [
        "--HeartMonitor.period=3000",
        "--HeartMonitor.max_heartmonitor_misses=10",
    ]


def test_a_zombie_has_ended_and_a_running_process_is_returned_after_the_timeout():
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        zombie = psutil.Process(exited.pid)
        while zombie.status() != psutil.STATUS_ZOMBIE:  # not reaped: Popen.wait() is not called yet
            time.sleep(0.01)
        assert wait_ended([zombie], 5.0) == []
        alive = wait_ended([zombie, psutil.Process(running.pid)], 0.1)
        assert [process.pid for process in alive] == [running.pid]
    finally:
        running.kill()
        running.wait()
        exited.wait()
