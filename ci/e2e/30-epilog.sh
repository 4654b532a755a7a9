# shellcheck shell=bash disable=SC2016 # job scripts expand $SLURM_* on the node
# End-to-end tests of the gpu-health Epilog and `gpu-health report`
# (issue 6). Run by ci/e2e/run, which resets the cluster before each
# test_* function. The records directory ($GH_DIR/records) is shared by
# all nodes, as on a cluster with a shared file system.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# gpu-health report with the cluster's configuration.
gh_report() {
    GPU_HEALTH_CONFIG=$GH_DIR/etc/gpu-health.toml "$GH_BIN_DIR/gpu-health" report "$@"
}

# wait_records JOB NODES TIMEOUT_S: until the report of JOB lists NODES
# nodes (the Epilog runs after the job's end, sbatch --wait may return
# first). Prints the report's JSON.
wait_records() {
    local job=$1 want=$2 deadline=$((SECONDS + ${3:-30})) out=""
    while ((SECONDS < deadline)); do
        out=$(gh_report --job "$job" --json 2>/dev/null) || out=""
        if [[ -n $out ]] && [[ $(printf '%s' "$out" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(len(j[0]["nodes"]) if j else 0)') -ge $want ]]; then
            break
        fi
        sleep 0.5
    done
    printf '%s\n' "$out"
}

# 1. A 2-node job: the report shows both nodes' 16 GPUs with positive
#    energy and the scenario's peak memory (the scenario's processes
#    start 5 s before each query: the job runs longer than that).
test_two_node_job_energy_and_peak_memory() {
    GH_FOCUS="n1 n2"
    gh_sbatch_wait 120 -N2 -w n1,n2 --gres=gpu:8 --wrap "sleep 7"
    assert_eq "$GH_JOB_RC" 0 "2-node job exits 0"
    local report check
    report=$(wait_records "$GH_JOB" 2 30)
    check=$(printf '%s' "$report" | python3 -c '
import json, sys
scenario = json.load(open(sys.argv[1]))
peaks = [g["accounting"]["processes"][0]["max_memory_bytes"] for g in scenario["gpus"]]
jobs = json.load(sys.stdin)
j = jobs[0]
bad = []
if sorted(j["nodes"]) != ["n1", "n2"]: bad.append("nodes %s" % j["nodes"])
if len(j["gpus"]) != 16: bad.append("%d GPUs" % len(j["gpus"]))
for g in j["gpus"]:
    if not (g["energy_j"] or 0) > 0: bad.append("%s GPU%d energy %s (%s)" % (g["node"], g["index"], g["energy_j"], g["energy_absent_reason"]))
    if g["peak_memory_bytes"] != peaks[g["index"]]: bad.append("%s GPU%d peak %s (%s)" % (g["node"], g["index"], g["peak_memory_bytes"], g["peak_memory_absent_reason"]))
if not j["energy_j"] > 0: bad.append("job energy %s" % j["energy_j"])
if j["peak_memory_bytes"] != max(peaks): bad.append("job peak %s" % j["peak_memory_bytes"])
print("; ".join(bad) or "ok")
' "$GH_SCENARIO_DIR/h100x8-healthy.json" 2>&1)
    assert_eq "$check" ok "report --job $GH_JOB --json: both nodes' GPUs with energy and the scenario's peak memory"
    assert_contains "$(gh_report --job "$GH_JOB")" "$GH_JOB" "table report names the job"
    local node
    for node in n1 n2; do
        local left
        left=$(compgen -G "$GH_DIR/$node/state/jobs/$GH_JOB.*" || true)
        assert_eq "$left" "" "$node removed the state files of job $GH_JOB"
        assert_eq "$(gh_node_state "$node")" idle "$node is idle after the job"
    done
}

# 2. Eight single-GPU jobs ending at the same moment on one node leave
#    eight intact records.
test_eight_jobs_ending_together() {
    GH_FOCUS="n1"
    local jobs=() job end
    end=$(($(date +%s) + 8))
    for _ in 1 2 3 4 5 6 7 8; do
        # Each sleeps until the same wall-clock second.
        jobs+=("$(gh_sbatch -N1 -w n1 --gres=gpu:1 --wrap "sleep \$(( $end - \$(date +%s) ))")")
    done
    for job in "${jobs[@]}"; do
        gh_wait_job_state "$job" COMPLETED 90 || true
    done
    local ok=0
    for job in "${jobs[@]}"; do
        if [[ $(wait_records "$job" 1 20 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(len(j[0]["gpus"]) if j else 0)' 2>/dev/null) == 1 ]]; then
            ok=$((ok + 1))
        fi
    done
    assert_eq "$ok" 8 "eight jobs ending together: eight records of one GPU each"
    local malformed
    malformed=$(gh_report 2>&1 >/dev/null | grep -c malformed || true)
    assert_eq "$malformed" 0 "no malformed lines in the records file"
}

# 3. An Xid 79 on a GPU of a running job: the Epilog drains the node with a
#    gpu-health reason naming the job and the GPU, and the record lists it.
test_xid79_during_job_drains_in_epilog() {
    GH_FOCUS="n2"
    local job reason
    job=$(gh_sbatch -N1 -w n2 --gres=gpu:8 --wrap "sleep 4")
    gh_wait_job_state "$job" RUNNING 60
    sleep 1
    gh_kernel_log_append n2 "$(gh_xid_line 0000:18:00 79 4242 'GPU has fallen off the bus.')"
    gh_wait_job_state "$job" 'COMPLETED|COMPLETING' 60 || true
    gh_wait_node_state n2 '.*drain' 30 || true
    reason=$(gh_node_reason n2)
    assert_contains "$reason" "gpu-health: Xid 79 during job $job GPU0 0000:18:00.0" "n2 drained by the epilog with the job and GPU in the reason"
    local drained
    drained=$(wait_records "$job" 1 20 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j[0]["xid_events"], j[0]["drained"])' 2>/dev/null)
    assert_contains "$drained" "Xid 79 during job $job" "the job's record lists the Xid and the drain"
}

# Issue 16. MIG: on a node whose GPUs 0-3 are in MIG mode a job runs, the
#    node is not drained, and its record marks those GPUs `mig` with the
#    whole GPU's energy and no peak memory, saying why; GPUs 4-7 are
#    measured as usual.
test_mig_gpus_recorded_without_invented_figures() {
    GH_FOCUS="n1"
    gh_set_scenario n1 h100x8-mig
    gh_sbatch_wait 60 -w n1 --gres=gpu:8 --wrap 'sleep 6'
    assert_eq "$GH_JOB_RC" 0 "a job on the MIG node runs"
    local check
    check=$(wait_records "$GH_JOB" 1 30 | python3 -c '
import json, sys
j = json.load(sys.stdin)[0]
bad = []
for g in j["gpus"]:
    mig = g["index"] < 4
    if g.get("mig", False) != mig: bad.append("GPU%d mig %s" % (g["index"], g.get("mig")))
    if not (g["energy_j"] or 0) > 0: bad.append("GPU%d energy %s" % (g["index"], g["energy_j"]))
    if mig and (g["peak_memory_bytes"] is not None or not (g["peak_memory_absent_reason"] or "").startswith("MIG mode")):
        bad.append("GPU%d peak %s (%s)" % (g["index"], g["peak_memory_bytes"], g["peak_memory_absent_reason"]))
    if not mig and g["peak_memory_bytes"] is None: bad.append("GPU%d no peak" % g["index"])
print("; ".join(bad) or "ok")' 2>&1)
    assert_eq "$check" ok "GPUs 0-3 marked MIG with energy and a reason for no peak memory; 4-7 measured"
    assert_eq "$(gh_node_state n1)" idle "n1 is not drained"
}
