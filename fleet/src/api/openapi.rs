//! The API's machine-readable description, served at `GET /openapi.json` (OpenAPI 3.1).
//!
//! The document is generated from the routes: `api::router` registers every handler through
//! `utoipa_axum::routes!`, which takes each handler's `#[utoipa::path]` (its method, path,
//! parameters and answers) into the document as it adds the route, so a route and its
//! description cannot part. This module holds what the handlers' attributes refer to: the
//! document's frame ([`ApiDoc`]: title, the bearer scheme, tags) and the schemas of the JSON
//! the API answers with.
//!
//! Those schemas mirror types of consort-actors and consort-core (a run, an event, a page)
//! rather than deriving on them, so the API description stays the API crate's business and the
//! runtime crates carry no documentation framework. The unit tests below keep each mirror true:
//! they serialize a real value and check its fields against the schema's.

use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// The document's frame; the paths come from the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "consort host API",
        description = "Start, follow, list and decide runs of the agents one consort host serves; read its peer directory. Send `Authorization: Bearer <token>` where the host has an auth file; what a caller may do is the host's access rules.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&BearerScheme),
    tags(
        (name = "runs", description = "Runs: start, read, follow, decide"),
        (name = "host", description = "The host: its agents, reloading their config, this description"),
        (name = "directory", description = "The peer directory: presence, observation, pinned waits, deliveries"),
        (name = "mcp", description = "The host's agents as MCP tools"),
        (name = "dashboard", description = "The web page that shows the fleet"),
    ),
)]
pub(crate) struct ApiDoc;

/// Adds `/mcp` (served by the MCP SDK's own service, so no handler carries its attribute) with
/// what an HTTP client needs to know of it; the MCP messages themselves are the MCP
/// specification's.
pub(crate) fn add_mcp_route(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::{HttpMethod, OperationBuilder};
    use utoipa::openapi::request_body::RequestBodyBuilder;
    use utoipa::openapi::security::SecurityRequirement;
    use utoipa::openapi::{ContentBuilder, Response};
    let operation = OperationBuilder::new()
        .tag("mcp")
        .summary(Some("MCP: this host's agents as tools (`ask_<agent>`)"))
        .description(Some(
            "A Model Context Protocol server over streamable HTTP, stateless: `tools/list` names one tool per agent, `tools/call` starts a run that acts for the bearer token's principal and answers with its output once it settles.",
        ))
        .request_body(Some(
            RequestBodyBuilder::new()
                .description(Some("one JSON-RPC 2.0 message of the MCP protocol"))
                .content("application/json", ContentBuilder::new().build())
                .required(Some(utoipa::openapi::Required::True))
                .build(),
        ))
        .response("200", Response::new("the JSON-RPC answer (JSON, or a server-sent event stream)"))
        .response("202", Response::new("a notification, accepted"))
        .response("401", Response::new("no known bearer token, on a host that refuses anonymous callers"))
        .securities(Some([SecurityRequirement::default(), SecurityRequirement::new("bearer", Vec::<String>::new())]))
        .build();
    doc.paths
        .add_path_operation("/mcp", vec![HttpMethod::Post], operation);
}

/// Adds the bearer scheme the routes' `security` names.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token of the host's auth file; a host without one takes none",
                    ))
                    .build(),
            ),
        );
    }
}

/// Every error: a stable code a program can match and a message for people.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorDoc {
    error: ErrorBody,
}

#[derive(Serialize, ToSchema)]
struct ErrorBody {
    /// Stable: `unknown_run`, `unauthenticated`, `forbidden`, `bad_query`, a refusal's code, …
    code: String,
    /// For people.
    message: String,
}

/// Where a run is in its life; `succeeded` and `failed` are final.
#[derive(Serialize, ToSchema)]
#[schema(as = RunStatus)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum RunStatusDoc {
    Queued,
    Running,
    Waiting,
    Blocked,
    Succeeded,
    Failed,
}

/// Work done: model turns, tool uses, calls placed, tokens and wall time.
#[derive(Serialize, ToSchema)]
#[schema(as = Cost)]
pub(crate) struct CostDoc {
    model_turns: u64,
    tool_calls: u64,
    calls_placed: u64,
    /// 0 when the model does not report tokens.
    input_tokens: u64,
    output_tokens: u64,
    /// From creation to settlement (or to now, for an unsettled run).
    wall_ms: u64,
}

/// One run as stored.
#[derive(Serialize, ToSchema)]
#[schema(as = Run)]
pub(crate) struct RunDoc {
    /// `run_` and 32 hex digits.
    id: String,
    agent: String,
    status: RunStatusDoc,
    /// `api`, `cli`, `agent:<caller>` (a delegated call) or `delivery:<sender>`.
    channel: String,
    /// The caller's run, for a delegated run.
    parent_run: Option<String>,
    parent_agent: Option<String>,
    tool_use_id: Option<String>,
    /// Hops from the root run: 0 for a run started by the API or CLI.
    hop_depth: u32,
    input: String,
    /// The final answer, once succeeded.
    output: Option<String>,
    /// Why the run failed.
    error: Option<String>,
    /// Unix milliseconds.
    created_at_ms: u64,
    settled_at_ms: Option<u64>,
    /// The run's own work.
    cost: CostDoc,
    /// The run's own work and every descendant's whose reply it took, across hosts too.
    tree_cost: CostDoc,
    /// Who the run acts for: `api:<token-name>`, `agent:<caller>`, `anonymous` or `unknown`.
    principal: String,
    /// The roles of an `api:` principal when the run started (absent when none).
    #[schema(required = false)]
    roles: Vec<String>,
    /// Who started the run's call tree.
    origin: String,
    /// The gate a blocked run waits on (`GET /runs/{id}` only; absent otherwise).
    #[schema(required = false)]
    gate: Option<GateDoc>,
    /// The budget of the run's call tree and what the tree spent of it (`GET /runs/{id}` only,
    /// for a run with a budget: a root run's own, a called run's the share its call handed it).
    #[schema(required = false)]
    budget: Option<BudgetDoc>,
}

/// A call tree's budget and what the tree spent of it. A limit that is null is not set.
#[derive(Serialize, ToSchema)]
#[schema(as = Budget)]
pub(crate) struct BudgetDoc {
    /// The most runs of the tree, this run included.
    max_runs: Option<u64>,
    /// The most tokens of the tree's model turns.
    max_tokens: Option<u64>,
    /// Seconds from this run's creation to the tree's deadline.
    max_wall_s: Option<u64>,
    /// The tree's deadline, Unix milliseconds.
    deadline_ms: Option<u64>,
    /// What the tree spent so far.
    spent: BudgetSpentDoc,
    /// What calls still out hold beyond what they spent (given back when they reply).
    held: BudgetHeldDoc,
}

/// What a call tree spent of its budget.
#[derive(Serialize, ToSchema)]
#[schema(as = BudgetSpent)]
pub(crate) struct BudgetSpentDoc {
    /// This run, every call it placed that was accepted, and what replied subtrees charged.
    runs: u64,
    /// Tokens of this run's turns and of replied subtrees.
    tokens: u64,
    /// Whole seconds since this run's creation (until it settled).
    wall_s: u64,
}

/// What calls still out hold of a budget.
#[derive(Serialize, ToSchema)]
#[schema(as = BudgetHeld)]
pub(crate) struct BudgetHeldDoc {
    runs: u64,
    tokens: u64,
}

/// The gate a blocked run waits on.
#[derive(Serialize, ToSchema)]
#[schema(as = Gate)]
pub(crate) struct GateDoc {
    /// The gate's id, `<run>:<tool use>` (`:<n>` added when the same use is asked again):
    /// what `POST /runs/{id}/approve` names.
    id: String,
    /// The gated tool.
    tool: String,
    tool_use_id: String,
    /// The input the model gave the tool.
    input: serde_json::Value,
    /// The tool was started before its host stopped and may or may not have run: approve
    /// runs it again; deny or `record` do not.
    in_doubt: bool,
    /// The run's own requester may decide it, besides an operator.
    requester_may_decide: bool,
}

/// The answer to a decision: the run after it, with the gate decided.
#[derive(Serialize, ToSchema)]
#[schema(as = Decided)]
pub(crate) struct DecidedDoc {
    #[serde(flatten)]
    run: RunDoc,
    /// The gate decided.
    gate: String,
    /// The gate had this decision already (a repeat): nothing was written.
    already_decided: bool,
}

/// One event of a run's log.
#[derive(Serialize, ToSchema)]
#[schema(as = Event)]
pub(crate) struct EventDoc {
    run_id: String,
    /// 1-based position in the run's log.
    seq: u64,
    /// Unix milliseconds when it was recorded.
    at_ms: u64,
    /// `created`, `status`, `model_turn_started`, `model_turn`, `tool_result`, `call_placed`,
    /// `reply_received`, `approval_requested`, `approval_decided`, `canceled`, `answer`, …
    /// (docs: the run event log).
    kind: String,
    /// The event's fields; their shape depends on `kind`.
    data: serde_json::Value,
}

/// A page of runs, newest first.
#[derive(Serialize, ToSchema)]
#[schema(as = RunPage)]
pub(crate) struct RunPageDoc {
    runs: Vec<RunDoc>,
    /// Pass as `cursor` for the next page; null on the last page.
    next: Option<String>,
}

/// A page of a run's events, oldest first.
#[derive(Serialize, ToSchema)]
#[schema(as = EventPage)]
pub(crate) struct EventPageDoc {
    events: Vec<EventDoc>,
    /// Pass as `after` for the next page; null on the last page.
    next_after: Option<u64>,
}

/// One agent as the host sees it.
#[derive(Serialize, ToSchema)]
#[schema(as = AgentStatus)]
pub(crate) struct AgentStatusDoc {
    name: String,
    /// Whether it serves (awake, or asleep until a message wakes it).
    up: bool,
    /// Whether its actor is running now.
    awake: bool,
    /// Restarts since the host started.
    restarts: usize,
    /// Why it is down and since when; null while up.
    down: Option<DownDoc>,
}

/// Why an agent is down.
#[derive(Serialize, ToSchema)]
#[schema(as = Down)]
pub(crate) struct DownDoc {
    /// `store_not_writable`, `restart_budget_spent` or `start_failed`.
    reason: String,
    since_ms: u64,
    detail: String,
}

/// What a reload did.
#[derive(Serialize, ToSchema)]
#[schema(as = Reloaded)]
pub(crate) struct ReloadedDoc {
    /// Agents whose agent.yaml changed since the last reload that answered (a change the
    /// file watcher already put in force is listed too, once).
    changed: Vec<String>,
    /// Agents that were down and were started again.
    revived: Vec<String>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;
    use utoipa::PartialSchema;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;

    use consort_actors::page::{EventPage, RunPage};
    use consort_actors::supervisor::{AgentStatus, Reloaded};
    use consort_actors::{EventRecord, RunRecord};

    use super::*;

    /// The property names of an object schema, and those it requires.
    fn properties<T: PartialSchema>() -> (BTreeSet<String>, BTreeSet<String>) {
        let RefOr::T(Schema::Object(object)) = T::schema() else {
            panic!("not an object schema");
        };
        let all = object.properties.keys().cloned().collect();
        let required = object.required.iter().cloned().collect();
        (all, required)
    }

    /// A value's JSON keys must be the schema's properties, and hold every required one.
    fn assert_mirrors<T: PartialSchema>(value: &impl Serialize, what: &str) {
        let json = serde_json::to_value(value).unwrap();
        let Value::Object(map) = json else {
            panic!("{what} is not a JSON object");
        };
        let keys: BTreeSet<String> = map.keys().cloned().collect();
        let (all, required) = properties::<T>();
        assert!(
            keys.is_subset(&all),
            "{what} has fields the description lacks: {:?}",
            keys.difference(&all).collect::<Vec<_>>()
        );
        assert!(
            required.is_subset(&keys),
            "the description requires fields {what} lacks: {:?}",
            required.difference(&keys).collect::<Vec<_>>()
        );
    }

    fn run() -> RunRecord {
        let text = r#"{"id":"run_0123456789abcdef0123456789abcdef","agent":"cfo","status":"succeeded",
            "channel":"agent:cmo","parent_run":"run_00000000000000000000000000000000",
            "parent_agent":"cmo","tool_use_id":"tu_0","hop_depth":1,"input":"2026-08",
            "output":"48250.00","error":null,"created_at_ms":1,"settled_at_ms":2,
            "cost":{"model_turns":1,"tool_calls":1,"calls_placed":0,"input_tokens":0,"output_tokens":0,"wall_ms":1},
            "tree_cost":{"model_turns":1,"tool_calls":1,"calls_placed":0,"input_tokens":0,"output_tokens":0,"wall_ms":1},
            "principal":"agent:cmo","roles":["finance"],"origin":"api:ops"}"#;
        serde_json::from_str(text).unwrap()
    }

    fn event() -> EventRecord {
        serde_json::from_value(serde_json::json!({
            "run_id": "run_0123456789abcdef0123456789abcdef", "seq": 3, "at_ms": 5,
            "kind": "status", "data": {"from": "queued", "to": "running"}
        }))
        .unwrap()
    }

    #[test]
    fn each_schema_mirrors_what_the_api_sends() {
        let run = run();
        assert_mirrors::<RunDoc>(&run, "a run");
        assert_mirrors::<CostDoc>(&run.cost, "a cost");
        assert_mirrors::<EventDoc>(&event(), "an event");
        let runs = RunPage {
            runs: vec![run],
            next: Some("1.run_0123456789abcdef0123456789abcdef".into()),
        };
        assert_mirrors::<RunPageDoc>(&runs, "a page of runs");
        let events = EventPage {
            events: vec![event()],
            next_after: None,
        };
        assert_mirrors::<EventPageDoc>(&events, "a page of events");
        let agent: AgentStatus = serde_json::from_value(serde_json::json!({
            "name": "cfo", "up": false, "awake": false, "restarts": 3,
            "down": {"reason": "start_failed", "since_ms": 1, "detail": "x"}
        }))
        .unwrap();
        assert_mirrors::<AgentStatusDoc>(&agent, "an agent");
        let down = serde_json::to_value(&agent).unwrap()["down"].clone();
        assert_mirrors::<DownDoc>(&down, "a down agent");
        assert_mirrors::<ReloadedDoc>(&Reloaded::default(), "a reload");
        let budget: consort_core::budget::BudgetReport = serde_json::from_value(serde_json::json!({
            "max_runs": 10, "max_tokens": null, "max_wall_s": 300, "deadline_ms": 301_000,
            "spent": {"runs": 3, "tokens": 1_234, "wall_s": 12}, "held": {"runs": 2, "tokens": 0}
        }))
        .unwrap();
        assert_mirrors::<BudgetDoc>(&budget, "a budget");
        assert_mirrors::<BudgetSpentDoc>(&budget.spent, "a budget's spend");
        assert_mirrors::<BudgetHeldDoc>(&budget.held, "a budget's holds");
    }

    #[test]
    fn a_run_without_roles_leaves_them_out_and_the_description_allows_it() {
        let mut run = run();
        run.roles.clear();
        assert_mirrors::<RunDoc>(&run, "a run without roles");
        let (_, required) = properties::<RunDoc>();
        assert!(!required.contains("roles"));
    }
}
