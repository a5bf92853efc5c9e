//! Requests made of other requests (Docido's `prev_result` and `Retry(page=page + 1)`).
//!
//! - **A task's own request.** A task's user data may give its method and body (`_method`,
//!   `_body`: [`TaskRequest`]), over the crawl's `fetch.method` and `fetch.body`. The body is
//!   part of the task's identity: its id is the md5 of its canonical URL, method and body
//!   ([`task_id`]), so two POSTs to one URL with different bodies are two tasks, and a GET
//!   without body keeps the id of its URL alone (every crawl from before keeps its ids).
//! - **Chained requests** ([`ChainRule`], the configuration's `chains`). A fetched page gives
//!   each rule that matches its URL (every one: a page may both page on and fan out) values by
//!   name — JSON fields of its body, or fields of the items its
//!   extractor found — and the rule's URL template (and body template) filled with them are the
//!   next requests ([`next_requests`]). A field with several values gives several requests. Each
//!   new task carries its page's data and the values it was made of under one name
//!   (`prev_result` by default), and
//!   counts its steps (`_chain`): a rule stops at its `max_steps`, at a field without value and
//!   at a response that is not what it reads, and the page's fetch record keeps why (the first
//!   rule's reason that stopped)
//!   ([`ChainStop`]). Chained tasks are seeded like links (the crawl's scope, robots.txt, the
//!   network guard and `max_pages` apply) at their page's depth, as an open-ended template's
//!   next page is: the chain's own cap bounds them, not `max_depth`.
//! - **A retry that changes its request** ([`RetryWith`], the configuration's `retry_with`). A
//!   task given up (retries spent, or a failure no retry fixes) whose URL a rule matches, and
//!   whose last answer's status the rule lists (none listed: any), seeds the same request with
//!   one integer parameter changed — a top-level field of its JSON body, else a query parameter
//!   — at most `max` times in a row (`_retried`). The given-up task stays as it is, with its
//!   errors; the new one names it as its parent.
//!
//! Rules live in their own lists rather than on `scope.routes`: a route says how a page is
//! treated, a chain rule what requests a page's answer makes, and the values it reads (a JSON
//! field) need not be an extractor's.

use crate::canonical::{CanonicalUrl, TaskId};
use crate::crawl::{HttpMethod, RequestBody};
use crate::extract::Extractor;
use crate::task::{MAX_USER_DATA_BYTES, UserData};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;

/// The user data key of a task's method (`GET` or `POST`).
pub const METHOD_KEY: &str = "_method";
/// The user data key of a task's body: a string is sent as text, any other JSON value as JSON.
pub const BODY_KEY: &str = "_body";
/// The user data key of a task's dedup key (DeltaFetch's `deltafetch_key`): when given, the
/// task is known by it instead of by its URL and request, so that two URLs giving one key are
/// one task (the first seeded).
pub const KEY_KEY: &str = "_key";
/// The longest dedup key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// The user data key counting a chained task's steps from the page that began its chain.
pub const STEP_KEY: &str = "_chain";
/// The user data key counting a retried request's changes in a row (`RetryWith`).
pub const RETRIED_KEY: &str = "_retried";
/// Where a chained task's data holds the values it was made of, unless its rule names another.
pub const DEFAULT_CARRY: &str = "prev_result";
/// Steps a chain takes unless its rule says otherwise.
pub const DEFAULT_MAX_STEPS: u32 = 100;
/// Most steps any chain may take.
pub const MAX_STEPS: u32 = 10_000;
/// Most requests one page's answer makes through one rule (a longer list is cut).
pub const MAX_FANOUT: usize = 100;
/// Most times in a row a request may be changed and tried again.
pub const MAX_RETRIES_WITH: u32 = 10;

/// A task's own method and body (its user data's `_method` and `_body`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRequest {
    pub method: HttpMethod,
    pub body: Option<RequestBody>,
}

/// Why a task's `_method` or `_body` cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("{METHOD_KEY} {0} is not \"GET\" or \"POST\"")]
    Method(String),
    #[error("{BODY_KEY} needs {METHOD_KEY} \"POST\"")]
    BodyNeedsPost,
    #[error("{KEY_KEY} {0} is not a string of 1 to {MAX_KEY_BYTES} bytes")]
    Key(String),
}

impl TaskRequest {
    /// The request `data` gives (None: it names neither a method nor a body).
    pub fn of_data(data: Option<&UserData>) -> Result<Option<Self>, RequestError> {
        let Some(data) = data else {
            return Ok(None);
        };
        if let Some(key) = data.get(KEY_KEY)
            && dedup_key(Some(data)).is_none()
        {
            return Err(RequestError::Key(key.to_string()));
        }
        let method = match data.get(METHOD_KEY) {
            None => None,
            Some(Value::String(m)) if m.eq_ignore_ascii_case("get") => Some(HttpMethod::Get),
            Some(Value::String(m)) if m.eq_ignore_ascii_case("post") => Some(HttpMethod::Post),
            Some(other) => return Err(RequestError::Method(other.to_string())),
        };
        let body = match data.get(BODY_KEY) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(RequestBody::Text(text.clone())),
            Some(json) => Some(RequestBody::Json(json.clone())),
        };
        match (method, body) {
            (None, None) => Ok(None),
            (Some(HttpMethod::Post), body) => Ok(Some(Self {
                method: HttpMethod::Post,
                body,
            })),
            (_, Some(_)) => Err(RequestError::BodyNeedsPost),
            (Some(HttpMethod::Get), None) => Ok(Some(Self {
                method: HttpMethod::Get,
                body: None,
            })),
        }
    }

    /// What the request adds to its URL's identity: None for a GET (which has no body).
    pub fn identity(&self) -> Option<String> {
        match (&self.method, &self.body) {
            (HttpMethod::Get, _) => None,
            (HttpMethod::Post, None) => Some("POST".to_owned()),
            (HttpMethod::Post, Some(RequestBody::Text(text))) => Some(format!("POST text {text}")),
            (HttpMethod::Post, Some(RequestBody::Json(json))) => {
                Some(format!("POST json {}", canonical_json(json)))
            }
        }
    }

    /// Writes the request into `data` (its keys replaced).
    pub fn write_to(&self, data: &mut UserData) {
        data.remove(METHOD_KEY);
        data.remove(BODY_KEY);
        if self.method == HttpMethod::Post {
            data.insert(METHOD_KEY.to_owned(), Value::from("POST"));
        }
        match &self.body {
            None => {}
            Some(RequestBody::Text(text)) => {
                data.insert(BODY_KEY.to_owned(), Value::from(text.as_str()));
            }
            Some(RequestBody::Json(json)) => {
                data.insert(BODY_KEY.to_owned(), json.clone());
            }
        }
    }
}

/// The id of the task for `url` with user data `data`: its dedup key's when the data gives
/// one (`TaskId::of_key`), else its URL's (`CanonicalUrl::task_id`) unless the data gives a
/// request other than a GET. Data whose request is not valid is refused
/// where it enters trawl; here it counts as none.
pub fn task_id(url: &CanonicalUrl, data: Option<&UserData>) -> TaskId {
    if let Some(key) = dedup_key(data) {
        return TaskId::of_key(key);
    }
    match TaskRequest::of_data(data)
        .ok()
        .flatten()
        .and_then(|r| r.identity())
    {
        Some(identity) => url.task_id_with(&identity),
        None => url.task_id(),
    }
}

/// The dedup key `data` gives, when it is a valid one.
pub fn dedup_key(data: Option<&UserData>) -> Option<&str> {
    match data?.get(KEY_KEY)? {
        Value::String(key) if !key.is_empty() && key.len() <= MAX_KEY_BYTES => Some(key),
        _ => None,
    }
}

/// `data` with the dedup key `key` (a route's: `Route::key`) unless it gives its own.
pub fn keyed(data: Option<UserData>, key: Option<String>) -> Option<UserData> {
    let Some(key) = key.filter(|_| dedup_key(data.as_ref()).is_none()) else {
        return data;
    };
    let mut data = data.unwrap_or_default();
    data.insert(KEY_KEY.to_owned(), Value::String(key));
    Some(data)
}

/// `data` without the keys of a request and its dedup key, for a page it leads to by a link or
/// a redirect (a GET, and another page than the one the key names).
pub fn without_request(mut data: UserData) -> UserData {
    data.remove(METHOD_KEY);
    data.remove(BODY_KEY);
    data.remove(KEY_KEY);
    data.remove(crate::task::CONTENT_KEY);
    data
}

/// JSON with every object's keys in order, so that equal bodies are one identity.
fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let ordered: BTreeMap<&String, Value> =
                    map.iter().map(|(k, v)| (k, sorted(v))).collect();
                Value::Object(ordered.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// What the answers of the pages a pattern matches make next (the configuration's `chains`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainRule {
    /// A regular expression matched against the page's canonical URL (neither this nor
    /// `glob`: every page).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// The values the templates use, by name.
    pub fields: BTreeMap<String, ChainField>,
    /// The next request's URL: `{name}` is a field's value, percent-encoded; a template that
    /// is one `{name}` alone takes the value as a URL. Relative to the page's URL.
    pub url: String,
    #[serde(default, skip_serializing_if = "is_get")]
    pub method: HttpMethod,
    /// The next request's body (POST only): any JSON, whose strings are templates; a string
    /// that is one `{name}` alone becomes the field's JSON value. A body that is a string is
    /// sent as text, any other as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The user data key under which a next task carries the values it was made of.
    #[serde(default = "default_carry")]
    pub carry: String,
    /// Most requests made one after the other from a chain's first page (1 to `MAX_STEPS`).
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
}

fn is_get(method: &HttpMethod) -> bool {
    *method == HttpMethod::Get
}

fn default_carry() -> String {
    DEFAULT_CARRY.to_owned()
}

fn default_max_steps() -> u32 {
    DEFAULT_MAX_STEPS
}

/// Where a chain rule's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ChainField {
    /// A JSON pointer (RFC 6901: `/meta/next_cursor`, `/items/0/id`) into a JSON answer, where
    /// a `*` step takes every element of an array (`/items/*/id`); an array at the end gives
    /// its elements.
    Json(String),
    /// A field of the items the page's extractor found (every item's value).
    Item(String),
}

/// Why a chain rule cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChainConfigError {
    #[error("{at}: template {template:?} names {name:?}, which is not one of its fields ({known})")]
    UnknownField {
        at: String,
        template: String,
        name: String,
        known: String,
    },
    #[error("{at}: template {template:?} has an unclosed or empty {{}}")]
    Template { at: String, template: String },
    #[error("{at}: fields.{name}: {pointer:?} is not a JSON pointer (empty, or starting with /)")]
    Pointer {
        at: String,
        name: String,
        pointer: String,
    },
    #[error("{at}: fields.{name}: no extractor has a field {field:?}")]
    ItemField {
        at: String,
        name: String,
        field: String,
    },
    #[error("{at}: {problem}")]
    Invalid { at: String, problem: String },
}

/// A template's pieces: text as written, and field names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    Field(&'a str),
}

/// Splits a template at its `{name}`s; None when a brace is unclosed or names nothing.
fn pieces(template: &str) -> Option<Vec<Piece<'_>>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            out.push(Piece::Text(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        let name = after[..close].trim();
        if name.is_empty() || name.contains('{') {
            return None;
        }
        out.push(Piece::Field(name));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Some(out)
}

/// The one field a template is made of alone (`{next}`), if it is.
fn alone(template: &str) -> Option<&str> {
    match pieces(template)?.as_slice() {
        [Piece::Field(name)] => Some(name),
        _ => None,
    }
}

impl ChainRule {
    /// Checks the rule (`at` names it in errors): its templates name only its fields, its
    /// pointers are pointers, its item fields are some extractor's, its body goes with a POST
    /// and its cap and carry key are usable.
    pub fn validate(&self, at: &str, extractors: &[Extractor]) -> Result<(), ChainConfigError> {
        let invalid = |problem: String| ChainConfigError::Invalid {
            at: at.to_owned(),
            problem,
        };
        if self.pattern.is_some() && self.glob.is_some() {
            return Err(invalid("give `match` or `glob`, not both".into()));
        }
        if self.fields.is_empty() {
            return Err(invalid("fields is empty".into()));
        }
        if self.max_steps == 0 || self.max_steps > MAX_STEPS {
            return Err(invalid(format!("max_steps must be from 1 to {MAX_STEPS}")));
        }
        if self.carry.is_empty() || self.carry.starts_with('_') {
            return Err(invalid(
                "carry must be a name not starting with _ (trawl's own keys do)".into(),
            ));
        }
        if self.body.is_some() && self.method != HttpMethod::Post {
            return Err(invalid("body needs method POST".into()));
        }
        for (name, field) in &self.fields {
            match field {
                ChainField::Json(pointer) if !(pointer.is_empty() || pointer.starts_with('/')) => {
                    return Err(ChainConfigError::Pointer {
                        at: at.to_owned(),
                        name: name.clone(),
                        pointer: pointer.clone(),
                    });
                }
                ChainField::Item(field)
                    if !extractors.iter().any(|e| e.fields.contains_key(field)) =>
                {
                    return Err(ChainConfigError::ItemField {
                        at: at.to_owned(),
                        name: name.clone(),
                        field: field.clone(),
                    });
                }
                _ => {}
            }
        }
        let mut templates = vec![self.url.as_str()];
        if let Some(body) = &self.body {
            strings_of(body, &mut templates);
        }
        for template in templates {
            let Some(parts) = pieces(template) else {
                return Err(ChainConfigError::Template {
                    at: at.to_owned(),
                    template: template.to_owned(),
                });
            };
            for part in parts {
                if let Piece::Field(name) = part
                    && !self.fields.contains_key(name)
                {
                    return Err(ChainConfigError::UnknownField {
                        at: at.to_owned(),
                        template: template.to_owned(),
                        name: name.to_owned(),
                        known: self.fields.keys().cloned().collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether any of the rule's values is read from a JSON answer.
    pub fn reads_json(&self) -> bool {
        self.fields
            .values()
            .any(|f| matches!(f, ChainField::Json(_)))
    }
}

/// The strings of a JSON value, depth first (a body template's templates).
fn strings_of<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings_of(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings_of(v, out)),
        _ => {}
    }
}

/// The values of `pointer` in `doc` (`ChainField::Json`): a `*` step takes every element of an
/// array, an array at the end gives its elements; nulls and empty strings are no values.
pub fn json_values(doc: &Value, pointer: &str) -> Vec<Value> {
    let mut at = vec![doc];
    if !pointer.is_empty() {
        for raw in pointer.split('/').skip(1) {
            let step = raw.replace("~1", "/").replace("~0", "~");
            at = at
                .into_iter()
                .flat_map(|v| -> Vec<&Value> {
                    match (v, step.as_str()) {
                        (Value::Array(items), "*") => items.iter().collect(),
                        (Value::Array(items), index) => index
                            .parse::<usize>()
                            .ok()
                            .and_then(|i| items.get(i))
                            .into_iter()
                            .collect(),
                        (Value::Object(map), key) => map.get(key).into_iter().collect(),
                        _ => Vec::new(),
                    }
                })
                .collect();
        }
    }
    let mut values = Vec::new();
    for v in at {
        match v {
            Value::Array(items) => values.extend(items.iter().cloned()),
            other => values.push(other.clone()),
        }
    }
    values.retain(has_value);
    values
}

/// Whether a value counts as one: not null, not an empty string or list.
pub fn has_value(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

/// Why a page made no next request by a chain rule (kept on its fetch record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ChainStop {
    /// The field had no value on the page: the source says there is no more.
    Empty { field: String },
    /// The page was the chain's last allowed step.
    Cap { max_steps: u32 },
    /// The answer was not what the rule reads (not JSON for a JSON field).
    NotJson,
    /// A value could not make a request (a list where a URL needs one value, a URL that does not
    /// parse, data past its bound).
    Invalid { detail: String },
}

impl ChainStop {
    /// Its `reason`, as it is serialised.
    pub fn reason(&self) -> &'static str {
        match self {
            ChainStop::Empty { .. } => "empty",
            ChainStop::Cap { .. } => "cap",
            ChainStop::NotJson => "not_json",
            ChainStop::Invalid { .. } => "invalid",
        }
    }

    fn invalid(detail: impl Into<String>) -> Self {
        ChainStop::Invalid {
            detail: crate::canonical::truncate(&detail.into(), 200).to_owned(),
        }
    }
}

/// One next request a page made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRequest {
    /// Absolute, as filled (not yet canonical).
    pub url: String,
    /// Its method and body (None: a GET).
    pub request: Option<TaskRequest>,
    /// The values it was made of, by field name.
    pub carried: UserData,
}

/// What a chain rule makes of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainStep {
    Next(Vec<NextRequest>),
    Stop(ChainStop),
}

/// The step of a task in its chain (`STEP_KEY`; 0: it began none).
pub fn step_of(data: Option<&UserData>) -> u32 {
    data.and_then(|d| d.get(STEP_KEY))
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The rule: the requests `rule` makes of a page at `page_url`, a task at chain step `step`
/// (a page whose chain already took `max_steps` steps makes none),
/// whose fields gave `values` (each field's values, in order). The cap comes first; then a field
/// without value stops the chain. A field with several values makes one request per value,
/// a field with one value goes into each; several lists are paired by position (the shortest
/// decides), and at most `MAX_FANOUT` requests are made.
pub fn next_requests(
    rule: &ChainRule,
    page_url: &url::Url,
    values: &BTreeMap<String, Vec<Value>>,
    step: u32,
) -> ChainStep {
    if step >= rule.max_steps {
        return ChainStep::Stop(ChainStop::Cap {
            max_steps: rule.max_steps,
        });
    }
    let mut lists = BTreeMap::new();
    for name in rule.fields.keys() {
        match values.get(name).filter(|v| !v.is_empty()) {
            Some(found) => lists.insert(name.as_str(), found.as_slice()),
            None => {
                return ChainStep::Stop(ChainStop::Empty {
                    field: name.clone(),
                });
            }
        };
    }
    let count = lists
        .values()
        .filter(|v| v.len() > 1)
        .map(|v| v.len())
        .min()
        .unwrap_or(1)
        .min(MAX_FANOUT);
    let mut requests = Vec::with_capacity(count);
    for i in 0..count {
        let picked: BTreeMap<&str, &Value> = lists
            .iter()
            .map(|(name, list)| (*name, if list.len() == 1 { &list[0] } else { &list[i] }))
            .collect();
        match fill_request(rule, page_url, &picked) {
            Ok(next) => requests.push(next),
            Err(stop) => return ChainStep::Stop(stop),
        }
    }
    ChainStep::Next(requests)
}

fn fill_request(
    rule: &ChainRule,
    page_url: &url::Url,
    picked: &BTreeMap<&str, &Value>,
) -> Result<NextRequest, ChainStop> {
    let text = |name: &str| -> Result<String, ChainStop> {
        match picked.get(name) {
            Some(Value::String(s)) => Ok(s.trim().to_owned()),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
            _ => Err(ChainStop::invalid(format!(
                "{name} is not a string or a number"
            ))),
        }
    };
    let url = match alone(&rule.url) {
        Some(name) => text(name)?,
        None => {
            let mut url = String::new();
            for piece in pieces(&rule.url).unwrap_or_default() {
                match piece {
                    Piece::Text(t) => url.push_str(t),
                    Piece::Field(name) => {
                        url.extend(url::form_urlencoded::byte_serialize(text(name)?.as_bytes()))
                    }
                }
            }
            url
        }
    };
    let url = page_url
        .join(&url)
        .map_err(|e| ChainStop::invalid(format!("{url}: {e}")))?;
    let request = match rule.method {
        HttpMethod::Get => None,
        HttpMethod::Post => Some(TaskRequest {
            method: HttpMethod::Post,
            body: match &rule.body {
                None => None,
                Some(template) => Some(match fill_json(template, picked, &text)? {
                    Value::String(s) => RequestBody::Text(s),
                    json => RequestBody::Json(json),
                }),
            },
        }),
    };
    let carried = picked
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).clone()))
        .collect();
    Ok(NextRequest {
        url: url.to_string(),
        request,
        carried,
    })
}

/// A body template filled: a string that is one `{name}` alone becomes the value, other
/// strings have each `{name}` replaced by the value's text.
fn fill_json(
    template: &Value,
    picked: &BTreeMap<&str, &Value>,
    text: &dyn Fn(&str) -> Result<String, ChainStop>,
) -> Result<Value, ChainStop> {
    Ok(match template {
        Value::String(s) => match alone(s) {
            Some(name) => picked.get(name).map_or(Value::Null, |v| (*v).clone()),
            None => {
                let mut out = String::new();
                for piece in pieces(s).unwrap_or_default() {
                    match piece {
                        Piece::Text(t) => out.push_str(t),
                        Piece::Field(name) => out.push_str(&text(name)?),
                    }
                }
                Value::String(out)
            }
        },
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| fill_json(v, picked, text))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), fill_json(v, picked, text)?)))
                .collect::<Result<_, ChainStop>>()?,
        ),
        other => other.clone(),
    })
}

/// The user data of the task `next` makes, whose page was at chain step `step`: the page's data
/// (`page_data`; its request keys and its retry count dropped), the values `next` was made of
/// under the rule's `carry`, its step, and its request. An error when it is past
/// `MAX_USER_DATA_BYTES`.
pub fn chained_data(
    page_data: Option<UserData>,
    rule: &ChainRule,
    next: &NextRequest,
    step: u32,
) -> Result<UserData, ChainStop> {
    let mut data = page_data.map(without_request).unwrap_or_default();
    data.remove(RETRIED_KEY);
    data.insert(rule.carry.clone(), Value::Object(next.carried.clone()));
    data.insert(STEP_KEY.to_owned(), Value::from(step.saturating_add(1)));
    if let Some(request) = &next.request {
        request.write_to(&mut data);
    }
    crate::task::check_user_data(&data).map_err(|e| {
        ChainStop::invalid(format!(
            "the next task's {e} (at most {MAX_USER_DATA_BYTES})"
        ))
    })?;
    Ok(data)
}

/// A request tried again with one parameter changed when its task is given up (the
/// configuration's `retry_with`; Docido's `Retry(page=page + 1)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryWith {
    /// A regular expression matched against the task's canonical URL (neither this nor `glob`:
    /// every task).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// The statuses of the last answer that call for it (empty: any give-up, answered or not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_status: Vec<u16>,
    /// The integer parameter changed: a top-level field of the JSON body, else a query
    /// parameter.
    pub param: String,
    /// Added to the parameter.
    #[serde(default = "one")]
    pub add: i64,
    /// Most changes in a row (1 to `MAX_RETRIES_WITH`).
    #[serde(default = "one_u32")]
    pub max: u32,
}

fn one() -> i64 {
    1
}

fn one_u32() -> u32 {
    1
}

impl RetryWith {
    /// Checks the rule (`at` names it in errors).
    pub fn validate(&self, at: &str) -> Result<(), ChainConfigError> {
        let problem = if self.pattern.is_some() && self.glob.is_some() {
            Some("give `match` or `glob`, not both".to_owned())
        } else if self.param.is_empty() {
            Some("param is empty".to_owned())
        } else if self.add == 0 {
            Some("add must not be 0 (the same request again is a plain retry)".to_owned())
        } else if self.max == 0 || self.max > MAX_RETRIES_WITH {
            Some(format!("max must be from 1 to {MAX_RETRIES_WITH}"))
        } else {
            self.on_status
                .iter()
                .find(|s| !(100..=599).contains(*s))
                .map(|s| format!("on_status {s} is not an HTTP status"))
        };
        match problem {
            Some(problem) => Err(ChainConfigError::Invalid {
                at: at.to_owned(),
                problem,
            }),
            None => Ok(()),
        }
    }
}

/// Why a given-up task's request is not tried again changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NoRetry {
    #[error("its last status is not one the rule lists")]
    NotListed,
    #[error("changed {max} times in a row already")]
    Spent { max: u32 },
    #[error("its request has no integer {param:?} (neither in its JSON body nor its query)")]
    NoParam { param: String },
}

/// The request to try again, changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retried {
    pub url: String,
    pub data: UserData,
}

/// The rule: what a task at `url` with user data `data`, given up after an answer of
/// `http_status` (None: no answer), is tried again as under `rule`.
pub fn retried(
    rule: &RetryWith,
    url: &url::Url,
    data: Option<&UserData>,
    http_status: Option<u16>,
) -> Result<Retried, NoRetry> {
    if !rule.on_status.is_empty() && !http_status.is_some_and(|s| rule.on_status.contains(&s)) {
        return Err(NoRetry::NotListed);
    }
    let done = data
        .and_then(|d| d.get(RETRIED_KEY))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if done >= u64::from(rule.max) {
        return Err(NoRetry::Spent { max: rule.max });
    }
    let mut data = data.cloned().unwrap_or_default();
    let no_param = || NoRetry::NoParam {
        param: rule.param.clone(),
    };
    let in_body = data
        .get_mut(BODY_KEY)
        .and_then(Value::as_object_mut)
        .and_then(|body| body.get_mut(&rule.param));
    let url = match in_body {
        Some(value) => {
            let n = value.as_i64().ok_or_else(no_param)?;
            *value = Value::from(n.saturating_add(rule.add));
            url.to_string()
        }
        None => {
            let mut changed = false;
            let pairs: Vec<(String, String)> = url
                .query_pairs()
                .map(|(k, v)| match v.parse::<i64>() {
                    Ok(n) if k == rule.param.as_str() && !changed => {
                        changed = true;
                        (k.into_owned(), n.saturating_add(rule.add).to_string())
                    }
                    _ => (k.into_owned(), v.into_owned()),
                })
                .collect();
            if !changed {
                return Err(no_param());
            }
            let mut next = url.clone();
            next.query_pairs_mut().clear().extend_pairs(pairs);
            next.to_string()
        }
    };
    data.insert(RETRIED_KEY.to_owned(), Value::from(done + 1));
    Ok(Retried { url, data })
}

#[cfg(test)]
mod tests;
