"""Timeline bars labelled by what they are: runs of one name (predict calls by method) get a label."""

from __future__ import annotations

import pandas as pd

from workbench.figures import timeline_figure
from workbench.figures.timeline import MAX_BLOCK_LABELS, name_blocks, spans_frame

MS = 1_000_000


def events(names_by_rank: dict[int, list[str]]) -> pd.DataFrame:
    rows = []
    for rank, names in names_by_rank.items():
        for i, name in enumerate(names):
            rows.append(
                {
                    "run_id": "r",
                    "rank": rank,
                    "host": "h",
                    "phase": "evaluation",
                    "name": name,
                    "detail": "",
                    "step": i,
                    "epoch": -1,
                    "start_ns": i * 10 * MS,
                    "end_ns": i * 10 * MS + 8 * MS,
                    "bytes": -1,
                }
            )
    return pd.DataFrame(rows)


def test_runs_of_one_method_are_labelled_at_their_middle():
    frame = events({0: ["predict"] * 4 + ["predict_on_batch"] * 4, 1: ["call"] * 3 + ["predict"] * 2})
    blocks = name_blocks(spans_frame(frame))
    assert [(b["rank"], b["name"], b["spans"]) for b in blocks] == [
        (0, "predict", 4),
        (0, "predict_on_batch", 4),
        (1, "call", 3),
    ]  # 2 spans of predict: too short
    assert blocks[0]["middle_s"] == (0.0 + 0.038) / 2
    labels = [a.text for a in timeline_figure(frame).layout.annotations]
    assert labels == ["predict", "predict_on_batch", "call"]


def test_alternating_steps_and_too_many_runs_get_no_label():
    steps = events({0: ["train_step", "allreduce"] * 20})
    assert name_blocks(spans_frame(steps)) == []
    many = events({0: [f"m{i // 3}" for i in range(3 * (MAX_BLOCK_LABELS + 1))]})
    assert name_blocks(spans_frame(many)) == []
    assert timeline_figure(many).layout.annotations == ()
    assert timeline_figure(events({0: ["a"] * 3}), label_blocks=False).layout.annotations == ()
