"""Ranks on several hosts: per-rank tables carry the host, texts name it, one host reads as before."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.analysis import analyse_run, findings, lateness_summary, phase_breakdown
from workbench.analysis.straggler import straggler_rows
from workbench.events import events_frame, host_count, hosts_summary, rank_hosts, ranks_with_hosts
from workbench.faults import find_stalls
from workbench.figures import timeline_figure
from workbench.text import format_analysis, format_header
from workbench.widgets import Dashboard

S = 1_000_000_000
TWO_HOSTS = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}


def span(rank, phase, start, end, name=None, host=None, step=-1):
    return {
        "run_id": "r1",
        "rank": rank,
        "host": TWO_HOSTS[rank] if host is None else host,
        "phase": phase,
        "name": name or phase,
        "step": step,
        "start_ns": int(start * S),
        "end_ns": int(end * S),
    }


def two_host_events(host=None):
    """10 s, ranks 0-1 on node1, 2-3 on node2: steps [0, 6); rank 2 evaluates [6, 10), the others idle."""
    rows = [span(r, "compute", 2 * i, 2 * i + 2, "train_step", host, step=i) for r in range(4) for i in range(3)]
    rows.append(span(2, "evaluation", 6, 10, host=host))
    return events_frame(rows)


# ----------------------------------------------------------------------------- text helpers
def test_ranks_with_hosts_names_hosts_only_when_there_are_several():
    assert ranks_with_hosts([2]) == "rank 2"
    assert ranks_with_hosts([1, 2, 3, 5], {r: "node1" for r in range(6)}) == "ranks 1–3, 5"
    assert ranks_with_hosts([2], TWO_HOSTS) == "rank 2 (node2)"
    # all of node2's ranks: the host comes first; part of node1: the ranks come first
    assert ranks_with_hosts([2, 3], TWO_HOSTS) == "node2 (ranks 2–3)"
    assert ranks_with_hosts([1, 2, 3], TWO_HOSTS) == "rank 1 (node1), node2 (ranks 2–3)"
    # a rank whose host is not known is grouped as such, never an error
    assert ranks_with_hosts([0, 7], TWO_HOSTS) == "rank 0 (node1), rank 7 (unknown host)"
    # named ranks on many hosts are counted, not listed
    many = {r: f"node{r // 8 + 1}" for r in range(1024)}
    assert ranks_with_hosts(range(64), many) == "ranks 0–63 on 8 hosts"


def test_hosts_summary_is_one_short_line_even_for_1024_ranks():
    assert hosts_summary({}) == "" and hosts_summary({0: "node1", 1: "node1"}) == ""
    four = {r: f"node{r + 1}" for r in range(4)}
    assert hosts_summary(four) == "4 ranks on 4 hosts: node1 (rank 0), node2 (rank 1), node3 (rank 2), node4 (rank 3)"
    assert hosts_summary(TWO_HOSTS) == "4 ranks on 2 hosts: node1 (ranks 0–1), node2 (ranks 2–3)"
    assert hosts_summary({r: f"node{r // 8 + 1}" for r in range(1024)}) == "1024 ranks on 128 hosts, 8 per host"
    uneven = {r: f"node{min(r // 8, 126) + 1}" for r in range(1024)}
    assert hosts_summary(uneven) == "1024 ranks on 127 hosts, 8–16 per host"


def test_rank_hosts_takes_the_first_frame_that_names_a_rank_and_never_raises():
    events = events_frame([span(0, "compute", 0, 1), span(1, "compute", 0, 1, host="")])
    memory = pd.DataFrame({"rank": [1, 2], "host": ["node1", None]})
    rank_meta = pd.DataFrame({"rank": [2, 3], "host": ["node2", "node2"]})
    assert rank_hosts(events, memory, rank_meta) == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert rank_hosts(pd.DataFrame({"rank": [0]}), None, pd.DataFrame()) == {}
    assert host_count({0: "a", 1: "", 2: "a"}) == 1


# ----------------------------------------------------------------------------- analysis
def test_every_per_rank_table_of_analyse_run_carries_the_host():
    result = analyse_run(two_host_events(), None, {"run_id": "r1", "ranks": 5})
    assert result.header["rank_hosts"] == TWO_HOSTS
    for table in (result.breakdown, result.steps, result.memory, result.waits, result.lateness, result.in_flight):
        columns = list(table.columns)
        assert columns[columns.index("rank") + 1] == "host"
    hosts = result.breakdown.drop_duplicates("rank").set_index("rank")["host"].to_dict()
    assert hosts == {**TWO_HOSTS, 4: ""}  # rank 4 was declared but recorded nothing: host unknown
    assert result.steps.set_index("rank")["host"].to_dict() == {**TWO_HOSTS, 4: ""}
    assert lateness_summary(result.lateness, result.header["rank_hosts"]).columns[1] == "host"
    assert result.to_dict()["run"]["rank_hosts"] == {str(r): h for r, h in TWO_HOSTS.items()}


def test_hosts_come_from_rank_meta_when_the_events_do_not_name_them():
    rank_meta = pd.DataFrame([{"rank": r, "host": h, "pid": 100 + r} for r, h in TWO_HOSTS.items()])
    result = analyse_run(two_host_events(host=""), None, {"run_id": "r1"}, rank_meta=rank_meta)
    assert result.steps["host"].tolist() == ["node1", "node1", "node2", "node2"]
    plain = analyse_run(two_host_events(host=""), None, {"run_id": "r1"})
    assert plain.steps["host"].tolist() == ["", "", "", ""] and plain.header["rank_hosts"] == {}


def test_findings_name_the_rank_and_its_host_on_several_hosts_only():
    several = findings(two_host_events()).set_index("kind")["text"]
    assert several["serial_evaluation"].startswith(
        "rank 2 (node2) evaluates for 40% of wall time while node1 (ranks 0–1), rank 3 (node2) wait"
    )
    assert "(most: rank 0 (node1), 40%)" in several["idle"]
    one = findings(two_host_events(host="node1")).set_index("kind")["text"]
    assert one["serial_evaluation"].startswith("rank 2 evaluates for 40% of wall time while ranks 0–1, 3 wait")
    assert "node1" not in " ".join(one)
    # the ranks column stays a plain rank list: programs filter on it
    assert findings(two_host_events()).set_index("kind").loc["serial_evaluation", "ranks"] == "2"


def test_a_straggler_and_the_ranks_waiting_for_it_are_named_with_their_hosts():
    # 4 steps of 1 s; rank 3 arrives last in every step, the others wait 0.5 s for it (from lateness)
    waits = pd.DataFrame(
        {
            "rank": [r for _ in range(4) for r in range(4)],
            "step": [s for s in range(4) for _ in range(4)],
            "duration_s": 1.0,
            "wait_s": [0.0 if r == 3 else 0.5 for _ in range(4) for r in range(4)],
            "late_rank": 3,
            "evidence": "lateness",
        }
    )
    (row,) = straggler_rows(waits, wall_s=4.0, hosts=TWO_HOSTS)
    assert row["text"].startswith("rank 3 (node2) arrives last to the allreduce in 100% of steps")
    assert "; rank 2 (node2), node1 (ranks 0–1) lose 2 s each" not in row["text"]  # hosts in rank order
    assert "; node1 (ranks 0–1), rank 2 (node2) lose 2 s each waiting for it" in row["text"]
    (plain,) = straggler_rows(waits, wall_s=4.0)
    assert "; ranks 0–2 lose 2 s each waiting" in plain["text"] and plain["ranks"] == row["ranks"] == "3"


def test_the_run_header_and_the_text_report_say_where_the_ranks_ran():
    text = format_analysis(analyse_run(two_host_events(), None, {"run_id": "r1", "ranks": 4}))
    lines = text.splitlines()
    assert lines[2] == "         4 ranks on 2 hosts: node1 (ranks 0–1), node2 (ranks 2–3)"
    steps = lines[lines.index("Training steps per rank") + 1 :]
    assert steps[0].split()[:2] == ["rank", "host"] and steps[3].split()[:2] == ["2", "node2"]
    one_host = format_analysis(analyse_run(two_host_events(host="node1"), None, {"run_id": "r1", "ranks": 4}))
    assert "hosts" not in one_host and "rank  host" not in one_host
    many = {"run_id": "big", "rank_hosts": {r: f"node{r // 8 + 1:03d}" for r in range(1024)}}
    header = format_header(many)
    assert header[-1] == "         1024 ranks on 128 hosts, 8 per host" and len(header) == 3


@pytest.mark.parametrize("hosts", [None, {}, {0: ""}])
def test_a_header_without_hosts_reads_as_before(hosts):
    header = {"run_id": "r1", "ranks": 2} | ({} if hosts is None else {"rank_hosts": hosts})
    assert len(format_header(header)) == 2


# ----------------------------------------------------------------------------- timeline
def timeline_events(hosts):
    """Ranks 0-3, one compute span each; rank 1 also has a collective in flight (its own lane)."""
    rows = [span(r, "compute", 0, 1, host=hosts[r]) for r in range(4)]
    rows.append(span(1, "in_flight", 0, 1, "ALLREDUCE", host=hosts[1]))
    return events_frame(rows)


def test_timeline_lanes_are_ordered_and_labelled_by_host_then_rank():
    hosts = {0: "node2", 1: "node10", 2: "node2", 3: "node10"}  # natural order: node2 before node10
    fig = timeline_figure(timeline_events(hosts))
    axis = fig.layout.yaxis
    assert list(axis.categoryarray) == [0, 2, 1, "1 in flight", 3]
    assert list(axis.ticktext) == [
        "node2 · rank 0",
        "node2 · rank 2",
        "node10 · rank 1",
        "node10 · rank 1 in flight",
        "node10 · rank 3",
    ]
    # one band (every other host), one line between the hosts, at lane positions 1.5 .. 4.5
    band, line = fig.layout.shapes
    assert (band.type, band.y0, band.y1, line.type, line.y0) == ("rect", 1.5, 4.5, "line", 1.5)
    names = [a.text for a in fig.layout.annotations if a.xref == "paper"]
    assert names == ["<b>node2</b>", "<b>node10</b>"]  # each host's name once


def test_timeline_on_one_host_looks_as_before():
    fig = timeline_figure(timeline_events({r: "node1" for r in range(4)}))
    assert list(fig.layout.yaxis.categoryarray) == [0, 1, "1 in flight", 2, 3]
    assert list(fig.layout.yaxis.ticktext) == ["0", "1", "1 in flight", "2", "3"]
    assert fig.layout.shapes == () and fig.layout.yaxis.title.text == "rank"
    assert fig.layout.margin.l == 70 and fig.layout.margin.r == 20


def test_timeline_takes_the_hosts_it_is_given_and_labels_blocks_on_their_own_lane():
    rows = [span(0, "compute", i, i + 0.5, "fit", host="") for i in range(3)]  # a block of 3: labelled
    events = events_frame([*rows, span(1, "compute", 0, 1, "step", host="")])
    fig = timeline_figure(events, hosts={0: "node2", 1: "node1"})
    assert list(fig.layout.yaxis.categoryarray) == [1, 0]
    # an annotation's number on a category axis is a lane's position: rank 0 is drawn second
    (block,) = [a for a in fig.layout.annotations if a.text == "fit"]
    assert block.y == 1


# ----------------------------------------------------------------------------- dashboard
class Feed:
    """A live source that hands out prepared event chunks, one per poll."""

    def __init__(self, *chunks: pd.DataFrame) -> None:
        self.chunks = list(chunks)

    def poll(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return (self.chunks.pop(0) if self.chunks else events_frame([]).iloc[0:0]), pd.DataFrame()


def test_dashboard_status_text_fallback_and_timeline_name_the_hosts():
    now = [0.0]
    dash = Dashboard(
        Feed(two_host_events()), analyse=phase_breakdown, refresh_s=1.0, stale_s=10.0, clock=lambda: now[0]
    )
    dash.update()
    status = dash.status_text()
    assert "4 ranks seen on 2 hosts: node1 (ranks 0–1), node2 (ranks 2–3)" in status
    assert list(dash.timeline.layout.yaxis.ticktext)[2] == "node2 · rank 2"
    assert len(dash.timeline.layout.shapes) == 2
    table = dash.text_summary().splitlines()
    header = table[table.index("seconds per phase:") + 1]
    assert header.split()[:2] == ["phase", "host"]
    assert any(line.split()[:2] == ["2", "node2"] for line in table)
    dash._last_seen[3] = -20.0  # rank 3 silent for 20 s while the others are not
    assert "rank 3 (node2) has sent nothing for 20 s" in dash.status_text()


def test_dashboard_on_one_host_says_ranks_as_before():
    dash = Dashboard(Feed(two_host_events(host="node1")), analyse=phase_breakdown, refresh_s=1.0)
    dash.update()
    assert "4 ranks seen (0–3)" in dash.status_text() and "hosts" not in dash.status_text()
    assert "host" not in dash.text_summary().splitlines()[2]
    assert dash.timeline.layout.shapes == ()


def test_a_stalled_rank_is_named_with_its_host_on_several_hosts():
    processes = {0: ("running", 99.0), 2: ("stopped", 0.0)}
    (stall,) = find_stalls({0: 1.0, 2: 12.0}, processes, 10, hosts=TWO_HOSTS)
    assert stall.message().startswith("rank 2 (node2) has recorded nothing for 12 s (process stopped)")
    (plain,) = find_stalls({0: 1.0, 2: 12.0}, processes, 10, hosts={0: "node1", 2: "node1"})
    assert plain.message().startswith("rank 2 has recorded nothing") and plain.host == ""
