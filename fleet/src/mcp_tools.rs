//! The host's MCP client: the sessions behind agents' `kind: mcp` tool entries.
//!
//! [`McpClient`] is the [`ToolServers`] a host gives its agents. Each agent opens one
//! [`McpSession`] per declared server; the session connects on its first use (a listing before
//! a model turn, see `consort_actors::tools`), keeps the connection for the agent's life, and
//! connects again on the next use after the server died or closed the session. Two transports,
//! both rmcp's (the official MCP SDK): a program started by the host speaking MCP on its stdio
//! (`command:`), and a streamable HTTP endpoint (`url:`, with an optional bearer token read
//! from the agent's env through `token_env:`).
//!
//! A started program runs in its agent's folder (a relative `./server.py` is the agent's own)
//! with a cleared environment: `PATH`, `HOME`, `TMPDIR`, `LANG`, `LC_ALL`
//! and `SYSTEMROOT` of the host, and of the agent's env only the keys the entry lists in
//! `env_keys:`. It runs in a process group of its own and is killed with its group when the
//! session ends: the agent's actor stops (idle retirement, shutdown, restart), a reload changes
//! the entry, or the host drops it as dead. Nothing it started outlives the session.
//!
//! Every request is bounded: starting or reaching the server and the handshake by the entry's
//! `connect_timeout_ms`, each listing and each call by its `timeout_ms`. Every failure is a typed `ToolError` whose text tells the model what to
//! do; what a result means is decided in `answer`, pure.
//!
//! This module never decides whether a use is allowed (the agent's catalog did, before the
//! call reached it), never writes a run store, and never hands the agent's env to a server
//! beyond what the entry lists.

mod answer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use tokio::sync::Mutex;
use tracing::{Instrument, info, info_span, warn};

use consort_actors::tools::{
    ListFuture, ListedTool, ToolError, ToolFuture, ToolServer, ToolServers,
};
use consort_config::{McpServerConfig, McpTransport};

use answer::answer_text;

/// The host variables a started server gets besides the keys its entry lists: enough to find
/// programs and a home, nothing that names a secret.
const PASSED_HOST_VARS: &[&str] = &["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "SYSTEMROOT"];

/// The MCP client a host gives its agents.
#[derive(Clone, Copy, Debug, Default)]
pub struct McpClient;

impl ToolServers for McpClient {
    fn open(
        &self,
        agent: &str,
        dir: &Path,
        name: &str,
        config: &McpServerConfig,
        env: &BTreeMap<String, String>,
    ) -> Arc<dyn ToolServer> {
        let target = match &config.transport {
            McpTransport::Command { program, args } => Target::Command {
                program: program.clone(),
                args: args.clone(),
                dir: dir.to_path_buf(),
                env: config
                    .env_keys
                    .iter()
                    .filter_map(|k| env.get(k).map(|v| (k.clone(), v.clone())))
                    .collect(),
            },
            McpTransport::Http { url, token_env } => Target::Http {
                url: url.clone(),
                // consort-config checked the key is in the env.
                bearer: token_env.as_ref().and_then(|k| env.get(k).cloned()),
            },
        };
        Arc::new(McpSession {
            agent: agent.to_owned(),
            entry: name.to_owned(),
            target,
            timeout: Duration::from_millis(u64::from(config.timeout_ms)),
            connect_timeout: Duration::from_millis(u64::from(config.connect_timeout_ms)),
            running: Mutex::new(Running {
                session: None,
                opened: 0,
            }),
        })
    }
}

/// Where a session's server is.
enum Target {
    Command {
        program: String,
        args: Vec<String>,
        /// The agent's folder: the program's working directory.
        dir: PathBuf,
        env: Vec<(String, String)>,
    },
    Http {
        url: String,
        bearer: Option<String>,
    },
}

/// One agent's session with one declared server.
struct McpSession {
    agent: String,
    entry: String,
    target: Target,
    /// The bound of each request.
    timeout: Duration,
    /// The bound of starting or reaching the server and its handshake.
    connect_timeout: Duration,
    running: Mutex<Running>,
}

/// A session's running client.
struct Running {
    /// `None` before the first use and after the server was found dead. Dropping it ends the
    /// session (and kills a started program's process group).
    session: Option<RunningService<RoleClient, ()>>,
    /// Connections opened so far: a request that failed drops only the connection it used.
    opened: u64,
}

impl McpSession {
    fn unavailable(&self, detail: impl Into<String>) -> ToolError {
        ToolError::ServerUnavailable {
            server: self.entry.clone(),
            detail: detail.into(),
        }
    }

    fn timed_out(&self) -> ToolError {
        ToolError::ServerTimedOut {
            server: self.entry.clone(),
            limit_ms: self.timeout.as_millis() as u64,
        }
    }

    /// The peer of a live session and which connection it is, connecting first when there is
    /// none or it died.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), ToolError> {
        let mut running = self.running.lock().await;
        if let Some(service) = running.session.as_ref() {
            if !service.is_closed() && !service.peer().is_transport_closed() {
                return Ok((service.peer().clone(), running.opened));
            }
            info!(agent = %self.agent, server = %self.entry, "MCP session ended; connecting again");
            running.session = None;
        }
        let service = match tokio::time::timeout(self.connect_timeout, self.connect()).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(self.unavailable(format!(
                    "it did not start or answer the MCP handshake within {} ms",
                    self.connect_timeout.as_millis()
                )));
            }
        };
        let peer = service.peer().clone();
        running.session = Some(service);
        running.opened += 1;
        Ok((peer, running.opened))
    }

    async fn connect(&self) -> Result<RunningService<RoleClient, ()>, ToolError> {
        match &self.target {
            Target::Command {
                program,
                args,
                dir,
                env,
            } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).current_dir(dir).env_clear();
                for var in PASSED_HOST_VARS {
                    if let Some(value) = std::env::var_os(var) {
                        command.env(var, value);
                    }
                }
                command.envs(env.iter().map(|(k, v)| (k, v)));
                let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
                wrapped
                    .wrap(process_wrap::tokio::ProcessGroup::leader())
                    .wrap(process_wrap::tokio::KillOnDrop);
                let (transport, _) = TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::inherit())
                    .spawn()
                    .map_err(|e| {
                        self.unavailable(format!(
                            "the program `{program}` could not be started ({e})"
                        ))
                    })?;
                info!(agent = %self.agent, server = %self.entry, %program, "MCP server started");
                ().serve(transport).await.map_err(|e| {
                    self.unavailable(format!(
                        "the program `{program}` started but did not complete the MCP handshake ({e}); it may have exited"
                    ))
                })
            }
            Target::Http { url, bearer } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = bearer {
                    config = config.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                ().serve(transport).await.map_err(|e| {
                    self.unavailable(format!("`{url}` could not be reached over MCP ({e})"))
                })
            }
        }
    }

    /// Ends connection `opened` after a transport failure, so the next use connects again (a
    /// newer connection another use opened meanwhile is kept).
    async fn drop_session(&self, opened: u64) {
        let mut running = self.running.lock().await;
        if running.opened == opened {
            running.session = None;
        }
    }

    /// A failed request as the model reads it; a dead connection is dropped.
    async fn request_failed(&self, error: ServiceError, opened: u64) -> ToolError {
        match error {
            ServiceError::McpError(e) => answer::protocol_error(&e.code.0, &e.message),
            ServiceError::Timeout { .. } => self.timed_out(),
            other => {
                warn!(agent = %self.agent, server = %self.entry, error = %other, "MCP request failed; the session is dropped");
                self.drop_session(opened).await;
                self.unavailable(format!(
                    "the connection failed ({other}); the next use starts or reaches it again"
                ))
            }
        }
    }
}

impl ToolServer for McpSession {
    fn list(&self) -> ListFuture<'_> {
        Box::pin(async move {
            let (peer, opened) = self.peer().await?;
            let tools = match tokio::time::timeout(self.timeout, peer.list_all_tools()).await {
                Ok(Ok(tools)) => tools,
                Ok(Err(e)) => return Err(self.request_failed(e, opened).await),
                Err(_) => return Err(self.timed_out()),
            };
            Ok(tools
                .into_iter()
                .map(|t| ListedTool {
                    name: t.name.into_owned(),
                    description: t
                        .description
                        .map(|d| d.into_owned())
                        .or(t.title)
                        .unwrap_or_default(),
                    input_schema: Value::Object((*t.input_schema).clone()),
                })
                .collect())
        })
    }

    fn call<'a>(&'a self, tool: &'a str, input: &'a Value) -> ToolFuture<'a> {
        let span = info_span!("mcp_call", agent = %self.agent, server = %self.entry, tool);
        Box::pin(
            async move {
                let Value::Object(arguments) = input else {
                    return Err(ToolError::InvalidInput(
                        "the arguments must be a JSON object matching the tool's input schema"
                            .into(),
                    ));
                };
                let (peer, opened) = self.peer().await?;
                let params =
                    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
                match tokio::time::timeout(self.timeout, peer.call_tool(params)).await {
                    Ok(Ok(result)) => answer_text(&result),
                    Ok(Err(e)) => Err(self.request_failed(e, opened).await),
                    Err(_) => Err(self.timed_out()),
                }
            }
            .instrument(span),
        )
    }
}
