# shellcheck shell=bash
# The Slurm series that run in a Debian root of their own (ci/series.sh:
# 24.11 in Debian 13 trixie, 26.05 in Debian forky), each made with
# debootstrap and run in a network namespace of its own. Sourced by
# ci/lib.sh; defines functions only. The functions act on the series that
# gh_use_series / gh_enter_series chose (GH_ROOT, GH_ROOT_SUITE, GH_NETNS).
#
# - A root is cached between runs on one machine
#   ($GPU_HEALTH_ROOTS/<root>, default /var/cache/gpu-health-ci/<root>),
#   rebuilt when its package list changes.
# - While a cluster runs in it, it has its own /dev (a tmpfs with the few
#   devices a cluster needs and the fake GPU nodes: never the host's
#   /dev), proc, a read-only sys, and this checkout bind-mounted at the
#   same path, so every path of the harness means the same inside and
#   out.
# - Its daemons run in the network namespace $GH_NETNS (loopback only), so
#   clusters of the host and of every root never share a port.
# - gh_root_run runs a command of the harness inside (chroot + netns) with
#   GPU_HEALTH_IN_ROOT=<series>; ci/slurm-up, ci/slurm-down, ci/e2e/run
#   and the others hand themselves over to it when given --slurm <series>.
#
# What the roots hold and why: ../shared/notes/slurm-versions.md.

# The same packages in every root (the build needs Rust and Slurm's
# headers there; ci/package needs dpkg-dev, rpm, binutils; the end-to-end
# tests check every textfile with prometheus's promtool). All of them
# here: inside its network namespace a root reaches no package registry.
GH_ROOT_PACKAGES=(
    slurmctld slurmd slurm-client slurm-wlm munge libslurm-dev
    cargo rustc gcc libc6-dev git ca-certificates
    dpkg-dev binutils rpm python3 iproute2 procps prometheus
)

gh_root_stamp() { printf '%s/.gpu-health-root\n' "$GH_ROOT"; }

# The Debian mirror the host's apt uses (the package registry of this
# machine), else Debian's own.
gh_root_mirror() {
    local m
    m=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/\{0,1\}$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
    [[ -n $m ]] || m=$(awk '$1 == "deb" && $2 ~ /^http/ && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
    printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

# The debootstrap script for a suite: its own, else sid's (debootstrap
# learns new testing suites such as forky only in later releases; every
# suite after trixie is made the same way as sid).
gh_root_debootstrap_script() {
    local dir=/usr/share/debootstrap/scripts
    if [[ -e $dir/$1 ]]; then printf '%s\n' "$dir/$1"; else printf '%s\n' "$dir/sid"; fi
}

# Make (or refresh) the root: debootstrap, then the suite's packages with
# their services kept from starting. A no-op when it is up to date.
gh_root_ensure() {
    local want stamp log what="Debian $GH_ROOT_SUITE root of Slurm $GH_SERIES"
    want="$GH_ROOT_SUITE ${GH_ROOT_PACKAGES[*]}"
    stamp=$(gh_root_stamp)
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
        return 0
    fi
    [[ $(id -u) == 0 ]] || gh_die "making the $what needs root"
    gh_root_is_mounted && gh_die "$GH_ROOT is in use (mounted); run ci/slurm-down --slurm $GH_SERIES first"
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null ||
        gh_die "debootstrap is missing and could not be installed"
    log=$(mktemp /tmp/gpu-health-root.XXXXXX.log)
    if [[ ! -x $GH_ROOT/usr/bin/apt-get ]]; then
        gh_say "making the $what in $GH_ROOT (debootstrap, about a minute)"
        rm -rf "${GH_ROOT:?}"
        mkdir -p "$GH_ROOT"
        debootstrap --variant=minbase "$GH_ROOT_SUITE" "$GH_ROOT" "$(gh_root_mirror)" \
            "$(gh_root_debootstrap_script "$GH_ROOT_SUITE")" >"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; gh_die "debootstrap failed (log: $log)"; }
    fi
    printf '#!/bin/sh\nexit 101\n' >"$GH_ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$GH_ROOT/usr/sbin/policy-rc.d"
    cp /etc/resolv.conf "$GH_ROOT/etc/resolv.conf" 2>/dev/null || true
    # A testing suite's Release file is valid for a week only; the package
    # registry may serve an older copy than that (seen for forky: "Release
    # file ... is expired"). The signature is still checked.
    printf 'Acquire::Check-Valid-Until "false";\n' >"$GH_ROOT/etc/apt/apt.conf.d/99gpu-health-valid-until"
    gh_say "installing Slurm $GH_SERIES and the build tools in the $what (about a minute)"
    mountpoint -q "$GH_ROOT/proc" || mount -t proc proc "$GH_ROOT/proc"
    chroot "$GH_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends "$@"' _ "${GH_ROOT_PACKAGES[@]}" >"$log" 2>&1 ||
        { umount "$GH_ROOT/proc"; tail -n 20 "$log" >&2; gh_die "apt-get in the root failed (log: $log)"; }
    umount "$GH_ROOT/proc"
    local have
    have=$(chroot "$GH_ROOT" /usr/sbin/slurmd -V 2>/dev/null | awk '{ print $2 }')
    [[ $have == "$GH_SERIES".* ]] || gh_die "the $what has Slurm '$have', not $GH_SERIES: fix ci/series.sh"
    printf '%s\n' "$want" >"$stamp"
    rm -f "$log"
}

gh_root_is_mounted() { mountpoint -q "$GH_ROOT/dev" 2>/dev/null; }

# What the root needs while a cluster runs in it. Idempotent.
gh_root_mount() {
    local d
    gh_root_ensure
    if ! gh_root_is_mounted; then
        mount -t tmpfs -o mode=755,size=16m gpu-health-dev "$GH_ROOT/dev"
        mknod -m 666 "$GH_ROOT/dev/null" c 1 3
        mknod -m 666 "$GH_ROOT/dev/zero" c 1 5
        mknod -m 666 "$GH_ROOT/dev/full" c 1 7
        mknod -m 666 "$GH_ROOT/dev/random" c 1 8
        mknod -m 666 "$GH_ROOT/dev/urandom" c 1 9
        mknod -m 666 "$GH_ROOT/dev/tty" c 5 0
        mkdir -p "$GH_ROOT/dev/pts" "$GH_ROOT/dev/shm"
        mount -t devpts -o newinstance,ptmxmode=0666 devpts "$GH_ROOT/dev/pts"
        ln -s pts/ptmx "$GH_ROOT/dev/ptmx"
        mount -t tmpfs -o mode=1777 shm "$GH_ROOT/dev/shm"
        ln -s /proc/self/fd "$GH_ROOT/dev/fd"
    fi
    mountpoint -q "$GH_ROOT/proc" || mount -t proc proc "$GH_ROOT/proc"
    if ! mountpoint -q "$GH_ROOT/sys"; then
        mount --rbind /sys "$GH_ROOT/sys"
        mount -o remount,bind,ro "$GH_ROOT/sys"
    fi
    d=$GH_ROOT$GH_REPO
    if ! mountpoint -q "$d"; then
        mkdir -p "$d"
        mount --bind "$GH_REPO" "$d"
    fi
    printf '127.0.0.1 localhost %s\n::1 localhost\n' "$(hostname -s)" >"$GH_ROOT/etc/hosts"
    hostname -s >"$GH_ROOT/etc/hostname"
    cp /etc/resolv.conf "$GH_ROOT/etc/resolv.conf" 2>/dev/null || true
    if ! ip netns list | grep -qw "$GH_NETNS"; then
        ip netns add "$GH_NETNS"
        ip -n "$GH_NETNS" link set lo up
        # Slurm 24.11 and later cannot resolve their own host name when
        # loopback holds only 127.0.0.1 (see slurm-versions.md): a second
        # address.
        ip -n "$GH_NETNS" addr add 10.217.0.1/32 dev lo
    fi
}

# Undo gh_root_mount (nothing of the root's packages is removed).
gh_root_umount() {
    local d=$GH_ROOT$GH_REPO m
    if ip netns list 2>/dev/null | grep -qw "$GH_NETNS"; then ip netns delete "$GH_NETNS"; fi
    for m in "$d" "$GH_ROOT/dev/shm" "$GH_ROOT/dev/pts" "$GH_ROOT/dev" "$GH_ROOT/proc"; do
        if mountpoint -q "$m" 2>/dev/null; then umount "$m" || umount -l "$m"; fi
    done
    if mountpoint -q "$GH_ROOT/sys" 2>/dev/null; then umount -R "$GH_ROOT/sys" || umount -R -l "$GH_ROOT/sys"; fi
    [[ -d $d ]] && rmdir -p --ignore-fail-on-non-empty "$d" 2>/dev/null
    return 0
}

# gh_root_run COMMAND...: run COMMAND (a program of this checkout, or any
# program of the root) inside the root and its network namespace, in the
# current directory, with the harness's variables.
gh_root_run() {
    local vars=() v
    for v in $(compgen -e); do
        case $v in
        # Paths of the host's cluster and build: the root has its own.
        GPU_HEALTH_SLURM_DIR | GPU_HEALTH_BIN_DIR | GPU_HEALTH_PROLOG | GPU_HEALTH_EPILOG | \
            GPU_HEALTH_SPANK | GPU_HEALTH_NVML_SIM | GPU_HEALTH_IN_ROOT) ;;
        GPU_HEALTH_* | GH_E2E_* | CI | TERM) vars+=("$v=${!v}") ;;
        esac
    done
    ip netns exec "$GH_NETNS" chroot "$GH_ROOT" /usr/bin/env -i \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        "${vars[@]}" GPU_HEALTH_IN_ROOT="$GH_SERIES" GPU_HEALTH_ROOTS="$GH_ROOTS_DIR" \
        /bin/bash -c 'cd "$1" && shift && exec "$@"' _ "$PWD" "$@"
}

# gh_root_handover SCRIPT ARGS...: run a harness script (the demo, a
# benchmark) inside the root on a build made there first, then unmount.
gh_root_handover() {
    local rc=0 log
    log=$(mktemp /tmp/gpu-health-handover.XXXXXX.log)
    "$GH_REPO/ci/package" --slurm "$GH_SERIES" --no-rpm --out "$GH_REPO/target/package-$GH_SERIES" >"$log" 2>&1 ||
        { tail -n 30 "$log" >&2; gh_die "the build in the $GH_ROOT_SUITE root failed (ci/package --slurm $GH_SERIES; log: $log)"; }
    rm -f "$log"
    gh_root_mount
    gh_root_run "$@" || rc=$?
    gh_root_umount
    return "$rc"
}
