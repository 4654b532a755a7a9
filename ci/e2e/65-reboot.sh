# shellcheck shell=bash
# Reboot through Slurm by policy (issue 26): with `[remediation] reboot =
# true`, a node drained for a fault a reboot clears (Xid 79) is handed to
# `scontrol reboot ASAP nextstate=RESUME` with a `(reboot)` reason; after
# the reboot it returns and takes the job that waited for it. (A fault
# back after every reboot ends in `(hardware inspection)`: tested through
# the prolog binary in prolog/tests/reboot.rs.)
#
# The test cluster's RebootProgram only notes the request. The test then
# "reboots" the node as a real one would come back: a new boot id in the
# file gpu-health reads for it (`xid.boot_id_path`), an empty kernel log,
# and its slurmd started again in a time namespace whose boot clock says
# it booted a moment ago, so that slurmctld sees a boot later than its
# reboot request and applies nextstate.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

rb_boot_id() { printf '%s/%s/boot_id\n' "$GH_DIR" "$1"; }

# rb_begin NODE: reboots on for NODE (its own boot id file); whatever
# happens, no reboot of it stays asked for.
rb_begin() {
    local node=$1 f
    if ! command -v unshare >/dev/null || [[ ! -e /proc/self/ns/time ]]; then
        skip "a reboot needs unshare --time (util-linux, Linux 5.6+)"
        return 1
    fi
    cat /proc/sys/kernel/random/uuid >"$(rb_boot_id "$node")"
    f=$(gh_dropin "$node")
    [[ -f $f.good ]] || cp "$f" "$f.good"
    printf '[remediation]\nreboot = true\n[xid]\nboot_id_path = "%s"\n' "$(rb_boot_id "$node")" >>"$f"
    RB_BASE=$(rb_reboot_lines)
    trap 'scontrol cancel_reboot '"$node"' 2>/dev/null || true; scancel --user=root 2>/dev/null || true' EXIT
}

# rb_reboot_count: times Slurm ran the RebootProgram since rb_begin (it
# runs without the node's name; only the node under test reboots).
rb_reboot_count() { printf '%s\n' "$(($(rb_reboot_lines) - RB_BASE))"; }

rb_reboot_lines() { { wc -l <"$GH_DIR/log/reboot.log"; } 2>/dev/null || echo 0; }

# rb_wait_reboot_asked N TIMEOUT_S: until Slurm ran the RebootProgram N
# times since rb_begin.
rb_wait_reboot_asked() {
    local n=$1 deadline=$((SECONDS + $2))
    until (($(rb_reboot_count) >= n)); do
        ((SECONDS >= deadline)) && return 1
        sleep 0.5
    done
}

# rb_come_back NODE: the node as it comes back from a reboot: a new boot
# id, the kernel log of the new boot (empty), its slurmd started again
# with a boot clock that says it booted a second ago.
rb_come_back() {
    local node=$1 pidf up i
    # A reboot takes a while: slurmctld takes a boot for the reboot only
    # when it came after the request (by whole seconds), and the new boot
    # clock below says the node booted up to 2 s before its slurmd starts.
    sleep 3
    pidf=$GH_DIR/run/slurmd-$node.pid
    cat /proc/sys/kernel/random/uuid >"$(rb_boot_id "$node")"
    : >"$(gh_kernel_log "$node")"
    gh_stop_slurmd "$node"
    up=$(awk '{ printf "%d", $1 }' /proc/uptime)
    env -u SLURM_CONF "GPU_HEALTH_HARNESS_DIR=$GH_DIR" \
        unshare --time --boottime "-$((up - 1))" slurmd -f "$GH_DIR/etc/slurm.conf" -N "$node" || return 1
    for ((i = 0; i < 100; i++)); do
        [[ -s $pidf ]] && break
        sleep 0.1
    done
    [[ -s $pidf ]] || return 1
    gh_state_put slurmd_pid "$(cat "$pidf")"
}

rb_xid79() {
    gh_kernel_log_append "$1" "$(gh_xid_line 0000:5d:00 79 0 'GPU has fallen off the bus.')"
}

# 1. Xid 79 before a job that waits for the node: the Prolog drains it
#    with a `(reboot)` reason and asks Slurm for the reboot; Slurm runs the
#    RebootProgram once the node is idle; the node comes back clean,
#    Slurm returns it, and the requeued job runs there.
test_xid79_reboots_the_node_and_the_job_runs_after() {
    GH_FOCUS=n3
    local job reason log t0 rc
    rb_begin n3 || return 0
    rb_xid79 n3
    t0=$SECONDS
    job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap 'echo ran-on-$SLURMD_NODENAME')
    assert_node_state n3 '.*drain.*|down.*|.*reboot.*' 30 "n3 is drained for the Xid 79"
    reason=$(gh_node_reason n3)
    # Slurm adds " : reboot issued" once it has handed the reboot on.
    assert_match "$reason" '^gpu-health: Xid 79 .*\(reboot\)( : reboot issued)?$' "the reason says the reboot ($reason)"
    rc=0
    rb_wait_reboot_asked 1 60 || rc=$?
    assert_eq "$rc" 0 "Slurm ran the RebootProgram for n3"
    gh_say "    reboot asked $((SECONDS - t0)) s after the job was submitted; state $(scontrol -o show node n3 | tr ' ' '\n' | sed -n 's/^State=//p')"
    rc=0
    rb_come_back n3 || rc=$?
    assert_eq "$rc" 0 "n3's slurmd starts again as after a reboot"
    rc=0
    gh_wait_job_state "$job" COMPLETED 90 || rc=$?
    assert_eq "$rc" 0 "job $job ran once n3 was back ($(gh_job_field "$job" JobState))"
    assert_eq "$(gh_job_field "$job" NodeList)" n3 "on n3"
    gh_say "    job done $((SECONDS - t0)) s after it was submitted, $(gh_job_field "$job" Restarts) restart(s)"
    log=$(gh_cat "$(gh_gpu_health_log n3)")
    assert_contains "$log" "asked Slurm to reboot n3" "n3's log says it asked for the reboot"
    assert_contains "$log" "n3 rebooted as gpu-health asked" "and that the reboot happened"
    assert_contains "$(gh_cat "$GH_DIR/n3/state/ledger.json")" '"reboots"' "the ledger keeps the reboot"
}
