# shellcheck shell=bash disable=SC2034 # variables used by the scripts that source it
# The Slurm series the harness runs gpu-health on, one line each: every
# script that takes --slurm (ci/slurm-up, ci/slurm-down, ci/e2e/run,
# ci/demo, ci/storm, ci/package, ci/test, ci/bench-*) reads this table and
# nothing else. A further series is one more line (a Debian suite that
# ships it; the root is made on first use).
#
#   series  the Slurm major.minor (what --slurm names, what the packages
#           are suffixed with: +slurm<series>)
#   suite   the Debian suite whose slurm-wlm is that series
#   root    the directory of its Debian root under $GH_ROOTS_DIR
#           ("-": the host's own Slurm, no root), also the build's
#           target/<root>/ and the cluster directory's suffix
#   port    the first TCP port its test clusters look from (slurmctld
#           there, slurmd nK on port+K); roots have a network namespace
#           each, so the ports only tell the clusters apart in logs
#
# Derived per series: network namespace gh-s<series without the dot>-
# <checksum of the checkout>, cluster directory /tmp/gpu-health-slurm-
# <series>.<checksum> (the host's: /tmp/gpu-health-slurm.<checksum>),
# build directory target/<root>/release (the host's: target/release).
GH_SERIES_TABLE='
22.05  bookworm  -         16817
24.11  trixie    debian13  20817
26.05  forky     forky     24817
'
# Where the Debian roots are kept between runs (one per series but the host's).
GH_ROOTS_DIR=${GPU_HEALTH_ROOTS:-/var/cache/gpu-health-ci}

# Every series, in table order.
gh_series_all() { awk 'NF >= 4 { print $1 }' <<<"$GH_SERIES_TABLE"; }

# "22.05|24.11|26.05", for messages and usage lines.
gh_series_choices() { gh_series_all | paste -sd'|'; }

# gh_series_field SERIES suite|root|port
gh_series_field() {
    awk -v s="$1" -v f="$2" 'BEGIN { i = (f == "suite") ? 2 : (f == "root") ? 3 : (f == "port") ? 4 : 0 }
        NF >= 4 && $1 == s && i { print $i; found = 1 } END { exit !found }' <<<"$GH_SERIES_TABLE"
}

# The series of the host's own Slurm (the table's line without a root).
gh_host_series() { awk 'NF >= 4 && $3 == "-" { print $1; exit }' <<<"$GH_SERIES_TABLE"; }

# The Slurm series this shell's harness uses: the host's, or the one of
# the root it runs in (gh_root_run sets GPU_HEALTH_IN_ROOT to it).
gh_series() { printf '%s\n' "${GPU_HEALTH_IN_ROOT:-$(gh_host_series)}"; }

# gh_check_series SERIES: the series a --slurm flag may name.
gh_check_series() {
    gh_series_field "$1" suite >/dev/null 2>&1 ||
        gh_die "--slurm must be one of $(gh_series_choices) (ci/series.sh), got '$1'"
}

# gh_series_ge SERIES MAJOR.MINOR: is SERIES that release or a later one?
gh_series_ge() {
    local a=$1 b=$2
    (( 10#${a%%.*} > 10#${b%%.*} || (10#${a%%.*} == 10#${b%%.*} && 10#${a#*.} >= 10#${b#*.}) ))
}

# Does SERIES run in a root of its own (not on the host)?
gh_series_in_root() { [[ $(gh_series_field "$1" root) != - ]]; }

# gh_use_series SERIES: point GH_SERIES and the root variables of
# ci/debian-root.sh (GH_ROOT, GH_ROOT_SUITE, GH_NETNS) at SERIES.
# GH_ROOT is empty for the host's series.
gh_use_series() {
    local root
    gh_check_series "$1"
    GH_SERIES=$1
    GH_ROOT_SUITE=$(gh_series_field "$1" suite)
    root=$(gh_series_field "$1" root)
    if [[ $root == - ]]; then GH_ROOT=""; else GH_ROOT=$GH_ROOTS_DIR/$root; fi
    GH_ROOT_NAME=$root
    GH_NETNS=gh-s${1//./}-$GH_CHECKOUT_ID
    GH_PORT_FIRST=$(gh_series_field "$1" port)
}

# gh_enter_series SERIES: from the host, make SERIES (a root's) the one
# that the root functions act on; inside a root only its own series runs.
gh_enter_series() {
    local here
    here=$(gh_series)
    if [[ $here != "$(gh_host_series)" ]]; then
        gh_die "inside the $(gh_series_field "$here" suite) root only --slurm $here runs"
    fi
    gh_series_in_root "$1" || gh_die "Slurm $1 is the host's"
    gh_use_series "$1"
}

# One cluster directory, build, namespace per checkout and series, so
# that clusters of several checkouts, and the series of one, never meet.
GH_CHECKOUT_ID=$(printf '%s' "$GH_REPO" | cksum | cut -d' ' -f1)
gh_use_series "$(gh_series)"
if gh_series_in_root "$GH_SERIES"; then
    # Cluster directories (as seen inside the root) and build directories.
    GH_SERIES_DIR_TAG=-$GH_SERIES
    GH_SERIES_TARGET=/$GH_ROOT_NAME
else
    GH_SERIES_DIR_TAG=""
    GH_SERIES_TARGET=""
fi
