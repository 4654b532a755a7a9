# shellcheck shell=bash
# ci/package --install / --uninstall: put the .deb on this machine for the
# end-to-end tests and take it off again, leaving the machine as it was
# as far as dpkg allows. Sourced by ci/package (uses $out, $release,
# $install_state and the gh_* helpers of ci/lib.sh).
# shellcheck disable=SC2154 # out, release, install_state: set by ci/package

# Where the package puts things, read back from dpkg (not assumed).
installed_path() {
    grep -m1 -E "$1" < <(dpkg -L gpu-health) || gh_die "the installed package has no file matching $1"
}

install_deb() {
    local deb=$1 undo log=$out/dpkg.log cli prolog epilog spank state_mode
    [[ $(id -u) == 0 ]] || gh_die "--install needs root (dpkg -i)"
    rm -f "$out/installed.env"
    # A state file from an interrupted earlier run already knows what the
    # machine looked like before: keep it.
    if [[ ! -f $install_state ]]; then
        if dpkg-query -W -f '${Status}' gpu-health 2>/dev/null | grep -q ' installed$'; then
            undo=keep
        elif [[ -e /etc/slurm/gpu-health.toml || -e /etc/slurm/plugstack.conf.d/gpu-health.conf ]]; then
            # A purge would delete these files: remove the programs only.
            undo=remove
        else
            undo=purge
        fi
        printf 'undo=%s\n' "$undo" >"$install_state"
    fi
    # confold: a configuration file already there is kept, never replaced.
    if ! DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold -i "$deb" >"$log" 2>&1 </dev/null; then
        cat "$log" >&2
        gh_die "dpkg -i $deb failed"
    fi

    cli=$(installed_path '/s?bin/gpu-health$')
    prolog=$(installed_path '/gpu-health-prolog$')
    epilog=$(installed_path '/gpu-health-epilog$')
    spank=$(installed_path '/libgpu_health_spank\.so$')
    for f in "$cli" "$prolog" "$epilog"; do
        [[ -x $f ]] || gh_die "$f is not an executable file after dpkg -i"
    done
    [[ -f $spank ]] || gh_die "$spank missing after dpkg -i"
    for f in /etc/slurm/gpu-health.toml /etc/slurm/plugstack.conf.d/gpu-health.conf; do
        [[ -f $f ]] || gh_die "$f missing after dpkg -i"
    done
    state_mode=$(stat -c '%U:%G %a' /var/lib/gpu-health 2>/dev/null || true)
    [[ $state_mode == "root:root 700" ]] || gh_warn "/var/lib/gpu-health is '$state_mode', expected 'root:root 700'"
    "$cli" help >/dev/null || gh_die "$cli help failed"
    check_man_and_completions "$cli"
    [[ -f $release/libnvml_sim.so ]] || gh_die "$release/libnvml_sim.so (the tests' NVML stand-in) is missing"

    # For ci/slurm-up and the e2e tests: slurm.conf and plugstack.conf name
    # the installed files; tests that run "$GH_BIN_DIR/<file>" themselves
    # find links to the installed files there, and the NVML stand-in of the
    # build tree (it is not packaged).
    local bin=$out/installed-bin f
    rm -rf "$bin"
    mkdir -p "$bin"
    for f in "$cli" "$prolog" "$epilog" "$spank" "$release/libnvml_sim.so"; do
        ln -s "$f" "$bin/"
    done
    {
        printf 'GPU_HEALTH_BIN_DIR=%q\n' "$bin"
        printf 'GPU_HEALTH_PROLOG=%q\n' "$prolog"
        printf 'GPU_HEALTH_EPILOG=%q\n' "$epilog"
        printf 'GPU_HEALTH_SPANK=%q\n' "$spank"
        printf 'GPU_HEALTH_NVML_SIM=%q\n' "$release/libnvml_sim.so"
    } >"$out/installed.env"
    gh_say "installed $(dpkg-query -W -f '${Package} ${Version}' gpu-health); environment for the tests in $out/installed.env"
}

# `man gpu-health` finds the installed page, made from the command's
# option tables, and bash completes the installed command's options.
check_man_and_completions() {
    local cli=$1 page bash_file
    if command -v man >/dev/null; then
        page=$(MANWIDTH=100 MANPAGER=cat man gpu-health 2>&1) || gh_die "man gpu-health failed: $page"
    else
        # A root without man-db (and no apt): the page as man would read it.
        gh_warn "man is not installed: checking the installed page's text instead of man gpu-health"
        page=$(zcat "$(installed_path '/man8/gpu-health\.8\.gz$')")
    fi
    for want in "config check" "npd" "near" "power" "svg" "completions"; do
        [[ $page == *"$want"* ]] || gh_die "the installed gpu-health(8) lacks '$want'"
    done
    bash_file=$(installed_path '/bash-completion/completions/gpu-health$')
    installed_path '/_gpu-health$' >/dev/null
    installed_path '/gpu-health\.fish$' >/dev/null
    # shellcheck disable=SC2016 # expanded by the inner bash
    [[ $(bash -c 'source "$1"; COMP_WORDS=(gpu-health report --po); COMP_CWORD=2; _gpu_health; echo "${COMPREPLY[*]}"' _ "$bash_file") == --power ]] ||
        gh_die "the installed bash completion does not complete 'gpu-health report --po'"
    gh_say "man gpu-health and the shell completions work"
}

uninstall_deb() {
    local undo
    if [[ ! -f $install_state ]]; then
        gh_say "nothing to undo: no ci/package --install record in $out"
        return 0
    fi
    undo=$(sed -n 's/^undo=//p' "$install_state")
    case $undo in
    purge) dpkg --purge gpu-health >/dev/null ;;
    remove)
        dpkg --remove gpu-health >/dev/null
        gh_warn "gpu-health removed; its configuration files were there before and are kept"
        ;;
    keep) gh_warn "a gpu-health package was installed before: left installed, now at the tested version" ;;
    *) gh_die "unreadable $install_state" ;;
    esac
    rm -rf "$install_state" "$out/installed.env" "$out/installed-bin"
    gh_say "gpu-health package: $undo done"
}
