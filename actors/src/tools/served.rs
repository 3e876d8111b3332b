//! Tools a server lists: an agent.yaml entry of `kind: mcp` stands for every tool its MCP
//! server lists, known only once the server has been asked.
//!
//! This module owns the seam a host plugs its MCP client into ([`ToolServers`], which opens one
//! [`ToolServer`] per declared entry of an agent), the tool each listed tool becomes
//! ([`ServedTool`]: named `<entry>__<tool>`, with the entry's `auth:`, `guard:` (one set of
//! guards for all the entry's tools: a `quota` counts uses of the server) and `approval:`, so
//! it goes through the same authorization pipeline and approval gate as any
//! declared tool), the pure rules of which listed tools are taken ([`served_tool_name`],
//! [`schema_problem`]) and one agent's servers with where each listing stands
//! ([`ServerSlots`]).
//!
//! When a server is asked: lazily. Nothing is started when the agent starts (a host may serve
//! many agents, most of them asleep, and a server that is down must not keep an agent from
//! starting); before a run's model turn, every server not yet listed, or whose last listing
//! failed long enough ago ([`relist_after`]: 15 s, doubling to 5 minutes while it keeps
//! failing), is listed on a task of its own, and the turn is asked
//! once the answers are in, so the model's first turn already sees the tools. A session, once
//! open, is kept for the agent's life and restarted by the client on the next use after it
//! died; dropping the slots (the actor stops, or a reload changes the entry) closes it.
//!
//! This module never opens a connection or starts a process (the host's [`ToolServers`] does)
//! and never decides whether a use is allowed (the catalog's pipeline does).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use consort_config::{
    AgentConfig, Approval, MCP_TOOL_SEPARATOR, McpServerConfig, ToolConfig, ToolKind,
};

use super::{Tool, ToolContext, ToolError, ToolFuture, declare_guarded};
use crate::guard::{Guard, declared_guard};
use crate::model::ToolSpec;

/// How long after a failed listing a server is asked again (before a later model turn).
pub const RELIST_AFTER: Duration = Duration::from_secs(15);

/// The longest wait between two listings of a server that keeps failing.
pub const MAX_RELIST_AFTER: Duration = Duration::from_secs(300);

/// How long after the `failures`-th failed listing in a row a server is asked again:
/// [`RELIST_AFTER`], doubling with each failure, at most [`MAX_RELIST_AFTER`]. A server that
/// hangs then costs a turn its time limit rarely, not every 15 s.
pub fn relist_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(8);
    (RELIST_AFTER * 2u32.pow(doublings)).min(MAX_RELIST_AFTER)
}

/// The longest name the model may be given for a tool (the chat-completions rule, and
/// consort's own for declared tools).
const MAX_TOOL_NAME: usize = 64;

/// One tool as a server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedTool {
    /// The tool's name on the server.
    pub name: String,
    /// What the server says the tool does.
    pub description: String,
    /// The tool's input JSON schema, as the server gives it.
    pub input_schema: Value,
}

/// The boxed future of [`ToolServer::list`].
pub type ListFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<ListedTool>, ToolError>> + Send + 'a>>;

/// One agent's session with one declared server. Implementations bound every request by the
/// entry's `timeout_ms`, start or reach the server again on the next use after it died, and
/// stop what they started when dropped.
pub trait ToolServer: Send + Sync + 'static {
    /// The server's tools (connecting first if needed).
    fn list(&self) -> ListFuture<'_>;
    /// Calls the server's tool `tool` with `input`; the text answered goes to the model.
    fn call<'a>(&'a self, tool: &'a str, input: &'a Value) -> ToolFuture<'a>;
}

/// What a host reaches MCP servers with.
pub trait ToolServers: Send + Sync + 'static {
    /// The session of `agent` (whose folder is `dir`, where a started program runs) with the
    /// server its entry `name` declares, with the agent's `env` (what the entry's `env_keys`
    /// and `token_env` name). Starts nothing yet.
    fn open(
        &self,
        agent: &str,
        dir: &Path,
        name: &str,
        config: &McpServerConfig,
        env: &BTreeMap<String, String>,
    ) -> Arc<dyn ToolServer>;
}

/// The name the model sees for `tool` of the entry `server`, or why the tool is left out.
pub fn served_tool_name(server: &str, tool: &str) -> Result<String, String> {
    let name = format!("{server}{MCP_TOOL_SEPARATOR}{tool}");
    if tool.is_empty() {
        return Err("the server lists a tool with an empty name".into());
    }
    if !tool
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "`{tool}` holds characters a model's tool name may not (letters, digits, `_` and `-` only)"
        ));
    }
    if name.len() > MAX_TOOL_NAME {
        return Err(format!(
            "`{name}` is longer than {MAX_TOOL_NAME} characters; give the entry a shorter name"
        ));
    }
    Ok(name)
}

/// What is wrong with a listed tool's input schema for a model, if anything: it must be a JSON
/// schema object whose `type` is `object` (the form every tool input takes).
pub fn schema_problem(schema: &Value) -> Option<String> {
    let Value::Object(map) = schema else {
        return Some("its input schema is not a JSON object".into());
    };
    match map.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        _ => return Some("its input schema's `type` is not `object`".into()),
    }
    match map.get("properties") {
        None | Some(Value::Object(_)) => None,
        Some(_) => Some("its input schema's `properties` is not an object".into()),
    }
}

/// The tools `listed` by the server of `entry` that a model may be given, and why each other
/// was left out.
pub(crate) fn take_listed(
    entry: &str,
    listed: &[ListedTool],
) -> (Vec<(String, ListedTool)>, Vec<String>) {
    let mut taken = Vec::new();
    let mut left_out = Vec::new();
    let mut names = BTreeSet::new();
    for tool in listed {
        let name = match served_tool_name(entry, &tool.name) {
            Ok(name) => name,
            Err(why) => {
                left_out.push(why);
                continue;
            }
        };
        if let Some(why) = schema_problem(&tool.input_schema) {
            left_out.push(format!("`{}`: {why}", tool.name));
            continue;
        }
        if !names.insert(name.clone()) {
            left_out.push(format!("`{}` is listed twice", tool.name));
            continue;
        }
        taken.push((name, tool.clone()));
    }
    (taken, left_out)
}

/// One listed tool as one of the agent's tools.
struct ServedTool {
    name: String,
    remote: String,
    description: String,
    input_schema: Value,
    approval: Approval,
    server: Arc<dyn ToolServer>,
    /// The bound of one use, beyond the client's own: a restart and the call.
    bound: Duration,
    entry: String,
}

impl Tool for ServedTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
    fn approval(&self) -> Approval {
        self.approval
    }
    fn invoke<'a>(&'a self, _ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a> {
        Box::pin(async move {
            match tokio::time::timeout(self.bound, self.server.call(&self.remote, input)).await {
                Ok(answer) => answer,
                Err(_) => Err(ToolError::ServerTimedOut {
                    server: self.entry.clone(),
                    limit_ms: self.bound.as_millis() as u64,
                }),
            }
        })
    }
}

/// Where one server's listing stands.
enum Listing {
    NotYet,
    /// Being asked; `failures` in a row before this one.
    Asking {
        failures: u32,
    },
    Listed(Vec<Arc<dyn Tool>>),
    Failed {
        at: Instant,
        error: ToolError,
        failures: u32,
    },
}

struct Slot {
    /// Which opening of the entry this is: a listing asked of an earlier one (before a reload
    /// changed the entry) is not applied to this one.
    opened: u64,
    config: ToolConfig,
    mcp: McpServerConfig,
    server: Arc<dyn ToolServer>,
    /// The entry's guards, shared by all its tools: a `quota` counts the uses of the server.
    guards: Vec<Arc<dyn Guard>>,
    listing: Listing,
}

/// A server to list now: its entry's name, its session and the bound of the listing.
pub(crate) struct DueListing {
    pub name: String,
    pub opened: u64,
    pub server: Arc<dyn ToolServer>,
    pub bound: Duration,
}

/// One agent's declared servers, their sessions and what each listed.
#[derive(Default)]
pub(crate) struct ServerSlots {
    slots: BTreeMap<String, Slot>,
    /// Openings so far, for [`Slot::opened`].
    openings: u64,
}

/// A session for an agent on a host that reaches no MCP servers (an embedding app that gave
/// its host no [`ToolServers`]).
struct NoClient {
    entry: String,
}

impl NoClient {
    fn refusal(&self) -> ToolError {
        ToolError::ServerUnavailable {
            server: self.entry.clone(),
            detail: "this host reaches no MCP servers (it was started without an MCP client)"
                .into(),
        }
    }
}

impl ToolServer for NoClient {
    fn list(&self) -> ListFuture<'_> {
        Box::pin(async { Err(self.refusal()) })
    }
    fn call<'a>(&'a self, _tool: &'a str, _input: &'a Value) -> ToolFuture<'a> {
        Box::pin(async { Err(self.refusal()) })
    }
}

/// The entry's two limits and a second: a (re)start of the server, then the call.
fn bound_of(mcp: &McpServerConfig) -> Duration {
    Duration::from_millis(u64::from(mcp.connect_timeout_ms) + u64::from(mcp.timeout_ms) + 1_000)
}

impl ServerSlots {
    /// The slots of `config`'s mcp entries; a slot whose entry (and env) is unchanged in
    /// `previous` keeps its session and listing.
    pub(crate) fn for_config(
        config: &AgentConfig,
        servers: Option<&Arc<dyn ToolServers>>,
        mut previous: Self,
        previous_env: &BTreeMap<String, String>,
    ) -> Self {
        let mut slots = BTreeMap::new();
        let mut openings = previous.openings;
        for t in &config.tools {
            let ToolKind::Mcp(mcp) = &t.kind else {
                continue;
            };
            if let Some(old) = previous.slots.remove(&t.name)
                && old.config == *t
                && &config.env == previous_env
            {
                slots.insert(t.name.clone(), old);
                continue;
            }
            let server: Arc<dyn ToolServer> = match servers {
                Some(s) => s.open(&config.name, &config.dir, &t.name, mcp, &config.env),
                None => Arc::new(NoClient {
                    entry: t.name.clone(),
                }),
            };
            openings += 1;
            slots.insert(
                t.name.clone(),
                Slot {
                    opened: openings,
                    config: t.clone(),
                    mcp: mcp.clone(),
                    server,
                    guards: t.guard.iter().map(declared_guard).collect(),
                    listing: Listing::NotYet,
                },
            );
        }
        Self { slots, openings }
    }

    /// Whether a listing is out: a model turn waits for it.
    pub(crate) fn asking(&self) -> bool {
        self.slots
            .values()
            .any(|s| matches!(s.listing, Listing::Asking { .. }))
    }

    /// The servers to list before the next model turn (not listed yet, or failed more than
    /// [`relist_after`] ago), marked as being asked: only those `may_start` lets start, given
    /// the entry's name and a stand-in that carries its declaration (a run whose identity may
    /// see none of a server's tools never starts its program).
    pub(crate) fn take_due(
        &mut self,
        now: Instant,
        mut may_start: impl FnMut(&str, &dyn Tool) -> bool,
    ) -> Vec<DueListing> {
        let mut due = Vec::new();
        for (name, slot) in &mut self.slots {
            let due_with = match &slot.listing {
                Listing::NotYet => Some(0),
                Listing::Failed { at, failures, .. } => {
                    (now.duration_since(*at) >= relist_after(*failures)).then_some(*failures)
                }
                Listing::Asking { .. } | Listing::Listed(_) => None,
            };
            if let Some(failures) = due_with {
                let stand_in = declare_guarded(
                    &slot.config,
                    Arc::new(Unlisted {
                        name: format!("{name}{MCP_TOOL_SEPARATOR}*"),
                    }),
                    slot.guards.clone(),
                );
                if !may_start(name, stand_in.as_ref()) {
                    continue;
                }
                slot.listing = Listing::Asking { failures };
                due.push(DueListing {
                    name: name.clone(),
                    opened: slot.opened,
                    server: slot.server.clone(),
                    bound: bound_of(&slot.mcp),
                });
            }
        }
        due
    }

    /// Records what the server of entry `name`, as `opened`, listed (or why it could not).
    /// Returns the tools left out, with why, for the log.
    pub(crate) fn listed(
        &mut self,
        name: &str,
        opened: u64,
        result: Result<Vec<ListedTool>, ToolError>,
        now: Instant,
    ) -> Vec<String> {
        let Some(slot) = self.slots.get_mut(name).filter(|s| s.opened == opened) else {
            return Vec::new();
        };
        match result {
            Ok(listed) => {
                let (taken, left_out) = take_listed(name, &listed);
                let tools = taken
                    .into_iter()
                    .map(|(full, tool)| {
                        let served = ServedTool {
                            name: full,
                            remote: tool.name,
                            description: tool.description,
                            input_schema: tool.input_schema,
                            approval: slot.config.approval,
                            server: slot.server.clone(),
                            bound: bound_of(&slot.mcp),
                            entry: name.to_owned(),
                        };
                        declare_guarded(&slot.config, Arc::new(served), slot.guards.clone())
                    })
                    .collect();
                slot.listing = Listing::Listed(tools);
                left_out
            }
            Err(error) => {
                let failures = match slot.listing {
                    Listing::Asking { failures } => failures + 1,
                    _ => 1,
                };
                slot.listing = Listing::Failed {
                    at: now,
                    error,
                    failures,
                };
                Vec::new()
            }
        }
    }

    /// Whether `tool_name` belongs to a server this incarnation has not listed yet (never asked,
    /// or being asked): a use of it waits for the listing rather than failing.
    pub(crate) fn listing_pending(&self, tool_name: &str) -> bool {
        tool_name
            .split_once(MCP_TOOL_SEPARATOR)
            .and_then(|(entry, _)| self.slots.get(entry))
            .is_some_and(|slot| matches!(slot.listing, Listing::NotYet | Listing::Asking { .. }))
    }

    /// Every listed tool of every server, for the catalog.
    pub(crate) fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.slots
            .values()
            .filter_map(|s| match &s.listing {
                Listing::Listed(tools) => Some(tools.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Why a use of `tool_name`, which the catalog does not hold, cannot run, when its name
    /// says it belongs to one of these servers; with a stand-in of the tool that carries its
    /// entry's auth and guards, so the use is authorized as the tool would be before a caller
    /// is told anything about the server.
    pub(crate) fn unlisted(&self, tool_name: &str) -> Option<(Arc<dyn Tool>, ToolError)> {
        let (entry, tool) = tool_name.split_once(MCP_TOOL_SEPARATOR)?;
        let slot = self.slots.get(entry)?;
        let stand_in = declare_guarded(
            &slot.config,
            Arc::new(Unlisted {
                name: tool_name.to_owned(),
            }),
            slot.guards.clone(),
        );
        let why = match &slot.listing {
            Listing::Failed { error, .. } => match error {
                ToolError::ServerUnavailable { .. } | ToolError::ServerTimedOut { .. } => {
                    error.clone()
                }
                other => ToolError::ServerUnavailable {
                    server: entry.to_owned(),
                    detail: other.to_string(),
                },
            },
            Listing::Listed(_) => ToolError::Failed(format!(
                "the tool server `{entry}` lists no tool `{tool}`; use search_tools to find the tools you can use"
            )),
            Listing::NotYet | Listing::Asking { .. } => ToolError::ServerUnavailable {
                server: entry.to_owned(),
                detail: "its tools are not listed yet".into(),
            },
        };
        Some((stand_in, why))
    }
}

/// A tool of a server that is not listed, as authorization sees it: the entry's declaration
/// and nothing to run.
struct Unlisted {
    name: String,
}

impl Tool for Unlisted {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        }
    }
    fn invoke<'a>(&'a self, _ctx: ToolContext<'a>, _input: &'a Value) -> ToolFuture<'a> {
        Box::pin(async { Err(ToolError::Failed("this tool is not listed".into())) })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn listed(name: &str, schema: Value) -> ListedTool {
        ListedTool {
            name: name.into(),
            description: String::new(),
            input_schema: schema,
        }
    }

    #[test]
    fn relisting_backs_off() {
        assert_eq!(relist_after(1), Duration::from_secs(15));
        assert_eq!(relist_after(2), Duration::from_secs(30));
        assert_eq!(relist_after(4), Duration::from_secs(120));
        assert_eq!(relist_after(6), MAX_RELIST_AFTER);
        assert_eq!(relist_after(u32::MAX), MAX_RELIST_AFTER);
        assert_eq!(relist_after(0), RELIST_AFTER);
    }

    #[test]
    fn names() {
        assert_eq!(
            served_tool_name("time", "get_current_time").unwrap(),
            "time__get_current_time"
        );
        assert_eq!(served_tool_name("t", "a-b_C9").unwrap(), "t__a-b_C9");
        assert!(served_tool_name("time", "").is_err());
        assert!(served_tool_name("time", "get.time").is_err());
        assert!(served_tool_name("time", "get time").is_err());
        assert!(served_tool_name("time", "zeit/jetzt").is_err());
        let long = "x".repeat(59);
        assert!(served_tool_name("time", &long).is_err());
        assert!(served_tool_name("time", &"x".repeat(58)).is_ok());
    }

    #[test]
    fn schemas() {
        assert_eq!(schema_problem(&json!({"type": "object"})), None);
        assert_eq!(
            schema_problem(&json!({"type": "object", "properties": {"a": {"type": "string"}}})),
            None
        );
        assert!(schema_problem(&json!({"type": "string"})).is_some());
        assert!(schema_problem(&json!({})).is_some());
        assert!(schema_problem(&json!([1])).is_some());
        assert!(schema_problem(&json!({"type": "object", "properties": 3})).is_some());
    }

    fn agent(dir: &Path, timeout_ms: u32) -> AgentConfig {
        let yaml = format!(
            "name: clock\nmodel: {{script: [{{answer: ok}}]}}\ntools:\n  - {{name: time, kind: mcp, command: [python3], timeout_ms: {timeout_ms}, approval: required}}\n"
        );
        std::fs::write(dir.join("agent.yaml"), yaml).unwrap();
        AgentConfig::load(dir).unwrap()
    }

    #[test]
    fn a_server_is_listed_once_and_again_only_after_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let config = agent(dir.path(), 1_000);
        let mut slots = ServerSlots::for_config(&config, None, ServerSlots::default(), &config.env);
        let t0 = Instant::now();
        assert!(!slots.asking());
        let due = slots.take_due(t0, |_, _| true);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].bound, Duration::from_millis(32_000));
        assert!(slots.asking());
        assert!(
            slots.take_due(t0, |_, _| true).is_empty(),
            "asked once at a time"
        );
        assert!(matches!(
            slots.unlisted("time__get_current_time").map(|(_, e)| e),
            Some(ToolError::ServerUnavailable { .. })
        ));

        let down = ToolError::ServerUnavailable {
            server: "time".into(),
            detail: "it exited".into(),
        };
        slots.listed("time", due[0].opened, Err(down), t0);
        assert!(!slots.asking());
        let (stand_in, told) = slots.unlisted("time__get_current_time").unwrap();
        let told = told.to_string();
        assert_eq!(stand_in.spec().name, "time__get_current_time");
        assert!(told.contains("it exited"), "{told}");
        assert!(slots.unlisted("ledger").is_none());
        assert!(
            slots
                .take_due(t0 + RELIST_AFTER / 2, |_, _| true)
                .is_empty()
        );
        let due = slots.take_due(t0 + RELIST_AFTER, |_, _| true);
        assert_eq!(due.len(), 1, "asked again after a failure");
        // A second failure in a row waits twice as long.
        let t1 = t0 + RELIST_AFTER;
        let down = ToolError::Failed("still down".into());
        slots.listed("time", due[0].opened, Err(down), t1);
        assert!(slots.take_due(t1 + RELIST_AFTER, |_, _| true).is_empty());
        let due = slots.take_due(t1 + RELIST_AFTER * 2, |_, _| true);
        assert_eq!(due.len(), 1);

        let tool = listed("get_current_time", json!({"type": "object"}));
        let left_out = slots.listed("time", due[0].opened, Ok(vec![tool]), t0);
        assert!(left_out.is_empty());
        let tools = slots.tools();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].spec().name, "time__get_current_time");
        // The entry's declaration travels with each of its tools.
        assert_eq!(tools[0].approval(), Approval::Required);
        assert!(
            slots
                .take_due(t0 + RELIST_AFTER * 10, |_, _| true)
                .is_empty()
        );
        assert!(
            slots
                .unlisted("time__convert_time")
                .unwrap()
                .1
                .to_string()
                .contains("lists no tool `convert_time`")
        );
    }

    #[test]
    fn the_tools_of_an_entry_share_its_guards() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("agent.yaml"),
            "name: clock\nmodel: {script: [{answer: ok}]}\ntools:\n  - {name: time, kind: mcp, command: [python3], guard: {kind: quota, max_uses: 1}}\n",
        )
        .unwrap();
        let config = AgentConfig::load(dir.path()).unwrap();
        let mut slots = ServerSlots::for_config(&config, None, ServerSlots::default(), &config.env);
        let due = slots.take_due(Instant::now(), |_, _| true);
        let schema = json!({"type": "object"});
        let listed_tools = vec![listed("a", schema.clone()), listed("b", schema)];
        slots.listed("time", due[0].opened, Ok(listed_tools), Instant::now());
        let tools = slots.tools();
        assert_eq!(tools.len(), 2);
        let (a, b) = (tools[0].guards(), tools[1].guards());
        assert_eq!((a.len(), b.len()), (1, 1));
        assert!(Arc::ptr_eq(&a[0], &b[0]), "one quota for the server");
        let (stand_in, _) = slots.unlisted("time__c").unwrap();
        assert!(Arc::ptr_eq(&stand_in.guards()[0], &a[0]));
    }

    #[test]
    fn a_server_a_run_may_not_start_stays_unlisted_for_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let config = agent(dir.path(), 1_000);
        let mut slots = ServerSlots::for_config(&config, None, ServerSlots::default(), &config.env);
        let mut asked = Vec::new();
        let due = slots.take_due(Instant::now(), |entry, stand_in| {
            asked.push((entry.to_owned(), stand_in.spec().name));
            false
        });
        assert!(due.is_empty(), "nothing starts for a run that may not");
        assert_eq!(asked, [("time".to_owned(), "time__*".to_owned())]);
        assert!(!slots.asking());
        assert!(slots.listing_pending("time__get_current_time"));
        assert_eq!(slots.take_due(Instant::now(), |_, _| true).len(), 1);
    }

    #[test]
    fn a_reload_keeps_an_unchanged_server_and_drops_a_changed_ones_listing() {
        let dir = tempfile::tempdir().unwrap();
        let config = agent(dir.path(), 1_000);
        let mut slots = ServerSlots::for_config(&config, None, ServerSlots::default(), &config.env);
        let due = slots.take_due(Instant::now(), |_, _| true);
        let tool = listed("get_current_time", json!({"type": "object"}));
        slots.listed(
            "time",
            due[0].opened,
            Ok(vec![tool.clone()]),
            Instant::now(),
        );

        let kept = ServerSlots::for_config(&config, None, slots, &config.env);
        assert_eq!(kept.tools().len(), 1);

        let changed = agent(dir.path(), 2_000);
        let mut slots = ServerSlots::for_config(&changed, None, kept, &config.env);
        assert!(slots.tools().is_empty());
        // A listing asked of the entry before it changed is not applied to the new one.
        slots.listed("time", due[0].opened, Ok(vec![tool]), Instant::now());
        assert!(slots.tools().is_empty());
        assert_eq!(slots.take_due(Instant::now(), |_, _| true).len(), 1);
    }

    #[test]
    fn listings_keep_what_a_model_can_be_given() {
        let ok = json!({"type": "object"});
        let (taken, left_out) = take_listed(
            "time",
            &[
                listed("get_current_time", ok.clone()),
                listed("bad.name", ok.clone()),
                listed("no_schema", json!(null)),
                listed("get_current_time", ok.clone()),
                listed("convert_time", ok),
            ],
        );
        let names: Vec<&str> = taken.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["time__get_current_time", "time__convert_time"]);
        assert_eq!(left_out.len(), 3, "{left_out:?}");
    }
}
