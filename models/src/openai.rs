//! The OpenAI-compatible chat-completions adapter (`model: {kind: openai, …}`).
//!
//! One turn is one `POST {base_url}/chat/completions` (more when it must be retried or
//! repaired). The request is built from the run's conversation ([`wire`]), the answer read
//! whole or streamed ([`stream`]); a 429, a 5xx, a timeout or a failed connection is sent
//! again after a jittered, doubling wait that a `Retry-After` overrides ([`retry`]); a
//! malformed turn goes back to the model with what was wrong ([`crate::repair`]).
//! Token usage of every request of a turn is summed into the turn's cost.
//!
//! The API key is read from the environment variable named by `api_key_env` when a request is
//! made, sent in a header marked sensitive, and cut out of every text this adapter returns, so
//! it reaches no log, event, error or reply. The adapter holds no state about runs: a slow
//! server slows the turns that wait on it, never the agent's mailbox (the engine asks a
//! non-immediate model on its own task).

pub mod retry;
pub mod stream;
pub mod wire;

use std::time::{Duration, Instant};

use consort_config::{OpenAiModel, ToolChoice};
use reqwest::header::{
    AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER,
};
use serde_json::Value;
use tracing::{debug, warn};

use self::retry::Failure;
use self::stream::StreamAssembler;
use self::wire::{Sampling, Usage};
use crate::repair::Draft;
use crate::turn::{self, TurnSettings, TurnTransport};
use crate::{Message, Model, ModelError, ModelFuture, ModelRequest, ToolSpec};

/// The largest response body read (a non-streamed answer, or an error body).
const MAX_BODY: usize = 16 << 20;
/// The longest wait for a connection, within the request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A model served over the OpenAI-compatible chat-completions API.
#[derive(Debug)]
pub struct OpenAiAdapter {
    config: OpenAiModel,
    description: String,
    endpoint: String,
    headers: HeaderMap,
    client: reqwest::Client,
}

/// How one attempt ended without an answer.
enum AttemptError {
    /// Worth another attempt.
    Transient(Failure, String),
    /// The server's final word, or an answer that cannot be read.
    Final(ModelError),
}

impl OpenAiAdapter {
    /// An adapter for `config`; `description` (the agent's) goes into consort's system prompt.
    pub fn new(config: OpenAiModel, description: String) -> Result<Self, ModelError> {
        let timeout = Duration::from_secs(u64::from(config.timeout_s));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .build()
            .map_err(|e| ModelError::Config(format!("the HTTP client could not be built: {e}")))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            // agent.yaml checked both; a value the HTTP layer still refuses is named, not sent.
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| ModelError::Config(format!("header `{name}`: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| ModelError::Config(format!("header `{name}`: {e}")))?;
            headers.insert(name, value);
        }
        Ok(Self {
            endpoint: format!("{}/chat/completions", config.base_url),
            config,
            description,
            headers,
            client,
        })
    }

    fn sampling(&self) -> Sampling<'_> {
        Sampling {
            model: &self.config.model,
            temperature: self.config.temperature,
            max_tokens: self.config.max_tokens,
            stream: self.config.stream,
            tool_choice_required: self.config.tool_choice == ToolChoice::Required,
        }
    }

    /// The API key, read now; `None` when no `api_key_env` is configured.
    fn api_key(&self) -> Result<Option<String>, ModelError> {
        let Some(var) = &self.config.api_key_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() => Ok(Some(key.trim().to_owned())),
            _ => Err(ModelError::Config(format!(
                "the environment variable `{var}` (model.api_key_env) is not set or empty; set it to the API key"
            ))),
        }
    }

    /// Sends one turn's request, again after transient failures; returns the draft and usage.
    async fn send(&self, body: &Value) -> Result<(Draft, Usage), ModelError> {
        let mut retry = 0;
        loop {
            let key = self.api_key()?;
            let started = Instant::now();
            let outcome = self.attempt(body, key.as_deref()).await;
            let failure = match outcome {
                Ok(answer) => {
                    debug!(
                        model = %self.config.model, attempt = retry + 1,
                        ms = started.elapsed().as_millis() as u64,
                        input_tokens = answer.1.input, output_tokens = answer.1.output,
                        "model answered"
                    );
                    return Ok(answer);
                }
                Err(AttemptError::Final(e)) => return Err(e),
                Err(AttemptError::Transient(failure, message)) => (failure, message),
            };
            retry += 1;
            let Some(wait) =
                retry::delay(failure.0, retry, self.config.max_retries, rand::random())
            else {
                return Err(ModelError::Unavailable {
                    attempts: retry,
                    last: failure.1,
                });
            };
            warn!(
                model = %self.config.model, attempt = retry,
                "model request failed, trying again in {} ms: {}", wait.as_millis(), failure.1
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(
        &self,
        body: &Value,
        key: Option<&str>,
    ) -> Result<(Draft, Usage), AttemptError> {
        let redact = |text: String| redact(text, key);
        let mut request = self
            .client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                AttemptError::Final(ModelError::Config(format!(
                    "the API key in `{}` is not a valid header value (a line break or a non-ASCII character?)",
                    self.config.api_key_env.as_deref().unwrap_or_default()
                )))
            })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| transport_failure(&e, &redact))?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(retry::parse_retry_after);
            let body = read_body(&mut response, MAX_BODY).await.unwrap_or_default();
            let detail = redact(wire::error_detail(&body));
            return Err(self.status_error(status, retry_after, detail));
        }
        // A server that ignores `stream: true` answers with one JSON body: read it as such.
        let is_event_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if self.config.stream && is_event_stream {
            let mut assembler = StreamAssembler::default();
            loop {
                match response.chunk().await {
                    Ok(Some(bytes)) => assembler
                        .push(&bytes)
                        .map_err(|e| AttemptError::Final(ModelError::Protocol(redact(e))))?,
                    Ok(None) => break,
                    Err(e) => return Err(transport_failure(&e, &redact)),
                }
            }
            if !assembler.is_done() {
                return Err(AttemptError::Transient(
                    Failure::Connect,
                    "the stream ended before `data: [DONE]`".into(),
                ));
            }
            return assembler
                .finish()
                .map_err(|e| AttemptError::Final(ModelError::Protocol(redact(e))));
        }
        let body = read_body(&mut response, MAX_BODY)
            .await
            .map_err(|e| match e {
                BodyError::Transport(e) => transport_failure(&e, &redact),
                BodyError::TooLarge => AttemptError::Final(ModelError::Protocol(format!(
                    "the response is larger than {} MiB",
                    MAX_BODY >> 20
                ))),
            })?;
        wire::parse_response(&body)
            .map_err(|e| AttemptError::Final(ModelError::Protocol(redact(e))))
    }

    /// What a non-2xx status means for this turn.
    fn status_error(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        detail: String,
    ) -> AttemptError {
        let failure = Failure::Status(status, retry_after);
        if retry::is_retryable(failure) {
            return AttemptError::Transient(failure, format!("HTTP {status}: {detail}"));
        }
        let model = &self.config.model;
        let lower = detail.to_lowercase();
        let about_model = lower.contains("model")
            && (status == 404 || lower.contains("not found") || lower.contains("does not exist"));
        AttemptError::Final(match status {
            401 | 403 => ModelError::Unauthorized { status, detail },
            _ if about_model => ModelError::UnknownModel {
                model: model.clone(),
                detail,
            },
            404 => ModelError::Rejected {
                status,
                detail: format!(
                    "{detail} (is base_url `{}` the API root?)",
                    self.config.base_url
                ),
            },
            _ => ModelError::Rejected { status, detail },
        })
    }
}

impl TurnTransport for OpenAiAdapter {
    async fn send_turn(
        &self,
        _request: &ModelRequest<'_>,
        system: &str,
        conversation: &[Message],
        tools: &[ToolSpec],
    ) -> Result<(Draft, Usage), ModelError> {
        let body = wire::request_body(self.sampling(), system, conversation, tools);
        self.send(&body).await
    }
}

impl Model for OpenAiAdapter {
    fn respond<'a>(&'a self, request: ModelRequest<'a>) -> ModelFuture<'a> {
        Box::pin(async move {
            let settings = TurnSettings {
                description: &self.description,
                system: self.config.system.as_deref(),
                repair_attempts: self.config.repair_attempts,
                answer_tool: self.config.tool_choice == ToolChoice::Required,
            };
            turn::ask(self, &request, settings).await
        })
    }
}

/// A failure before any status: a timeout, or a connection that could not be made or broke.
fn transport_failure(e: &reqwest::Error, redact: &impl Fn(String) -> String) -> AttemptError {
    // reqwest's text names the URL and the cause chain; neither holds the key, but it goes
    // through the same redaction as every other text.
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    let failure = if e.is_timeout() {
        Failure::Timeout
    } else {
        Failure::Connect
    };
    AttemptError::Transient(failure, redact(text))
}

enum BodyError {
    Transport(reqwest::Error),
    TooLarge,
}

async fn read_body(response: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(bytes) = response.chunk().await.map_err(BodyError::Transport)? {
        if body.len() + bytes.len() > cap {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&bytes);
    }
    Ok(body)
}

/// `text` with every occurrence of the key cut out.
fn redact(text: String, key: Option<&str>) -> String {
    match key {
        Some(key) if !key.is_empty() && text.contains(key) => text.replace(key, "[redacted]"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn the_key_is_cut_out_of_texts() {
        assert_eq!(
            redact(
                "Incorrect API key provided: sk-live-1; sk-live-1".into(),
                Some("sk-live-1")
            ),
            "Incorrect API key provided: [redacted]; [redacted]"
        );
        assert_eq!(redact("x".into(), None), "x");
        assert_eq!(redact("x".into(), Some("")), "x");
    }
}
