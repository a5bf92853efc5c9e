//! A refused configuration says what is wrong on one line, naming the field and the problem.
//!
//! The libraries that parse a crawl's patterns speak otherwise: the regex crate draws the
//! pattern with a caret under the fault over several lines, and scraper answers most bad CSS
//! selectors with a debug dump and a plea to report a bug; sxd-xpath names its errors as
//! identifiers (`EmptyPredicate`). Their messages are condensed here, for every place that
//! checks a pattern, a selector or an XPath.

#[cfg(feature = "extract")]
use scraper::error::SelectorErrorKind;

/// What is wrong with a regular expression, on one line (`unclosed group`).
pub fn regex(e: &regex::Error) -> String {
    match e {
        regex::Error::Syntax(diagram) => diagram
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .map_or_else(|| one_line(diagram), str::to_owned),
        other => one_line(&other.to_string()),
    }
}

/// What is wrong with a CSS selector, on one line (`dangling combinator`).
#[cfg(feature = "extract")]
pub fn selector(e: &SelectorErrorKind) -> String {
    match e {
        // A `Debug` name such as `DanglingCombinator(…)`, in words.
        SelectorErrorKind::UnexpectedSelectorParseError(kind) => {
            let name = format!("{kind:?}");
            words(name.split('(').next().unwrap_or_default())
        }
        other => one_line(&other.to_string()),
    }
}

/// What is wrong with an XPath expression, on one line (`empty predicate`).
pub fn xpath(e: &impl std::fmt::Display) -> String {
    let message = e.to_string();
    if message.chars().all(|c| c.is_ascii_alphanumeric()) {
        words(&message)
    } else {
        one_line(&message)
    }
}

/// An identifier in words: `DanglingCombinator` is `dangling combinator`.
fn words(identifier: &str) -> String {
    let mut words = String::new();
    for c in identifier.chars() {
        if c.is_uppercase() && !words.is_empty() {
            words.push(' ');
        }
        words.extend(c.to_lowercase());
    }
    words
}

/// The lines of `text`, trimmed, joined with `; `.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // The patterns are invalid on purpose: their errors are what is condensed.
    #[allow(clippy::invalid_regex)]
    fn a_bad_pattern_or_xpath_is_named_on_one_line() {
        // (through a closure: clippy refuses invalid literal patterns)
        let invalid = |pattern: &str| regex::Regex::new(pattern).unwrap_err();
        let unclosed = invalid("(abc");
        assert!(
            unclosed.to_string().contains('\n'),
            "the crate's own message"
        );
        assert_eq!(regex(&unclosed), "unclosed group");
        assert_eq!(regex(&invalid("a\n(b")), "unclosed group");
        assert_eq!(xpath(&"EmptyPredicate"), "empty predicate");
        assert_eq!(xpath(&"a\n  b"), "a; b");
    }

    #[cfg(feature = "extract")]
    #[test]
    fn a_bad_selector_is_named_on_one_line() {
        let selector_of = |css| selector(&scraper::Selector::parse(css).unwrap_err());
        assert_eq!(selector_of("a >"), "dangling combinator");
        assert_eq!(selector_of(""), "empty selector");
        assert_eq!(
            selector_of("a[["),
            "no qualified name in attribute selector"
        );
        assert_eq!(selector_of(":nope"), "unsupported pseudo class or element");
        for css in ["a[[", "", "a >", ":nope", "a,,b", "div::", "p:nth-child(x)"] {
            let problem = selector_of(css);
            assert!(
                !problem.contains('\n') && !problem.is_empty(),
                "{css}: {problem}"
            );
            assert!(!problem.contains("report"), "{css}: {problem}");
        }
    }
}
