//! A crawl's chain and retry rules (`trawl_domain::chain`) compiled, and the values a fetched
//! page gives a chain rule: its JSON body's fields, or its items' fields.

use crate::url_rules::url_pattern;
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use trawl_domain::chain::{ChainField, ChainRule, ChainStop, RetryWith, has_value, json_values};
use trawl_domain::crawl::CrawlConfig;

/// The chain and retry rules of a crawl, their patterns compiled.
#[derive(Debug, Clone, Default)]
pub struct ChainRules {
    chains: Vec<(Regex, ChainRule)>,
    retries: Vec<(Regex, RetryWith)>,
}

impl ChainRules {
    /// Compiles `config`'s rules; the error names the first rule that is not valid.
    pub fn new(config: &CrawlConfig) -> Result<Self, String> {
        if let Some(problem) = problems(config).into_iter().next() {
            return Err(problem);
        }
        let compile = |at: String, pattern: Option<&str>, glob: Option<&str>| {
            pattern_of(pattern, glob).map_err(|e| format!("{at}: {e}"))
        };
        let chains = config
            .chains
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let at = format!("chains[{i}]");
                Ok((
                    compile(at, r.pattern.as_deref(), r.glob.as_deref())?,
                    r.clone(),
                ))
            })
            .collect::<Result<_, String>>()?;
        let retries = config
            .retry_with
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let at = format!("retry_with[{i}]");
                Ok((
                    compile(at, r.pattern.as_deref(), r.glob.as_deref())?,
                    r.clone(),
                ))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self { chains, retries })
    }

    /// The chain rules of the page at `url`: every one whose pattern matches, in order.
    pub fn chains_for<'a>(&'a self, url: &'a str) -> impl Iterator<Item = &'a ChainRule> + 'a {
        self.chains
            .iter()
            .filter(move |(p, _)| p.is_match(url))
            .map(|(_, r)| r)
    }

    /// The retry rule of the task at `url`: the first whose pattern matches.
    pub fn retry_for(&self, url: &str) -> Option<&RetryWith> {
        self.retries
            .iter()
            .find(|(p, _)| p.is_match(url))
            .map(|(_, r)| r)
    }
}

/// A rule's pattern: its `match` or `glob`, or every URL when it gives neither.
fn pattern_of(pattern: Option<&str>, glob: Option<&str>) -> Result<Regex, String> {
    let pattern = match (pattern, glob) {
        (None, None) => String::new(),
        (pattern, glob) => url_pattern(pattern, glob)?,
    };
    Regex::new(&pattern)
        .map_err(|e| format!("invalid pattern {pattern:?}: {}", crate::problem::regex(&e)))
}

/// Every problem of `config`'s chain and retry rules (what the seeder refuses a crawl for).
pub fn problems(config: &CrawlConfig) -> Vec<String> {
    let mut problems = Vec::new();
    let stores_json = config
        .fetch
        .store_content_types
        .iter()
        .any(|t| t.to_ascii_lowercase().contains("json"));
    for (i, rule) in config.chains.iter().enumerate() {
        let at = format!("chains[{i}]");
        if let Err(e) = rule.validate(&at, &config.extract) {
            problems.push(e.to_string());
        } else if let Err(e) = pattern_of(rule.pattern.as_deref(), rule.glob.as_deref()) {
            problems.push(format!("{at}: {e}"));
        } else if rule.reads_json() && !stores_json {
            problems.push(format!(
                "{at} reads JSON fields: add \"application/json\" to fetch.store_content_types \
                 so that JSON answers are read"
            ));
        }
    }
    for (i, rule) in config.retry_with.iter().enumerate() {
        let at = format!("retry_with[{i}]");
        if let Err(e) = rule.validate(&at) {
            problems.push(e.to_string());
        } else if let Err(e) = pattern_of(rule.pattern.as_deref(), rule.glob.as_deref()) {
            problems.push(format!("{at}: {e}"));
        }
    }
    problems
}

/// The values `rule` reads of a page: from its body (`body`, None when it was not read) for a
/// JSON field, from its items' fields (`items`) for an item field. A JSON field of a body that
/// is not JSON stops the chain.
pub fn page_values<'a>(
    rule: &ChainRule,
    body: Option<&[u8]>,
    items: impl Iterator<Item = &'a BTreeMap<String, Value>> + Clone,
) -> Result<BTreeMap<String, Vec<Value>>, ChainStop> {
    let doc = match rule.reads_json() {
        false => None,
        true => Some(
            body.and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .ok_or(ChainStop::NotJson)?,
        ),
    };
    let mut values = BTreeMap::new();
    for (name, field) in &rule.fields {
        let found = match (field, &doc) {
            (ChainField::Json(pointer), Some(doc)) => json_values(doc, pointer),
            (ChainField::Json(_), None) => Vec::new(),
            (ChainField::Item(field), _) => items
                .clone()
                .filter_map(|fields| fields.get(field))
                .flat_map(|v| match v {
                    Value::Array(list) => list.clone(),
                    other => vec![other.clone()],
                })
                .filter(has_value)
                .collect(),
        };
        values.insert(name.clone(), found);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(value: Value) -> CrawlConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn every_matching_chain_rule_applies_the_first_matching_retry_rule_and_a_bad_one_is_named() {
        let rules = ChainRules::new(&config(json!({
            "fetch": {"store_content_types": ["application/json"]},
            "chains": [
                {"glob": "*/api/*", "fields": {"c": {"json": "/next"}}, "url": "?cursor={c}"},
                {"fields": {"c": {"json": "/other"}}, "url": "{c}"},
            ],
            "retry_with": [{"match": "/api/", "param": "page"}],
        })))
        .unwrap();
        let urls = |url| {
            rules
                .chains_for(url)
                .map(|r| r.url.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(urls("http://h/api/x"), ["?cursor={c}", "{c}"]);
        assert_eq!(urls("http://h/else"), ["{c}"]);
        assert!(rules.retry_for("http://h/api/x").is_some());
        assert!(rules.retry_for("http://h/else").is_none());
        for (bad, reason) in [
            (
                json!({"chains": [{"fields": {"c": {"json": "/n"}}, "url": "{c}"}]}),
                "chains[0] reads JSON fields: add \"application/json\"",
            ),
            (
                json!({"chains": [{"match": "(", "fields": {"c": {"item": "x"}}, "url": "{c}"}]}),
                "chains[0]: fields.c: no extractor",
            ),
            (
                json!({"retry_with": [{"match": "(", "param": "page"}]}),
                "retry_with[0]: invalid pattern",
            ),
        ] {
            let error = ChainRules::new(&config(bad)).unwrap_err();
            assert!(error.starts_with(reason), "{error}");
        }
    }

    #[test]
    fn a_pages_values_come_from_its_json_body_or_its_items() {
        let rule: ChainRule = serde_json::from_value(json!({
            "fields": {"c": {"json": "/next"}, "id": {"item": "id"}},
            "url": "{c}",
        }))
        .unwrap();
        let items: Vec<BTreeMap<String, Value>> = vec![
            serde_json::from_value(json!({"id": "a"})).unwrap(),
            serde_json::from_value(json!({"id": ["b", null, ""]})).unwrap(),
            serde_json::from_value(json!({"name": "x"})).unwrap(),
        ];
        let values = page_values(&rule, Some(br#"{"next": "k"}"#), items.iter()).unwrap();
        assert_eq!(values["c"], [json!("k")]);
        assert_eq!(values["id"], [json!("a"), json!("b")]);
        assert_eq!(
            page_values(&rule, Some(b"<html>"), items.iter()),
            Err(ChainStop::NotJson)
        );
        assert_eq!(
            page_values(&rule, None, items.iter()),
            Err(ChainStop::NotJson)
        );
    }
}
