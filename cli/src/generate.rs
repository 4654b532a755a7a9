//! Text made from the command table (`commands`): each command's
//! `--help`, the list of commands, the man page ([`man`]) and the shell
//! completions ([`complete`]).

pub mod complete;
pub mod man;

use crate::commands::COMMANDS;
use crate::spec::{CommandSpec, Opt};

/// The synopsis's words after `gpu-health NAME`: `[--json | --npd]
/// [--config FILE]`, `NODE [--force]`. Options of one group share a
/// bracket; required ones have none.
pub fn synopsis_words(spec: &CommandSpec) -> Vec<String> {
    let mut words = Vec::new();
    let mut groups_done: Vec<&str> = Vec::new();
    let show = |o: &Opt| match (o.short, o.value) {
        (Some(c), Some(v)) => format!("-{c} {v}"),
        (Some(c), None) => format!("-{c}"),
        (None, Some(v)) => format!("--{} {v}", o.long),
        (None, None) => format!("--{}", o.long),
    };
    for operand in spec.operands.iter().filter(|o| o.required) {
        words.push(operand.name.to_string());
    }
    for o in spec.all_options().filter(|o| o.long != "help") {
        if o.required {
            words.push(show(o));
            continue;
        }
        match o.group {
            Some(g) if groups_done.contains(&g) => {}
            Some(g) => {
                groups_done.push(g);
                let members: Vec<String> = spec
                    .all_options()
                    .filter(|m| m.group == Some(g))
                    .map(show)
                    .collect();
                words.push(format!("[{}]", members.join(" | ")));
            }
            None => words.push(format!("[{}]", show(o))),
        }
    }
    for operand in spec.operands.iter().filter(|o| !o.required) {
        words.push(format!("[{}]", operand.name));
    }
    words
}

/// `gpu-health check [--json | --npd] [--config FILE]`.
pub fn synopsis(spec: &CommandSpec) -> String {
    let words = synopsis_words(spec);
    if words.is_empty() {
        format!("gpu-health {}", spec.name)
    } else {
        format!("gpu-health {} {}", spec.name, words.join(" "))
    }
}

/// `text` broken into lines of at most `width` characters, each after
/// `indent` spaces (the first too).
pub fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            out.push_str(&" ".repeat(indent));
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&" ".repeat(indent));
        out.push_str(&line);
        out.push('\n');
    }
    out
}

const WIDTH: usize = 79;

/// A command's `--help`.
pub fn help(spec: &CommandSpec) -> String {
    let mut s = format!("usage: {}\n\n", synopsis(spec));
    s.push_str(&wrap(spec.about, 0, WIDTH));
    let labels: Vec<(String, &str)> = spec
        .operands
        .iter()
        .map(|o| (o.name.to_string(), o.help))
        .chain(spec.all_options().map(|o| (o.label(), o.help)))
        .collect();
    let col = labels.iter().map(|(l, _)| l.len()).max().unwrap_or(0) + 4;
    s.push_str("\noptions:\n");
    for (label, help) in labels {
        let text = wrap(help, col, WIDTH);
        // The label, then the text from its column on.
        s.push_str(&format!("  {label:<w$}", w = col - 2));
        s.push_str(text.trim_start());
    }
    s.push_str("\nexit status:\n");
    for (code, meaning) in spec.exit {
        let text = wrap(meaning, 5, WIDTH);
        s.push_str(&format!("  {code}  {}", text.trim_start()));
    }
    s
}

/// `gpu-health --help`: every command's synopsis and what it does.
pub fn usage() -> String {
    let mut s = String::from("usage: gpu-health <command> [options]\n\ncommands:\n");
    for c in COMMANDS {
        s.push_str(&wrap(&synopsis(c), 2, WIDTH));
        s.push_str(&wrap(c.summary, 6, WIDTH));
    }
    s.push_str(
        "\ngpu-health <command> --help (or gpu-health help <command>) says more about a \
         command.\nConfiguration: --config FILE, else $GPU_HEALTH_CONFIG, else gpu-health.toml \
         beside $SLURM_CONF, else /etc/slurm/gpu-health.toml (docs/configuration.md).\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::spec_of;

    #[test]
    fn synopses_come_from_the_table() {
        assert_eq!(
            synopsis(spec_of("check").unwrap()),
            "gpu-health check [--json | --npd] [--gpus LIST | --job ID] [--config FILE]"
        );
        assert_eq!(
            synopsis(spec_of("resume").unwrap()),
            "gpu-health resume NODE [--force] [--forget-pending] [--config FILE]"
        );
        assert!(synopsis(spec_of("report").unwrap())
            .contains("[--near-oom | --power] [--svg FILE] [--json | --csv]"));
        assert!(synopsis(spec_of("step-end").unwrap())
            .starts_with("gpu-health step-end --gpus LIST --since-ms MS"));
    }

    /// Issue 24: the top-level help lacked --npd, --near-oom, --power and
    /// --svg; it now has every option of every command.
    #[test]
    fn the_usage_names_every_option_of_every_command() {
        let u = usage();
        for c in COMMANDS {
            for o in c.all_options().filter(|o| o.long != "help") {
                let short = o.short.map(|s| format!("-{s} "));
                assert!(
                    u.contains(&format!("--{}", o.long)) || short.is_some_and(|s| u.contains(&s)),
                    "{}: --{} missing\n{u}",
                    c.name,
                    o.long
                );
            }
        }
        let h = help(spec_of("report").unwrap());
        assert!(
            h.contains("  --svg FILE") && h.contains("exit status:\n  0  shown"),
            "{h}"
        );
    }
}
