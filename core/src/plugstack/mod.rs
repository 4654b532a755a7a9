//! The SPANK plugin's plugstack.conf line: its arguments (`args`,
//! parsed the same way by the plugin inside slurmstepd and by the admin
//! command, from the one table of the plugin's arguments and options in
//! [`options`]), and finding that line in a plugstack.conf file with its
//! `include`d files, so that `gpu-health nccl-env` shows what the plugin
//! would do with the arguments the admin gave it.

mod args;
pub mod options;
mod parse;

use std::path::{Path, PathBuf};

pub use args::{env_name, PluginArgs};
pub use options::{known_keys, PluginOption, PLUGIN_OPTIONS};
pub use parse::{parse_args, ArgProblem};

/// The plugin's file name, as plugstack.conf names it.
pub const PLUGIN_FILE: &str = "libgpu_health_spank.so";
/// Where Slurm reads plugstack.conf by default.
pub const DEFAULT_PLUGSTACK: &str = "/etc/slurm/plugstack.conf";

/// A plugstack.conf (or an included file) larger than this is not one.
const MAX_BYTES: u64 = 1 << 20;
/// `include` nesting gpu-health follows.
const MAX_DEPTH: usize = 4;

/// The arguments of the gpu-health line of `plugstack` (following
/// `include` lines), `Ok(None)` when no line loads the plugin.
pub fn find_plugin_line(plugstack: &Path) -> Result<Option<Vec<String>>, String> {
    find_in(plugstack, 0)
}

fn find_in(file: &Path, depth: usize) -> Result<Option<Vec<String>>, String> {
    let text = read_small(file)?;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        match words.next() {
            Some("include") if depth < MAX_DEPTH => {
                for path in included(file, words.next().unwrap_or("")) {
                    if let Some(found) = find_in(&path, depth + 1)? {
                        return Ok(Some(found));
                    }
                }
            }
            Some("required" | "optional") => {
                let plugin = words.next().unwrap_or("");
                if Path::new(plugin).file_name() == Some(PLUGIN_FILE.as_ref()) {
                    return Ok(Some(words.map(str::to_string).collect()));
                }
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The files an `include` names: a path, or a `*.conf`-style pattern in
/// its last component (Slurm allows a glob), relative to the including
/// file's directory when not absolute.
fn included(from: &Path, pattern: &str) -> Vec<PathBuf> {
    let pattern = match Path::new(pattern) {
        p if p.is_absolute() => p.to_path_buf(),
        p => from.parent().unwrap_or(Path::new("/")).join(p),
    };
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some((prefix, suffix)) = name.split_once('*') else {
        return vec![pattern];
    };
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap_or_default().to_string_lossy();
                    n.starts_with(prefix) && n.ends_with(suffix) && n.len() >= name.len() - 1
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn read_small(file: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !meta.is_file() || meta.len() > MAX_BYTES {
        return Err(format!(
            "{}: not a plugstack.conf (a regular file of at most 1 MiB)",
            file.display()
        ));
    }
    std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_line_through_includes() {
        let d = tempfile::tempdir().unwrap();
        let conf = d.path().join("plugstack.conf");
        std::fs::create_dir(d.path().join("plugstack.conf.d")).unwrap();
        std::fs::write(
            &conf,
            "# pyxis first\nrequired /usr/lib/pyxis.so\ninclude plugstack.conf.d/*.conf\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("plugstack.conf.d/50-gpu-health.conf"),
            "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/libgpu_health_spank.so nccl_ib_timeout=20 default_mode=strict # site\n",
        )
        .unwrap();
        let words = find_plugin_line(&conf).unwrap().unwrap();
        assert_eq!(words, ["nccl_ib_timeout=20", "default_mode=strict"]);
        let (args, problems) = parse_args(&words);
        assert!(problems.is_empty());
        assert_eq!(args.nccl.ib_timeout, 20);
        std::fs::write(&conf, "required /usr/lib/pyxis.so\n").unwrap();
        assert_eq!(find_plugin_line(&conf).unwrap(), None);
        assert!(find_plugin_line(&d.path().join("missing")).is_err());
    }
}
