# shellcheck shell=bash disable=SC2016 # job scripts expand $SLURM_* on the node
# End-to-end tests of the gpu-health Prolog (issue 4). Run by ci/e2e/run,
# which resets the cluster before each test_* function: all nodes idle,
# healthy scenario, empty kernel logs and state, good drop-ins.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# Value of a top-level key of a JSON file, compact JSON.
json_get() {
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get(sys.argv[2]), separators=(",", ":")))' "$1" "$2" 2>/dev/null || echo "<unreadable>"
}

# Epoch seconds of the first line of a Slurm log matching an extended regex.
log_time() {
    local stamp
    stamp=$(grep -m1 -E "$2" "$1" 2>/dev/null | sed -n 's/^\[\([^]]*\)\].*/\1/p')
    [[ -n $stamp ]] && date -d "$stamp" +%s.%N
    return 0
}

# Last node of the cluster other than n1/n2 when there is one.
spare_node() {
    local n
    n=$(gh_node_count)
    if ((n >= 3)); then printf 'n%d\n' "$n"; else printf 'n2\n'; fi
}

# All nodes except the ones given, as a comma list for --exclude.
others_than() {
    local keep=" $* " node out=()
    for node in $(gh_nodes); do [[ $keep == *" $node "* ]] || out+=("$node"); done
    local IFS=,
    printf '%s\n' "${out[*]}"
}

# 1. A healthy 2-node job runs; the prolog saw SLURM_JOB_GPUS on each node
#    and wrote the job's verdict there (copied by the job while it runs:
#    the epilog may clean the state afterwards).
test_healthy_two_node_job() {
    GH_FOCUS="n1 n2"
    local verdicts=$GH_DIR/jobs/verdicts
    mkdir -p "$verdicts"
    gh_sbatch_wait 120 -N2 -w n1,n2 --gres=gpu:8 --wrap \
        "srun -N2 --ntasks-per-node=1 bash -c 'cp $GH_DIR/\$SLURMD_NODENAME/state/jobs/\$SLURM_JOB_ID.json $verdicts/\$SLURM_JOB_ID-\$SLURMD_NODENAME.json'"
    assert_eq "$GH_JOB_RC" 0 "2-node GPU job (sbatch -N2 --gres=gpu:8 --wait) exits 0"
    assert_eq "$(gh_job_field "$GH_JOB" JobState)" COMPLETED "job $GH_JOB completed"
    assert_eq "$(gh_job_field "$GH_JOB" Restarts)" 0 "job $GH_JOB was not requeued"
    local node v
    for node in n1 n2; do
        v=$verdicts/$GH_JOB-$node.json
        assert_file "$v" "$node wrote the verdict of job $GH_JOB"
        [[ -f $v ]] || continue
        assert_eq "$(json_get "$v" job_id)" "\"$GH_JOB\"" "$node verdict names job $GH_JOB"
        assert_eq "$(json_get "$v" node)" "\"$node\"" "$node verdict names the node"
        assert_eq "$(json_get "$v" job_gpus)" "[0,1,2,3,4,5,6,7]" "SLURM_JOB_GPUS reached the prolog on $node"
        assert_eq "$(json_get "$v" config_error)" null "$node read its configuration without error"
        assert_eq "$(gh_node_state "$node")" idle "$node is idle after the job"
    done
}

# 2. An Xid 79 in n2's kernel log: the next job landing on n2 is requeued,
#    n2 is drained with a gpu-health reason naming Xid 79 and the GPU, and
#    the job then runs on n1.
test_xid79_on_n2_requeues_job_onto_n1() {
    GH_FOCUS="n1 n2"
    local blocker job reason others
    # Hold n1 so that the job lands on n2 first; everything but n1/n2 is
    # excluded so that it can only go to n1 afterwards.
    others=$(others_than n1 n2)
    blocker=$(gh_sbatch -w n1 --gres=gpu:8 --wrap 'sleep 600')
    gh_wait_job_state "$blocker" RUNNING 30
    gh_kernel_log_append n2 "$(gh_xid_line 0000:5d:00 79 2210 'GPU has fallen off the bus.')"
    job=$(gh_sbatch -N1 --gres=gpu:8 ${others:+--exclude=$others} --wrap 'echo ran on $SLURMD_NODENAME')
    assert_node_state n2 'idle\+drain|drain|mix\+drain|alloc\+drain' 30 "n2 is drained after the Xid 79"
    reason=$(gh_node_reason n2)
    assert_match "$reason" '^gpu-health: ' "n2's reason is gpu-health's, not Slurm's 'Prolog error'"
    assert_match "$reason" 'Xid 79' "n2's reason names Xid 79"
    assert_match "$reason" 'GPU[0-9]+' "n2's reason names the GPU"
    assert_contains "$reason" "0000:5d:00" "n2's reason names the GPU's PCI address"
    assert_contains "$(sinfo -R -h -o '%120E %N')" "Xid 79" "sinfo -R shows the reason"
    assert_contains "$(sinfo -R -h -o '%120E %N')" "(drain)" "sinfo -R at the docs' width shows the kind"
    local deadline=$((SECONDS + 30))
    while (($(gh_job_field "$job" Restarts) < 1 && SECONDS < deadline)); do sleep 0.5; done
    assert_match "$(gh_job_field "$job" Restarts)" '^[1-9]' "job $job was requeued by Slurm"
    scancel "$blocker"
    assert_job_state "$job" COMPLETED 90 "requeued job $job completed"
    assert_eq "$(gh_job_field "$job" NodeList)" n1 "requeued job $job ran on n1"
    assert_contains "$(gh_cat "$(gh_job_out "$job")")" "ran on n1" "job output says it ran on n1"
    assert_match "$(gh_node_state n2)" 'drain' "n2 stays drained"
}

# 2b. n2's state directory writable by others (so neither read nor
#     written): an Xid 79 still drains n2 with the drain brake on, as
#     shipped; the claim the run cannot write down is made all the same.
test_xid79_drains_with_an_unusable_state_dir() {
    GH_FOCUS="n2"
    local job
    chmod 0777 "$GH_DIR/n2/state" # the cluster reset makes it again
    gh_kernel_log_append n2 "$(gh_xid_line 0000:5d:00 79 2210 'GPU has fallen off the bus.')"
    job=$(gh_sbatch -w n2 --gres=gpu:8 --wrap 'echo ran')
    assert_node_state n2 'idle\+drain|drain|mix\+drain|alloc\+drain' 30 "n2 is drained after the Xid 79"
    assert_match "$(gh_node_reason n2)" '^gpu-health: Xid 79 GPU3' "n2's reason is gpu-health's and names the Xid and GPU"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n2)")" "cannot be written down" "the log says the claim was not written down"
    scancel "$job" 2>/dev/null || true
}

# 3. n1 switched to a double-bit ECC scenario: drained, reason names GPU3
#    and ECC.
test_dbe_on_n1_drains_naming_gpu3_and_ecc() {
    GH_FOCUS=n1
    local job reason
    gh_set_scenario n1 h100x8-dbe
    job=$(gh_sbatch -w n1 --gres=gpu:8 --wrap 'echo ran on $SLURMD_NODENAME')
    assert_node_state n1 'idle\+drain|drain' 30 "n1 is drained with the double-bit ECC scenario"
    reason=$(gh_node_reason n1)
    assert_match "$reason" '^gpu-health: ' "n1's reason is gpu-health's"
    assert_match "$reason" 'GPU ?3([^0-9]|$)' "n1's reason names GPU3"
    assert_contains "$reason" "ECC" "n1's reason names ECC"
    assert_not_contains "$(gh_cat "$(gh_job_out "$job")")" "ran on" "the job did not run on the faulty node"
    scancel "$job" || true
}

# 4. NVML hangs: the prolog gives up at its deadline, drains the node with
#    the NVML-timeout reason, slurmd keeps working.
test_nvml_hang_bounded_and_drained() {
    local node deadline_ms t_submit job t_fail elapsed reason
    node=$(spare_node)
    GH_FOCUS=$node
    deadline_ms=$(sed -n 's/^nvml_deadline_ms *= *\([0-9]*\).*/\1/p' "$GH_DIR/etc/gpu-health.toml")
    gh_set_scenario "$node" nvml-hang
    t_submit=$(date +%s.%N)
    job=$(gh_sbatch -w "$node" --gres=gpu:8 --wrap 'echo ran')
    assert_node_state "$node" 'idle\+drain|drain' 30 "$node is drained when NVML hangs"
    reason=$(gh_node_reason "$node")
    assert_match "$reason" '^gpu-health: ' "$node's reason is gpu-health's"
    assert_contains "$reason" "NVML did not answer in $deadline_ms ms" "$node's reason says NVML timed out"
    # slurmctld logs the allocation (the prolog starts right after it) and
    # slurmd the failed prolog, both with milliseconds: the difference
    # bounds the prolog's run time from above. The margin covers the drain
    # itself: the brake's claim, its wait (claim_timeout_ms + settle_ms,
    # 1.5 s), one look and the drain.
    local t_alloc deadline=$((SECONDS + 20))
    while :; do
        t_alloc=$(log_time "$(gh_slurmctld_log)" "(Allocate|Started) JobId=$job ")
        # 26.05 logs no allocation line at info level: the prolog RPC's
        # arrival at slurmd (debug level, which the test cluster has).
        [[ -n $t_alloc ]] || t_alloc=$(log_time "$(gh_slurmd_log "$node")" "_rpc_prolog: starting for JobId=$job ")
        # "[job N] prolog failed" up to 25.x, "JobId=N SLUID=... prolog failed" on 26.05.
        t_fail=$(log_time "$(gh_slurmd_log "$node")" "(\\[job $job\\]|JobId=$job ).*prolog failed")
        [[ -n $t_alloc && -n $t_fail ]] && break
        ((SECONDS < deadline)) || break
        sleep 0.5
    done
    if [[ -n $t_alloc && -n $t_fail ]]; then
        elapsed=$(awk -v a="$t_fail" -v b="$t_alloc" 'BEGIN { printf "%.2f", a - b }')
        printf '    prolog failed %s s after the allocation, %s s after sbatch (deadline %s ms)\n' \
            "$elapsed" "$(awk -v a="$t_fail" -v b="$t_submit" 'BEGIN { printf "%.2f", a - b }')" "$deadline_ms"
        assert_le "$elapsed" "$(awk -v d="$deadline_ms" 'BEGIN { print d / 1000 + 3 }')" \
            "prolog returned within the NVML deadline plus 3 s"
    else
        fail "no allocation line in slurmctld's log or no 'prolog failed' line in $node's slurmd log for job $job"
    fi
    scancel "$job" || true
    assert_ok "slurmctld answers (scontrol ping)" scontrol ping
    # Nothing of the hung probe is left behind.
    sleep 1
    assert_eq "$(gh_cluster_prologs | wc -l)" 0 "no prolog process left running"
    # The node's slurmd still works: a healthy GPU again, resumed, a job runs.
    gh_set_scenario "$node" h100x8-healthy
    gh_resume_node "$node"
    gh_sbatch_wait 60 -w "$node" --gres=gpu:8 --wrap 'echo ran on $SLURMD_NODENAME'
    assert_eq "$GH_JOB_RC" 0 "$node's slurmd runs a job after the hang"
}

# 5. A malformed per-node configuration: jobs still run there, the node is
#    not drained, and the error is in the node's gpu-health log.
test_malformed_config_runs_jobs_without_drain() {
    local node
    node=$(spare_node)
    GH_FOCUS=$node
    gh_break_dropin "$node"
    gh_sbatch_wait 60 -w "$node" --gres=gpu:8 --wrap 'echo ran on $SLURMD_NODENAME'
    assert_eq "$GH_JOB_RC" 0 "a job runs on $node despite its malformed configuration"
    assert_eq "$(gh_job_field "$GH_JOB" Restarts)" 0 "the job was not requeued"
    assert_eq "$(gh_node_state "$node")" idle "$node is not drained"
    assert_contains "$(gh_cat "$(gh_gpu_health_log "$node")")" "gpu-health.d/$node.toml" \
        "the node's gpu-health log names the malformed file"
}

# Issue 16. An HGX node whose NVSwitch fabric registration never started
#    (nvidia-fabricmanager down) looks healthy in every counter but fails
#    every CUDA job: the Prolog drains it until clean, naming the fabric.
test_fabric_not_ready_drains_until_clean() {
    GH_FOCUS="n1"
    local job reason
    gh_set_scenario n1 h100x8-fabric-not-ready
    job=$(gh_sbatch -w n1 --gres=gpu:8 --wrap 'echo ran')
    assert_node_state n1 'idle\+drain|drain' 30 "n1 is drained when its GPUs' fabric is not ready"
    reason=$(gh_node_reason n1)
    assert_contains "$reason" "gpu-health: fabric not ready GPU0 0000:18:00.0 (not started)" "the reason names the fabric and the GPU"
    assert_match "$reason" '\(drain-until-clean\)$' "it clears itself once the fabric registers"
    scancel "$job"
}

# Issue 16. NVML's persistent recovery action says "node reboot" on GPU4
#    while the kernel log holds no Xid 154: the node drains for an admin.
test_recovery_action_drains_without_xid154() {
    GH_FOCUS="n1"
    local job reason
    gh_set_scenario n1 h100x8-recovery-reboot
    job=$(gh_sbatch -w n1 --gres=gpu:8 --wrap 'echo ran')
    assert_node_state n1 'idle\+drain|drain' 30 "n1 is drained for the recovery action"
    reason=$(gh_node_reason n1)
    assert_eq "$reason" "gpu-health: recovery action GPU4 0000:9a:00.0: node reboot (drain)" "the reason names the GPU and the action"
    scancel "$job"
}

# Issue 16. An earlier job's process still holds 30 GiB on GPU2 at job
#    start: a warn job runs and is told (without the pid, which the node's
#    log has), a strict job is refused, a job on GPUs 0-1 hears nothing,
#    and the node stays in service.
test_leftovers_warn_and_refuse_strict() {
    GH_FOCUS="n1"
    local out
    gh_set_scenario n1 h100x8-leftovers
    gh_sbatch_wait 60 -w n1 --gres=gpu:8 --wrap 'echo job-ran'
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_eq "$GH_JOB_RC" 0 "warn job $GH_JOB runs"
    assert_contains "$out" "job-ran" "its script ran"
    assert_contains "$out" "GPU2 0000:3a:00.0 at job start: 1 process(es) still running, holding 30.0 GiB" "the user is told what is left on GPU2"
    assert_contains "$out" "[leftovers]" "naming the check"
    assert_not_contains "$out" "52000" "not the other job's pid"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "pid 52000" "the node's log has the pid"
    gh_sbatch_wait 60 -w n1 --gres=gpu:8 --gpu-health=strict --wrap 'echo job-ran'
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_match "$GH_JOB_RC" '^[1-9]' "a strict job is refused"
    assert_contains "$out" "strict mode refuses this step" "and told why"
    gh_sbatch_wait 60 -w n1 --gres=gpu:2 --gpu-health=strict --wrap 'echo job-ran'
    assert_eq "$GH_JOB_RC" 0 "a strict job on GPUs 0-1 runs"
    assert_not_contains "$(gh_cat "$(gh_job_out "$GH_JOB")")" "leftovers" "and hears nothing of GPU2"
    assert_eq "$(gh_node_state n1)" idle "n1 stays in service"
}

# Issue 16. NVLink by design: links down since the first look after boot
#    (boards that expose unused links) do not hold back a strict job; a
#    link that was up earlier in this boot and is down now does.
test_nvlink_down_since_boot_is_not_a_warning() {
    GH_FOCUS="n1 n2"
    gh_set_scenario n1 h100x8-nvlink-down
    gh_sbatch_wait 60 -w n1 --gres=gpu:8 --gpu-health=strict --wrap 'echo job-ran'
    assert_eq "$GH_JOB_RC" 0 "a strict job runs on n1, whose links were never up since boot"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "have not been active since boot" "n1's log has them on record"
    gh_sbatch_wait 60 -w n2 --gres=gpu:8 --wrap 'echo job-ran'
    assert_eq "$GH_JOB_RC" 0 "a job on n2 sees every link up"
    gh_set_scenario n2 h100x8-nvlink-down
    gh_sbatch_wait 60 -w n2 --gres=gpu:8 --gpu-health=strict --wrap 'echo job-ran'
    assert_match "$GH_JOB_RC" '^[1-9]' "then with links down a strict job on n2 is refused"
    assert_contains "$(gh_cat "$(gh_job_out "$GH_JOB")")" "went down since boot" "naming the links that went down"
    assert_eq "$(gh_node_state n2)" idle "n2 stays in service"
}
