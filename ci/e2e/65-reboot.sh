# shellcheck shell=bash
# Reboot through Slurm by policy (issue 26): with `[remediation] reboot =
# true`, a node drained for a fault a reboot clears (Xid 79) is handed to
# `scontrol reboot ASAP nextstate=RESUME` with a `(reboot)` reason; after
# the reboot it returns and takes the job that waited for it; a fault
# that comes back after every reboot ends in `(hardware inspection)`
# after `max_reboots`, with no further reboot. With the acceptance tier
# after reboots (`[acceptance] after_reboot`) the reboot is asked without
# ASAP and nextstate, Slurm keeps the node drained, and the health check
# returns it once its gates (stand-ins printing recorded outputs) passed,
# or keeps it drained with the failed gate's figure in its reason. A
# fault for a person found while the RESUME reboot waits withdraws it
# (issue 35), and the node stays drained.
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

# rb_gates NODE GOOD|SLOW: the acceptance tier after a reboot on for NODE
# (`[acceptance] after_reboot`), with stand-in gate programs that print
# the recorded outputs of nccl-tests and nvbandwidth on an 8-GPU H100
# node (core/tests/fixtures/acceptance): good, or an all-reduce at 313
# GB/s, under the 460 GB/s of the H100 SXM row. Each run is noted in the
# node's gates.log. The health check (which runs the tier) is switched on
# for the test. Call after rb_begin (the drop-in's last sections).
rb_gates() {
    local node=$1 kind=$2 dir fx nccl
    dir=$GH_DIR/$node/gates
    fx=$GH_REPO/core/tests/fixtures/acceptance
    nccl=$fx/nccl/h100x8-good.txt
    [[ $kind == SLOW ]] && nccl=$fx/nccl/h100x8-slow.txt
    mkdir -p "$dir"
    # A second of work each, so that the node is seen drained meanwhile.
    printf '#!/bin/sh
echo "$(date +%%s) all_reduce_perf $*" >>%s/gates.log
sleep 1
cat %s
' \
        "$dir" "$nccl" >"$dir/all_reduce_perf"
    printf '#!/bin/sh
echo "$(date +%%s) nvbandwidth $*" >>%s/gates.log
sleep 1
cat %s
' \
        "$dir" "$fx/nvbandwidth/h2d-h100x8-good.txt" >"$dir/nvbandwidth"
    chmod 755 "$dir/all_reduce_perf" "$dir/nvbandwidth"
    # The health check runs the tier: on for the test (every 5 s).
    : >"$GH_DIR/etc/health-check.enabled"
    trap 'rm -f "$GH_DIR/etc/health-check.enabled"; scontrol cancel_reboot '"$node"' 2>/dev/null || true; scancel --user=root 2>/dev/null || true' EXIT
    printf '[acceptance]\nenabled = true\nafter_reboot = true\ngates = ["all-reduce", "host-to-device"]\nall_reduce_perf = "%s"\nnvbandwidth = "%s"\n' \
        "$dir/all_reduce_perf" "$dir/nvbandwidth" >>"$(gh_dropin "$node")"
}

# rb_wait_reason NODE TEXT TIMEOUT_S: until NODE's reason contains TEXT.
rb_wait_reason() {
    local deadline=$((SECONDS + $3))
    until [[ $(gh_node_reason "$1") == *"$2"* ]]; do
        ((SECONDS >= deadline)) && return 1
        sleep 0.5
    done
}

rb_gate_runs() { { grep -c . "$GH_DIR/$1/gates/gates.log"; } 2>/dev/null || echo 0; }

# rb_watch NODE FILE: note every state and reason of NODE in FILE (one
# line per change) until rb_unwatch.
rb_watch() {
    local node=$1 out=$2 last="" now
    (
        while :; do
            now="$(scontrol -o show node "$node" 2>/dev/null | tr ' ' '\n' | sed -n 's/^State=//p') | $(gh_node_reason "$node")"
            [[ $now != "$last" ]] && printf '%s %s\n' "$(date +%T)" "$now" >>"$out"
            last=$now
            sleep 0.2
        done
    ) &
    RB_WATCH=$!
}

rb_unwatch() { [[ -n ${RB_WATCH:-} ]] && kill "$RB_WATCH" 2>/dev/null; wait "$RB_WATCH" 2>/dev/null || true; RB_WATCH=""; }

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

# 2. The fault comes back after every reboot: two reboots (max_reboots),
#    then the node stays drained for hardware inspection, with its
#    history in the reason, and Slurm is asked for no third reboot.
test_a_fault_back_after_each_reboot_ends_in_hardware_inspection() {
    GH_FOCUS=n3
    local job round reason rc
    rb_begin n3 || return 0
    for round in 1 2; do
        rb_xid79 n3
        job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap true)
        rc=0
        rb_wait_reboot_asked "$round" 60 || rc=$?
        assert_eq "$rc" 0 "round $round: Slurm ran the RebootProgram for n3 ($(rb_reboot_count) in all)"
        assert_match "$(gh_node_reason n3)" '\(reboot\)( : reboot issued)?$' "round $round: the reason says the reboot"
        rb_come_back n3 || true
        rc=0
        gh_wait_job_state "$job" COMPLETED 90 || rc=$?
        assert_eq "$rc" 0 "round $round: the job ran after the reboot ($(gh_job_field "$job" JobState))"
    done
    rb_xid79 n3
    job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap true)
    assert_node_state n3 '.*drain.*' 30 "n3 is drained a third time"
    reason=$(gh_node_reason n3)
    assert_match "$reason" '^gpu-health: .*Xid 79.*\(hardware inspection\)$' "for hardware inspection ($reason)"
    sleep 8
    assert_eq "$(rb_reboot_count)" 2 "no third reboot was asked for"
    assert_match "$(gh_job_field "$job" JobState)" 'PENDING' "the job waits for n3"
}

# 3. With the acceptance tier after a reboot: the reboot is asked without
#    nextstate=RESUME, so Slurm keeps the node drained after it; the first
#    health check that finds it registered, idle and drained runs the
#    gates (stand-ins printing a good H100 node's outputs), they pass, the
#    node returns and the requeued job runs. The states Slurm showed are
#    printed (what `scontrol reboot ASAP` without nextstate leaves).
test_xid79_reboot_then_the_gates_pass_and_the_job_runs() {
    GH_FOCUS=n3
    local job reason log t0 rc states
    rb_begin n3 || return 0
    rb_gates n3 GOOD
    rb_xid79 n3
    t0=$SECONDS
    job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap 'echo ran-on-$SLURMD_NODENAME')
    assert_node_state n3 '.*drain.*|down.*|.*reboot.*' 30 "n3 is drained for the Xid 79"
    reason=$(gh_node_reason n3)
    assert_match "$reason" '^gpu-health: Xid 79 .*\(reboot\)( : reboot issued)?$' "the reason says the reboot ($reason)"
    rc=0
    rb_wait_reboot_asked 1 60 || rc=$?
    assert_eq "$rc" 0 "Slurm ran the RebootProgram for n3"
    assert_eq "$(rb_gate_runs n3)" 0 "no gate ran before the reboot"
    states=$GH_DIR/n3/states.log
    rb_watch n3 "$states"
    rc=0
    rb_come_back n3 || rc=$?
    assert_eq "$rc" 0 "n3's slurmd starts again as after a reboot"
    rc=0
    gh_wait_job_state "$job" COMPLETED 90 || rc=$?
    rb_unwatch
    gh_say "    n3 after the reboot (state | reason):"
    sed 's/^/      /' "$states" >&2 || true
    assert_eq "$rc" 0 "job $job ran once n3 passed its gates ($(gh_job_field "$job" JobState))"
    assert_eq "$(gh_job_field "$job" NodeList)" n3 "on n3"
    gh_say "    job done $((SECONDS - t0)) s after it was submitted, $(gh_job_field "$job" Restarts) restart(s)"
    assert_match "$(gh_cat "$states")" 'IDLE\+DRAIN[^|]* \| gpu-health: Xid 79' "Slurm kept gpu-health's drain after the reboot"
    assert_eq "$(rb_gate_runs n3)" 2 "each gate ran once (all-reduce, host-to-device)"
    log=$(gh_cat "$(gh_gpu_health_log n3)")
    assert_contains "$log" "it stays drained after it until the acceptance tier passes" "the reboot was asked to keep the drain"
    gh_say "    the health check on n3 after the reboot:"
    grep -E 'acceptance tier|returned to service' <<<"$log" | sed 's/^[^ ]* n3 /      /' >&2 || true
    assert_contains "$log" "acceptance tier not run yet: Slurm shows the reboot still pending" \
        "slurmd's start-up run of the health check (before it registered) ran no gate"
    assert_contains "$log" "n3 passed the acceptance tier after its reboot" "n3's log says the gates passed"
    assert_contains "$log" "n3 returned to service" "and that it returned n3"
    assert_eq "$(rb_reboot_count)" 1 "one reboot"
}

# 4. A node that fails a bandwidth gate after its reboot stays drained,
#    its reason naming the gate, the figure and the threshold; no other
#    reboot is asked, and the job waits.
test_xid79_reboot_then_a_slow_all_reduce_keeps_the_node_drained() {
    GH_FOCUS=n3
    local job reason rc
    rb_begin n3 || return 0
    rb_gates n3 SLOW
    rb_xid79 n3
    job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap true)
    rc=0
    rb_wait_reboot_asked 1 60 || rc=$?
    assert_eq "$rc" 0 "Slurm ran the RebootProgram for n3"
    rc=0
    rb_come_back n3 || rc=$?
    assert_eq "$rc" 0 "n3's slurmd starts again as after a reboot"
    rc=0
    rb_wait_reason n3 'acceptance failed' 60 || rc=$?
    reason=$(gh_node_reason n3)
    assert_eq "$rc" 0 "n3's reason names the failed gate ($reason)"
    assert_match "$reason" '^gpu-health: acceptance failed: all-reduce 313(\.0)? GB/s < 460 GB/s \(H100 SXM\) \(drain\)$' "with the figure and the threshold"
    assert_node_state n3 'idle\+drain' 10 "n3 stays drained"
    sleep 6
    assert_eq "$(rb_reboot_count)" 1 "no other reboot was asked for"
    assert_match "$(gh_job_field "$job" JobState)" 'PENDING' "the job waits"
    assert_node_state n3 'idle\+drain' 5 "n3 is still drained a health check later"
}

rb_next_state() { scontrol -o show node "$1" | tr ' ' '\n' | sed -n 's/^NextState=//p'; }

# rb_wait_flag NODE FLAG yes|no TIMEOUT_S: until Slurm's State of NODE
# has (yes) or lacks (no) FLAG, e.g. REBOOT_REQUESTED.
rb_wait_flag() {
    local deadline=$((SECONDS + $4)) st
    while :; do
        st=+$(scontrol -o show node "$1" | tr ' ' '\n' | sed -n 's/^State=//p')+
        if [[ $3 == yes && $st == *"+$2+"* ]] || [[ $3 == no && $st != *"+$2+"* ]]; then return 0; fi
        ((SECONDS >= deadline)) && return 1
        sleep 0.5
    done
}

# 5. A fault for a person while the reboot waits (issue 35): a job runs
#    on n3, an Xid 79 drains it `(reboot)` and the health check asks
#    `reboot ASAP nextstate=RESUME`; before the job ends an ECC DBE
#    (Xid 48, for a person) appears. The health check withdraws the
#    reboot (scontrol cancel_reboot), so Slurm neither reboots n3 nor
#    returns it: once the job ended, and after n3 booted anyway (its
#    admin), it is still drained `(drain)` and the job that waits for it
#    has not started.
test_a_dbe_while_the_reboot_waits_keeps_the_node_out() {
    GH_FOCUS=n3
    local j1 j2 rc reason states
    rb_begin n3 || return 0
    : >"$GH_DIR/etc/health-check.enabled"
    trap 'rb_unwatch; rm -f "$GH_DIR/etc/health-check.enabled"; scontrol cancel_reboot n3 2>/dev/null || true; scancel --user=root 2>/dev/null || true' EXIT
    j1=$(gh_sbatch -w n3 --wrap 'sleep 300')
    gh_wait_job_state "$j1" RUNNING 30
    rb_xid79 n3
    rc=0
    rb_wait_reason n3 '(reboot)' 30 || rc=$?
    assert_eq "$rc" 0 "the health check drains n3 for the Xid 79 ($(gh_node_reason n3))"
    rc=0
    rb_wait_flag n3 REBOOT_REQUESTED yes 15 || rc=$?
    assert_eq "$rc" 0 "and asks Slurm for its reboot"
    assert_eq "$(rb_next_state n3)" RESUME "with nextstate=RESUME"
    states=$GH_DIR/n3/states.log
    : >"$states"
    rb_watch n3 "$states"
    gh_kernel_log_append n3 "$(gh_xid_line 0000:5d:00 48 0 'An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 0.')"
    rc=0
    rb_wait_reason n3 '(drain)' 30 || rc=$?
    reason=$(gh_node_reason n3)
    assert_eq "$rc" 0 "the DBE turns the reason into (drain) ($reason)"
    assert_match "$reason" '^gpu-health: .*Xid 48.*\(drain\)$' "naming the Xid 48"
    rc=0
    rb_wait_flag n3 REBOOT_REQUESTED no 15 || rc=$?
    assert_eq "$rc" 0 "Slurm has no reboot of n3 pending any more"
    assert_node_state n3 'mixed\+drain|allocated\+drain' 5 "n3 is drained, its job runs"
    assert_eq "$(rb_next_state n3)" "" "and no nextstate"
    # What Slurm says to a cancel with none pending (gpu-health takes
    # such a refusal as the request gone when Slurm shows no reboot).
    rc=0
    reason=$(scontrol cancel_reboot n3 2>&1) || rc=$?
    gh_say "    a second cancel_reboot: exit $rc, '$reason'"
    j2=$(gh_sbatch -w n3 --wrap 'echo ran-on-$SLURMD_NODENAME')
    scancel "$j1"
    gh_wait_job_state "$j1" 'CANCELLED|COMPLETED' 30 || true
    sleep 8
    assert_eq "$(rb_reboot_count)" 0 "Slurm ran no RebootProgram once the job ended"
    assert_node_state n3 'idle\+drain' 10 "n3 is idle and drained"
    # Its admin reboots it: Slurm keeps the drain.
    rc=0
    rb_come_back n3 || rc=$?
    assert_eq "$rc" 0 "n3's slurmd starts again as after a reboot"
    sleep 8
    rb_unwatch
    gh_say "    n3 (state | reason):"
    sed 's/^/      /' "$states" >&2 || true
    assert_node_state n3 'idle\+drain' 10 "n3 is still drained after the boot"
    assert_match "$(gh_node_reason n3)" '^gpu-health: .*Xid 48.*\(drain\)' "for the DBE"
    assert_eq "$(awk '$2 != "|" && $2 !~ /DRAIN/' "$states" | wc -l)" 0 "n3 was drained at every moment from the Xid 79 on"
    assert_match "$(gh_job_field "$j2" JobState)" 'PENDING' "the job for n3 did not start"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n3)")" "withdrew the reboot of n3" "n3's log says why"
}

# rb_empty_state NODE: the files of NODE's gpu-health state directory
# gone, as on a node whose state directory is emptied at every boot.
rb_empty_state() { find "${GH_DIR:?}/$1/state" -mindepth 1 -delete; }

rb_comment() { scontrol -o show node "$1" | tr ' ' '\n' | sed -n 's/^Comment=//p'; }

# 6. A state directory emptied at every boot (diskless nodes, issue 35):
#    the reboots gpu-health asked for are kept in the node's Comment and
#    read back, so a fault back after every boot still ends in
#    `(hardware inspection)` after max_reboots (2), with no third reboot
#    asked.
test_the_reboot_count_holds_when_the_state_directory_is_emptied_at_every_boot() {
    GH_FOCUS=n3
    local job round reason rc comment
    rb_begin n3 || return 0
    for round in 1 2; do
        rb_xid79 n3
        job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap true)
        rc=0
        rb_wait_reboot_asked "$round" 60 || rc=$?
        assert_eq "$rc" 0 "round $round: Slurm ran the RebootProgram for n3 ($(rb_reboot_count) in all)"
        assert_match "$(gh_node_reason n3)" '\(reboot\)( : reboot issued)?$' "round $round: the reason says the reboot"
        rb_empty_state n3
        assert_eq "$(find "$GH_DIR/n3/state" -mindepth 1 | wc -l)" 0 "round $round: n3's state directory is empty at the boot"
        rb_come_back n3 || true
        rc=0
        gh_wait_job_state "$job" COMPLETED 90 || rc=$?
        assert_eq "$rc" 0 "round $round: Slurm returned n3 and the job ran ($(gh_job_field "$job" JobState))"
    done
    comment=$(rb_comment n3)
    gh_say "    n3's Comment after two reboots: $comment"
    assert_match "$comment" '(^|,)gpu-health-reboots:[0-9]+=Xid_79;[0-9]+=Xid_79(,|$)' "n3's Comment keeps its two reboots"
    rb_xid79 n3
    job=$(gh_sbatch -w n3 --gres=gpu:8 --wrap true)
    assert_node_state n3 '.*drain.*' 30 "n3 is drained a third time"
    reason=$(gh_node_reason n3)
    assert_match "$reason" '^gpu-health: .*Xid 79.*\(hardware inspection\)$' "for hardware inspection ($reason)"
    sleep 8
    assert_eq "$(rb_reboot_count)" 2 "no third reboot was asked for"
    assert_match "$(gh_job_field "$job" JobState)" 'PENDING' "the job waits for n3"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n3)")" "read back from its Slurm Comment" "n3's log says the reboots were read back"
    comment=$(rb_comment n3)
    gh_say "    n3's Comment after the inspection drain: $comment"
    assert_match "$comment" '(^|,)gpu-health-reboots:[0-9]+=Xid_79;[0-9]+=Xid_79(,|$)' "the inspection drain keeps the two reboots in n3's Comment"
}
