//! A small `log` backend for the prolog, epilog and admin command: stderr
//! plus, when configured, an append-only log file (never through a symlink).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::ids::NodeName;
use crate::text::printable;

struct Logger {
    program: &'static str,
    node: Mutex<String>,
    file: Mutex<Option<File>>,
    /// The gravest level that reaches stderr, as `Level as usize` (1 error
    /// .. 5 trace); 0: none.
    stderr_level: AtomicUsize,
    /// Lines for a person at a terminal on stderr (`gpu-health: warning:
    /// ...`), not the log file's stamped lines.
    terminal: bool,
}

static LOGGER: std::sync::OnceLock<Logger> = std::sync::OnceLock::new();

/// Install the logger. `stderr_level` limits what reaches stderr (the
/// admin command keeps its terminal quiet); the file gets Info and above.
pub fn init(program: &'static str, stderr_level: Level) {
    install(program, stderr_level, false);
}

/// [`init`] for the admin command: stderr gets short lines for the
/// person at the terminal (`gpu-health: error: the state directory ...`),
/// the log file the usual stamped ones.
pub fn init_terminal(program: &'static str, stderr_level: Level) {
    install(program, stderr_level, true);
}

fn install(program: &'static str, stderr_level: Level, terminal: bool) {
    let logger = LOGGER.get_or_init(|| Logger {
        program,
        node: Mutex::new(String::new()),
        file: Mutex::new(None),
        stderr_level: AtomicUsize::new(stderr_level as usize),
        terminal,
    });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}

/// Change what reaches stderr: `None` for nothing (the log file still
/// gets every line). The admin command quiets it while a command prints
/// the same facts itself, so that a person reads each once.
pub fn set_stderr_level(level: Option<Level>) {
    if let Some(logger) = LOGGER.get() {
        logger
            .stderr_level
            .store(level.map_or(0, |l| l as usize), Ordering::Relaxed);
    }
}

/// The level as a word of a sentence.
fn level_word(level: Level) -> &'static str {
    match level {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "info",
        Level::Debug => "debug",
        Level::Trace => "trace",
    }
}

/// The message without a `gpu-health: ` its writer put first: the line
/// names the program already.
fn without_prefix(message: &str) -> &str {
    message.strip_prefix("gpu-health: ").unwrap_or(message)
}

/// Name the node in every line and, if given, also append to `path` (the
/// configuration has replaced `%n` already).
pub fn set_target(node: &NodeName, path: Option<&Path>) {
    let Some(logger) = LOGGER.get() else { return };
    if let Ok(mut n) = logger.node.lock() {
        *n = node.to_string();
    }
    let Some(path) = path else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => {
            if let Ok(mut slot) = logger.file.lock() {
                *slot = Some(f);
            }
        }
        Err(e) => log::warn!("cannot open log file {}: {e}", path.display()),
    }
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= Level::Info
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let node = self.node.lock().map(|n| n.clone()).unwrap_or_default();
        // Messages quote the kernel log, the environment and Slurm:
        // nothing in them may forge a line or reach the terminal raw.
        let message = r.args().to_string();
        let message = printable(without_prefix(&message));
        let line = format!(
            "{} {} {}[{}]: {}: {message}\n",
            crate::time::utc_now(),
            if node.is_empty() { "-" } else { &node },
            self.program,
            std::process::id(),
            r.level(),
        );
        if (r.level() as usize) <= self.stderr_level.load(Ordering::Relaxed) {
            let shown = if self.terminal {
                format!("{}: {}: {message}\n", self.program, level_word(r.level()))
            } else {
                line.clone()
            };
            let _ = std::io::stderr().write_all(shown.as_bytes());
        }
        if let Ok(mut f) = self.file.lock() {
            if let Some(f) = f.as_mut() {
                let _ = f.write_all(line.as_bytes());
            }
        }
    }

    fn flush(&self) {}
}
