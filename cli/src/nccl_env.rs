//! `gpu-health nccl-env [--sysfs-root DIR] [--plugstack FILE] [--json]`:
//! the NCCL variables the SPANK plugin would set on this node, and why,
//! through the plugin's own code: its plugstack.conf arguments, the same
//! sysfs reader and the same derivation.

use std::path::{Path, PathBuf};

use gpu_health_core::fabric::explain::{explain, Explanation};
use gpu_health_core::fabric::nccl::{derive_nccl_env, FabricKind};
use gpu_health_core::fabric::read_fabric;
use gpu_health_core::plugstack::{self, PluginArgs};
use gpu_health_core::run::RunContext;
use gpu_health_core::text::printable;

use crate::spec::Parsed;

struct Options {
    sysfs_root: Option<PathBuf>,
    plugstack: PathBuf,
    json: bool,
}

/// Exit: 0 shown, 1 the fabric could not be read (its root missing
/// included), 2 a usage or configuration error.
pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let opts = Options {
        sysfs_root: p.value("sysfs-root").map(PathBuf::from),
        plugstack: p.value("plugstack").map_or_else(
            || PathBuf::from(plugstack::DEFAULT_PLUGSTACK),
            PathBuf::from,
        ),
        json: p.flag("json"),
    };
    let ctx = start();
    let config = ctx.config();
    let config_error = ctx.loaded.error.as_ref().map(|e| e.to_string());
    let (args, notes) = plugin_args(&opts.plugstack);
    for n in &notes {
        eprintln!("gpu-health nccl-env: {}", printable(n));
    }
    let root = opts
        .sysfs_root
        .clone()
        .or_else(|| args.sysfs_root.clone())
        .unwrap_or_else(|| config.sysfs_root.clone());
    let shown_root = printable(&root.display().to_string()).into_owned();
    if !root.is_dir() {
        eprintln!(
            "gpu-health nccl-env: sysfs root {shown_root} does not exist or is not a directory: nothing to read"
        );
        return 1;
    }
    let code = match explanation(&root, &args) {
        Ok(e) if opts.json => {
            let mut v = serde_json::to_value(&e).unwrap_or_default();
            if let (Some(err), Some(m)) = (&config_error, v.as_object_mut()) {
                m.insert("configuration_error".into(), err.clone().into());
            }
            println!("{v}");
            0
        }
        Ok(e) => {
            if let Some(err) = &config_error {
                println!(
                    "configuration error: {} (gpu-health config check)",
                    printable(err)
                );
            }
            print!("{}", render(&e, &root));
            0
        }
        Err(e) => {
            eprintln!("gpu-health nccl-env: RDMA fabric unreadable under {shown_root}: {e}");
            1
        }
    };
    if config_error.is_some() {
        2
    } else {
        code
    }
}

/// The plugin's arguments from plugstack.conf (defaults when it has no
/// gpu-health line), and what the admin should hear about them.
fn plugin_args(plugstack: &Path) -> (PluginArgs, Vec<String>) {
    match plugstack::find_plugin_line(plugstack) {
        Ok(Some(words)) => {
            let (args, problems) = plugstack::parse_args(&words);
            (args, problems.iter().map(ToString::to_string).collect())
        }
        Ok(None) => (
            PluginArgs::default(),
            vec![format!(
                "{} has no {} line: showing the plugin's defaults",
                plugstack.display(),
                plugstack::PLUGIN_FILE
            )],
        ),
        Err(e) => (
            PluginArgs::default(),
            vec![format!("{e}: showing the plugin's defaults")],
        ),
    }
}

/// What the plugin derives from the fabric under `root`, explained.
pub fn explanation(root: &Path, args: &PluginArgs) -> Result<Explanation, String> {
    let fabric = read_fabric(root).map_err(|e| e.to_string())?;
    let env = derive_nccl_env(&fabric, &args.nccl);
    Ok(explain(&fabric, &args.nccl, &env))
}

/// The table for a terminal. Every text comes from sysfs, plugstack.conf
/// or the command line: each is shown with its control characters
/// replaced (explain() keeps them printable already; this holds whoever
/// built the explanation).
fn render(e: &Explanation, root: &Path) -> String {
    let mut out = String::new();
    let kind = match e.fabric {
        FabricKind::InfiniBand => "InfiniBand",
        FabricKind::Roce => "RoCE",
        FabricKind::Unusable => "RDMA ports, none NCCL_IB_* applies to",
        FabricKind::None => "no RDMA ports",
    };
    out.push_str(&format!(
        "fabric: {kind} (sysfs under {})\n",
        printable(&root.display().to_string())
    ));
    if !e.ports.is_empty() {
        out.push_str("ports:\n");
        for p in &e.ports {
            out.push_str(&format!(
                "  {:<10} {:<16} {:<10} {:<12} {:<14} {}\n",
                printable(&p.port),
                printable(&p.link_layer),
                printable(&p.state),
                printable(&p.phys_state),
                printable(p.rate.as_deref().unwrap_or("-")),
                printable(&p.why)
            ));
        }
    }
    if e.vars.is_empty() {
        out.push_str("the plugin sets no NCCL variable on this node\n");
    } else {
        out.push_str("the plugin sets (never over a value the job's user set):\n");
        for v in &e.vars {
            out.push_str(&format!(
                "  {}={}\n      {}\n",
                printable(&v.name),
                printable(&v.value),
                printable(&v.why)
            ));
        }
    }
    for n in &e.notes {
        out.push_str(&format!("note: {}\n", printable(n)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../core/tests/fixtures/sysfs")
            .join(name)
    }

    fn vars(e: &Explanation) -> Vec<String> {
        e.vars
            .iter()
            .map(|v| format!("{}={}", v.name, v.value))
            .collect()
    }

    #[test]
    fn every_sysfs_fixture() {
        let args = PluginArgs::default();
        let ib = explanation(&fixture("ib-ndr8-one-down"), &args).unwrap();
        assert_eq!(ib.fabric, FabricKind::InfiniBand);
        assert!(
            vars(&ib)[0].starts_with("NCCL_IB_HCA==mlx5_"),
            "{:?}",
            vars(&ib)
        );
        assert!(vars(&ib).contains(&"NCCL_IB_TIMEOUT=22".to_string()));
        let down: Vec<&str> = ib
            .ports
            .iter()
            .filter(|p| !p.used)
            .map(|p| p.why.as_str())
            .collect();
        assert!(down.contains(&"not ACTIVE: left out"), "{down:?}");
        assert!(!vars(&ib)[0].contains(&ib.ports.iter().find(|p| !p.used).unwrap().port));
        let roce = explanation(&fixture("roce-v2"), &args).unwrap();
        assert_eq!(roce.fabric, FabricKind::Roce);
        assert!(vars(&roce)
            .iter()
            .any(|v| v.starts_with("NCCL_IB_GID_INDEX=")));
        assert!(roce.ports.iter().any(|p| p.why.contains("GID at index")));
        let efa = explanation(&fixture("efa"), &args).unwrap();
        assert_eq!(efa.fabric, FabricKind::Unusable);
        assert!(efa.vars.is_empty());
        assert!(render(&efa, Path::new("/x")).contains("sets no NCCL variable"));
        let none = explanation(&fixture("none"), &args).unwrap();
        assert_eq!(none.fabric, FabricKind::None);
        // The admin's plugstack.conf arguments count, as in the plugin.
        let (admin, problems) = plugstack::parse_args(&[
            "nccl_ib_timeout=19",
            "nccl_set=NCCL_IB_QPS_PER_CONNECTION=4",
        ]);
        assert!(problems.is_empty());
        let e = explanation(&fixture("ib-ndr8-one-down"), &admin).unwrap();
        assert!(vars(&e).contains(&"NCCL_IB_TIMEOUT=19".to_string()));
        let qps = e
            .vars
            .iter()
            .find(|v| v.name == "NCCL_IB_QPS_PER_CONNECTION")
            .unwrap();
        assert!(qps.why.contains("nccl_set"));
    }

    /// A node whose sysfs holds what the kernel never writes there: a FIFO
    /// and a 2 GB file at attribute paths, device names with a comma, an
    /// escape sequence and a newline, an escape in an attribute.
    fn hostile_tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let port = |dev: &str| {
            let d = t.path().join("class/infiniband").join(dev).join("ports/1");
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("link_layer", "InfiniBand"),
                ("state", "4: ACTIVE"),
                ("phys_state", "5: LinkUp"),
                ("rate", "400 Gb/sec (4X NDR)"),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
            d
        };
        port("mlx5_0");
        let fifo = port("mlx5_1").join("state");
        std::fs::remove_file(&fifo).unwrap();
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::fs::File::create(port("mlx5_2").join("rate"))
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        for bad in ["mlx5_3,mlx5_4", "\x1b[2J", "mlx5_\n5"] {
            port(bad);
        }
        std::fs::write(
            port("mlx5_6").join("phys_state"),
            "5: LinkUp\x1b]0;owned\x07\n",
        )
        .unwrap();
        t
    }

    #[test]
    fn fifo_huge_file_and_hostile_names_end_quickly_and_say_why() {
        let t = hostile_tree();
        let root = t.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let e = explanation(&root, &PluginArgs::default());
            let _ = tx.send(e.map(|e| (render(&e, &root), e)));
        });
        let (table, e) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("nccl-env still running after 10 s: a sysfs read hangs")
            .unwrap();
        assert_eq!(
            e.vars
                .iter()
                .find(|v| v.name == "NCCL_IB_HCA")
                .map(|v| v.value.as_str()),
            Some("=mlx5_0:1,mlx5_6:1"),
            "{table}"
        );
        for why in [
            "mlx5_1:1 left out",
            "state: a FIFO, not a regular file",
            "mlx5_2:1 left out",
            "rate: larger than 65536 bytes",
            r#"RDMA device "mlx5_3,mlx5_4" left out"#,
            r#"RDMA device "\u{1b}[2J" left out"#,
            r#"RDMA device "mlx5_\n5" left out"#,
        ] {
            assert!(table.contains(why), "{why}\n{table}");
        }
        assert!(table.contains("5: LinkUp?]0;owned?"), "{table}");
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
    }

    #[test]
    fn usage() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let parse = |v: &[&str]| crate::spec::parse(&crate::commands::NCCL_ENV, &a(v));
        assert!(parse(&["--bogus"]).is_err());
        let Ok(crate::spec::Outcome::Run(o)) = parse(&["--sysfs-root", "/s", "--json"]) else {
            panic!("parsed");
        };
        assert_eq!(o.value("sysfs-root"), Some("/s"));
        assert!(o.flag("json"));
    }
}
