//! The table of every command: options, operands, exit statuses. The
//! parser, `--help`, the man page and the shell completions all read it
//! (see `spec`).

use crate::spec::{CommandSpec, Complete, Operand, Opt};

const USAGE_OR_CONFIG: (i32, &str) = (
    2,
    "a usage error, or a configuration error (shown in the output; the \
     command ran on the fallback configuration)",
);

pub static CHECK: CommandSpec = CommandSpec {
    name: "check",
    summary: "probe this node as the Prolog does and print its findings (never drains)",
    about: "Probe this node's GPUs through NVML (with the configured deadline), run the \
            Prolog's checks with the saved ECC and NVLink histories (read, never written) and \
            read new kernel-log Xid records, then print every finding with the action it calls \
            for (info, warn, drain-until-clean, drain), the faults the node's ledger holds, and \
            what the Prolog would do for a job starting now (drain, warn strict jobs, nothing). \
            It never drains the node and never moves the Prolog's kernel-log cursor.",
    options: &[
        Opt::flag(
            "json",
            "the node, its GPUs and its findings as one JSON object",
        )
        .group("format"),
        Opt::flag(
            "npd",
            "one status line for Kubernetes Node Problem Detector's custom plugins, gravest \
             finding first (exit 0 healthy, 1 problem, 2 unknown)",
        )
        .group("format"),
        Opt::with(
            "gpus",
            "LIST",
            "check as the Prolog of a job on these GPUs would (`0,1` or `0-3`): their leftovers \
             too",
        )
        .group("job"),
        Opt::with(
            "job",
            "ID",
            "check as the Prolog of this running job did (its GPUs from its verdict): their \
             leftovers too",
        )
        .group("job"),
    ],
    operands: &[],
    exit: &[
        (0, "healthy: no finding the Prolog would drain for"),
        (
            1,
            "a finding the Prolog would drain for (drain or drain-until-clean)",
        ),
        USAGE_OR_CONFIG,
    ],
    reads_config: true,
};

pub static XIDS: CommandSpec = CommandSpec {
    name: "xids",
    summary: "list the Xid and SXid events of a kernel log, with the action each calls for",
    about: "List the NVIDIA Xid and NVSwitch SXid events in FILE (a saved dmesg, journalctl -k \
            or syslog file, or `journal` for the systemd journal's kernel entries) or, without \
            FILE, in the configured kernel log, with the action the site's policy gives each. \
            Events are matched to GPU indices through a short NVML probe. Events read from lines \
            users can forge are marked as such. Like grep, the exit status says whether \
            something was found: an event that drains.",
    options: &[
        Opt::flag("json", "one JSON object per event (or per catalog row)"),
        Opt::flag(
            "no-probe",
            "do not ask NVML which GPU index a PCI address is",
        ),
        Opt::flag(
            "catalog",
            "the Xid table instead: per code the action in force (the site's [xid] overrides \
             applied), the built-in action, NVIDIA's action, the usual source and the meaning; \
             FILE is then a code (79, sxid-12028) to show alone",
        ),
    ],
    operands: &[Operand {
        name: "FILE",
        required: false,
        help: "the kernel log to read (default: kernel_log of the configuration); with \
               --catalog, a code",
        complete: Complete::File,
    }],
    exit: &[
        (0, "no event that drains (with --catalog: shown)"),
        (
            1,
            "an event that drains (drain or drain-until-clean under the policy in force) is \
             present",
        ),
        (
            2,
            "the log could not be read, a usage error, or a configuration error (the policy \
             shown is then the built-in one)",
        ),
    ],
    reads_config: true,
};

pub static WATCH: CommandSpec = CommandSpec {
    name: "watch",
    summary: "each GPU's load, memory, power, temperature and health, every SECONDS",
    about: "Every SECONDS until Ctrl-C or N refreshes: each GPU's utilisation, memory use, \
            power draw and limit, temperature, fan speed and health as gpu-health judges it, \
            through the Prolog's probe, deadline and checks (read only: nothing drains, no \
            cursor moves). Findings about the whole node (a lost GPU, the GPU count) are shown \
            on a line of their own, a GPU's on its row. On a terminal the table is redrawn in \
            place, health in colour unless NO_COLOR is set.",
    options: &[
        Opt::with(
            "loop",
            "SECONDS",
            "seconds between refreshes, 0.1 to 86400 (default 5)",
        )
        .short('l'),
        Opt::with("count", "N", "stop after N refreshes (at least 1)"),
        Opt::flag(
            "csv",
            "nvidia-smi --query-gpu's CSV (timestamp, index, name, utilization.gpu, \
             memory.used, memory.total, power.draw, power.limit, temperature.gpu, fan.speed) \
             with its header, plus health; node findings and NVML errors as # lines",
        )
        .group("format"),
        Opt::flag(
            "json",
            "one JSON object per GPU and refresh (and one per refresh for node findings or an \
             NVML error)",
        )
        .group("format"),
    ],
    operands: &[],
    exit: &[
        (0, "every refresh reached NVML"),
        (
            1,
            "NVML did not answer in a refresh (the reason is printed with it)",
        ),
        USAGE_OR_CONFIG,
    ],
    reads_config: true,
};

pub static NCCL_ENV: CommandSpec = CommandSpec {
    name: "nccl-env",
    summary: "the NCCL variables the SPANK plugin would set here, and why",
    about: "The NCCL variables the SPANK plugin would set on this node (NCCL_IB_HCA, \
            NCCL_IB_GID_INDEX, NCCL_IB_TIMEOUT, ...) and why: which RDMA ports are up or down, \
            which GID index was found. The plugin's arguments are read from its line in \
            plugstack.conf (following include).",
    options: &[
        Opt::with(
            "sysfs-root",
            "DIR",
            "read the RDMA ports under DIR (default: the plugin's sysfs_root, else the \
             configuration's); it must exist",
        )
        .complete(Complete::Dir),
        Opt::with(
            "plugstack",
            "FILE",
            "the plugstack.conf to read (default /etc/slurm/plugstack.conf)",
        )
        .complete(Complete::File),
        Opt::flag("json", "one JSON object"),
    ],
    operands: &[],
    exit: &[
        (0, "shown"),
        (
            1,
            "the RDMA fabric could not be read (a sysfs root that does not exist included)",
        ),
        USAGE_OR_CONFIG,
    ],
    reads_config: true,
};

pub static REPORT: CommandSpec = CommandSpec {
    name: "report",
    summary: "per-job GPU energy, power, peak memory and health deltas from the job records",
    about: "Sum the job records the Epilog appended to records_dir/jobs.jsonl (every node's, \
            when the directory is shared) per job, ordered by the job's last end: GPU energy, \
            mean and sampled peak power, peak memory, health counter deltas, and the drains \
            the Epilog made or could not make. DATE is YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], \
            UTC. Options take their value as --job 42 or --job=42.",
    options: &[
        Opt::with("job", "ID", "only this job"),
        Opt::with("user", "NAME", "only this user's jobs"),
        Opt::with(
            "node",
            "NAME",
            "only the records of this node (a job's figures on it)",
        ),
        Opt::with(
            "since",
            "DATE",
            "only jobs that ended at or after DATE (YYYY-MM-DD[THH:MM[:SS]] UTC, or now-1days, now-2hours, ...)",
        ),
        Opt::with(
            "until",
            "DATE",
            "only jobs that ended before DATE (as for --since)",
        ),
        Opt::with("limit", "N", "only the N jobs that ended last"),
        Opt::flag(
            "near-oom",
            "only the GPUs whose peak memory came near their memory \
             (thresholds.near_oom_share), with what their users can try",
        )
        .group("view"),
        Opt::flag(
            "power",
            "energy and power per node and per rack ([[power.racks]]), the hours a rack \
             passed its budget; with --json or --csv the hourly series per rack",
        )
        .group("view"),
        Opt::with(
            "svg",
            "FILE",
            "with --power: a chart of each rack's power per hour against its budget, written \
             to FILE (atomically, never through a symlink; checked before anything is printed)",
        )
        .needs("power")
        .complete(Complete::File),
        Opt::flag("json", "JSON (one array of jobs; with --power one object)").group("format"),
        Opt::flag("csv", "CSV with a header line").group("format"),
        Opt::with(
            "dir",
            "DIR",
            "the records directory (default: records_dir of the configuration)",
        )
        .complete(Complete::Dir),
    ],
    operands: &[],
    exit: &[
        (0, "shown"),
        (
            1,
            "--job matched nothing, or the output or chart could not be written",
        ),
        USAGE_OR_CONFIG,
    ],
    reads_config: true,
};

pub static HEALTH_CHECK: CommandSpec = CommandSpec {
    name: "health-check",
    summary: "the HealthCheckProgram run by hand: checks, drains, automatic return",
    about: "The run slurmd makes as HealthCheckProgram: the same checks and drain rules as the \
            Prolog, without a job, plus the automatic return of nodes drained for faults that \
            clear (drain-until-clean), with a printed summary. It may drain or resume this \
            node; with a configuration error it drains nothing and says so.",
    options: &[],
    operands: &[],
    exit: &[
        (0, "nothing to do, or the node returned to service"),
        (
            1,
            "a fault that drains: the node was drained, or why it was not",
        ),
        (2, "a usage error"),
    ],
    reads_config: true,
};

pub static RESUME: CommandSpec = CommandSpec {
    name: "resume",
    summary: "on NODE itself: re-run the checks, resume a gpu-health drain if clean",
    about: "Run on NODE itself, as root: re-run the checks (and dcgmi diag where configured) \
            and resume the node's gpu-health drain when they are clean, closing its faults. A \
            node drained by someone else, or a configuration error, is refused.",
    options: &[
        Opt::flag("force", "NODE is this machine under another name"),
        Opt::flag(
            "forget-pending",
            "on a node that is not drained, close the faults held back earlier (without it \
             they stay, and the next check acts on them)",
        ),
    ],
    operands: &[Operand {
        name: "NODE",
        required: true,
        help: "this node's name (SLURMD_NODENAME, else the short host name)",
        complete: Complete::Nothing,
    }],
    exit: &[
        (0, "resumed, or not drained"),
        (1, "refused: the checks still fail"),
        (
            2,
            "a usage error, another node, a drain not gpu-health's, or a configuration error",
        ),
    ],
    reads_config: true,
};

pub static STEP_END: CommandSpec = CommandSpec {
    name: "step-end",
    summary: "(run by the SPANK plugin) the step's GPUs that came near out of memory",
    about: "Run by the SPANK plugin when a step's last task on this node has ended: prints one \
            line for the job's user when one of the step's GPUs came near out of memory since \
            MS, nothing otherwise. Only GPUs that job ID owns by the Prolog's record are \
            reported; without --job or that record, none. Drains nothing, stores nothing.",
    options: &[
        Opt::with("gpus", "LIST", "the step's GPUs, node indices (0,2-3)").required(),
        Opt::with("since-ms", "MS", "the step's start, Unix ms").required(),
        Opt::with("job", "ID", "the job"),
        Opt::with("step", "NAME", "the step, for the message"),
    ],
    operands: &[],
    exit: &[(0, "done (printed or not)"), (2, "a usage error")],
    reads_config: true,
};

pub static CONFIG_CHECK: CommandSpec = CommandSpec {
    name: "config check",
    summary: "check a configuration file, its drop-in and %n for a node; every error",
    about: "Load FILE (default: the file the runs would read) as the Prolog would for NODE: \
            the node's drop-in gpu-health.d/NODE.toml and %n applied, every range and \
            cross-key rule, and the report-only [power] racks; print each error with its \
            file, line and table, like promtool check config or nginx -t.",
    options: &[Opt::with(
        "node",
        "NAME",
        "the node whose drop-in and %n apply (default: this node)",
    )],
    operands: &[Operand {
        name: "FILE",
        required: false,
        help: "the configuration file (the same as --config)",
        complete: Complete::File,
    }],
    exit: &[
        (0, "no error"),
        (1, "an error (each is printed)"),
        (2, "a usage error"),
    ],
    reads_config: true,
};

pub static COMPLETIONS: CommandSpec = CommandSpec {
    name: "completions",
    summary: "the shell completion script for SHELL (bash, zsh or fish)",
    about: "Print the completion script of gpu-health for SHELL. The packages install them; by \
            hand: gpu-health completions bash > /usr/share/bash-completion/completions/gpu-health.",
    options: &[],
    operands: &[Operand {
        name: "SHELL",
        required: true,
        help: "bash, zsh or fish",
        complete: Complete::Words(&["bash", "zsh", "fish"]),
    }],
    exit: &[(0, "printed"), (2, "a usage error")],
    reads_config: false,
};

pub static MANPAGE: CommandSpec = CommandSpec {
    name: "manpage",
    summary: "the gpu-health(8) man page, in roff (for packagers)",
    about: "Print the gpu-health(8) man page; its commands, options and exit statuses come from \
            the same table as this help.",
    options: &[],
    operands: &[],
    exit: &[(0, "printed"), (2, "a usage error")],
    reads_config: false,
};

pub static HELP_CMD: CommandSpec = CommandSpec {
    name: "help",
    summary: "this text, or the help of COMMAND",
    about: "The list of commands, or COMMAND's help (the same as gpu-health COMMAND --help).",
    options: &[],
    operands: &[Operand {
        name: "COMMAND",
        required: false,
        help: "a command",
        complete: Complete::Command,
    }],
    exit: &[(0, "printed"), (2, "an unknown command")],
    reads_config: false,
};

pub static VERSION: CommandSpec = CommandSpec {
    name: "version",
    summary: "the version",
    about: "The version of gpu-health (also: gpu-health --version).",
    options: &[],
    operands: &[],
    exit: &[(0, "printed")],
    reads_config: false,
};

pub static ACCEPT: CommandSpec = CommandSpec {
    name: "accept",
    summary: "run the acceptance tier now: DCGM diag and bandwidth gates (never drains)",
    about: "Run the acceptance tier on this idle node now (docs/acceptance.md): dcgmi diag at \
            [acceptance] dcgm_level, nccl-tests all_reduce_perf, nvbandwidth host-to-device and \
            a perftest loopback per HCA, each with its time limit and without a shell, judged \
            against the thresholds for the node's GPU model (the built-in table, overridden per \
            model by [acceptance.models]). Prints each gate's figure, threshold and verdict: \
            passed, FAILED, or not judged (tool missing, time-out, unreadable output, no \
            threshold). Refuses while a job runs on the node (a job's start snapshot in the \
            state directory, or a compute process on a GPU). It never drains: it reports. It \
            runs whatever [acceptance] enabled says.",
    options: &[
        Opt::flag(
            "json",
            "the model, each gate's result and the findings as one JSON object",
        ),
        Opt::flag(
            "force",
            "run even while a job runs on the node (its figures then measure a shared node)",
        ),
        Opt::with(
            "gates",
            "LIST",
            "run these gates instead of [acceptance] gates: dcgm, all-reduce, host-to-device, \
             rdma, separated by commas",
        ),
    ],
    operands: &[],
    exit: &[
        (0, "every gate passed"),
        (1, "a gate failed"),
        (
            2,
            "a gate was not judged (or had no threshold), a job runs on the node, a usage \
             error, or a configuration error",
        ),
    ],
    reads_config: true,
};

/// Every command, in the order of the help.
pub static COMMANDS: &[&CommandSpec] = &[
    &CHECK,
    &XIDS,
    &WATCH,
    &NCCL_ENV,
    &REPORT,
    &HEALTH_CHECK,
    &RESUME,
    &ACCEPT,
    &STEP_END,
    &CONFIG_CHECK,
    &COMPLETIONS,
    &MANPAGE,
    &HELP_CMD,
    &VERSION,
];

/// The command named `name` (`config check` as two words joined by a
/// space).
pub fn spec_of(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().copied().find(|c| c.name == name)
}
