//! CPU time, context switches and memory of a process, from `/proc`:
//! `utime + stime` of `/proc/PID/stat` (all threads, in clock ticks), the
//! context-switch counts of `/proc/PID/task/*/status`, and `VmHWM` / `VmRSS`
//! of `/proc/PID/status`.

use std::fs;

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// `utime + stime` from the text of `/proc/PID/stat`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields
    // after the last ')' start at field 3 (state).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time used so far by `pid` (`"self"` for this process), in µs.
pub fn cpu_us(pid: &str) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_cpu_ticks(&stat)? * 1_000_000 / clock_ticks_per_second())
}

/// Busy time of the whole machine (all CPUs), in clock ticks, from the text
/// of `/proc/stat`: user + nice + system + irq + softirq + steal.
pub fn parse_machine_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    Some(v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7).copied().unwrap_or(0))
}

/// Busy CPU time of the whole machine so far, in µs.
pub fn machine_busy_us() -> Option<u64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    Some(parse_machine_busy_ticks(&stat)? * 1_000_000 / clock_ticks_per_second())
}

/// A `kB` field of the text of `/proc/PID/status`, in KiB.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(field)?.strip_prefix(':')?;
        v.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// `voluntary_ctxt_switches + nonvoluntary_ctxt_switches` from the text of
/// a `/proc/.../status` file.
pub fn parse_context_switches(status: &str) -> Option<u64> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<u64>().ok())
    };
    Some(field("voluntary_ctxt_switches")? + field("nonvoluntary_ctxt_switches")?)
}

/// Context switches so far of all the live threads of `pid`: how often the
/// process went to sleep (a wake-up to come) or was preempted.
pub fn context_switches(pid: &str) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        if let Ok(status) = fs::read_to_string(task.path().join("status")) {
            total += parse_context_switches(&status).unwrap_or(0);
        }
    }
    Some(total)
}

/// `VmHWM` (peak resident set) of `pid`, in KiB.
pub fn peak_rss_kib(pid: &str) -> Option<u64> {
    parse_status_kib(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?, "VmHWM")
}

/// `VmRSS` (current resident set) of `pid`, in KiB.
pub fn rss_kib(pid: &str) -> Option<u64> {
    parse_status_kib(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?, "VmRSS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let stat = "1234 (policy kernel) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 1 1";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn parses_status_fields() {
        let status = "Name:\tpolicy-kernel\nVmPeak:\t  100 kB\nVmHWM:\t   12345 kB\nVmRSS:\t    9876 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(12345));
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(9876));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn parses_context_switches() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_context_switches(status), Some(127));
        assert_eq!(parse_context_switches("Name:\tx\n"), None);
    }

    #[test]
    fn parses_machine_busy_time() {
        let stat = "cpu  100 5 50 1000 7 3 2 1 0 0\ncpu0 50 2 25 500 3 1 1 0 0 0\n";
        assert_eq!(parse_machine_busy_ticks(stat), Some(100 + 5 + 50 + 3 + 2 + 1));
        assert_eq!(parse_machine_busy_ticks("intr 1 2 3"), None);
    }

    #[test]
    fn reads_own_process() {
        assert!(cpu_us("self").is_some());
        assert!(rss_kib("self").unwrap_or(0) > 0);
        assert!(machine_busy_us().is_some());
        assert!(context_switches("self").is_some());
    }
}
