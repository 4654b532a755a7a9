//! One table per command: its options, operands and exit statuses. The
//! parser reads the command line by it, and the same table gives the
//! command's `--help`, its section of the man page and the shell
//! completions (`generate`), so that none of them can name an option the
//! others lack. The tables themselves are in `commands`.

use std::ffi::OsString;

/// What a shell may offer for a value or an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Complete {
    Nothing,
    File,
    Dir,
    /// One of these words.
    Words(&'static [&'static str]),
    /// A command of gpu-health (`help COMMAND`).
    Command,
}

/// One option.
#[derive(Debug)]
pub struct Opt {
    /// Without the dashes: `json`.
    pub long: &'static str,
    pub short: Option<char>,
    /// The value's name in help (`SECONDS`); `None` for a flag.
    pub value: Option<&'static str>,
    pub help: &'static str,
    pub complete: Complete,
    /// Options of one group exclude each other (`--json`, `--csv`).
    pub group: Option<&'static str>,
    /// The option only goes with this one (`--svg` with `--power`).
    pub needs: Option<&'static str>,
    /// The command cannot run without it.
    pub required: bool,
}

impl Opt {
    /// A flag.
    pub const fn flag(long: &'static str, help: &'static str) -> Opt {
        Opt {
            long,
            short: None,
            value: None,
            help,
            complete: Complete::Nothing,
            group: None,
            needs: None,
            required: false,
        }
    }

    /// An option with a value named `value`.
    pub const fn with(long: &'static str, value: &'static str, help: &'static str) -> Opt {
        Opt {
            value: Some(value),
            ..Opt::flag(long, help)
        }
    }

    pub const fn short(self, c: char) -> Opt {
        Opt {
            short: Some(c),
            ..self
        }
    }

    pub const fn complete(self, complete: Complete) -> Opt {
        Opt { complete, ..self }
    }

    pub const fn group(self, group: &'static str) -> Opt {
        Opt {
            group: Some(group),
            ..self
        }
    }

    pub const fn needs(self, other: &'static str) -> Opt {
        Opt {
            needs: Some(other),
            ..self
        }
    }

    pub const fn required(self) -> Opt {
        Opt {
            required: true,
            ..self
        }
    }

    /// `--job ID`, `-l, --loop SECONDS`.
    pub fn label(&self) -> String {
        let mut s = match self.short {
            Some(c) => format!("-{c}, --{}", self.long),
            None => format!("--{}", self.long),
        };
        if let Some(v) = self.value {
            s.push(' ');
            s.push_str(v);
        }
        s
    }
}

/// A word that is not an option.
#[derive(Debug)]
pub struct Operand {
    pub name: &'static str,
    pub required: bool,
    pub help: &'static str,
    pub complete: Complete,
}

/// One command.
#[derive(Debug)]
pub struct CommandSpec {
    /// As typed: `check`, `config check`.
    pub name: &'static str,
    /// One line for the list of commands.
    pub summary: &'static str,
    /// What it does, for `--help` and the man page.
    pub about: &'static str,
    pub options: &'static [Opt],
    pub operands: &'static [Operand],
    /// Exit statuses and what they mean.
    pub exit: &'static [(i32, &'static str)],
    /// Takes `--config FILE`.
    pub reads_config: bool,
}

/// `--config FILE`, on every command that reads the configuration.
pub static CONFIG: Opt = Opt::with(
    "config",
    "FILE",
    "the configuration file (default: $GPU_HEALTH_CONFIG, else gpu-health.toml beside $SLURM_CONF, \
     else /etc/slurm/gpu-health.toml); a file named here or by $GPU_HEALTH_CONFIG must exist",
)
.complete(Complete::File);

/// `-h, --help`, on every command.
pub static HELP: Opt = Opt::flag("help", "this text").short('h');

impl CommandSpec {
    /// Every option: the command's own, `--config` and `--help`.
    pub fn all_options(&self) -> impl Iterator<Item = &Opt> {
        let config = self.reads_config.then_some(&CONFIG);
        self.options.iter().chain(config).chain([&HELP])
    }

    fn find_long(&self, long: &str) -> Option<&Opt> {
        self.all_options().find(|o| o.long == long)
    }

    fn find_short(&self, c: char) -> Option<&Opt> {
        self.all_options().find(|o| o.short == Some(c))
    }
}

/// What the command line asked for.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    given: Vec<(&'static str, Option<String>)>,
    pub operands: Vec<String>,
}

impl Parsed {
    pub fn flag(&self, long: &str) -> bool {
        self.given.iter().any(|(l, _)| *l == long)
    }

    pub fn value(&self, long: &str) -> Option<&str> {
        self.given
            .iter()
            .find(|(l, _)| *l == long)
            .and_then(|(_, v)| v.as_deref())
    }

    pub fn operand(&self, i: usize) -> Option<&str> {
        self.operands.get(i).map(String::as_str)
    }

    /// The value of `long`, parsed; the error names the option.
    pub fn parsed<T: std::str::FromStr>(&self, long: &str) -> Result<Option<T>, String>
    where
        T::Err: std::fmt::Display,
    {
        self.value(long)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|e| format!("option '--{long}': {v:?} is not usable: {e}"))
            })
            .transpose()
    }
}

/// `--help`, or what to run.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Help,
    Run(Parsed),
}

/// The value of an option. A separate word that looks like an option is
/// taken as a forgotten value (`--job --user bob`), not as the value;
/// `--job=-x` passes such a value on purpose.
fn value_of(p: &mut lexopt::Parser, label: &str) -> Result<String, String> {
    let v = match p.optional_value() {
        Some(v) => v,
        None => {
            let v = p
                .value()
                .map_err(|_| format!("option '{label}' needs a value"))?;
            if v.to_string_lossy().starts_with('-') && v.len() > 1 {
                return Err(format!(
                    "option '{label}' needs a value, found option {:?} \
                     (write {label}=VALUE for a value that starts with '-')",
                    v.to_string_lossy()
                ));
            }
            v
        }
    };
    v.into_string()
        .map_err(|v: OsString| format!("option '{label}': value {v:?} is not UTF-8"))
}

/// Read `args` (the words after the command's name) by `spec`. Every
/// option must be in the table; options of one group exclude each other;
/// a value option is given once.
pub fn parse(spec: &'static CommandSpec, args: &[String]) -> Result<Outcome, String> {
    use lexopt::Arg::{Long, Short, Value};
    let mut out = Parsed::default();
    let mut p = lexopt::Parser::from_args(args.iter());
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        let opt = match arg {
            Long(l) => spec.find_long(l),
            Short(c) => spec.find_short(c),
            Value(v) => {
                let v = v
                    .into_string()
                    .map_err(|v| format!("argument {v:?} is not UTF-8"))?;
                if out.operands.len() >= spec.operands.len() {
                    return Err(format!(
                        "unexpected argument {:?}",
                        gpu_health_core::text::printable(&v)
                    ));
                }
                out.operands.push(v);
                continue;
            }
        };
        let Some(opt) = opt else {
            return Err(arg.unexpected().to_string());
        };
        if opt.long == HELP.long {
            return Ok(Outcome::Help);
        }
        let label = format!("--{}", opt.long);
        let value = match opt.value {
            Some(_) => Some(value_of(&mut p, &label)?),
            None => {
                // `--json=yes`: a flag takes no value.
                if let Some(v) = p.optional_value() {
                    return Err(format!(
                        "option '{label}' takes no value (got {:?})",
                        v.to_string_lossy()
                    ));
                }
                None
            }
        };
        if out.given.iter().any(|(l, _)| *l == opt.long) {
            if opt.value.is_some() {
                return Err(format!("option '{label}' is given twice"));
            }
            continue;
        }
        out.given.push((opt.long, value));
    }
    check_combination(spec, &out)?;
    Ok(Outcome::Run(out))
}

/// Groups, needs, required options and operands.
fn check_combination(spec: &CommandSpec, out: &Parsed) -> Result<(), String> {
    for (i, (a, _)) in out.given.iter().enumerate() {
        let Some(opt_a) = spec.find_long(a) else {
            continue;
        };
        for (b, _) in &out.given[i + 1..] {
            let same = spec
                .find_long(b)
                .is_some_and(|opt_b| opt_a.group.is_some() && opt_a.group == opt_b.group);
            if same {
                return Err(format!("--{a} and --{b} exclude each other"));
            }
        }
        if let Some(need) = opt_a.needs {
            if !out.flag(need) {
                return Err(format!("--{a} goes with --{need}"));
            }
        }
    }
    if let Some(missing) = spec.all_options().find(|o| o.required && !out.flag(o.long)) {
        return Err(format!("option '{}' is required", missing.label()));
    }
    if let Some(missing) = spec
        .operands
        .iter()
        .skip(out.operands.len())
        .find(|o| o.required)
    {
        return Err(format!("{} is missing", missing.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::spec_of;

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(cmd: &str, args: &[&str]) -> Result<Parsed, String> {
        match parse(spec_of(cmd).unwrap(), &a(args))? {
            Outcome::Run(p) => Ok(p),
            Outcome::Help => Err("help".into()),
        }
    }

    #[test]
    fn options_values_and_operands() {
        let p = run("report", &["--job=42", "--user", "bob", "--json"]).unwrap();
        assert_eq!((p.value("job"), p.value("user")), (Some("42"), Some("bob")));
        assert!(p.flag("json") && !p.flag("csv"));
        let p = run("watch", &["-l", "2", "--count", "3"]).unwrap();
        assert_eq!(p.parsed::<f64>("loop").unwrap(), Some(2.0));
        assert_eq!(run("xids", &["f"]).unwrap().operand(0), Some("f"));
        assert_eq!(run("check", &["-h"]).unwrap_err(), "help");
    }

    #[test]
    fn mistakes_are_named() {
        let err = |cmd: &str, args: &[&str]| run(cmd, args).unwrap_err();
        assert_eq!(
            err("check", &["--json", "--npd"]),
            "--json and --npd exclude each other"
        );
        assert_eq!(
            err("watch", &["--json", "--csv"]),
            "--json and --csv exclude each other"
        );
        assert_eq!(
            err("report", &["--svg", "x.svg"]),
            "--svg goes with --power"
        );
        assert!(err("report", &["--job", "--user", "bob"]).contains("needs a value"));
        assert!(err("report", &["--job", "1", "--job", "2"]).contains("given twice"));
        assert!(err("check", &["--bogus"]).contains("--bogus"));
        assert!(err("check", &["extra"]).contains("unexpected argument"));
        assert!(err("check", &["--json=yes"]).contains("takes no value"));
        assert_eq!(err("resume", &[]), "NODE is missing");
        assert!(err("step-end", &["--gpus", "0"]).contains("--since-ms MS' is required"));
        // A flag given twice is harmless.
        assert!(run("check", &["--json", "--json"]).is_ok());
    }
}
