//! The start of a binary whose `main` is its own C entry (`#![no_main]`).
//!
//! The Prolog runs before every job and as the health check, so its start
//! is paid thousands of times a day per node. std's runtime start reads
//! `/proc/self/maps` (to find the main thread's stack for its overflow
//! message), sets up a signal stack and names the main thread: about a
//! tenth of the healthy Prolog's own instructions and some sixteen page
//! faults (docs/benchmarks.md). A binary that skips it must still do the two
//! things of that start that protect it, which [`prepare`] does. The
//! arguments and everything else of std keep working (glibc hands them to
//! std before `main`); a stack overflow is then a plain SIGSEGV.

/// What a bare `main` does first:
///
/// - file descriptors 0, 1 and 2 are made valid (/dev/null where one is
///   closed): a file the run opens must never become its stderr, or a log
///   line would be written into a state file;
/// - SIGPIPE is ignored, so that a closed stdout or stderr is an error
///   where it is written, never the death of the run (a Prolog killed by a
///   signal makes Slurm drain the node).
pub fn prepare() {
    open_closed_standard_fds();
    // SAFETY: setting a signal's disposition to SIG_IGN has no handler to
    // run; the process is single-threaded here.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

fn open_closed_standard_fds() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
        if closed {
            // open() takes the lowest free descriptor: `fd`, as the lower
            // ones are open by now. Without /dev/null (a bare chroot), the
            // root directory holds the place: reads and writes on it fail,
            // so a log line is lost rather than written into a file the
            // run opens later.
            // SAFETY: constant paths and flags.
            unsafe {
                if libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) < 0 {
                    libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// In a forked child (the test harness's other threads keep their
    /// descriptors): stdout and stderr closed, then reopened on /dev/null.
    #[test]
    fn closed_standard_fds_are_reopened_on_dev_null() {
        // SAFETY: the child makes only system calls and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                libc::close(1);
                libc::close(2);
                super::open_closed_standard_fds();
                let mut ok = true;
                for fd in [c"/proc/self/fd/1", c"/proc/self/fd/2"] {
                    let mut buf = [0u8; 64];
                    let n = libc::readlink(fd.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
                    ok &= n > 0 && &buf[..n as usize] == b"/dev/null";
                }
                if ok {
                    0
                } else {
                    1
                }
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = -1;
        // SAFETY: pid is this test's child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "a descriptor was not /dev/null"
        );
    }
}
