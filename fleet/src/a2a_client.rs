//! The host's client for remote A2A agents (A2A 1.0, JSON-RPC binding): [`A2aClient`], the
//! implementation of consort-actors' [`A2aCalls`] seam that `dev` and `serve` give their host.
//!
//! One call: fetch the agent's card (kept for [`CARD_TTL`], at most [`CARDS_KEPT`] cards),
//! pick its JSON-RPC interface, send `SendMessage` (one text part with the call's input, the
//! call's child run id as the message id, blocking, `A2A-Version: 1.0`, the bearer token), and
//! while the task it answers with is neither terminal nor interrupted, poll `GetTask` with a
//! backoff from [`POLL_FIRST`] to [`POLL_MOST`]; the whole call is bounded by the
//! declaration's `timeout_ms`, and every body read is capped. How the exchange ended is worded
//! for the caller by the pure `answer` module.
//!
//! Why here: consort-a2a holds the protocol's types and does no I/O by design, and the actors
//! never open a socket; consort-fleet already owns the host's HTTP client (reqwest) and the
//! other seam to the outside world (`LinkRemote`), so the client lives beside them. It must
//! not decide whether a call is allowed (the caller's step did) nor panic on anything a
//! remote server sends.

mod answer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use consort_a2a::{
    AgentCard, GetTaskRequest, JSONRPC_BINDING, JsonRpcRequest, JsonRpcResponse, Message, Method,
    PROTOCOL_VERSION, Part, Role, SendMessageConfiguration, SendMessageRequest,
    SendMessageResponse, Task, TaskState, VERSION_HEADER,
};
use consort_actors::a2a::{A2aAnswer, A2aCalls, A2aRequest};
use consort_actors::supervisor::BoxFuture;
use serde::Serialize;
use tracing::{debug, info, warn};

use answer::{Failure, Outcome, answer_of};

use crate::outbound::reach::{Networks, may_follow};
use crate::outbound::{self, GuardedClients, OwnListeners};

/// How long a fetched card is trusted before it is fetched again.
pub const CARD_TTL: Duration = Duration::from_secs(300);
/// The most cards kept at once.
pub const CARDS_KEPT: usize = 64;
/// The first wait before polling a task that is still working.
pub const POLL_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two polls.
pub const POLL_MOST: Duration = Duration::from_secs(2);
/// The largest card read.
const MAX_CARD_BYTES: usize = 1 << 20;
/// The largest JSON-RPC answer read.
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of an HTTP error's body the caller is shown.
const EXCERPT_CHARS: usize = 200;

/// The HTTP client for remote A2A agents, shared by every call of a host.
///
/// It never acts as the host (see [`crate::outbound`]): a card and the endpoint it names are
/// reached only on the networks the agent's declaration allows (`allow_networks`), never on a
/// port the host listens on, and the endpoint must be on the card's origin unless the
/// declaration lists its origin (`endpoint_origins`); redirects stay on their origin.
pub struct A2aClient {
    http: GuardedClients,
    cards: Mutex<HashMap<String, (Instant, Arc<AgentCard>)>>,
}

impl A2aClient {
    /// A client with its own connection pools, which never reaches the ports in `own` (the
    /// host's API and link: add them as they are bound).
    pub fn new(own: OwnListeners) -> Result<Self, crate::FleetError> {
        let base = || reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
        let http = GuardedClients::new(base, own).map_err(|e| crate::FleetError::Unreachable {
            url: "A2A agents".into(),
            detail: format!("the HTTP client could not be built: {e}"),
        })?;
        Ok(Self {
            http,
            cards: Mutex::new(HashMap::new()),
        })
    }

    /// The whole exchange; `last` is kept up to date with the task as last seen, for a
    /// timeout's answer.
    async fn exchange(
        &self,
        request: &A2aRequest,
        last: &Mutex<Option<(String, TaskState)>>,
    ) -> Result<Outcome, Failure> {
        let card_url = request.agent.card.as_str();
        let networks = networks_of(request);
        let card = self.card(card_url, networks).await?;
        let Some(interface) = card
            .supported_interfaces
            .iter()
            .find(|i| i.protocol_binding.eq_ignore_ascii_case(JSONRPC_BINDING))
        else {
            self.forget(card_url);
            return Err(Failure::NoJsonRpc {
                url: card_url.to_owned(),
                bindings: card
                    .supported_interfaces
                    .iter()
                    .map(|i| i.protocol_binding.clone())
                    .collect(),
            });
        };
        let endpoint = interface.url.clone();
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            self.forget(card_url);
            return Err(Failure::Card {
                url: card_url.to_owned(),
                detail: format!("its JSON-RPC interface URL `{endpoint}` is not http(s)"),
            });
        }
        // The card is the remote party's word: its endpoint stays on the card's origin unless
        // the declaration lists another.
        let on_origin = match (
            reqwest::Url::parse(card_url),
            reqwest::Url::parse(&endpoint),
        ) {
            (Ok(card), Ok(at)) => may_follow(
                &outbound::origin(&card),
                &outbound::origin(&at),
                &request.agent.endpoint_origins,
            )
            .map_err(|b| b.to_string()),
            _ => Err(format!("`{endpoint}` is not a URL")),
        };
        if let Err(why) = on_origin {
            self.forget(card_url);
            return Err(Failure::Blocked { url: endpoint, why });
        }
        let tenant = interface.tenant.clone();
        let send = SendMessageRequest {
            tenant: tenant.clone(),
            message: Message {
                // The child run id: a replay of the call sends the same message id.
                message_id: request.child_run.to_string(),
                role: Role::User,
                parts: vec![Part::text(request.input.clone())],
                ..Message::default()
            },
            configuration: Some(SendMessageConfiguration {
                accepted_output_modes: vec!["text/plain".into()],
                return_immediately: false,
                ..SendMessageConfiguration::default()
            }),
            metadata: None,
        };
        let sent = self
            .rpc(&endpoint, (request, networks), Method::SendMessage, &send)
            .await
            .inspect_err(|f| {
                if matches!(f, Failure::Unreachable { .. } | Failure::Http { .. }) {
                    // The agent may have moved: read its card again next time.
                    self.forget(card_url);
                }
            })?;
        let mut task = match serde_json::from_value::<SendMessageResponse>(sent) {
            Ok(SendMessageResponse::Message(message)) => return Ok(Outcome::Message(message)),
            Ok(SendMessageResponse::Task(task)) => task,
            Err(e) => {
                return Err(Failure::Malformed {
                    method: Method::SendMessage.as_str(),
                    detail: format!("neither a task nor a message: {e}"),
                });
            }
        };
        let mut wait = POLL_FIRST;
        loop {
            *lock(last) = Some((task.id.clone(), task.status.state));
            if task.status.state.is_terminal() || task.status.state.is_interrupted() {
                return Ok(Outcome::Task(task));
            }
            debug!(task = %task.id, state = task.status.state.wire_name(), "the A2A task is not done; polling it");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(POLL_MOST);
            let get = GetTaskRequest {
                tenant: tenant.clone(),
                id: task.id.clone(),
                history_length: Some(0),
            };
            let got = self
                .rpc(&endpoint, (request, networks), Method::GetTask, &get)
                .await?;
            task = serde_json::from_value::<Task>(got).map_err(|e| Failure::Malformed {
                method: Method::GetTask.as_str(),
                detail: format!("not a task: {e}"),
            })?;
        }
    }

    /// The agent's card, from the cache while it is fresh.
    async fn card(&self, url: &str, networks: Networks) -> Result<Arc<AgentCard>, Failure> {
        if let Some((at, card)) = lock(&self.cards).get(url)
            && at.elapsed() < CARD_TTL
        {
            return Ok(card.clone());
        }
        let response = self
            .client(url, networks)?
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(VERSION_HEADER, PROTOCOL_VERSION)
            .send()
            .await
            .map_err(|e| failure_of(url, &e))?;
        let status = response.status();
        let body = read_capped(response, MAX_CARD_BYTES)
            .await
            .map_err(|detail| Failure::Card {
                url: url.to_owned(),
                detail,
            })?;
        if !status.is_success() {
            return Err(Failure::Card {
                url: url.to_owned(),
                detail: format!("HTTP {}", status.as_u16()),
            });
        }
        let card: AgentCard = serde_json::from_slice(&body).map_err(|e| Failure::Card {
            url: url.to_owned(),
            detail: format!("not an A2A agent card: {e}"),
        })?;
        let card = Arc::new(card);
        let mut cards = lock(&self.cards);
        if cards.len() >= CARDS_KEPT && !cards.contains_key(url) {
            let oldest = cards
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                cards.remove(&oldest);
            }
        }
        cards.insert(url.to_owned(), (Instant::now(), card.clone()));
        Ok(card)
    }

    fn forget(&self, url: &str) {
        lock(&self.cards).remove(url);
    }

    /// The guarded client for `url` under `networks`, once the URL itself is checked.
    fn client(&self, url: &str, networks: Networks) -> Result<&reqwest::Client, Failure> {
        let parsed = reqwest::Url::parse(url).map_err(|e| Failure::Card {
            url: url.to_owned(),
            detail: format!("not a URL: {e}"),
        })?;
        self.http
            .for_url(&parsed, networks)
            .map_err(|blocked| Failure::Blocked {
                url: url.to_owned(),
                why: blocked.to_string(),
            })
    }

    /// One JSON-RPC call: its result, or why there is none.
    async fn rpc<P: Serialize>(
        &self,
        endpoint: &str,
        (request, networks): (&A2aRequest, Networks),
        method: Method,
        params: &P,
    ) -> Result<serde_json::Value, Failure> {
        let name = method.as_str();
        let params = serde_json::to_value(params).map_err(|e| Failure::Malformed {
            method: name,
            detail: format!("the request could not be written: {e}"),
        })?;
        let body = JsonRpcRequest::new(request.child_run.to_string(), method, params);
        let mut post = self
            .client(endpoint, networks)?
            .post(endpoint)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(VERSION_HEADER, PROTOCOL_VERSION)
            .json(&body);
        if let Some(token) = &request.token {
            post = post.bearer_auth(token);
        }
        let response = post.send().await.map_err(|e| failure_of(endpoint, &e))?;
        let status = response.status();
        let bytes = read_capped(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|detail| Failure::Malformed {
                method: name,
                detail,
            })?;
        if !status.is_success() {
            return Err(Failure::Http {
                method: name,
                status: status.as_u16(),
                excerpt: excerpt(&bytes),
            });
        }
        let answer: JsonRpcResponse =
            serde_json::from_slice(&bytes).map_err(|e| Failure::Malformed {
                method: name,
                detail: format!("not a JSON-RPC response: {e}"),
            })?;
        if let Some(error) = answer.error {
            return Err(Failure::Rpc {
                method: name,
                code: error.code,
                message: error.message,
            });
        }
        answer.result.ok_or(Failure::Malformed {
            method: name,
            detail: "a JSON-RPC response with neither result nor error".into(),
        })
    }
}

impl A2aCalls for A2aClient {
    fn call(&self, request: A2aRequest) -> BoxFuture<'_, A2aAnswer> {
        Box::pin(async move {
            let bound = Duration::from_millis(request.agent.timeout_ms);
            let last = Mutex::new(None);
            let ended = match tokio::time::timeout(bound, self.exchange(&request, &last)).await {
                Ok(ended) => ended,
                Err(_) => Err(Failure::Timeout {
                    last: lock(&last).clone(),
                }),
            };
            match &ended {
                Ok(_) => info!(card = %request.agent.card, "the A2A agent answered"),
                Err(failure) => {
                    warn!(card = %request.agent.card, ?failure, "the call to an A2A agent failed");
                }
            }
            answer_of(&request, &ended)
        })
    }
}

/// The networks the agent's declaration lets the client reach.
fn networks_of(request: &A2aRequest) -> Networks {
    Networks {
        loopback: request.agent.allow_networks.loopback,
        private: request.agent.allow_networks.private,
    }
}

/// A failed request as the call's failure: refused by the outbound rules, or unreachable.
fn failure_of(url: &str, error: &reqwest::Error) -> Failure {
    match outbound::blocked_of(error) {
        Some(blocked) => Failure::Blocked {
            url: url.to_owned(),
            why: blocked.to_string(),
        },
        None => Failure::Unreachable {
            url: url.to_owned(),
            detail: describe(error),
        },
    }
}

/// Reads at most `cap` bytes of a body; a longer one is refused, not cut.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|length| length > cap as u64)
    {
        return Err(format!("an answer larger than {cap} bytes"));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err(format!("an answer larger than {cap} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(format!("the answer was cut off: {}", describe(&e))),
        }
    }
}

/// The start of a body as one line of text, for the model to read.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EXCERPT_CHARS)
        .collect();
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An HTTP client error in words, with its causes (reqwest's own text names only the first).
fn describe(error: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        error.to_string()
    };
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn an_excerpt_is_one_short_line() {
        assert_eq!(excerpt(b"{\"error\":\n\t\"no\"}"), "{\"error\": \"no\"}");
        assert_eq!(excerpt(&[b'x'; 500]).len(), 200);
        assert_eq!(excerpt(&[0xff, b'a']), "\u{fffd}a");
    }
}
