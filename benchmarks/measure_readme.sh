#!/usr/bin/env bash
# Re-measure the documented figures: every command's --json is saved as benchmarks/results/NAME.json
# (with the command and when it ran), then the tables in README.md and docs/*.md are rendered from them
# (the blocks between <!-- table: NAME --> and <!-- /table -->; see benchmarks/render_readme.py).
#
#   benchmarks/measure_readme.sh            # all of them, about 40 minutes on 2 cores
#   benchmarks/measure_readme.sh overhead   # only the named ones
#   benchmarks/measure_readme.sh projection-sweeps projection   # the projection's validation, ~15 minutes
#   benchmarks/measure_readme.sh projection-nodes-sweeps projection-nodes   # ... across nodes, ~2 h 20 min, root
#   benchmarks/measure_readme.sh projection-nodes-sleeping-sweeps projection-nodes-sleeping   # ranks asleep, ~5 h 40 min
#   benchmarks/measure_readme.sh pop-scaling-nodes-50mbit pop-scaling-nodes-1gbit eval-frequency-nodes-50mbit \
#       eval-frequency-nodes-1gbit ps-vs-allreduce-nodes-1gbit ps-vs-allreduce-nodes-unshaped cpu-tuning-nodes
#       # the case studies on nodes, ~85 minutes, root
#
# Run it on a quiet machine and nothing else beside it: these are timings.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
wanted=("$@")
failed=0

measure() {
    local name=$1
    shift
    if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then
        return
    fi
    local out
    out=$(mktemp)
    echo "== $name: $*" >&2
    local started=$SECONDS
    if "$@" >"$out"; then
        python benchmarks/render_readme.py save "$name" "$out" --command "$*" --seconds $((SECONDS - started))
    else
        # a case whose result cannot be trusted exits 1 but still prints its JSON: keep it, say so
        if python -c "import json, sys; json.load(open(sys.argv[1]))" "$out" 2>/dev/null; then
            echo "   $name exited non-zero; its JSON is saved (read its caveats)" >&2
            python benchmarks/render_readme.py save "$name" "$out" --command "$*" --seconds $((SECONDS - started))
        else
            echo "   $name failed" >&2
            failed=1
        fi
    fi
    rm -f "$out"
}

# a sweep whose runs a later table reads (its own JSON is not a table)
sweep() {
    local name=$1
    shift
    if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then
        return
    fi
    echo "== $name: $*" >&2
    "$@" >/dev/null || { echo "   $name failed" >&2; failed=1; }
}

measure allreduce workbench bench allreduce --ranks 2 --json
measure overhead workbench bench overhead --tf-threads 1 --repetitions 1600 --json
measure analysis-categorical workbench bench analysis --events 10000000 --ranks 64 --strings categorical --json
measure analysis-object workbench bench analysis --events 10000000 --ranks 64 --strings object --json
# a job of 8 ranks a node with slow nodes and late ranks, at once and in rank groups; the 100 M one only in groups
# (at once it was killed for memory after 82 s on this 24 GB machine)
measure analysis-split-1m workbench bench analysis --split --events 1000000 --ranks 64 --group-ranks 16 --repeats 3 --json
measure analysis-split-10m workbench bench analysis --split --events 10000000 --ranks 256 --repeats 3 --json
measure analysis-split-30m workbench bench analysis --split --events 30000000 --ranks 1024 --repeats 2 --json
measure analysis-split-100m workbench bench analysis --split --events 100000000 --ranks 1024 --no-whole --repeats 2 --json
measure timeline workbench bench timeline --mb 300 --json
measure timeline-stream python benchmarks/timeline_stream.py --mb 5000 --json
measure timeline-stream-1024 python benchmarks/timeline_stream.py --mb 2000 --ranks 1024 --late-ranks 37,600 --json
measure export python benchmarks/export_trace.py --events 10000000 --ranks 64 --json
measure redraw workbench bench redraw --json
measure live workbench bench live --ranks 64 --seconds 120 --json
measure live-1024 workbench bench live --ranks 1024 --seconds 60 --step-s 0.5 --flush-s 2 --refresh-s 1 --feed-processes 2 --ranks-per-host 8 --slow-host 37 --json
measure late-attach python benchmarks/late_attach.py --minutes 10 30 60 --unmerged-minutes 10 --json
measure dashboard-cost python benchmarks/dashboard_cost.py --preset reduced --repetitions 5
measure horovod-step workbench bench horovod-step --json
measure eval-frequency-reduced workbench run eval-frequency --preset reduced --ranks 2 --out artifacts/eval-frequency-reduced --json
measure predict-leak-reduced workbench run predict-leak --preset reduced --ranks 2 --out artifacts/predict-leak-reduced --json
measure input-pipeline-reduced workbench run input-pipeline --preset reduced --ranks 2 --out artifacts/input-pipeline-reduced --json
measure pop-scaling-reduced workbench run pop-scaling --preset reduced --ranks 2 --out artifacts/pop-scaling-reduced --json
measure ps-vs-allreduce-reduced workbench run ps-vs-allreduce --preset reduced --ranks 2 --json
measure cpu-tuning-reduced workbench run cpu-tuning --preset reduced --ranks 2 --json
# the projection's validation: both cases with one core per rank at every rank count, three repetitions
for repetition in "" -r2 -r3; do
    for case in eval-frequency input-pipeline; do
        sweep projection-sweeps workbench run $case --preset reduced --ranks 2 --threads-per-rank 1 \
            --out artifacts/$case-reduced-1thread$repetition --json
    done
done
measure projection workbench bench projection --allreduce benchmarks/results/allreduce.json --json
measure projection-seeds workbench bench projection --seeds --json
measure projection-published workbench bench projection --published --json
# the projection across nodes (root): eval-frequency on a miniature cluster of 1, 2, 4 and 8 nodes with 0.2 of a
# core each at every count, on a link where computation dominates (1 Gbit/s) and one where the link does
# (50 Mbit/s), three repetitions interleaved; each larger count predicted from its sweep's 1-node run (~45 minutes:
# each sweep also measures its link at 2, 4 and 8 nodes, and samples the host's speed as it runs)
for repetition in 1 2 3; do
    for link in 1gbit 50mbit; do
        sweep projection-nodes-sweeps workbench run eval-frequency --preset ci --backend mpi4py --nodes 1,2,4,8 \
            --cpus-per-node 0.2 --link $link --out artifacts/nodes-eval-frequency-$link-r$repetition --json
    done
done
# the input-pipeline case on the same nodes (contested storage shared by every node, a link each; ~5 minutes a sweep)
for repetition in 1 2 3; do
    for link in 1gbit 50mbit; do
        sweep projection-nodes-sweeps workbench run input-pipeline --preset reduced --threads 1 --intervals 1,8 \
            --seconds 5 --nodes 1,2,4,8 --cpus-per-node 0.2 --link $link \
            --out artifacts/nodes-input-pipeline-$link-r$repetition --json
    done
done
# the case studies on nodes (root; issue 35 part 2): each case's sweep on 1, 2 and 4 nodes of 0.4 of a core, on a
# slow link (50 Mbit/s: the link is the limit) and a fast one (1 Gbit/s), rendered beside its 2-core table
for link in 50mbit 1gbit; do
    measure pop-scaling-nodes-$link workbench run pop-scaling --preset reduced --nodes 1,2,4 --cpus-per-node 0.4 \
        --link $link --out artifacts/nodes-pop-scaling-$link --json
    measure eval-frequency-nodes-$link workbench run eval-frequency --preset ci --backend mpi4py --nodes 1,2,4 \
        --cpus-per-node 0.4 --link $link --out artifacts/nodes-eval-frequency-0.4core-$link --json
done
# ps-vs-allreduce on the same nodes: each worker on a node of its own, the PS tasks dealt over the nodes, the chief on
# node1; 1, 2 and 4 workers, 1 and 2 PS tasks (and 2 sharded at 4) and allreduce, on a slow link (1 Gbit/s: 87 MB of gradients take ~0.7 s,
# longer than a step's compute) and the kernel's own (unshaped: the nodes' cores are the limit); ~15 minutes each
for link in 1gbit unshaped; do
    measure ps-vs-allreduce-nodes-$link workbench run ps-vs-allreduce --preset ci --data synthetic --ps 1,2 \
        --sharded yes --nodes 1,2,4 --cpus-per-node 0.4 --link $link --out artifacts/nodes-ps-vs-allreduce-$link --json
done
# cpu-tuning on nodes of 0.8 of a core offering Slurm 2 slots each: 1 rank x 2 threads or 2 ranks x 1 thread per
# node, on 1 and 2 nodes, each evaluation schedule (~10 minutes)
measure cpu-tuning-nodes workbench run cpu-tuning --preset reduced --nodes 1,2 --cpus-per-node 0.8 --slots-per-node 2 \
    --link 1gbit --out artifacts/nodes-cpu-tuning-cpuwait --json
# pop-scaling's two more repetitions on the nodes of its case-study sweeps above (the first), for the projection
for repetition in 2 3; do
    for link in 50mbit 1gbit; do
        sweep projection-nodes-sweeps workbench run pop-scaling --preset reduced --nodes 1,2,4 --cpus-per-node 0.4 \
            --link $link --out artifacts/nodes-pop-scaling-$link-r$repetition --json
    done
done
# ps-vs-allreduce for the projection: allreduce and one PS task beside worker 0, 1, 2 and 4 nodes of 0.4 core, three
# repetitions on each link (~14-16 minutes a sweep); the case study's sweeps above have one repetition and more points
for repetition in 1 2 3; do
    for link in 1gbit unshaped; do
        sweep projection-nodes-sweeps workbench run ps-vs-allreduce --preset ci --data synthetic --ps 1 --sharded no \
            --measured-steps 6 --repetitions 2 --nodes 1,2,4 --cpus-per-node 0.4 --link $link \
            --out artifacts/nodes-ps-vs-allreduce-$link-r$repetition --json
    done
done
# what Horovod's fusion buffer adds to the step's allreduce on 2 nodes of 0.4 core (InceptionV3's 190 gradient
# tensors against one tensor of the same 87 MB and MPI's own allreduce; ~3 minutes each)
for link in unshaped 1gbit; do
    measure fusion-copy-$link python benchmarks/fusion_copy.py --link $link --json
done
measure projection-nodes workbench bench projection --nodes --json
# the sweeps measured again with the ranks waiting in MPI asleep (the miniature cluster's default since
# 2026-11-26), kept apart from the polling ones above: three repetitions of each, interleaved (~3 h in all; a sweep
# of eval-frequency takes 3-5 min on 4 nodes of 0.4 core, 8-12 on 8 of 0.2, input-pipeline 9, pop-scaling 9-11,
# ps-vs-allreduce 14-16)
for repetition in 1 2 3; do
    for link in 1gbit 50mbit; do
        sweep projection-nodes-sleeping-sweeps workbench run eval-frequency --preset ci --backend mpi4py \
            --nodes 1,2,4,8 --cpus-per-node 0.2 --link $link \
            --out artifacts/sleepbatch/nodes-eval-frequency-$link-r$repetition --json
        sweep projection-nodes-sleeping-sweeps workbench run eval-frequency --preset ci --backend mpi4py \
            --nodes 1,2,4 --cpus-per-node 0.4 --link $link \
            --out artifacts/sleepbatch/nodes-eval-frequency-0.4core-$link-r$repetition --json
    done
    sweep projection-nodes-sleeping-sweeps workbench run input-pipeline --preset reduced --threads 1 --intervals 1,8 \
        --seconds 5 --nodes 1,2,4,8 --cpus-per-node 0.2 --link 1gbit \
        --out artifacts/sleepbatch/nodes-input-pipeline-1gbit-r$repetition --json
    sweep projection-nodes-sleeping-sweeps workbench run pop-scaling --preset reduced --nodes 1,2,4 --cpus-per-node 0.4 \
        --link 1gbit --out artifacts/sleepbatch/nodes-pop-scaling-1gbit-r$repetition --json
    sweep projection-nodes-sleeping-sweeps workbench run ps-vs-allreduce --preset ci --data synthetic --ps 1 \
        --sharded no --measured-steps 6 --repetitions 2 --nodes 1,2,4 --cpus-per-node 0.4 --link unshaped \
        --out artifacts/sleepbatch/nodes-ps-vs-allreduce-unshaped-r$repetition --json
done
# each case's other link, asleep (2026-11-27, ~1 h 40 min): pop-scaling where the link is the limit (50 Mbit/s),
# ps-vs-allreduce where it is slow (1 Gbit/s)
for repetition in 1 2 3; do
    sweep projection-nodes-sleeping-sweeps workbench run pop-scaling --preset reduced --nodes 1,2,4 --cpus-per-node 0.4 \
        --link 50mbit --out artifacts/sleepbatch/nodes-pop-scaling-50mbit-r$repetition --json
    sweep projection-nodes-sleeping-sweeps workbench run ps-vs-allreduce --preset ci --data synthetic --ps 1 \
        --sharded no --measured-steps 6 --repetitions 2 --nodes 1,2,4 --cpus-per-node 0.4 --link 1gbit \
        --out artifacts/sleepbatch/nodes-ps-vs-allreduce-1gbit-r$repetition --json
done
# the 1 Gbit/s eval-frequency and input-pipeline sweeps again with the lighter recorder (2026-11-27, ~1 h): the old
# one's flushes had lengthened the steps' collectives on these nodes (benchmarks/recording_on_quota.py)
for repetition in 1 2 3; do
    sweep projection-nodes-sleeping-sweeps workbench run eval-frequency --preset ci --backend mpi4py \
        --nodes 1,2,4,8 --cpus-per-node 0.2 --link 1gbit \
        --out artifacts/lightrec/nodes-eval-frequency-1gbit-r$repetition --json
    sweep projection-nodes-sleeping-sweeps workbench run eval-frequency --preset ci --backend mpi4py \
        --nodes 1,2,4 --cpus-per-node 0.4 --link 1gbit \
        --out artifacts/lightrec/nodes-eval-frequency-0.4core-1gbit-r$repetition --json
done
for repetition in 1 2 3; do
    sweep projection-nodes-sleeping-sweeps workbench run input-pipeline --preset reduced --threads 1 --intervals 1,8 \
        --seconds 5 --nodes 1,2,4,8 --cpus-per-node 0.2 --link 1gbit \
        --out artifacts/lightrec/nodes-input-pipeline-1gbit-r$repetition --json
done
# eval-frequency on 0.4 core at 50 Mbit/s and pop-scaling at 1 Gbit/s with the lighter recorder too (2026-11-27;
# ~14 and ~30 minutes)
for repetition in 1 2 3; do
    sweep projection-nodes-sleeping-sweeps workbench run eval-frequency --preset ci --backend mpi4py \
        --nodes 1,2,4 --cpus-per-node 0.4 --link 50mbit \
        --out artifacts/lightrec/nodes-eval-frequency-0.4core-50mbit-r$repetition --json
done
for repetition in 1 2 3; do
    sweep projection-nodes-sleeping-sweeps workbench run pop-scaling --preset reduced --nodes 1,2,4 --cpus-per-node 0.4 \
        --link 1gbit --out artifacts/lightrec/nodes-pop-scaling-1gbit-r$repetition --json
done
# ps-vs-allreduce on unshaped links with the lighter recorder (2026-11-27, ~40 minutes)
for repetition in 1 2 3; do
    sweep projection-nodes-sleeping-sweeps workbench run ps-vs-allreduce --preset ci --data synthetic --ps 1 \
        --sharded no --measured-steps 6 --repetitions 2 --nodes 1,2,4 --cpus-per-node 0.4 --link unshaped \
        --out artifacts/lightrec/nodes-ps-vs-allreduce-unshaped-r$repetition --json
done
# does a longer run narrow the repetitions' scatter? eval-frequency's reduced preset on the same nodes (~12 minutes)
for repetition in 1 2 3; do
    sweep projection-nodes-reduced-preset-sweeps workbench run eval-frequency --preset reduced --backend mpi4py \
        --nodes 1,2,4 --cpus-per-node 0.4 --link 1gbit \
        --out artifacts/lightrec/nodes-eval-frequency-reduced-0.4core-1gbit-r$repetition --json
done
measure projection-nodes-reduced-preset workbench bench projection --nodes --json --sweeps \
    'artifacts/lightrec/nodes-eval-frequency-reduced-0.4core-1gbit-r*' 'artifacts/lightrec/nodes-eval-frequency-0.4core-1gbit-r*'
measure projection-nodes-sleeping workbench bench projection --nodes --json --sweeps \
    'artifacts/lightrec/nodes-eval-frequency-1gbit-r*' 'artifacts/sleepbatch/nodes-eval-frequency-50mbit-r*' \
    'artifacts/lightrec/nodes-eval-frequency-0.4core-1gbit-r*' 'artifacts/lightrec/nodes-eval-frequency-0.4core-50mbit-r*' \
    'artifacts/lightrec/nodes-input-pipeline-1gbit-r*' 'artifacts/lightrec/nodes-pop-scaling-1gbit-r*' 'artifacts/sleepbatch/nodes-pop-scaling-50mbit-r*' \
    'artifacts/lightrec/nodes-ps-vs-allreduce-unshaped-r*' 'artifacts/sleepbatch/nodes-ps-vs-allreduce-1gbit-r*'
# a step's skeleton (the 1-node run's CPU per step, then its allreduce) on the nodes of two of those sweeps, beside
# the workload's own step split (root; builds its own cluster; ~5 minutes each)
measure step-rhythm-eval-frequency python benchmarks/step_rhythm.py 'artifacts/lightrec/nodes-eval-frequency-1gbit-r*' \
    --point k=20 --json
# what a wait does to the compute after it on a node whose CPU is a quota (root; a cgroup of its own, no cluster;
# ~1 minute)
measure quota-wait python benchmarks/quota_wait.py --json
# eval-frequency on 8 nodes of 0.2 core at 1 Gbit/s again, each rank's heartbeat now reading its threads' wait for a
# core and its node's quota throttling (2026-11-27, ~7 minutes a repetition), and its node rows beside that CPU
for repetition in 1 2 3; do
    sweep projection-nodes-cpu-wait-sweeps workbench run eval-frequency --preset ci --backend mpi4py \
        --nodes 1,2,4,8 --cpus-per-node 0.2 --link 1gbit --out artifacts/cpuwait/nodes-eval-frequency-1gbit-r$repetition --json
done
measure projection-nodes-cpu-wait workbench bench projection --nodes --json --sweeps \
    'artifacts/cpuwait/nodes-eval-frequency-1gbit-r*'
# what the heartbeat's read of the threads' wait costs a TensorFlow rank (~5 s)
measure cpu-probe-cost python benchmarks/cpu_probe_cost.py --json
measure step-rhythm-pop-scaling python benchmarks/step_rhythm.py 'artifacts/sleepbatch/nodes-pop-scaling-1gbit-r*' \
    --point weak --steps 60 --json
# the reports the reduced sweeps above wrote, opened in headless Chromium
measure report-open python benchmarks/report_open.py
# the browser test writes its measurements (event -> screen, first figure, redraw in the browser)
measure browser python benchmarks/browser_measurements.py
# the miniature cluster (root; builds its own 4 nodes and takes them down, refuses while one is up; a few minutes)
measure minicluster python benchmarks/minicluster.py --json
# ranks waiting in MPI on the miniature cluster, polling against sleeping (root; its own 8 nodes; ~10 minutes)
measure idle-wait python benchmarks/idle_wait.py --json
# the same on ps-vs-allreduce's nodes and gradients, unshaped (root; ~4 minutes)
measure idle-wait-unshaped python benchmarks/idle_wait.py --nodes 4 --cpus-per-node 0.4 --link unshaped --bytes 87e6 \
    --allreduces 12 --rounds 2 --json
# what recording costs a step on nodes of 0.2 core, 1 to 8 of them (root; its own 8 nodes; ~6 minutes);
# recording-on-quota-before was this command at 882c6da (the recorder before its lighter flushes) with
# --flush-interval 0.25 (the workloads' cadence then): it is kept, not measured again here
measure recording-on-quota python benchmarks/recording_on_quota.py --json
# the allreduce that follows a training step under a node's CPU quota, against rested and back to back
# (root; its own 2, then 8 nodes of 0.2 core at 1 Gbit/s; ~1.5 minutes each)
measure collective-after-compute python benchmarks/collective_after_compute.py --json
measure collective-after-compute-8nodes python benchmarks/collective_after_compute.py --nodes 8 --json
# starting and stopping a local cluster of 1 and 2 ranks, the controller's heartbeat ours and ipyparallel's (~1 minute)
measure cluster-start python benchmarks/cluster_start.py --json
python benchmarks/render_readme.py --write
exit $failed
