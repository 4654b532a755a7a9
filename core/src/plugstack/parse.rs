//! The admin's plugstack.conf arguments: `key=value` words, read by the
//! table of `options` into [`PluginArgs`].
//!
//! Parsing never fails as a whole: a word that cannot be used is reported
//! (log and user's terminal) and its key keeps its default, because a typo
//! in plugstack.conf must not break every srun and sbatch of the cluster.

use crate::verdict::Mode;

use super::args::PluginArgs;
use super::options::{argument, known_keys, Kind};

/// One argument that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgProblem {
    pub word: String,
    pub message: String,
}

impl std::fmt::Display for ArgProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plugstack.conf argument {:?}: {}",
            self.word, self.message
        )
    }
}

/// Parse the plugstack.conf words of this plugin.
pub fn parse_args<S: AsRef<str>>(words: &[S]) -> (PluginArgs, Vec<ArgProblem>) {
    let mut args = PluginArgs::default();
    let mut problems = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for word in words.iter().map(AsRef::as_ref) {
        let problem = |message: String| ArgProblem {
            word: word.to_string(),
            message,
        };
        let Some((key, value)) = word.split_once('=') else {
            problems.push(problem(format!(
                "expected key=value (known keys: {})",
                known_keys()
            )));
            continue;
        };
        let Some(entry) = argument(key) else {
            problems.push(problem(format!(
                "unknown key (known keys: {}); {key} keeps its default",
                known_keys()
            )));
            continue;
        };
        let Kind::Argument { repeatable, apply } = entry.kind else {
            continue;
        };
        if let Err(message) = apply(&mut args, value) {
            problems.push(problem(format!("{message}; {key} keeps its default")));
            continue;
        }
        if !repeatable {
            if seen.contains(&entry.name) {
                problems.push(problem(format!("{key} given twice; the last one counts")));
            } else {
                seen.push(entry.name);
            }
        }
    }
    if args.default_mode == Mode::Off && !args.allow_off {
        problems.push(ArgProblem {
            word: "default_mode=off".into(),
            message: "contradicts allow_off=no; default_mode is warn".into(),
        });
        args.default_mode = Mode::Warn;
    }
    (args, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    #[test]
    fn no_words_is_all_defaults() {
        let (a, p) = parse_args::<&str>(&[]);
        assert_eq!(a, PluginArgs::default());
        assert!(p.is_empty());
    }

    #[test]
    fn every_key_is_understood() {
        let (a, p) = parse_args(&[
            "default_mode=strict",
            "allow_off=no",
            "sysfs_root=/srv/sys",
            "config=/etc/slurm/gh.toml",
            "nccl_ib_timeout=20",
            "nccl_ib_tc=106",
            "nccl_ib_sl=3",
            "nccl_set=NCCL_NET_GDR_LEVEL=PHB",
            "nccl_set=NCCL_IB_HCA==mlx5_0:1",
            "nccl_force=NCCL_IB_TIMEOUT,NCCL_IB_TC",
            "nccl_force=NCCL_IB_SL",
        ]);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(a.default_mode, Mode::Strict);
        assert!(!a.allow_off);
        assert_eq!(a.sysfs_root, Some(PathBuf::from("/srv/sys")));
        assert_eq!(a.config, Some(PathBuf::from("/etc/slurm/gh.toml")));
        assert_eq!(a.nccl.ib_timeout, 20);
        assert_eq!(a.nccl.ib_tc, Some(106));
        assert_eq!(a.nccl.ib_sl, Some(3));
        assert_eq!(
            a.nccl.set,
            vec![
                ("NCCL_NET_GDR_LEVEL".to_string(), "PHB".to_string()),
                ("NCCL_IB_HCA".to_string(), "=mlx5_0:1".to_string()),
            ]
        );
        assert_eq!(
            a.nccl_force,
            ["NCCL_IB_TIMEOUT", "NCCL_IB_TC", "NCCL_IB_SL"]
        );
    }

    #[test]
    fn bad_words_keep_defaults_and_are_reported() {
        let (a, p) = parse_args(&[
            "default_mod=strict",
            "default_mode=bogus",
            "allow_off=maybe",
            "sysfs_root=relative/path",
            "nccl_ib_timeout=99",
            "nccl_ib_sl=-1",
            "nccl_set=1BAD=x",
            "nccl_set=NCCL_X=",
            "nccl_force=OK,not ok",
            "strict",
        ]);
        assert_eq!(a, PluginArgs::default());
        assert_eq!(p.len(), 10, "{p:?}");
        assert!(p[0].message.contains("unknown key"), "{}", p[0]);
        assert!(p[1].message.contains("off, warn, strict"), "{}", p[1]);
        assert!(p[2].message.contains("yes, no"), "{}", p[2]);
        assert!(p[4].message.contains("1..=31"), "{}", p[4]);
        assert!(p[9].message.contains("key=value"), "{}", p[9]);
        assert!(p[1].to_string().contains("default_mode=bogus"));
    }

    #[test]
    fn default_off_needs_allow_off() {
        let (a, p) = parse_args(&["default_mode=off", "allow_off=no"]);
        assert_eq!(a.default_mode, Mode::Warn);
        assert_eq!(p.len(), 1);
        let (a, p) = parse_args(&["default_mode=off"]);
        assert_eq!(a.default_mode, Mode::Off);
        assert!(p.is_empty());
    }

    #[test]
    fn repeated_key_is_reported_last_wins() {
        let (a, p) = parse_args(&["nccl_ib_timeout=20", "nccl_ib_timeout=23"]);
        assert_eq!(a.nccl.ib_timeout, 23);
        assert_eq!(p.len(), 1);
        assert!(p[0].message.contains("twice"));
    }

    proptest! {
        #[test]
        fn arbitrary_words_never_panic(words in proptest::collection::vec(any::<String>(), 0..8)) {
            let (_a, p) = parse_args(&words);
            prop_assert!(p.len() <= words.len() + 1);
        }

        #[test]
        fn key_like_words_never_panic(
            words in proptest::collection::vec("(default_mode|allow_off|sysfs_root|config|nccl_ib_timeout|nccl_ib_tc|nccl_ib_sl|nccl_set|nccl_force|x)=[ -~]{0,12}", 0..8)
        ) {
            let (a, _p) = parse_args(&words);
            prop_assert!((1..=31).contains(&a.nccl.ib_timeout));
            prop_assert!(a.default_mode != Mode::Off || a.allow_off);
        }
    }
}
