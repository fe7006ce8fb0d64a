"""The measured run, reduced to what the projection model needs: per-step phase costs (``StepCosts``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.projection.overlap import GradientLayout
from workbench.events import NS_PER_S

#: Input share of step time from which a run counts as input-bound (TF Profiler's "moderately").
INPUT_BOUND_SHARE = 0.05
#: Steps left out at the start of a run: graph tracing and first allocations.
WARMUP_STEPS = 2
#: Horovod's timeline names each rank's readiness to allreduce a tensor with this span (``formats.horovod_timeline``).
NEGOTIATE_ALLREDUCE = "NEGOTIATE_ALLREDUCE"


# --------------------------------------------------------------------------------------------
# The measured run, reduced to what the model needs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepCosts:
    """Per-rank phase costs of one measured run (seconds), the inputs of ``project``."""

    ranks: int
    #: Per measured (rank, step): compute seconds and input-wait seconds (warm-up excluded).
    compute_s: np.ndarray
    input_s: np.ndarray
    #: Mean seconds per step the measured ranks spent in communication (transfer + waiting).
    communication_s: float
    #: Training steps per rank in the run, and per epoch (== steps when the run has no epochs).
    steps: int
    steps_per_epoch: float
    epochs: int
    #: Seconds of every evaluation on the ranks that evaluated, and which ranks they were.
    evaluation_s: np.ndarray
    evaluating_ranks: tuple[int, ...]
    #: Evaluations per epoch in the measured run (1 = every epoch).
    evaluations_per_epoch: float
    checkpoint_per_epoch_s: float
    #: Gradient bytes allreduced per step (0 when not recorded) and the tensors' sizes when known.
    gradient_bytes: float
    tensor_bytes: tuple[int, ...]
    #: TF threads per rank in the measured run (None: not recorded).
    threads_per_rank: int | None
    #: Cores a rank kept busy while it stepped (mean CPU % / 100 of its memory samples; None: not sampled).
    cores_used: float | None
    #: Samples per rank per step (None: unknown; throughput is then in rank-steps/s).
    batch_per_rank: int | None
    #: Measured wall time, and the part of it the model does not describe (kept as measured).
    wall_s: float
    other_s: float
    #: Mean useful time (compute + input) over max, across ranks (1.0 on one rank).
    load_balance: float
    #: Missing data and what to record, in words.
    notes: tuple[str, ...] = ()
    #: The gradient tensors in backprop order and when each is ready (None: unknown, the allreduce is
    #: then taken to start after the backward pass).
    gradient_layout: GradientLayout | None = None

    @property
    def input_bound(self) -> bool:
        """True when the measured steps waited for input for at least ``INPUT_BOUND_SHARE`` of their time."""
        busy = float(self.compute_s.sum() + self.input_s.sum())
        return busy > 0 and float(self.input_s.sum()) / busy >= INPUT_BOUND_SHARE

    @property
    def step_period_s(self) -> float:
        """Mean measured seconds per step (compute + input + communication)."""
        if not len(self.compute_s):
            return float("nan")
        return float(self.compute_s.mean() + self.input_s.mean()) + self.communication_s

    def on_slower_cores(self, factor: float) -> StepCosts:
        """The same run on cores ``factor`` times slower: its CPU work (compute, evaluation, checkpoints and the
        time outside the model) takes ``factor`` times as long; waits for input and the network do not.
        ``wall_s`` stays the measured one (the model does not read it)."""
        return replace(
            self,
            compute_s=self.compute_s * factor,
            evaluation_s=self.evaluation_s * factor,
            checkpoint_per_epoch_s=self.checkpoint_per_epoch_s * factor,
            other_s=self.other_s * factor,
        )

    def summary(self) -> dict[str, Any]:
        """The costs' scalars (for JSON and reports)."""
        return {
            "ranks": self.ranks,
            "steps": self.steps,
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "compute_s_per_step": float(self.compute_s.mean()) if len(self.compute_s) else None,
            "input_s_per_step": float(self.input_s.mean()) if len(self.input_s) else None,
            "communication_s_per_step": self.communication_s,
            "input_bound": self.input_bound,
            "evaluation_s_each": float(self.evaluation_s.mean()) if len(self.evaluation_s) else 0.0,
            "evaluating_ranks": list(self.evaluating_ranks),
            "evaluations_per_epoch": self.evaluations_per_epoch,
            "checkpoint_per_epoch_s": self.checkpoint_per_epoch_s,
            "gradient_bytes": self.gradient_bytes,
            "threads_per_rank": self.threads_per_rank,
            "cores_used": self.cores_used,
            "batch_per_rank": self.batch_per_rank,
            "wall_s": self.wall_s,
            "other_s": self.other_s,
            "load_balance": self.load_balance,
            "notes": list(self.notes),
        }


def _span_costs(events: pd.DataFrame) -> pd.DataFrame:
    """``rank, phase, name, step, epoch, seconds, bytes`` of every span (-1 where a column was not recorded)."""
    step_col = events["step"] if "step" in events else pd.Series(-1, index=events.index)
    epoch_col = events["epoch"] if "epoch" in events else pd.Series(-1, index=events.index)
    duration = (events["end_ns"] - events["start_ns"]).clip(lower=0).astype("float64") / NS_PER_S
    return pd.DataFrame(
        {
            "rank": events["rank"].astype("int64"),
            "phase": events["phase"].astype(str),
            "name": events["name"].astype(str) if "name" in events else events["phase"].astype(str),
            "step": step_col.astype("int64"),
            "epoch": epoch_col.astype("int64"),
            "seconds": duration,
            "bytes": events["bytes"].astype("int64") if "bytes" in events else -1,
        }
    )


def _measured_steps(
    in_step: pd.DataFrame, warmup_steps: int, notes: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The spans of the steps after warm-up (all steps, noted, when there are no more), and their seconds of
    compute, input and communication per (rank, step)."""
    stepped = in_step[in_step["step"] >= warmup_steps]
    if stepped.empty and len(in_step):
        notes.append(
            f"the run has only {in_step['step'].nunique()} step(s), not more than warmup_steps={warmup_steps}:"
            " every step was used, warm-up included"
        )
        stepped = in_step
    if in_step.empty:
        notes.append(
            "no spans carry a step number: record steps (Recorder.step, the Keras callback)"
            " so that per-step costs can be measured; nothing can be projected"
        )
    per_step = (
        stepped.assign(
            kind=np.select(
                [stepped["phase"] == ev.COMPUTE, stepped["phase"] == ev.INPUT, stepped["phase"] == ev.COMMUNICATION],
                ["compute", "input", "communication"],
                default="other",
            )
        )
        .pivot_table(index=["rank", "step"], columns="kind", values="seconds", aggfunc="sum", fill_value=0.0)
        .reindex(columns=["compute", "input", "communication"], fill_value=0.0)
    )
    return stepped, per_step


def step_costs(
    events: pd.DataFrame,
    meta: Mapping[str, Any] | None = None,
    memory: pd.DataFrame | None = None,
    *,
    warmup_steps: int = WARMUP_STEPS,
    gradient_bytes: float | None = None,
    tensor_bytes: Sequence[int] | None = None,
    batch_per_rank: int | None = None,
) -> StepCosts:
    """Reduce one recorded run to per-step phase costs (``StepCosts``); never raises on a real run.

    Steps are the spans with ``step >= warmup_steps``: compute, input and communication seconds per
    (rank, step). Evaluation and checkpoint spans are counted per epoch. Gradient bytes come from
    the ``bytes`` of the communication spans (the largest per-step sum) unless ``gradient_bytes`` is
    given. ``meta`` (``run.json``) gives threads per rank (``config.cluster.threads``) and the rank
    count; ``memory`` samples (``cpu_percent``) say how many cores a rank really kept busy. What is
    missing becomes a note that says what to record.
    """
    meta = dict(meta or {})
    notes: list[str] = []
    events = events if len(events) else ev.empty_events()
    frame = _span_costs(events)
    declared = meta.get("ranks")
    ranks = int(declared) if isinstance(declared, int) and declared > 0 else max(int(frame["rank"].nunique()), 1)
    wall_s = float((events["end_ns"].max() - events["start_ns"].min()) / NS_PER_S) if len(events) else 0.0

    in_step = frame[frame["step"] >= 0]
    stepped, per_step = _measured_steps(in_step, warmup_steps, notes)
    compute = per_step["compute"].to_numpy(dtype=float)
    wait = per_step["input"].to_numpy(dtype=float)
    communication = float(per_step["communication"].mean()) if len(per_step) else 0.0
    if len(per_step) and compute.sum() <= 0:
        notes.append(
            "no compute spans inside steps: record the training step as a compute span"
            " (Recorder.phase('compute', 'train_step'))"
        )
    steps = int(in_step.groupby("rank")["step"].nunique().max()) if len(in_step) else 0

    epochs_seen = frame.loc[frame["epoch"] >= 0, "epoch"]
    epochs = int(epochs_seen.nunique()) if len(epochs_seen) else 1
    if not len(epochs_seen):
        notes.append("no epochs recorded: the run is one 'epoch' (evaluation and checkpoint per run)")
    steps_per_epoch = steps / epochs if epochs else float(steps)

    evaluation_s, evaluating, evaluations_per_epoch = _evaluations(frame, epochs, epochs_recorded=len(epochs_seen) > 0)
    checkpoint = frame[frame["phase"] == ev.CHECKPOINT]
    checkpoint_per_epoch = float(checkpoint.groupby("rank")["seconds"].sum().max() / epochs) if len(checkpoint) else 0.0

    if gradient_bytes is None:
        gradient_bytes, tensor_bytes = _gradient_bytes(in_step, meta, tensor_bytes, notes)
    threads = _threads(meta)
    if threads is None:
        notes.append(
            "threads per rank not recorded (run.json config.cluster.threads): core sharing between"
            " ranks on one node is not modelled"
        )
    if batch_per_rank is None:
        batch_per_rank = _batch(meta)
    cores_used = _cores_used(events, memory, warmup_steps) if len(stepped) else None
    if cores_used is None and threads is not None:
        notes.append(
            "no CPU samples: how many cores a rank really uses is unknown, so sharing cores between ranks"
            " is modelled with thread_scaling; sample them (Recorder(memory_interval_s=0.5))"
        )

    layout = None
    if isinstance(meta.get("timeline_tensors"), Mapping):
        layout = timeline_layout(events, meta["timeline_tensors"], warmup_steps=warmup_steps)
        if layout is not None:
            notes.append(
                f"Horovod's overlap with backprop played from the recorded timeline: {layout.describe()}"
            )
    useful = (per_step["compute"] + per_step["input"]).groupby(level="rank").sum() if len(per_step) else pd.Series()
    load_balance = float(useful.mean() / useful.max()) if len(useful) > 1 and useful.max() > 0 else 1.0
    if ranks == 1:
        notes.append(
            "measured on 1 rank: load balance is taken as 1 and the collective's cost comes from the network"
            " model alone; waiting at scale comes from the step-to-step variance"
        )
    steps_total = steps * (float(compute.mean() + wait.mean()) + communication) if len(compute) else 0.0
    evaluated = float(evaluation_s.sum()) * (epochs * evaluations_per_epoch / max(len(evaluation_s), 1))
    other = max(wall_s - steps_total - evaluated - checkpoint_per_epoch * epochs, 0.0)
    return StepCosts(
        ranks=ranks,
        compute_s=compute,
        input_s=wait,
        communication_s=communication,
        steps=steps,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        evaluation_s=evaluation_s,
        evaluating_ranks=evaluating,
        evaluations_per_epoch=evaluations_per_epoch,
        checkpoint_per_epoch_s=checkpoint_per_epoch,
        gradient_bytes=float(gradient_bytes),
        tensor_bytes=tuple(tensor_bytes or ()),
        threads_per_rank=threads,
        cores_used=cores_used,
        batch_per_rank=batch_per_rank,
        wall_s=wall_s,
        other_s=other,
        load_balance=load_balance,
        notes=tuple(notes),
        gradient_layout=layout,
    )


def _evaluations(
    frame: pd.DataFrame, epochs: int, *, epochs_recorded: bool
) -> tuple[np.ndarray, tuple[int, ...], float]:
    """Seconds of each evaluation on the busiest evaluating rank, the ranks that evaluated, evaluations per epoch."""
    evaluation = frame[frame["phase"] == ev.EVALUATION]
    evaluating = tuple(sorted(int(r) for r in evaluation["rank"].unique()))
    if not len(evaluation):
        return np.zeros(0), evaluating, 0.0
    key = ["rank", "epoch"] if epochs_recorded else ["rank", "name"]
    per_eval = evaluation.groupby(key)["seconds"].sum()
    busiest = per_eval.groupby(level="rank").sum().idxmax()
    evaluation_s = per_eval.loc[busiest].to_numpy(dtype=float)
    if not epochs_recorded:
        return np.array([evaluation_s.sum()]), evaluating, 1.0 / max(epochs, 1)
    return evaluation_s, evaluating, len(evaluation_s) / epochs


def _gradient_bytes(
    in_step: pd.DataFrame, meta: Mapping[str, Any], tensor_bytes: Sequence[int] | None, notes: list[str]
) -> tuple[float, Sequence[int] | None]:
    """Bytes a step allreduces and the tensors' sizes: from the communication spans (the largest per-step sum), else
    from Horovod's timeline as a profile recorded it; a note saying what to record when neither has them."""
    comm = in_step[(in_step["phase"] == ev.COMMUNICATION) & (in_step["bytes"] > 0)]
    gradient_bytes = float(comm.groupby(["rank", "step"])["bytes"].sum().max()) if len(comm) else 0.0
    if tensor_bytes is None and len(comm):
        first = comm[(comm["rank"] == comm["rank"].min()) & (comm["step"] == comm["step"].min())]
        tensor_bytes = tuple(int(b) for b in first["bytes"]) if len(first) > 1 else None
    if not gradient_bytes and meta.get("timeline_gradient_bytes"):
        # a profiled script: the tensors Horovod's timeline shows allreduced, each once a step
        gradient_bytes = float(meta["timeline_gradient_bytes"])
        tensor_bytes = tensor_bytes or tuple(int(b) for b in meta.get("timeline_tensor_bytes") or ()) or None
    if not gradient_bytes:
        notes.append(
            "no gradient bytes recorded on the communication spans: the allreduce is projected as"
            " free; give the bytes each step allreduces (workbench project --gradient-mb, or"
            " Recorder.phase('communication', 'allreduce', nbytes=...) in the script)"
        )
    return gradient_bytes, tensor_bytes


def _cores_used(events: pd.DataFrame, memory: pd.DataFrame | None, warmup_steps: int) -> float | None:
    """Cores a rank kept busy while it stepped: its CPU samples' mean inside the measured steps (None: unsampled)."""
    if memory is None or not len(memory) or "cpu_percent" not in memory:
        return None
    window = events[events["step"] >= warmup_steps] if "step" in events else events
    inside = memory[(memory["time_ns"] >= window["start_ns"].min()) & (memory["time_ns"] <= window["end_ns"].max())]
    usage = inside["cpu_percent"].astype(float).dropna()
    return float(usage.mean()) / 100 if len(usage) else None


def timeline_layout(
    events: pd.DataFrame, tensors: Mapping[str, int], *, warmup_steps: int = WARMUP_STEPS
) -> GradientLayout | None:
    """The gradients' layout a recorded Horovod timeline shows: when, in each rank's training step, the rank
    was ready to allreduce each tensor (its ``NEGOTIATE_ALLREDUCE`` span's start), as a share of the time from
    the step's start to its last gradient; that time's share of the step is the layout's ``backward_share``.
    Medians over ranks and steps (warm-up left out). None when the timeline shows no tensor inside a step.

    ``tensors``: each tensor's bytes by name (``run.json`` ``timeline_tensors``, from the timeline's shapes).
    """
    if not len(events) or not tensors or "detail" not in events:
        return None
    phase, name = events["phase"].astype(str), events["name"].astype(str)
    ready = events[(phase == ev.IN_FLIGHT) & (name == NEGOTIATE_ALLREDUCE)]
    steps = events[(phase == ev.COMPUTE) & (events["step"] >= warmup_steps)] if "step" in events else events[:0]
    if ready.empty or steps.empty:
        return None
    parts = []
    ready_by_rank = dict(tuple(ready.groupby("rank")))
    for rank, spans in steps.groupby("rank"):
        mine = ready_by_rank.get(rank)
        if mine is None:
            continue
        spans = spans.sort_values("start_ns")
        starts, ends = spans["start_ns"].to_numpy(), spans["end_ns"].to_numpy()
        at = mine["start_ns"].to_numpy()
        index = np.searchsorted(starts, at, side="right") - 1
        inside = (index >= 0) & (at <= ends[np.clip(index, 0, None)])
        parts.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "step": index[inside],
                    "detail": mine["detail"].astype(str).to_numpy()[inside],
                    "offset": (at[inside] - starts[index[inside]]).astype(np.float64),
                    "length": (ends[index[inside]] - starts[index[inside]]).astype(np.float64),
                }
            )
        )
    if not parts:
        return None
    found = pd.concat(parts, ignore_index=True)
    found["last"] = found.groupby(["rank", "step"])["offset"].transform("max")
    found = found[(found["last"] > 0) & (found["length"] > 0)]
    backward = (found["last"] / found["length"]).groupby([found["rank"], found["step"]]).first()
    medians = (found["offset"] / found["last"]).groupby(found["detail"]).median()
    known = [(float(share), detail) for detail, share in medians.items() if tensors.get(detail, 0) > 0]
    if not known or not len(backward):
        return None
    known.sort()
    return GradientLayout(
        tuple(detail for _, detail in known),
        np.array([float(tensors[detail]) for _, detail in known]),
        np.maximum.accumulate(np.array([share for share, _ in known])),
        source=f"Horovod's timeline: when each rank was ready to allreduce each of {len(known)} tensors"
        f" (medians of {len(backward)} rank-steps)",
        backward_share=float(min(max(np.median(backward), 1e-3), 1.0)),
    )


def _threads(meta: Mapping[str, Any]) -> int | None:
    cluster = (meta.get("config") or {}).get("cluster") if isinstance(meta.get("config"), Mapping) else None
    if isinstance(cluster, Mapping):
        for key in ("threads_per_rank", "threads"):
            value = cluster.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


def _batch(meta: Mapping[str, Any]) -> int | None:
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    for source in ((config or {}).get("settings"), (config or {}).get("workload")):
        if isinstance(source, Mapping):
            value = source.get("batch")
            if isinstance(value, int) and value > 0:
                return value
    return None
