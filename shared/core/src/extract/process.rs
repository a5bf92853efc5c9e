//! Field processors: each turns a field's values into new ones, in the order written, and a
//! field's value is its first one (or all joined, with `join`).

use serde_json::Value;
use trawl_domain::extract::Processor;

/// Runs `processors` on `values` of the page `page_url`: the field's value (null: none) and
/// the errors met.
pub(super) fn run(
    processors: &[Processor],
    values: Vec<String>,
    page_url: &url::Url,
) -> (Value, Vec<String>) {
    let mut values: Vec<Value> = values.into_iter().map(Value::String).collect();
    let mut errors = Vec::new();
    for processor in processors {
        values = match processor {
            Processor::Trim => values
                .into_iter()
                .filter_map(|v| match v {
                    Value::String(s) => {
                        let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
                        (!s.is_empty()).then_some(Value::String(s))
                    }
                    other => Some(other),
                })
                .collect(),
            Processor::Join(separator) if !values.is_empty() => {
                let parts: Vec<String> = values.iter().map(as_text).collect();
                vec![Value::String(parts.join(separator))]
            }
            Processor::Join(_) => values,
            Processor::AbsoluteUrl => each(values, &mut errors, |s| {
                page_url
                    .join(s.trim())
                    .map(|u| Value::String(u.into()))
                    .map_err(|e| format!("not a URL: {s:?}: {e}"))
            }),
            Processor::Number => each(values, &mut errors, number),
            Processor::Date(format) => each(values, &mut errors, |s| date(s, format)),
            Processor::Default(value) if values.is_empty() => vec![Value::String(value.clone())],
            Processor::Default(_) => values,
            Processor::Required => {
                if values.is_empty() {
                    errors.push("required: no value".to_owned());
                }
                values
            }
        };
    }
    (values.into_iter().next().unwrap_or(Value::Null), errors)
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `f` on every value's text; a value it refuses is dropped and its error kept.
fn each(
    values: Vec<Value>,
    errors: &mut Vec<String>,
    f: impl Fn(&str) -> Result<Value, String>,
) -> Vec<Value> {
    values
        .into_iter()
        .filter_map(|v| match f(&as_text(&v)) {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(e);
                None
            }
        })
        .collect()
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
