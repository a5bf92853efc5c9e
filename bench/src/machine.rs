//! The machine a run was measured on, and process accounting read from /proc (Linux only):
//! CPU time in clock ticks (USER_HZ, 100 on every Linux architecture trawl targets) and
//! peak resident memory (VmHWM).

use crate::error::{BenchResult, Context};
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// Clock ticks per second of /proc/*/stat times (USER_HZ).
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    /// UTC, `YYYY-MM-DD HH:MM`.
    pub date: String,
}

impl Machine {
    pub fn describe() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, model)| model.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            cores,
            cpu_model,
            date: utc_now(),
        }
    }
}

/// The current UTC time as `YYYY-MM-DD HH:MM` (civil-from-days, no time-zone database needed).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60
    )
}

/// Fields of /proc/PID/stat after the command name (which may contain spaces).
fn stat_fields(pid: &str) -> BenchResult<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).step("read /proc stat")?;
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // Field 3 (state) is a letter; keep positions by mapping it to 0.
    Ok(after_name
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect())
}

/// CPU seconds (user + system) of a process; `self` for this one.
pub fn cpu_seconds(pid: &str) -> BenchResult<f64> {
    let f = stat_fields(pid)?;
    // utime and stime are fields 14 and 15, i.e. indices 11 and 12 after the name.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Ok(ticks as f64 / TICKS_PER_SECOND)
}

/// CPU seconds of this process's children that have been waited for (cutime + cstime).
pub fn children_cpu_seconds() -> BenchResult<f64> {
    let f = stat_fields("self")?;
    let ticks = f.get(13).copied().unwrap_or(0) + f.get(14).copied().unwrap_or(0);
    Ok(ticks as f64 / TICKS_PER_SECOND)
}

/// Peak resident set size of a process in MiB (VmHWM), or None once it has exited.
pub fn peak_rss_mib(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        assert!(cpu_seconds("self").unwrap() >= 0.0);
        assert!(peak_rss_mib("self").unwrap() > 0.0);
        assert!(children_cpu_seconds().unwrap() >= 0.0);
    }

    #[test]
    fn date_is_formatted() {
        let d = utc_now();
        assert_eq!(d.len(), "2026-11-01 12:00 UTC".len(), "{d}");
        assert!(d.starts_with("20"), "{d}");
    }
}
