# shellcheck shell=bash
# End-to-end tests of operations (issue 7): gpu-health as Slurm's real
# HealthCheckProgram (ci/slurm-up wires a wrapper that runs only while
# etc/health-check.enabled exists; HealthCheckInterval=5 s), the automatic
# return of drain-until-clean drains, foreign drains left alone, drain
# rules that wait for `gpu-health resume`, and the drain brake across 4
# nodes. Run by ci/e2e/run, which resets the cluster before each test (and
# restores the node drop-ins these tests extend).

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

hc_flag() { printf '%s/etc/health-check.enabled\n' "$GH_DIR"; }

# Switch the health check on for the rest of the test (off again at exit,
# also when the test aborts).
health_check_on() {
    : >"$(hc_flag)"
    trap 'rm -f "$(hc_flag)"' EXIT
}

health_check_off() { rm -f "$(hc_flag)"; }

# ops_config NODE TOML: add TOML to NODE's drop-in (backed up as .good, the
# convention gh_reset_cluster restores before the next test).
ops_config() {
    local f
    f=$(gh_dropin "$1")
    [[ -f $f.good ]] || cp "$f" "$f.good"
    printf '%s\n' "$2" >>"$f"
}

# The stand-in dcgmi (ci/fixtures/dcgmi) for NODE, answering MODE.
dcgm_standin() {
    local node=$1 mode=$2 dir=$GH_DIR/$1/dcgmi
    if [[ ! -d $dir ]]; then
        mkdir -p "$dir"
        cp "$GH_REPO"/ci/fixtures/dcgmi/* "$dir/"
        ops_config "$node" "[dcgm]
dcgmi = \"$dir/dcgmi\"
timeout_ms = 5000"
    fi
    printf '%s\n' "$mode" >"$dir/mode"
}

# gpu-health resume as an admin runs it on NODE.
admin_resume() {
    local node=$1
    shift
    SLURMD_NODENAME=$node GPU_HEALTH_CONFIG=$GH_DIR/etc/gpu-health.toml \
        "$GH_BIN_DIR/gpu-health" resume "$node" "$@"
}

# Nodes drained with a gpu-health reason, one per line.
own_drains() {
    local node
    for node in $(gh_nodes); do
        [[ $(gh_node_state "$node") == *drain* && $(gh_node_reason "$node") == gpu-health:* ]] &&
            printf '%s\n' "$node"
    done
    return 0
}

# 1. Xid 31 drains a node until clean; after the quiet time a health-check
#    run returns it to idle by itself.
test_xid31_drains_until_clean_and_returns() {
    GH_FOCUS=n1
    local quiet=10 reason t_drained t_back
    ops_config n1 "[recovery]
quiet_time_s = $quiet"
    health_check_on
    gh_kernel_log_append n1 "$(gh_xid_line 0000:18:00 31 51234 'name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS')"
    assert_node_state n1 'idle\+drain' 30 "n1 is drained by the health check after an Xid 31"
    t_drained=$SECONDS
    reason=$(gh_node_reason n1)
    assert_match "$reason" '^gpu-health: Xid 31 ' "n1's reason is gpu-health's and names Xid 31"
    assert_match "$reason" '\(drain-until-clean\)$' "the reason says it clears itself"
    assert_contains "$(gh_cat "$GH_DIR/n1/state/ledger.json")" '"drain":{' "the drain is recorded in n1's ledger"
    assert_node_state n1 idle $((quiet + 40)) "n1 returns to idle after the quiet time"
    t_back=$SECONDS
    # The quiet time counts from the run that found the fault; that run's
    # drain reaches Slurm after the brake's wait (1.5 s), so the node is
    # seen drained up to 2 s less than the quiet time.
    assert_le "$((quiet - 2))" $((t_back - t_drained + 1)) "n1 stayed drained at least the quiet time (${quiet}s) less the brake's wait"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "returned to service" "n1's log says it returned"
    assert_not_contains "$(gh_cat "$GH_DIR/n1/state/ledger.json")" '"drain":{' "the ledger holds no drain any more"
    assert_not_contains "$(gh_cat "$GH_DIR/n1/state/ledger.json")" '"id":' "nor any open fault"
    assert_eq "$(gh_node_state n2)" idle "the other nodes were not touched"
}

# 2. An admin's drain (another reason) is never touched, not even when
#    gpu-health finds a fault there.
test_foreign_drain_untouched() {
    GH_FOCUS=n2
    local reason="admin: reseat riser card"
    ops_config n2 "[recovery]
quiet_time_s = 1"
    scontrol update NodeName=n2 State=DRAIN "Reason=$reason"
    health_check_on
    gh_kernel_log_append n2 "$(gh_xid_line 0000:18:00 31 99 'MMU Fault')"
    # Three health-check intervals.
    local deadline=$((SECONDS + 60))
    until grep -q "health check on n2" "$(gh_gpu_health_log n2)" 2>/dev/null || ((SECONDS > deadline)); do sleep 1; done
    sleep 12
    assert_contains "$(gh_cat "$(gh_gpu_health_log n2)")" "health check on n2" "the health check ran on n2"
    assert_match "$(gh_node_state n2)" drain "n2 is still drained"
    assert_eq "$(gh_node_reason n2)" "$reason" "n2 keeps the admin's reason"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n2)")" "drained by someone else" "gpu-health logged that it left n2 alone"
    health_check_off
    local out rc=0
    out=$(admin_resume n2 2>&1) || rc=$?
    assert_eq "$rc" 2 "gpu-health resume refuses a foreign drain"
    assert_contains "$out" "drained by someone else" "and says why"
    assert_eq "$(gh_node_reason n2)" "$reason" "n2 still has the admin's reason"
}

# 3. A drain rule (Xid 79) stays drained through clean health checks until
#    gpu-health resume; resume refuses while the checks (or DCGM) fail.
test_drain_rule_waits_for_resume() {
    local node=n3
    (($(gh_node_count) >= 3)) || node=n2
    GH_FOCUS=$node
    ops_config "$node" "[recovery]
quiet_time_s = 1"
    dcgm_standin "$node" pass
    health_check_on
    gh_kernel_log_append "$node" "$(gh_xid_line 0000:5d:00 79 2210 'GPU has fallen off the bus.')"
    assert_node_state "$node" 'idle\+drain' 30 "$node is drained after an Xid 79"
    assert_match "$(gh_node_reason "$node")" '^gpu-health: Xid 79 .*\(drain\)$' "the reason is a (drain) one"
    sleep 15
    assert_match "$(gh_node_state "$node")" drain "$node stays drained through clean health checks"
    health_check_off
    sleep 1

    local out rc=0
    gh_set_scenario "$node" h100x8-dbe
    out=$(admin_resume "$node" 2>&1) || rc=$?
    assert_eq "$rc" 1 "resume refuses while a GPU has double-bit ECC errors"
    assert_contains "$out" "ECC DBE" "and names the fault"
    assert_match "$(gh_node_state "$node")" drain "$node is still drained"

    gh_set_scenario "$node" h100x8-healthy
    dcgm_standin "$node" fail
    rc=0
    out=$(admin_resume "$node" 2>&1) || rc=$?
    assert_eq "$rc" 1 "resume refuses when DCGM finds a hardware fault"
    assert_contains "$out" "DCGM Page Retirement/Row Remap GPU1 failed" "and names DCGM's failed test"

    dcgm_standin "$node" busy
    rc=0
    out=$(admin_resume "$node" 2>&1) || rc=$?
    assert_eq "$rc" 0 "resume succeeds once clean (busy DCGM is not a fault): $out"
    assert_contains "$out" "resumed $node" "resume says so"
    assert_node_state "$node" idle 20 "$node is idle again"
}

# 4. The brake: a fault on all 4 nodes at once, brake at 25%: exactly one
#    node is drained, the others stay in service and say why, and no
#    claim is left behind (ci/storm does the same on 256 nodes).
test_brake_drains_only_a_quarter() {
    GH_FOCUS=$(gh_nodes | tr '\n' ' ')
    local node n drained
    n=$(gh_node_count)
    for node in $(gh_nodes); do
        ops_config "$node" "[brake]
max_drained_fraction = 0.25"
        gh_set_scenario "$node" h100x8-dbe
    done
    health_check_on
    # Until the first drain, then two more rounds of health checks.
    local deadline=$((SECONDS + 40))
    until [[ -n $(own_drains) ]] || ((SECONDS > deadline)); do sleep 1; done
    sleep 15
    drained=$(own_drains | wc -l)
    assert_eq "$drained" $((n / 4 > 0 ? n / 4 : 1)) "exactly a quarter of $n nodes drained ($(own_drains | tr '\n' ' '))"
    sleep 6
    assert_eq "$(own_drains | wc -l)" "$drained" "and it stays so over more health checks"
    local held=0
    for node in $(gh_nodes); do
        if [[ $(gh_node_state "$node") != *drain* ]]; then
            grep -q "drain brake" "$(gh_gpu_health_log "$node")" 2>/dev/null && held=$((held + 1))
            assert_contains "$(gh_cat "$GH_DIR/$node/state/ledger.json")" '"cause":"brake"' "$node keeps its held-back fault as pending"
        fi
    done
    assert_eq "$held" $((n - drained)) "every node left in service logged the brake"
    # A health check in flight holds its claim for claim_timeout_ms +
    # settle_ms; the nodes' checks start together, so a look may catch
    # every held-back node's claim at once. Stop the health checks and let
    # the last ones end: a claim still there after that was left behind
    # (this also keeps a late check from draining a node the next test
    # has just reset).
    health_check_off
    local claims deadline=$((SECONDS + 15))
    while :; do
        claims=$(scontrol -o show node | grep -c 'Comment=gpu-health-claim:' || true)
        ((claims == 0 || SECONDS > deadline)) && break
        sleep 1
    done
    sleep 2
    claims=$(scontrol -o show node | grep -c 'Comment=gpu-health-claim:' || true)
    assert_eq "$claims" 0 "no brake claim is left in a node's Comment"
}

# 5. A gpu-health drain on a node that stops answering: Slurm 23.02+
#    appends its own reason to ours ("<ours> : Not responding"). gpu-health
#    still knows the drain as its own (by the prefix, never the end) and
#    returns the node once it answers again and has been clean long enough.
test_drained_node_that_stops_responding() {
    GH_FOCUS=n3
    local quiet=10 pid reason deadline
    ops_config n3 "[recovery]
quiet_time_s = $quiet"
    health_check_on
    gh_kernel_log_append n3 "$(gh_xid_line 0000:18:00 31 77 'name=python3, MMU Fault: ENGINE GRAPHICS')"
    assert_node_state n3 'idle\+drain' 30 "n3 is drained for the Xid 31"
    pid=$(cat "$GH_DIR/run/slurmd-n3.pid")
    kill -STOP "$pid"
    # Whatever happens next, n3's slurmd must run again.
    trap 'kill -CONT '"$pid"' 2>/dev/null; rm -f "$(hc_flag)"' EXIT
    # slurmctld notices at its next ping rounds, each bounded by
    # MessageTimeout (20 s here): a minute or two.
    deadline=$((SECONDS + GPU_HEALTH_SLURMD_TIMEOUT + 150))
    # After SlurmdTimeout without an answer Slurm sets the node DOWN with
    # its reason "Not responding" (22.05: DOWN*+DRAIN, ours kept as it
    # was; 24.11: DOWN+DRAIN+NOT_RESPONDING, "<ours> : Not responding").
    until scontrol -o show node n3 | grep -qE 'State=DOWN'; do
        ((SECONDS < deadline)) || break
        sleep 1
    done
    assert_match "$(scontrol -o show node n3 | tr ' ' '\n' | grep '^State=')" '^State=DOWN' "Slurm sets n3 down for not responding"
    reason=$(gh_node_reason n3)
    gh_say "    n3's reason while down: $reason"
    assert_match "$reason" '^gpu-health: Xid 31 ' "n3's reason still starts with gpu-health's ($reason)"
    if [[ $(gh_series) != 22.05 ]]; then
        assert_match "$reason" ' : Not responding$' "Slurm $(gh_series) appended its own reason to ours"
    fi
    kill -CONT "$pid"
    # slurmctld sees it answer at its next ping round (its pings during
    # the stop failed: "Unexpected missing socket error" in slurmd's log),
    # up to about two SlurmdTimeouts on a loaded 2-core machine; then the
    # health check returns it after the quiet time.
    assert_node_state n3 idle $((quiet + 60 + 2 * GPU_HEALTH_SLURMD_TIMEOUT)) "n3 answers again and returns to idle after the quiet time"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n3)")" "returned to service" "n3's log says it returned"
}

# 6. Escalation: the health check returned n1 twice for Xid 31 within the
#    window (escalate_after_returns = 2 here, 3 by default), so the next
#    Xid 31 drains n1 for an admin, with a reason that says why;
#    `gpu-health resume` starts the count over.
test_repeated_returns_escalate_to_drain() {
    GH_FOCUS=n1
    local round reason out rc=0
    ops_config n1 "[recovery]
quiet_time_s = 1
escalate_after_returns = 2
escalate_window_hours = 1"
    health_check_on
    for round in 1 2; do
        gh_kernel_log_append n1 "$(gh_xid_line 0000:18:00 31 $((700 + round)) 'name=python3, MMU Fault: ENGINE GRAPHICS')"
        assert_node_state n1 'idle\+drain' 30 "round $round: n1 is drained after an Xid 31"
        assert_match "$(gh_node_reason n1)" '\(drain-until-clean\)$' "round $round: the reason clears itself"
        assert_node_state n1 idle 40 "round $round: n1 returns by itself"
    done
    assert_contains "$(gh_cat "$GH_DIR/n1/state/ledger.json")" '"kinds":["Xid 31"]' "n1's ledger counts the returns"
    gh_kernel_log_append n1 "$(gh_xid_line 0000:18:00 31 703 'name=python3, MMU Fault: ENGINE GRAPHICS')"
    assert_node_state n1 'idle\+drain' 30 "round 3: n1 is drained again"
    reason=$(gh_node_reason n1)
    assert_match "$reason" '^gpu-health: Xid 31 .*, back 2x in 1 h \(drain\)$' "the reason says why it stays ($reason)"
    sleep 8
    assert_match "$(gh_node_state n1)" drain "n1 stays drained through clean health checks"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "for the same fault: draining it for an admin" "n1's log says it escalated"
    health_check_off
    sleep 1
    out=$(admin_resume n1 2>&1) || rc=$?
    assert_eq "$rc" 0 "gpu-health resume returns n1 ($out)"
    assert_eq "$(gh_node_state n1)" idle "n1 is idle again"
    assert_eq "$(gh_cat "$GH_DIR/n1/state/ledger.json")" "" "and the count starts over (the ledger is empty)"
}

# 9. A job's peak power is sampled by the health checks while it runs:
#    n1's GPU0 draws 650 W for 7 s in the middle of a 14 s job and idles at
#    its start and end (the Prolog's and Epilog's samples); the record's
#    peak is the health check's 650 W, above the job's mean.
test_peak_power_sampled_during_the_job() {
    GH_FOCUS="n1"
    health_check_on
    local hot=$GH_DIR/hot-gpu0.json job out check
    python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
s["gpus"][0].setdefault("power", {})["draw_mw"] = 650000
json.dump(s, open(sys.argv[2], "w"))' "$GH_SCENARIO_DIR/h100x8-healthy.json" "$hot"
    job=$(gh_sbatch -w n1 --gres=gpu:8 --wrap 'sleep 14')
    gh_wait_job_state "$job" RUNNING 30 || true
    sleep 2
    gh_set_scenario n1 "$hot"
    sleep 7
    gh_set_scenario n1 h100x8-healthy
    gh_wait_job_state "$job" COMPLETED 40 || true
    local deadline=$((SECONDS + 20))
    while ((SECONDS < deadline)); do
        out=$(GPU_HEALTH_CONFIG=$GH_DIR/etc/gpu-health.toml "$GH_BIN_DIR/gpu-health" report --job "$job" --json 2>/dev/null) || out=""
        [[ $out == *peak_power_w* ]] && break
        sleep 0.5
    done
    check=$(printf '%s' "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)[0]
g0 = [g for g in j["gpus"] if g["index"] == 0][0]
bad = []
if g0.get("peak_power_w") != 650.0: bad.append("GPU0 peak %s" % g0.get("peak_power_w"))
if (g0.get("power_samples") or 0) < 3: bad.append("GPU0 samples %s" % g0.get("power_samples"))
if not g0["mean_power_w"] < 650.0: bad.append("GPU0 mean %s" % g0["mean_power_w"])
if not (j.get("peak_power_w") or 0) >= 650.0: bad.append("job peak %s" % j.get("peak_power_w"))
print("; ".join(bad) or "ok")' 2>&1)
    assert_eq "$check" ok "job $job: GPU0's sampled peak is 650 W (prolog, health checks, epilog), above its mean"
    assert_eq "$(compgen -G "$GH_DIR/n1/state/jobs/$job.*" || true)" "" "n1 removed the job's files, its power samples too"
}

# 8. Issue 35, item 6: a node gpu-health drained through the brake and an
#    admin returned keeps that drain's stamp in its Comment (the brake's
#    time window counts it) through a claim the brake holds back: the
#    claim carries it (`gpu-health-claim:<ms>,gpu-health-drained:<ms>`,
#    which slurmctld must take as one Comment) and the withdrawal puts it
#    back. Before, the claim replaced it and the withdrawal emptied it.
test_brake_claim_keeps_the_nodes_drain_stamp() {
    GH_FOCUS="n1 n2"
    local stamp comment rc log deadline
    # No window: drains of earlier tests must not hold n1's first drain.
    ops_config n1 "[brake]
max_drained_fraction = 0.25
window_minutes = 0"
    gh_set_scenario n1 h100x8-dbe
    health_check_on
    assert_node_state n1 '.*\+drain' 40 "n1 drained for its DBE"
    stamp=$(scontrol -o show node n1 | grep -o ' Comment=gpu-health-drained:[0-9]*' | cut -d= -f2)
    assert_contains "$stamp" "gpu-health-drained:" "the drain left its stamp in the Comment"
    gh_set_scenario n1 h100x8-healthy
    rc=0
    admin_resume n1 >/dev/null 2>&1 || rc=$?
    assert_eq "$rc" 0 "the admin returns n1"
    assert_node_state n1 idle 20 "n1 is idle again"
    scontrol update NodeName=n2 State=DRAIN "Reason=gpu-health: Xid 48 GPU0 0000:18:00.0 (drain)"
    log=$(gh_gpu_health_log n1)
    gh_set_scenario n1 h100x8-dbe
    deadline=$((SECONDS + 40))
    until grep -q 'drain brake: 1 of 4' "$log" 2>/dev/null || ((SECONDS > deadline)); do sleep 1; done
    health_check_off
    sleep 5
    assert_contains "$(gh_cat "$log")" "drain brake: 1 of 4" "n1's new drain is held back by the share"
    if grep -q 'cannot claim a drain' "$log"; then
        fail "slurmctld refused a claim: $(grep 'cannot claim a drain' "$log" | tail -n1)"
    else
        pass "every claim was taken"
    fi
    comment=$(scontrol -o show node n1 | grep -o ' Comment=[^ ]*' | cut -d= -f2)
    assert_eq "$comment" "$stamp" "the withdrawn claim put n1's drain stamp back"
    scontrol update NodeName=n1 Comment=
}
