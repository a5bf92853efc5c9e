//! Faults at the ports, for the embedded backend (SQLite + files), where no HTTP runs between
//! trawl and its storage: [`FaultyStore`] (the faults as a layer around the store's calls,
//! `trawl_core::store::layer`) and [`FaultyBlobs`] wrap the real adapters and, per call,
//! answer a retryable error without calling through, add latency, or crash the process at one
//! of three points: after a claim was written, after a body was PUT, before a finish.
//!
//! As with the proxy, the fate of a call depends only on the seed and the call's number, so a
//! run with the same seed and the same order of calls meets the same faults. A crash either
//! aborts the process ([`CrashMode::Abort`]: a real crash, for a child process) or, in a test,
//! never returns and raises [`PortFaults::crashed`], so the test drops the whole run as a crash
//! would and starts it again on the same data.

use crate::splitmix64;
use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use trawl_core::blob::{
    Appended, BlobError, BlobResult, BlobStore, BlobUpload, Body, ListPage, ObjectMeta,
};
use trawl_core::store::layer::{Call, Layer, Layered, Outcome};
use trawl_core::store::{StoreError, StoreResult};
use trawl_domain::transition::Event;

/// The shares of port calls that meet a fault (each in 0..=1).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortMix {
    /// Answered with a retryable error, not called through.
    pub errors: f64,
    /// Delayed by 1 to 20 ms, then called through.
    pub latency: f64,
    /// Of the calls at a crash point (claim, body PUT, finish), the share that crashes there.
    pub crash: f64,
}

/// A fault injected at a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortFault {
    Error,
    Latency,
    /// The claim was written, then the process died.
    CrashAfterClaim,
    /// The body was stored, then the process died before its finish.
    CrashAfterPut,
    /// The process died just before writing a finish.
    CrashBeforeFinish,
}

impl PortFault {
    pub const ALL: [PortFault; 5] = [
        PortFault::Error,
        PortFault::Latency,
        PortFault::CrashAfterClaim,
        PortFault::CrashAfterPut,
        PortFault::CrashBeforeFinish,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PortFault::Error => "error",
            PortFault::Latency => "latency",
            PortFault::CrashAfterClaim => "crash_after_claim",
            PortFault::CrashAfterPut => "crash_after_put",
            PortFault::CrashBeforeFinish => "crash_before_finish",
        }
    }
}

/// What a crash does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// `std::process::abort()`: the process dies on the spot.
    Abort,
    /// The call never returns and [`PortFaults::crashed`] resolves: the caller drops the run.
    Halt,
}

/// Port calls seen and faults injected so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortCounts {
    pub calls: u64,
    /// Per fault, in the order of [`PortFault::ALL`].
    pub injected: [u64; 5],
}

impl PortCounts {
    pub fn of(&self, fault: PortFault) -> u64 {
        self.injected[fault as usize]
    }

    pub fn add(&mut self, other: &PortCounts) {
        self.calls += other.calls;
        for (a, b) in self.injected.iter_mut().zip(other.injected) {
            *a += b;
        }
    }

    /// One JSON object, for a child process to report to its parent.
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        out.insert("calls".into(), self.calls.into());
        for fault in PortFault::ALL {
            out.insert(fault.name().into(), self.of(fault).into());
        }
        serde_json::Value::Object(out)
    }

    pub fn from_json(value: &serde_json::Value) -> PortCounts {
        let get = |name: &str| value[name].as_u64().unwrap_or(0);
        PortCounts {
            calls: get("calls"),
            injected: PortFault::ALL.map(|f| get(f.name())),
        }
    }
}

/// The faults shared by the wrappers of one run.
#[derive(Debug)]
pub struct PortFaults {
    seed: u64,
    mix: PortMix,
    mode: CrashMode,
    next: AtomicU64,
    injected: [AtomicU64; 5],
    crashed: AtomicBool,
    /// Where an aborting crash writes the counts first (its parent sums them).
    report: Option<std::path::PathBuf>,
    /// Writes still to apply with their answer lost, by operation (`lose_answers`).
    answers_to_lose: std::sync::Mutex<HashMap<&'static str, u64>>,
    /// Task writes after which the worker crashes, by operation (`crash_after`).
    crashes_after: std::sync::Mutex<HashMap<&'static str, u64>>,
    /// Calls still to refuse with a retryable error, by operation (`fail_next`).
    failures: std::sync::Mutex<HashMap<&'static str, u64>>,
}

/// What happens to one call.
enum Fate {
    Error,
    Latency(Duration),
    Crash,
    Through,
}

impl PortFaults {
    pub fn new(seed: u64, mix: PortMix, mode: CrashMode) -> Self {
        Self {
            seed,
            mix,
            mode,
            next: AtomicU64::new(0),
            injected: Default::default(),
            crashed: AtomicBool::new(false),
            report: None,
            answers_to_lose: Default::default(),
            crashes_after: Default::default(),
            failures: Default::default(),
        }
    }

    /// The next `n` calls of `operation` (`due_tasks`, `put_host`, …) answer a retryable error
    /// without being made (a targeted fault, besides the mix).
    pub fn fail_next(&self, operation: &'static str, n: u64) {
        set_count(&self.failures, operation, n);
    }

    /// The next `n` task writes of `operation` (by their event: `finish`, …) are applied, then
    /// the worker crashes as `mode` says, before anything else it would have written (a
    /// targeted crash point, besides the mix: a finish's host hand-back, say, never made).
    pub fn crash_after(&self, operation: &'static str, n: u64) {
        set_count(&self.crashes_after, operation, n);
    }

    /// After an applied task write of `operation`: the targeted crash, when one is due.
    async fn after_write(&self, operation: &'static str) {
        if take_one(&self.crashes_after, operation) {
            tracing::warn!(operation, "targeted crash after the write (trawl-faults)");
            self.crash().await;
        }
    }

    /// The next `n` writes of `operation` (`put_host`, `add_seeded`, a crawl write by its
    /// event's name: `complete_crawl`, `reserve_pages`, `add_calls`; a task transition by
    /// its event: `finish`, …) are applied, then answer a retryable error: their answer was
    /// lost (a targeted fault, besides the mix).
    pub fn lose_answers(&self, operation: &'static str, n: u64) {
        set_count(&self.answers_to_lose, operation, n);
    }

    /// After an applied write of `operation`: its answer lost, when one is to be.
    fn lose_answer(&self, operation: &'static str) -> StoreResult<()> {
        match take_one(&self.answers_to_lose, operation) {
            true => Err(StoreError::unavailable(
                operation,
                "answer lost (trawl-faults)",
            )),
            false => Ok(()),
        }
    }

    /// An aborting crash first writes the counts to `path`.
    pub fn reporting_to(mut self, path: std::path::PathBuf) -> Self {
        self.report = Some(path);
        self
    }

    pub fn counts(&self) -> PortCounts {
        PortCounts {
            calls: self.next.load(Ordering::Relaxed),
            injected: std::array::from_fn(|i| self.injected[i].load(Ordering::Relaxed)),
        }
    }

    /// Resolves once a halting crash happened.
    pub async fn crashed(&self) {
        while !self.crashed.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn count(&self, fault: PortFault) {
        self.injected[fault as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The fate of the next call; `crash_point` when the call is one.
    fn fate(&self, crash_point: bool) -> Fate {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let draw = splitmix64(self.seed ^ splitmix64(n));
        let share = |x: u64| (x >> 11) as f64 / (1u64 << 53) as f64;
        let second = splitmix64(draw);
        if crash_point && share(second) < self.mix.crash {
            return Fate::Crash;
        }
        let first = share(draw);
        if first < self.mix.errors {
            Fate::Error
        } else if first < self.mix.errors + self.mix.latency {
            Fate::Latency(Duration::from_millis(1 + second % 20))
        } else {
            Fate::Through
        }
    }

    /// Before a call: an error to answer instead (the message), or after a pause, nothing.
    async fn fault(&self) -> Result<(), String> {
        match self.fate(false) {
            Fate::Error => {
                self.count(PortFault::Error);
                Err("injected by trawl-faults".to_owned())
            }
            Fate::Latency(pause) => {
                self.count(PortFault::Latency);
                tokio::time::sleep(pause).await;
                Ok(())
            }
            Fate::Crash | Fate::Through => Ok(()),
        }
    }

    /// At a crash point: crashes on a draw, as `point`.
    async fn crash_point(&self, point: PortFault) {
        if !matches!(self.fate(true), Fate::Crash) {
            return;
        }
        self.count(point);
        tracing::warn!(point = point.name(), "crash injected by trawl-faults");
        self.crash().await;
    }

    /// Crashes as the mode says.
    async fn crash(&self) {
        match self.mode {
            CrashMode::Abort => {
                if let Some(path) = &self.report {
                    let _ = std::fs::write(path, self.counts().to_json().to_string());
                }
                std::process::abort();
            }
            CrashMode::Halt => {
                self.crashed.store(true, Ordering::Relaxed);
                std::future::pending::<()>().await;
            }
        }
    }

    async fn blob_call(&self, operation: &'static str, key: &str) -> BlobResult<()> {
        self.fault()
            .await
            .map_err(|message| BlobError::unavailable(operation, key, message))
    }
}

/// A status store whose calls meet [`PortFaults`] (a layer: `FaultyStore::new(inner, faults)`).
pub type FaultyStore<S> = Layered<S, Arc<PortFaults>>;

/// Counts for operation `operation` from now: `n` more of them.
fn set_count(
    counts: &std::sync::Mutex<HashMap<&'static str, u64>>,
    operation: &'static str,
    n: u64,
) {
    counts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(operation, n);
}

/// Whether `operation` has one left in `counts`, taking it.
fn take_one(counts: &std::sync::Mutex<HashMap<&'static str, u64>>, operation: &str) -> bool {
    let mut counts = counts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match counts.get_mut(operation) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// An object store whose calls meet [`PortFaults`].
pub struct FaultyBlobs<B> {
    pub inner: B,
    pub faults: Arc<PortFaults>,
}

/// A finish may crash just before its write, a claim just after it; a task write may crash the
/// worker at a targeted point (`PortFaults::crash_after`), and a write lose its answer
/// (`PortFaults::lose_answers`, by the operation's name).
impl Layer for PortFaults {
    type Before = ();

    async fn before(&self, call: &Call<'_>) -> StoreResult<()> {
        if let Call::Apply { update, .. } = call
            && update.event == Event::Finish
        {
            self.crash_point(PortFault::CrashBeforeFinish).await;
        }
        if take_one(&self.failures, call.name()) {
            self.count(PortFault::Error);
            return Err(StoreError::unavailable(
                call.name(),
                "refused as asked (trawl-faults)",
            ));
        }
        self.fault()
            .await
            .map_err(|message| StoreError::unavailable(call.name(), message))
    }

    async fn after(&self, call: &Call<'_>, (): (), outcome: Outcome<'_>) -> StoreResult<()> {
        if let (Call::Apply { update, .. }, Outcome::Task(applied)) = (call, outcome)
            && applied.is_done()
        {
            if matches!(update.event, Event::Claim | Event::ClaimInTurn) {
                self.crash_point(PortFault::CrashAfterClaim).await;
            }
            self.after_write(call.name()).await;
        }
        match call {
            Call::Apply { .. }
            | Call::ApplyCrawl { .. }
            | Call::ReportCalls { .. }
            | Call::PutHost { .. }
            | Call::AddSeeded { .. } => self.lose_answer(call.name()),
            _ => Ok(()),
        }
    }
}

impl<B: BlobStore> BlobStore for FaultyBlobs<B> {
    async fn put(&self, key: &str, body: Body, meta: &ObjectMeta) -> BlobResult<()> {
        self.faults.blob_call("put", key).await?;
        self.inner.put(key, body, meta).await?;
        if key.contains("/attr=html/") {
            self.faults.crash_point(PortFault::CrashAfterPut).await;
        }
        Ok(())
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        self.faults.blob_call("get", key).await?;
        self.inner.get(key).await
    }

    fn gather_bytes(&self) -> u64 {
        self.inner.gather_bytes()
    }

    fn is_appending(&self, key: &str) -> bool {
        self.inner.is_appending(key)
    }

    async fn append(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        self.faults.blob_call("append", dir).await?;
        let appended = self.inner.append(dir, records).await?;
        self.faults.crash_point(PortFault::CrashAfterPut).await;
        Ok(appended)
    }

    async fn get_range(&self, key: &str, offset: u64, length: u64) -> BlobResult<Option<Bytes>> {
        self.faults.blob_call("get_range", key).await?;
        self.inner.get_range(key, offset, length).await
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        self.faults.blob_call("delete", key).await?;
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        self.faults.blob_call("list", prefix).await?;
        self.inner.list(prefix).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> BlobResult<ListPage> {
        self.faults.blob_call("list_page", prefix).await?;
        self.inner.list_page(prefix, start_after, limit).await
    }

    fn upload(
        &self,
        key: &str,
        content_type: &str,
    ) -> impl Future<Output = BlobResult<impl BlobUpload>> + Send {
        // Streamed uploads (deliveries) pass through: a delivery's retries are its own.
        self.inner.upload(key, content_type)
    }
}
