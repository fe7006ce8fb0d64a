"""Where `workbench profile` puts its ranks (workbench.placement) and how a launcher's refusal is named (faults)."""

from __future__ import annotations

import pytest

from workbench.commands.profile import gpu_pinning, launcher_failure_line
from workbench.config import ClusterConfig
from workbench.faults import launcher_refusal
from workbench.placement import (
    PlacementError,
    allocation_from_environment,
    expand_counts,
    expand_nodelist,
    gpu_for_rank,
    place,
    read_hostfile,
)

#: Open MPI 5's words when it binds a rank to a core its node withholds (salloc -N2 on the miniature cluster).
PRRTE_BIND_REFUSAL = """--------------------------------------------------------------------------
PRTE tried to bind a new process, but something went wrong. The
process was killed without launching the target application. Your job
will now abort.

  Local host:        node2
  Application name:  /work/main/.venv/bin/python
  Error message:     hwloc_set_cpubind returned "Error" for bitmap "0"
  Location:          prted/pmix/pmix_server_fence.c:1161
--------------------------------------------------------------------------
"""

#: MPICH's Hydra inside salloc on the miniature cluster, where this host's name resolves to 127.0.0.1 on the nodes.
HYDRA_CALLBACK_REFUSED = """[mpiexec@vm] Launch arguments: /usr/bin/srun -N 2 -n 2 --input none hydra_pmi_proxy
[proxy:0@node1] HYDU_sock_connect (lib/utils/sock.c:140): unable to connect from "node1" to "vm" (Connection refused)
srun: error: node2: task 1: Exited with exit code 5
[proxy:0@node1] main (proxy/pmip.c:100): unable to connect to server vm at port 40923 (check for firewalls!)
"""


def test_slurm_node_lists_expand_as_scontrol_does():
    assert expand_nodelist("node[1-3]") == ["node1", "node2", "node3"]
    assert expand_nodelist("gpu[01-03,7],login") == ["gpu01", "gpu02", "gpu03", "gpu7", "login"]
    assert expand_nodelist("r[1-2]n[08-09]") == ["r1n08", "r1n09", "r2n08", "r2n09"]
    assert expand_nodelist("node1") == ["node1"]
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(PlacementError, match="unclosed"):
        expand_nodelist("node[1-2")


def test_an_allocation_is_read_from_slurms_variables_and_its_tasks_are_the_ranks():
    environment = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_CPUS_PER_TASK": "4",
        "SLURM_GPUS_ON_NODE": "2",
    }
    allocation = allocation_from_environment(environment)
    assert allocation is not None
    assert allocation.nodes == ("node1", "node2") and allocation.tasks == 4
    assert allocation.cpus_per_task == 4 and allocation.gpus_per_node == 2
    assert allocation_from_environment({}) is None
    placement = place(environment=environment)
    assert placement.kind == "allocation" and placement.ranks == 4 and placement.hosts == ("node1", "node2")
    args = placement.config.mpiexec_args({})
    # the allocation confines the job to its cores: binding to core 0 of a node that withholds it is refused
    assert args[args.index("--bind-to") + 1] == "none"
    assert "OMPI_MCA_btl" not in placement.config.engine_environment()  # across nodes: TCP, not shared memory only
    assert placement.config.threads == 4
    with pytest.raises(PlacementError, match=r"--ranks 6 is more than the 4 tasks .*salloc -n 6"):
        place(ranks=6, environment=environment)
    with pytest.raises(PlacementError, match="one of 2 tasks of an srun step"):
        place(environment={**environment, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"})


def test_on_this_machine_alone_ranks_are_bound_as_before():
    placement = place(ranks=1, environment={})
    assert placement.kind == "local" and placement.ranks == 1
    args = placement.config.mpiexec_args({})
    assert args[args.index("--bind-to") + 1] == ClusterConfig(n=1).mpiexec_args({})[1]
    assert place(environment={}).ranks == 2


def test_hostfiles_of_both_mpis_give_hosts_slots_and_ranks(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# two nodes\nnode1 slots=2\nnode2 slots=2 max_slots=4\n\n")
    assert read_hostfile(hosts) == [("node1", 2), ("node2", 2)]
    placement = place(hostfile=str(hosts), environment={})
    assert placement.kind == "hostfile" and placement.ranks == 4 and placement.hosts == ("node1", "node2")
    assert placement.config.mpiexec_args({})[:4] == ["--bind-to", "none", "--hostfile", str(hosts)]
    per_node = place(hostfile=str(hosts), ranks_per_node=1, environment={})
    assert per_node.ranks == 2 and "ppr:1:node" in per_node.config.mpiexec_args({})
    mpich = tmp_path / "mpich-hosts"
    mpich.write_text("node1:3\nnode2\n")
    assert read_hostfile(mpich) == [("node1", 3), ("node2", None)]
    placement = place(hostfile=str(mpich), mpi="mpich", ranks_per_node=2, environment={})
    assert placement.ranks == 4
    assert ["-f", str(mpich), "-ppn", "2"] == placement.config.mpiexec_args({})[:4]
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(PlacementError, match="names no host"):
        read_hostfile(tmp_path / "empty")
    (tmp_path / "bad").write_text("node1:x\n")
    with pytest.raises(PlacementError, match=r"bad:1: 'node1:x' is not a hostfile line"):
        read_hostfile(tmp_path / "bad")


def test_a_launch_agent_replaces_ssh_for_either_mpi(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1\nnode2\n")
    openmpi = place(hostfile=str(hosts), launch_agent="workbench minicluster exec", environment={})
    args = openmpi.config.mpiexec_args({})
    assert args[args.index("plm_ssh_agent") + 1] == "workbench minicluster exec"
    mpich = place(hostfile=str(hosts), mpi="mpich", launch_agent="/usr/bin/rsh-wrapper", environment={})
    assert "-launcher-exec" in mpich.config.mpiexec_args({})
    with pytest.raises(PlacementError, match="MPICH takes one executable"):
        place(hostfile=str(hosts), mpi="mpich", launch_agent="ssh -p 2222", environment={})


def test_each_rank_gets_its_local_ranks_gpu_unless_the_script_chooses(tmp_path):
    four = {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert gpu_for_rank(four, "workbench")["cuda_visible_devices"] == "1"
    assert gpu_for_rank({**four, "OMPI_COMM_WORLD_LOCAL_RANK": "5"}, "workbench")["gpu_shared"] is True
    assert gpu_for_rank(four, "script")["cuda_visible_devices"] == "0,1,2,3"
    devices = tmp_path / "dev"
    devices.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (devices / name).touch()
    found = gpu_for_rank({"SLURM_LOCALID": "1"}, "workbench", device_dir=devices)
    assert found == {
        "local_rank": 1, "gpus_on_node": 2, "pinned_by": "workbench", "cuda_visible_devices": "1", "gpu_shared": False
    }  # fmt: skip
    none = gpu_for_rank({"SLURM_LOCALID": "0"}, "workbench", device_dir=tmp_path)
    assert none["gpus_on_node"] == 0 and none["cuda_visible_devices"] is None
    pins = tmp_path / "pins.py"
    pins.write_text(
        "gpus = tf.config.list_physical_devices('GPU')\ntf.config.set_visible_devices(gpus[hvd.local_rank()])\n"
    )
    plain = tmp_path / "plain.py"
    plain.write_text("import horovod.tensorflow as hvd\nhvd.init()\n")
    assert gpu_pinning("auto", ["python", str(pins)]) == "script"
    assert gpu_pinning("auto", ["python", str(plain)]) == "workbench"
    assert gpu_pinning("no", ["python", str(plain)]) == "off"


def test_a_launchers_refusal_is_one_line_with_its_words_its_host_and_what_to_change():
    refusal = launcher_refusal("rank 0 output\n" + PRRTE_BIND_REFUSAL)
    assert refusal is not None and refusal.host == "node2"
    assert 'hwloc_set_cpubind returned "Error" for bitmap "0"' in refusal.reason
    assert "--bind-to none" in refusal.change
    line = launcher_failure_line("/venv/bin/mpiexec", PRRTE_BIND_REFUSAL, 213, 2, [0])
    assert "\n" not in line
    assert line.startswith("rank 1 never started the script")
    assert "mpiexec could not start the ranks on node2" in line and "--bind-to none" in line
    slots = launcher_refusal("There are not enough slots available in the system to satisfy the 4\nslots")
    assert slots is not None and "--ranks" in slots.change
    missing = launcher_refusal("[proxy:0:1@node2] HYDU_create_process: execvp error on file pythn (No such file)")
    assert missing is not None and missing.host == "node2" and "absolute path" in missing.change
    hydra = launcher_refusal(HYDRA_CALLBACK_REFUSED)
    assert hydra is not None and hydra.host == "node1" and "-iface" in hydra.change
    slurm = launcher_refusal("salloc: error: Job submit/allocate failed: Requested node configuration is not available")
    assert slurm is not None and slurm.message("mpiexec").startswith("Slurm could not start the ranks: Job submit")
    assert launcher_refusal("Traceback (most recent call last):\nValueError: bad") is None
    unknown = launcher_failure_line("mpiexec", "something odd\nlast words\n", 1, 2, [])
    assert unknown == "no rank started the script: mpiexec ended with exit code 1; its last line: 'last words'"


def test_a_rank_that_never_started_after_another_ranks_script_failed_is_not_the_launchers_failure():
    traceback = "Traceback (most recent call last):\n  File 'train.py'\nValueError: bad batch\n"
    assert launcher_failure_line("mpiexec", traceback, 1, 2, [0]) is None
    assert launcher_failure_line("mpiexec", traceback, 1, 2, []).startswith("no rank started the script: mpiexec ended")


def test_the_launchers_stderr_is_passed_on_and_both_its_ends_kept(capfd):
    import io

    from workbench.commands.profile import OutputTail

    tail = OutputTail(keep=8)
    tail.follow(io.BytesIO(b"refused: binding\n" + b"x" * 100 + b"last words"))
    tail.join()
    assert tail.text() == "refused:" + "st words"  # the first 8 bytes and the last 8
    assert not tail.ended_line
    assert capfd.readouterr().err.endswith("x" * 100 + "last words")
