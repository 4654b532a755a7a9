# shellcheck shell=bash disable=SC2016 # job scripts expand $SLURM_* on the node
# PrologFlags=RunInJob with ConstrainDevices=yes (Slurm 24.05 and later):
# the Prolog and Epilog run inside the job's cgroup, where NVML shows only
# the job's GPUs (nvml-sim, like the driver, leaves out the GPUs whose
# /dev/nvidiaN the device cgroup denies) and numbers them 0..k, while sysfs
# lists all eight. gpu-health must neither drain a healthy node for the
# GPUs it cannot see nor name the wrong GPU in a reason or record.
#
# These tests start a second, one-node cluster of their own
# (ci/slurm-up --run-in-job: cgroup/v1, task/cgroup, RunInJob) next to the
# runner's, and stop it again. They are skipped, with the reason, on 22.05
# and where the machine has no writable cgroup v1 devices hierarchy.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The bus addresses of nvml-sim's eight HGX GPUs, in PCI order.
RIJ_BUSES=(0000:18:00.0 0000:2a:00.0 0000:3a:00.0 0000:5d:00.0 0000:9a:00.0 0000:ab:00.0 0000:ba:00.0 0000:db:00.0)

# rij_cluster_up: start the RunInJob cluster and point this test's helpers
# at it; prints the reason and returns 1 when it cannot run here.
rij_cluster_up() {
    local series
    series=$(slurmd -V | awk '{ print $2 }')
    if [[ $series == 22.05.* ]]; then
        skip "PrologFlags=RunInJob exists from Slurm 24.05 on (this is $series)"
        return 1
    fi
    if ! gh_cgroup_v1_devices; then
        skip "no writable cgroup v1 devices hierarchy at /sys/fs/cgroup/devices: ConstrainDevices cannot work here"
        return 1
    fi
    RIJ_DIR=$GH_DIR.run-in-job
    # On the way out: its logs next to the runner's cluster's (kept with a
    # failed test's logs), then the cluster goes.
    RIJ_LOGS=$GH_DIR/log/run-in-job
    trap rij_cluster_down EXIT
    "$GH_REPO/ci/slurm-up" --nodes 1 --run-in-job --dir "$RIJ_DIR" >/dev/null
    gh_set_dir "$RIJ_DIR"
    gh_use_cluster
    # What sysfs shows on an 8-GPU node (the Prolog's own view of the PCI
    # bus does not depend on the cgroup).
    local bus
    for bus in "${RIJ_BUSES[@]}"; do
        mkdir -p "$RIJ_DIR/pci-sysfs/bus/pci/devices/$bus"
        printf '0x10de\n' >"$RIJ_DIR/pci-sysfs/bus/pci/devices/$bus/vendor"
        printf '0x030200\n' >"$RIJ_DIR/pci-sysfs/bus/pci/devices/$bus/class"
    done
    printf 'sysfs_root = "%s/pci-sysfs"\n' "$RIJ_DIR" >>"$(gh_dropin n1)"
    gh_wait_node_state n1 idle 60
}

# Jobs first (their steps end while slurmd still runs), then the cluster.
rij_cluster_down() {
    local deadline=$((SECONDS + 30))
    scancel --user=root 2>/dev/null || true
    while [[ -n $(squeue -h -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.3; done
    cp -r "$RIJ_DIR/log" "$RIJ_LOGS" 2>/dev/null || true
    "$GH_REPO/ci/slurm-down" --dir "$RIJ_DIR" >/dev/null || true
}

# The record of JOB written by the Epilog, as "index=pci ..." of its GPUs.
rij_record_gpus() {
    local job=$1 deadline=$((SECONDS + 20)) out=""
    while ((SECONDS < deadline)); do
        out=$(cat "$RIJ_DIR"/records/* 2>/dev/null | python3 -c '
import json, sys
job = sys.argv[1]
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if str(r.get("job_id")) == job:
        print(" ".join("%d=%s" % (g["index"], g["pci"]) for g in r["gpus"]))
' "$job" 2>/dev/null) || out=""
        [[ -n $out ]] && break
        sleep 0.5
    done
    printf '%s\n' "$out"
}

# 1. A job on GPUs 4,5 of a node whose GPU3 has a double-bit ECC error:
#    its Prolog sees only GPUs 4 and 5, does not drain the node for the six
#    it cannot see, says so in its log, and the Epilog's record names the
#    job's GPUs by the node's numbers and bus addresses. Then a job on
#    GPUs 2,3: its Prolog sees GPU3's error and drains the node, naming
#    GPU3 by the node's number and address (NVML calls it GPU1 there).
test_run_in_job_prolog_judges_the_jobs_gpus() {
    rij_cluster_up || return 0
    GH_FOCUS=n1
    local hold job
    # GPUs 0-3 taken while the node is healthy, so the next job gets 4,5.
    hold=$(gh_sbatch -w n1 --gres=gpu:4 --wrap 'sleep 300')
    gh_wait_job_state "$hold" RUNNING 60
    gh_set_scenario n1 h100x8-dbe
    gh_sbatch_wait 90 -w n1 --gres=gpu:2 --wrap 'echo "gpus=$SLURM_JOB_GPUS"'
    job=$GH_JOB
    assert_eq "$GH_JOB_RC" 0 "the job on GPUs 4,5 runs although GPU3 has an uncorrectable ECC error"
    assert_contains "$(gh_cat "$(gh_job_out "$job")")" "gpus=4,5" "the job got GPUs 4 and 5"
    assert_not_contains "$(gh_node_state n1)" drain "the Prolog that sees only GPUs 4,5 does not drain n1"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "NVML sees only the job's 2 of the node's 8 GPUs" \
        "the Prolog logs that it saw only the job's 2 of the node's 8 GPUs"
    assert_eq "$(rij_record_gpus "$job")" "4=${RIJ_BUSES[4]} 5=${RIJ_BUSES[5]}" \
        "the Epilog's record names GPUs 4 and 5 by the node's numbers and addresses"

    # The hold job's Epilog sees the error that appeared on its GPU3 while
    # it ran, and drains: back to a healthy, idle node first.
    scancel "$hold"
    gh_wait_job_state "$hold" 'CANCELLED|COMPLETED' 60
    gh_set_scenario n1 h100x8-healthy
    gh_wait_node_state n1 '[a-z]+\+drain' 20 || true
    assert_match "$(gh_node_reason n1)" '^gpu-health: .*GPU3 0000:5d:00\.0' \
        "the Epilog of the job on GPUs 0-3 drains for the error that hit its GPU3"
    gh_resume_node n1
    gh_wait_node_state n1 idle 30

    # Now GPUs 0,1 taken: the next job gets 2,3.
    hold=$(gh_sbatch -w n1 --gres=gpu:2 --wrap 'sleep 300')
    gh_wait_job_state "$hold" RUNNING 60
    gh_set_scenario n1 h100x8-dbe
    job=$(gh_sbatch -w n1 --gres=gpu:2 --wrap 'true')
    gh_wait_node_state n1 '[a-z]+\+drain' 60 || true
    assert_match "$(gh_node_reason n1)" '^gpu-health: .*GPU3 0000:5d:00\.0' \
        "the Prolog of the job on GPUs 2,3 drains for GPU3, named by the node's number and address"
    scancel "$job" "$hold" || true
}
