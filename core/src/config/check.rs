//! `gpu-health config check`: every problem of a configuration file and
//! a node's drop-in, each with its file, line and table, instead of the
//! first one the runs stop at (like `promtool check config` or `nginx
//! -t`). The runs load with [`super::load_for_node`]; this reads the same
//! files the same way and judges them by the same rules.

use std::fmt;
use std::path::{Path, PathBuf};

use super::load::{merge_files, node_dropin_path, parse_error, read_text};
use super::place::{
    blank_lines, header, locate_key, nth_header, place_of, place_of_line, sections, Place,
};
use super::{Config, ConfigError};
use crate::ids::NodeName;

/// Problems shown per file section at most (a file of typos ends there).
const MAX_PER_SECTION: usize = 20;

/// One problem of a configuration file.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub path: PathBuf,
    pub place: Option<Place>,
    pub message: String,
    /// In `[power]`, which only `gpu-health report --power` reads: the
    /// Prolog, Epilog, health check and plugin are not affected.
    pub report_only: bool,
    /// A path users may write, which the runs do not read (the rest of
    /// the configuration is in force).
    pub not_read: bool,
}

impl fmt::Display for Problem {
    /// `FILE:LINE:COLUMN: [table]: message`, as compilers write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(p) = &self.place {
            write!(f, ":{}:{}: {}", p.line, p.column, p.table_name())?;
        }
        write!(f, ": {}", self.message)?;
        if self.report_only {
            write!(
                f,
                " (report-only: only `gpu-health report --power` is affected)"
            )?;
        }
        if self.not_read {
            write!(f, " (the runs do not read it)")?;
        }
        Ok(())
    }
}

/// What `gpu-health config check` found.
#[derive(Debug)]
pub struct CheckedConfig {
    pub path: PathBuf,
    /// Whether the main file exists (a missing default file means the
    /// built-in defaults, which is fine).
    pub exists: bool,
    /// The node's drop-in, when it has one.
    pub dropin: Option<PathBuf>,
    pub problems: Vec<Problem>,
    /// The configuration the node's runs get, when nothing stops them
    /// (`%n` expanded when a node is given).
    pub config: Option<Config>,
}

impl CheckedConfig {
    /// Whether a problem makes the runs fall back (drain nothing).
    pub fn runs_affected(&self) -> bool {
        self.problems.iter().any(|p| !p.report_only && !p.not_read)
    }
}

fn problem(path: &Path, place: Option<Place>, message: String) -> Problem {
    Problem {
        path: path.to_path_buf(),
        place,
        message,
        report_only: false,
        not_read: false,
    }
}

fn from_error(e: ConfigError) -> Problem {
    match e {
        ConfigError::Read { path, why } => problem(&path, None, format!("cannot read it: {why}")),
        ConfigError::Parse {
            path,
            message,
            place,
        } => problem(&path, place, message),
        ConfigError::Invalid { path, message } => problem(&path, None, message),
    }
}

/// Check the file at `path` (which must exist when someone named it:
/// `must_exist`) and, for `node`, its drop-in: syntax, unknown keys and
/// wrong types in every table, every range and cross-key rule, and the
/// report-only `[power]` racks.
pub fn check_config(path: &Path, must_exist: bool, node: Option<&NodeName>) -> CheckedConfig {
    let mut out = CheckedConfig {
        path: path.to_path_buf(),
        exists: false,
        dropin: None,
        problems: Vec::new(),
        config: None,
    };
    let main = match read_text(path) {
        Ok(Some(t)) => {
            out.exists = true;
            Some(t)
        }
        Ok(None) if must_exist => {
            out.problems
                .push(problem(path, None, "no such file".into()));
            None
        }
        Ok(None) => Some(String::new()),
        Err(e) => {
            out.problems.push(from_error(e));
            None
        }
    };
    let dropin_path = node.and_then(|n| node_dropin_path(path, n));
    let dropin = match dropin_path.as_deref().map(read_text) {
        Some(Ok(Some(t))) => {
            out.dropin = dropin_path.clone();
            Some(t)
        }
        Some(Err(e)) => {
            out.problems.push(from_error(e));
            None
        }
        _ => None,
    };
    // The shape of each file; the rules then run on what is left with the
    // faulty lines blanked, so that every error is found in one go.
    let mut cleaned_main = None;
    if let Some(text) = &main {
        let shape = shape_problems(path, text);
        out.problems.extend(shape.problems);
        cleaned_main = shape.cleaned;
    }
    let mut cleaned_dropin = None;
    if let (Some(d), Some(text)) = (&out.dropin, &dropin) {
        let shape = shape_problems(d, text);
        out.problems.extend(shape.problems);
        cleaned_dropin = shape.cleaned;
    }
    let (Some(main), true) = (cleaned_main, dropin.is_none() || cleaned_dropin.is_some()) else {
        return out;
    };
    let shape_ok = out.problems.is_empty();
    let files = (
        path,
        main.as_str(),
        out.dropin.as_deref().zip(cleaned_dropin.as_deref()),
    );
    match merge_files(files.0, files.1, files.2) {
        Ok((mut config, _)) => {
            out.problems.extend(rule_problems(&config, files));
            out.problems.extend(power_problems(&config, files));
            out.problems.extend(untrusted_paths(&config, files));
            if shape_ok && !out.runs_affected() {
                if let Some(n) = node {
                    config.expand_node(n);
                }
                out.config = Some(config);
            }
        }
        Err(e) if shape_ok => out.problems.push(from_error(e)),
        Err(_) => {}
    }
    out
}

/// A file's shape problems, and its text with their lines blanked
/// (`None` when its syntax is broken: nothing more can be read).
struct Shape {
    problems: Vec<Problem>,
    cleaned: Option<String>,
}

/// Syntax, unknown keys and wrong types of one file: each top-level
/// table is read alone (the others blanked, so lines keep their
/// numbers), and each faulty line blanked in turn to find the next.
fn shape_problems(path: &Path, text: &str) -> Shape {
    if let Err(e) = text.parse::<toml::Table>() {
        return Shape {
            problems: vec![from_error(parse_error(path, text, &e))],
            cleaned: None,
        };
    }
    let owner = sections(text);
    let mut names: Vec<&String> = Vec::new();
    for s in &owner {
        if !names.contains(&s) {
            names.push(s);
        }
    }
    let mut out = Vec::new();
    let mut dropped: Vec<usize> = Vec::new();
    for name in names {
        let mut blanked: Vec<usize> = Vec::new();
        let section_lines = || (1..=owner.len()).filter(|l| owner.get(l - 1) == Some(name));
        for _ in 0..MAX_PER_SECTION {
            let keep = |l: usize| owner.get(l - 1) == Some(name) && !blanked.contains(&l);
            let candidate = blank_lines(text, keep);
            let Err(e) = toml::from_str::<Config>(&candidate) else {
                break;
            };
            let Some(span) = e.span() else {
                out.push(from_error(parse_error(path, "", &e)));
                blanked.extend(section_lines());
                break;
            };
            let place = place_of(&candidate, span.clone());
            let first = place.line;
            let last = first
                + candidate[span.start..span.end.min(candidate.len())]
                    .matches('\n')
                    .count();
            let on_header = text.lines().nth(first - 1).and_then(header).is_some();
            out.push(problem(
                path,
                place_of_line(text, first).map(|mut p| {
                    p.column = place.column;
                    p.width = place.width;
                    p
                }),
                e.message()
                    .split('\n')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string(),
            ));
            if on_header {
                // An unknown table: its keys are its own problem.
                blanked.extend(section_lines());
                break;
            }
            blanked.extend(first..=last);
            let next = blank_lines(text, |l| {
                owner.get(l - 1) == Some(name) && !blanked.contains(&l)
            });
            if next.parse::<toml::Table>().is_err() {
                blanked.extend(section_lines());
                break;
            }
        }
        dropped.extend(blanked);
    }
    let cleaned = blank_lines(text, |l| !dropped.contains(&l));
    let cleaned = (cleaned.parse::<toml::Table>().is_ok()
        && toml::from_str::<Config>(&cleaned).is_ok())
    .then_some(cleaned);
    Shape {
        problems: out,
        cleaned,
    }
}

type Files<'a> = (&'a Path, &'a str, Option<(&'a Path, &'a str)>);

/// Where `key` is set: the drop-in when it sets it, else the main file.
fn locate(files: Files<'_>, key: &str) -> (PathBuf, Option<Place>) {
    let (path, text, dropin) = files;
    if let Some((dpath, dtext)) = dropin {
        if let Some(line) = locate_key(dtext, key) {
            return (dpath.to_path_buf(), place_of_line(dtext, line));
        }
    }
    let place = locate_key(text, key).and_then(|l| place_of_line(text, l));
    let shown = match (place.is_none(), dropin) {
        (true, Some((dpath, _))) => dpath,
        _ => path,
    };
    (shown.to_path_buf(), place)
}

/// The range and cross-key rules, each placed at the key it names.
fn rule_problems(config: &Config, files: Files<'_>) -> Vec<Problem> {
    config
        .problems()
        .into_iter()
        .map(|message| {
            // Each message starts with its key: `brake.settle_ms = ...`,
            // `xid.rules.31: ...`, `thresholds: ...`.
            let key = message.split([' ', ':']).next().unwrap_or("").to_string();
            let (path, place) = locate(files, &key);
            problem(&path, place, message)
        })
        .collect()
}

/// Paths whose content decides drains and returns, which users other
/// than root must not be able to write: `xid.boot_id_path` (a boot id a
/// user sets fakes a reboot). Such a file is an error here and is not
/// read by the runs.
fn untrusted_paths(config: &Config, files: Files<'_>) -> Vec<Problem> {
    let path = &config.xid.boot_id_path;
    let Some(who) = std::fs::metadata(path)
        .ok()
        .and_then(|m| crate::xid::boot_id_writers(&m))
    else {
        return Vec::new();
    };
    let (file, place) = locate(files, "xid.boot_id_path");
    let mut p = problem(
        &file,
        place,
        format!(
            "xid.boot_id_path = {:?} can be written by {who}: a user could fake a reboot \
             (and with acceptance.after_any_boot drain the node); give it to root, mode 0644 or stricter",
            path.display().to_string()
        ),
    );
    p.not_read = true;
    vec![p]
}

/// `[power]` as the power report reads it.
fn power_problems(config: &Config, files: Files<'_>) -> Vec<Problem> {
    let Err(e) = config.power.racks() else {
        return Vec::new();
    };
    let mut p = from_error(e);
    let text = match files.2 {
        Some((dpath, dtext)) if dpath == p.path => dtext,
        _ => files.1,
    };
    // `[[power.racks]] #2 ("r02"): ...` names the rack by its number,
    // `power.racks "r02": ...` by its name.
    let by_number = p
        .message
        .split_once("#")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| nth_header(text, "power.racks", n));
    let by_name = || {
        let name = p.message.split('"').nth(1)?;
        rack_named(text, name)
    };
    let line = by_number
        .or_else(by_name)
        .or_else(|| locate_key(text, "power"));
    p.place = line.and_then(|l| place_of_line(text, l));
    p.report_only = true;
    vec![p]
}

/// The line of the `[[power.racks]]` header of the rack named `name`.
fn rack_named(text: &str, name: &str) -> Option<usize> {
    let mut rack_header = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(h) = header(line) {
            rack_header = (h == "power.racks").then_some(i + 1);
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').trim_matches('\'');
        if key.trim() == "name" && value == name {
            if let Some(h) = rack_header {
                return Some(h);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Issue 35, item 10: a boot id file users may write is an error at
    /// `xid.boot_id_path`'s line; the rest of the configuration stands.
    #[test]
    fn a_boot_id_path_users_can_write_is_an_error() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let boot = write(d.path(), "boot_id", "b1\n");
        let main = write(
            d.path(),
            "gpu-health.toml",
            &format!("state_dir = \"/x\"\n[xid]\nboot_id_path = {boot:?}\n"),
        );
        let c = check_config(&main, true, None);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        std::fs::set_permissions(&boot, std::fs::Permissions::from_mode(0o666)).unwrap();
        let c = check_config(&main, true, None);
        let shown: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 1, "{shown:#?}");
        assert!(
            shown[0].contains(":3:1: [xid]: xid.boot_id_path = ")
                && shown[0].contains("can be written by every user (mode o+w)")
                && shown[0].ends_with("(the runs do not read it)"),
            "{shown:#?}"
        );
        assert!(!c.runs_affected() && c.config.is_some());
        std::fs::set_permissions(&boot, std::fs::Permissions::from_mode(0o620)).unwrap();
        let c = check_config(&main, true, None);
        assert!(
            c.problems[0].message.contains("(mode g+w)"),
            "{:?}",
            c.problems
        );
    }

    #[test]
    fn every_problem_with_its_file_line_and_table() {
        let d = tempfile::tempdir().unwrap();
        let main = write(
            d.path(),
            "gpu-health.toml",
            "state_dir = \"/x/%n\"\nnvml_deadine_ms = 5\n[dcgm]\nlevle = 2\nenabled = true\n\
             [thresholds]\nmax_temprature_c = 80\nmin_power_limit_ratio = \"x\"\n",
        );
        let c = check_config(&main, true, None);
        let shown: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 4, "{shown:#?}");
        assert!(
            shown[0].contains("gpu-health.toml:2:1: top level: unknown field `nvml_deadine_ms`"),
            "{shown:#?}"
        );
        assert!(
            shown[1].contains(":4:1: [dcgm]: unknown field `levle`"),
            "{shown:#?}"
        );
        assert!(
            shown[2].contains(":7:1: [thresholds]: unknown field `max_temprature_c`"),
            "{shown:#?}"
        );
        assert!(
            shown[3].contains(":8:25: [thresholds]: invalid type"),
            "{shown:#?}"
        );
        assert!(c.config.is_none() && c.runs_affected());
    }

    #[test]
    fn rules_are_placed_at_their_key_in_the_file_that_sets_it() {
        let d = tempfile::tempdir().unwrap();
        let main = write(
            d.path(),
            "gpu-health.toml",
            "[brake]\nsettle_ms = 20000\n[dcgm]\nlevel = 9\n",
        );
        write(
            d.path(),
            "gpu-health.d/n1.toml",
            "\n\nnvml_deadline_ms = 5\n",
        );
        let n1 = NodeName::parse("n1").unwrap();
        let c = check_config(&main, true, Some(&n1));
        let shown: Vec<String> = c.problems.iter().map(ToString::to_string).collect();
        assert!(
            shown.iter().any(|s| s
                .contains("gpu-health.d/n1.toml:3:1: top level: nvml_deadline_ms = 5 is outside")),
            "{shown:#?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.contains("gpu-health.toml:2:1: [brake]: brake.settle_ms = 20000")),
            "{shown:#?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.contains("gpu-health.toml:4:1: [dcgm]: dcgm.level = 9")),
            "{shown:#?}"
        );
    }

    #[test]
    fn power_mistakes_are_report_only_and_named_by_rack() {
        let d = tempfile::tempdir().unwrap();
        let main = write(
            d.path(),
            "gpu-health.toml",
            "state_dir = \"/s/%n\"\n[[power.racks]]\nname = \"a\"\nnodes = [\"n1\"]\nsupply_kw = 8.0\ncooling_kw = 9.0\n\
             [[power.racks]]\nname = \"b\"\nnodes = [\"n[1-\"]\nsupply_kw = 8.0\ncooling_kw = 9.0\n",
        );
        let n1 = NodeName::parse("n1").unwrap();
        let c = check_config(&main, true, Some(&n1));
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        let p = &c.problems[0];
        assert!(p.report_only);
        assert_eq!(p.place.as_ref().map(|p| p.line), Some(7));
        assert!(!c.runs_affected());
        assert_eq!(
            c.config.unwrap().state_dir,
            PathBuf::from("/s/n1"),
            "the runs' configuration, %n expanded"
        );
    }

    #[test]
    fn a_named_file_must_exist_a_default_one_need_not() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope.toml");
        let c = check_config(&missing, true, None);
        assert_eq!(c.problems.len(), 1);
        assert!(c.problems[0]
            .to_string()
            .ends_with("nope.toml: no such file"));
        let c = check_config(&missing, false, None);
        assert!(c.problems.is_empty() && !c.exists);
        assert_eq!(c.config, Some(Config::default()));
    }

    #[test]
    fn a_syntax_error_is_one_problem_with_its_caret() {
        let d = tempfile::tempdir().unwrap();
        let main = write(d.path(), "gpu-health.toml", "[dcgm]\nlevel = = 2\n");
        let c = check_config(&main, true, None);
        assert_eq!(c.problems.len(), 1);
        let place = c.problems[0].place.clone().unwrap();
        assert_eq!((place.line, place.table.as_deref()), (2, Some("dcgm")));
        assert!(
            place.caret().starts_with("    2 | level = = 2\n      | "),
            "{}",
            place.caret()
        );
    }
}
