//! The embedded work queue: in memory, with SQS FIFO's delivery rules and per-message delays.
//!
//! - Messages of one `group` (a host's turns: `WorkMessage::group`) are delivered in send order,
//!   and a group is locked while its head message is held: delayed by its send, in flight (until
//!   acked or its visibility timeout lapses) or put back with `retry_later` (until the delay runs
//!   out), as with SQS FIFO's MessageGroupId. The host record's fenced turn is what keeps a host
//!   to one worker; the group only keeps its turns in order.
//! - Of the groups whose head is deliverable, the one whose head has the highest priority
//!   (`WorkMessage::priority`: its host's due work) is delivered first, then the oldest head:
//!   where a runner has a choice of hosts, high-priority work gets its turn first. (SQS has no
//!   priorities; on AWS such turns go to a queue of their own: `trawl_domain::priority::TurnQueue`.)
//! - An unacked message is delivered again after the visibility timeout.
//! - Every delivery has its own receipt; a receipt from an earlier delivery acks nothing.
//! - A message is counted at each receive. One its consumer rejects (`reject`, a malformed body)
//!   after its [`MAX_RECEIVES`]th receive goes to the queue's dead letters, as the crawl queue's
//!   redrive policy does on AWS, and its group moves on to its next message. Messages handed back
//!   with `retry_later` (a busy or snoozed host) are never dead-lettered, however often.
//!
//! It does not survive a restart: the embedded backend rebuilds it from the task table and the
//! host records (`runner::rebuild_local_queue`).
//!
//! Its delays, visibility timeouts and waits are on a [`Clock`] (the system's unless given
//! one: `on_clock`), the same as the App's, so an embedded run on virtual time waits on neither.

use super::{DeadLetter, QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use crate::clock::{Clock, SystemClock};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::task::Priority;

/// Most messages one receive returns, and one send batch holds (SQS's limits).
const BATCH: usize = 10;

/// Longest visibility timeout, retry delay or wait honoured (SQS's visibility maximum, 12 h).
const MAX_DELAY: Duration = Duration::from_secs(12 * 3600);

/// Receives after which a rejected message goes to the dead letters: the crawl queue's
/// `maxReceiveCount` in the SAM template, so that a malformed message gets as many deliveries
/// (and error lines) on one machine as on AWS.
pub const MAX_RECEIVES: u32 = 5;

/// An in-process FIFO work queue.
pub struct LocalQueue {
    state: Mutex<State>,
    /// Signalled whenever a message may have become deliverable (send, ack, retry_later).
    changed: Notify,
    visibility_timeout: Duration,
    calls: Arc<CallCounts>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQueue")
            .field("state", &self.state)
            .field("visibility_timeout", &self.visibility_timeout)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Message {
    seq: u64,
    priority: Priority,
    body: String,
    /// Deliveries so far.
    receives: u32,
}

/// What holds a group's head message back.
#[derive(Debug)]
enum Head {
    /// Deliverable now.
    Ready,
    /// Delivered under `receipt` (in flight, or delayed by `retry_later`) until `until`.
    Held { receipt: String, until: Instant },
}

#[derive(Debug)]
struct Group {
    messages: VecDeque<Message>,
    head: Head,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    next_delivery: u64,
    groups: HashMap<String, Group>,
    /// Groups whose head is deliverable, highest priority first, then oldest head first.
    ready: BTreeSet<(Reverse<Priority>, u64, String)>,
    /// Groups whose head is held, by release time.
    held: BTreeSet<(Instant, String)>,
    /// Receipt of each held head → its group.
    receipts: HashMap<String, String>,
    len: usize,
    /// Rejected messages given up on, oldest first (not counted in `len`).
    dead_letters: Vec<DeadLetter>,
}

impl State {
    /// Adds a message, deliverable once `hold_until` (if any) has passed.
    fn push(&mut self, group: &str, body: String, priority: Priority, hold_until: Option<Instant>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let message = Message {
            seq,
            priority,
            body,
            receives: 0,
        };
        match self.groups.get_mut(group) {
            Some(existing) => existing.messages.push_back(message),
            None => {
                let head = match hold_until {
                    Some(until) => {
                        // A delayed send: held like a delivered head, under a receipt no one has.
                        let receipt = format!("delay.{seq}");
                        self.receipts.insert(receipt.clone(), group.to_owned());
                        self.held.insert((until, group.to_owned()));
                        Head::Held { receipt, until }
                    }
                    None => {
                        self.ready
                            .insert((Reverse(priority), seq, group.to_owned()));
                        Head::Ready
                    }
                };
                self.groups.insert(
                    group.to_owned(),
                    Group {
                        messages: VecDeque::from([message]),
                        head,
                    },
                );
            }
        }
        self.len += 1;
    }

    /// Makes a group's head deliverable again (its receipt dies with the hold).
    fn release(&mut self, group: &str) {
        let Some(entry) = self.groups.get_mut(group) else {
            return;
        };
        if let Head::Held { receipt, until } = std::mem::replace(&mut entry.head, Head::Ready) {
            self.receipts.remove(&receipt);
            self.held.remove(&(until, group.to_owned()));
        }
        if let Some(front) = entry.messages.front() {
            self.ready
                .insert((Reverse(front.priority), front.seq, group.to_owned()));
        }
    }

    /// Releases every hold that has lapsed by `now`.
    fn release_lapsed(&mut self, now: Instant) {
        while let Some((until, group)) = self.held.first().cloned() {
            if until > now {
                break;
            }
            self.release(&group);
        }
    }

    fn deliver(&mut self, max: usize, now: Instant, visibility: Duration) -> Vec<Received> {
        self.release_lapsed(now);
        let mut out = Vec::new();
        while out.len() < max {
            let Some((_, _, group)) = self.ready.pop_first() else {
                break;
            };
            let Some(entry) = self.groups.get_mut(&group) else {
                continue;
            };
            let Some(front) = entry.messages.front_mut() else {
                continue;
            };
            let receipt = format!("{}.{}", front.seq, self.next_delivery);
            self.next_delivery += 1;
            front.receives += 1;
            let until = now + visibility;
            out.push(Received {
                message_id: front.seq.to_string(),
                receipt: receipt.clone(),
                body: front.body.clone(),
                receives: front.receives,
            });
            entry.head = Head::Held {
                receipt: receipt.clone(),
                until,
            };
            self.held.insert((until, group.clone()));
            self.receipts.insert(receipt, group);
        }
        out
    }

    /// Removes the head `receipt` holds, if it still holds it; its group's next message becomes
    /// deliverable.
    fn ack(&mut self, receipt: &str) -> Option<Message> {
        let group = self.receipts.remove(receipt)?;
        let entry = self.groups.get_mut(&group)?;
        if let Head::Held { until, .. } = std::mem::replace(&mut entry.head, Head::Ready) {
            self.held.remove(&(until, group.clone()));
        }
        let removed = entry.messages.pop_front();
        if removed.is_some() {
            self.len -= 1;
        }
        match entry.messages.front() {
            Some(next) => {
                self.ready.insert((Reverse(next.priority), next.seq, group));
            }
            None => {
                self.groups.remove(&group);
            }
        }
        removed
    }

    /// Moves the head `receipt` holds to the dead letters once it has been received
    /// [`MAX_RECEIVES`] times (returning it), else puts it back like `retry_later`.
    fn reject(&mut self, receipt: &str, delay: Duration, now: Instant) -> Option<DeadLetter> {
        let group = self.receipts.get(receipt)?;
        let receives = self.groups.get(group)?.messages.front()?.receives;
        if receives < MAX_RECEIVES {
            self.retry_later(receipt, delay, now);
            return None;
        }
        let message = self.ack(receipt)?;
        let dead = DeadLetter {
            message_id: message.seq.to_string(),
            body: message.body,
            receives: message.receives,
        };
        self.dead_letters.push(dead.clone());
        Some(dead)
    }

    fn retry_later(&mut self, receipt: &str, delay: Duration, now: Instant) {
        let Some(group) = self.receipts.get(receipt).cloned() else {
            return;
        };
        if delay.is_zero() {
            self.release(&group);
            return;
        }
        let Some(entry) = self.groups.get_mut(&group) else {
            return;
        };
        if let Head::Held { until, .. } = &mut entry.head {
            self.held.remove(&(*until, group.clone()));
            *until = now + delay;
            self.held.insert((*until, group));
        }
    }
}

impl LocalQueue {
    /// An empty queue; a received message is delivered again if not acked within
    /// `visibility_timeout` (capped at 12 h, as in SQS).
    pub fn new(visibility_timeout: Duration, calls: Arc<CallCounts>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            visibility_timeout: visibility_timeout.min(MAX_DELAY),
            calls,
            clock: Arc::new(SystemClock),
        }
    }

    /// The same queue keeping its time on `clock` (the App's).
    pub fn on_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Messages not yet acked: deliverable, in flight or delayed.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages rejected after [`MAX_RECEIVES`] receives, oldest first: this queue's
    /// dead-letter queue, kept in memory for the life of the process.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        self.lock().dead_letters.clone()
    }

    /// No code path panics while holding the lock, so a poisoned lock still guards a
    /// consistent state.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WorkQueue for LocalQueue {
    async fn send(&self, messages: &[WorkMessage]) -> QueueResult<SendReport> {
        let mut report = SendReport::default();
        {
            let now = self.clock.instant();
            let mut state = self.lock();
            for batch in messages.chunks(BATCH) {
                self.calls.record(Call::LocalQueueSend);
                for message in batch {
                    match serde_json::to_string(message) {
                        Ok(body) => {
                            let delay = Duration::from_millis(message.delay_ms).min(MAX_DELAY);
                            let hold = (!delay.is_zero()).then(|| now + delay);
                            state.push(&message.group(), body, message.priority, hold);
                            report.sent += 1;
                        }
                        Err(e) => report.failed.push((message.host.clone(), e.to_string())),
                    }
                }
            }
        }
        if report.sent > 0 {
            self.changed.notify_waiters();
        }
        Ok(report)
    }

    async fn receive(&self, max: u32, wait_ms: u64) -> QueueResult<Vec<Received>> {
        self.calls.record(Call::LocalQueueReceive);
        let max = (max as usize).clamp(1, BATCH);
        let deadline = self.clock.instant() + Duration::from_millis(wait_ms).min(MAX_DELAY);
        loop {
            // Registered before looking, so a change made after the look still wakes us.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let next_release = {
                let mut state = self.lock();
                let received = state.deliver(max, self.clock.instant(), self.visibility_timeout);
                if !received.is_empty() {
                    return Ok(received);
                }
                state.held.first().map(|(until, _)| *until)
            };
            if self.clock.instant() >= deadline {
                return Ok(Vec::new());
            }
            let wake = next_release.map_or(deadline, |until| until.min(deadline));
            tokio::select! {
                () = &mut changed => {}
                () = self.clock.sleep_until(wake) => {}
            }
        }
    }

    async fn ack(&self, receipts: &[String]) -> QueueResult<()> {
        {
            let mut state = self.lock();
            for receipt in receipts {
                state.ack(receipt);
            }
        }
        self.changed.notify_waiters();
        Ok(())
    }

    /// Only rejected messages count toward this queue's dead letters.
    fn counts_hand_backs(&self) -> bool {
        false
    }

    async fn retry_later(&self, receipt: &str, delay_ms: u64) -> QueueResult<()> {
        let delay = Duration::from_millis(delay_ms).min(MAX_DELAY);
        self.lock()
            .retry_later(receipt, delay, self.clock.instant());
        self.changed.notify_waiters();
        Ok(())
    }

    async fn reject(&self, receipt: &str, delay_ms: u64) -> QueueResult<Option<DeadLetter>> {
        let delay = Duration::from_millis(delay_ms).min(MAX_DELAY);
        let dead = self.lock().reject(receipt, delay, self.clock.instant());
        self.changed.notify_waiters();
        Ok(dead)
    }

    fn is_drained(&self) -> Option<bool> {
        Some(self.is_empty())
    }

    async fn depth(&self) -> QueueResult<Option<u64>> {
        Ok(Some(self.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::canonical::CrawlId;

    /// Turn `n` of host `{group}.test` (its epoch).
    fn message(group: &str, n: usize) -> WorkMessage {
        WorkMessage::new(
            CrawlId::parse("c1").unwrap(),
            format!("{group}.test"),
            n as u64,
            0,
        )
    }

    /// `http://{host}/{epoch}`: which message this is.
    fn url_of(received: &Received) -> String {
        let message = serde_json::from_str::<WorkMessage>(&received.body).unwrap();
        format!("http://{}/{}", message.host, message.epoch)
    }

    fn queue(visibility_ms: u64) -> LocalQueue {
        LocalQueue::new(
            Duration::from_millis(visibility_ms),
            Arc::new(CallCounts::default()),
        )
    }

    #[tokio::test]
    async fn a_group_delivers_in_order_one_message_at_a_time() {
        // GIVEN three messages of group a and one of group b
        let queue = queue(60_000);
        let sent = [
            message("a", 1),
            message("a", 2),
            message("b", 1),
            message("a", 3),
        ];
        queue.send(&sent).await.unwrap();

        // WHEN receiving while earlier messages are in flight, then after acks
        let first = queue.receive(10, 0).await.unwrap();
        let blocked = queue.receive(10, 0).await.unwrap();
        queue.ack(&[first[0].receipt.clone()]).await.unwrap();
        let second = queue.receive(10, 0).await.unwrap();
        queue
            .ack(&[first[1].receipt.clone(), second[0].receipt.clone()])
            .await
            .unwrap();
        let third = queue.receive(10, 0).await.unwrap();

        // THEN each group's head comes alone, in send order
        let urls = |r: &[Received]| r.iter().map(url_of).collect::<Vec<_>>();
        assert_eq!(urls(&first), ["http://a.test/1", "http://b.test/1"]);
        assert!(blocked.is_empty());
        assert_eq!(urls(&second), ["http://a.test/2"]);
        assert_eq!(urls(&third), ["http://a.test/3"]);
        assert_eq!(queue.len(), 1);
        queue.ack(&[third[0].receipt.clone()]).await.unwrap();
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn of_the_hosts_ready_the_one_with_higher_priority_work_is_delivered_first() {
        // GIVEN three hosts' turns sent in turn, the last two carrying higher-priority work
        let queue = queue(60_000);
        let p = |n| Priority::new(n).unwrap();
        let sent = [
            message("low", 1),
            message("mid", 1).with_priority(p(3)),
            message("high", 1).with_priority(p(7)),
        ];
        queue.send(&sent).await.unwrap();

        // WHEN a runner with room for one host at a time takes them
        let mut order = Vec::new();
        for _ in 0..3 {
            let one = queue.receive(1, 0).await.unwrap();
            order.extend(one.iter().map(url_of));
            let receipts: Vec<String> = one.into_iter().map(|r| r.receipt).collect();
            queue.ack(&receipts).await.unwrap();
        }

        // THEN the highest priority goes first
        assert_eq!(
            order,
            [
                "http://high.test/1",
                "http://mid.test/1",
                "http://low.test/1"
            ]
        );
    }

    #[tokio::test]
    async fn an_unacked_message_comes_back_after_the_visibility_timeout() {
        // GIVEN a message received under a 500 ms visibility timeout
        let queue = queue(500);
        queue
            .send(&[message("a", 1), message("a", 2)])
            .await
            .unwrap();
        let first = queue.receive(10, 0).await.unwrap();
        let started = Instant::now();

        // WHEN it is not acked, and receivers wait
        let hidden = queue.receive(10, 0).await.unwrap();
        let again = queue.receive(10, 5_000).await.unwrap();

        // THEN the same message (not its successor) returns once the timeout lapsed
        assert!(hidden.is_empty());
        assert_eq!(again.len(), 1);
        assert!(started.elapsed() >= Duration::from_millis(450));
        assert_eq!(again[0].message_id, first[0].message_id);
        assert_eq!(again[0].body, first[0].body);
        assert_ne!(again[0].receipt, first[0].receipt);

        // AND the stale receipt acks nothing, while the new one does
        queue.ack(&[first[0].receipt.clone()]).await.unwrap();
        assert_eq!(queue.len(), 2);
        assert!(queue.receive(10, 0).await.unwrap().is_empty());
        queue.ack(&[again[0].receipt.clone()]).await.unwrap();
        let next = queue.receive(10, 0).await.unwrap();
        assert_eq!(url_of(&next[0]), "http://a.test/2");
        assert_ne!(next[0].message_id, first[0].message_id);
    }

    #[tokio::test]
    async fn retry_later_holds_the_group_for_the_delay() {
        // GIVEN two messages of one group, the first received
        let queue = queue(60_000);
        queue
            .send(&[message("a", 1), message("a", 2)])
            .await
            .unwrap();
        let first = queue.receive(10, 0).await.unwrap();
        let started = Instant::now();

        // WHEN it is put back for 500 ms
        queue.retry_later(&first[0].receipt, 500).await.unwrap();
        let during = queue.receive(10, 0).await.unwrap();
        let after = queue.receive(10, 5_000).await.unwrap();

        // THEN nothing of the group is delivered until the delay ran, then the same message
        assert!(during.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(450));
        assert_eq!(url_of(&after[0]), "http://a.test/1");
        assert_eq!(after[0].message_id, first[0].message_id);
        assert_ne!(after[0].receipt, first[0].receipt);

        // AND a zero delay puts it back at once; a stale receipt changes nothing
        queue.retry_later(&first[0].receipt, 0).await.unwrap();
        assert!(queue.receive(10, 0).await.unwrap().is_empty());
        queue.retry_later(&after[0].receipt, 0).await.unwrap();
        let now = queue.receive(10, 0).await.unwrap();
        assert_eq!(url_of(&now[0]), "http://a.test/1");
        assert_ne!(now[0].receipt, after[0].receipt);
    }

    #[tokio::test]
    async fn a_message_rejected_at_its_fifth_receive_is_dead_lettered_and_its_group_moves_on() {
        // GIVEN two messages of one group, and one of another
        let queue = queue(60_000);
        let sent = [message("a", 1), message("a", 2), message("b", 1)];
        queue.send(&sent).await.unwrap();

        // WHEN the oldest message is rejected on each receive
        let mut deliveries = Vec::new();
        let mut dead = None;
        for _ in 0..MAX_RECEIVES + 1 {
            let received = queue.receive(1, 0).await.unwrap();
            let [head] = received.as_slice() else {
                panic!("{received:?}");
            };
            deliveries.push(url_of(head));
            dead = queue.reject(&head.receipt, 0).await.unwrap();
            if dead.is_some() {
                break;
            }
        }

        // THEN it came MAX_RECEIVES times, then went to the dead letters as sent
        let first = serde_json::to_string(&sent[0]).unwrap();
        assert_eq!(deliveries, vec!["http://a.test/1"; MAX_RECEIVES as usize]);
        let dead = dead.unwrap();
        assert_eq!((dead.body.as_str(), dead.receives), (first.as_str(), 5));
        assert_eq!(queue.dead_letters(), [dead]);
        // AND its group's next message is delivered at once, with the other group's
        assert_eq!(queue.len(), 2);
        let next = queue.receive(10, 0).await.unwrap();
        assert_eq!(
            next.iter().map(url_of).collect::<Vec<_>>(),
            ["http://a.test/2", "http://b.test/1"]
        );
        let receipts = next.into_iter().map(|r| r.receipt).collect::<Vec<_>>();
        queue.ack(&receipts).await.unwrap();
        assert!(queue.is_empty());
        assert_eq!(queue.dead_letters().len(), 1);
    }

    #[tokio::test]
    async fn a_message_handed_back_with_retry_later_is_never_dead_lettered() {
        // GIVEN a message of a busy host
        let queue = queue(60_000);
        queue.send(&[message("a", 1)]).await.unwrap();

        // WHEN it is handed back on each of four times MAX_RECEIVES receives
        for _ in 0..4 * MAX_RECEIVES {
            let received = queue.receive(10, 0).await.unwrap();
            assert_eq!(received.len(), 1);
            queue.retry_later(&received[0].receipt, 0).await.unwrap();
        }

        // THEN it is still there, and still delivered; a stale receipt rejects nothing
        let again = queue.receive(10, 0).await.unwrap();
        assert_eq!(
            again.iter().map(url_of).collect::<Vec<_>>(),
            ["http://a.test/1"]
        );
        assert_eq!(queue.reject("0.0", 0).await.unwrap(), None);
        assert!(queue.dead_letters().is_empty());
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test]
    async fn a_waiting_receive_wakes_on_send_and_gives_up_at_its_wait() {
        // GIVEN an empty queue shared with a sender that sends after 50 ms
        let queue = Arc::new(queue(60_000));
        let sender = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                queue.send(&[message("a", 1)]).await.unwrap();
            })
        };

        // WHEN a receiver waits up to 5 s, and another then waits 100 ms on the empty group
        let woken = queue.receive(1, 5_000).await.unwrap();
        sender.await.unwrap();
        let started = Instant::now();
        let timed_out = queue.receive(1, 100).await.unwrap();

        // THEN the first gets the message, the second nothing after its full wait
        assert_eq!(woken.len(), 1);
        assert!(timed_out.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn calls_are_counted_per_batch_of_ten() {
        // GIVEN a queue with its own counters
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(60), Arc::clone(&calls));

        // WHEN 25 messages of 25 groups are sent and read 10 at a time
        let messages: Vec<_> = (0..25).map(|n| message(&format!("h{n}"), n)).collect();
        let report = queue.send(&messages).await.unwrap();
        let mut received = 0;
        for _ in 0..3 {
            received += queue.receive(50, 0).await.unwrap().len();
        }

        // THEN 3 sends and 3 receives were counted, and no receive exceeded 10
        assert_eq!((report.sent, report.failed.len()), (25, 0));
        assert_eq!(received, 25);
        assert_eq!(calls.get(Call::LocalQueueSend), 3);
        assert_eq!(calls.get(Call::LocalQueueReceive), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_consumers_never_hold_two_messages_of_one_group() {
        // GIVEN 2 groups of 10 messages and 4 consumers
        let queue = Arc::new(queue(60_000));
        let messages: Vec<_> = (0..10)
            .flat_map(|n| [message("a", n), message("b", n)])
            .collect();
        queue.send(&messages).await.unwrap();
        let processed = Arc::new(Mutex::new(Vec::new()));
        let busy: Arc<Mutex<BTreeSet<String>>> = Arc::default();

        // WHEN they receive, "work" briefly and ack, until the queue is drained
        let mut consumers = Vec::new();
        for _ in 0..4 {
            let (queue, processed, busy) = (
                Arc::clone(&queue),
                Arc::clone(&processed),
                Arc::clone(&busy),
            );
            consumers.push(tokio::spawn(async move {
                for _ in 0..100 {
                    if queue.is_empty() {
                        break;
                    }
                    for received in queue.receive(10, 50).await.unwrap() {
                        let work: WorkMessage = serde_json::from_str(&received.body).unwrap();
                        // THEN no group is ever being worked on twice at once
                        assert!(busy.lock().unwrap().insert(work.group()), "{work:?}");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        processed.lock().unwrap().push(url_of(&received));
                        busy.lock().unwrap().remove(&work.group());
                        queue.ack(&[received.receipt]).await.unwrap();
                    }
                }
            }));
        }
        for consumer in consumers {
            consumer.await.unwrap();
        }

        // AND every message was handled once, each group in send order
        let processed = processed.lock().unwrap().clone();
        assert_eq!(processed.len(), 20);
        for group in ["a", "b"] {
            let order: Vec<_> = processed
                .iter()
                .filter(|u| u.starts_with(&format!("http://{group}.test/")))
                .cloned()
                .collect();
            let expected: Vec<_> = (0..10)
                .map(|n| format!("http://{group}.test/{n}"))
                .collect();
            assert_eq!(order, expected);
        }
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn a_delayed_message_is_invisible_until_its_delay_runs_out() {
        // GIVEN a message sent with a 300 ms delay, and one without
        let queue = queue(60_000);
        let mut later = message("a", 1);
        later.delay_ms = 300;
        queue.send(&[later, message("b", 1)]).await.unwrap();

        // WHEN receiving at once, THEN only the undelayed one comes
        let now = queue.receive(10, 0).await.unwrap();
        assert_eq!(
            now.iter().map(url_of).collect::<Vec<_>>(),
            ["http://b.test/1"]
        );
        // AND the delayed one arrives once its delay ran out (a waiting receive wakes for it)
        let started = Instant::now();
        let after = queue.receive(10, 2_000).await.unwrap();
        assert_eq!(
            after.iter().map(url_of).collect::<Vec<_>>(),
            ["http://a.test/1"]
        );
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn on_a_virtual_clock_delays_and_visibility_pass_with_the_clock_not_in_real_time() {
        // GIVEN a queue on a virtual clock, with a 1 min visibility and a message delayed 1 h
        let clock = crate::clock::ManualClock::at(0);
        let queue = queue(60_000).on_clock(Arc::new(clock.clone()));
        let mut later = message("a", 1);
        later.delay_ms = 3_600_000;
        queue.send(&[later]).await.unwrap();
        let real = Instant::now();

        // WHEN a receive waits for up to 2 h, THEN it gets the message after 1 h of the clock
        let first = queue.receive(10, 7_200_000).await.unwrap();
        assert_eq!(
            first.iter().map(url_of).collect::<Vec<_>>(),
            ["http://a.test/1"]
        );
        assert_eq!(clock.now_ms(), 3_600_000);
        // AND, not acked, it comes back once its visibility timeout passed on the clock
        assert!(queue.receive(10, 0).await.unwrap().is_empty());
        let again = queue.receive(10, 120_000).await.unwrap();
        assert_eq!(
            again.iter().map(url_of).collect::<Vec<_>>(),
            ["http://a.test/1"]
        );
        assert_eq!(clock.now_ms(), 3_660_000);
        assert!(
            real.elapsed() < Duration::from_secs(1),
            "{:?}",
            real.elapsed()
        );
    }
}
