//! URL rules compiled once: a rule's `match` regex or `glob` as one regular expression, and a
//! crawl's recrawl rules matched against a URL (which schedule it follows). Every function needs
//! this much of a crawl's rules — the sweeper's water level too — and none of it needs the HTML
//! engines that the soft-404 markers run on (`crate::revisit`, behind the `extract` feature).

use regex::Regex;
use trawl_domain::crawl::{RecrawlPolicy, RecrawlRule};
use trawl_domain::estimate::Level;
use trawl_domain::revisit::Revisit;

/// A recrawl policy's URL rules, compiled.
#[derive(Debug, Clone)]
pub struct RecrawlRules {
    policy: RecrawlPolicy,
    rules: Vec<Regex>,
    /// The crawl's water level, for the pages the estimator schedules.
    level: Option<Level>,
}

impl RecrawlRules {
    /// Compiles `policy`'s rules; the error names the rule that does not compile.
    pub fn new(policy: &RecrawlPolicy) -> Result<Self, String> {
        let rules = policy
            .rules
            .iter()
            .enumerate()
            .map(|(i, rule)| rule_pattern(rule).map_err(|e| format!("recrawl.rules[{i}]: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            policy: policy.clone(),
            rules,
            level: None,
        })
    }

    /// The rules at the crawl's water level (`Crawl::level`).
    pub fn at_level(self, level: Option<Level>) -> Self {
        Self { level, ..self }
    }

    /// What the crawl decides for `url`: the first rule that matches it, or the crawl's own.
    pub fn for_url(&self, url: &str) -> Revisit {
        let rule = self
            .rules
            .iter()
            .position(|pattern| pattern.is_match(url))
            .and_then(|i| self.policy.rules.get(i));
        self.policy.revisit(rule, self.level.as_ref())
    }
}

/// A rule's pattern as one regular expression (a glob is anchored at both ends).
fn rule_pattern(rule: &RecrawlRule) -> Result<Regex, String> {
    let pattern = url_pattern(rule.pattern.as_deref(), rule.glob.as_deref())?;
    Regex::new(&pattern)
        .map_err(|e| format!("invalid pattern {pattern:?}: {}", crate::problem::regex(&e)))
}

/// The regular expression of a URL rule that gives a `match` regex or a `glob` (exactly one):
/// what recrawl rules and request rules (`crate::fetch`) are matched with.
pub(crate) fn url_pattern(regex: Option<&str>, glob: Option<&str>) -> Result<String, String> {
    match (regex, glob) {
        (Some(regex), None) => Ok(regex.to_owned()),
        (None, Some(glob)) => Ok(glob_regex(glob)),
        _ => Err("give one of `match` (a regular expression) or `glob`".to_owned()),
    }
}

/// `*` is any run of characters, `?` any one; everything else is literal.
pub(crate) fn glob_regex(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len() + 8);
    out.push('^');
    for c in glob.chars() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            c => out.push_str(&regex::escape(&c.to_string())),
        }
    }
    out.push('$');
    out
}
