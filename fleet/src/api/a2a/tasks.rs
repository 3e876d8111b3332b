//! What each A2A method does with the task's run. A task is a consort run, so every method
//! comes down to a call on [`Host`] for the caller the request carries ([`Call`]):
//!
//! - `SendMessage` and `SendStreamingMessage` without a task id start a root run, as
//!   `POST /runs` does. A request the host refuses (the agent down or saturated, the host
//!   draining) is a task in state `REJECTED`, as A2A has it, not an error. With a task id, the
//!   message is the reply to an `INPUT_REQUIRED` task: `approve` or `deny` decides the gate
//!   the task showed as waiting, and only that gate.
//! - `GetTask` reads one task, `CancelTask` cancels its run, `SubscribeToTask` follows it
//!   ([`super::streaming`]).
//! - `ListTasks` pages through the caller's tasks, newest first. Its filters (context, state,
//!   changed since) are not ones the store can apply, and `totalSize` needs the count of all
//!   that match, so the page is filled by reading the caller's runs and keeping those the
//!   filter keeps, at most [`SCAN_LIMIT`] of them.
//!
//! Every method checks what the caller may do with the task through [`crate::access`], as the
//! HTTP routes do; a task the caller may not see is `TaskNotFoundError`, as one that does not
//! exist. How a run reads as a task is [`super::task_view`]'s. Nothing here decides anything
//! about the run itself: starting, deciding and canceling are the host's.

use axum::http::StatusCode;
use serde_json::Value;

use consort_a2a::{
    A2aErrorCode, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    SendMessageRequest, SendMessageResponse, SubscribeToTaskRequest, Task, TaskState,
};
use consort_actors::page::{PAGE_MAX, RunCursor};
use consort_actors::{ActorsError, Channel, Host, RunRecord};
use consort_core::event::ApprovalRequested;
use consort_core::step::Decision;
use consort_net::RunId;

use super::streaming::{gate_of, stream_rejected, stream_task, until_paused};
use super::task_view::{self, ListFilter, task_of, task_state};
use super::{AGENT_BASE, ANSWER_WAIT, Answer, Call, Failure, result_of};
use crate::access::{self, Action};
use crate::api::MAX_INPUT_BYTES;

/// Tasks per `ListTasks` page unless `pageSize` says otherwise.
const PAGE_DEFAULT: i32 = 50;
/// The largest `ListTasks` page.
const PAGE_LARGEST: i32 = 100;
/// How many runs `ListTasks` reads at most to count `totalSize` and fill a filtered page.
const SCAN_LIMIT: usize = 100_000;

impl Call {
    fn authorize(&self, action: Action<'_>) -> Result<(), Failure> {
        access::authorize(&self.who, self.auth.anonymous(), action).map_err(Failure::from)
    }

    /// The run of task `id`, if the caller may see it at this endpoint.
    async fn visible_run(&self, id: &str) -> Result<RunRecord, Failure> {
        let run_id = RunId::parse(id).map_err(|_| Failure::task_not_found(id))?;
        let run = self
            .host
            .run(&run_id)
            .await?
            .ok_or_else(|| Failure::task_not_found(id))?;
        if self.agent.as_ref().is_some_and(|a| a != &run.agent) {
            return Err(Failure::task_not_found(id));
        }
        self.authorize(Action::ReadRun {
            owner: &run.principal,
        })?;
        Ok(run)
    }

    /// The approval request a blocked run waits on.
    async fn gate(&self, run: &RunRecord) -> Result<Option<ApprovalRequested>, Failure> {
        gate_of(&self.host, run).await
    }

    async fn task(&self, run: &RunRecord, history_length: Option<i32>) -> Result<Task, Failure> {
        let gate = self.gate(run).await?;
        Ok(task_of(run, gate.as_ref(), history_length, true))
    }

    /// The agent a new message asks: the endpoint's, the one `metadata.agent` names, or the
    /// host's only one.
    fn agent_for(&self, params: &SendMessageRequest) -> Result<String, Failure> {
        if let Some(agent) = &self.agent {
            return Ok(agent.clone());
        }
        let named = [params.message.metadata.as_ref(), params.metadata.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|m| m.get("agent").and_then(Value::as_str));
        let agents = self.host.agents();
        match (named, agents) {
            (Some(name), _) if agents.iter().any(|a| a == name) => Ok(name.to_owned()),
            (Some(name), _) => Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!(
                    "no agent named `{name}` here (agents: {})",
                    agents.join(", ")
                ),
            )),
            (None, [only]) => Ok(only.clone()),
            (None, _) => Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!(
                    "this host serves several agents: name one in the message's metadata (`{{\"agent\": \"…\"}}`) or send to {AGENT_BASE}/<agent> (agents: {})",
                    agents.join(", ")
                ),
            )),
        }
    }

    pub(super) async fn send_message(
        self,
        params: SendMessageRequest,
        streaming: bool,
    ) -> Result<Answer, Failure> {
        let config = params.configuration.clone().unwrap_or_default();
        let run = match params.message.task_id.as_deref() {
            Some(task) => self.continue_task(task, &params).await?,
            None => match self.start(&params).await? {
                Ok(run) => run,
                Err(rejected) => {
                    return if streaming {
                        let slot = self
                            .streams
                            .take(&self.who)
                            .map_err(|e| Failure::internal(e.message))?;
                        Ok(Answer::Stream(stream_rejected(self.id, rejected, slot)))
                    } else {
                        result_of(&SendMessageResponse::Task(rejected))
                    };
                }
            },
        };
        if streaming {
            let slot = self
                .streams
                .take(&self.who)
                .map_err(|e| Failure::internal(e.message))?;
            return Ok(Answer::Stream(stream_task(
                self.host.clone(),
                run.id,
                self.id,
                config.history_length,
                false,
                slot,
            )));
        }
        let run = if config.return_immediately {
            run
        } else {
            until_paused(&self.host, &run.id, ANSWER_WAIT).await?
        };
        let task = self.task(&run, config.history_length).await?;
        result_of(&SendMessageResponse::Task(task))
    }

    /// Starts the run a new message asks for: the stored run, or the `REJECTED` task of a
    /// request the host refused.
    async fn start(&self, params: &SendMessageRequest) -> Result<Result<RunRecord, Task>, Failure> {
        self.authorize(Action::StartRun)?;
        let agent = self.agent_for(params)?;
        let input =
            task_view::input_of(&params.message, MAX_INPUT_BYTES).map_err(|error| Failure {
                status: StatusCode::OK,
                error,
            })?;
        let trace = crate::trace_header::incoming_trace(&self.headers);
        let started = self
            .host
            .start_run_traced(&agent, &input, Channel::Api, self.identity.clone(), trace)
            .await;
        match started {
            Ok(run) => {
                tracing::info!(run_id = %run.id, agent, principal = %run.principal, hop_depth = run.hop_depth, "run started through A2A");
                Ok(Ok(run))
            }
            Err(ActorsError::Refused(refusal)) => {
                let why = format!("{refusal} ({})", refusal.code());
                let now = task_view::now_ms();
                Ok(Err(task_view::rejected_task(
                    RunId::random().to_string(),
                    &agent,
                    &why,
                    now,
                )))
            }
            Err(ActorsError::UnknownAgent(name)) => Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!("no agent named `{name}` here"),
            )),
            Err(e) => Err(Failure::internal(e)),
        }
    }

    /// A message to an existing task: the approval decision an `INPUT_REQUIRED` task waits on.
    async fn continue_task(
        &self,
        task: &str,
        params: &SendMessageRequest,
    ) -> Result<RunRecord, Failure> {
        let run = self.visible_run(task).await?;
        let state = task_state(&run);
        if state != TaskState::InputRequired {
            return Err(Failure::new(
                A2aErrorCode::UnsupportedOperation,
                format!(
                    "task {task} is {}: a consort task takes one request and, while it waits for an approval, `approve` or `deny`; send a new message without taskId to ask again",
                    state.wire_name()
                ),
            ));
        }
        let text = params.message.joined_text().0;
        let Some(approve) = task_view::decision_of(&text) else {
            return Err(Failure::new(
                A2aErrorCode::InvalidParams,
                format!("task {task} waits for an approval: reply `approve` or `deny`"),
            ));
        };
        let gate = self.gate(&run).await?;
        self.authorize(Action::Decide {
            owner: &run.principal,
        })?;
        // The reply decides the gate the task showed as waiting, and only that one.
        let decision = Decision::from(approve);
        self.host
            .decide_as(
                &run.id,
                gate.as_ref().map(|g| g.gate.as_str()),
                decision,
                self.who.decider(),
            )
            .await
            .map(|decided| decided.run)
            .map_err(|e| match e {
                ActorsError::Refused(refusal @ consort_core::Refusal::FourEyes { .. }) => {
                    Failure::forbidden(refusal.to_string())
                }
                ActorsError::Refused(refusal) => {
                    Failure::new(A2aErrorCode::UnsupportedOperation, refusal.to_string())
                }
                other => Failure::internal(other),
            })
    }

    pub(super) async fn get_task(self, params: GetTaskRequest) -> Result<Answer, Failure> {
        let run = self.visible_run(&params.id).await?;
        let task = self.task(&run, params.history_length).await?;
        result_of(&task)
    }

    pub(super) async fn subscribe(self, params: SubscribeToTaskRequest) -> Result<Answer, Failure> {
        let run = self.visible_run(&params.id).await?;
        let state = task_state(&run);
        if state.is_terminal() {
            return Err(Failure::new(
                A2aErrorCode::UnsupportedOperation,
                format!(
                    "task {} is already {}: read it with GetTask",
                    params.id,
                    state.wire_name()
                ),
            ));
        }
        let slot = self
            .streams
            .take(&self.who)
            .map_err(|e| Failure::internal(e.message))?;
        Ok(Answer::Stream(stream_task(
            self.host.clone(),
            run.id,
            self.id,
            None,
            true,
            slot,
        )))
    }

    pub(super) async fn cancel_task(self, params: CancelTaskRequest) -> Result<Answer, Failure> {
        let run = self.visible_run(&params.id).await?;
        let state = task_state(&run);
        if state.is_terminal() {
            return Err(Failure::new(
                A2aErrorCode::TaskNotCancelable,
                format!("task {} is already {}", params.id, state.wire_name()),
            ));
        }
        self.authorize(Action::Cancel {
            owner: &run.principal,
        })?;
        let reason = params
            .metadata
            .as_ref()
            .and_then(|m| m.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let canceled = self
            .host
            .cancel_as(&run.id, self.who.decider(), reason)
            .await
            .map_err(|e| match e {
                ActorsError::Refused(refusal) => {
                    Failure::new(A2aErrorCode::TaskNotCancelable, refusal.to_string())
                }
                other => Failure::internal(other),
            })?;
        let task = self.task(&canceled, None).await?;
        result_of(&task)
    }

    pub(super) async fn list_tasks(self, params: ListTasksRequest) -> Result<Answer, Failure> {
        self.authorize(Action::ListRuns)?;
        let page_size = match params.page_size {
            None | Some(0) => PAGE_DEFAULT,
            Some(n) if (1..=PAGE_LARGEST).contains(&n) => n,
            Some(n) => {
                return Err(Failure::new(
                    A2aErrorCode::InvalidParams,
                    format!("pageSize {n} is not between 1 and {PAGE_LARGEST}"),
                ));
            }
        };
        let token = match params.page_token.as_deref() {
            None | Some("") => None,
            Some(text) => Some(RunCursor::parse(text).ok_or_else(|| {
                Failure::new(
                    A2aErrorCode::InvalidParams,
                    "pageToken is not one this host gave out: pass the nextPageToken of the previous page",
                )
            })?),
        };
        let changed_after_ms = match params.status_timestamp_after.as_deref() {
            None => None,
            Some(text) => Some(task_view::parse_rfc3339_ms(text).ok_or_else(|| {
                Failure::new(
                    A2aErrorCode::InvalidParams,
                    format!("statusTimestampAfter `{text}` is not an RFC 3339 time"),
                )
            })?),
        };
        let filter = ListFilter {
            context_id: params.context_id.clone(),
            state: params.status.filter(|s| *s != TaskState::Unspecified),
            changed_after_ms,
        };
        let scope = access::listing_scope(&self.who);
        let agent = self.agent.clone();
        let size = usize::try_from(page_size).unwrap_or(50);
        let scanned = scan(
            &self.host,
            agent.as_deref(),
            scope.owner(),
            &filter,
            token.as_ref(),
            size,
        )
        .await?;
        let with_artifacts = params.include_artifacts.unwrap_or(false);
        let tasks = scanned
            .page
            .iter()
            .map(|run| task_of(run, None, params.history_length, with_artifacts))
            .collect();
        result_of(&ListTasksResponse {
            tasks,
            next_page_token: scanned.next.map(|c| c.to_string()).unwrap_or_default(),
            page_size,
            total_size: i32::try_from(scanned.total).unwrap_or(i32::MAX),
        })
    }
}

/// A page of `ListTasks`, and how many tasks match in all.
struct Scanned {
    page: Vec<RunRecord>,
    next: Option<RunCursor>,
    total: usize,
}

/// Reads the caller's runs newest first (at most [`SCAN_LIMIT`]), counting those `filter`
/// keeps and taking `size` of them from after `token`.
async fn scan(
    host: &Host,
    agent: Option<&str>,
    owner: Option<&str>,
    filter: &ListFilter,
    token: Option<&RunCursor>,
    size: usize,
) -> Result<Scanned, ActorsError> {
    let mut out = Scanned {
        page: Vec::new(),
        next: None,
        total: 0,
    };
    let mut cursor: Option<RunCursor> = None;
    let mut read = 0;
    loop {
        let page = host
            .jobs_page(agent, cursor.as_ref(), owner, PAGE_MAX)
            .await?;
        for run in &page.runs {
            read += 1;
            if !filter.keeps(run) {
                continue;
            }
            out.total += 1;
            if !token.is_none_or(|t| task_view::is_after(run, t)) {
                continue;
            }
            if out.page.len() < size {
                out.page.push(run.clone());
            } else if out.next.is_none() {
                out.next = out.page.last().map(RunCursor::after);
            }
        }
        cursor = match page.next.as_deref().and_then(RunCursor::parse) {
            Some(next) if read < SCAN_LIMIT => Some(next),
            _ => break,
        };
    }
    Ok(out)
}
