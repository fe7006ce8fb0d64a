"""One experiment runner for every case study: plan a sweep, run it resumably, rebuild it from the store.

A case study declares *what* to measure as a ``Case``: its presets, the points of its sweep (rank
count × parameters, each with a stable key such as ``n2/backend=horovod/k=30``), the function every
rank runs, how one recorded run becomes a row, and the tables, summary, prose and report sections
made from the rows. ``Experiment`` does the rest the same way for every case:

- plans the points and starts one ``Cluster`` per rank count (or reuses the caller's);
- records each point as one run in the store, with the case, preset and point key in ``run.json``;
- keeps a sweep manifest (``OUT/sweep.json``) updated atomically after every point, so a sweep
  killed half way goes on with ``resume=True`` (``workbench run CASE --resume``) without running a
  finished point again;
- rebuilds the whole result from the store without training (``Experiment.result()``);
- offers the live path: ``start(cluster, point)`` returns at once with the run directory for the
  ``Dashboard`` and an awaitable handle.

``--ranks N`` means one thing for every case: the most ranks any point of the sweep uses. A scaling
case sweeps the rank counts up to N; a case measured at one size runs at N.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from workbench.config import ClusterConfig, physical_cores
from workbench.faults import Failure, RankFailedError
from workbench.store import (
    NotARunError,
    RunData,
    RunTail,
    compact,
    create_run,
    read_run_meta,
    update_run_meta,
    write_json_atomic,
)

MANIFEST = "sweep.json"
#: Where each case lives; ``workbench run --list`` and ``Experiment("name")`` read this.
CASE_MODULES: dict[str, str] = {
    "eval-frequency": "workbench.cases.eval_frequency",
    "predict-leak": "workbench.cases.predict_leak",
    "input-pipeline": "workbench.cases.input_pipeline",
    "pop-scaling": "workbench.cases.pop_scaling",
    "ps-vs-allreduce": "workbench.cases.ps_vs_allreduce",
    "cpu-tuning": "workbench.cases.cpu_tuning",
}


class RunFolderError(OSError):
    """The run folder cannot be written (a full disk): one line naming it and what to do."""


class ExperimentError(RuntimeError):
    """A sweep that cannot go on: a failed point, a manifest from another experiment."""


# -- points ------------------------------------------------------------------------------------------
def format_value(value: Any) -> str:
    """A parameter value as it appears in a point key: ``30``, ``horovod``, ``1,4``, ``0.5``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (tuple, list)):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep: a rank count and the case's parameters, in the case's order."""

    ranks: int
    params: tuple[tuple[str, Any], ...] = ()
    #: Short names used in the key only (``eval_interval`` -> ``k``); not part of the identity.
    short_names: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def of(
        cls, ranks: int, params: Mapping[str, Any] | None = None, short_names: Mapping[str, str] | None = None
    ) -> Point:
        return cls(int(ranks), tuple((params or {}).items()), tuple((short_names or {}).items()))

    @property
    def key(self) -> str:
        """Stable identity of the point across sessions: ``n2/backend=horovod/k=30``."""
        short = dict(self.short_names)
        return "/".join([f"n{self.ranks}", *(f"{short.get(k, k)}={format_value(v)}" for k, v in self.params)])

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def __getitem__(self, name: str) -> Any:
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(f"point {self.key} has no parameter {name!r}")

    def __str__(self) -> str:
        return self.key


# -- the case contract ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaseOption:
    """A command-line option of one case (``--backend both``), setting one field of its settings."""

    flag: str
    field: str
    help: str
    parse: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10, which has ``__notes__`` but not the method."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]  # type: ignore[attr-defined]


def parse_yes_no(text: str) -> bool:
    """A case option's yes or no (``--sharded yes``)."""
    answer = text.strip().lower()
    if answer in ("yes", "true", "1", "on"):
        return True
    if answer in ("no", "false", "0", "off"):
        return False
    raise ValueError(f"{text!r}: answer yes or no")


def parse_counts(text: str, *, at_least: int = 1, example: str = "1,4,16") -> tuple[int, ...]:
    """A case option's list of whole numbers >= 1 (``--threads 1,4``), at least ``at_least`` of them."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{text!r}: give whole numbers separated by commas, e.g. {example}") from None
    if len(values) < at_least or min(values) < 1:
        raise ValueError(f"{text!r}: give at least {at_least} whole number(s) >= 1, e.g. {example}")
    return values


class Case:
    """What a case study measures; subclasses fill in the class attributes and the methods.

    ``presets`` maps a preset name to a frozen dataclass of the case's settings (``ci``: seconds, for
    the tests; ``reduced``: minutes on this machine; ``full``: the published study's shape). ``workload`` is the
    function every rank runs: ``workload(run_path, **workload_kwargs(settings, point)) -> dict``.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    about: ClassVar[str]  # one line for ``workbench run --list``
    presets: ClassVar[Mapping[str, Any]]
    default_preset: ClassVar[str] = "reduced"
    options: ClassVar[tuple[CaseOption, ...]] = ()
    workload: ClassVar[Callable[..., dict[str, Any]]]
    #: A point that fails is a result here (a thread setting that crashes, as the published study's white heatmap
    #: cells): the sweep goes on with a fresh cluster, and the failure is in the result's ``failed`` table.
    failures_are_results: ClassVar[bool] = False
    #: Its points place several ranks on a node: a sweep over a miniature cluster's nodes gives it the
    #: node counts as its ``nodes`` setting, and each point's ``nodes`` parameter is where it runs.
    places_ranks_per_node: ClassVar[bool] = False

    # -- planning
    def projection_base(
        self, runs: pd.DataFrame, row: Any, base: pd.Series
    ) -> tuple[pd.Series | None, Callable[[Any], dict[str, Any]]]:
        """The run (a row of a sweep's ``runs`` table) that ``bench projection`` builds the model of ``row`` from,
        and the extra ``project`` keyword arguments that run needs once loaded (``None``: the row cannot be
        predicted). By default ``base``, the same parameters on the fewest ranks, and nothing more."""
        return base, lambda run: {}

    def projection_inputs(self, run: Any, row: Any) -> tuple[dict[str, Any], float, str]:
        """What the scaling projection needs beyond ``run``'s events (its fewest-ranks run) to predict this case's
        sweep ``row`` (``bench projection`` checks the model on the case's saved sweeps): keyword arguments
        (``step_costs``: ``projection.step_costs``' inputs; the rest ``projection.project``'s), the row's measured
        value, and its column (``step_s`` or ``wall_s``). By default: the run's own costs and its wall time."""
        return {"step_costs": {}}, float(row.wall_s), "wall_s"

    def settings(self, preset: str, overrides: Mapping[str, Any] | None = None) -> Any:
        """The preset's settings with ``overrides`` applied; one clear error for unknown names."""
        if preset not in self.presets:
            raise ValueError(f"unknown preset {preset!r} for case {self.name}: choose one of {', '.join(self.presets)}")
        base = self.presets[preset]
        known = {f.name for f in dataclasses.fields(base)}
        unknown = sorted(set(overrides or {}) - known)
        if unknown:
            raise ValueError(f"case {self.name} has no setting {unknown[0]!r}: use one of {', '.join(sorted(known))}")
        return dataclasses.replace(base, **dict(overrides or {}))

    def points(self, settings: Any, max_ranks: int) -> list[Point]:
        raise NotImplementedError

    def workload_kwargs(self, settings: Any, point: Point) -> dict[str, Any]:
        raise NotImplementedError

    def cluster_overrides(self, settings: Any, point: Point) -> dict[str, Any]:
        """``ClusterConfig`` fields a point needs set when its ranks start (e.g. Horovod's fusion buffer,
        threads per rank): such points get a cluster of their own. None by default."""
        return {}

    # -- results
    def row(self, run: RunData, point: Point, settings: Any) -> dict[str, Any]:
        """One row of the result table from one recorded run (``run.meta["rank_results"]`` included)."""
        raise NotImplementedError

    def tables(self, rows: pd.DataFrame, runs: Mapping[str, RunData], settings: Any) -> dict[str, pd.DataFrame]:
        """More tables from the rows and the runs (keyed by point key); each is saved as Parquet."""
        return {}

    def summary(self, rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame], settings: Any) -> dict[str, Any]:
        raise NotImplementedError

    def text(self, summary: Mapping[str, Any]) -> str:
        """The plain-language result, as Markdown."""
        raise NotImplementedError

    def report_sections(self, result: ExperimentResult) -> list[tuple[str, Any]]:
        return [("Summary", result.text()), ("Runs", result.rows)]

    def headline(self, result: ExperimentResult) -> pd.DataFrame:
        """The table ``workbench run`` prints; all rows by default."""
        return result.rows

    def healthy(self, summary: Mapping[str, Any]) -> bool:
        """False when the result cannot be trusted (``workbench run`` then exits 1)."""
        return True

    def stall_after_s(self, point: Point) -> float | None:
        """Silence (s) after which a rank of this point is reported stalled; None where the engines are
        idle by design (the point's work runs in processes the engines start, as a PS job does)."""
        return 30.0

    # -- progress inside a point (optional)
    def progress_units(self, settings: Any, point: Point) -> tuple[int, str] | None:
        """How many units of work a point has and their name, when the ranks' records show them."""
        return None

    def units_done(self, events: pd.DataFrame, memory: pd.DataFrame) -> int:
        """Units of work in newly recorded rows (see ``progress_units``)."""
        return 0


#: Where a package outside this one declares its cases: an entry point ``name = "module"`` (its ``CASE``) or
#: ``name = "module:attribute"`` in this group (``[project.entry-points."workbench.cases"]`` of its pyproject).
ENTRY_POINT_GROUP = "workbench.cases"
#: Cases registered in this process (``register_case``), by name: the case, or the path of the module whose
#: ``CASE`` it is (imported when first asked for).
_REGISTERED: dict[str, Case | str] = {}


def register_case(case: Case | type[Case] | str, name: str | None = None) -> str:
    """Make a case from outside the package known to ``workbench run``, ``Experiment(name)``, the projection's
    check and the docs' renderer: a ``Case`` (class or instance), or the path of a module whose ``CASE`` it is
    (``name`` required then). Returns its name. Packages can declare theirs as entry points instead
    (``ENTRY_POINT_GROUP``), found without an import of their own."""
    if isinstance(case, str):
        if not name:
            raise ValueError(f"register_case({case!r}): give the case's name with a module path")
        _REGISTERED[name] = case
        return name
    instance = case() if isinstance(case, type) else case
    if not isinstance(instance, Case):
        raise ValueError(f"register_case: {case!r} is not a workbench.experiment.Case")
    _REGISTERED[name or instance.name] = instance
    return name or instance.name


def unregister_case(name: str) -> None:
    """Forget a case ``register_case`` made known in this process (a plugin unloaded, a test's own case)."""
    _REGISTERED.pop(name, None)


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def case_names() -> list[str]:
    """Every case: the package's, then those registered in this process, then other packages' entry points."""
    names = list(CASE_MODULES)
    names += [name for name in _REGISTERED if name not in names]
    names += [name for name in _entry_points() if name not in names]
    return names


def get_case(name: str | Case) -> Case:
    """The case registered under ``name`` (or ``name`` itself when it already is a ``Case``)."""
    if isinstance(name, Case):
        return name
    registered = _REGISTERED.get(name)
    if isinstance(registered, Case):
        return registered
    if isinstance(registered, str):
        return importlib.import_module(registered).CASE
    if name in CASE_MODULES:
        return importlib.import_module(CASE_MODULES[name]).CASE
    points = _entry_points()
    if name in points:
        loaded = points[name].load()
        case = getattr(loaded, "CASE", loaded)
        return case() if isinstance(case, type) else case
    raise ValueError(f"unknown case {name!r}: choose one of {', '.join(case_names())}")


# -- results -------------------------------------------------------------------------------------------
@dataclass
class ExperimentResult:
    """Everything a sweep produced, rebuilt from the store: rows, tables, summary, run paths."""

    case: Case
    preset: str
    settings: Any
    out: Path
    rows: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    summary: dict[str, Any]
    runs: dict[str, Path]
    report_path: Path | None = None

    def text(self) -> str:
        """The case's plain-language summary (Markdown)."""
        return self.case.text(self.summary)

    def run(self, key: str) -> RunData:
        """The recorded run of one point, loaded from the store."""
        if key not in self.runs:
            raise KeyError(f"no finished point {key!r}: finished points are {', '.join(self.runs)}")
        return RunData.load(self.runs[key])

    def _repr_markdown_(self) -> str:
        return self.text()


# -- one point in flight ------------------------------------------------------------------------------------
@dataclass
class PointRun:
    """A point started on a cluster: its run directory (for the ``Dashboard``) and its pending result.

    ``wait()`` blocks, ``await point_run`` does not block the kernel; both finish the point: the
    run's status and per-rank results go into ``run.json`` and the point into the sweep manifest.
    """

    experiment: Experiment
    point: Point
    run_path: Path
    pending: Any
    started: float = field(default_factory=time.time)
    results: list[dict[str, Any]] | None = None
    #: the cluster's watch on this run (``Cluster.watch``): a dead rank, a stall, the timeout
    watch: Any = None

    def done(self) -> bool:
        return bool(self.pending.ready())

    def abort(self) -> None:
        """Stop the ranks' task if it still runs; harmless once it has ended."""
        if self.pending.ready():
            return
        with contextlib.suppress(Exception):
            self.pending.abort()

    def wait(self, on_rows: Callable[[pd.DataFrame, pd.DataFrame], None] | None = None) -> list[dict[str, Any]]:
        """Block until the ranks finish; ``on_rows(events, memory)`` sees new rows while they run."""
        if self.results is not None:
            return self.results
        tail = RunTail(self.run_path) if on_rows is not None else None
        try:
            while not self.pending.ready():
                if self.watch is not None:
                    self.watch.check()  # RankFailedError naming the rank: died, or timed out
                self.pending.wait(0.5)
                if tail is not None:
                    on_rows(*tail.poll())
            results = list(self.pending.get())
        except BaseException as error:
            failure = getattr(error, "failure", None)
            if failure is None and self.watch is not None and not isinstance(error, KeyboardInterrupt):
                failure = self.watch.diagnose(error)
            self.experiment.mark_failed(self, error, failure)
            if failure is not None and not isinstance(error, RankFailedError):
                named = RankFailedError(failure, self.run_path)
                for note in getattr(error, "__notes__", []):
                    add_note(named, note)
                raise named from error
            raise
        return self.experiment.mark_finished(self, results)

    def __await__(self) -> Any:
        return self._wait_async().__await__()

    async def _wait_async(self) -> list[dict[str, Any]]:
        if self.results is None:
            with contextlib.suppress(Exception):  # wait() below raises it, after marking the point failed
                while not self.pending.ready():
                    await asyncio.sleep(0.25)
                    if self.watch is not None:
                        self.watch.check()
        return self.wait()


# -- the runner ---------------------------------------------------------------------------------------------
class Experiment:
    """A case's sweep at one preset, stored under ``out``; see the module docstring."""

    def __init__(
        self,
        case: Case | str,
        *,
        preset: str | None = None,
        ranks: int | None = None,
        out: str | Path | None = None,
        cluster_config: ClusterConfig | None = None,
        rank_counts: Sequence[int] | None = None,
        **overrides: Any,
    ) -> None:
        self.case = get_case(case)
        self.preset = preset or self.case.default_preset
        self.settings = self.case.settings(self.preset, overrides)
        if ranks is not None and (not isinstance(ranks, int) or ranks < 1):
            raise ValueError(f"ranks={ranks!r}: use a whole number >= 1 (the most ranks a point of the sweep uses)")
        #: Only these rank counts of the sweep run (None: every count up to the most): 1,2,4,8 nodes, say.
        self.rank_counts = tuple(sorted({int(n) for n in rank_counts})) if rank_counts else None
        if self.rank_counts and self.rank_counts[0] < 1:
            raise ValueError(f"rank_counts={rank_counts!r}: every count must be >= 1")
        if self.rank_counts and ranks is not None and self.rank_counts[-1] > ranks:
            raise ValueError(f"rank_counts={rank_counts!r} go past ranks={ranks}: drop one or raise ranks")
        self.max_ranks = ranks or (self.rank_counts[-1] if self.rank_counts else physical_cores())
        self.out = Path(out) if out is not None else Path("artifacts") / self.case.name
        self.cluster_config = cluster_config or ClusterConfig()
        self.ran = 0
        self.reused = 0

    # -- the plan and the manifest
    def plan(self) -> list[Point]:
        """Every point of the sweep, in the order it runs (grouped by rank count)."""
        points = self.case.points(self.settings, self.max_ranks)
        if self.rank_counts:
            points = [p for p in points if p.ranks in self.rank_counts]
        keys = [p.key for p in points]
        if len(set(keys)) != len(keys):
            raise ExperimentError(f"case {self.case.name} planned the same point twice: {keys}")
        return sorted(points, key=lambda p: p.ranks)

    def point(self, key: str | None = None, **params: Any) -> Point:
        """The planned point with this key, or the first one whose parameters match ``params``."""
        for candidate in self.plan():
            if key is not None and candidate.key == key:
                return candidate
            if key is None and all(
                (candidate.ranks == v if k == "ranks" else dict(candidate.params).get(k) == v)
                for k, v in params.items()
            ):
                return candidate
        wanted = key or ", ".join(f"{k}={v}" for k, v in params.items())
        raise KeyError(f"no point {wanted} in the plan: {', '.join(p.key for p in self.plan())}")

    @property
    def manifest_path(self) -> Path:
        return self.out / MANIFEST

    def identity(self) -> dict[str, Any]:
        """What a manifest must match to be resumed: the case, preset, settings and threads per rank."""
        return {
            "case": self.case.name,
            "preset": self.preset,
            "settings": json.loads(json.dumps(dataclasses.asdict(self.settings), default=str)),
            "threads_per_rank": self.cluster_config.threads_per_rank,
        }

    def read_manifest(self) -> dict[str, Any] | None:
        if not self.manifest_path.is_file():
            return None
        try:
            return json.loads(self.manifest_path.read_text())
        except json.JSONDecodeError as error:
            raise ExperimentError(
                f"{self.manifest_path} is not valid JSON ({error.msg}): remove it to start the sweep again"
            ) from None

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest["updated"] = time.time()
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.manifest_path, manifest)

    def _open_manifest(self, resume: bool) -> dict[str, Any]:
        """The manifest to run under: the existing one (resume) or a fresh one (the old kept aside)."""
        existing = self.read_manifest()
        identity = self.identity()
        if existing is not None and resume:
            mismatch = [k for k in ("case", "preset", "settings", "threads_per_rank") if existing.get(k) != identity[k]]
            if mismatch:
                raise ExperimentError(
                    f"{self.manifest_path} holds a sweep of case {existing.get('case')!r} preset "
                    f"{existing.get('preset')!r} with other {mismatch[-1]}: resume it with the same options, "
                    "or pass another --out"
                )
            self._close_abandoned(existing)
            return existing
        if existing is not None and existing.get("points"):
            kept = self.out / f"sweep-{int(existing.get('created', time.time()))}.json"
            self.manifest_path.replace(kept)  # the old sweep's runs stay in the store; keep its index too
        manifest = {**identity, "created": time.time(), "max_ranks": self.max_ranks, "points": {}}
        self._write_manifest(manifest)
        return manifest

    def _close_abandoned(self, manifest: dict[str, Any]) -> None:
        """Points left "running" by a sweep that was killed: mark them and their runs failed (kept as data)."""
        changed = False
        for entry in manifest.get("points", {}).values():
            if entry.get("status") != "running":
                continue
            reason = "abandoned: the sweep stopped while this point ran (killed or crashed)"
            path = self.out / entry.get("run", "")
            if self._read_meta(path).get("status") == "running":
                update_run_meta(path, status="failed", error=reason)
            entry.update(status="failed", error=reason)
            changed = True
        if changed:
            self._write_manifest(manifest)

    def finished_points(self) -> dict[str, Path]:
        """Point key -> run directory of every finished point, checked against each run's ``run.json``.

        The manifest is an index; the runs are the truth. Without a manifest (deleted, or a sweep
        from before it existed) the store is scanned for runs of this case, preset and settings.
        """
        manifest = self.read_manifest()
        if manifest is not None:
            candidates = {key: self.out / entry.get("run", "") for key, entry in manifest.get("points", {}).items()}
        else:
            candidates = {}
            for meta_file in sorted((self.out / "runs").glob("*/run.json")):
                meta = self._read_meta(meta_file.parent)
                experiment = meta.get("experiment", {})
                key = experiment.get("point", "")
                # run ids of one second sort at random: a failed run must not hide a finished one
                ours = experiment.get("case") == self.case.name and experiment.get("preset") == self.preset
                if ours and (key not in candidates or meta.get("status") == "finished"):
                    candidates[key] = meta_file.parent
        found = {}
        for key, path in candidates.items():
            meta = self._read_meta(path)
            settings = json.loads(json.dumps(meta.get("config", {}).get("settings"), default=str))
            if meta.get("status") == "finished" and settings == self.identity()["settings"]:
                found[key] = path
        return found

    @staticmethod
    def _read_meta(path: Path) -> dict[str, Any]:
        try:
            return read_run_meta(path)
        except NotARunError:
            return {}

    def status(self) -> pd.DataFrame:
        """One row per planned point: its key, rank count, status and run directory."""
        entries = (self.read_manifest() or {}).get("points", {})
        rows = []
        for point in self.plan():
            entry = entries.get(point.key, {})
            rows.append(
                {
                    "point": point.key,
                    "ranks": point.ranks,
                    "status": entry.get("status", "pending"),
                    "run": str(self.out / entry["run"]) if "run" in entry else "",
                }
            )
        return pd.DataFrame(rows, columns=["point", "ranks", "status", "run"])

    # -- running
    def start(
        self,
        cluster: Any,
        point: Point | str,
        *,
        timeout_s: float | None = None,
        stall_after_s: float | str | None = "case",
    ) -> PointRun:
        """Start one point on ``cluster`` without blocking; returns its run directory and handle.

        ``stall_after_s``: a rank silent that long while others wait is reported (``run.json``
        ``stall``; ``"case"``: what the case says for this point, None: never); ``timeout_s``: the
        ranks are stopped after that long, stacks saved beside the run.
        """
        point = self.point(point) if isinstance(point, str) else point
        if stall_after_s == "case":
            stall_after_s = self.case.stall_after_s(point)
        if cluster.n != point.ranks:
            raise ExperimentError(f"point {point.key} needs {point.ranks} ranks but the cluster has {cluster.n}")
        for field_name, value in self.case.cluster_overrides(self.settings, point).items():
            have = getattr(cluster.config, field_name, None)
            if field_name == "env" and isinstance(have, Mapping):
                have = {k: have[k] for k in value if k in have}  # the cluster may set more variables
            if have != value:
                raise ExperimentError(
                    f"point {point.key} needs a cluster started with {field_name}={value!r}: start one with "
                    f"Cluster(n={point.ranks}, **experiment.cluster_settings(point)), or let Experiment.run() start it"
                )
        manifest = self.read_manifest()
        if manifest is None or any(manifest.get(k) != v for k, v in self.identity().items()):
            manifest = self._open_manifest(resume=False)
        kwargs = self.case.workload_kwargs(self.settings, point)
        run_path = create_run(
            self.out / "runs",
            f"{self.case.name}-{point.key}",
            ranks=point.ranks,
            config={
                "case": self.case.name,
                "preset": self.preset,
                "settings": dataclasses.asdict(self.settings),
                "workload": kwargs,
                "cluster": cluster.config.as_dict(),
            },
            extra={
                "experiment": {
                    "case": self.case.name,
                    "preset": self.preset,
                    "point": point.key,
                    "params": point.as_dict(),
                    "sweep": str(self.out),
                },
                **({"links": getattr(cluster, "links", None)} if getattr(cluster, "links", None) else {}),
            },
        )
        manifest["points"][point.key] = {
            "status": "running",
            "run": str(run_path.relative_to(self.out)),
            "ranks": point.ranks,
            "started": time.time(),
        }
        self._write_manifest(manifest)
        engines = cluster.client[sorted(cluster.client.ids)]
        pending = engines.apply_async(type(self.case).workload, str(run_path.resolve()), **kwargs)
        watch = getattr(cluster, "watch", None)
        watch = watch(run_path, timeout_s=timeout_s, stall_after_s=stall_after_s) if watch is not None else None
        return PointRun(self, point, run_path, pending, watch=watch)

    def _record_point(self, point_run: PointRun, **entry: Any) -> None:
        manifest = self.read_manifest() or self._open_manifest(resume=True)
        current = manifest["points"].setdefault(point_run.point.key, {})
        current.update(entry)
        self._write_manifest(manifest)

    def mark_finished(self, point_run: PointRun, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The ranks returned: compact the run, store their results, tick the point off in the manifest."""
        compact(point_run.run_path)
        wall = time.time() - point_run.started
        rank_results = sorted(results, key=lambda r: int(r.get("rank", 0)) if isinstance(r, dict) else 0)
        try:
            update_run_meta(point_run.run_path, status="finished", finished=time.time(), rank_results=rank_results)
        except OSError as error:
            raise RunFolderError(
                f"{point_run.run_path}: the ranks finished but the run folder's disk refused run.json"
                f" ({error.strerror or error}): free space on that disk and run the point again; what the ranks"
                " wrote is kept"
            ) from error
        self._record_point(point_run, status="finished", seconds=round(wall, 3), finished=time.time())
        point_run.results = rank_results
        self.ran += 1
        return rank_results

    def mark_failed(self, point_run: PointRun, error: BaseException, failure: Failure | None = None) -> None:
        """The point failed (or was interrupted): say so in the run and the manifest; keep what was recorded.

        ``failure`` (which rank, how, when) goes into both as ``failure``.
        """
        reason = "interrupted" if isinstance(error, KeyboardInterrupt) else f"{type(error).__name__}: {error}"
        if failure is not None:
            reason = f"{RankFailedError.__name__}: {failure.message()}"
        extra = {"failure": failure.as_dict()} if failure is not None else {}
        with contextlib.suppress(Exception):
            update_run_meta(point_run.run_path, status="failed", finished=time.time(), error=reason[:2000], **extra)
        try:
            self._record_point(point_run, status="failed", error=reason[:2000], **extra)
        except OSError as manifest_error:  # e.g. the disk that filled up: the rank's error is what the user needs
            add_note(error, f"workbench: the sweep manifest could not record this failure ({manifest_error})")

    def run(
        self,
        *,
        resume: bool = False,
        cluster: Any = None,
        progress: Any = None,
        on_point: Callable[[Point, str], None] | None = None,
        write: bool = True,
        timeout_s: float | None = None,
    ) -> ExperimentResult:
        """Run every planned point not yet finished (all of them unless ``resume``); return the result.

        ``cluster``: a started ``Cluster`` reused for the points of its size (others get their own,
        started and stopped here). ``progress``: True for a progress bar, or a ``ProgressBar``.
        ``on_point(point, "start" | "done" | "reused")`` is told about every point. ``timeout_s``: a
        point still running after that long has its ranks stopped, its stacks saved beside its run and
        is marked failed (``RankFailedError``); the finished points stay, ``resume=True`` goes on.
        """
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: give the seconds a point may run, > 0 (or None)")
        from workbench.cluster import Cluster

        self._open_manifest(resume)
        done = self.finished_points() if resume else {}
        plan = self.plan()
        todo = [p for p in plan if p.key not in done]
        self.ran, self.reused = 0, len(plan) - len(todo)
        for point in plan:
            if point.key in done and on_point:
                on_point(point, "reused")
        bar = self._progress_bar(progress, todo)
        try:
            for (ranks, overrides), group in self.cluster_groups(todo):
                remaining = group
                while remaining:  # after a failure that is a result, the rest of the group gets a fresh cluster
                    if cluster is not None and cluster.n == ranks and not overrides:
                        remaining = self._run_group(cluster, remaining, bar, on_point, timeout_s)
                        continue
                    with Cluster(config=self.point_config(ranks, overrides)) as own:
                        remaining = self._run_group(own, remaining, bar, on_point, timeout_s)
        finally:
            if bar is not None:
                bar.close()
        return self.result(write=write)

    def cluster_groups(self, points: list[Point]) -> list[tuple[tuple[int, tuple[tuple[str, Any], ...]], list[Point]]]:
        """Points that can share a cluster: same rank count and same cluster settings, in plan order."""
        groups: dict[tuple[int, tuple[tuple[str, Any], ...]], list[Point]] = {}
        for point in points:
            overrides = tuple(
                (name, tuple(sorted(value.items())) if isinstance(value, Mapping) else value)
                for name, value in sorted(self.case.cluster_overrides(self.settings, point).items())
            )
            groups.setdefault((point.ranks, overrides), []).append(point)
        return sorted(groups.items(), key=lambda item: (item[0][0], len(item[0][1])))

    def point_config(self, ranks: int, overrides: tuple[tuple[str, Any], ...] = ()) -> ClusterConfig:
        """The ``ClusterConfig`` a group of points starts with: the caller's, at ``ranks`` ranks, plus the overrides.

        Where the ranks go stays as the caller set it (``launcher``, ``controller_ip``, Slurm
        settings); ``nodes`` is capped at the rank count, so a 1-rank point's run records one node.
        """
        fields = self._config_fields(overrides)
        if self.cluster_config.nodes is not None and "nodes" not in fields:
            fields["nodes"] = min(self.cluster_config.nodes, ranks)
        return dataclasses.replace(self.cluster_config, n=ranks, **fields)

    def cluster_settings(self, point: Point | str) -> dict[str, Any]:
        """The ``Cluster`` settings a point needs (``Cluster(n=point.ranks, **these)``): its case's overrides."""
        point = self.point(point) if isinstance(point, str) else point
        return self._config_fields(tuple(self.case.cluster_overrides(self.settings, point).items()))

    def _config_fields(self, overrides: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
        """A group's cluster settings as ``ClusterConfig`` fields; a point's ``env`` adds to the caller's."""
        fields = dict(overrides)
        if "env" in fields:
            fields["env"] = {**self.cluster_config.env, **dict(fields["env"])}
        return fields

    def _run_group(
        self, cluster: Any, points: list[Point], bar: Any, on_point: Any, timeout_s: float | None = None
    ) -> list[Point]:
        """Run the points on ``cluster``; returns those left when a point failed and failures are results."""
        for index, point in enumerate(points):
            if on_point:
                on_point(point, "start")
            point_run = self.start(cluster, point, timeout_s=timeout_s)
            units = self.case.progress_units(self.settings, point)
            try:
                if bar is not None and units is not None:
                    point_run.wait(lambda events, memory: bar.update(self.case.units_done(events, memory)))
                else:
                    point_run.wait()
            except Exception:
                if not self.case.failures_are_results:
                    raise
                if on_point:
                    on_point(point, "failed")  # marked failed in its run and the manifest, with the reason
                if bar is not None:
                    bar.update(units[0] if units else 1)
                return points[index + 1 :]
            if bar is not None and units is None:
                bar.update(1)
            if on_point:
                on_point(point, "done")
        return []

    def _progress_bar(self, progress: Any, todo: list[Point]) -> Any:
        if progress is None or progress is False or not todo:
            return None
        total = 0
        for point in todo:
            units = self.case.progress_units(self.settings, point)
            total += units[0] if units else 1
        if progress is True:
            from workbench.widgets import ProgressBar

            return ProgressBar(total, self.case.name)
        progress.set_total(total)
        return progress

    # -- results from the store
    def result(self, *, write: bool = True) -> ExperimentResult:
        """The whole result rebuilt from the store (no training): rows, tables, summary, report."""
        finished = self.finished_points()
        plan = {p.key: p for p in self.plan()}
        manifest = self.read_manifest() or {}
        keys = [k for k in plan if k in finished]
        if not keys:
            raise ExperimentError(
                f"no finished point of case {self.case.name} in {self.out}: run the sweep first "
                f"(workbench run {self.case.name} --preset {self.preset} --out {self.out})"
            )
        sweep = {
            "points": len(self.plan()),
            "ran": self.ran,
            "reused": self.reused if (self.ran or self.reused) else len(keys),
            "missing": [p.key for p in self.plan() if p.key not in finished],
        }
        # planned points that failed and did not finish since: (point, why)
        failed = {
            key: (plan[key], str(entry.get("error") or "failed"))
            for key, entry in manifest.get("points", {}).items()
            if entry.get("status") == "failed" and key in plan and key not in finished
        }
        result = build_result(
            self.case,
            self.preset,
            self.settings,
            {key: (plan[key], RunData.load(finished[key])) for key in keys},
            failed=failed,
            out=self.out,
            extra={"ranks": self.max_ranks, "sweep": sweep, "created": manifest.get("created")},
        )
        if write:
            write_outputs(result)
        return result

    def __repr__(self) -> str:
        return (
            f"Experiment({self.case.name!r}, preset={self.preset!r}, ranks<={self.max_ranks}, "
            f"points={len(self.plan())}, out={str(self.out)!r})"
        )


def build_result(
    case: Case,
    preset: str,
    settings: Any,
    finished: Mapping[str, tuple[Point, RunData]],
    *,
    out: str | Path,
    extra: Mapping[str, Any] | None = None,
    failed: Mapping[str, tuple[Point, str]] | None = None,
) -> ExperimentResult:
    """A case's result from recorded runs (point key -> (point, run)): rows, tables, summary.

    ``Experiment.result()`` calls this with the sweep's finished points; tests and notebooks can
    call it with runs recorded any other way. ``failed`` (point key -> (point, why)) becomes the
    table ``failed`` (point, ranks, the point's parameters, reason) that the case's summary and
    report can show, and ``failed_points`` in the summary.
    """
    rows = pd.DataFrame([{"point": key, **case.row(run, point, settings)} for key, (point, run) in finished.items()])
    runs = {key: run for key, (_point, run) in finished.items()}
    tables = case.tables(rows, runs, settings)
    if failed:
        tables = {**tables, "failed": failed_table(failed)}
    from workbench.analysis import json_ready

    summary = {"case": case.name, "preset": preset, **case.summary(rows, tables, settings), **dict(extra or {})}
    if failed:
        summary["failed_points"] = {key: reason_line(why) for key, (_point, why) in failed.items()}
    summary.setdefault("out", str(out))
    summary = json_ready(summary)  # NaN -> null: summary.json is read by tools other than Python
    return ExperimentResult(
        case=case,
        preset=preset,
        settings=settings,
        out=Path(out),
        rows=rows,
        tables=tables,
        summary=summary,
        runs={key: run.path for key, run in runs.items()},
    )


def reason_line(why: str) -> str:
    """The line of a failure's text that says what happened (its last non-empty one: the exception)."""
    lines = [line.strip() for line in str(why).splitlines() if line.strip()]
    return lines[-1][:300] if lines else "failed"


def failed_table(failed: Mapping[str, tuple[Point, str]]) -> pd.DataFrame:
    """One row per failed point: its key, ranks, parameters and the reason in one line."""
    return pd.DataFrame(
        [
            {"point": key, "ranks": point.ranks, **dict(point.params), "reason": reason_line(why)}
            for key, (point, why) in failed.items()
        ]
    )


def write_outputs(result: ExperimentResult) -> Path:
    """Rows and tables as Parquet, ``summary.json`` and one self-contained ``report.html`` in ``result.out``.

    A case's table named ``runs`` (the rows with columns derived across runs) replaces the plain rows.
    """
    from workbench.report import run_metadata, write_report

    out = result.out
    out.mkdir(parents=True, exist_ok=True)
    result.rows.to_parquet(out / "runs.parquet", index=False)
    for name, table in result.tables.items():
        table.to_parquet(out / f"{name}.parquet", index=False)
    result.report_path = out / "report.html"
    result.summary["report"] = str(result.report_path)
    metadata = run_metadata(result.runs.values(), case=result.case.name, preset=result.preset, out=str(out))
    write_report(
        result.report_path, title=result.case.title, sections=result.case.report_sections(result), metadata=metadata
    )
    write_json_atomic(out / "summary.json", result.summary)
    return result.report_path
