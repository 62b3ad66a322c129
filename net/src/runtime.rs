//! The async runtime of the kernel and of agents, sized to the CPUs the
//! process may use.
//!
//! A multi-thread runtime with one worker costs a process that may run on
//! one CPU more than a current-thread runtime: every task it wakes goes
//! through the shared injection queue and wakes the worker (or the thread
//! parked in the I/O driver) with a syscall, and the blocking pool and the
//! worker take turns on the same CPU. Measured through Envoy, with the
//! kernel pinned to one core: 1.45-1.57x the floor's CPU per request with a
//! multi-thread runtime, 1.01x with a current-thread one (benches/hop.sh).
//! So "use every CPU" means one current-thread runtime when that is one CPU.

use std::io;

/// CPUs this process may run on: its affinity mask and its cgroup's CPU
/// quota, as [`std::thread::available_parallelism`] reads them (1 when they
/// cannot be read).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The runtime flavour for `threads` (0: one per available CPU) on `cpus`
/// CPUs: `None` for a current-thread runtime, else the worker count.
pub fn workers(threads: usize, cpus: usize) -> Option<usize> {
    match threads {
        0 if cpus <= 1 => None,
        0 => Some(cpus),
        1 => None,
        n => Some(n),
    }
}

/// Builds a runtime with every driver enabled: `threads` workers (0: one per
/// CPU the process may use), a current-thread runtime when that is one.
/// Its workers write their log lines once per wake-up ([`crate::log_batch`]).
pub fn build(threads: usize, name: &str) -> io::Result<tokio::runtime::Runtime> {
    let mut builder = match workers(threads, available_cpus()) {
        None => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    // Each worker holds its log lines while it works and writes them with
    // one write before it waits for work (crate::log_batch).
    builder
        .enable_all()
        .thread_name(name)
        .on_thread_unpark(crate::log_batch::hold)
        .on_thread_park(crate::log_batch::flush)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cpu_or_one_thread_is_a_current_thread_runtime() {
        assert_eq!(workers(0, 1), None);
        assert_eq!(workers(1, 8), None);
        assert_eq!(workers(0, 0), None);
    }

    #[test]
    fn more_cpus_or_threads_are_workers() {
        assert_eq!(workers(0, 4), Some(4));
        assert_eq!(workers(3, 1), Some(3));
    }

    #[test]
    fn the_built_runtime_runs_futures() {
        let rt = build(0, "test").expect("runtime");
        assert_eq!(rt.block_on(async { 7 }), 7);
    }
}
