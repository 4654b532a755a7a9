# shellcheck shell=bash
# gpu-health as the health check of newer Slurm, and a reboot (issue 23):
# HealthCheckNodeState=START_ONLY (Slurm 25.11 and later) runs
# HealthCheckProgram once, when slurmd starts. A node that comes up with a
# fatal fault is drained before it takes a job; a node gpu-health drained
# until clean that comes up clean returns (those two are skipped before
# 25.11). On every series: a node with a reboot pending is never returned
# by gpu-health.
#
# For START_ONLY the node under test runs its restarted slurmd on a copy
# of the cluster's slurm.conf that differs only in HealthCheckNodeState
# (slurmd reads it for itself; slurmctld does not use it); the cluster's
# own slurmd is restarted again at the end.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

hcs_flag() { printf '%s/etc/health-check.enabled\n' "$GH_DIR"; }

# A slurm.conf for NODE's slurmd with HealthCheckNodeState=START_ONLY.
hcs_conf() {
    local f=$GH_DIR/etc/slurm-start-only.conf
    sed 's/^HealthCheckNodeState=.*/HealthCheckNodeState=START_ONLY/' "$GH_DIR/etc/slurm.conf" >"$f"
    grep -q '^HealthCheckNodeState=START_ONLY$' "$f" || return 1
    printf '%s\n' "$f"
}

hcs_begin() {
    local node=$1
    if ! gh_series_ge "$(gh_series)" 25.11; then
        skip "HealthCheckNodeState=START_ONLY needs Slurm 25.11 or later (this is $(gh_series))"
        return 1
    fi
    : >"$(hcs_flag)"
    # Whatever happens, the node's slurmd runs the cluster's slurm.conf
    # again and the health check is off.
    trap 'rm -f "$(hcs_flag)"; scancel --user=root 2>/dev/null || true; gh_restart_slurmd '"$node"' || true; gh_wait_node_state '"$node"' "idle|idle\+drain|drain" 30 || true' EXIT
}

# hcs_drop_in NODE TOML: extend NODE's drop-in (restored by the reset).
hcs_drop_in() {
    local f
    f=$(gh_dropin "$1")
    [[ -f $f.good ]] || cp "$f" "$f.good"
    printf '%s\n' "$2" >>"$f"
}

# 1. A node that was down (as after a reboot: slurmctld holds it DOWN
#    until its slurmd registers) comes up with a double-bit ECC error: the
#    start-time health check, which slurmd runs before it registers,
#    drains it; a job waiting for it never starts there.
test_start_only_drains_a_faulty_node_before_it_takes_a_job() {
    GH_FOCUS=n4
    local conf job reason
    hcs_begin n4 || return 0
    conf=$(hcs_conf)
    gh_stop_slurmd n4
    scontrol update NodeName=n4 State=DOWN Reason="test: n4 is rebooting"
    job=$(gh_sbatch -w n4 --gres=gpu:8 --wrap 'echo ran-on-$SLURMD_NODENAME')
    gh_set_scenario n4 h100x8-dbe
    gh_restart_slurmd n4 --conf "$conf"
    assert_node_state n4 'idle\+drain|drain' 30 "n4 is drained by its start-time health check"
    reason=$(gh_node_reason n4)
    assert_match "$reason" '^gpu-health: .*(ECC|ecc)' "the reason is gpu-health's and names the ECC fault ($reason)"
    sleep 4
    assert_eq "$(gh_job_field "$job" JobState)" PENDING "job $job, waiting for n4, still waits"
    assert_eq "$(gh_job_field "$job" Restarts)" 0 "job $job never started on n4 (not requeued)"
    assert_not_contains "$(gh_cat "$(gh_gpu_health_log n4)")" "job $job on n4" "no Prolog of job $job ran on n4"
}

# 2. A node gpu-health drained until clean (an Xid 31 at one start) whose
#    next start finds it clean, after the quiet time: returned to service,
#    and a job runs there.
test_start_only_returns_a_clean_node() {
    GH_FOCUS=n4
    local conf
    hcs_begin n4 || return 0
    conf=$(hcs_conf)
    # The quiet time is longer than the drain takes (the brake's claim
    # and look, 1.5 s): another health check can follow the start-time
    # one within a moment (seen on 26.05 as the node registered), and
    # with a shorter quiet time that one returned the node at once.
    hcs_drop_in n4 "[recovery]
quiet_time_s = 6"
    gh_kernel_log_append n4 "$(gh_xid_line 0000:18:00 31 77 'name=python3, MMU Fault: ENGINE GRAPHICS')"
    gh_restart_slurmd n4 --conf "$conf"
    assert_node_state n4 'idle\+drain|drain' 30 "n4 is drained until clean by its start-time health check"
    assert_match "$(gh_node_reason n4)" '^gpu-health: Xid 31 .*drain-until-clean' "for the Xid 31, until clean"
    sleep 7
    gh_restart_slurmd n4 --conf "$conf"
    assert_node_state n4 idle 30 "n4 comes up clean after the quiet time and is returned"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n4)")" "returned to service" "n4's log says it returned"
    gh_sbatch_wait 60 -w n4 --gres=gpu:8 --wrap 'echo ran-on-$SLURMD_NODENAME'
    assert_eq "$GH_JOB_RC" 0 "a job runs on n4 again"
}

# 3. A reboot an admin asked for (`scontrol reboot`) while gpu-health's
#    drain-until-clean drain stands and a job still runs: the node comes
#    clean, but gpu-health leaves it to the reboot (Slurm sets its state
#    after the reboot; 25.11 and later refuse to set a node IDLE while a
#    reboot is pending): it never resumes it, and the reboot stays asked
#    for. On every series.
test_no_return_while_a_reboot_is_pending() {
    GH_FOCUS=n4
    local job state since log
    log=$(gh_gpu_health_log n4)
    since=$(($(wc -c <"$log" 2>/dev/null || echo 0) + 1))
    : >"$(hcs_flag)"
    trap 'scontrol cancel_reboot n4 2>/dev/null || true; rm -f "$(hcs_flag)"; scancel --user=root 2>/dev/null || true' EXIT
    hcs_drop_in n4 "[recovery]
quiet_time_s = 1"
    job=$(gh_sbatch -w n4 --wrap 'sleep 60')
    gh_wait_job_state "$job" RUNNING 30 || true
    gh_kernel_log_append n4 "$(gh_xid_line 0000:18:00 31 77 'name=python3, MMU Fault: ENGINE GRAPHICS')"
    assert_node_state n4 'mix\+drain|alloc\+drain|mixed\+drain|allocated\+drain|draining|drng' 30 "n4 is draining for the Xid 31 while its job runs"
    scontrol reboot n4
    state=$(scontrol -o show node n4 | tr ' ' '\n' | sed -n 's/^State=//p')
    assert_match "$state" 'REBOOT' "the reboot is pending ($state)"
    # Several health checks (every 5 s), each clean after the quiet time.
    sleep 16
    state=$(scontrol -o show node n4 | tr ' ' '\n' | sed -n 's/^State=//p')
    gh_say "    n4 after 16 s of clean health checks with a reboot pending: $state, reason: $(gh_node_reason n4)"
    assert_match "$state" 'REBOOT' "the reboot is still asked for ($state)"
    assert_match "$state" 'DRAIN' "n4 is still drained: gpu-health left it to the reboot ($state)"
    # What n4's log got during this test.
    log=$(tail -c +"$since" "$log")
    assert_not_contains "$log" "returned to service" "gpu-health did not return n4"
    assert_contains "$log" "a reboot of it is pending" "n4's log says it leaves n4 to the reboot"
}
