# shellcheck shell=bash
# Assertions for the end-to-end tests (sourced through ci/lib.sh).
#
# Every assertion appends one line "PASS|FAIL<TAB><test><TAB><message>" to
# $GH_RESULTS (set by ci/e2e/run) and returns 0, so one failed check does
# not hide the next ones; use `|| return 1` after a `require_*` helper when
# the rest of a test makes no sense without it.
#
# On failure the message is followed by the tails of the logs that explain
# it: the gpu-health and slurmd logs of the nodes in $GH_FOCUS (default:
# all nodes) and slurmctld's log.

GH_TEST=${GH_TEST:-adhoc}

gh_record() {
    local verdict=$1 message=$2
    printf '%s\t%s\t%s\n' "$verdict" "$GH_TEST" "${message//$'\n'/ }" >>"${GH_RESULTS:-/dev/null}"
}

# Tails of the logs that explain a failure.
gh_context() {
    local node nodes lines=${GH_CONTEXT_LINES:-12} f
    nodes=${GH_FOCUS:-$(gh_nodes 2>/dev/null | tr '\n' ' ')}
    for node in $nodes; do
        for f in "$(gh_gpu_health_log "$node")" "$(gh_slurmd_log "$node")"; do
            [[ -f $f ]] || continue
            printf '    --- tail of %s\n' "$f"
            tail -n "$lines" "$f" | sed 's/^/    | /'
        done
    done
    f=$(gh_slurmctld_log)
    if [[ -f $f ]]; then
        printf '    --- tail of %s\n' "$f"
        tail -n "$lines" "$f" | sed 's/^/    | /'
    fi
}

pass() {
    gh_record PASS "$1"
    printf '  ok    %s\n' "$1"
}

fail() {
    gh_record FAIL "$1"
    printf '  FAIL  %s\n' "$1"
    gh_context
}

# A test that cannot run here (say, it needs a Slurm release or a kernel
# feature this machine lacks) says so with the reason; the runner counts
# and lists skips, so a missing check is never mistaken for a passed one.
skip() {
    gh_record SKIP "$1"
    printf '  SKIP  %s\n' "$1"
}

# assert_eq ACTUAL EXPECTED MESSAGE
assert_eq() {
    if [[ $1 == "$2" ]]; then pass "$3"; else fail "$3: got '$1', expected '$2'"; fi
}

# assert_match TEXT REGEX MESSAGE (bash extended regex)
assert_match() {
    if [[ $1 =~ $2 ]]; then pass "$3"; else fail "$3: '$1' does not match /$2/"; fi
}

# assert_contains TEXT SUBSTRING MESSAGE
assert_contains() {
    if [[ $1 == *"$2"* ]]; then pass "$3"; else fail "$3: '$2' not in '${1:0:400}'"; fi
}

assert_not_contains() {
    if [[ $1 != *"$2"* ]]; then pass "$3"; else fail "$3: '$2' unexpectedly in '${1:0:400}'"; fi
}

# assert_le A B MESSAGE: numeric A <= B (decimals allowed)
assert_le() {
    if awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; then
        pass "$3 ($1 <= $2)"
    else
        fail "$3: $1 > $2"
    fi
}

# assert_file PATH MESSAGE
assert_file() {
    if [[ -f $1 ]]; then pass "$2"; else fail "$2: $1 does not exist"; fi
}

# assert_ok MESSAGE COMMAND...: the command exits 0
assert_ok() {
    local message=$1 out rc=0
    shift
    out=$("$@" 2>&1) || rc=$?
    if ((rc == 0)); then pass "$message"; else fail "$message: '$*' exited $rc: ${out:0:400}"; fi
}

# assert_node_state NODE PATTERN TIMEOUT_S MESSAGE: waits for the state.
assert_node_state() {
    if gh_wait_node_state "$1" "$2" "$3" 2>/dev/null; then
        pass "$4"
    else
        fail "$4: node $1 is '$(gh_node_state "$1")' after $3 s, expected '$2' (reason: '$(gh_node_reason "$1")')"
    fi
}

# assert_job_state JOB PATTERN TIMEOUT_S MESSAGE
assert_job_state() {
    if gh_wait_job_state "$1" "$2" "$3" 2>/dev/null; then
        pass "$4"
    else
        fail "$4: job $1 is '$(gh_job_field "$1" JobState)' after $3 s, expected '$2' ($(scontrol -o show job "$1" 2>&1 | cut -c1-300))"
    fi
}
