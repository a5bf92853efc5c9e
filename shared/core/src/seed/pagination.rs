//! Pagination templates (as Django Dynamic Scraper offers them): a URL with `{page}` and either
//! a numeric range or a free list of replacements.

use serde::{Deserialize, Serialize};

/// The placeholder a template must contain (in its path or query: never in the host).
pub const PLACEHOLDER: &str = "{page}";
/// Most pages one template may expand to.
pub const MAX_PAGES_PER_TEMPLATE: u64 = 1_000_000;

/// A URL template and the values its `{page}` takes: either `start`/`stop`/`step` (Python's
/// `range`: `stop` excluded, `step` default 1, may be negative) or `values`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageTemplate {
    pub template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

impl PageTemplate {
    /// Checks the template; returns how many pages it expands to.
    pub(crate) fn validate(&self) -> Result<u64, String> {
        let name = &self.template;
        let Some(at) = name.find(PLACEHOLDER) else {
            return Err(format!("template {name:?} has no {PLACEHOLDER}"));
        };
        // The placeholder must come after the authority: a host never varies per page.
        let authority_end = name
            .find("://")
            .map(|s| {
                let rest = &name[s + 3..];
                s + 3 + rest.find(['/', '?', '#']).unwrap_or(rest.len())
            })
            .ok_or_else(|| format!("template {name:?} is not an absolute URL"))?;
        if at < authority_end {
            return Err(format!("template {name:?} has {PLACEHOLDER} in its host"));
        }
        let count = match (&self.values, self.start, self.stop) {
            (Some(values), None, None) if self.step.is_none() => values.len() as u64,
            (None, Some(start), Some(stop)) => {
                let step = self.step.unwrap_or(1);
                if step == 0 {
                    return Err(format!("template {name:?}: step must not be 0"));
                }
                range_len(start, stop, step)
            }
            _ => {
                return Err(format!(
                    "template {name:?}: give either start and stop (and optionally step) or values"
                ));
            }
        };
        if count == 0 {
            return Err(format!("template {name:?} expands to no page"));
        }
        if count > MAX_PAGES_PER_TEMPLATE {
            return Err(format!(
                "template {name:?} expands to {count} pages (at most {MAX_PAGES_PER_TEMPLATE})"
            ));
        }
        Ok(count)
    }

    /// The URL of the `index`-th page (None past the end).
    pub(crate) fn page(&self, index: u64) -> Option<String> {
        let value = match &self.values {
            Some(values) => values.get(usize::try_from(index).ok()?)?.clone(),
            None => {
                let (start, stop) = (self.start?, self.stop?);
                let step = self.step.unwrap_or(1);
                if index >= range_len(start, stop, step) {
                    return None;
                }
                let v = i128::from(start) + i128::from(index) * i128::from(step);
                v.to_string()
            }
        };
        Some(self.template.replace(PLACEHOLDER, &value))
    }
}

/// Length of Python's `range(start, stop, step)` (step ≠ 0).
fn range_len(start: i64, stop: i64, step: i64) -> u64 {
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    let len = if step > 0 {
        (stop - start + step - 1) / step
    } else {
        (start - stop - step - 1) / -step
    };
    u64::try_from(len.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(t: &str, start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> PageTemplate {
        PageTemplate {
            template: t.into(),
            start,
            stop,
            step,
            values: None,
        }
    }

    #[test]
    fn ranges_follow_python_semantics() {
        let t = template("http://x/p/{page}", Some(1), Some(6), Some(2));
        assert_eq!(t.validate(), Ok(3));
        let pages: Vec<_> = (0..4).map(|i| t.page(i)).collect();
        assert_eq!(
            pages,
            [
                Some("http://x/p/1".into()),
                Some("http://x/p/3".into()),
                Some("http://x/p/5".into()),
                None
            ]
        );
        let down = template("http://x/?p={page}", Some(3), Some(0), Some(-1));
        assert_eq!(down.validate(), Ok(3));
        assert_eq!(down.page(2).as_deref(), Some("http://x/?p=1"));
        assert_eq!(range_len(0, 10, 1), 10);
        assert_eq!(range_len(5, 5, 1), 0);
        assert_eq!(range_len(0, 10, -1), 0);
    }

    #[test]
    fn values_and_invalid_templates() {
        let t = PageTemplate {
            template: "https://x/cat/{page}/".into(),
            start: None,
            stop: None,
            step: None,
            values: Some(vec!["a".into(), "b".into()]),
        };
        assert_eq!(t.validate(), Ok(2));
        assert_eq!(t.page(1).as_deref(), Some("https://x/cat/b/"));
        for bad in [
            template("http://x/p", Some(1), Some(2), None),
            template("http://{page}.x/", Some(1), Some(2), None),
            template("/relative/{page}", Some(1), Some(2), None),
            template("http://x/{page}", Some(1), Some(5), Some(0)),
            template("http://x/{page}", Some(1), None, None),
            template("http://x/{page}", Some(5), Some(1), None),
            template("http://x/{page}", Some(0), Some(2_000_000), None),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
