# shellcheck shell=bash disable=SC2016 # job commands expand $SLURM_* on the node
# What goes wrong around the SPANK plugin never drains a node, on every
# Slurm series (issue 23). Since Slurm 25.05 any non-zero return of a SPANK
# callback is an error, and a failing slurm_spank_init in slurmstepd is a
# node failure (a drain) unless the plugin sets
# slurm_spank_init_failure_mode: the plugin sets ESPANK_JOB_FAILURE where
# the headers declare it, and its init never fails anyway. A strict
# refusal still fails the step, with its message (docs/spank.md).
#
# Each test changes plugstack.conf (the plugin's own line) and puts it
# back at its end; the node's configuration of the Prolog is not touched,
# so what is broken is only what the plugin reads.

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

sf_plugstack() { printf '%s/etc/plugstack.conf\n' "$GH_DIR"; }
sf_plugin() { sed -n 's/^required \([^ ]*libgpu_health_spank\.so\).*/\1/p' "$(sf_plugstack)" | head -n1; }

sf_save() {
    cp "$(sf_plugstack)" "$(sf_plugstack).sf-saved"
    trap sf_restore EXIT
}
sf_restore() {
    local f
    f=$(sf_plugstack)
    if [[ -f $f.sf-saved ]]; then mv -f "$f.sf-saved" "$f"; fi
}

# sf_args WORD...: these words appended to the plugin's plugstack line.
sf_args() {
    local f
    f=$(sf_plugstack)
    grep -q libgpu_health_spank "$f" || {
        fail "plugstack.conf has no gpu_health line (plugin not built?)"
        return 1
    }
    awk -v extra="$*" '/libgpu_health_spank/ { $0 = $0 " " extra } { print }' "$f" >"$f.tmp.$$"
    mv -f "$f.tmp.$$" "$f"
}

# sf_config NAME KEY VALUE: a gpu-health configuration for the plugin
# alone (plugstack config=): the cluster's one with KEY's line (the
# cluster's file has each key once) set to VALUE (TOML); prints its path.
sf_config() {
    local f=$GH_DIR/etc/spank-$1.toml
    awk -v k="$2" -v v="$3" '$1 == k && $2 == "=" { print k " = " v; next } { print }' \
        "$GH_DIR/etc/gpu-health.toml" >"$f"
    grep -q "^$2 = " "$f" || { fail "$2 is not a key of the cluster's gpu-health.toml"; return 1; }
    printf '%s\n' "$f"
}

# sf_run_jobs NODE WHAT: a warn batch job with an srun step, and a
# GPU step, on NODE: both run, the node stays in service.
sf_jobs_run_and_node_stays() {
    local node=$1 what=$2 out
    gh_sbatch_wait 90 -w "$node" --gres=gpu:8 --wrap 'echo batch-ran; srun echo step-ran'
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_eq "$GH_JOB_RC" 0 "$what: a batch job with a step on $node exits 0"
    assert_contains "$out" "batch-ran" "$what: the batch step ran"
    assert_contains "$out" "step-ran" "$what: the srun step ran"
    assert_eq "$(gh_job_field "$GH_JOB" Restarts)" 0 "$what: the job was not requeued"
    RC=0
    OUT=$(timeout 90 srun -w "$node" --gres=gpu:8 echo srun-ran 2>&1) || RC=$?
    assert_eq "$RC" 0 "$what: srun on $node exits 0"
    assert_contains "$OUT" "srun-ran" "$what: srun's task ran"
    assert_eq "$(gh_node_state "$node")" idle "$what: $node stays idle (not drained)"
    assert_eq "$(gh_node_reason "$node")" "" "$what: $node has no drain reason"
}

# sf_strict_refused NODE WHAT REGEX: a strict step on NODE fails with a
# message matching REGEX, and the node stays in service.
sf_strict_refused() {
    local node=$1 what=$2 text=$3
    RC=0
    OUT=$(timeout 90 srun -w "$node" --gres=gpu:8 --gpu-health=strict echo strict-ran 2>&1) || RC=$?
    assert_match "$RC" '^[1-9]' "$what: a strict step on $node fails"
    assert_not_contains "$OUT" "strict-ran" "$what: its task did not run"
    assert_match "$OUT" "$text" "$what: the user is told why"
    assert_contains "$OUT" "strict mode refuses this step" "$what: and that strict mode refused it"
    assert_eq "$(gh_node_state "$node")" idle "$what: $node stays idle after the refusal"
}

# 1. Wrong plugstack arguments: each reported, none drains or stops a job.
test_wrong_plugstack_arguments_never_drain() {
    GH_FOCUS=n3
    sf_save
    sf_args default_mode=bogus nccl_ib_timeout=99 allow_off=maybe stray_word config=relative.toml nccl_set=NOEQUALS
    sf_jobs_run_and_node_stays n3 "wrong plugstack arguments"
    assert_contains "$OUT" '"default_mode=bogus"' "the bad default_mode is reported to the user"
    assert_contains "$OUT" '"stray_word"' "a word without = is reported"
    assert_contains "$OUT" '"config=relative.toml"' "a relative config= is reported"
}

# 2. A missing, an unreadable and a broken configuration: the plugin runs
#    with its defaults; warn jobs run, strict steps are refused with the
#    reason (no verdict where the plugin now looks), nothing drains.
test_missing_or_broken_config_never_drains() {
    GH_FOCUS=n3
    local broken
    sf_save
    sf_args config="$GH_DIR/etc/no-such-gpu-health.toml"
    sf_jobs_run_and_node_stays n3 "missing config"
    # The default state directory (/var/lib/gpu-health) holds no verdict
    # of this cluster's jobs, or does not exist.
    sf_strict_refused n3 "missing config" "no gpu-health verdict|verdict unreadable"
    sf_restore
    sf_save
    broken=$GH_DIR/etc/spank-broken.toml
    printf 'state_dir = "unterminated\nthis is = = not toml\n' >"$broken"
    sf_args config="$broken"
    sf_jobs_run_and_node_stays n3 "broken config"
    assert_contains "$(gh_cat "$(gh_slurmd_log n3)")" "spank-broken.toml" "slurmd's log names the broken file"
    sf_strict_refused n3 "broken config" "no gpu-health verdict|verdict unreadable"
    sf_restore
    sf_save
    mkdir -p "$GH_DIR/etc/spank-dir.toml"
    sf_args config="$GH_DIR/etc/spank-dir.toml"
    sf_jobs_run_and_node_stays n3 "a directory as config"
}

# 3. An unusable state directory (writable by others, a regular file,
#    missing): the plugin reads no verdict; warn runs, strict is refused
#    saying why, nothing drains.
test_unusable_state_dir_never_drains() {
    GH_FOCUS=n3
    local cfg d=$GH_DIR/spank-state-open
    mkdir -p "$d"
    chmod 0777 "$d"
    sf_save
    cfg=$(sf_config open-state state_dir "\"$d\"")
    sf_args config="$cfg"
    sf_jobs_run_and_node_stays n3 "state directory writable by others"
    sf_strict_refused n3 "state directory writable by others" "verdict unreadable: state directory .* unusable"
    sf_restore
    sf_save
    : >"$GH_DIR/spank-state-file"
    cfg=$(sf_config file-state state_dir "\"$GH_DIR/spank-state-file\"")
    sf_args config="$cfg"
    sf_jobs_run_and_node_stays n3 "state directory is a file"
    sf_strict_refused n3 "state directory is a file" "verdict unreadable: state directory .* unusable"
    sf_restore
    sf_save
    cfg=$(sf_config no-state state_dir "\"$GH_DIR/no-such-state\"")
    sf_args config="$cfg"
    sf_jobs_run_and_node_stays n3 "state directory missing"
}

# 4. The gpu-health program the plugin runs at a step's end is missing
#    (or not executable): the GPU steps still end well, slurmd's log says
#    why, nothing drains.
test_missing_gpu_health_binary_never_drains() {
    GH_FOCUS=n3
    local cfg
    sf_save
    cfg=$(sf_config no-binary program "\"$GH_DIR/no-such-gpu-health\"")
    sf_args config="$cfg"
    sf_jobs_run_and_node_stays n3 "missing gpu-health binary"
    assert_contains "$(gh_cat "$(gh_slurmd_log n3)")" "no-such-gpu-health" "slurmd's log names the missing program"
    sf_restore
    sf_save
    cfg=$(sf_config noexec-binary program "\"$GH_DIR/etc/gpu-health.toml\"")
    sf_args config="$cfg"
    sf_jobs_run_and_node_stays n3 "gpu-health not executable"
}

# 5. The plugin carries the failure mode exactly where this Slurm's
#    headers declare it (25.05 and later), set to ESPANK_JOB_FAILURE.
test_init_failure_mode_matches_this_slurm() {
    local so declared=no has=no want_value value
    so=$(sf_plugin)
    [[ -f $so ]] || { fail "plugin $so not found"; return 0; }
    grep -qE '^extern int slurm_spank_init_failure_mode;' /usr/include/slurm/spank.h && declared=yes
    nm -D --defined-only "$so" | grep -qw slurm_spank_init_failure_mode && has=yes
    assert_eq "$has" "$declared" "the plugin defines slurm_spank_init_failure_mode exactly when spank.h declares it (Slurm $(gh_series))"
    if [[ $declared == yes ]]; then
        want_value=$(awk '/ESPANK_ERROR *=/ { n = $3 + 0; on = 1; next } on && /ESPANK_/ { n++; if ($1 ~ /^ESPANK_JOB_FAILURE/) { print n; exit } }' /usr/include/slurm/slurm_errno.h)
        value=$(sf_int_symbol "$so" slurm_spank_init_failure_mode)
        assert_eq "$value" "$want_value" "its value is ESPANK_JOB_FAILURE ($want_value)"
    fi
}

# sf_int_symbol SO NAME: the 4-byte little-endian int the library holds
# at symbol NAME (read from the file, as ci/package reads plugin_version).
sf_int_symbol() {
    local addr hex
    addr=$(objdump -T "$1" | awk -v n="$2" '$NF == n { print $1; exit }')
    [[ -n $addr ]] || return 0
    hex=$(objdump -s --start-address="0x$addr" --stop-address="$(printf '0x%x' $((0x$addr + 4)))" "$1" |
        awk 'NF >= 2 && $1 ~ /^[0-9a-f]+$/ && length($2) == 8 { b = $2; print substr(b, 7, 2) substr(b, 5, 2) substr(b, 3, 2) substr(b, 1, 2); exit }')
    [[ $hex =~ ^[0-9a-f]{8}$ ]] && printf '%d\n' "$((0x$hex))"
}

# 6. A failing slurm_spank_init in slurmstepd (made to fail on purpose
#    through slurmd's environment): on Slurm 25.05 and later the job
#    fails and the node stays in service (the plugin's failure mode);
#    before 25.05 Slurm has no such mode and drains the node, which is
#    why the plugin's init never fails for any other reason.
test_failing_init_fails_the_job_not_the_node() {
    GH_FOCUS=n4
    local state reason series job jstate deadline
    series=$(gh_series)
    trap 'scancel "${job:-0}" 2>/dev/null || true; gh_restart_slurmd n4 || true; gh_resume_node n4 || true' EXIT
    gh_restart_slurmd n4 GPU_HEALTH_SPANK_TEST_FAIL_INIT=1
    gh_wait_node_state n4 idle 60 || true
    job=$(gh_sbatch -w n4 --wrap 'echo batch-ran')
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
        jstate=$(gh_job_field "$job" JobState)
        state=$(gh_node_state n4)
        [[ $jstate == FAILED || $jstate == COMPLETED || $state == *drain* ]] && break
        sleep 0.5
    done
    sleep 2
    jstate=$(gh_job_field "$job" JobState)
    state=$(gh_node_state n4)
    reason=$(gh_node_reason n4)
    gh_say "    Slurm $series, failing init: job $jstate (Restarts=$(gh_job_field "$job" Restarts)), n4 $state${reason:+ ($reason)}"
    assert_contains "$(gh_cat "$(gh_slurmd_log n4)")" "slurm_spank_init fails on purpose" "the failing init is logged on n4"
    assert_not_contains "$(gh_cat "$(gh_job_out "$job")")" "batch-ran" "the batch script did not run"
    if gh_series_ge "$series" 25.05; then
        assert_contains "$(gh_cat "$(gh_slurmd_log n4)")" "ESPANK_JOB_FAILURE" "the plugin's failure mode is the job's"
        assert_eq "$state" idle "Slurm $series: n4 stays in service (not drained)"
        assert_eq "$reason" "" "Slurm $series: n4 has no drain reason"
        assert_eq "$jstate" FAILED "Slurm $series: the job failed"
        assert_eq "$(gh_job_field "$job" Restarts)" 0 "Slurm $series: the job was not requeued"
    else
        assert_match "$state" 'drain' "Slurm $series (no failure mode): n4 is drained, as Slurm does with a failing init"
    fi
}
