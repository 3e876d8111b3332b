//! Waiting on a task and streaming it: how `SendMessage` waits for its run to settle or stop
//! to wait for an approval, and the server-sent event streams of `SendStreamingMessage` and
//! `SubscribeToTask` (the task first, then its status and artifact updates).
//!
//! Both read the store, never the feed: a notice of the run feed only wakes them to read the
//! run again, and they read again every [`REREAD_EVERY`] whatever comes, so a notice sent
//! before its commit, or lost to a receiver that fell behind, costs a little time and never a
//! change. For the same reason they subscribe to the feed before their first read. A stream
//! ends when its task settles or stops to wait (a subscriber to a task that already waits is
//! followed on until the task moves), when its client goes, or on a failure, which it sends as
//! a JSON-RPC error event; while it lives it holds one of the host's stream slots, as
//! [`crate::api::follow`]'s streams do.
//!
//! This module reads runs and sends what it read; it decides nothing about them.

use std::time::Duration;

use axum::response::Response;
use axum::response::sse::Event;
use tokio::sync::{broadcast, mpsc};

use crate::api::follow::StreamPermit;

use consort_a2a::{
    A2aErrorCode, JsonRpcError, JsonRpcId, JsonRpcResponse, StreamResponse, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
};
use consort_actors::{Host, RunChange, RunRecord, RunStatus};
use consort_core::event::ApprovalRequested;
use consort_net::RunId;

use super::Failure;
use super::task_view::{answer_artifact, task_of, task_state};
use crate::api::follow::{self, REREAD_EVERY};
use crate::api::stored_run;

/// Reads a run off the async workers; one that is gone is `TaskNotFoundError`.
async fn read_run(host: &Host, id: &RunId) -> Result<RunRecord, Failure> {
    Ok(stored_run(host, id).await?)
}

/// Whether a task in `state` has stopped, for now or for good.
fn paused(state: TaskState) -> bool {
    state.is_terminal() || state.is_interrupted()
}

/// Waits until run `id` settles or stops to wait for an approval, or `wait` is over, and
/// returns it as it then stands.
pub(super) async fn until_paused(
    host: &Host,
    id: &RunId,
    wait: Duration,
) -> Result<RunRecord, Failure> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut changes = host.feed().subscribe();
    loop {
        let run = read_run(host, id).await?;
        if paused(task_state(&run)) || tokio::time::Instant::now() >= deadline {
            return Ok(run);
        }
        next_change(&mut changes, id, deadline).await;
    }
}

/// Waits for a notice about `id`, a lag, the re-read interval or `deadline`.
async fn next_change(
    changes: &mut broadcast::Receiver<RunChange>,
    id: &RunId,
    deadline: tokio::time::Instant,
) {
    let reread = (tokio::time::Instant::now() + REREAD_EVERY).min(deadline);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(reread) => return,
            notice = changes.recv() => match notice {
                Ok(change) if change.id() == id => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                // The host stopped: the next read says what is left.
                Err(broadcast::error::RecvError::Closed) => {
                    tokio::time::sleep_until(reread).await;
                    return;
                }
            },
        }
    }
}

fn stream_event(id: &JsonRpcId, event: &StreamResponse) -> Event {
    let response = match serde_json::to_value(event) {
        Ok(result) => JsonRpcResponse::success(id.clone(), result),
        Err(e) => JsonRpcResponse::failure(
            id.clone(),
            JsonRpcError::new(A2aErrorCode::InternalError, e.to_string()),
        ),
    };
    Event::default().json_data(&response).unwrap_or_else(|e| {
        Event::default().data(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32603,\"message\":\"{e}\"}}}}"
        ))
    })
}

pub(super) fn stream_rejected(id: JsonRpcId, task: Task, slot: StreamPermit) -> Response {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let _slot = slot;
        let _ = tx
            .send(stream_event(&id, &StreamResponse::Task(task)))
            .await;
    });
    follow::stream_response(rx)
}

/// Streams task `run`: the task as it stands, then each change of its state, until it settles
/// or stops to wait.
pub(super) fn stream_task(
    host: Host,
    run: RunId,
    id: JsonRpcId,
    history_length: Option<i32>,
    subscribed: bool,
    slot: StreamPermit,
) -> Response {
    let (tx, rx) = mpsc::channel(16);
    let span = tracing::info_span!("a2a_stream", run_id = %run);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let _slot = slot;
            if let Err(failure) =
                follow_task(&host, &run, &id, history_length, subscribed, &tx).await
            {
                let response = JsonRpcResponse::failure(id.clone(), failure.error);
                let event = Event::default()
                    .json_data(&response)
                    .unwrap_or_else(|_| Event::default().data("{}"));
                let _ = tx.send(event).await;
            }
        },
        span,
    ));
    follow::stream_response(rx)
}

async fn follow_task(
    host: &Host,
    id: &RunId,
    rpc: &JsonRpcId,
    history_length: Option<i32>,
    subscribed: bool,
    tx: &mpsc::Sender<Event>,
) -> Result<(), Failure> {
    // Subscribe before the first read: a change between the two is not missed.
    let mut changes = host.feed().subscribe();
    let run = read_run(host, id).await?;
    let gate = gate_of(host, &run).await?;
    let mut last = task_state(&run);
    let first = StreamResponse::Task(task_of(&run, gate.as_ref(), history_length, true));
    // A subscriber to a task that already waits is followed on: it wants to see the task move
    // on. A task that comes to wait while followed ends the stream, as A2A streams end.
    let stop = if subscribed {
        last.is_terminal()
    } else {
        paused(last)
    };
    if tx.send(stream_event(rpc, &first)).await.is_err() || stop {
        return Ok(());
    }
    loop {
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            () = tx.closed() => return Ok(()),
            () = next_change(&mut changes, id, far) => {}
        }
        let run = read_run(host, id).await?;
        let state = task_state(&run);
        if state == last {
            continue;
        }
        last = state;
        let gate = gate_of(host, &run).await?;
        let task = task_of(&run, gate.as_ref(), Some(0), true);
        if state == TaskState::Completed {
            let artifact = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact: answer_artifact(&run),
                append: false,
                last_chunk: true,
                metadata: None,
            });
            if tx.send(stream_event(rpc, &artifact)).await.is_err() {
                return Ok(());
            }
        }
        let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task.id,
            context_id: task.context_id,
            status: task.status,
            metadata: None,
        });
        if tx.send(stream_event(rpc, &update)).await.is_err() || paused(state) {
            return Ok(());
        }
    }
}

pub(super) async fn gate_of(
    host: &Host,
    run: &RunRecord,
) -> Result<Option<ApprovalRequested>, Failure> {
    if run.status != RunStatus::Blocked {
        return Ok(None);
    }
    Ok(host.pending_gate(run).await?)
}
