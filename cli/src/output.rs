//! Everything the CLI prints goes through here: plain aligned tables for terminals, JSON for
//! scripts, notes on stderr. `println!` panics when the reader of stdout has gone away
//! (`trawl tasks list | head`); here a stdout that cannot be written drops the lines that
//! follow, and the command ends as it would have — its exit code still says how it went.

use std::fmt::Display;
use std::io::Write;
use std::sync::OnceLock;

/// Why stdout could not be written, once it could not: later lines are dropped.
static STDOUT_LOST: OnceLock<std::io::Error> = OnceLock::new();

/// Writes one line to stdout.
pub fn line(text: impl Display) {
    if STDOUT_LOST.get().is_some() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        let _ = STDOUT_LOST.set(e);
    }
}

/// Why results were lost, if they were. A reader that went away (`| head`) took what it wanted:
/// that is not a failure.
pub fn write_failure() -> Option<&'static std::io::Error> {
    STDOUT_LOST
        .get()
        .filter(|e| e.kind() != std::io::ErrorKind::BrokenPipe)
}

/// Writes one line to stderr (progress, warnings, errors). A failure to write it is ignored:
/// there is nowhere left to report it, and the command's work and results do not depend on it.
pub fn note(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Prints rows under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        line(padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_uppercase()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Prints a JSON object's non-null fields as a two-column table.
pub fn fields(value: serde_json::Value) {
    if let serde_json::Value::Object(fields) = value {
        let rows: Vec<Vec<String>> = fields
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| vec![k, v.as_str().map_or_else(|| v.to_string(), str::to_owned)])
            .collect();
        table(&["field", "value"], &rows);
    }
}

/// Prints a JSON value on one line.
pub fn json(value: &serde_json::Value) {
    line(value);
}

/// Milliseconds since the epoch as RFC 3339 (UTC, seconds).
pub fn time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}
