"""What a script's Keras calls cost: per method, the calls, their time, and how much of it ran the model.

``workbench profile`` records every top-level Keras call (``keras.predict``, ``keras.train_on_batch``
...) as a span around the whole call, with the ``tf.function`` runs inside it as spans of their
own (see ``workbench.autorecord``). A call's time minus its model runs is Keras's own work per
call: ``predict`` builds a data pipeline, a data handler and callbacks every time, which for one
batch costs far more than the model (the published study's S-GAN called it every iteration). The finding
names the call, what it costs per call and in all, and what to call instead.

Memory grown per call is ``call_memory_findings``: a fit of resident memory against each Keras
method's call number (``analysis.memory.memory_growth``), with its interval, or the reason there is
no verdict (too few calls, growth still settling).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.memory import MIN_SAMPLES_FOR_VERDICT, memory_growth
from workbench.events import KERAS_PREFIX

KERAS_CALL_COLUMNS: tuple[str, ...] = (
    "rank",
    "method",
    "model",
    "calls",
    "seconds",
    "model_s",
    "own_s",
    "ms_per_call",
    "model_ms_per_call",
)
#: Phases of the model's runs inside a Keras call.
_MODEL_PHASES = (ev.COMPUTE, ev.EVALUATION)

#: What each method does on every call besides running the model, and what to call instead.
KERAS_ADVICE: dict[str, str] = {
    "predict": (
        "predict builds a data pipeline (a tf.data dataset and its iterator), a data handler and callbacks on"
        " every call, for a single batch too: for a batch already in memory call predict_on_batch(x) or"
        " model(x, training=False)"
    ),
    "evaluate": (
        "evaluate builds its data pipeline and callbacks on every call: for one batch call test_on_batch,"
        " or evaluate less often"
    ),
    "fit": (
        "fit builds its data pipeline and callbacks on every call: give one fit all the data (epochs=N),"
        " or call train_on_batch for one batch"
    ),
    "train_on_batch": (
        "each call wraps its batch in a one-batch dataset and returns the loss to NumPy: feed a tf.data"
        " pipeline to fit, or run several batches in a tf.function of your own"
    ),
    "test_on_batch": (
        "each call wraps its batch in a one-batch dataset and returns the loss to NumPy: evaluate a"
        " tf.data pipeline in one evaluate call"
    ),
    "predict_on_batch": (
        "each call wraps its batch in a one-batch dataset and returns the result as NumPy: call"
        " model(x, training=False) (or a tf.function of it) to keep the result a tensor"
    ),
}
#: The call to use instead, where the run may have measured it (``keras_call_findings``).
KERAS_ALTERNATIVE: dict[str, str] = {"predict": "predict_on_batch", "evaluate": "test_on_batch"}
#: A Keras call is named when its own work is at least this share of its time (and matters for the wall).
OWN_SHARE = 0.5


def keras_call_table(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank, Keras method and model: calls, seconds in them, seconds running the model, the rest.

    ``seconds`` sums the ``keras.<method>`` spans; ``model_s`` the compute and evaluation spans
    nested in them (the ``tf.function`` runs); ``own_s = seconds - model_s``, Keras's own work. An
    eager ``model(x)`` (``call``) is the model running as a whole: ``own_s`` 0. Columns
    ``KERAS_CALL_COLUMNS``; no Keras call recorded: an empty frame with them.
    """
    empty = pd.DataFrame({c: pd.Series(dtype="float64") for c in KERAS_CALL_COLUMNS})
    if events is None or events.empty or "name" not in events:
        return empty
    outer_mask = ev.names_starting(events["name"], KERAS_PREFIX)
    if not outer_mask.any():
        return empty
    inner_mask = events["phase"].isin(_MODEL_PHASES).to_numpy() & ~outer_mask
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    outer_rows = np.flatnonzero(outer_mask)  # strings only for the Keras calls' rows, not millions of events
    methods = np.full(len(events), "", dtype=object)
    methods[outer_rows] = [str(n)[len(KERAS_PREFIX) :] for n in events["name"].to_numpy()[outer_rows]]
    models = np.full(len(events), "", dtype=object)
    if "detail" in events:
        models[outer_rows] = [str(d) for d in events["detail"].to_numpy()[outer_rows]]
    rows = []
    for rank, rank_rows in events.groupby("rank", sort=True).indices.items():
        outer = rank_rows[outer_mask[rank_rows]]
        if len(outer) == 0:
            continue
        inner = rank_rows[inner_mask[rank_rows]]
        order = inner[np.argsort(starts[inner], kind="stable")]
        inner_start = starts[order]
        cumulative = np.concatenate([[0], np.cumsum(ends[order] - inner_start)]).astype(np.float64)
        low = np.searchsorted(inner_start, starts[outer], side="left")
        high = np.searchsorted(inner_start, ends[outer], side="left")
        table = pd.DataFrame(
            {
                "method": methods[outer],
                "model": models[outer],
                "seconds": (ends[outer] - starts[outer]) / ev.NS_PER_S,
                "model_s": (cumulative[high] - cumulative[low]) / ev.NS_PER_S,
            }
        )
        eager = (table["method"] == "call").to_numpy()
        table.loc[eager, "model_s"] = table.loc[eager, "seconds"]
        summed = table.groupby(["method", "model"], sort=True).agg(
            calls=("seconds", "size"), seconds=("seconds", "sum"), model_s=("model_s", "sum")
        )
        summed.insert(0, "rank", int(rank))
        rows.append(summed.reset_index())
    if not rows:
        return empty
    result = pd.concat(rows, ignore_index=True)
    result["model_s"] = np.minimum(result["model_s"], result["seconds"])
    result["own_s"] = result["seconds"] - result["model_s"]
    result["ms_per_call"] = 1e3 * result["seconds"] / result["calls"]
    result["model_ms_per_call"] = 1e3 * result["model_s"] / result["calls"]
    return result[list(KERAS_CALL_COLUMNS)].astype({"rank": "int64", "calls": "int64"})


def keras_call_findings(
    events: pd.DataFrame,
    wall_s: float | None,
    *,
    min_fraction: float = 0.02,
    table: pd.DataFrame | None = None,
) -> list[dict]:
    """A ``keras_call`` finding per Keras method and model whose own work costs at least ``min_fraction`` of the wall.

    ``seconds_lost``: the mean over ranks of the method's own seconds (``keras_call_table``), less
    what the alternative (``KERAS_ALTERNATIVE``) costs of its own per call when the run measured
    it; else all of it (the alternative's own work per call is then not known: "up to").
    ``table``: ``keras_call_table(events)`` when already computed.
    """
    table = keras_call_table(events) if table is None else table
    if table.empty or not wall_s or wall_s <= 0:
        return []
    per_method = table.groupby(["method", "model"], sort=True).agg(
        ranks=("rank", lambda ranks: ev.rank_list(sorted(int(r) for r in ranks))),
        calls=("calls", "mean"),
        seconds=("seconds", "mean"),
        model_s=("model_s", "mean"),
        own_s=("own_s", "mean"),
    )
    own_per_call = (table.groupby("method")["own_s"].sum() / table.groupby("method")["calls"].sum()).to_dict()
    found = []
    for (method, model), row in per_method.iterrows():
        if method not in KERAS_ADVICE or row["own_s"] < OWN_SHARE * row["seconds"]:
            continue
        alternative = KERAS_ALTERNATIVE.get(method)
        alternative_own = own_per_call.get(alternative) if alternative else None
        if alternative_own is not None:
            lost = max(0.0, row["own_s"] - row["calls"] * alternative_own)
            saving = (
                f" In this run {alternative} spends {1e3 * alternative_own:.2g} ms per call of its own: about"
                f" {lost:.3g} s per rank saved."
            )
        else:
            lost = float(row["own_s"])
            saving = (
                f" Up to {lost:.3g} s per rank saved (what the alternative still spends per call was not"
                " measured here)."
            )
        if lost / wall_s < min_fraction:
            continue
        per_call = 1e3 * row["seconds"] / row["calls"]
        model_per_call = 1e3 * row["model_s"] / row["calls"]
        of_model = f" of {model}" if model else ""
        text = (
            f"Keras {method}{of_model}: {row['calls']:.0f} calls take {row['seconds']:.3g} s per rank"
            f" ({row['seconds'] / wall_s:.0%} of wall), {per_call:.3g} ms per call, of which {model_per_call:.2g} ms"
            f" runs the model; the other {per_call - model_per_call:.3g} ms per call is {method}'s own work."
            f" {KERAS_ADVICE[method][0].upper()}{KERAS_ADVICE[method][1:]}.{saving}"
        )
        if method == "predict":
            text += (
                " The published study's S-GAN made the same change (predict to predict_on_batch) for the memory predict"
                " did not release (TensorFlow issue 33009)."
            )
        found.append(
            {
                "kind": "keras_call",
                "text": text,
                "seconds_lost": float(lost),
                "fraction_of_wall": float(lost) / wall_s,
                "ranks": row["ranks"],
            }
        )
    return found


#: Growth per call above which (the whole interval above it) memory grows with the calls: 10 kB per call.
LEAK_THRESHOLD_MB = 0.01
#: Calls left out of the fit as warm-up: this share of them, at least ``MIN_WARMUP_CALLS``.
WARMUP_SHARE = 0.1
MIN_WARMUP_CALLS = 5
#: Among methods called as often, the one the finding is worded for: known to keep memory first.
SUSPECTS: tuple[str, ...] = (
    "predict",
    "evaluate",
    "fit",
    "predict_on_batch",
    "call",
    "test_on_batch",
    "train_on_batch",
)


def call_memory_findings(memory: pd.DataFrame | None, hosts: Mapping[int, str] | None = None) -> list[dict]:
    """A ``memory_growth`` finding: resident memory per call of the script's most called Keras method.

    The method is the one with the most calls (on a tie, the first of ``SUSPECTS``); its samples are
    taken right after each call. The first ``WARMUP_SHARE`` of its calls (at least
    ``MIN_WARMUP_CALLS``) are warm-up (graphs, caches, the allocator's arenas) and left out; the
    rest are fitted per rank, the rank whose interval lies highest reported, with a Newey–West
    interval (``memory_growth``). The verdict: grows (the interval above ``LEAK_THRESHOLD_MB``),
    does not grow, cannot tell yet, too few calls, or still settling (growth in the first half of
    the calls but not the second). Methods called as often interleave: growth per call of one is
    growth per call of the others, and the text says so. No Keras call sampled: no finding.
    """
    if memory is None or memory.empty or "label" not in memory:
        return []
    labels = memory["label"].astype(str)
    sampled = memory[labels.str.startswith(KERAS_PREFIX) & (memory["iteration"] >= 0) & (memory["rss_bytes"] >= 0)]
    if sampled.empty:
        return []
    calls = sampled.groupby("label")["iteration"].max() + 1
    suspicion = {KERAS_PREFIX + method: order for order, method in enumerate(SUSPECTS)}
    label = str(max(calls.index, key=lambda name: (calls[name], -suspicion.get(name, len(SUSPECTS)))))
    method = label[len(KERAS_PREFIX) :]
    n_calls = int(calls[label])
    together = sorted(
        other[len(KERAS_PREFIX) :]
        for other, count in calls.items()
        if other != label and abs(count - n_calls) <= 0.1 * n_calls
    )
    warmup = max(MIN_WARMUP_CALLS, int(WARMUP_SHARE * n_calls))
    ranks = sorted(int(r) for r in sampled["rank"].unique())
    ranks_text = ev.rank_list(ranks)
    need = warmup + MIN_SAMPLES_FOR_VERDICT
    if n_calls < need:
        return [
            _memory_note(
                f"memory per call: {n_calls} call{'' if n_calls == 1 else 's'} of Keras {method}, too few for a"
                f" verdict (the first {warmup} are"
                f" warm-up; {need} or more are needed): profile more iterations",
                ranks_text,
            )
        ]
    mine = sampled[sampled["label"] == label]
    fit = memory_growth(mine, by=("rank",), warmup=warmup, leak_threshold_mb=LEAK_THRESHOLD_MB)
    worst = fit.sort_values("ci_low", kind="stable").iloc[-1]
    rank = int(worst["rank"])
    start = mine[mine["rank"] == rank].sort_values("iteration")["rss_bytes"].to_numpy() / ev.BYTES_PER_MB
    interval = (
        f"{worst['slope_mb_per_x']:.2g} MB per {method} call on {ev.ranks_with_hosts([rank], hosts or {})} (95 %"
        f" interval {_apart(worst['ci_low'], worst['ci_high'])} MB; {int(worst['n'])} calls after {warmup} warm-up)"
    )
    also = (
        f" {', '.join(together)} {'is' if len(together) == 1 else 'are'} called as often ({n_calls} times), so this is"
        " also growth per call of "
        + ("it" if len(together) == 1 else "them")
        + ": the run cannot tell which one grows it; profile again with one of them changed"
        if together
        else ""
    )
    verdict = str(worst["verdict"])
    if verdict == "leak":
        halves = memory_growth(
            mine[mine["rank"] == rank],
            by=("rank",),
            warmup=warmup + (n_calls - warmup) // 2,
            leak_threshold_mb=LEAK_THRESHOLD_MB,
            min_samples=3,
        ).iloc[0]
        if halves["verdict"] == "no leak":
            text = (
                f"memory still settling: it grew {interval}, but not in the second half of the calls"
                f" ({halves['slope_mb_per_x']:.2g} MB per call): warm-up (caches, the allocator), not yet a leak;"
                " profile more iterations for a verdict"
            )
        else:
            total = worst["slope_mb_per_x"] * n_calls
            text = f"memory grows with the calls: {interval}, about {total:.3g} MB over the run." + (
                f"{also}." if also else ""
            )
            if method == "predict":
                text += (
                    " Keras predict called in a loop is known to keep memory (TensorFlow issue 33009): the"
                    " published study's"
                    " fix was predict_on_batch"
                )
    elif verdict == "no leak":
        text = (
            f"memory does not grow per call: {interval}, below {LEAK_THRESHOLD_MB} MB per call; it went from"
            f" {start[0]:.3g} MB at the first call to {start[warmup - 1]:.3g} MB by the end of warm-up"
        )
    elif verdict == "inconclusive":
        text = (
            f"memory per call: cannot tell yet, {interval}, which includes {LEAK_THRESHOLD_MB} MB per call:"
            " profile more iterations"
        )
    else:
        text = f"memory per call: no verdict on {ev.ranks_with_hosts([rank], hosts or {})}: {verdict}"
    return [_memory_note(text, ranks_text, kind="memory_growth")]


def _apart(low: float, high: float) -> str:
    """``"0.106 to 0.111"``: an interval with the fewest significant figures (2 to 5) that tell its ends apart."""
    for digits in range(2, 6):
        low_text, high_text = f"{low:.{digits}g}", f"{high:.{digits}g}"
        if low_text != high_text:
            break
    return f"{low_text} to {high_text}"


def _memory_note(text: str, ranks: str, kind: str = "memory_growth") -> dict:
    """A finding about memory: not wall time, so its ``seconds_lost`` is NaN."""
    return {"kind": kind, "text": text, "seconds_lost": np.nan, "fraction_of_wall": np.nan, "ranks": ranks}
