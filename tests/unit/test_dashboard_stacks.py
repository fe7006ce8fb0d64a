"""The dashboard's Stacks button: orange on a stall, every rank's stack shown on a click (real RunTail)."""

from __future__ import annotations

from workbench.recorder import Recorder
from workbench.store import RunTail, create_run, update_run_meta
from workbench.widgets import Dashboard


def stacks() -> dict[int, str]:
    return {1: 'File "train.py", line 9, in step\n    time.sleep(3600)', 0: 'File "train.py", line 12, in allreduce'}


def test_stacks_button_lights_on_a_stall_and_shows_every_rank(tmp_path):
    run_path = create_run(tmp_path, "stall", ranks=2)
    with Recorder(run_path, rank=0) as recorder, recorder.phase("compute", "step"):
        pass
    dashboard = Dashboard(RunTail(run_path), on_stacks=stacks)
    dashboard.update()
    assert not dashboard.stacks_button.disabled and dashboard.stacks_button.button_style == ""
    update_run_meta(
        run_path,
        stall={
            "ranks": [{"rank": 1, "message": "rank 1 has recorded nothing for 31 s (idle, 0 % CPU)"}],
            "horovod": [],
        },
    )
    dashboard.update()
    assert dashboard.status_text().startswith("STALL: rank 1 has recorded nothing for 31 s")
    assert dashboard.stacks_button.button_style == "warning"
    shown = dashboard.show_stacks()
    assert sorted(shown) == [0, 1]
    view = dashboard.stacks_view.value
    assert view.index("=== rank 0 ===") < view.index("=== rank 1 ===") and "time.sleep(3600)" in view


def test_without_a_stacks_source_the_button_says_what_to_pass(tmp_path):
    dashboard = Dashboard(RunTail(create_run(tmp_path, "plain", ranks=1)))
    assert dashboard.stacks_button.disabled and "on_stacks=cluster.stacks" in dashboard.stacks_button.tooltip
    assert dashboard.show_stacks() == {}


def test_a_failing_stacks_call_goes_to_the_status_line(tmp_path):
    def broken() -> dict[int, str]:
        raise RuntimeError("the cluster is stopped")

    dashboard = Dashboard(RunTail(create_run(tmp_path, "gone", ranks=1)), on_stacks=broken)
    assert dashboard.show_stacks() == {}
    assert "stacks" in dashboard.status_text() and "the cluster is stopped" in dashboard.status_text()
