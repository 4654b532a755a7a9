# shellcheck shell=bash
# The machinery of ci/storm: bookkeeping and checks, the storm cluster,
# its gpu-health configuration, the reset between storms, sampling the
# drained set with sinfo, slurmctld's RPCs from sdiag, and the start and
# end of one storm. Sourced by ci/storm after its options are read (it
# uses their variables: nodes, GH_DIR, scontrol_timeout, claim_timeout,
# logs_dir, ...); not a program of its own.
# shellcheck disable=SC2034,SC2154 # variables are shared with ci/storm

# --- bookkeeping -------------------------------------------------------------
report=()      # lines of the figures (printed as they come, and to --out)
storm_pass=0
storm_fail=0
failures=()    # "storm: what failed"
storm_failed=0 # failed checks in the running storm
storm_name=""
launched=()    # background processes of this script (health-check launchers)

say() {
    gh_say "$*"
    report+=("$*")
}

check() { # check OK MESSAGE: OK is 0 (passed) or anything else
    if [[ $1 == 0 ]]; then
        gh_say "  ok    $2"
    else
        gh_say "  FAIL  $2"
        failures+=("$storm_name: $2")
        storm_failed=$((storm_failed + 1))
    fi
}

now_ms() { printf '%s\n' "$((${EPOCHREALTIME/./} / 1000))"; }
secs() { awk -v ms="$1" 'BEGIN { printf "%.1f", ms / 1000 }'; }
sleep_ms() {
    local d
    # Past already (a loaded machine between the two clock reads): no wait.
    (($1 > 0)) || return 0
    printf -v d '%d.%03d' $(($1 / 1000)) $(($1 % 1000))
    sleep "$d"
}

write_out() {
    [[ -n $out ]] || return 0
    mkdir -p "$(dirname "$out")"
    printf '%s\n' "${report[@]}" >"$out"
}

teardown() {
    local rc=$? pid
    trap - EXIT
    for pid in "${launched[@]}"; do kill "$pid" 2>/dev/null || true; done
    stop_sampler
    if ((keep)); then
        gh_say "cluster left running in $GH_DIR (ci/slurm-down --dir $GH_DIR to stop it)"
    elif [[ -e $GH_DIR ]]; then
        "$GH_REPO/ci/slurm-down" --dir "$GH_DIR" || { gh_warn "slurm-down failed"; rc=1; }
    fi
    write_out
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- the cluster ---------------------------------------------------------------

# cluster_up ARGS...: slurm-up in $GH_DIR; sets up_s (wall clock until
# every node is idle).
up_s=""
cluster_up() {
    local t0
    t0=$(now_ms)
    "$GH_REPO/ci/slurm-up" --nodes "$nodes" --dir "$GH_DIR" "$@" >"$GH_DIR.up.log" 2>&1 || {
        tail -n 30 "$GH_DIR.up.log" >&2
        gh_die "ci/slurm-up --nodes $nodes $* failed"
    }
    up_s=$(secs $(($(now_ms) - t0)))
    rm -f "$GH_DIR.up.log"
    gh_use_cluster
}

rss_kib() { awk '/^VmRSS:/ { print $2; exit }' "/proc/$1/status" 2>/dev/null || echo 0; }

# "slurmctld X MiB, N slurmd Y MiB (Z MiB each), total T MiB; munged M MiB"
memory_line() {
    local pid ctld=0 slurmd=0 n=0 munge=0
    pid=$(gh_state_get slurmctld_pid) && ctld=$(rss_kib "$pid")
    while IFS= read -r pid; do
        slurmd=$((slurmd + $(rss_kib "$pid")))
        n=$((n + 1))
    done < <(awk -F= '$1 == "slurmd_pid" { print $2 }' "$(gh_state_file)")
    pid=$(gh_state_get munged_pid) && munge=$(rss_kib "$pid")
    awk -v c="$ctld" -v s="$slurmd" -v n="$n" -v m="$munge" 'BEGIN {
        printf "slurmctld %.0f MiB + %d slurmd %.0f MiB (%.1f MiB each) = %.0f MiB; munged %.0f MiB\n",
            c / 1024, n, s / 1024, (n ? s / n / 1024 : 0), (c + s) / 1024, m / 1024 }'
}

wait_all_idle() { # TIMEOUT_S
    local deadline=$((SECONDS + ${1:-60})) idle
    while :; do
        idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
        ((idle == nodes)) && return 0
        ((SECONDS < deadline)) || { gh_warn "only $idle of $nodes nodes idle"; return 1; }
        sleep 0.3
    done
}

# job_time: a healthy N-node batch job (`true`), from submission until
# Slurm calls it COMPLETED (Epilogs done); prints "S s (STATE)".
job_time() {
    local t0 id st="" deadline=$((SECONDS + 180))
    t0=$(now_ms)
    id=$(gh_sbatch -N "$nodes" --gres=gpu:8 --exclusive --wrap true) || { echo "submission failed"; return 0; }
    while ((SECONDS < deadline)); do
        st=$(gh_job_field "$id" JobState)
        case $st in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | BOOT_FAIL | OUT_OF_MEMORY | DEADLINE) break ;; esac
        sleep 0.2
    done
    printf '%s s (job %s %s)\n' "$(secs $(($(now_ms) - t0)))" "$id" "${st:-?}"
    [[ $st == COMPLETED ]] || scancel "$id" 2>/dev/null || true
}

# srun_time: `srun -N N true` until srun returns, then until all nodes
# are idle again (Epilogs); prints both.
srun_time() {
    local t0 t1 rc=0
    t0=$(now_ms)
    timeout 180 srun -N "$nodes" --gres=gpu:8 --exclusive true >/dev/null 2>&1 || rc=$?
    t1=$(now_ms)
    wait_all_idle 120 || true
    printf '%s s (exit %s), all idle again after %s s\n' "$(secs $((t1 - t0)))" "$rc" "$(secs $(($(now_ms) - t0)))"
}

measure_cluster() { # LABEL
    say "cluster ($1): $nodes nodes up (all idle) in $up_s s; $(memory_line)"
    say "  healthy ${nodes}-node batch job: $(job_time)"
    wait_all_idle 120 || true
    say "  healthy srun -N$nodes true: $(srun_time)"
}

# --- gpu-health configuration for a storm -------------------------------------

# storm_config FRACTION: the cluster's gpu-health.toml with the brake at
# FRACTION (and scontrol_timeout_ms, a top-level key, at the top).
storm_config() {
    local f=$GH_DIR/etc/gpu-health.toml
    [[ -f $f.storm-orig ]] || cp "$f" "$f.storm-orig"
    {
        printf '# ci/storm: storm %s\n' "$storm_name"
        [[ $scontrol_timeout == default ]] || printf 'scontrol_timeout_ms = %s\n' "$scontrol_timeout"
        # The cluster's own [brake] (the last table) gives way to the
        # storm's; the storms measure the share, back to back, so the
        # time window is off there too.
        sed '/^\[brake\]$/,$d' "$f.storm-orig"
        printf '\n[brake]\nmax_drained_fraction = %s\nwindow_minutes = 0\n' "$1"
        [[ $claim_timeout == default ]] || printf 'claim_timeout_ms = %s\n' "$claim_timeout"
    } >"$f.tmp"
    mv -f "$f.tmp" "$f"
}

# The brake's share, as gpu-health computes it (min_drainable 1).
allowed_for() { awk -v f="$1" -v n="$nodes" 'BEGIN { a = int(f * n + 1e-9); if (a < 1) a = 1; if (a > n) a = n; print a }'; }

# --- reset between storms ---------------------------------------------------------

# Processes of gpu-health (Prolog, Epilog, health checks, step-end) of
# this cluster that still run.
gpu_health_busy() {
    local pid c n=0
    while IFS= read -r pid; do
        c=""
        read -r c 2>/dev/null <"/proc/$pid/comm" || true
        [[ $c == gpu-health* ]] && n=$((n + 1))
    done < <(gh_marked_pids "")
    printf '%s\n' "$n"
}

storm_reset() {
    local i deadline drained=() claimed=() n s _ paths=()
    scancel --user=root 2>/dev/null || true
    deadline=$((SECONDS + 60))
    while [[ -n $(squeue -h -t PD,R,CG,CF -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.3; done
    while (($(gpu_health_busy) > 0)) && ((SECONDS < deadline)); do sleep 0.3; done
    for ((i = 1; i <= nodes; i++)); do
        gh_restore_dropin "n$i"
        gh_set_scenario "n$i" h100x8-healthy
        : >"$(gh_kernel_log "n$i")"
        : >"$(gh_gpu_health_log "n$i")"
        paths+=("$GH_DIR/n$i/state")
    done
    rm -rf "${paths[@]}"
    mkdir -p "${paths[@]}"
    while read -r n s _; do
        case $s in *drain* | drng* | down* | fail*) drained+=("$n") ;; esac
    done < <(sinfo -h -N -o '%N %T %E' 2>/dev/null)
    if ((${#drained[@]})); then
        local IFS=,
        scontrol update "NodeName=${drained[*]}" State=RESUME || true
    fi
    # Brake claims a storm left in node Comments (Comment=gpu-health-claim:...).
    mapfile -t claimed < <(claimed_nodes)
    if ((${#claimed[@]})); then
        local IFS=,
        scontrol update "NodeName=${claimed[*]}" Comment= || true
    fi
    wait_all_idle 60
}

# Nodes whose Slurm Comment is a drain-brake claim of gpu-health.
claimed_nodes() {
    scontrol -o show node 2>/dev/null | awk '/ Comment=gpu-health-claim:/ { sub(/^NodeName=/, "", $1); print $1 }'
}

# --- sampling the drained set ---------------------------------------------------------

# sampler FILE: every 0.2 s one `sinfo -h -N -o '%N %T %E'`; one line per
# call "START_MS END_MS OWN ALL LAST_CHANGE_MS OK_SINCE" (OWN: drained with
# a gpu-health: reason; ALL: drained for any reason; LAST_CHANGE_MS: end
# of the call that first saw the current drained set; OK_SINCE: calls
# that saw it), until storm/stop exists. A failed call writes "err" for
# the counts. Under load one call may take seconds: what counts is what
# the calls saw, not the wall clock.
sampler() {
    # LAST_CHANGE_MS 0: nothing seen change yet.
    local file=$1 prev="" last_change=0 t t_end next n s r own all sig listing ok_since=0
    while [[ ! -e $GH_DIR/storm/stop ]]; do
        t=$(now_ms)
        next=$((t + 200))
        if listing=$(sinfo -h -N -o '%N %T %E' 2>/dev/null); then
            t_end=$(now_ms)
            own=0 all=0 sig=""
            while read -r n s r; do
                case $s in
                *drain* | drng*)
                    all=$((all + 1))
                    if [[ $r == gpu-health:* ]]; then own=$((own + 1)); sig+="$n:g "; else sig+="$n:o "; fi
                    ;;
                esac
            done <<<"$listing"
            if [[ $sig != "$prev" ]]; then
                prev=$sig
                last_change=$t_end
                ok_since=0
            fi
            ok_since=$((ok_since + 1))
            printf '%s %s %s %s %s %s\n' "$t" "$t_end" "$own" "$all" "$last_change" "$ok_since" >>"$file"
        else
            printf '%s %s err err %s %s\n' "$t" "$(now_ms)" "$last_change" "$ok_since" >>"$file"
        fi
        t=$(now_ms)
        if ((next > t)); then sleep_ms $((next - t)); fi
    done
}

sampler_pid=""
start_sampler() {
    rm -f "$GH_DIR/storm/stop" "$GH_DIR/storm/samples"
    : >"$GH_DIR/storm/samples"
    sampler "$GH_DIR/storm/samples" &
    sampler_pid=$!
    # Sampling at nice -10, like the health-check launchers: its sinfo
    # calls must not wait for CPU behind 256 health checks.
    renice -n -10 -p "$sampler_pid" >/dev/null 2>&1 || true
    # The storm starts once the sampler has seen the cluster before it.
    local deadline=$((SECONDS + 20))
    until [[ -s $GH_DIR/storm/samples ]] || ((SECONDS >= deadline)); do sleep 0.05; done
}

stop_sampler() {
    [[ -n $sampler_pid ]] || return 0
    : >"$GH_DIR/storm/stop" 2>/dev/null || kill "$sampler_pid" 2>/dev/null || true
    wait "$sampler_pid" 2>/dev/null || true
    sampler_pid=""
}

# --- slurmctld's RPCs ------------------------------------------------------------------

# sdiag_types: "TYPE COUNT AVE_TIME" per line from `sdiag`'s "by message
# type" section.
sdiag_types() {
    sdiag 2>/dev/null | awk '
        /Remote Procedure Call statistics by message type/ { on = 1; next }
        /Remote Procedure Call statistics by user/ { on = 0 }
        on && /count:/ {
            c = $0; sub(/.*count:/, "", c); sub(/[^0-9].*/, "", c)
            a = $0; sub(/.*ave_time:/, "", a); sub(/[^0-9].*/, "", a)
            print $1, c, a
        }'
}

# Calibration: slurmctld's RPCs of one sampling call (sinfo), by type:
# the REQUEST_* types only (slurmd's messages of jobs that just ended may
# still arrive), the smaller of two rounds of five calls.
declare -A per_sample=()
calibrate_sampling() {
    local k=5 round i type count _ listing n
    sleep 2
    for round in 1 2; do
        sdiag -r >/dev/null
        for ((i = 0; i < k; i++)); do listing=$(sinfo -h -N -o '%N %T %E'); done
        : "$listing"
        declare -A seen_now=()
        while read -r type count _; do
            [[ $type == REQUEST_* && $type != REQUEST_STATS_INFO ]] || continue
            n=$(((count + k / 2) / k))
            seen_now[$type]=1
            if ((round == 1)) || ((n < ${per_sample[$type]:-0})); then per_sample[$type]=$n; fi
        done < <(sdiag_types)
        if ((round == 2)); then
            for type in "${!per_sample[@]}"; do
                [[ -n ${seen_now[$type]:-} ]] || per_sample[$type]=0
            done
        fi
        unset seen_now
    done
    local desc=""
    for type in "${!per_sample[@]}"; do
        ((per_sample[$type])) && desc+=" $type=${per_sample[$type]}"
    done
    say "harness sampling (one sinfo -h -N call) costs slurmctld:${desc:- nothing?}; subtracted below, as are sdiag's own REQUEST_STATS_INFO"
}

# --- one storm --------------------------------------------------------------------------

# Health checks: hc_at NODE OFFSET_MS: wait at the gate (a lock that
# launch_health_checks holds until the storm starts), then OFFSET_MS
# more, then run NODE's health check as slurmd would (SLURMD_NODENAME;
# plus the harness's marker); one line "NODE START_MS END_MS RC" to
# storm/hc.
prolog_bin=""
hc_at() {
    local node=$1 offset=$2 t rc=0
    # The launcher runs at nice -10 (the health check itself at 0, as
    # slurmd's): on a small machine the first health checks would starve
    # the launchers still on their way through the gate for seconds.
    local niceness back=0
    renice -n -10 -p "$BASHPID" >/dev/null 2>&1 || true
    niceness=$(nice)
    ((niceness >= 0)) || back=$((-niceness))
    printf '%s\n' "$node" >>"$GH_DIR/storm/ready"
    flock -s "$GH_DIR/storm/gate" true || true
    ((offset <= 0)) || sleep_ms "$offset"
    # (No command substitution from here on: no fork before the check.)
    t=$((${EPOCHREALTIME/./} / 1000))
    nice -n "$back" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "SLURMD_NODENAME=$node" \
        "SLURM_CONF=$GH_DIR/etc/slurm.conf" "GPU_HEALTH_HARNESS_DIR=$GH_DIR" \
        "$prolog_bin" --health-check >/dev/null 2>&1 || rc=$?
    printf '%s %s %s %s\n' "$node" "$t" "$(now_ms)" "$rc" >>"$GH_DIR/storm/hc"
}

# launch_health_checks SPREAD_MS NODE...: every NODE's health check; all
# are started and wait at the gate first, which opens at a full second
# (storm_t0); their starts are then spread evenly over SPREAD_MS (0: all
# at the same moment, as slurmd's HealthCheckInterval does).
hc_count=0
launch_health_checks() {
    local spread=$1 i=0 n deadline gate=$GH_DIR/storm/gate holder
    shift
    hc_count=$#
    : >"$gate"
    : >"$GH_DIR/storm/ready"
    rm -f "$gate.held"
    # The holder: a process of its own with the lock (the health checks
    # do not inherit its descriptor); killing it opens the gate for all.
    (
        exec {fd}>"$gate"
        flock -x "$fd"
        : >"$gate.held"
        exec sleep 600
    ) &
    holder=$!
    launched+=("$holder")
    deadline=$((SECONDS + 10))
    until [[ -e $gate.held ]] || ((SECONDS >= deadline)); do sleep 0.05; done
    for n in "$@"; do
        hc_at "$n" $((hc_count > 1 ? spread * i / (hc_count - 1) : 0)) &
        launched+=("$!")
        i=$((i + 1))
    done
    deadline=$((SECONDS + 60))
    while (($(wc -l <"$GH_DIR/storm/ready") < hc_count)) && ((SECONDS < deadline)); do sleep 0.1; done
    # Those that said ready are on their way into flock.
    sleep 0.5
    storm_t0=$((($(now_ms) / 1000 + 1) * 1000))
    sleep_ms $((storm_t0 - $(now_ms)))
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
}

hc_done() { [[ -f $GH_DIR/storm/hc ]] && wc -l <"$GH_DIR/storm/hc" || echo 0; }

# wait_settled: until the launched health checks are done, no gpu-health
# process of the cluster runs, and sinfo calls that began 3 s or more
# after the drained set last changed still see it (three calls at least);
# then until a call that began 6 s after that: nothing may have changed.
# Sets settle_ms (storm start to the first call that saw the final set),
# changed_after (0/1) and timed_out (0/1).
settle_ms=0
changed_after=0
timed_out=0
sample_last() { # sets s_start s_own s_lc s_ok from the last sample
    local line
    line=$(tail -n1 "$GH_DIR/storm/samples" 2>/dev/null) || line=""
    read -r s_start _ s_own _ s_lc s_ok <<<"${line:-0 0 err err 0 0}"
}
wait_settled() {
    local deadline t settled_lc decided
    deadline=$(($(now_ms) + ${STORM_TIMEOUT_S:-60} * 1000))
    timed_out=0
    changed_after=0
    while :; do
        sleep 0.5
        t=$(now_ms)
        sample_last
        if ((t >= deadline)); then timed_out=1; break; fi
        (($(hc_done) >= hc_count)) || continue
        [[ $s_own != err ]] || continue
        ((s_start - s_lc >= 3000 && s_ok >= 3)) || continue
        # The storm must have begun: something changed, or 15 s passed.
        ((s_lc > storm_t0 || s_start - storm_t0 >= 15000)) || continue
        (($(gpu_health_busy) == 0)) || continue
        break
    done
    settled_lc=$s_lc
    settle_ms=$((s_lc - storm_t0))
    ((settle_ms >= 0)) || settle_ms=0
    decided=$(now_ms)
    while :; do
        sleep 0.5
        sample_last
        [[ $s_own != err ]] && ((s_start >= decided + 6000)) && break
        if (($(now_ms) >= decided + 30000)); then timed_out=1; break; fi
    done
    [[ $s_lc == "$settled_lc" ]] || changed_after=1
}

# peak OWN|ALL: the largest count sampled.
peak() {
    local col=3
    [[ $1 == ALL ]] && col=4
    awk -v c="$col" '$c != "err" && $c + 0 > m { m = $c + 0 } END { print m + 0 }' "$GH_DIR/storm/samples"
}

# Final drained set (one sinfo after the storm): arrays own_final,
# other_final (node names) and reason_of[node].
declare -A reason_of=()
own_final=()
other_final=()
final_state() {
    local n s r
    own_final=()
    other_final=()
    reason_of=()
    while read -r n s r; do
        case $s in
        *drain* | drng*)
            reason_of[$n]=$r
            if [[ $r == gpu-health:* ]]; then own_final+=("$n"); else other_final+=("$n"); fi
            ;;
        esac
    done < <(sinfo -h -N -o '%N %T %E')
}

is_in() { # is_in WORD LIST...
    local w=$1 x
    shift
    for x in "$@"; do [[ $x == "$w" ]] && return 0; done
    return 1
}

# rpc_report FAULTY: the storm's RPCs (sdiag now, reset at the storm's
# start) minus the harness's sampling; appends to the table row.
rpc_cells=""
rpc_detail=""
rpc_report() {
    local faulty=$1 samples type count ave total=0 cells="" t
    local -A cnt=() avg=()
    samples=$(wc -l <"$GH_DIR/storm/samples")
    while read -r type count ave; do
        [[ $type == REQUEST_STATS_INFO ]] && continue
        count=$((count - samples * ${per_sample[$type]:-0}))
        ((count > 0)) || continue
        cnt[$type]=$count
        avg[$type]=$ave
        total=$((total + count))
    done < <(sdiag_types)
    local four=0
    for t in REQUEST_NODE_INFO REQUEST_NODE_INFO_SINGLE REQUEST_PARTITION_INFO REQUEST_UPDATE_NODE; do
        cells+=$(printf ' %6s/%-7s' "${cnt[$t]:-0}" "${avg[$t]:--}")
        four=$((four + ${cnt[$t]:-0}))
    done
    rpc_cells="$cells $(printf '%6s %7s %7s' "$total" \
        "$(awk -v t="$total" -v f="$faulty" 'BEGIN { printf "%.1f", f ? t / f : 0 }')" \
        "$(awk -v t="$four" -v f="$faulty" 'BEGIN { printf "%.1f", f ? t / f : 0 }')")"
    rpc_detail="$samples sinfo samples subtracted; by type:"
    for t in "${!cnt[@]}"; do rpc_detail+=" ${t#REQUEST_}=${cnt[$t]}/${avg[$t]}us"; done
}

# Counts from the gpu-health logs (diagnostics): nodes whose log says ...
log_nodes() { grep -l -e "$1" "$GH_DIR"/log/gpu-health-n*.log 2>/dev/null | wc -l; }

table_header() {
    say ""
    say "storm results ($nodes nodes; Slurm $(slurmd -V | awk '{ print $2 }'); scontrol_timeout_ms $scontrol_timeout; claim_timeout_ms $claim_timeout; RPC cells: count/ave_time us, harness sampling subtracted)"
    say "(g/a: drained by gpu-health / for any reason; total: every RPC but the harness's; rpc/flt: total per faulty node; 4/flt: the four types shown per faulty node)"
    say "$(printf '%-5s %6s %7s %9s %9s %8s %14s %14s %14s %14s %6s %7s %7s  %s' \
        storm faulty allowed 'final g/a' 'peak g/a' settle_s NODE_INFO NODE_INFO_SINGLE PARTITION_INFO UPDATE_NODE total 'rpc/flt' '4/flt' result)"
}
rows=()

# storm_begin NAME FRACTION: reset, configure; the caller then sets the
# faulty nodes' scenarios and calls storm_go.
storm_t0=0
storm_started=0
storm_begin() {
    storm_name=$1
    storm_started=$SECONDS
    storm_failed=0
    gh_say ""
    gh_say "=== storm $1: $2"
    storm_reset || check 1 "cluster reset before the storm"
    rm -rf "$GH_DIR/storm"
    mkdir -p "$GH_DIR/storm"
    hc_count=0
}

# storm_end FAULTY ALLOWED: the common checks, the table row and the
# diagnostics (after stop_sampler, rpc_report, final_state and the
# storm's own checks).
storm_end() {
    local faulty=$1 allowed=$2 pg pa result
    pg=$(peak OWN)
    pa=$(peak ALL)
    ((timed_out == 0)) || check 1 "the storm settled within ${STORM_TIMEOUT_S:-60} s"
    check "$changed_after" "nothing changed in the 6 s after the drained set settled"
    result=PASS
    ((storm_failed == 0)) || result=FAIL
    rows+=("$(printf '%-5s %6s %7s %9s %9s %8s %s  %s' "$storm_name" "$faulty" "$allowed" \
        "${#own_final[@]}/$((${#own_final[@]} + ${#other_final[@]}))" "$pg/$pa" "$(secs "$settle_ms")" "$rpc_cells" "$result")")
    local nz
    nz=$( [[ -f $GH_DIR/storm/hc ]] && awk '$4 != 0' "$GH_DIR/storm/hc" | wc -l || echo 0)
    local hc_note=""
    if ((hc_count)); then
        hc_note=$(awk 'NR == 1 || $2 < a { a = $2 } NR == 1 || $2 > b { b = $2 } $3 - $2 > d { d = $3 - $2 } END {
            printf "; health checks started within %.2f s, longest %.1f s", (b - a) / 1000, d / 1000 }' "$GH_DIR/storm/hc")
        hc_note+=", $nz exited non-zero"
    fi
    say "storm $storm_name: final gpu-health $((${#own_final[@]}))/all $((${#own_final[@]} + ${#other_final[@]})), peak $pg/$pa, settled after $(secs "$settle_ms") s$hc_note (storm with its reset: $((SECONDS - storm_started)) s)"
    say "  sampling: $(awk '$3 != "err" { n++ } $3 == "err" { e++ } $2 - $1 > m { m = $2 - $1 } END {
        printf "%d sinfo calls (%d failed), the longest took %.1f s", n + e, e, m / 1000 }' "$GH_DIR/storm/samples")"
    local left
    left=$(claimed_nodes | wc -l)
    say "  brake claims left in node Comments: $left"
    check "$((left != 0))" "no brake claim is left in a node's Comment (got $left)"
    say "  logs: $(log_nodes 'drain brake') nodes 'drain brake', $(log_nodes 'undoing the drain') undid a drain, $(log_nodes 'scontrol_timeout_ms') hit the Slurm time budget, $(log_nodes 'could not drain') failed to drain, $(log_nodes 'cannot count drained nodes') could not count, $(log_nodes 'cannot claim a drain') could not claim, $(log_nodes 'the claim took') claimed too slowly, $(log_nodes 'cannot look at the node table') could not look"
    say "  RPCs: $rpc_detail"
    # What explains the storm stays after the teardown.
    mkdir -p "$logs_dir/$storm_name"
    cp "$GH_DIR"/storm/samples "$GH_DIR"/storm/hc "$logs_dir/$storm_name/" 2>/dev/null || true
    cp "$GH_DIR"/log/gpu-health-n*.log "$logs_dir/$storm_name/" 2>/dev/null || true
    cp "$GH_DIR/log/slurmctld.log" "$logs_dir/$storm_name/" 2>/dev/null || true
    if ((storm_failed)); then
        storm_fail=$((storm_fail + 1))
        say "  storm $storm_name FAILED ($storm_failed checks)"
    else
        storm_pass=$((storm_pass + 1))
    fi
}

# Faulty nodes that stayed in service: each logged the brake and keeps its
# fault pending in its ledger.
check_held_back() { # FAULTY_NODE...
    local n no_log=() no_pending=() held=0 logged
    logged=" $(grep -l 'drain brake' "$GH_DIR"/log/gpu-health-n*.log 2>/dev/null | sed 's|.*/gpu-health-||; s|\.log$||' | tr '\n' ' ') "
    for n in "$@"; do
        [[ -n ${reason_of[$n]+x} ]] && continue
        held=$((held + 1))
        [[ $logged == *" $n "* ]] || no_log+=("$n")
        grep -q '"cause":"brake"' "$GH_DIR/$n/state/ledger.json" 2>/dev/null || no_pending+=("$n")
    done
    check "${#no_log[@]}" "every faulty node left in service ($held) logged \"drain brake\"${no_log[*]:+ (not: $(printf '%s ' "${no_log[@]:0:10}")...)}"
    check "${#no_pending[@]}" "every faulty node left in service ($held) keeps its fault pending in its ledger${no_pending[*]:+ (not: $(printf '%s ' "${no_pending[@]:0:10}")...)}"
}

all_nodes() { local i; for ((i = 1; i <= nodes; i++)); do printf 'n%d\n' "$i"; done; }

set_faulty() { # NODE...: the double-bit ECC scenario
    local n
    for n in "$@"; do gh_set_scenario "$n" h100x8-dbe; done
}

submit_storm_job() {
    storm_t0=$(now_ms)
    storm_job=$(gh_sbatch -N "$nodes" --gres=gpu:8 --exclusive --requeue --wrap true) || storm_job=""
}
