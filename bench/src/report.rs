//! Figures, their summary over runs (median, min, max), and the two outputs: a table, or one
//! JSON record.

use crate::machine::Machine;
use serde::Serialize;

/// One measured quantity over one or more runs.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub section: &'static str,
    pub name: String,
    pub unit: &'static str,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
    /// The target it is held to, e.g. "<= 64".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Whether the median meets the target (None when there is no target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meets_target: Option<bool>,
}

impl Figure {
    /// Summarises `samples` (at least one; an empty set gives NaN).
    pub fn of(
        section: &'static str,
        name: impl Into<String>,
        unit: &'static str,
        samples: &[f64],
    ) -> Self {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|s| s.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let median = match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Figure {
            section,
            name: name.into(),
            unit,
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            runs: sorted.len(),
            target: None,
            meets_target: None,
        }
    }

    /// A single value (a count, or something computed from other figures).
    pub fn single(
        section: &'static str,
        name: impl Into<String>,
        unit: &'static str,
        value: f64,
    ) -> Self {
        Self::of(section, name, unit, &[value])
    }

    /// Holds the median to `<= bound`.
    pub fn at_most(mut self, bound: f64) -> Self {
        self.target = Some(format!("<= {}", bound_text(bound)));
        self.meets_target = Some(self.median <= bound);
        self
    }

    /// Holds the median to `>= bound`.
    pub fn at_least(mut self, bound: f64) -> Self {
        self.target = Some(format!(">= {}", bound_text(bound)));
        self.meets_target = Some(self.median >= bound);
        self
    }
}

fn bound_text(bound: f64) -> String {
    if bound.fract() == 0.0 {
        format!("{bound:.0}")
    } else {
        trim(bound)
    }
}

/// Everything one run of the harness produced.
#[derive(Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub command: String,
    pub quick: bool,
    pub runs: usize,
    pub figures: Vec<Figure>,
    /// Sections that were not measured, and why.
    pub skipped: Vec<String>,
    /// Extra detail per section (calls by operation, prices used …).
    pub details: serde_json::Map<String, serde_json::Value>,
}

fn trim(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_owned();
    }
    let a = v.abs();
    if (v - v.round()).abs() < 1e-9 || a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

impl Report {
    pub fn table(&self) -> String {
        let mut out = format!(
            "trawl benchmark — {} — {} cores, {}\ncommand: {}{}\n",
            self.machine.date,
            self.machine.cores,
            self.machine.cpu_model,
            self.command,
            if self.quick { " (quick)" } else { "" }
        );
        let rows: Vec<[String; 5]> = self
            .figures
            .iter()
            .map(|f| {
                let range = if f.runs > 1 {
                    format!("{}–{} (n={})", trim(f.min), trim(f.max), f.runs)
                } else {
                    String::new()
                };
                let target = match (&f.target, f.meets_target) {
                    (Some(t), Some(true)) => format!("{t} ok"),
                    (Some(t), _) => format!("{t} MISSED"),
                    (None, _) => String::new(),
                };
                [
                    format!("{}: {}", f.section, f.name),
                    trim(f.median),
                    f.unit.to_owned(),
                    range,
                    target,
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..5)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut section = "";
        for (row, figure) in rows.iter().zip(&self.figures) {
            if figure.section != section {
                section = figure.section;
                out.push('\n');
            }
            let pad = |s: &str, w: usize| {
                format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())))
            };
            out.push_str(&format!(
                "{}  {:>w1$}  {}  {}  {}\n",
                pad(&row[0], widths[0]),
                row[1],
                pad(&row[2], widths[2]),
                pad(&row[3], widths[3]),
                row[4],
                w1 = widths[1]
            ));
        }
        for s in &self.skipped {
            out.push_str(&format!("\nnot measured: {s}"));
        }
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let f = Figure::of("s", "x", "u", &[3.0, 1.0, 2.0, 10.0]);
        assert_eq!((f.median, f.min, f.max, f.runs), (2.5, 1.0, 10.0, 4));
        let g = Figure::of("s", "x", "u", &[5.0, 1.0, 3.0]).at_most(2.0);
        assert_eq!((g.median, g.meets_target), (3.0, Some(false)));
    }
}
