# shellcheck shell=bash
# End-to-end tests of the kernel log as real nodes write it (issue 12): a
# lost GPU logged only as the driver's multi-line message (one kernel
# record, printed by dmesg with indented continuation lines), cut by a
# scan, drains the node; an Xid line anyone could have written to a syslog
# file warns and refuses strict jobs but never drains. Run by ci/e2e/run.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The node's dmesg-style stamp for now.
now_stamp() { awk '{ printf "[%12.6f]", $1 }' /proc/uptime; }

# 1. The lost-GPU message without an Xid number, its header written before
#    a job and the rest after: the first job runs (nothing to judge yet),
#    the next one finds the whole record and n2 drains for Xid 79 on that
#    GPU.
test_lost_gpu_multiline_message_drains() {
    GH_FOCUS=n2
    local stamp pad job reason
    stamp=$(now_stamp)
    pad=$(printf '%*s' $((${#stamp} + 1)) '')
    gh_kernel_log_append n2 "$stamp NVRM: The NVIDIA GPU 0000:5d:00.0"
    gh_sbatch_wait 90 -w n2 --gres=gpu:8 --wrap 'echo ran on $SLURMD_NODENAME'
    assert_eq "$GH_JOB_RC" 0 "a job runs on n2 while only the message's first line is written"
    assert_eq "$(gh_node_state n2)" idle "n2 is not drained for a header alone"
    gh_kernel_log_append n2 \
        "${pad}NVRM: (PCI ID: 10de:2330) installed in this system has" \
        "${pad}NVRM: fallen off the bus and is not responding to commands."
    job=$(gh_sbatch -w n2 --gres=gpu:8 --wrap 'echo ran on $SLURMD_NODENAME')
    assert_node_state n2 'idle\+drain|drain|mix\+drain|alloc\+drain' 30 "n2 drains once the whole record is there"
    reason=$(gh_node_reason n2)
    assert_match "$reason" '^gpu-health: Xid 79 GPU[0-9]+ 0000:5d:00.0 fallen off the bus \(drain\)$' \
        "n2's reason names Xid 79, the GPU and its address ($reason)"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n2)")" "fallen off the bus" "n2's log has the finding"
    scancel "$job" 2>/dev/null || true
}

# 2. A syslog-format Xid 79 line (what `logger -t kernel` makes rsyslog
#    write) in n1's kernel log: n1 stays in service, a warn job runs and is
#    told, a strict job is refused with the reason.
test_forgeable_syslog_line_warns_never_drains() {
    GH_FOCUS=n1
    local out
    gh_kernel_log_append n1 "$(date -u '+%b %e %H:%M:%S') n1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=4242, GPU has fallen off the bus."
    gh_sbatch_wait 90 -w n1 --gres=gpu:8 --gpu-health=strict --wrap 'echo job-ran'
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_match "$GH_JOB_RC" '^[1-9]' "a strict job on n1 is refused"
    assert_contains "$out" "Xid 79" "the refusal names the Xid"
    assert_contains "$out" "syslog_may_drain" "and says why it did not drain"
    assert_not_contains "$out" "4242" "another user's pid is not shown to the job"
    assert_eq "$(gh_node_state n1)" idle "n1 is not drained by a line any user could write"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "pid 4242" "the pid is in the node's log"
}
