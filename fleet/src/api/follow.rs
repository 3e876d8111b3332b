//! The API's live streams: server-sent events over the host's run feed.
//!
//! | route                                        | events                                  |
//! |----------------------------------------------|-----------------------------------------|
//! | `GET /runs/{id}/events?follow=1[&after=SEQ]` | `event` (one row of the events page, `id:` its sequence number), then one `end` (the settled run) |
//! | `GET /jobs?follow=1[&agent=A]`               | `run` (a run as `GET /jobs` lists it: long texts cut) for every run stored or changed after the stream opened; `lagged` (`{"missed": N, "resume": …}`), then the end of the stream, when the follower fell behind: it reads `GET /jobs` again and follows anew |
//!
//! A stream of events reads the store, never the feed: a notice of the run feed
//! ([`consort_actors::feed`]) only wakes it to read what follows the last sequence number it
//! sent, and it reads again every [`REREAD_EVERY`] in case a notice came before its commit. So
//! a follower that falls behind, or a client that reconnects with `Last-Event-ID`, misses
//! nothing and gets nothing twice. A stream of runs sends what the feed carries, filtered by
//! the same listing scope as `GET /jobs` (an operator sees every run, anyone else their own).
//!
//! Each stream is one task that ends when its client goes, when its run settles, or when the
//! host stops; a comment line (`: keepalive`) every [`KEEPALIVE`] keeps proxies from closing a
//! quiet one. At most [`crate::listener::HttpBounds::max_streams`] are open at once per host;
//! one more is answered 503 `too_many_streams`. This module decides nothing about who may
//! follow what: the handlers in `api` check access before a stream starts.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc};

use crate::access::Requester;
use crate::bounds::{Holding, SharedHeld};
use crate::listener::HttpBounds;

use consort_actors::page::PAGE_MAX;
use consort_actors::{Host, RunChange, RunRecord};
use consort_net::RunId;

use super::ApiError;
use crate::access::Scope;

/// How often a quiet stream sends a comment line.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often a stream of events reads the store even without a notice.
pub(crate) const REREAD_EVERY: Duration = Duration::from_secs(2);
/// Events buffered for a client that reads slowly; a stream that is further behind waits.
const BUFFERED: usize = 64;

/// The host's budget of open streams: `max_streams` in all, of which operators alone may take
/// the last `operator_streams`, and at most `max_streams_per_principal` for any one other
/// principal (so one token never takes every slot, and the operator's own stream is never
/// refused for want of one).
#[derive(Clone)]
pub(crate) struct StreamSlots {
    all: Arc<Semaphore>,
    /// The slots other principals share.
    shared: Arc<Semaphore>,
    per_principal: SharedHeld<String>,
}

/// One open stream's slot, given back when the stream ends.
#[derive(Debug)]
pub(crate) struct StreamPermit {
    _all: OwnedSemaphorePermit,
    _shared: Option<OwnedSemaphorePermit>,
    _held: Option<Holding<String>>,
}

impl StreamSlots {
    pub(crate) fn new(bounds: &HttpBounds) -> Self {
        let max = bounds.max_streams.max(1);
        let shared = max.saturating_sub(bounds.operator_streams).max(1);
        Self {
            all: Arc::new(Semaphore::new(max)),
            shared: Arc::new(Semaphore::new(shared)),
            per_principal: SharedHeld::new(bounds.max_streams_per_principal.max(1)),
        }
    }

    /// A slot for one more stream of `who`, or the answer to give when none is left for it.
    pub(crate) fn take(&self, who: &Requester) -> Result<StreamPermit, ApiError> {
        let full = || {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams",
                "this host has as many live streams open as it serves; close one or read the pages instead",
            )
        };
        if who.is_operator() {
            let all = self.all.clone().try_acquire_owned().map_err(|_| full())?;
            return Ok(StreamPermit {
                _all: all,
                _shared: None,
                _held: None,
            });
        }
        let held = self
            .per_principal
            .hold(who.decider().to_owned())
            .ok_or_else(|| {
                ApiError::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "too_many_streams",
                    "you hold as many live streams as one caller may; close one or read the pages instead",
                )
            })?;
        let shared = self
            .shared
            .clone()
            .try_acquire_owned()
            .map_err(|_| full())?;
        let all = self.all.clone().try_acquire_owned().map_err(|_| full())?;
        Ok(StreamPermit {
            _all: all,
            _shared: Some(shared),
            _held: Some(held),
        })
    }
}

/// Whether `follow=` asks for a stream: `1`/`true` yes, `0`/`false`/absent no.
pub(crate) fn wants_follow(value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "bad_follow",
            format!("follow `{other}` is not one of: 1, true, 0, false"),
        )),
    }
}

/// Streams the event log of `id` from after `after`, then the settled run.
pub(crate) fn run_events(host: Host, id: RunId, after: u64, slot: StreamPermit) -> Response {
    // Subscribe before the first read: a change between the two is not missed.
    let changes = host.feed().subscribe();
    let (tx, rx) = mpsc::channel(BUFFERED);
    let span = tracing::debug_span!("follow_run", run_id = %id);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let _slot = slot;
            follow_run(&host, &id, after, changes, &tx).await;
        },
        span,
    ));
    stream_response(rx)
}

/// Streams every run stored or changed from now on that `scope` shows, of `agent` or of all.
pub(crate) fn jobs(
    host: &Host,
    agent: Option<String>,
    scope: Scope,
    slot: StreamPermit,
) -> Response {
    let changes = host.feed().subscribe();
    let (tx, rx) = mpsc::channel(BUFFERED);
    tokio::spawn(async move {
        let _slot = slot;
        follow_jobs(changes, agent.as_deref(), &scope, &tx).await;
    });
    stream_response(rx)
}

pub(crate) fn stream_response(mut rx: mpsc::Receiver<Event>) -> Response {
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|e| e.map(Ok::<_, Infallible>))
    });
    let sse: Sse<_> = Sse::new(stream);
    let mut response = sse
        .keep_alive(KeepAlive::new().interval(KEEPALIVE).text("keepalive"))
        .into_response();
    // Proxies that buffer responses would hold the events back.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Why a stream stopped before its natural end.
enum Stop {
    /// The client went away.
    ClientGone,
}

async fn send(tx: &mpsc::Sender<Event>, event: Event) -> Result<(), Stop> {
    tx.send(event).await.map_err(|_| Stop::ClientGone)
}

fn json_event(kind: &str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(kind)
        .json_data(data)
        .unwrap_or_else(|e| {
            Event::default()
                .event("error")
                .data(json!({"code": "internal", "message": e.to_string()}).to_string())
        })
}

async fn follow_run(
    host: &Host,
    id: &RunId,
    mut after: u64,
    mut changes: broadcast::Receiver<RunChange>,
    tx: &mpsc::Sender<Event>,
) {
    loop {
        // The run is read before its events: if it had settled, its log was complete then,
        // so the events read next are all there is.
        let run = match read_run(host, id).await {
            Ok(run) => run,
            Err(message) => {
                let _ = send(tx, error_event(&message)).await;
                return;
            }
        };
        match send_events_after(host, id, &mut after, tx).await {
            Ok(()) => {}
            Err(SendError::Client(Stop::ClientGone)) => return,
            Err(SendError::Store(message)) => {
                let _ = send(tx, error_event(&message)).await;
                return;
            }
        }
        if run.status.is_settled() {
            let _ = send(tx, json_event("end", &run)).await;
            return;
        }
        if !wait_for_change(&mut changes, id, tx).await {
            return;
        }
    }
}

enum SendError {
    Client(Stop),
    Store(String),
}

/// Sends every stored event of `id` after `after`, moving `after` past each one sent.
async fn send_events_after(
    host: &Host,
    id: &RunId,
    after: &mut u64,
    tx: &mpsc::Sender<Event>,
) -> Result<(), SendError> {
    loop {
        let page = host
            .events_page(id, *after, PAGE_MAX)
            .await
            .map_err(|e| SendError::Store(e.to_string()))?;
        for record in &page.events {
            let event = json_event("event", record).id(record.seq.to_string());
            send(tx, event).await.map_err(SendError::Client)?;
            *after = record.seq;
        }
        if page.next_after.is_none() || page.events.is_empty() {
            return Ok(());
        }
    }
}

/// Waits for a notice about `id`, a lag, or the re-read interval. `false` when the stream
/// should end: the client went away or the host stopped.
async fn wait_for_change(
    changes: &mut broadcast::Receiver<RunChange>,
    id: &RunId,
    tx: &mpsc::Sender<Event>,
) -> bool {
    let deadline = tokio::time::Instant::now() + REREAD_EVERY;
    loop {
        tokio::select! {
            () = tx.closed() => return false,
            () = tokio::time::sleep_until(deadline) => return true,
            notice = changes.recv() => match notice {
                Ok(change) if change.id() == id => return true,
                Ok(_) => {}
                // Fell behind: whatever was missed is in the store.
                Err(RecvError::Lagged(_)) => return true,
                Err(RecvError::Closed) => return false,
            },
        }
    }
}

async fn read_run(host: &Host, id: &RunId) -> Result<RunRecord, String> {
    host.run(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("run {id} is no longer stored on this host"))
}

fn error_event(message: &str) -> Event {
    tracing::warn!("a live stream ended on an error: {message}");
    Event::default()
        .event("error")
        .data(json!({"code": "stream_failed", "message": message}).to_string())
}

async fn follow_jobs(
    mut changes: broadcast::Receiver<RunChange>,
    agent: Option<&str>,
    scope: &Scope,
    tx: &mpsc::Sender<Event>,
) {
    loop {
        let notice = tokio::select! {
            () = tx.closed() => return,
            notice = changes.recv() => notice,
        };
        let event = match notice {
            Ok(change) => {
                let run = &change.record;
                if agent.is_some_and(|a| a != run.agent) || !scope.shows(&run.principal) {
                    continue;
                }
                json_event("run", run.as_ref())
            }
            Err(RecvError::Lagged(missed)) => {
                // A follower that fell behind is not buffered for: the stream ends, saying how
                // to catch up (the pages hold everything it missed).
                let lagged = json!({
                    "missed": missed,
                    "resume": "read GET /jobs (newest first) until you reach runs you have, then follow again",
                });
                let _ = send(tx, json_event("lagged", &lagged)).await;
                return;
            }
            Err(RecvError::Closed) => return,
        };
        if send(tx, event).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max: usize, operators: usize, each: usize) -> HttpBounds {
        HttpBounds {
            max_streams: max,
            operator_streams: operators,
            max_streams_per_principal: each,
            ..HttpBounds::default()
        }
    }

    fn principal(name: &str) -> Requester {
        Requester::Principal {
            principal: name.into(),
        }
    }

    #[test]
    fn one_stream_more_than_the_budget_is_refused_until_one_ends() {
        let slots = StreamSlots::new(&bounds(2, 0, 8));
        let op = Requester::LocalOperator;
        let first = slots.take(&op).ok();
        let second = slots.take(&op).ok();
        assert!(first.is_some() && second.is_some());
        let refused = slots.take(&op).err().map(|e| (e.status, e.code));
        assert_eq!(
            refused,
            Some((
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams"
            ))
        );
        drop(first);
        assert!(
            slots.take(&op).is_ok(),
            "an ended stream gives its slot back"
        );
    }

    #[test]
    fn follow_takes_one_true_and_one_false_word_and_nothing_else() {
        assert!(!wants_follow(None).ok().unwrap_or(true));
        assert!(wants_follow(Some("1")).ok().unwrap_or(false));
        assert!(wants_follow(Some("true")).ok().unwrap_or(false));
        assert!(!wants_follow(Some("0")).ok().unwrap_or(true));
        assert!(!wants_follow(Some("false")).ok().unwrap_or(true));
        assert_eq!(
            wants_follow(Some("yes")).err().map(|e| e.code),
            Some("bad_follow")
        );
    }

    #[test]
    fn one_token_never_takes_every_slot_and_operators_keep_theirs() {
        let slots = StreamSlots::new(&bounds(6, 2, 3));
        let eve = principal("api:eve");
        let eves: Vec<_> = (0..3)
            .map(|_| slots.take(&eve).expect("eve's share"))
            .collect();
        let over = slots.take(&eve).err().map(|e| (e.status, e.code));
        assert_eq!(
            over,
            Some((
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams"
            ))
        );
        let bob = principal("api:bob");
        let bob_first = slots
            .take(&bob)
            .expect("another principal has its own share");
        // Four of six are taken and the last two are the operators': bob gets no more.
        assert!(slots.take(&bob).is_err());
        let op = Requester::Operator {
            principal: "api:ops".into(),
        };
        let ops: Vec<_> = (0..2)
            .map(|_| slots.take(&op).expect("kept for operators"))
            .collect();
        assert!(slots.take(&op).is_err(), "the host's own cap still holds");
        drop((eves, bob_first, ops));
        assert!(slots.take(&eve).is_ok());
    }
}
