# shellcheck shell=bash
# Shared helpers for the local test cluster (ci/slurm-up, ci/slurm-down,
# ci/demo and the end-to-end tests in ci/e2e/). Source it; it defines
# functions and variables only, it starts nothing.
#
# Layout of the cluster directory ($GH_DIR):
#   etc/slurm.conf gres.conf plugstack.conf gpu-health.toml gpu-health.d/<node>.toml
#   munge/            munged's key, socket, pid and log (own munged, the host's
#                     munge is never touched)
#   ctld/             slurmctld state
#   spool/<node>/     slurmd spool
#   run/              pid files
#   log/              slurmctld.log slurmd-<node>.log gpu-health-<node>.log
#   <node>/lib/       libnvidia-ml.so.1 (copy of nvml-sim) and scenario.json
#   <node>/kernel.log the node's kernel log (gpu-health reads it like /dev/kmsg)
#   <node>/state/     gpu-health state_dir of the node
#   jobs/             job output
#   harness.state     what slurm-up started and created (read by slurm-down)

# Used by the scripts that source this file.
# shellcheck disable=SC2034
GH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The Slurm series (22.05 on the host, the others in Debian roots).
# shellcheck source=ci/series.sh
source "$GH_REPO/ci/series.sh"
# One cluster directory per checkout and Slurm series, so that clusters
# of several checkouts, and the series of one, do not meet (slurm-down
# finds its processes by this path).
GH_DIR=${GPU_HEALTH_SLURM_DIR:-/tmp/gpu-health-slurm$GH_SERIES_DIR_TAG.$GH_CHECKOUT_ID}
# The build of this Slurm series: the host's, or the one made in the
# series' root with its own cargo (ci/package --slurm SERIES).
GH_BIN_DIR=${GPU_HEALTH_BIN_DIR:-$GH_REPO/target$GH_SERIES_TARGET/release}
GH_SCENARIO_DIR=${GPU_HEALTH_SCENARIO_DIR:-$GH_REPO/nvml-sim/scenarios}
# nvml-sim library: the built cdylib, or an installed copy.
# shellcheck disable=SC2034
GH_NVML_SIM=${GPU_HEALTH_NVML_SIM:-$GH_BIN_DIR/libnvml_sim.so}

gh_say() { printf '%s\n' "$*"; }
gh_warn() { printf 'WARNING: %s\n' "$*" >&2; }
gh_die() {
    printf 'ERROR: %s\n' "$*" >&2
    exit 1
}

# Print the comment block at the top of the running script (its --help).
gh_usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

# Whether this machine has a writable cgroup v1 devices hierarchy (what
# ci/slurm-up --run-in-job needs for ConstrainDevices=yes).
gh_cgroup_v1_devices() {
    local opts
    opts=$(findmnt -n -o FSTYPE,OPTIONS /sys/fs/cgroup/devices 2>/dev/null) || return 1
    [[ $opts == cgroup\ * && ,${opts#* }, == *,rw,* && ,${opts#* }, == *,devices,* ]]
}

# Re-point every derived path at another cluster directory (--dir).
gh_set_dir() {
    GH_DIR=$1
    export GPU_HEALTH_SLURM_DIR=$GH_DIR
}

gh_state_file() { printf '%s/harness.state\n' "$GH_DIR"; }

# Value of KEY in harness.state (lines KEY=VALUE; last one wins).
gh_state_get() {
    local key=$1 file
    file=$(gh_state_file)
    [[ -f $file ]] || return 1
    awk -F= -v k="$key" '$1 == k { v = substr($0, length(k) + 2) } END { if (v == "") exit 1; print v }' "$file"
}

gh_state_put() { printf '%s=%s\n' "$1" "$2" >>"$(gh_state_file)"; }

# Point the Slurm commands of this shell at the test cluster.
gh_use_cluster() {
    [[ -f $GH_DIR/etc/slurm.conf ]] || gh_die "no test cluster in $GH_DIR (run ci/slurm-up)"
    export SLURM_CONF=$GH_DIR/etc/slurm.conf
}

# Node names n1..nN of the running cluster.
gh_nodes() {
    local n i
    n=$(gh_state_get nodes) || gh_die "no test cluster in $GH_DIR"
    for ((i = 1; i <= n; i++)); do printf 'n%d\n' "$i"; done
}

gh_node_count() { gh_state_get nodes; }

# Slurm hostlist of all nodes, e.g. n[1-4].
gh_node_list() { printf 'n[1-%s]\n' "$(gh_node_count)"; }

# --- per-node fault injection -------------------------------------------

# gh_set_scenario NODE NAME: NAME is a file in the scenario directory
# (with or without .json) or a path. Replaced atomically: a prolog that
# runs at this moment sees the old or the new scenario, never half of one.
gh_set_scenario() {
    local node=$1 name=$2 src dst
    case $name in
    */*) src=$name ;;
    *) src=$GH_SCENARIO_DIR/${name%.json}.json ;;
    esac
    [[ -f $src ]] || gh_die "scenario $src not found"
    dst=$GH_DIR/$node/lib/scenario.json
    [[ -d $GH_DIR/$node/lib ]] || gh_die "node $node has no lib directory in $GH_DIR"
    cp "$src" "$dst.tmp.$$"
    mv -f "$dst.tmp.$$" "$dst"
}

gh_kernel_log() { printf '%s/%s/kernel.log\n' "$GH_DIR" "$1"; }

# gh_kernel_log_append NODE LINE...: append kernel log records (one per
# argument) to the node's kernel log, as the kernel would.
gh_kernel_log_append() {
    local node=$1 line
    shift
    for line in "$@"; do
        printf '%s\n' "$line" >>"$(gh_kernel_log "$node")"
    done
}

# A dmesg-style Xid record: gh_xid_line BUS XID PID TEXT
gh_xid_line() {
    local secs
    secs=$(awk '{ printf "%.6f", $1 }' /proc/uptime)
    printf '[%12s] NVRM: Xid (PCI:%s): %s, pid=%s, %s\n' "$secs" "$1" "$2" "$3" "$4"
}

gh_dropin() { printf '%s/etc/gpu-health.d/%s.toml\n' "$GH_DIR" "$1"; }

# Replace a node's drop-in by a file that is not TOML.
gh_break_dropin() {
    local f
    f=$(gh_dropin "$1")
    [[ -f $f.good ]] || cp "$f" "$f.good"
    printf 'nvml_library = "unterminated\nthis is = = not toml\n' >"$f.tmp.$$"
    mv -f "$f.tmp.$$" "$f"
}

gh_restore_dropin() {
    local f
    f=$(gh_dropin "$1")
    if [[ -f $f.good ]]; then mv -f "$f.good" "$f"; fi
}

gh_gpu_health_log() { printf '%s/log/gpu-health-%s.log\n' "$GH_DIR" "$1"; }
gh_slurmd_log() { printf '%s/log/slurmd-%s.log\n' "$GH_DIR" "$1"; }
gh_slurmctld_log() { printf '%s/log/slurmctld.log\n' "$GH_DIR"; }

# Install the Debian packages the cluster and the build need, when missing.
gh_install_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    [[ -f /usr/include/slurm/spank.h ]] || missing+=(libslurm-dev)
    dpkg -s slurm-wlm >/dev/null 2>&1 || missing+=(slurm-wlm)
    command -v python3 >/dev/null || missing+=(python3)
    command -v ss >/dev/null || missing+=(iproute2)
    # promtool: the tests check every Prometheus textfile and the alerting
    # rules with it (Debian's prometheus; its service is kept from starting).
    command -v promtool >/dev/null || missing+=(prometheus)
    ((${#missing[@]})) || return 0
    # A root's network namespace reaches no registry: what it lacks belongs
    # in its package list, installed when the root is made.
    [[ -z ${GPU_HEALTH_IN_ROOT:-} ]] ||
        gh_die "the Slurm ${GPU_HEALTH_IN_ROOT} root lacks ${missing[*]}: add it to GH_ROOT_PACKAGES (ci/debian-root.sh)"
    command -v apt-get >/dev/null || gh_die "missing ${missing[*]} and no apt-get to install them"
    gh_say "installing ${missing[*]} (Debian packages)"
    # Keep the packages' own services (munge, slurmd, slurmctld) from being
    # started by the installation: the harness runs its own daemons.
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        own_policy=1
    fi
    local rc=0 log=/tmp/gpu-health-apt.$$.log
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$log" 2>&1 || {
        DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$log" 2>&1 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$log" 2>&1
    } || rc=$?
    ((own_policy)) && rm -f "$policy"
    if ((rc)); then
        tail -n 20 "$log" >&2
        gh_die "apt-get install ${missing[*]} failed (log: $log)"
    fi
    rm -f "$log"
}

# --- processes of the cluster --------------------------------------------

# Is PID alive and started by this cluster? slurm-up gives its daemons the
# variable GPU_HEALTH_HARNESS_DIR=$GH_DIR; their children (slurmstepd,
# prologs, jobs) inherit it. A recycled pid never matches.
gh_is_ours() {
    [[ -r /proc/$1/environ ]] || return 1
    tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF "GPU_HEALTH_HARNESS_DIR=$GH_DIR"
}

# gh_ours_among PID...: those of PID that are alive and started by this
# cluster, one per line; one grep for all of them (a zombie's environ
# reads empty, so it never matches).
gh_ours_among() {
    local files=() pid f
    for pid in "$@"; do
        [[ $pid =~ ^[0-9]+$ ]] && files+=("/proc/$pid/environ")
    done
    ((${#files[@]})) || return 0
    { grep -lzxF -- "GPU_HEALTH_HARNESS_DIR=$GH_DIR" "${files[@]}" 2>/dev/null || true; } |
        while IFS= read -r f; do
            f=${f#/proc/}
            printf '%s\n' "${f%/environ}"
        done
}

# Prologs of this cluster still running, and their NVML probe children
# (a fork, named gpu-health-nvml): slurmd builds the Prolog's environment
# itself (so the harness marker is not in it), with this cluster's
# SLURM_CONF and SLURM_SCRIPT_CONTEXT=prolog_slurmd.
gh_cluster_prologs() {
    local p pid c
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        c=""
        read -r c 2>/dev/null <"$p/comm" || continue
        [[ $c == gpu-health-prol || $c == gpu-health-nvml ]] || continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$GH_DIR/etc/slurm.conf" || continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_SCRIPT_CONTEXT=prolog_slurmd" || continue
        printf '%s\n' "$pid"
    done
    return 0
}

# Live pids of this cluster (not zombies), optionally only those whose
# command name (comm, 15 characters at most) is COMM.
gh_marked_pids() {
    local comm=${1:-} pid c p
    local all=()
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        all+=("$pid")
    done
    while IFS= read -r pid; do
        if [[ -n $comm ]]; then
            c=""
            read -r c 2>/dev/null <"/proc/$pid/comm" || true
            [[ $c == "$comm" ]] || continue
        fi
        printf '%s\n' "$pid"
    done < <(gh_ours_among "${all[@]}")
    return 0
}

# --- Slurm queries -------------------------------------------------------

# Base state of a node, lower case, without flags: idle, alloc, mix, down...
# plus "+drain" when draining/drained: e.g. "idle+drain".
gh_node_state() {
    local s
    s=$(scontrol -o show node "$1" 2>/dev/null | tr ' ' '\n' | awk -F= '$1 == "State" { print $2 }')
    s=${s,,}
    local base=${s%%+*} flags=""
    [[ $s == *drain* ]] && flags="+drain"
    printf '%s%s\n' "$base" "$flags"
}

# The node's Reason= (empty when none).
gh_node_reason() {
    # The optional Comment (the drain brake's claim) and Extra follow it.
    scontrol -o show node "$1" 2>/dev/null | sed -e 's/ Comment=.*$//; s/ Extra=.*$//' |
        sed -n 's/.* Reason=\(.*\) \[[^]]*\]$/\1/p; s/.* Reason=\(.*\)$/\1/p' | head -n1
}

# gh_wait_node_state NODE PATTERN TIMEOUT_S: wait until gh_node_state
# matches the extended regex PATTERN. Fails with the last state seen.
gh_wait_node_state() {
    local node=$1 pattern=$2 timeout=${3:-30} deadline state
    deadline=$((SECONDS + timeout))
    while :; do
        state=$(gh_node_state "$node")
        [[ $state =~ ^($pattern)$ ]] && return 0
        ((SECONDS >= deadline)) && break
        sleep 0.5
    done
    gh_warn "node $node is '$state' after ${timeout}s, expected '$pattern'"
    return 1
}

# One field of `scontrol show job` (e.g. JobState, NodeList, Restarts).
gh_job_field() {
    scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print substr($0, length(k) + 2); exit }'
}

# gh_wait_job_state JOB PATTERN TIMEOUT_S
gh_wait_job_state() {
    local job=$1 pattern=$2 timeout=${3:-60} deadline state
    deadline=$((SECONDS + timeout))
    while :; do
        state=$(gh_job_field "$job" JobState)
        [[ $state =~ ^($pattern)$ ]] && return 0
        ((SECONDS >= deadline)) && break
        sleep 0.5
    done
    gh_warn "job $job is '$state' after ${timeout}s, expected '$pattern'"
    return 1
}

# gh_sbatch ARGS...: submit, print the job id. Output goes to $GH_DIR/jobs.
gh_sbatch() {
    sbatch --parsable --output="$GH_DIR/jobs/%j.out" --chdir="$GH_DIR/jobs" "$@" | cut -d';' -f1
}

# --- whole-cluster reset (between tests) ---------------------------------

# Cancel all jobs, healthy scenario and good drop-in everywhere, empty
# kernel logs, state and Comments, resume every node, wait until all are idle.
gh_reset_cluster() {
    local node deadline
    scancel --user=root 2>/dev/null || true
    # Cancelled and finished jobs complete first (their Epilog still writes
    # to the state directories).
    deadline=$((SECONDS + 60))
    while [[ -n $(squeue -h -t PD,R,CG -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.3; done
    for node in $(gh_nodes); do
        gh_restore_dropin "$node"
        gh_set_scenario "$node" "${GH_DEFAULT_SCENARIO:-h100x8-healthy}"
        : >"$(gh_kernel_log "$node")"
        rm -rf "${GH_DIR:?}/$node/state"
        mkdir -p "$GH_DIR/$node/state"
        # What gpu-health keeps in the Comment (brake words, the reboots
        # it asked for) outlives its state directory: a test starts
        # without them.
        scontrol update "NodeName=$node" Comment= 2>/dev/null || true
    done
    for node in $(gh_nodes); do gh_resume_node "$node" || true; done
    for node in $(gh_nodes); do
        gh_wait_node_state "$node" idle 60 || return 1
    done
}

# gh_sbatch_wait TIMEOUT_S ARGS...: submit with --wait; sets GH_JOB (id)
# and GH_JOB_RC (sbatch's exit status: the job's, or 124 on timeout).
gh_sbatch_wait() {
    local limit=$1 out
    shift
    GH_JOB_RC=0
    out=$(timeout "$limit" sbatch --parsable --wait --output="$GH_DIR/jobs/%j.out" \
        --chdir="$GH_DIR/jobs" "$@") || GH_JOB_RC=$?
    GH_JOB=$(printf '%s\n' "$out" | head -n1 | cut -d';' -f1)
}

# Content of a file, nothing when it does not exist (for assertions).
gh_cat() { cat "$@" 2>/dev/null || true; }

# Resume a node when it is drained or down (RESUME of an idle node is an
# error in Slurm).
gh_resume_node() {
    local state
    state=$(gh_node_state "$1")
    if [[ $state == *drain* || $state == down* ]]; then
        scontrol update "NodeName=$1" State=RESUME
    fi
}

# gh_stop_slurmd NODE: stop NODE's slurmd (when it runs) and wait until
# it is gone; slurmctld notices only later, as with a node that goes down.
gh_stop_slurmd() {
    local pidf=$GH_DIR/run/slurmd-$1.pid pid i
    pid=$(cat "$pidf" 2>/dev/null) || pid=""
    if [[ -n $pid ]] && gh_is_ours "$pid"; then
        kill -TERM "$pid"
        for ((i = 0; i < 150; i++)); do
            [[ -e /proc/$pid ]] || break
            sleep 0.1
        done
    fi
    rm -f "$pidf"
}

# gh_restart_slurmd NODE [--conf FILE] [VAR=VALUE...]: stop NODE's slurmd
# and start it again (with slurm.conf FILE instead of the cluster's, and
# the extra environment), as a site restarts one node's slurmd; the new
# pid is recorded for slurm-down. Returns when its pid file is there.
gh_restart_slurmd() {
    local node=$1 conf=$GH_DIR/etc/slurm.conf pidf i
    shift
    if [[ ${1:-} == --conf ]]; then conf=$2; shift 2; fi
    pidf=$GH_DIR/run/slurmd-$node.pid
    gh_stop_slurmd "$node"
    env -u SLURM_CONF "GPU_HEALTH_HARNESS_DIR=$GH_DIR" "$@" slurmd -f "$conf" -N "$node" || return 1
    for ((i = 0; i < 100; i++)); do
        [[ -s $pidf ]] && break
        sleep 0.1
    done
    [[ -s $pidf ]] || return 1
    gh_state_put slurmd_pid "$(cat "$pidf")"
}

# Job output file.
gh_job_out() { printf '%s/jobs/%s.out\n' "$GH_DIR" "$1"; }

# shellcheck source=ci/assert.sh
source "$GH_REPO/ci/assert.sh"
# shellcheck source=ci/debian-root.sh
source "$GH_REPO/ci/debian-root.sh"
