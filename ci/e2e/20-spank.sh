# shellcheck shell=bash disable=SC2016 # job commands expand $SLURM_* on the node
# End-to-end tests of the gpu_health SPANK plugin (issue 5). Run by
# ci/e2e/run, which resets the cluster before each test_* function.
#
# Tests that change plugstack.conf or a node's drop-in save them first and
# put them back when the test ends (EXIT trap of the test's own shell).

# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

SPANK_FIXTURES=$GH_REPO/core/tests/fixtures/sysfs
IB_HCAS="=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_7:1"

spank_plugstack() { printf '%s/etc/plugstack.conf\n' "$GH_DIR"; }

# Save plugstack.conf and the drop-ins of n1, n2; restored at test end.
spank_save_config() {
    local f
    for f in "$(spank_plugstack)" "$(gh_dropin n1)" "$(gh_dropin n2)"; do
        cp "$f" "$f.spank-saved"
    done
    trap spank_restore_config EXIT
}

spank_restore_config() {
    local f
    for f in "$(spank_plugstack)" "$(gh_dropin n1)" "$(gh_dropin n2)"; do
        if [[ -f $f.spank-saved ]]; then mv -f "$f.spank-saved" "$f"; fi
    done
}

# spank_plugin_args ARGS...: the plugin's plugstack line gets ARGS instead
# of the harness's sysfs_root= (so that each node's drop-in decides).
spank_plugin_args() {
    local f line
    f=$(spank_plugstack)
    line=$(grep -m1 'libgpu_health_spank' "$f") || {
        fail "plugstack.conf has no gpu_health line (plugin not built?)"
        return 1
    }
    line=$(printf '%s\n' "$line" | sed 's/ sysfs_root=[^ ]*//')
    {
        grep -v 'libgpu_health_spank' "$f"
        printf '%s %s\n' "$line" "$*"
    } >"$f.tmp.$$"
    mv -f "$f.tmp.$$" "$f"
}

# spank_node_fabric NODE FIXTURE: the node's sysfs is the fixture tree.
spank_node_fabric() {
    printf 'sysfs_root = "%s/%s"\n' "$SPANK_FIXTURES" "$2" >>"$(gh_dropin "$1")"
}

# Exit status and combined output of a command: sets OUT and RC.
run_capture() {
    RC=0
    OUT=$(timeout 90 "$@" 2>&1) || RC=$?
}

# 1. A bad --gpu-health value is refused at submission, listing the
#    allowed values; no job reaches slurmctld.
test_bad_mode_refused_at_submission() {
    local before after
    before=$(squeue -h -o %i | wc -l)
    run_capture sbatch --gpu-health=bogus --wrap true
    assert_eq "$RC" 1 "sbatch --gpu-health=bogus exits 1"
    assert_contains "$OUT" "--gpu-health=bogus" "the message names the bad value"
    assert_contains "$OUT" "off, warn, strict" "the message lists the allowed values"
    after=$(squeue -h -o %i | wc -l)
    assert_eq "$after" "$before" "no job was queued"
    run_capture srun --tp-size=0 true
    assert_eq "$RC" 1 "srun --tp-size=0 is refused"
    assert_contains "$OUT" "--tp-size=0" "the message names the bad --tp-size"
}

# 2. NCCL variables derived from each node's fabric; a value the user set
#    survives.
test_nccl_env_from_fabric_keeps_users_value() {
    GH_FOCUS="n1 n2"
    spank_save_config
    spank_plugin_args
    spank_node_fabric n1 ib-ndr8-one-down
    spank_node_fabric n2 roce-v2
    run_capture env NCCL_IB_TIMEOUT=19 srun -w n1 --gpu-health=strict env
    assert_eq "$RC" 0 "srun --gpu-health=strict env runs on n1 (IB fixture)"
    assert_contains "$OUT" "NCCL_IB_HCA=$IB_HCAS" "NCCL_IB_HCA lists the 7 ACTIVE IB ports exactly"
    assert_contains "$OUT" "NCCL_IB_TIMEOUT=19" "the user's NCCL_IB_TIMEOUT survives"
    assert_not_contains "$OUT" "NCCL_IB_TIMEOUT=22" "the derived NCCL_IB_TIMEOUT does not replace it"
    # A value the plugin cannot read as text (a byte that is not UTF-8)
    # is still the user's: kept, not taken for unset.
    run_capture env NCCL_IB_TIMEOUT=$'1\xff9' srun -w n1 bash -c 'printf "TO=%s\n" "$NCCL_IB_TIMEOUT" | od -An -c | tr -d " \n"'
    assert_eq "$RC" 0 "srun runs with a user value that is not UTF-8"
    assert_contains "$OUT" 'TO=13779' "the user's non-UTF-8 NCCL_IB_TIMEOUT survives"
    assert_not_contains "$OUT" "NCCL_IB_GID_INDEX" "no GID index on InfiniBand"
    run_capture srun -w n2 env
    assert_contains "$OUT" "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" "RoCE node n2 gets its two ports"
    assert_contains "$OUT" "NCCL_IB_GID_INDEX=3" "RoCE v2 IPv4 GID index 3 on n2"
    assert_contains "$OUT" "NCCL_IB_TIMEOUT=22" "default NCCL_IB_TIMEOUT 22 on n2"
    # The admin command shows what the plugin set, through the same code.
    local job_vars shown
    job_vars=$(grep '^NCCL_IB_' <<<"$OUT" | sort)
    shown=$(SLURMD_NODENAME=n2 GPU_HEALTH_CONFIG=$GH_DIR/etc/gpu-health.toml \
        "$GH_BIN_DIR/gpu-health" nccl-env --plugstack "$(spank_plugstack)" | sed -n 's/^  \(NCCL_IB_[A-Z_]*=\)/\1/p' | sort)
    assert_eq "$shown" "$job_vars" "gpu-health nccl-env on n2 shows the variables the job got"
}

# 3. Admin settings: nccl_set, nccl_ib_tc, nccl_force; a plugstack typo is
#    reported to the user and breaks nothing.
test_admin_arguments_and_typos() {
    GH_FOCUS="n1"
    spank_save_config
    spank_plugin_args nccl_set=NCCL_NET_GDR_LEVEL=PHB nccl_ib_tc=106 nccl_force=NCCL_IB_TIMEOUT nccl_ib_timout=20
    spank_node_fabric n1 ib-ndr8-one-down
    run_capture env NCCL_IB_TIMEOUT=19 srun -w n1 env
    assert_eq "$RC" 0 "srun runs despite the unknown plugstack key"
    assert_contains "$OUT" 'plugstack.conf argument "nccl_ib_timout=20"' "the typo is shown to the user"
    assert_contains "$OUT" "NCCL_IB_TIMEOUT=22" "nccl_force replaces the user's NCCL_IB_TIMEOUT"
    assert_contains "$OUT" "NCCL_NET_GDR_LEVEL=PHB" "nccl_set reaches the job"
    assert_contains "$OUT" "NCCL_IB_TC=106" "nccl_ib_tc reaches the job"
}

# 4. --nccl-debug: NCCL_DEBUG and a per-rank debug file in the job's cwd.
test_nccl_debug() {
    local dir=$GH_DIR/jobs/ncclwd
    mkdir -p "$dir"
    run_capture srun -w n1 --chdir="$dir" --nccl-debug env
    assert_contains "$OUT" "NCCL_DEBUG=INFO" "--nccl-debug sets NCCL_DEBUG=INFO"
    assert_contains "$OUT" "NCCL_DEBUG_FILE=$dir/nccl-debug.%h.%p" "debug file in the job's working directory"
    run_capture srun -w n1 --nccl-debug=warn env
    assert_contains "$OUT" "NCCL_DEBUG=WARN" "--nccl-debug=warn sets NCCL_DEBUG=WARN"
    # sbatch --nccl-debug with no level: the batch step and an srun inside
    # it (which reads the option back from the job's environment as
    # "(null)") both take INFO and run.
    gh_sbatch_wait 90 -w n1 --nccl-debug --wrap 'srun env'
    local out
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_eq "$GH_JOB_RC" 0 "sbatch --nccl-debug job $GH_JOB and its srun succeed"
    assert_contains "$out" "NCCL_DEBUG=INFO" "the srun inside sbatch --nccl-debug gets INFO"
    assert_not_contains "$out" "allowed levels" "no level error for a flag given without one"
}

# 5. strict on a node whose GPU2 PCIe link is degraded: the job fails with
#    the node, GPU and finding named; the node is not drained.
test_strict_job_refused_on_degraded_node() {
    GH_FOCUS="n2"
    gh_set_scenario n2 h100x8-pcie-degraded
    gh_sbatch_wait 90 -w n2 --gres=gpu:8 --gpu-health=strict --wrap 'echo job-ran'
    local out
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_match "$GH_JOB_RC" '^[1-9]' "strict job $GH_JOB on n2 fails"
    assert_eq "$(gh_job_field "$GH_JOB" JobState)" FAILED "job $GH_JOB is FAILED"
    assert_not_contains "$out" "job-ran" "the job script did not run"
    assert_contains "$out" "node n2" "the message names the node"
    assert_match "$out" "GPU2" "the message names the GPU"
    assert_contains "$out" "[pcie-link]" "the message names the finding"
    assert_contains "$out" "strict mode refuses this step" "the message says why it was refused"
    assert_eq "$(gh_node_state n2)" idle "n2 stays idle (not drained)"
    assert_eq "$(gh_node_reason n2)" "" "n2 has no drain reason"
}

# 6. warn on the same node: the job runs and the warning is printed once
#    per step.
test_warn_job_runs_with_warning() {
    GH_FOCUS="n2"
    gh_set_scenario n2 h100x8-pcie-degraded
    gh_sbatch_wait 90 -w n2 --gres=gpu:8 --gpu-health=warn --wrap 'echo job-ran; srun echo step-ran'
    local out
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_eq "$GH_JOB_RC" 0 "warn job $GH_JOB on n2 exits 0"
    assert_contains "$out" "job-ran" "the job script ran"
    assert_contains "$out" "step-ran" "its srun step ran"
    assert_contains "$out" "gpu-health: warning: node n2" "the warning is printed"
    assert_eq "$(grep -c 'gpu-health: warning' <<<"$out")" 2 "one warning per step (batch step and srun step)"
    assert_eq "$(gh_node_state n2)" idle "n2 stays idle"
}

# 7. Tensor-parallel placement: whole NVLink groups run, a group larger
#    than a node is refused in strict mode, PCIe-only groups are refused in
#    strict and warned about in warn mode.
test_tp_placement() {
    GH_FOCUS="n1 n2"
    run_capture srun -N2 -n16 --ntasks-per-node=8 --gres=gpu:8 --gpu-health=strict --tp-size=8 \
        bash -c 'echo rank-$SLURM_PROCID'
    assert_eq "$RC" 0 "srun -N2 -n16 --tp-size=8 runs in strict mode"
    assert_eq "$(grep -c '^rank-' <<<"$OUT")" 16 "all 16 ranks ran"
    run_capture srun -N2 -n16 --ntasks-per-node=8 --gres=gpu:8 --gpu-health=strict --tp-size=16 true
    assert_eq "$RC" 1 "srun -N2 -n16 --tp-size=16 is refused in strict mode"
    assert_contains "$OUT" "tensor-parallel groups of 16" "the refusal explains the split"
    assert_contains "$OUT" "--ntasks-per-node" "the refusal says how to fix it"
    gh_set_scenario n2 l40sx4-pcie-only
    run_capture srun -w n2 -n2 --gres=gpu:2 --gpu-health=strict --tp-size=2 true
    assert_eq "$RC" 1 "TP group on PCIe-only L40S GPUs refused in strict mode"
    assert_contains "$OUT" "only through PCIe" "the refusal names the PCIe link"
    run_capture srun -w n2 -n2 --gres=gpu:2 --gpu-health=warn --tp-size=2 true
    assert_eq "$RC" 0 "the same step runs in warn mode"
    assert_contains "$OUT" "gpu-health: warning: node n2: --tp-size=2" "and warns"
}

# 8. --gpu-health=off is refused when the admin sets allow_off=no.
test_off_refused_with_allow_off_no() {
    spank_save_config
    spank_plugin_args allow_off=no
    run_capture sbatch --gpu-health=off --wrap true
    assert_eq "$RC" 1 "sbatch --gpu-health=off is refused with allow_off=no"
    assert_contains "$OUT" "allow_off=no" "the message says off is not allowed"
    run_capture srun -w n1 --gpu-health=warn true
    assert_eq "$RC" 0 "--gpu-health=warn still runs"
}

# 9. In a batch job over an IB node and a RoCE node, srun steps get each
#    node's own variables (not the batch node's, which the script's
#    environment carries), and a value the script changed is kept.
test_batch_steps_derive_per_node() {
    GH_FOCUS="n1 n2"
    spank_save_config
    spank_plugin_args
    spank_node_fabric n1 ib-ndr8-one-down
    spank_node_fabric n2 roce-v2
    gh_sbatch_wait 90 -N2 -w n1,n2 --wrap '
        echo "batch NCCL_IB_HCA=$NCCL_IB_HCA"
        srun -N2 --ntasks-per-node=1 -l bash -c "echo \$SLURMD_NODENAME HCA=\$NCCL_IB_HCA GID=\${NCCL_IB_GID_INDEX:-none} TO=\$NCCL_IB_TIMEOUT"
        export NCCL_IB_TIMEOUT=19
        srun -N2 --ntasks-per-node=1 -l bash -c "echo \$SLURMD_NODENAME changed TO=\$NCCL_IB_TIMEOUT"'
    local out
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_eq "$GH_JOB_RC" 0 "2-node batch job $GH_JOB exits 0"
    assert_contains "$out" "batch NCCL_IB_HCA=$IB_HCAS" "the batch step on n1 gets the IB list"
    assert_contains "$out" "n1 HCA=$IB_HCAS GID=none TO=22" "the srun step on n1 gets n1's variables"
    assert_contains "$out" "n2 HCA==mlx5_0:1,mlx5_1:1 GID=3 TO=22" "the srun step on n2 gets n2's RoCE variables, not the batch node's"
    assert_contains "$out" "n1 changed TO=19" "a value the script changed is kept on n1"
    assert_contains "$out" "n2 changed TO=19" "and on n2"
}

# 10. The built plugin references only symbols this Slurm exports (a Rust
#     cdylib binds all of them at load) and carries this Slurm's version.
test_plugin_binary_matches_this_slurm() {
    local so=$GH_BIN_DIR/libgpu_health_spank.so lib="" f missing=() sym want have defined
    for f in /usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so /usr/lib64/slurm/libslurmfull.so; do
        if [[ -f $f ]]; then lib=$f; break; fi
    done
    if [[ ! -f $so || -z $lib ]]; then
        fail "plugin ($so) or libslurmfull not found"
        return 0
    fi
    defined=$(nm -D --defined-only "$lib" | awk '{ print $3 }')
    while read -r sym; do
        grep -qxF "$sym" <<<"$defined" || missing+=("$sym")
    done < <(nm -D --undefined-only "$so" | awk '$2 !~ /@/ && $1 == "U" { print $2 }')
    assert_eq "${missing[*]}" "" "every Slurm symbol the plugin uses exists in $lib"
    want=$(awk '/#define SLURM_VERSION_NUMBER/ { print $3 }' /usr/include/slurm/slurm_version.h)
    have=$(python3 -c 'import ctypes,sys; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); l=ctypes.CDLL(sys.argv[2]); print(hex(ctypes.c_uint.in_dll(l, "plugin_version").value))' "$lib" "$so" 2>&1)
    assert_eq "$have" "$want" "plugin_version is slurm_version.h's SLURM_VERSION_NUMBER"
}

# 11. Near out of memory at the end of a step: the job's user is told once
#     per step and node (not once per task), in the step's own output, with
#     the GPUs' figures and the remedies, in warn and strict mode; nothing
#     in off mode, on a healthy node, or for GPUs outside the step. The
#     scenario's processes start 2 s before each query: the steps run 3 s.
test_near_oom_told_at_step_end() {
    GH_FOCUS="n1 n2"
    local sc=$GH_DIR/near-oom-2s.json notice='came near out of GPU memory'
    python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
for g in s["gpus"]:
    for p in g.get("accounting", {}).get("processes", []):
        p["started_ms_ago"] = 2000
json.dump(s, open(sys.argv[2], "w"))' "$GH_SCENARIO_DIR/h100x8-near-oom.json" "$sc"
    gh_set_scenario n1 "$sc"
    run_capture srun -N2 -w n1,n2 --ntasks-per-node=2 --gres=gpu:8 sleep 3
    assert_eq "$RC" 0 "a 2-node step on the near-OOM n1 and the healthy n2 exits 0"
    assert_eq "$(grep -c "$notice" <<<"$OUT")" 1 "one notice: n1's, once for its two tasks"
    assert_match "$OUT" "gpu-health: step [0-9]+\.0 $notice on n1 " "the notice names the step and the node"
    assert_contains "$OUT" "GPU1 peaked at 77.3 of 79.6 GiB (97%), GPU6 peaked at 77.3 of 79.6 GiB (97%)" "with the figures of the GPUs that came near"
    assert_contains "$OUT" "cheapest first: BF16/FP16 mixed precision, gradient checkpointing" "and what to try"
    assert_not_contains "$OUT" "pid" "no process of the node is named to the user"
    assert_contains "$(gh_cat "$(gh_gpu_health_log n1)")" "$notice" "the admin's log has it too"
    run_capture srun -w n1 --gres=gpu:8 --gpu-health=strict sleep 3
    assert_contains "$OUT" "$notice on n1" "strict mode tells it as well"
    run_capture srun -w n1 --gres=gpu:8 --gpu-health=off sleep 3
    assert_not_contains "$OUT" "$notice" "off mode does not"
    run_capture srun -w n1 --gres=gpu:1 sleep 3
    assert_not_contains "$OUT" "$notice" "a step on GPU0 alone (not near) is not told about GPU1 and GPU6"
    gh_sbatch_wait 60 -w n1 --gres=gpu:8 --wrap 'sleep 3'
    assert_contains "$(gh_cat "$(gh_job_out "$GH_JOB")")" "gpu-health: step $GH_JOB.batch $notice on n1" "a batch step's notice is in the job's output file"
}

# 12. A node whose sysfs holds what the kernel never writes there (a FIFO,
#     a 2 GB file, device names with a comma and an escape sequence): the
#     step starts at once, NCCL_IB_HCA lists only the usable ports, slurmd's
#     log says why, and none of it reaches the job's output.
test_hostile_sysfs_never_stalls_a_step() {
    GH_FOCUS="n1"
    local tree=$GH_DIR/sysfs-hostile ib log
    rm -rf "$tree"
    cp -r "$SPANK_FIXTURES/ib-ndr8-one-down" "$tree"
    ib=$tree/class/infiniband
    rm -f "$ib/mlx5_1/ports/1/state"
    mkfifo "$ib/mlx5_1/ports/1/state"
    truncate -s 2G "$ib/mlx5_2/ports/1/rate"
    cp -r "$ib/mlx5_0" "$ib/mlx5_0,mlx5_9"
    cp -r "$ib/mlx5_0" "$ib/"$'\e[2J'
    spank_save_config
    spank_plugin_args
    printf 'sysfs_root = "%s"\n' "$tree" >>"$(gh_dropin n1)"
    run_capture srun -w n1 bash -c 'echo "HCA=$NCCL_IB_HCA"'
    assert_eq "$RC" 0 "the step runs (no hang on the FIFO or the 2 GB file)"
    assert_contains "$OUT" "HCA==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_7:1" "NCCL_IB_HCA lists only the usable ports"
    assert_not_contains "$OUT" $'\e' "no escape sequence reaches the job's output"
    assert_not_contains "$OUT" "left out" "the notes are the admin's, not the job's"
    log=$(gh_cat "$(gh_slurmd_log n1)")
    assert_contains "$log" "RDMA port mlx5_1:1 left out" "slurmd's log names the port with the FIFO"
    assert_contains "$log" "a FIFO, not a regular file" "and why"
    assert_contains "$log" "larger than 65536 bytes" "the 2 GB file too"
    assert_contains "$log" 'RDMA device "mlx5_0,mlx5_9" left out' "the device whose name has a comma"
    assert_contains "$log" 'RDMA device "\u{1b}[2J" left out' "the device named with an escape, escaped"
    rm -rf "$tree"
}

# 13. The near-OOM figures at step end are the job's own: a batch job on one
#     GPU of the near-OOM n1 whose user set SLURM_STEP_GPUS=0-7 hears
#     nothing about GPU1 and GPU6 (another job's GPUs on a shared node);
#     slurmd's log names what was left out.
test_near_oom_only_for_the_jobs_own_gpus() {
    GH_FOCUS="n1"
    local sc=$GH_DIR/near-oom-2s.json notice='came near out of GPU memory' out
    python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
for g in s["gpus"]:
    for p in g.get("accounting", {}).get("processes", []):
        p["started_ms_ago"] = 2000
json.dump(s, open(sys.argv[2], "w"))' "$GH_SCENARIO_DIR/h100x8-near-oom.json" "$sc"
    gh_set_scenario n1 "$sc"
    gh_sbatch_wait 60 -w n1 --gres=gpu:1 --export=ALL,SLURM_STEP_GPUS=0-7 --wrap 'echo "claimed=$SLURM_STEP_GPUS jobs=$SLURM_JOB_GPUS"; sleep 3'
    out=$(gh_cat "$(gh_job_out "$GH_JOB")")
    assert_contains "$out" "claimed=0-7 jobs=0" "the batch step's environment claims all eight GPUs of a one-GPU job"
    assert_not_contains "$out" "$notice" "no figures of GPUs the job does not own"
    assert_contains "$(gh_cat "$(gh_slurmd_log n1)")" "SLURM_STEP_GPUS names GPU(s) 1,2,3,4,5,6,7 the job does not own" "slurmd's log says what was left out"
}
