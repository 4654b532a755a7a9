//! The records directory: `jobs.jsonl`, appended under an flock by every
//! epilog of the node (or of every node, when the directory is shared).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::dir::PrivateDir;
use super::files::RECORDS_FILE;
use super::StateError;

/// How long an epilog waits for another one holding the file's lock (a
/// blocking flock could hang the epilog on a stuck network file system).
const LOCK_WAIT: Duration = Duration::from_secs(3);

pub struct RecordsDir {
    dir: PrivateDir,
}

impl RecordsDir {
    /// Open (create, 0700) and check the records directory.
    pub fn open(path: &Path) -> Result<RecordsDir, StateError> {
        Ok(RecordsDir {
            dir: PrivateDir::open(path, true)?,
        })
    }

    /// Append lines to `jobs.jsonl`, all or nothing: a failed write is cut
    /// back off, so that the file only ever holds whole lines.
    pub fn append(&self, lines: &[String]) -> Result<(), StateError> {
        let path = self.dir.path().join(RECORDS_FILE);
        let io = |e| StateError::Io {
            path: path.clone(),
            source: e,
        };
        let mut file = self.dir.open_append(RECORDS_FILE, 0o600)?;
        lock_exclusive(&file, &path)?;
        let len = file.metadata().map_err(io)?.len();
        let mut buf = String::new();
        // A writer that died mid-line (power loss) left a partial line: end
        // it so that ours starts on its own line.
        if len > 0 && !self.ends_with_newline(len)? {
            buf.push('\n');
        }
        for l in lines {
            buf.push_str(l);
            buf.push('\n');
        }
        let written = file.write_all(buf.as_bytes()).and_then(|()| file.flush());
        if let Err(e) = written {
            let _ = file.set_len(len);
            return Err(io(e));
        }
        Ok(())
        // The lock goes with the file descriptor.
    }

    fn ends_with_newline(&self, len: u64) -> Result<bool, StateError> {
        let path = self.dir.path().join(RECORDS_FILE);
        let io = |e| StateError::Io {
            path: path.clone(),
            source: e,
        };
        let Some(mut f) = self.dir.open_read(RECORDS_FILE)? else {
            return Ok(true);
        };
        f.seek(SeekFrom::Start(len - 1)).map_err(io)?;
        let mut last = [0u8; 1];
        f.read_exact(&mut last).map_err(io)?;
        Ok(last[0] == b'\n')
    }
}

fn lock_exclusive(file: &std::fs::File, path: &Path) -> Result<(), StateError> {
    use rustix::fs::FlockOperation;
    let start = Instant::now();
    loop {
        match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
            Err(e) => {
                return Err(StateError::Io {
                    path: path.to_path_buf(),
                    source: e.into(),
                })
            }
        }
        if start.elapsed() >= LOCK_WAIT {
            return Err(StateError::Busy {
                path: path.to_path_buf(),
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}
