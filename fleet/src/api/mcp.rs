//! The host's agents as MCP tools, at `/mcp` (MCP over streamable HTTP).
//!
//! An MCP client (an IDE, a desktop assistant, another agent framework) that connects to
//! `http://HOST/mcp` lists one tool per agent the host serves, `ask_<agent>`, whose input is
//! `{"input": "…"}`. Calling it starts a root run of that agent, exactly as `POST /runs`
//! would: the run acts for the caller's bearer token (`Authorization: Bearer`, the same tokens
//! as the rest of the API), so consent, visibility, approval gates and the per-principal
//! admission share apply unchanged. The call waits for the run to settle, up to
//! [`ANSWER_WAIT`], and answers with its output; a run that fails, is refused, or is still
//! open (blocked on an approval, say) answers as a tool error whose text says why and names
//! the run, so the client's model can act on it.
//!
//! The server is stateless (no MCP sessions): every request carries its own token and is
//! answered on its own, so a restarted host serves its MCP clients without a handshake again.
//! This module translates MCP to calls on [`Host`]; who may do what is [`crate::access`].

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use consort_actors::{ActorsError, Channel, Host, RunRecord, RunStatus};

use crate::access::{self, Action};
use crate::auth::HostAuth;

/// What every tool's name starts with; the rest is the agent's name.
pub(crate) const TOOL_PREFIX: &str = "ask_";
/// How long a tool call waits for its run to settle before answering with where it stands.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(300);
/// Tools per page of `tools/list`.
const TOOLS_PER_PAGE: usize = 500;
/// The longest input a tool call takes (as `POST /runs`).
const MAX_INPUT_BYTES: usize = 256 * 1024;

/// The MCP server of one host.
#[derive(Clone)]
pub(crate) struct AgentTools {
    host: Host,
    auth: Arc<HostAuth>,
}

/// The tower service `/mcp` is served by.
pub(crate) fn service(
    host: Host,
    auth: Arc<HostAuth>,
) -> StreamableHttpService<AgentTools, NeverSessionManager> {
    let tools = AgentTools { host, auth };
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    // The API's front door has checked `Host` and `Origin` already, against the names this
    // host was started to answer to.
    config.allowed_hosts = Vec::new();
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The tool of `agent`: its name, what it is for, and its input.
fn tool_of(agent: &str, description: &str) -> Tool {
    let about = if description.trim().is_empty() {
        String::new()
    } else {
        format!(
            " It describes itself as: {}.",
            description.trim().trim_end_matches('.')
        )
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "What to ask the agent, in words."}
        },
        "required": ["input"],
        "additionalProperties": false,
    });
    let serde_json::Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new(
        format!("{TOOL_PREFIX}{agent}"),
        format!(
            "Ask the consort agent `{agent}`: it answers with its own tools and data and shares only the answer.{about}"
        ),
        Arc::new(schema),
    )
}

/// The agent a tool name asks, if it names one of `agents`.
fn agent_of<'a>(tool: &str, mut agents: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let name = tool.strip_prefix(TOOL_PREFIX)?;
    agents.find(|a| *a == name)
}

/// What a tool call answers for a run as it stands after the wait.
fn answer_for(run: &RunRecord) -> CallToolResult {
    let structured = json!({
        "run_id": run.id.as_str(),
        "agent": run.agent,
        "status": run.status.as_str(),
    });
    let mut result = match run.status {
        RunStatus::Succeeded => CallToolResult::success(vec![ContentBlock::text(
            run.output.clone().unwrap_or_default(),
        )]),
        RunStatus::Failed => CallToolResult::error(vec![ContentBlock::text(format!(
            "{} did not answer: {} (run {})",
            run.agent,
            run.error.as_deref().unwrap_or("the run failed"),
            run.id
        ))]),
        RunStatus::Blocked => CallToolResult::error(vec![ContentBlock::text(format!(
            "{} has not answered yet: run {} waits for an operator to approve a gated tool; ask again later or have an operator decide it",
            run.agent, run.id
        ))]),
        other => CallToolResult::error(vec![ContentBlock::text(format!(
            "{} has not answered yet: run {} is {other} after {} s; its answer can be read later from the host's API",
            run.agent,
            run.id,
            ANSWER_WAIT.as_secs()
        ))]),
    };
    result.structured_content = Some(structured);
    result
}

impl AgentTools {
    /// The caller, from the `Authorization` header of the HTTP request this MCP request came
    /// in: its identity for the run, and whether it may start runs at all.
    async fn caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<consort_actors::visibility::Identity, String> {
        let no_headers = axum::http::HeaderMap::new();
        let headers = context
            .extensions
            .get::<axum::http::request::Parts>()
            .map_or(&no_headers, |parts| &parts.headers);
        let (identity, who) = super::requester(&self.auth, headers).await;
        match access::authorize(&who, self.auth.anonymous(), Action::StartRun) {
            Ok(()) => Ok(identity),
            Err(denial) => Err(super::ApiError::from(denial).message),
        }
    }

    async fn ask(
        &self,
        agent: &str,
        input: &str,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let identity = match self.caller(context).await {
            Ok(identity) => identity,
            Err(message) => return CallToolResult::error(vec![ContentBlock::text(message)]),
        };
        if input.trim().is_empty() {
            return CallToolResult::error(vec![ContentBlock::text(
                "`input` is empty: say what to ask the agent",
            )]);
        }
        if input.len() > MAX_INPUT_BYTES {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "`input` is {} bytes; the limit is {MAX_INPUT_BYTES}",
                input.len()
            ))]);
        }
        let started = self
            .host
            .start_run_as(agent, input, Channel::Api, identity)
            .await;
        let run = match started {
            Ok(run) => run,
            Err(ActorsError::Refused(refusal)) => {
                return CallToolResult::error(vec![ContentBlock::text(format!(
                    "{agent} refused the request ({}): {refusal}",
                    refusal.code()
                ))]);
            }
            Err(e) => {
                tracing::warn!(agent, "an MCP tool call could not start a run: {e}");
                return CallToolResult::error(vec![ContentBlock::text(format!(
                    "the run could not be started: {e}"
                ))]);
            }
        };
        tracing::info!(run_id = %run.id, agent, principal = %run.principal, "run started through MCP");
        match self.host.wait(&run.id, ANSWER_WAIT).await {
            Ok(run) => answer_for(&run),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "run {} was started but could not be read: {e}",
                run.id
            ))]),
        }
    }
}

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("consort", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool asks one agent of this consort host and returns its answer. Send the host's bearer token; the agent answers for the token's principal.",
            )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.caller(&context)
            .await
            .map_err(|message| ErrorData::invalid_request(message, None))?;
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor.parse::<usize>().map_err(|_| {
                ErrorData::invalid_params("the cursor is not one this server gave out", None)
            })?,
        };
        let tools: Vec<Tool> = self
            .host
            .described_agents()
            .skip(start)
            .take(TOOLS_PER_PAGE)
            .map(|(agent, description)| tool_of(agent, description))
            .collect();
        let next = start + tools.len();
        let mut page = ListToolsResult::with_all_items(tools);
        if next < self.host.agents().len() {
            page.next_cursor = Some(next.to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let agents = self.host.agents().iter().map(String::as_str);
        let Some(agent) = agent_of(&request.name, agents).map(str::to_owned) else {
            return Err(ErrorData::invalid_params(
                format!("no tool named `{}` here", request.name),
                None,
            ));
        };
        let input = request
            .arguments
            .as_ref()
            .and_then(|args| args.get("input"))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let span = tracing::info_span!("mcp_tool_call", agent = %agent);
        let result =
            tracing::Instrument::instrument(self.ask(&agent, &input, &context), span).await;
        Ok(result.into())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let name: Cow<'_, str> = Cow::Borrowed(name);
        self.host
            .described_agents()
            .find(|(agent, _)| name.strip_prefix(TOOL_PREFIX) == Some(*agent))
            .map(|(agent, description)| tool_of(agent, description))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_names_its_agent_and_takes_one_input() {
        let tool = tool_of("cfo", "finance: the ledger.");
        assert_eq!(tool.name, "ask_cfo");
        let about = tool.description.as_deref().unwrap_or_default();
        assert!(about.contains("`cfo`") && about.contains("finance: the ledger."));
        assert_eq!(tool.input_schema["required"], json!(["input"]));
        assert!(
            !tool_of("x", "")
                .description
                .unwrap_or_default()
                .contains("describes")
        );
    }

    fn run(status: RunStatus) -> RunRecord {
        let mut run: RunRecord = serde_json::from_value(json!({
            "id": "run_0123456789abcdef0123456789abcdef", "agent": "cfo", "status": "queued",
            "channel": "api", "parent_run": null, "parent_agent": null, "tool_use_id": null,
            "hop_depth": 0, "input": "q", "output": null, "error": null, "created_at_ms": 1,
            "settled_at_ms": null,
            "cost": {"model_turns": 0, "tool_calls": 0, "calls_placed": 0, "input_tokens": 0, "output_tokens": 0, "wall_ms": 0}
        }))
        .unwrap();
        run.status = status;
        run
    }

    fn text(result: &CallToolResult) -> String {
        serde_json::to_value(&result.content).unwrap()[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn each_way_a_run_stands_answers_in_words_with_the_run_named() {
        let mut done = run(RunStatus::Succeeded);
        done.output = Some("48250.00".into());
        let answer = answer_for(&done);
        assert_eq!(answer.is_error, Some(false));
        assert_eq!(text(&answer), "48250.00");
        assert_eq!(answer.structured_content.unwrap()["status"], "succeeded");

        let mut failed = run(RunStatus::Failed);
        failed.error = Some("the ledger is locked".into());
        let answer = answer_for(&failed);
        assert_eq!(answer.is_error, Some(true));
        assert!(text(&answer).contains("the ledger is locked"));

        let answer = answer_for(&run(RunStatus::Blocked));
        assert_eq!(answer.is_error, Some(true));
        assert!(text(&answer).contains("approve"));
        for open in [RunStatus::Queued, RunStatus::Running, RunStatus::Waiting] {
            let answer = answer_for(&run(open));
            assert_eq!(answer.is_error, Some(true));
            assert!(text(&answer).contains("run_0123456789abcdef0123456789abcdef"));
        }
    }

    #[test]
    fn only_a_served_agent_has_a_tool() {
        let agents = ["cfo", "cmo"];
        assert_eq!(agent_of("ask_cfo", agents.into_iter()), Some("cfo"));
        assert_eq!(agent_of("ask_cto", agents.into_iter()), None);
        assert_eq!(agent_of("cfo", agents.into_iter()), None);
        assert_eq!(agent_of("ask_", agents.into_iter()), None);
    }
}
