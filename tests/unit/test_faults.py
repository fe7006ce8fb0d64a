"""The pure diagnosis: which rank failed first and how, from launcher text, engine errors, process states."""

from __future__ import annotations

from datetime import datetime

from ipyparallel.error import CompositeError, EngineError, RemoteError

from workbench.faults import (
    Failure,
    RankFailedError,
    diagnose,
    engine_errors,
    find_stalls,
    horovod_stall_warnings,
    launcher_deaths,
    nanny_exits,
)

# What `prterun` (Open MPI 5.0.11 here) and the engines printed when rank 1 got SIGKILL (captured here)
KILLED_OUTPUT = """\
2026-11-22 07:21:57.553 [IPEngine.0.0] Handling apply_request: 1a83fb69_7
2026-11-22 07:21:59.560 [KernelNanny.1] Pipe closed, parent 28597 has status: zombie
2026-11-22 07:21:59.560 [KernelNanny.1] Notifying Hub that our parent has shut down
2026-11-22 07:21:59.562 [KernelNanny.1] Parent 28597 exited with status None.
2026-11-22 07:22:00.072 [KernelNanny.0] Parent 28596 exited with status None.
2026-11-22 07:22:00.073 [KernelNanny.0] Pipe closed, parent 28596 has status: None
--------------------------------------------------------------------------
prterun noticed that process rank 1 with PID 0 on node vm exited on
signal 9 (Killed).
--------------------------------------------------------------------------
"""
EXIT_CODE_OUTPUT = """\
--------------------------------------------------------------------------
prterun detected that one or more processes exited with non-zero status,
thus causing the job to be terminated. The first process to do so was:

   Process name: [prterun-vm-28581@1,0]
   Exit code:    3
--------------------------------------------------------------------------
"""
MPICH_OUTPUT = """\
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 4242 RUNNING AT vm
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
"""


def _composite_of_dead_engines() -> CompositeError:
    errors = []
    for engine in (0, 1):
        try:
            raise EngineError(f"Engine {engine} died while running task 'abc_{engine}'")
        except EngineError as error:
            errors.append(error)
    return CompositeError("one or more exceptions raised in: work", [_wrapped(e) for e in errors])


def _wrapped(error: BaseException) -> tuple[str, str, str, dict]:
    return (type(error).__name__, str(error), "", {})


def test_launcher_lines_name_the_first_rank_and_its_signal_or_exit_code():
    assert launcher_deaths(KILLED_OUTPUT) == [(1, "was killed by signal 9 (SIGKILL)")]
    assert launcher_deaths(EXIT_CODE_OUTPUT) == [(0, "exited with code 3")]
    assert launcher_deaths(MPICH_OUTPUT, {0: 4241, 1: 4242}) == [(1, "was killed by signal 9 (SIGKILL)")]
    assert launcher_deaths("nothing to see") == []


def test_nanny_lines_give_the_order_in_which_engines_ended():
    exits = nanny_exits(KILLED_OUTPUT)
    assert [engine for engine, _t in exits] == [1, 0]
    assert exits[0][1] == datetime(2026, 11, 22, 7, 21, 59, 560000).timestamp()


def test_a_killed_rank_is_named_although_ipyparallel_says_every_engine_died():
    error = _composite_of_dead_engines()
    assert [row[0] for row in engine_errors(error)] == [0, 1]
    died_at = datetime(2026, 11, 22, 7, 21, 59, 560000).timestamp()
    failure = diagnose(
        launcher_output=KILLED_OUTPUT,
        exit_data={"exit_code": 137},
        error=error,
        rank_states={0: "gone", 1: "gone"},
        last_event_ns={0: 5, 1: 7},
        now=died_at + 0.75,
    )
    assert failure is not None
    assert (failure.rank, failure.cause, failure.source) == (1, "was killed by signal 9 (SIGKILL)", "launcher")
    assert failure.detected_after_s == 0.75 and failure.last_event_ns == 7
    assert failure.as_dict()["details"][0] == "launcher: rank 1 was killed by signal 9 (SIGKILL)"
    message = str(RankFailedError(failure, "runs/x"))
    assert message.startswith("rank 1 was killed by signal 9 (SIGKILL) (seen 0.8 s after it happened)")
    assert "runs/x (status: failed)" in message


def test_without_the_launcher_the_process_states_decide():
    stopped = diagnose(rank_states={0: "running", 1: "stopped"})
    assert stopped is not None and stopped.rank == 1 and "stopped" in stopped.cause
    gone = diagnose(rank_states={0: "gone", 1: "sleeping"})
    assert gone is not None and (gone.rank, gone.source) == (0, "process")
    killed = diagnose(rank_states={0: "sleeping", 1: "gone"}, exit_data={"exit_code": 137})
    assert (
        killed is not None and killed.message() == "rank 1 was killed by signal 9 (SIGKILL) (mpiexec's exit code 137)"
    )
    assert diagnose(rank_states={0: "running", 1: "sleeping"}) is None


def test_a_python_exception_names_its_rank():
    try:
        raise RemoteError("RuntimeError", "rank 1 was told to fail\nmore", "tb", {"engine_id": 1})
    except RemoteError as error:
        failure = diagnose(error=error, rank_states={0: "sleeping", 1: "sleeping"})
    assert failure == Failure(
        rank=1,
        cause="raised RuntimeError: rank 1 was told to fail",
        source="exception",
        details=("rank 1 raised RuntimeError: more",),
    )


def test_an_exception_that_introduces_a_log_names_the_logs_last_line():
    """A workload that ends with "its log ends:" and a traceback: the cause is at the traceback's end."""
    message = (
        "PS job: the chief failed (exit 1); its log ends:\nTraceback (most recent call last):\n"
        '  File "chief.py", line 3, in <module>\n'
        "tensorflow.python.framework.errors_impl.UnavailableError: worker1 is gone"
    )
    try:
        raise RemoteError("RuntimeError", message, "tb", {"engine_id": 0})
    except RemoteError as error:
        failure = diagnose(error=error, rank_states={0: "sleeping", 1: "sleeping"})
    assert failure is not None and failure.message() == (
        "rank 0 raised RuntimeError: PS job: the chief failed (exit 1); its log ends: …"
        " tensorflow.python.framework.errors_impl.UnavailableError: worker1 is gone"
    )
    assert failure.details[-1].endswith("UnavailableError: worker1 is gone") and len(failure.details) == 3


def test_stalls_name_the_idle_or_stopped_rank_not_the_one_waiting_in_mpi():
    processes = {0: ("running", 99.0), 1: ("sleeping", 0.0)}
    stalls = find_stalls({0: 12.0, 1: 12.0}, processes, stall_after_s=10)
    assert [(s.rank, s.waiting) for s in stalls] == [(1, (0,))]
    assert stalls[0].message() == "rank 1 has recorded nothing for 12 s (idle, 0 % CPU) while rank 0 wait"
    assert find_stalls({0: 12.0, 1: 12.0}, processes, stall_after_s=30) == []
    # both compute hard (e.g. TensorFlow starting): nobody is stuck
    assert find_stalls({0: 40.0, 1: 40.0}, {0: ("running", 90.0), 1: ("running", 80.0)}, 10) == []
    stopped = find_stalls({1: 11.0}, {0: ("running", 50.0), 1: ("stopped", 0.0)}, 10)
    assert [(s.rank, s.state) for s in stopped] == [(1, "process stopped")]


def test_horovod_stall_warnings_are_captured():
    text = (
        "[2026-11-22 07:00:00.000000: W horovod/common/stall_inspector.cc:107] One or more tensors were submitted "
        "to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
        "than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that "
        "only subset of ranks is submitting tensors, which will cause deadlock.\nMissing ranks:\n0: [grad_0]\n\nnext"
    )
    warnings = horovod_stall_warnings(text)
    assert len(warnings) == 1 and "Missing ranks: 0: [grad_0]" in warnings[0]


def _three_parts(tmp_path):
    from workbench.store import StreamWriter, create_run

    run_path = create_run(tmp_path, "parts", ranks=1)
    writer = StreamWriter(run_path, "events", 0)
    written = []
    for batch in range(3):
        columns = {
            "run_id": ["r"] * 2,
            "rank": [0, 0],
            "host": ["h", "h"],
            "phase": ["compute"] * 2,
            "name": ["step"] * 2,
            "detail": ["", ""],
            "step": [batch, batch],
            "epoch": [0, 0],
            "start_ns": [10 * batch, 10 * batch + 1],
            "end_ns": [10 * batch + 1, 10 * batch + 2],
            "bytes": [-1, -1],
        }
        written.append(writer.write(columns))
    return run_path, written


def test_corrupt_and_half_written_parts_lose_only_themselves(tmp_path):
    from workbench.store import RunData, RunTail

    run_path, parts = _three_parts(tmp_path)
    parts[1].write_bytes(b"PAR1 not really parquet")  # corrupt part in place
    (parts[0].parent / ".00000004-00000004.parquet.tmp").write_bytes(parts[0].read_bytes()[:40])  # half-written
    events = RunData.load(run_path).events
    assert sorted(events["step"].unique()) == [0, 2]  # the two good batches, nothing from the broken files
    assert len(RunTail(run_path).poll()[0]) == 4
    assert last_events_of(run_path) == {0: 22}


def last_events_of(run_path):
    from workbench.faults import last_events

    return last_events(run_path)


def test_dashboard_banner_shows_a_stall_then_the_failure(tmp_path):
    from workbench.store import RunTail, create_run, update_run_meta
    from workbench.widgets import Dashboard

    run_path = create_run(tmp_path, "banner", ranks=2)
    stall = find_stalls({1: 12.0}, {0: ("running", 99.0), 1: ("sleeping", 0.0)}, 10)[0]
    update_run_meta(run_path, stall={"ranks": [stall.as_dict()], "horovod": []})
    dashboard = Dashboard(RunTail(run_path))
    assert dashboard.status_text().startswith("STALL: rank 1 has recorded nothing for 12 s (idle, 0 % CPU)")
    assert "cluster.stacks()" in dashboard.status_text()
    failure = Failure(rank=1, cause="was killed by signal 9 (SIGKILL)", source="launcher")
    update_run_meta(run_path, status="failed", failure=failure.as_dict())
    assert dashboard.status_text().startswith("FAILED: rank 1 was killed by signal 9 (SIGKILL)")
    dashboard.update()
    assert "#b00020" in dashboard.status.value
