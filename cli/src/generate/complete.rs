//! Shell completions for bash, zsh and fish, from the command table:
//! commands, each command's options (and their values' kind: a file, a
//! directory, one of some words) and operands.

use crate::commands::COMMANDS;
use crate::spec::{CommandSpec, Complete, Opt};

/// The shells there is a script for.
pub const SHELLS: [&str; 3] = ["bash", "zsh", "fish"];

/// The script for `shell`, `None` for another shell.
pub fn script(shell: &str) -> Option<String> {
    match shell {
        "bash" => Some(bash()),
        "zsh" => Some(zsh()),
        "fish" => Some(fish()),
        _ => None,
    }
}

/// The first word of each command (`config` for `config check`), once.
fn first_words() -> Vec<&'static str> {
    let mut words: Vec<&'static str> = Vec::new();
    for c in COMMANDS {
        let w = c.name.split(' ').next().unwrap_or(c.name);
        if !words.contains(&w) {
            words.push(w);
        }
    }
    words
}

fn option_words(c: &CommandSpec) -> String {
    let mut words = Vec::new();
    for o in c.all_options() {
        if let Some(s) = o.short {
            words.push(format!("-{s}"));
        }
        words.push(format!("--{}", o.long));
    }
    words.join(" ")
}

fn bash_values(complete: Complete) -> String {
    match complete {
        Complete::Nothing => "COMPREPLY=()".into(),
        Complete::File => {
            "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\"))".into()
        }
        Complete::Dir => {
            "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\"))".into()
        }
        Complete::Words(w) => format!("COMPREPLY=($(compgen -W '{}' -- \"$cur\"))", w.join(" ")),
        Complete::Command => format!(
            "COMPREPLY=($(compgen -W '{}' -- \"$cur\"))",
            first_words().join(" ")
        ),
    }
}

fn bash() -> String {
    let mut s = String::from(
        "# bash completion for gpu-health (made by `gpu-health completions bash`)\n\
         _gpu_health() {\n\
         \x20   local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n\
         \x20   local cmd=${COMP_WORDS[1]} first=2\n\
         \x20   COMPREPLY=()\n\
         \x20   if ((COMP_CWORD == 1)); then\n",
    );
    s.push_str(&format!(
        "        COMPREPLY=($(compgen -W '{} --help --version' -- \"$cur\"))\n        return\n    fi\n",
        first_words().join(" ")
    ));
    s.push_str(
        "    if [[ $cmd == config ]]; then\n\
         \x20       if ((COMP_CWORD == 2)); then COMPREPLY=($(compgen -W 'check' -- \"$cur\")); return; fi\n\
         \x20       cmd=\"config ${COMP_WORDS[2]}\" first=3\n\
         \x20   fi\n\
         \x20   local opts operand\n\
         \x20   case $cmd in\n",
    );
    for c in COMMANDS {
        s.push_str(&format!("    '{}')\n", c.name));
        s.push_str(&format!("        opts='{}'\n", option_words(c)));
        let valued: Vec<&Opt> = c.all_options().filter(|o| o.value.is_some()).collect();
        if !valued.is_empty() {
            s.push_str("        case $prev in\n");
            for o in valued {
                let names = match o.short {
                    Some(sh) => format!("-{sh} | --{}", o.long),
                    None => format!("--{}", o.long),
                };
                s.push_str(&format!(
                    "        {names}) {}; return ;;\n",
                    bash_values(o.complete)
                ));
            }
            s.push_str("        esac\n");
        }
        let operand = match c.operands.first().map_or(Complete::Nothing, |o| o.complete) {
            Complete::Nothing => "operand=none".to_string(),
            Complete::File => "operand=file".to_string(),
            Complete::Dir => "operand=dir".to_string(),
            Complete::Words(w) => format!("operand='{}'", w.join(" ")),
            Complete::Command => format!("operand='{}'", first_words().join(" ")),
        };
        s.push_str(&format!("        {operand}\n"));
        s.push_str("        ;;\n");
    }
    s.push_str(
        "    *) return ;;\n\
         \x20   esac\n\
         \x20   if [[ $cur == -* ]]; then\n\
         \x20       COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n\
         \x20   else\n\
         \x20       case $operand in\n\
         \x20       none) ;;\n\
         \x20       file) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n\
         \x20       dir) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n\
         \x20       *) COMPREPLY=($(compgen -W \"$operand\" -- \"$cur\")) ;;\n\
         \x20       esac\n\
         \x20   fi\n\
         \x20   : \"$first\"\n\
         }\n\
         complete -F _gpu_health gpu-health\n",
    );
    s
}

/// Text inside a zsh `_arguments` spec's brackets or a `_describe` entry.
fn zsh_text(t: &str) -> String {
    t.replace('\\', "\\\\")
        .replace('\'', "'\\''")
        .replace('[', "\\[")
        .replace(']', "\\]")
        .replace(':', "\\:")
}

fn zsh_action(complete: Complete) -> String {
    match complete {
        Complete::Nothing => " ".into(),
        Complete::File => "_files".into(),
        Complete::Dir => "_files -/".into(),
        Complete::Words(w) => format!("({})", w.join(" ")),
        Complete::Command => format!("({})", first_words().join(" ")),
    }
}

fn zsh_spec(c: &CommandSpec, o: &Opt) -> String {
    // The other members of its group exclude it.
    let excl: Vec<String> = c
        .all_options()
        .filter(|m| o.group.is_some() && m.group == o.group && m.long != o.long)
        .map(|m| format!("--{}", m.long))
        .collect();
    let excl = if excl.is_empty() {
        String::new()
    } else {
        format!("({})", excl.join(" "))
    };
    let help = zsh_text(&first_sentence(o.help));
    let value = o.value.map_or(String::new(), |v| {
        format!(":{}:{}", v.to_lowercase(), zsh_action(o.complete))
    });
    let eq = if o.value.is_some() { "=" } else { "" };
    match o.short {
        Some(sh) => format!(
            "'{excl}(-{sh} --{l})'{{-{sh},--{l}{eq}}}'[{help}]{value}'",
            l = o.long
        ),
        None => format!("'{excl}--{}{eq}[{help}]{value}'", o.long),
    }
}

fn first_sentence(t: &str) -> String {
    let t = t.split("; ").next().unwrap_or(t);
    let t = t.split(" (").next().unwrap_or(t);
    t.to_string()
}

fn zsh() -> String {
    let mut s = String::from(
        "#compdef gpu-health\n# zsh completion for gpu-health (made by `gpu-health completions zsh`)\n\n_gpu_health() {\n    local -a commands\n    commands=(\n",
    );
    for w in first_words() {
        let summary = COMMANDS
            .iter()
            .find(|c| c.name.split(' ').next() == Some(w))
            .map_or("", |c| c.summary);
        s.push_str(&format!("        '{w}:{}'\n", zsh_text(summary)));
    }
    s.push_str(
        "    )\n    if (( CURRENT == 2 )); then\n        _describe 'command' commands\n        return\n    fi\n    local cmd=$words[2]\n    if [[ $cmd == config ]]; then\n        if (( CURRENT == 3 )); then\n            compadd check\n            return\n        fi\n        cmd=\"config $words[3]\"\n        shift words\n        (( CURRENT-- ))\n    fi\n    shift words\n    (( CURRENT-- ))\n    case $cmd in\n",
    );
    for c in COMMANDS {
        let mut specs: Vec<String> = c.all_options().map(|o| zsh_spec(c, o)).collect();
        for (i, operand) in c.operands.iter().enumerate() {
            let optional = if operand.required { "" } else { ":" };
            specs.push(format!(
                "'{}{optional}:{}:{}'",
                i + 1,
                operand.name.to_lowercase(),
                zsh_action(operand.complete)
            ));
        }
        s.push_str(&format!(
            "    '{}')\n        _arguments -s \\\n            {}\n        ;;\n",
            c.name,
            specs.join(" \\\n            ")
        ));
    }
    s.push_str("    esac\n}\n\n_gpu_health \"$@\"\n");
    s
}

fn fish_text(t: &str) -> String {
    t.replace('\\', "\\\\").replace('\'', "\\'")
}

fn fish() -> String {
    let mut s = String::from(
        "# fish completion for gpu-health (made by `gpu-health completions fish`)\ncomplete -c gpu-health -f\n",
    );
    let words = first_words().join(" ");
    for w in first_words() {
        let summary = COMMANDS
            .iter()
            .find(|c| c.name.split(' ').next() == Some(w))
            .map_or("", |c| c.summary);
        s.push_str(&format!(
            "complete -c gpu-health -n 'not __fish_seen_subcommand_from {words}' -a {w} -d '{}'\n",
            fish_text(&first_sentence(summary))
        ));
    }
    s.push_str(
        "complete -c gpu-health -n '__fish_seen_subcommand_from config; and not __fish_seen_subcommand_from check' -a check -d 'check a configuration file'\n",
    );
    for c in COMMANDS {
        let cond = match c.name.split_once(' ') {
            Some((a, b)) => {
                format!("__fish_seen_subcommand_from {a}; and __fish_seen_subcommand_from {b}")
            }
            None => format!("__fish_seen_subcommand_from {}", c.name),
        };
        for o in c.all_options() {
            let mut line = format!("complete -c gpu-health -n '{cond}' -l {}", o.long);
            if let Some(sh) = o.short {
                line.push_str(&format!(" -s {sh}"));
            }
            if o.value.is_some() {
                line.push_str(match o.complete {
                    Complete::File | Complete::Dir => " -r -F",
                    _ => " -x",
                });
                if let Complete::Words(w) = o.complete {
                    line.push_str(&format!(" -a '{}'", w.join(" ")));
                }
            }
            line.push_str(&format!(" -d '{}'\n", fish_text(&first_sentence(o.help))));
            s.push_str(&line);
        }
        for operand in c.operands {
            let values = match operand.complete {
                Complete::File | Complete::Dir => " -F".to_string(),
                Complete::Words(w) => format!(" -a '{}'", w.join(" ")),
                Complete::Command => format!(" -a '{words}'"),
                Complete::Nothing => continue,
            };
            s.push_str(&format!(
                "complete -c gpu-health -n '{cond}'{values} -d '{}'\n",
                fish_text(&first_sentence(operand.help))
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_offered_by_every_shell() {
        for shell in SHELLS {
            let text = script(shell).unwrap();
            for c in COMMANDS {
                for o in c.all_options() {
                    let needle = match shell {
                        "fish" => format!("-l {}", o.long),
                        _ => format!("--{}", o.long),
                    };
                    assert!(text.contains(&needle), "{shell}: {} {needle}", c.name);
                }
            }
        }
        assert_eq!(script("tcsh"), None);
    }
}
