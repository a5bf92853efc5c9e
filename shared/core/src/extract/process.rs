//! Field processors: each turns a field's values into new ones, in the order written, and a
//! field's value is the first one they keep (or all joined, with `join`).

use serde_json::Value;
use trawl_domain::extract::Processor;

/// Runs `processors` on `values` of the page `page_url`: the field's value (null: none) and
/// the errors met.
fn run(processors: &[Processor], values: Vec<String>, page_url: &url::Url) -> (Value, Vec<String>) {
    let mut values: Vec<Value> = values.into_iter().map(Value::String).collect();
    let mut errors = Vec::new();
    for processor in processors {
        values = match processor {
            Processor::Join(separator) if !values.is_empty() => {
                let parts: Vec<String> = values.iter().map(as_text).collect();
                vec![Value::String(parts.join(separator))]
            }
            Processor::Default(value) if values.is_empty() => vec![Value::String(value.clone())],
            Processor::Required => {
                if values.is_empty() {
                    errors.push("required: no value".to_owned());
                }
                values
            }
            Processor::Join(_) | Processor::Default(_) => values,
            _ => values
                .into_iter()
                .filter_map(|v| match on_value(processor, v, page_url) {
                    Ok(kept) => kept,
                    Err(e) => {
                        errors.push(e);
                        None
                    }
                })
                .collect(),
        };
    }
    (values.into_iter().next().unwrap_or(Value::Null), errors)
}

/// The value and errors `run` gives, reading `values` only as far as needed: without `join`
/// a field is the first value its processors keep, so the values after it are neither made
/// nor processed (and their errors are not the field's). When none is kept, `run` runs on all
/// of them (a `default`, a `required` error then apply).
pub(super) fn first(
    processors: &[Processor],
    values: impl Iterator<Item = String>,
    page_url: &url::Url,
) -> (Value, Vec<String>) {
    if processors.iter().any(|p| matches!(p, Processor::Join(_))) {
        return run(processors, values.collect(), page_url);
    }
    let mut dropped = Vec::new();
    let mut errors = Vec::new();
    for value in values {
        // The list processors pass a kept value as it is: the list is not empty.
        let kept = processors
            .iter()
            .try_fold(Some(Value::String(value.clone())), |v, p| {
                v.map_or(Ok(None), |v| on_value(p, v, page_url))
            });
        match kept {
            Ok(Some(v)) => return (v, errors),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
        dropped.push(value);
    }
    run(processors, dropped, page_url)
}

/// What `processor` makes of one value: kept (maybe changed), dropped (`trim` left nothing),
/// or refused with an error. The list processors (`join`, `default`, `required`) keep it.
fn on_value(processor: &Processor, v: Value, page_url: &url::Url) -> Result<Option<Value>, String> {
    match processor {
        Processor::Trim => Ok(match v {
            Value::String(s) => {
                let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
                (!s.is_empty()).then_some(Value::String(s))
            }
            other => Some(other),
        }),
        Processor::AbsoluteUrl => {
            let s = as_text(&v);
            page_url
                .join(s.trim())
                .map(|u| Some(Value::String(u.into())))
                .map_err(|e| format!("not a URL: {s:?}: {e}"))
        }
        Processor::Number => number(&as_text(&v)).map(Some),
        Processor::Date(format) => date(&as_text(&v), format).map(Some),
        Processor::Join(_) | Processor::Default(_) | Processor::Required => Ok(Some(v)),
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `1,234.50 €` → 1234.5; an integer stays an integer.
fn number(s: &str) -> Result<Value, String> {
    let kept: String = s
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
        .collect();
    let not_a_number = || format!("not a number: {s:?}");
    if !kept.chars().any(|c| c.is_ascii_digit()) {
        return Err(not_a_number());
    }
    if let Ok(n) = kept.parse::<i64>() {
        return Ok(Value::from(n));
    }
    let n: f64 = kept.parse().map_err(|_| not_a_number())?;
    serde_json::Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(not_a_number)
}

/// A date, or a date and time, read by `format` and written as ISO 8601.
fn date(s: &str, format: &str) -> Result<Value, String> {
    let s = s.trim();
    if let Ok(at) = chrono::NaiveDateTime::parse_from_str(s, format) {
        return Ok(Value::String(at.format("%Y-%m-%dT%H:%M:%S").to_string()));
    }
    chrono::NaiveDate::parse_from_str(s, format)
        .map(|d| Value::String(d.format("%Y-%m-%d").to_string()))
        .map_err(|e| format!("not a date by {format:?}: {s:?} ({e})"))
}

/// Whether `format` is a strftime format chrono reads.
pub(super) fn date_format_ok(format: &str) -> bool {
    !format.is_empty()
        && !chrono::format::StrftimeItems::new(format)
            .any(|item| matches!(item, chrono::format::Item::Error))
}
