//! Section 6: freshness on a virtual clock. 10,000 pages with known change rates (1% change
//! about hourly, 10% about daily, the rest never; changes are Poisson events) are recrawled for
//! 30 simulated days under three schedules of `trawl_domain::schedule` — fixed daily, fixed
//! hourly and adaptive — each page starting at a random offset within its first interval.
//! Printed per schedule: fetches spent, and per change class the mean and p95 staleness (time
//! from a change to the fetch that detects it).

use crate::report::Figure;
use trawl_domain::schedule::Schedule;
use trawl_domain::task::Millis;

const SECTION: &str = "freshness";
const HOUR: Millis = 3_600_000;
const DAY: Millis = 24 * HOUR;

/// How often a class of pages changes (mean interval between changes; None: never).
#[derive(Clone, Copy)]
struct Class {
    name: &'static str,
    share: f64,
    mean_change_ms: Option<Millis>,
}

const CLASSES: [Class; 3] = [
    Class {
        name: "hourly changers",
        share: 0.01,
        mean_change_ms: Some(HOUR),
    },
    Class {
        name: "daily changers",
        share: 0.10,
        mean_change_ms: Some(DAY),
    },
    Class {
        name: "never changed",
        share: 0.89,
        mean_change_ms: None,
    },
];

/// What one schedule achieved.
struct Result {
    fetches: u64,
    /// Per class: staleness of every detected change, in ms.
    staleness: Vec<Vec<Millis>>,
}

/// Change times of one page over `horizon` (a Poisson process).
fn changes(rng: &mut fastrand::Rng, mean: Option<Millis>, horizon: Millis) -> Vec<Millis> {
    let Some(mean) = mean else {
        return Vec::new();
    };
    let mut t = 0;
    let mut out = Vec::new();
    loop {
        // Exponential gap: -ln(U) × mean.
        let u = rng.f64().max(f64::MIN_POSITIVE);
        t += (-u.ln() * mean as f64) as Millis + 1;
        if t >= horizon {
            return out;
        }
        out.push(t);
    }
}

/// Recrawls every page under `schedule` until `horizon`.
fn simulate(schedule: &Schedule, pages: usize, horizon: Millis, seed: u64) -> Result {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut result = Result {
        fetches: 0,
        staleness: vec![Vec::new(); CLASSES.len()],
    };
    let mut first = 0usize;
    for (c, class) in CLASSES.iter().enumerate() {
        let count = (pages as f64 * class.share).round() as usize;
        for _ in first..first + count {
            let events = changes(&mut rng, class.mean_change_ms, horizon);
            let mut pace = schedule.start();
            // The first fetch stores the page; later ones look for changes since the last.
            let mut at = rng.i64(0..schedule.interval_ms(&pace) as Millis);
            let mut seen = 0usize;
            result.fetches += 1;
            while seen < events.len() && events[seen] <= at {
                seen += 1;
            }
            loop {
                let due = at + schedule.interval_ms(&pace) as Millis;
                if due >= horizon {
                    break;
                }
                at = due;
                result.fetches += 1;
                let before = seen;
                while seen < events.len() && events[seen] <= at {
                    result.staleness[c].push(at - events[seen]);
                    seen += 1;
                }
                pace = schedule.after_fetch(&pace, seen > before);
            }
        }
        first += count;
    }
    result
}

fn mean_and_p95(values: &mut [Millis]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_unstable();
    let mean = values.iter().sum::<Millis>() as f64 / values.len() as f64;
    let p95 = values[((values.len() as f64 * 0.95) as usize).min(values.len() - 1)];
    (mean, p95 as f64)
}

/// The adaptive schedule of the comparison: the document's mechanism set for a collection that
/// mostly does not change: MIN_TIME 1 h, MAX_TIME 7 days, a start at one day (factor 24), slowing
/// down after 2 unchanged fetches, by 1.5.
pub const ADAPTIVE: Schedule = Schedule {
    min_ms: HOUR as u64,
    max_ms: 7 * DAY as u64,
    initial_factor: 24.0,
    zero_actions: 2,
    factor_change: 1.5,
};

pub fn run(quick: bool) -> Vec<Figure> {
    let pages = if quick { 2_000 } else { 10_000 };
    let horizon = 30 * DAY;
    let schedules = [
        ("fixed daily", Schedule::fixed(DAY as u64)),
        ("fixed hourly", Schedule::fixed(HOUR as u64)),
        ("adaptive", ADAPTIVE),
        ("adaptive, the document's defaults", Schedule::RECRAWL),
    ];
    let mut figures = Vec::new();
    for (name, schedule) in schedules {
        let mut result = simulate(&schedule, pages, horizon, 11);
        figures.push(Figure::single(
            SECTION,
            format!("{name}: fetches in 30 days ({pages} pages)"),
            "fetches",
            result.fetches as f64,
        ));
        for (c, class) in CLASSES.iter().enumerate() {
            if class.mean_change_ms.is_none() {
                continue;
            }
            let (mean, p95) = mean_and_p95(&mut result.staleness[c]);
            figures.push(Figure::single(
                SECTION,
                format!("{name}: {} staleness mean", class.name),
                "h",
                mean / HOUR as f64,
            ));
            figures.push(Figure::single(
                SECTION,
                format!("{name}: {} staleness p95", class.name),
                "h",
                p95 / HOUR as f64,
            ));
        }
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_spends_less_than_daily_and_finds_changes_sooner() {
        let mut daily = simulate(&Schedule::fixed(DAY as u64), 2_000, 30 * DAY, 3);
        let mut adaptive = simulate(&ADAPTIVE, 2_000, 30 * DAY, 3);
        assert!(adaptive.fetches < daily.fetches);
        for class in 0..2 {
            let (daily_mean, _) = mean_and_p95(&mut daily.staleness[class]);
            let (adaptive_mean, _) = mean_and_p95(&mut adaptive.staleness[class]);
            assert!(adaptive_mean < daily_mean, "class {class}");
        }
        // A page that never changes is never counted stale.
        assert!(adaptive.staleness[2].is_empty());
    }
}
