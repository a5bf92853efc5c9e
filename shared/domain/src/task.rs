//! A task: one URL in one crawl, and everything trawl knows about it.

use crate::canonical::{CrawlId, TaskId, truncate};
pub use crate::priority::Priority;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Milliseconds since the Unix epoch. Every store operation takes `now` from its caller, so
/// tests can move time forward (lease expiry, backoff) without sleeping.
pub type Millis = i64;

/// The wall clock, in `Millis`.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// A task's status. The numeric codes are the seed's (pending 10 … ignored 50) plus gone 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Status {
    Pending,
    InProgress,
    /// Failed transiently; claimable again once `next_attempt_at` is reached.
    Failed,
    Succeeded,
    /// Given up on: permanent failure, retries exhausted, robots-denied, or out of scope.
    Ignored,
    /// The page no longer exists (404/410).
    Gone,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Pending,
        Status::InProgress,
        Status::Failed,
        Status::Succeeded,
        Status::Ignored,
        Status::Gone,
    ];

    pub fn code(self) -> u8 {
        match self {
            Status::Pending => 10,
            Status::InProgress => 20,
            Status::Failed => 30,
            Status::Succeeded => 40,
            Status::Ignored => 50,
            Status::Gone => 60,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Failed => "failed",
            Status::Succeeded => "succeeded",
            Status::Ignored => "ignored",
            Status::Gone => "gone",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether the crawl still has work to do for a task in this status.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Ignored | Status::Gone)
    }
}

impl From<Status> for u8 {
    fn from(s: Status) -> u8 {
        s.code()
    }
}

impl TryFrom<u8> for Status {
    type Error = String;
    fn try_from(code: u8) -> Result<Self, String> {
        Status::from_code(code).ok_or_else(|| format!("unknown status code {code}"))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a failure is classified; decides between retrying and giving up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 404 / 410: the page does not exist.
    NotFound,
    /// Other 4xx that retrying will not fix.
    ClientError,
    /// 5xx.
    ServerError,
    /// 429, or 503 with Retry-After.
    Throttled,
    Timeout,
    Connection,
    /// robots.txt disallows the URL.
    RobotsDenied,
    /// robots.txt could not be fetched (5xx or unreachable): retry later.
    RobotsUnavailable,
    /// The network guard refused the address (loopback, private, metadata …).
    Blocked,
    /// Off the crawl's scope (e.g. after a redirect).
    OutOfScope,
    TooManyRedirects,
    /// Body larger than the configured maximum (or a decompression bomb).
    TooLarge,
    InvalidContent,
    /// A storage call failed; the fetch itself may have been fine.
    Storage,
    /// The host was given up after too many host-wide errors in a row (its error budget).
    HostGivenUp,
    /// Given up with its stored bytes: an image no delivered item names any more.
    Removed,
}

impl ErrorKind {
    /// Whether an error of this kind may be its host's trouble rather than the URL's
    /// (`HostSignal::of_failure`: a 503 is recorded as a server error).
    pub fn is_host_wide(self) -> bool {
        matches!(
            self,
            ErrorKind::Throttled
                | ErrorKind::ServerError
                | ErrorKind::Connection
                | ErrorKind::RobotsUnavailable
        )
    }

    /// Whether a retry could succeed.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::ServerError
                | ErrorKind::Throttled
                | ErrorKind::Timeout
                | ErrorKind::Connection
                | ErrorKind::RobotsUnavailable
                | ErrorKind::Storage
        )
    }
}

/// Longest error message kept on a task.
pub const MAX_ERROR_MESSAGE: usize = 256;
/// How many errors a task keeps (the most recent).
pub const ERROR_HISTORY: usize = 3;

/// One entry of a task's bounded error history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub kind: ErrorKind,
    #[serde(rename = "msg")]
    pub message: String,
    pub at: Millis,
}

impl ErrorRecord {
    pub fn new(kind: ErrorKind, message: &str, at: Millis) -> Self {
        Self {
            kind,
            message: truncate(message, MAX_ERROR_MESSAGE).to_owned(),
            at,
        }
    }
}

/// Appends `error`, keeping only the last `ERROR_HISTORY` entries.
pub fn push_error(history: &mut Vec<ErrorRecord>, error: ErrorRecord) {
    history.push(error);
    let excess = history.len().saturating_sub(ERROR_HISTORY);
    history.drain(..excess);
}

/// What a successful fetch recorded (a 2xx, or a 304 that kept the previous content).
/// Absent fields are not serialised: a NULL attribute would make `attribute_not_exists` false
/// in DynamoDB, and every byte counts towards the 1 KB write unit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchRecord {
    /// Key of the stored body (None when the content type is not stored).
    #[serde(rename = "key", default, skip_serializing_if = "Option::is_none")]
    pub object_key: Option<String>,
    /// Hex md5 of the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md5: Option<String>,
    /// Where in the segment at `object_key` the page's records are (`storage.layout =
    /// segments`); None for a body that is an object of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<Span>,
    #[serde(rename = "http")]
    pub http_status: u16,
    #[serde(rename = "ctype", default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(rename = "len")]
    pub content_length: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(rename = "lastmod", default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    /// The URL after redirects, when it differs from the task's.
    #[serde(rename = "final", default, skip_serializing_if = "Option::is_none")]
    pub final_url: Option<String>,
    #[serde(rename = "hops", default)]
    pub redirects: u8,
    #[serde(rename = "at")]
    pub fetched_at: Millis,
    /// When the page is fetched again: a recrawl, or the check of a gone page (None: never).
    #[serde(rename = "next", default, skip_serializing_if = "Option::is_none")]
    pub next_fetch_at: Option<Millis>,
    /// The page's place in its schedule (`crate::revisit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<crate::schedule::Pace>,
    /// 404/410 answers in a row since the content was last seen.
    #[serde(rename = "miss", default, skip_serializing_if = "is_zero")]
    pub missing: u32,
    /// When this record's history began: the page's first fetch, or its first after a reset
    /// forgot the record (carried by every later fetch). The delta tells a page fetched afresh
    /// from one merely fetched again by it. None: a record from before trawl kept it.
    #[serde(rename = "first", default, skip_serializing_if = "Option::is_none")]
    pub first_at: Option<Millis>,
    /// What the request that brought the stored content sent beyond every request of its crawl
    /// (None: a GET with the crawl's User-Agent and Accept only, or a record from before trawl
    /// kept it). The delivered WARC's `request` record shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Sent>,
    /// Why an open-ended pagination template stopped at this page (`crate::paging`): None for
    /// any other page, and for one whose next page was seeded.
    #[serde(rename = "stop", default, skip_serializing_if = "Option::is_none")]
    pub paging_stop: Option<crate::paging::PagingStop>,
    /// Why a chain rule made no next request of this page (`crate::chain`): None for any other
    /// page, and for one that made some.
    #[serde(rename = "cstop", default, skip_serializing_if = "Option::is_none")]
    pub chain_stop: Option<crate::chain::ChainStop>,
    /// What the built-in analysis read from the page (`CrawlConfig::analysis`): None when the
    /// crawl does not ask for it, or the page is not HTML.
    #[serde(rename = "an", default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<PageAnalysis>,
}

/// What the built-in analysis reads from an HTML page (Docido's `_analysis`): its title, its
/// description and its language, each whitespace-collapsed and cut to a bound, so that the
/// task record stays small (a write unit is 1 KB).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageAnalysis {
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A language tag (`en`, `pt-BR`): the page's `<html lang>`, else the one its `<meta
    /// http-equiv="content-language">` declares.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// The main text (`CrawlConfig::analysis` `text`): an HTML page's readable text, its
    /// navigation, header, footer and scripts left out, or a PDF's text; one line per block,
    /// cut to [`PageAnalysis::TEXT_BYTES`].
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether the text was cut at its bound.
    #[serde(rename = "xc", default, skip_serializing_if = "std::ops::Not::not")]
    pub text_cut: bool,
    /// Why a body that should have given a text gave none.
    #[serde(rename = "xe", default, skip_serializing_if = "Option::is_none")]
    pub text_error: Option<TextError>,
}

/// Why the text of a page or file could not be read (`PageAnalysis::text_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum TextError {
    /// Not a well-formed file of its type (a PDF that does not parse).
    #[error("malformed")]
    Malformed,
    /// Encrypted, and not with the empty password.
    #[error("encrypted")]
    Encrypted,
    /// Past what the analysis reads (too many elements, pages or decompressed bytes).
    #[error("too large")]
    TooLarge,
}

impl PageAnalysis {
    /// Bytes kept of each value at most.
    pub const TITLE_BYTES: usize = 300;
    pub const DESCRIPTION_BYTES: usize = 500;
    /// The longest well-formed language tag is far below this; anything longer is not one.
    pub const LANGUAGE_BYTES: usize = 35;

    /// Bytes of main text kept at most. The analysis lives on the fetch record, which every write
    /// of the task rewrites: 4 KB of text makes a typical record five DynamoDB write units
    /// instead of one (an item's hard limit is 400 KB).
    pub const TEXT_BYTES: usize = 4_096;

    /// The analysis of the raw values a page gave: whitespace runs made one space, values cut
    /// to their bounds (on a character boundary), empty ones dropped; the language is the
    /// `<html lang>` when well-formed, else the first of those the page declares by meta tag.
    pub fn new(
        title: Option<&str>,
        description: Option<&str>,
        html_lang: Option<&str>,
        declared_language: Option<&str>,
    ) -> Self {
        let tidy = |raw: Option<&str>, max: usize| {
            let collapsed = raw?.split_whitespace().collect::<Vec<_>>().join(" ");
            let kept = truncate(&collapsed, max).trim_end();
            (!kept.is_empty()).then(|| kept.to_owned())
        };
        let tag = |raw: Option<&str>| {
            let tag = raw?.split(',').next()?.trim();
            let well_formed = !tag.is_empty()
                && tag.len() <= Self::LANGUAGE_BYTES
                && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            well_formed.then(|| tag.to_owned())
        };
        PageAnalysis {
            title: tidy(title, Self::TITLE_BYTES),
            description: tidy(description, Self::DESCRIPTION_BYTES),
            language: tag(html_lang).or_else(|| tag(declared_language)),
            ..PageAnalysis::default()
        }
    }

    /// This analysis with `raw` as its text: each line's whitespace runs made one space, empty
    /// lines dropped, the whole cut to [`Self::TEXT_BYTES`] on a character boundary (and marked
    /// cut); a text with nothing in it is none.
    pub fn with_text(self, raw: &str) -> Self {
        let mut text = String::new();
        let mut cut = false;
        for line in raw.lines() {
            let mut words = line.split_whitespace().peekable();
            if words.peek().is_none() {
                continue;
            }
            if !text.is_empty() {
                text.push('\n');
            }
            for (i, word) in words.enumerate() {
                if i > 0 {
                    text.push(' ');
                }
                text.push_str(word);
            }
            if text.len() > Self::TEXT_BYTES {
                cut = true;
                break;
            }
        }
        let kept = truncate(&text, Self::TEXT_BYTES).trim_end();
        PageAnalysis {
            text: (!kept.is_empty()).then(|| kept.to_owned()),
            text_cut: cut,
            text_error: None,
            ..self
        }
    }

    /// This analysis, its text unreadable for `error`.
    pub fn with_text_error(self, error: TextError) -> Self {
        PageAnalysis {
            text: None,
            text_cut: false,
            text_error: Some(error),
            ..self
        }
    }
}

/// A request as sent, beyond its URL, User-Agent and Accept (which every request of a crawl
/// carries, and the WARC rebuilds): its method when not GET and its other headers in order,
/// credential values replaced by [`REDACTED`] (Authorization, Proxy-Authorization, every
/// cookie's value: the names stay).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(rename = "h", default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
}

/// The Accept header of every page request.
pub const ACCEPT: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";

/// What a credential's value is recorded as.
pub const REDACTED: &str = "[redacted]";

impl Sent {
    /// None when there is nothing beyond a plain GET to keep.
    pub fn kept(self) -> Option<Sent> {
        (self.method.is_some() || !self.headers.is_empty()).then_some(self)
    }
}

/// A byte range of a segment: the gzip members holding one page's WARC records — its response
/// record, then (the last `items` bytes) the metadata record of its items, when it has some.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    #[serde(rename = "off")]
    pub offset: u64,
    #[serde(rename = "n")]
    pub length: u64,
    #[serde(rename = "i", default, skip_serializing_if = "is_zero_u64")]
    pub items: u64,
}

impl Span {
    /// WARC records in the span.
    pub fn records(&self) -> u64 {
        if self.items > 0 { 2 } else { 1 }
    }
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub crawl_id: CrawlId,
    pub task_id: TaskId,
    pub url: String,
    pub status: Status,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub depth: u32,
    /// Task id of the page this URL was discovered on.
    pub parent: Option<TaskId>,
    /// Fencing token: incremented by every claim. A finish must present the current one.
    pub token: u64,
    pub lease_expires_at: Option<Millis>,
    /// Transient failures so far (reset by success).
    pub retries: u32,
    pub next_attempt_at: Option<Millis>,
    /// When a work message was last sent for this task.
    pub enqueued_at: Option<Millis>,
    pub errors: Vec<ErrorRecord>,
    /// The last successful fetch (kept across failures, replaced by the next success).
    pub fetch: Option<FetchRecord>,
    /// md5s of objects that rejected writers left behind, for the next finisher to delete.
    pub stale: Vec<String>,
    /// The user's data, given at seed time (or inherited from the page that linked here);
    /// never changed afterwards.
    pub data: Option<UserData>,
    /// Its priority (`crate::priority`), given at seed time; never changed afterwards.
    pub priority: Priority,
    /// Its lane (`crate::lane`), given at seed time; never changed afterwards. None: its crawl
    /// had no lanes when it was created.
    pub lane: Option<String>,
}

/// A task's user data: any JSON object, kept with the task and delivered with it.
pub type UserData = serde_json::Map<String, serde_json::Value>;

/// The user data key that gives a task's body its media type (Docido's `mime_type`), over
/// the response's Content-Type: a file served as `application/octet-stream` that is a PDF.
pub const MIME_TYPE_KEY: &str = "_mime_type";

/// The user data key that hands trawl a page's content (Docido's pushed `bytes`): a task whose
/// data has it is not fetched; its content is taken as the page's body (of `MIME_TYPE_KEY`'s
/// type, else HTML), stored, read for links and items and delivered like a fetched page. It
/// travels in the task's data, within its bound (`MAX_USER_DATA_BYTES`): each write of the
/// task carries it.
pub const CONTENT_KEY: &str = "_content";

/// A task's user data as its manifest line gives it: without the content it handed over
/// (`CONTENT_KEY`), which the delivery holds as the page's body already; None when nothing is
/// left.
pub fn delivered_data(data: Option<&UserData>) -> Option<UserData> {
    let mut data = data?.clone();
    data.remove(CONTENT_KEY);
    (!data.is_empty()).then_some(data)
}

/// The content a task's user data hands over (`CONTENT_KEY`): None when it gives none; an
/// error naming it when it is not a string.
pub fn pushed_content(data: Option<&UserData>) -> Result<Option<&str>, String> {
    match data.and_then(|d| d.get(CONTENT_KEY)) {
        None => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{CONTENT_KEY} {other} is not a string")),
    }
}

/// The user data key that names a task's session (a seed line's `"_session": "a"`): a crawl
/// keeping cookies keeps a jar per session (per host and session with jars per host), and
/// sticky proxy rotation pins a host's session, not the whole host, to a proxy; the pages
/// found on a page stay in its session. Not part of the task's identity.
pub const SESSION_KEY: &str = "_session";

/// Longest session name.
pub const MAX_SESSION_BYTES: usize = 64;

/// The session a task's user data names (`SESSION_KEY`): None when it names none; an error
/// naming the value when it is not a string of 1 to `MAX_SESSION_BYTES` bytes.
pub fn session_of(data: Option<&UserData>) -> Result<Option<&str>, String> {
    match data.and_then(|d| d.get(SESSION_KEY)) {
        None => Ok(None),
        Some(serde_json::Value::String(s)) if !s.is_empty() && s.len() <= MAX_SESSION_BYTES => {
            Ok(Some(s))
        }
        Some(other) => Err(format!(
            "{SESSION_KEY} {other} is not a string of 1 to {MAX_SESSION_BYTES} bytes"
        )),
    }
}

/// The media type a task's user data gives its body (`MIME_TYPE_KEY`): None when it gives
/// none; an error naming the value when it is not a string of the form `type/subtype`.
pub fn given_content_type(data: Option<&UserData>) -> Result<Option<&str>, String> {
    let Some(value) = data.and_then(|d| d.get(MIME_TYPE_KEY)) else {
        return Ok(None);
    };
    let token = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match value.as_str() {
        Some(given)
            if given.len() <= 127
                && given
                    .split_once('/')
                    .is_some_and(|(t, s)| token(t) && token(s)) =>
        {
            Ok(Some(given))
        }
        _ => Err(format!(
            "{MIME_TYPE_KEY} {value} is not a media type (type/subtype)"
        )),
    }
}

/// Largest user data a task may carry, as compact JSON: a DynamoDB item holds 400 KB, and the
/// data is copied into every task that inherits it.
pub const MAX_USER_DATA_BYTES: usize = 4096;

/// Checks user data against [`MAX_USER_DATA_BYTES`]; the error says how large it is.
pub fn check_user_data(data: &UserData) -> Result<(), String> {
    let size = serde_json::to_vec(data).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_USER_DATA_BYTES {
        return Err(format!(
            "data is {size} bytes as JSON; at most {MAX_USER_DATA_BYTES}"
        ));
    }
    Ok(())
}

/// `Task::due_at` from the fields it reads (what a status-index projection holds too).
pub fn due_at(
    status: Status,
    updated_at: Millis,
    next_attempt_at: Option<Millis>,
    next_fetch_at: Option<Millis>,
    lease_expires_at: Option<Millis>,
) -> Option<Millis> {
    match status {
        Status::Pending => Some(updated_at),
        Status::Failed => Some(next_attempt_at.unwrap_or(updated_at)),
        Status::Succeeded | Status::Gone => next_fetch_at,
        Status::InProgress => Some(lease_expires_at.unwrap_or(updated_at)),
        Status::Ignored => None,
    }
}

impl Task {
    /// Its place in its host's due index: pending now (in seed or reschedule order), failed at
    /// its next attempt, succeeded or gone when its page is fetched again (a recrawl, a check:
    /// `crate::revisit`), in progress when its lease expires: a task whose holder died is due
    /// work of its host, taken over by the host's next turn (no other index needs to list it).
    /// Ignored tasks are never due. A host's turn takes its tasks in this order, a pending task
    /// moved earlier by its priority (`Task::due_key`).
    pub fn due_at(&self) -> Option<Millis> {
        due_at(
            self.status,
            self.updated_at,
            self.next_attempt_at,
            self.fetch.as_ref().and_then(|f| f.next_fetch_at),
            self.lease_expires_at,
        )
    }

    /// Its place in its host's due list (`crate::priority::due_key`): its due time, moved
    /// earlier by its priority while pending.
    pub fn due_key(&self) -> Option<Millis> {
        crate::priority::due_key(self.status, self.due_at(), self.priority)
    }

    /// The host the task is scheduled under (`canonical::host_key`).
    pub fn host(&self) -> String {
        crate::canonical::host_key_of(&self.url)
    }
}

/// A task to seed: a canonical URL with its crawl-graph position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub url: crate::canonical::CanonicalUrl,
    pub depth: u32,
    pub parent: Option<TaskId>,
    /// User data (checked against [`MAX_USER_DATA_BYTES`] where it enters trawl).
    pub data: Option<UserData>,
    /// Its priority (`crate::priority`: `Priority::of_seed`, `Priority::of_link`).
    pub priority: Priority,
    /// Its lane (`crate::lane::of_task`); None in a crawl without lanes.
    pub lane: Option<String>,
}

impl NewTask {
    /// Its id: its URL's, with its request's when its data gives one that is more than a GET
    /// (`crate::chain::task_id`).
    pub fn task_id(&self) -> TaskId {
        crate::chain::task_id(&self.url, self.data.as_ref())
    }
}

/// A granted claim: proof that this worker, and only it, may finish the task until `expires_at`.
/// It also carries what the claim saw that the fenced writes build on: the token guarantees
/// nobody changed the task since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub crawl_id: CrawlId,
    pub task_id: TaskId,
    pub token: u64,
    pub expires_at: Millis,
    /// Transient failures before this attempt.
    pub retries: u32,
    /// The error history before this attempt.
    pub errors: Vec<ErrorRecord>,
    /// The page's fetch record before this attempt: what a 404 or a failed recrawl keeps.
    pub fetch: Option<FetchRecord>,
    /// How the lease was taken, which decides what its fenced writes require.
    pub kind: LeaseKind,
}

/// How a lease on a task was taken (`crate::transition::fenced`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LeaseKind {
    /// A claim wrote it: the task is `in_progress` under the lease's token until it expires.
    #[default]
    Written,
    /// Read inside a host turn, which holds its host's fenced lease: no write. The task stays as
    /// read, due, at its token; the first fenced write under the lease moves the token, so that
    /// of two holders of one read (a turn that outlived its host lease, and the next turn) only
    /// the first write lands. A holder that dies leaves the task due: the next turn takes it.
    InTurn,
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_delivered_data_leaves_the_pushed_content_out() {
        let data: UserData = serde_json::from_value(serde_json::json!(
            {"_content": "<html>body</html>", "_mime_type": "text/html", "shop": 3}
        ))
        .unwrap();
        let delivered = delivered_data(Some(&data)).unwrap();
        assert!(!delivered.contains_key(CONTENT_KEY));
        assert_eq!(delivered.len(), 2);
        let only: UserData = serde_json::from_value(serde_json::json!({"_content": "x"})).unwrap();
        assert_eq!(delivered_data(Some(&only)), None);
        assert_eq!(delivered_data(None), None);
    }

    use super::*;

    #[test]
    fn a_given_media_type_is_taken_when_it_is_type_slash_subtype_and_refused_otherwise() {
        let data = |value: serde_json::Value| {
            let mut data = UserData::new();
            data.insert(MIME_TYPE_KEY.to_owned(), value);
            data
        };
        assert_eq!(given_content_type(None), Ok(None));
        assert_eq!(given_content_type(Some(&UserData::new())), Ok(None));
        let pdf = data("application/pdf".into());
        assert_eq!(given_content_type(Some(&pdf)), Ok(Some("application/pdf")));
        let docx = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";
        let word = data(docx.into());
        assert_eq!(given_content_type(Some(&word)), Ok(Some(docx)));
        for bad in [
            serde_json::json!("pdf"),
            serde_json::json!("text/"),
            serde_json::json!("/html"),
            serde_json::json!("text/html; charset=utf-8"),
            serde_json::json!(7),
            serde_json::json!(null),
            serde_json::json!("a/".to_owned() + &"b".repeat(200)),
        ] {
            let error = given_content_type(Some(&data(bad.clone()))).unwrap_err();
            assert!(error.contains(MIME_TYPE_KEY), "{bad}: {error}");
        }
    }

    #[test]
    fn a_pages_analysis_is_tidied_bounded_and_takes_the_pages_language_first() {
        let long = "word ".repeat(200);
        let analysis = PageAnalysis::new(
            Some("  Shoes \n\t for   sale "),
            Some(&long),
            Some("pt-BR"),
            Some("en"),
        );
        assert_eq!(analysis.title.as_deref(), Some("Shoes for sale"));
        let description = analysis.description.unwrap();
        assert!(description.len() <= PageAnalysis::DESCRIPTION_BYTES);
        assert!(description.starts_with("word word") && !description.ends_with(' '));
        assert_eq!(analysis.language.as_deref(), Some("pt-BR"));
        // A page without an `<html lang>` (or with a malformed one) takes the first language
        // its meta tag declares; empty values are none.
        let header =
            PageAnalysis::new(Some(" "), None, Some("en US<script>"), Some("de, en;q=0.5"));
        assert_eq!(
            header,
            PageAnalysis {
                language: Some("de".into()),
                ..PageAnalysis::default()
            }
        );
        assert_eq!(
            PageAnalysis::new(None, None, None, None),
            PageAnalysis::default()
        );
        // A title cut inside a multi-byte character keeps whole characters.
        let title = "é".repeat(PageAnalysis::TITLE_BYTES);
        let cut = PageAnalysis::new(Some(&title), None, None, None)
            .title
            .unwrap();
        assert_eq!(cut.len(), PageAnalysis::TITLE_BYTES);
    }

    #[test]
    fn a_text_keeps_its_lines_tidied_and_is_cut_on_a_character_boundary_and_marked() {
        let text = PageAnalysis::default().with_text("  Intro \n\n\t  body   text\n   \nend ");
        assert_eq!(text.text.as_deref(), Some("Intro\nbody text\nend"));
        assert!(!text.text_cut);
        // A text past the bound keeps whole characters, and says it was cut.
        let long = "é".repeat(PageAnalysis::TEXT_BYTES);
        let cut = PageAnalysis::default().with_text(&long);
        assert_eq!(
            cut.text.as_ref().map(String::len),
            Some(PageAnalysis::TEXT_BYTES)
        );
        assert!(cut.text_cut);
        // Blank text is none; an error replaces any text.
        assert_eq!(
            PageAnalysis::default().with_text(" \n "),
            PageAnalysis::default()
        );
        let failed = cut.with_text_error(TextError::Malformed);
        assert_eq!(
            (failed.text, failed.text_cut, failed.text_error),
            (None, false, Some(TextError::Malformed))
        );
    }

    #[test]
    fn status_codes_are_the_seed_codes() {
        let codes: Vec<u8> = Status::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [10, 20, 30, 40, 50, 60]);
        assert_eq!(serde_json::to_string(&Status::Succeeded).unwrap(), "40");
        assert_eq!(serde_json::from_str::<Status>("60").unwrap(), Status::Gone);
        assert!(serde_json::from_str::<Status>("61").is_err());
        assert_eq!(Status::from_name("in_progress"), Some(Status::InProgress));
    }

    #[test]
    fn error_history_is_bounded_and_short() {
        let mut history = Vec::new();
        for i in 0..5 {
            push_error(
                &mut history,
                ErrorRecord::new(ErrorKind::Timeout, &"é".repeat(300), i),
            );
        }
        assert_eq!(history.len(), ERROR_HISTORY);
        assert_eq!(history[0].at, 2);
        assert!(history.iter().all(|e| e.message.len() <= MAX_ERROR_MESSAGE));
    }
}
