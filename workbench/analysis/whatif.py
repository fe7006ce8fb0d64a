"""What-if estimates from one measured run: evaluate less often, or share evaluation over all ranks.

Model (per epoch ``e`` and rank ``r``, from ``lane_table(events, ("epoch",))``):

- ``eval[r, e]``: evaluation seconds; ``comm[r, e]``: communication seconds (transfer + waiting);
  ``work[r, e]``: every other busy phase (compute, input, checkpoint, user phases). Idle is slack.
- Ranks synchronise in every step's allreduce, so an epoch lasts as long as its slowest rank's
  work plus the communication nobody can avoid: ``wall[e] = max_r(work[r, e] + eval[r, e]) +
  min_r(comm[r, e])``. The rank that waits least in communication arrives last, so its
  communication time is transfer only; everything the other ranks spend beyond it (waiting for
  rank 0 to finish evaluating) is slack that disappears when the evaluation does.
- A scenario changes only ``eval[r, e]``; the estimate is the measured wall time plus the modelled
  difference, ``estimated = measured + model(scenario) - model(measured)``, so whatever the model
  leaves out (start-up, time outside epochs) stays as measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import lane_table
from workbench.events import NS_PER_S

COMMUNICATION_PHASES = (ev.COMMUNICATION, ev.COMMUNICATION_WAIT)
SLACK_PHASES = (ev.IDLE,)


@dataclass(frozen=True)
class WhatIf:
    """One scenario's estimate. ``estimated_speedup = measured_s / estimated_s``."""

    scenario: str
    measured_s: float
    estimated_s: float
    estimated_speedup: float
    seconds_saved: float
    evaluations_measured: int
    evaluations_estimated: int
    #: The model's wall time for the measured run; far from measured_s means the model fits poorly.
    modelled_measured_s: float
    assumptions: str

    def to_frame(self) -> pd.DataFrame:
        """The estimate as a one-row DataFrame (for tables and concatenating scenarios)."""
        return pd.DataFrame([asdict(self)])


def estimate_eval_interval(events: pd.DataFrame, k: int, *, current_interval: int = 1) -> WhatIf:
    """Wall time if evaluation ran every ``k`` epochs instead of as measured.

    Epochs evaluated at interval ``k``: every ``k``-th epoch and always the last one, i.e.
    ``ceil(epochs / k)`` evaluations. Each evaluation costs, on each rank, that rank's mean measured
    evaluation time per evaluation. ``current_interval`` is the interval the measured run used; it
    only serves to check the evaluations found in the events (a mismatch is noted in
    ``assumptions``). A run without evaluation spans gives ``estimated_s = measured_s``.
    """
    if int(k) != k or k < 1 or int(current_interval) != current_interval or current_interval < 1:
        raise ValueError(
            f"k={k} and current_interval={current_interval} must be whole numbers of epochs >= 1"
        )
    model = _EpochModel.from_events(events)
    epochs = model.epochs
    evaluated = np.array([(i + 1) % k == 0 or i == len(epochs) - 1 for i in range(len(epochs))])
    per_evaluation = model.eval_per_evaluation()
    scenario_eval = np.where(evaluated[None, :], per_evaluation[:, None], 0.0)
    notes = [
        f"evaluation every {k} epoch(s) plus the last: {int(evaluated.sum())} of {len(epochs)} epochs",
        "each evaluation costs each rank its mean measured evaluation time",
    ]
    expected = -(-len(epochs) // int(current_interval))
    if model.evaluations and model.evaluations != expected:
        notes.append(
            f"note: current_interval={current_interval} implies {expected} evaluations,"
            f" events hold {model.evaluations}"
        )
    return model.estimate(
        f"evaluate every {k} epochs", scenario_eval, int(evaluated.sum()) if model.evaluations else 0, notes
    )


def estimate_sharded_evaluation(events: pd.DataFrame) -> WhatIf:
    """Wall time if every evaluation were split evenly over all ranks (``tf.data`` sharding).

    Each evaluated epoch's evaluation work (summed over ranks) is divided by the number of ranks and
    done on every rank; reducing the metrics across ranks is assumed negligible.
    """
    model = _EpochModel.from_events(events)
    shared = model.eval_s.sum(axis=0) / model.eval_s.shape[0]
    scenario_eval = np.broadcast_to(shared[None, :], model.eval_s.shape)
    notes = [
        f"evaluation work split evenly over {model.eval_s.shape[0]} ranks in the epochs that evaluated",
        "metric reduction across ranks assumed negligible",
    ]
    return model.estimate("shard evaluation over all ranks", scenario_eval, model.evaluations, notes)


@dataclass(frozen=True)
class _EpochModel:
    """Per (rank, epoch) seconds the what-if model needs; arrays are ranks x epochs."""

    epochs: np.ndarray
    work_s: np.ndarray
    eval_s: np.ndarray
    comm_s: np.ndarray
    measured_s: float

    @classmethod
    def from_events(cls, events: pd.DataFrame) -> _EpochModel:
        table = lane_table(events, ("epoch",))
        if table.empty:
            raise ValueError("no events: a what-if needs one measured run")
        runs = table["run_id"].unique()
        if len(runs) > 1:
            raise ValueError(f"events hold {len(runs)} runs: select one run (events[events.run_id == ...])")
        measured_ns = int(events["end_ns"].max()) - int(events["start_ns"].min())
        if measured_ns <= 0:
            raise ValueError("the run has zero wall time: its spans are all zero-length")
        table = table[table["epoch"] >= 0]
        if table.empty:
            raise ValueError("no span carries an epoch (all -1): record epochs to model per-epoch evaluation")
        kind = np.select(
            [
                table["phase"] == ev.EVALUATION,
                table["phase"].isin(COMMUNICATION_PHASES),
                table["phase"].isin(SLACK_PHASES),
            ],
            ["eval", "comm", "slack"],
            default="work",
        )
        wide = (
            table.assign(kind=kind)
            .pivot_table(index=["rank", "epoch"], columns="kind", values="ns", aggfunc="sum", fill_value=0.0)
            .reindex(columns=["work", "eval", "comm"], fill_value=0.0)
        )
        epochs = np.sort(table["epoch"].unique())
        ranks = np.sort(table["rank"].unique())
        full = pd.MultiIndex.from_product([ranks, epochs], names=["rank", "epoch"])
        wide = wide.reindex(full, fill_value=0.0) / NS_PER_S
        shape = (len(ranks), len(epochs))
        return cls(
            epochs=epochs,
            work_s=wide["work"].to_numpy().reshape(shape),
            eval_s=wide["eval"].to_numpy().reshape(shape),
            comm_s=wide["comm"].to_numpy().reshape(shape),
            measured_s=measured_ns / NS_PER_S,
        )

    @property
    def evaluations(self) -> int:
        """Epochs in which some rank evaluated."""
        return int((self.eval_s.max(axis=0) > 0).sum())

    def eval_per_evaluation(self) -> np.ndarray:
        """Each rank's mean evaluation seconds per evaluation (0 when the run never evaluates)."""
        return (
            self.eval_s.sum(axis=1) / self.evaluations if self.evaluations else np.zeros(self.eval_s.shape[0])
        )

    def wall_s(self, eval_s: np.ndarray) -> float:
        """Modelled wall time: sum over epochs of the slowest rank plus the unavoidable communication."""
        return float(((self.work_s + eval_s).max(axis=0) + self.comm_s.min(axis=0)).sum())

    def estimate(self, scenario: str, eval_s: np.ndarray, evaluations: int, notes: list[str]) -> WhatIf:
        modelled = self.wall_s(self.eval_s)
        estimated = self.measured_s + self.wall_s(eval_s) - modelled
        if estimated <= 0:
            raise ValueError(
                f"{scenario}: the model predicts no time left; the run's epochs do not fit the model"
            )
        base = [
            "epoch wall = slowest rank's work + evaluation, plus the least communication of any rank",
            "waiting and idle time is slack that disappears with the evaluation",
            "estimate = measured + modelled change",
        ]
        if not self.evaluations:
            base.append("the run has no evaluation spans: nothing changes")
        return WhatIf(
            scenario=scenario,
            measured_s=self.measured_s,
            estimated_s=estimated,
            estimated_speedup=self.measured_s / estimated,
            seconds_saved=self.measured_s - estimated,
            evaluations_measured=self.evaluations,
            evaluations_estimated=evaluations,
            modelled_measured_s=modelled,
            assumptions="; ".join(base + notes),
        )
