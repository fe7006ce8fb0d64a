"""A run stopped, stalled, or working outside its spans: the findings that say so, on hand-made runs."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pandas as pd

from workbench.analysis import analyse_run
from workbench.analysis.completion import completion_findings
from workbench.commands.profile import run_until_done_or_stopped

S = 1_000_000_000


def spans(*rows: tuple[int, float, float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run_id": "r", "rank": rank, "host": "", "phase": "compute", "name": "train_step", "detail": "",
             "step": 0, "epoch": 0, "start_ns": int(start * S), "end_ns": int(end * S), "bytes": -1}
            for rank, start, end in rows
        ]
    )  # fmt: skip


def samples(rank: int, until_s: float, every_s: float = 0.5) -> pd.DataFrame:
    times = [round(i * every_s, 6) for i in range(int(until_s / every_s) + 1)]
    return pd.DataFrame({"rank": rank, "host": "", "time_ns": [int(t * S) for t in times], "rss_bytes": 1})


def test_a_rank_alive_long_after_its_last_span_is_named_with_the_tail_it_left_out():
    events = spans((0, 0.0, 1.0), (1, 0.0, 1.0))
    memory = pd.concat([samples(0, 5.0), samples(1, 1.0)])  # rank 1's tail (0 s) stays under both thresholds
    found = completion_findings(events, memory, {"status": "finished"})
    assert list(found["kind"]) == ["unrecorded_tail"]
    tail = found.iloc[0]
    assert tail["seconds_lost"] == 4.0 and tail["fraction_of_wall"] == 0.8 and tail["ranks"] == "0"
    assert "rank 0 for 4.00 s of the 5.00 s it lived" in tail["text"]
    # a tail under a second, or under a tenth of the rank's life, is the sampler's interval: nothing said
    assert completion_findings(events, pd.concat([samples(0, 1.5), samples(1, 1.0)]), {}).empty


def test_a_collective_some_ranks_submitted_names_those_that_never_did_and_how_long_the_job_stood():
    events = spans((0, 0.0, 1.0), (1, 0.0, 1.0))
    memory = pd.concat([samples(0, 5.0), samples(1, 5.0)])
    meta = {
        "ranks": 3,
        "status": "interrupted",
        "stopped_by": "SIGTERM",
        "timeline_unfinished": [
            {"tensor": "grad_b", "operation": "ALLREDUCE", "since_ns": 2 * S, "ready_ranks": [], "file_end_ns": 2 * S},
            {"tensor": "grad_w", "operation": "ALLREDUCE", "since_ns": S, "ready_ranks": [0, 2], "file_end_ns": S},
        ],
    }
    found = completion_findings(events, memory, meta).set_index("kind")
    # the stall explains the tail: one finding, not two; the stop is a note
    assert list(found.index) == ["stalled_collective", "run_interrupted"]
    stall = found.loc["stalled_collective"]
    assert stall["seconds_lost"] == 4.0  # from its submission (1 s) to the last memory sample (5 s)
    assert stall["ranks"] == "1"
    assert "ALLREDUCE of 'grad_w' never completed: ranks 0, 2 submitted it 1.00 s into the run" in stall["text"]
    assert "rank 1 never did" in stall["text"] and "1 more collective was left open" in stall["text"]
    assert "SIGTERM" in found.loc["run_interrupted", "text"]
    # the same open negotiations in a run that finished: Horovod's writer cut off at exit, not a stall
    finished = completion_findings(events, memory, {**meta, "status": "finished"})
    assert "stalled_collective" not in set(finished["kind"])


def test_the_status_of_a_failed_run_is_a_note_and_a_finished_one_says_nothing():
    events = spans((0, 0.0, 1.0))
    failed = completion_findings(events, None, {"status": "failed", "exit_code": 3})
    assert list(failed["kind"]) == ["run_failed"] and "exit code 3" in failed.iloc[0]["text"]
    # rank 1 crashed at 2 s, rank 0 went on until mpiexec ended it at 5 s: rank 1 is where to look
    two = spans((0, 0.0, 1.0), (1, 0.0, 1.0))
    crashed = completion_findings(two, pd.concat([samples(0, 5.0), samples(1, 2.0)]), {"status": "failed"})
    text = crashed.set_index("kind").loc["run_failed", "text"]
    assert "rank 1's record ends first, 3.00 s before any other rank's" in text
    together = completion_findings(two, pd.concat([samples(0, 5.0), samples(1, 4.5)]), {"status": "failed"})
    assert "ends first" not in together.set_index("kind").loc["run_failed", "text"]  # within a second: no one
    assert completion_findings(events, None, {"status": "finished"}).empty
    assert completion_findings(events.iloc[:0], None, {}).empty  # no events, no samples: nothing to say


def test_analyse_run_carries_them_with_its_other_findings():
    events = spans((0, 0.0, 1.0), (1, 0.0, 1.0))
    memory = pd.concat([samples(0, 5.0), samples(1, 5.0)])
    result = analyse_run(events, memory, {"run_id": "r", "ranks": 2, "status": "running"})
    assert "unrecorded_tail" in set(result.findings["kind"])


def test_a_signal_to_workbench_ends_the_command_and_says_which(tmp_path):
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    handler = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    timer.start()
    try:
        returncode, stopped_by = run_until_done_or_stopped(command, dict(os.environ))
    finally:
        timer.cancel()
    assert stopped_by == "SIGTERM" and returncode == -signal.SIGTERM  # the child was ended by SIGTERM
    assert time.monotonic() - started < 30
    assert signal.getsignal(signal.SIGTERM) == handler  # the handler this process had is back
    assert run_until_done_or_stopped([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ)) == (3, None)


def test_ranks_that_never_meet_get_no_derived_waits_and_no_imbalance():
    # two ranks each training on its own (no collective): rank 1's steps take twice rank 0's
    events = spans(*[(0, 2 * i, 2 * i + 1) for i in range(5)], *[(1, 2 * i, 2 * i + 2) for i in range(5)])
    events["step"] = [i for _ in range(2) for i in range(5)]
    result = analyse_run(events, None, {"run_id": "r", "ranks": 2, "status": "finished"})
    kinds = set(result.findings["kind"])
    assert "no_collectives" in kinds
    assert not {"load_imbalance", "straggler", "no_communication"} & kinds
    assert "communication_wait" not in set(result.breakdown["phase"])  # nobody waited for anybody
    # the same steps with an allreduce recorded: the waits are derived again
    allreduce = spans((0, 1.0, 1.0)).assign(phase="communication", name="allreduce", step=0)
    synced = analyse_run(pd.concat([events, allreduce]), None, {"run_id": "r", "ranks": 2})
    assert "no_collectives" not in set(synced.findings["kind"])


def test_a_profiled_run_is_named_after_its_script_module_or_inline_code():
    from workbench.commands.profile import run_label

    assert run_label(["python", "path/to/train.py", "--epochs", "2"]) == "train"
    assert run_label(["python3", "-m", "package.train_main"]) == "train_main"
    assert run_label(["python", "-c", "print(1)"]) == "inline"
    assert run_label(["./train.sh"]) == "train.sh"


def test_the_recorded_environment_keeps_tensorflows_variables_and_not_terraforms():
    from workbench.store import recorded_environment

    environ = {"TF_NUM_INTRAOP_THREADS": "2", "TF_CLI_CONFIG_FILE": "/root/.terraformrc", "TF_VAR_token": "x"}
    assert recorded_environment({**environ, "OMP_NUM_THREADS": "1", "HOME": "/root"}) == {
        "OMP_NUM_THREADS": "1",
        "TF_NUM_INTRAOP_THREADS": "2",
    }


def test_a_long_set_up_before_the_first_span_is_a_note_naming_the_longest_and_the_shortest():
    # rank 0 lived 10 s and began its spans at 6 s; rank 1 lived 10 s and began at 1 s
    events = spans((0, 6.0, 10.0), (1, 1.0, 10.0))
    memory = pd.concat([samples(0, 10.0), samples(1, 10.0)])
    found = completion_findings(events, memory, {"status": "finished"})
    assert list(found["kind"]) == ["setup_time"]
    note = found.iloc[0]
    assert pd.isna(note["seconds_lost"]) and note["fraction_of_wall"] == 0.6 and note["ranks"] == "0"
    assert "took 6.00 s on rank 0, 60% of the 10.0 s it lived; the shortest, rank 1's, 1.00 s" in note["text"]
    # under 2 s, or under a fifth of the rank's life (import time in a long run), nothing is said
    assert completion_findings(spans((0, 1.5, 3.0)), samples(0, 3.0), {}).empty
    assert completion_findings(spans((0, 3.0, 30.0)), samples(0, 30.0), {}).empty
    # a tail and a set-up both: two findings, the tail ranked first (it has a cost)
    both = completion_findings(spans((0, 3.0, 6.0)), samples(0, 10.0), {})
    assert list(both["kind"]) == ["unrecorded_tail", "setup_time"]
