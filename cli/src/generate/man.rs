//! The gpu-health(8) man page: the prose of packaging/man/gpu-health.8.in
//! with its SYNOPSIS and COMMANDS made from the command table. The
//! packages install what `gpu-health manpage` prints (ci/package).

use crate::commands::COMMANDS;
use crate::spec::CommandSpec;

use super::synopsis_words;

const TEMPLATE: &str = include_str!("../../../packaging/man/gpu-health.8.in");
const SYNOPSIS_MARK: &str = ".\\\" @SYNOPSIS@";
const COMMANDS_MARK: &str = ".\\\" @COMMANDS@";

/// Text for roff: backslashes and dashes escaped, no line that starts
/// with a control character.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

/// `.B gpu-health check` and the rest of its synopsis in roman.
fn synopsis_lines(spec: &CommandSpec) -> String {
    let words = synopsis_words(spec);
    let mut s = format!(".B \"gpu\\-health {}\"\n", roff(spec.name));
    if !words.is_empty() {
        s.push_str(&roff(&words.join(" ")));
        s.push('\n');
    }
    s
}

fn command_section(spec: &CommandSpec) -> String {
    let mut s = format!(".SS \"{}\"\n", roff(spec.name));
    s.push_str(&synopsis_lines(spec));
    s.push_str(".PP\n");
    s.push_str(&roff(spec.about));
    s.push('\n');
    for o in spec.operands {
        s.push_str(&format!(".TP\n.I {}\n{}\n", o.name, roff(o.help)));
    }
    for o in spec.all_options() {
        let names = match o.short {
            Some(c) => format!("\\-{c}, \\-\\-{}", roff(o.long)),
            None => format!("\\-\\-{}", roff(o.long)),
        };
        match o.value {
            Some(v) => s.push_str(&format!(".TP\n.BI \"{names} \" {v}\n")),
            None => s.push_str(&format!(".TP\n.B \"{names}\"\n")),
        }
        s.push_str(&roff(o.help));
        s.push('\n');
    }
    s.push_str(".PP\nExit status:\n.RS\n");
    for (code, meaning) in spec.exit {
        s.push_str(&format!(".TP 4\n.B {code}\n{}\n", roff(meaning)));
    }
    s.push_str(".RE\n");
    s
}

/// The whole page (`@VERSION@` is left for the packaging to fill in).
pub fn page() -> String {
    let synopsis: String = COMMANDS
        .iter()
        .map(|c| synopsis_lines(c))
        .collect::<Vec<_>>()
        .join(".br\n");
    let commands: String = COMMANDS.iter().map(|c| command_section(c)).collect();
    let mut out = String::with_capacity(TEMPLATE.len() + 16 * 1024);
    for line in TEMPLATE.lines() {
        if line.starts_with(SYNOPSIS_MARK) {
            out.push_str(&synopsis);
        } else if line.starts_with(COMMANDS_MARK) {
            out.push_str(&commands);
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24: the man page lacked --npd, --near-oom, --power and --svg.
    #[test]
    fn the_page_has_every_command_and_option() {
        let page = page();
        assert!(!page.contains("@SYNOPSIS@") && !page.contains("@COMMANDS@"));
        for c in COMMANDS {
            assert!(
                page.contains(&format!(".SS \"{}\"", roff(c.name))),
                "{}",
                c.name
            );
            for o in c.all_options() {
                assert!(
                    page.contains(&format!("\\-\\-{}", roff(o.long))),
                    "{}: --{}",
                    c.name,
                    o.long
                );
            }
        }
        assert!(page.contains(".B \"\\-\\-npd\"") && page.contains(".BI \"\\-\\-svg \" FILE"));
        assert_eq!(roff(".x-y\\"), "\\&.x\\-y\\e");
    }
}
