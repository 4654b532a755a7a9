//! A node that reboots through a stand-in Slurm: the fake cluster keeps
//! the node's State, Reason, Comment and a pending reboot with its
//! `nextstate`; the node's boot id and kernel log are files the
//! configuration points at; gate programs are stand-ins that print
//! recorded outputs and note each run in `gates.log`.

use gpu_health_testkit::FakeCluster;

use super::{acceptance_fixture, script, Node, Run};

/// The node and its cluster.
pub struct Rebooting {
    pub n: Node,
    pub c: FakeCluster,
}

impl Rebooting {
    /// A node of a four-node cluster in boot `boot-1`, reboots on
    /// (`[remediation] reboot = true`), a quiet time of 1 s and the brake
    /// allowing every node; `extra`: more configuration lines.
    pub fn new(scenario: &str, extra: &str) -> Rebooting {
        let n = Node::new(scenario);
        let c = FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
        let r = Rebooting { n, c };
        r.boot_id("boot-1");
        r.configure(extra);
        r
    }

    /// The node's drop-in: the cluster's scontrol, the boot id file,
    /// reboots on, then `extra`.
    pub fn configure(&self, extra: &str) {
        self.configure_with("", extra)
    }

    /// [`Rebooting::configure`] with top-level keys `top` first.
    pub fn configure_with(&self, top: &str, extra: &str) {
        self.n.write_dropin(&format!(
            "{top}scontrol = {:?}\n[xid]\nsyslog_may_drain = true\nboot_id_path = {:?}\n\
             [brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\nmax_drained_fraction = 1.0\n\
             [remediation]\nreboot = true\n[recovery]\nquiet_time_s = 1\n{extra}",
            self.c.scontrol(),
            self.n.path("boot_id")
        ));
    }

    pub fn boot_id(&self, id: &str) {
        std::fs::write(self.n.path("boot_id"), format!("{id}\n")).unwrap();
    }

    /// The kernel log holds one Xid record of a second ago on the GPU at
    /// 0000:5d:00 (GPU3); `rest`: from the code on.
    pub fn xid(&self, rest: &str) {
        std::fs::write(self.n.path("kernel.log"), xid_line(rest)).unwrap();
    }

    pub fn xid79(&self) {
        self.xid("79, pid=4000, name=python3, GPU has fallen off the bus.");
    }

    /// The node comes back from the reboot Slurm had pending: a new boot
    /// id, an empty kernel log, Slurm's `nextstate` applied. False when
    /// no reboot was pending.
    pub fn come_back(&self, boot: &str) -> bool {
        self.boot_id(boot);
        std::fs::write(self.n.path("kernel.log"), "").unwrap();
        self.c.boot("n1")
    }

    pub fn health_check(&self) -> Run {
        let mut cmd = self.n.command("1", "");
        cmd.env_remove("SLURM_JOB_ID").env_remove("SLURM_JOB_GPUS");
        self.n.run(cmd)
    }

    /// The reboots asked of Slurm, one line each.
    pub fn reboots(&self) -> Vec<String> {
        self.c
            .calls()
            .into_iter()
            .filter(|l| l.starts_with("reboot"))
            .collect()
    }

    pub fn reason(&self) -> String {
        self.c.reason("n1").unwrap_or_default()
    }

    /// A stand-in gate program `name` that prints the recorded output
    /// `fixture` (`core/tests/fixtures/acceptance`) after running `before`
    /// (shell lines), and notes its run in `gates.log`.
    pub fn gate(&self, name: &str, fixture: &str, before: &str) -> std::path::PathBuf {
        let log = self.n.path("gates.log");
        script(
            &self.n,
            name,
            &format!(
                "echo {name} >> {log:?}\n{before}\ncat {:?}",
                acceptance_fixture(fixture)
            ),
        )
    }

    pub fn gate_runs(&self) -> usize {
        std::fs::read_to_string(self.n.path("gates.log"))
            .unwrap_or_default()
            .lines()
            .count()
    }
}

/// One kernel-log line of an Xid a second ago on 0000:5d:00.
pub fn xid_line(rest: &str) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = gpu_health_core::time::format_utc_ms(now_ms - 1_000);
    format!("{at} n1 kernel: NVRM: Xid (PCI:0000:5d:00): {rest}\n")
}
