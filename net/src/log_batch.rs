//! A runtime thread's log lines, held while it works and written with one
//! `write` before it waits for work.
//!
//! The kernel logs one line per request (§10.2). Written one by one, each
//! line is a `write(2)` (and a `poll` for a pipe), which on a hop costs the
//! kernel as much CPU as everything else it does for the line. A runtime
//! thread serves every request that is ready each time it wakes up, so its
//! lines can go out together: [`crate::runtime::build`] makes each worker
//! [`hold`] its lines from the moment it wakes and [`flush`] them just
//! before it waits for work again (tokio's park hooks).
//!
//! What that means for a line:
//! - it is written before its thread next waits for work, or sooner, once
//!   its thread holds [`HELD_MAX`] bytes; a thread that stays busy without
//!   waiting (a runtime that never runs out of ready work) writes every
//!   `HELD_MAX` bytes;
//! - a thread's lines stay in order, whole, and one write never mixes them
//!   with another writer's (a pipe takes a write of up to `PIPE_BUF` bytes
//!   whole); lines of different threads are ordered by when they are
//!   written, as before, up to one wake-up apart;
//! - none is lost when the thread ends: it writes what it holds as it exits,
//!   and [`Output::flush`](crate::log_output::Output::flush), the exit path,
//!   writes the calling thread's lines and stops holding there;
//! - a line that cannot go out at once joins the output's backlog as any
//!   line does ([`crate::log_output`]).
//!
//! Threads that never called [`hold`] (the main thread of a multi-thread
//! runtime, the blocking pool, other threads) write each line at once.

use std::cell::RefCell;

use crate::log_output::Output;

/// Bytes a thread holds at most: the most a pipe takes whole in one write.
pub const HELD_MAX: usize = libc::PIPE_BUF;

/// The lines one thread holds.
struct Held {
    /// The thread holds its lines ([`hold`]).
    on: bool,
    /// Where the held bytes go.
    out: Option<&'static Output>,
    bytes: Vec<u8>,
}

impl Held {
    fn write_out(&mut self) {
        if let Some(out) = self.out {
            if !self.bytes.is_empty() {
                out.write_line(&self.bytes);
                self.bytes.clear();
            }
        }
    }
}

impl Drop for Held {
    /// A thread that ends writes what it holds.
    fn drop(&mut self) {
        self.write_out();
    }
}

thread_local! {
    static HELD: RefCell<Held> = const {
        RefCell::new(Held { on: false, out: None, bytes: Vec::new() })
    };
}

/// Runs `f` on this thread's held lines; `None` while they are in use or
/// gone (the thread is ending).
fn with_held<R>(f: impl FnOnce(&mut Held) -> R) -> Option<R> {
    HELD.try_with(|h| h.try_borrow_mut().ok().map(|mut h| f(&mut h)))
        .ok()
        .flatten()
}

/// From now on, this thread's lines are held until [`flush`] (or until it
/// holds [`HELD_MAX`] bytes). The runtime calls it each time a worker
/// wakes up.
pub fn hold() {
    with_held(|h| h.on = true);
}

/// Writes the lines this thread holds. The runtime calls it before a worker
/// waits for work.
pub fn flush() {
    with_held(Held::write_out);
}

/// Writes the lines this thread holds, and its later lines at once.
pub(crate) fn stop() {
    with_held(|h| {
        h.write_out();
        h.on = false;
    });
}

/// Holds `line` (one or more whole lines) for `out` when this thread holds
/// its lines, else writes it at once.
pub(crate) fn write(out: &'static Output, line: &[u8]) {
    let held = with_held(|h| {
        if !h.on {
            return false;
        }
        let other = h.out.is_some_and(|o| !std::ptr::eq(o, out));
        if other || h.bytes.len() + line.len() > HELD_MAX {
            h.write_out();
        }
        if line.len() > HELD_MAX {
            return false;
        }
        h.out = Some(out);
        h.bytes.extend_from_slice(line);
        true
    });
    if held != Some(true) {
        out.write_line(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    /// An output on a pipe whose read end never blocks: (output, reader).
    fn piped() -> (&'static Output, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) }, 0);
        let out: &'static Output = Box::leak(Box::new(Output::new(fds[1], |n| format!("dropped {n}\n"))));
        // SAFETY: fds[0] is a fresh descriptor owned by the File from here on.
        (out, unsafe { std::fs::File::from_raw_fd(fds[0]) })
    }

    /// Every read the pipe has ready now, one string per read(2).
    fn reads(r: &mut std::fs::File) -> Vec<String> {
        let mut got = Vec::new();
        let mut buf = vec![0; 1 << 16];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.push(String::from_utf8(buf[..n].to_vec()).expect("utf-8"));
        }
        got
    }

    fn line(i: usize, len: usize) -> String {
        let pad = len - format!("{i}  \n").len();
        format!("{i} {} \n", "x".repeat(pad))
    }

    #[test]
    fn a_holding_thread_writes_its_lines_together_on_flush_and_in_order() {
        let (out, mut r) = piped();
        std::thread::spawn(move || {
            write(out, b"before\n");
            hold();
            for i in 0..5 {
                write(out, line(i, 100).as_bytes());
            }
            assert_eq!(reads(&mut r), ["before\n"], "lines held until the flush");
            flush();
            let all: String = (0..5).map(|i| line(i, 100)).collect();
            assert_eq!(reads(&mut r), [all], "one write, in order");
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_full_hold_is_written_in_whole_lines_and_a_long_line_keeps_its_place() {
        let (out, mut r) = piped();
        std::thread::spawn(move || {
            hold();
            // 50 lines of 100 bytes: 4,000 fit, the 41st is held anew.
            for i in 0..50 {
                write(out, line(i, 100).as_bytes());
            }
            let first: String = (0..40).map(|i| line(i, 100)).collect();
            assert_eq!(reads(&mut r), [first]);
            // Longer than a hold: the held lines go first, then it, at once.
            let long = line(50, HELD_MAX + 10);
            write(out, long.as_bytes());
            let got = reads(&mut r).concat();
            let rest: String = (40..50).map(|i| line(i, 100)).collect();
            assert_eq!(got, rest + &long);
            write(out, b"after\n");
            flush();
            assert_eq!(reads(&mut r), ["after\n"]);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_thread_that_ends_or_stops_writes_what_it_holds() {
        let (out, mut r) = piped();
        std::thread::spawn(move || {
            hold();
            write(out, b"last words\n");
        })
        .join()
        .expect("thread");
        assert_eq!(reads(&mut r), ["last words\n"]);

        std::thread::spawn(move || {
            hold();
            write(out, b"held\n");
            out.flush(std::time::Duration::from_secs(1));
            assert_eq!(reads(&mut r), ["held\n"]);
            write(out, b"at once\n");
            assert_eq!(reads(&mut r), ["at once\n"], "no longer held after the exit flush");
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_runtime_worker_holds_its_lines_while_awake_and_writes_them_before_it_waits() {
        let (out, mut r) = piped();
        let rt = crate::runtime::build(1, "test").expect("runtime");
        rt.block_on(async move {
            // The first poll comes before any wake-up: written at once.
            write(out, b"start\n");
            assert_eq!(reads(&mut r), ["start\n"]);
            // Woken after a wait: held from here.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            write(out, b"one\n");
            write(out, b"two\n");
            assert!(reads(&mut r).is_empty(), "held while the worker is awake");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            assert_eq!(reads(&mut r), ["one\ntwo\n"], "written before it waited");
        });
    }
}
