//! Log output that never blocks the threads that log.
//!
//! The kernel and its agents log from the threads that serve requests. A
//! plain write to a pipe whose reader has stopped (a stuck log shipper, a
//! paused container runtime) blocks once the pipe is full, 64 KiB or a few
//! hundred lines later, and with it every request on that thread; the other
//! threads then wait for the same output, and the process stops answering.
//! Here a line is written only when the descriptor can take it without
//! waiting (`poll` with no timeout, then writes of at most `PIPE_BUF` bytes,
//! which a pipe with room takes whole). Otherwise it joins a backlog of at
//! most 1 MiB, which a background thread writes out as soon as the reader
//! catches up. A line that does not fit is dropped whole and counted, and
//! once the backlog is out a warning line (in the owner's log format) says
//! how many were dropped. Lines are never cut or reordered. A regular file
//! does not block this way and is written directly, with no extra system
//! call.

use std::io;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Bytes held back at most while the output cannot take them.
const BACKLOG_MAX: usize = 1 << 20;

/// One output descriptor and its backlog.
pub struct Output {
    fd: libc::c_int,
    /// A regular file: written directly.
    regular: bool,
    state: Mutex<Backlog>,
    wake: Condvar,
    /// The warning line that reports `n` dropped lines.
    note: Box<dyn Fn(u64) -> String + Send + Sync>,
    /// Called for each dropped line (a metric, say).
    on_drop: fn(),
}

#[derive(Default)]
struct Backlog {
    bytes: Vec<u8>,
    /// Lines dropped and not yet reported.
    dropped: u64,
    /// The background writer has been started.
    writer: bool,
}

impl Backlog {
    fn idle(&self) -> bool {
        self.bytes.is_empty() && self.dropped == 0
    }
}

impl Output {
    /// An output writing to `fd`, which stays open for the process's life.
    /// `note(n)` is the whole line (with its newline) that reports `n`
    /// dropped lines, in the format of the other lines.
    pub fn new(fd: libc::c_int, note: impl Fn(u64) -> String + Send + Sync + 'static) -> Self {
        // SAFETY: fstat fills the zeroed struct for any descriptor number
        // and fails cleanly for an invalid one.
        let regular = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
        };
        Self {
            fd,
            regular,
            state: Mutex::new(Backlog::default()),
            wake: Condvar::new(),
            note: Box::new(note),
            on_drop: || {},
        }
    }

    /// Calls `f` for each line dropped.
    pub fn on_drop(mut self, f: fn()) -> Self {
        self.on_drop = f;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Backlog> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes one whole line (or several) without waiting for the reader.
    pub fn write_line(&'static self, line: &[u8]) {
        if self.regular {
            write_all(self.fd, line);
            return;
        }
        let mut b = self.lock();
        if !b.bytes.is_empty() {
            self.drain(&mut b);
        }
        if b.bytes.is_empty() {
            let n = write_ready(self.fd, line);
            if n == line.len() {
                return;
            }
            // The rest of a started line follows it, whatever the limit.
            b.bytes.extend_from_slice(&line[n..]);
        } else if b.bytes.len() + line.len() <= BACKLOG_MAX {
            b.bytes.extend_from_slice(line);
            return;
        } else {
            // A thread's held lines come as one write: each is counted.
            let lines = line.iter().filter(|&&c| c == b'\n').count().max(1);
            b.dropped += lines as u64;
            for _ in 0..lines {
                (self.on_drop)();
            }
            return;
        }
        // The backlog just started: hand it to the background writer.
        if !b.writer {
            b.writer = true;
            let spawned = std::thread::Builder::new()
                .name("log-writer".into())
                .spawn(move || self.background());
            if spawned.is_err() {
                b.writer = false;
            }
        }
        self.wake.notify_one();
    }

    /// Writes what the descriptor takes now; once the backlog is out,
    /// reports the lines dropped meanwhile.
    fn drain(&self, b: &mut Backlog) {
        let n = write_ready(self.fd, &b.bytes);
        b.bytes.drain(..n);
        if b.bytes.is_empty() && b.dropped > 0 {
            let note = (self.note)(b.dropped);
            b.dropped = 0;
            let n = write_ready(self.fd, note.as_bytes());
            b.bytes.extend_from_slice(&note.as_bytes()[n..]);
        }
    }

    /// The background writer: waits (outside the lock) until the descriptor
    /// can take more, then writes the backlog.
    fn background(&self) {
        loop {
            {
                let mut b = self.lock();
                while b.idle() {
                    b = self.wake.wait(b).unwrap_or_else(PoisonError::into_inner);
                }
            }
            wait_writable(self.fd, Duration::from_millis(100));
            self.drain(&mut self.lock());
        }
    }

    /// Gives the backlog up to `timeout` to get out (at exit).
    /// The calling thread's held lines ([`crate::log_batch`]) go first, and
    /// its later lines are written at once.
    pub fn flush(&self, timeout: Duration) {
        crate::log_batch::stop();
        let deadline = Instant::now() + timeout;
        loop {
            let mut b = self.lock();
            self.drain(&mut b);
            if b.idle() {
                return;
            }
            drop(b);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            wait_writable(self.fd, left.min(Duration::from_millis(100)));
        }
    }
}

/// `write(2)` until done (a regular file: no waiting for a reader).
fn write_all(fd: libc::c_int, mut data: &[u8]) {
    while !data.is_empty() {
        // SAFETY: the pointer and length describe `data`.
        let w = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if w < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        data = &data[w as usize..];
    }
}

/// Writes the longest prefix of `data` that `fd` takes without blocking and
/// returns its length. An output that is gone (reader closed, descriptor
/// invalid) takes everything: the bytes are discarded, as a write to a
/// closed pipe would be.
fn write_ready(fd: libc::c_int, data: &[u8]) -> usize {
    let mut done = 0;
    while done < data.len() {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout never blocks.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return done;
        }
        if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            return data.len();
        }
        if p.revents & libc::POLLOUT == 0 {
            return done;
        }
        // A pipe with room takes a write of up to PIPE_BUF bytes whole.
        let end = data.len().min(done + libc::PIPE_BUF);
        // SAFETY: the pointer and length describe `data[done..end]`.
        let w = unsafe { libc::write(fd, data[done..end].as_ptr().cast(), end - done) };
        if w < 0 {
            match io::Error::last_os_error().kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return done,
                _ => return data.len(),
            }
        }
        done += w as usize;
    }
    done
}

/// Waits up to `timeout` for `fd` to take more bytes.
fn wait_writable(fd: libc::c_int, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// The `MakeWriter` of a log subscriber writing to an [`Output`].
#[derive(Clone, Copy)]
pub struct Writer(pub &'static Output);

/// One event's writer (the formatter writes each line with one call). A
/// runtime worker holds its lines until it waits for work
/// ([`crate::log_batch`]).
pub struct LineWriter(&'static Output);

impl io::Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        crate::log_batch::write(self.0, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Writer {
    type Writer = LineWriter;
    fn make_writer(&'a self) -> LineWriter {
        LineWriter(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A pipe: (read end as a File, write end's descriptor).
    fn pipe() -> (std::fs::File, libc::c_int) {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fds[0] is a fresh descriptor owned by the File from here on.
        (unsafe { std::fs::File::from_raw_fd(fds[0]) }, fds[1])
    }

    static DROPPED: AtomicU64 = AtomicU64::new(0);

    /// An output whose note and count these tests can read.
    fn test_output(fd: libc::c_int) -> Output {
        Output::new(fd, |n| format!("log lines dropped: {n}\n")).on_drop(|| {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        })
    }

    fn line(i: usize) -> String {
        format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(200))
    }

    /// With nobody reading, writes return at once; when the reader comes
    /// back, every line that fit arrives whole and in order, then one note
    /// with the number dropped.
    #[test]
    fn a_stalled_reader_never_blocks_the_writer_and_loses_no_line_silently() {
        let (mut reader, fd) = pipe();
        let out: &'static Output = Box::leak(Box::new(test_output(fd)));
        assert!(!out.regular);
        let lines = 8_000; // ~1.7 MB: more than the pipe and the backlog hold
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for i in 0..lines {
                out.write_line(line(i).as_bytes());
            }
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("writing blocked on a pipe nobody reads");
        let dropped = out.lock().dropped;
        assert!(dropped > 0, "more than the backlog was written");
        // The count of every output of these tests (the others drop none).
        assert_eq!(DROPPED.load(Ordering::Relaxed), dropped);

        // Read until the note arrives.
        let mut text = String::new();
        let mut buf = vec![0; 1 << 16];
        let deadline = Instant::now() + Duration::from_secs(30);
        while !text.contains("log lines dropped") {
            assert!(Instant::now() < deadline, "no note; read {} bytes", text.len());
            let n = reader.read(&mut buf).expect("read");
            text.push_str(std::str::from_utf8(&buf[..n]).expect("utf-8"));
        }
        let got: Vec<&str> = text.lines().collect();
        let (note, written) = got.split_last().expect("lines");
        assert_eq!(*note, format!("log lines dropped: {dropped}"));
        assert_eq!(written.len() as u64 + dropped, lines as u64);
        for (i, l) in written.iter().enumerate() {
            assert_eq!(format!("{l}\n"), line(i), "line {i} cut or out of order");
        }
        // Lines after the backlog drained go straight out again.
        out.write_line(b"after\n");
        let n = reader.read(&mut buf).expect("read");
        assert_eq!(&buf[..n], b"after\n");
    }

    /// A reader that is gone: lines are discarded, never waited for.
    #[test]
    fn lines_dropped_together_are_each_counted() {
        let (mut r, w) = pipe();
        // Not `test_output`: its counter is another test's.
        let out: &'static Output = Box::leak(Box::new(Output::new(w, |n| format!("dropped: {n}\n"))));
        // Fill the pipe and the backlog, then drop three lines in one write.
        let filler = line(0);
        let three = format!("{}{}{}", line(1), line(2), line(3));
        while out.lock().bytes.len() + three.len() <= BACKLOG_MAX {
            out.write_line(filler.as_bytes());
        }
        let dropped_before = out.lock().dropped;
        out.write_line(three.as_bytes());
        assert_eq!(out.lock().dropped, dropped_before + 3);
        drop(r.read(&mut [0u8; 1]));
    }

    #[test]
    fn a_closed_reader_discards_lines() {
        let (reader, fd) = pipe();
        drop(reader);
        let out: &'static Output = Box::leak(Box::new(test_output(fd)));
        for i in 0..1_000 {
            out.write_line(line(i).as_bytes());
        }
        assert!(out.lock().idle());
    }

    #[test]
    fn regular_files_are_written_directly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let file = std::fs::File::create(&path).expect("create");
        let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        let out: &'static Output = Box::leak(Box::new(test_output(fd)));
        assert!(out.regular);
        for i in 0..3 {
            out.write_line(line(i).as_bytes());
        }
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, (0..3).map(line).collect::<String>());
    }
}
