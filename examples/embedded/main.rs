//! Embedding consort in an app's own actor tree.
//!
//! The app has its own ractor supervisor (`App`). It builds a consort host from Rust values
//! (no agent folders), with the builders of the `consort` facade: a `planner` agent whose model
//! is the app's own Rust type, calling a `pricing` agent whose tool is registered by the app.
//! Everything it names comes from the facade's root (`consort::…`). The host is spawned
//! *linked under the app's supervisor*, so the app hears about it if the host fails. The app
//! then drives the host through the typed handle: start a run, await its settlement, inspect
//! both runs (the handle's reads are async: they never hold the app's async workers on a
//! store).
//!
//! Run it with: `cargo run --example embedded`

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::{Value, json};

use consort::{
    AgentConfig, AgentSet, Channel, Host, HostSpec, Message, Model, ModelConfig, ModelFuture,
    ModelReply, ModelRequest, ModelStep, ScriptStep, Tool, ToolContext, ToolFuture, ToolSpec,
    ToolStep, ToolUse,
};

/// The app's own model for the planner: ask pricing once, then answer with its reply.
struct Planner;

impl Model for Planner {
    fn respond<'a>(&'a self, request: ModelRequest<'a>) -> ModelFuture<'a> {
        let reply = request.conversation.iter().find_map(|m| match m {
            Message::Reply { text, .. } => Some(text.clone()),
            _ => None,
        });
        let input = match request.conversation.first() {
            Some(Message::User(text)) => text.clone(),
            _ => String::new(),
        };
        let step = match reply {
            Some(text) => ModelStep::Answer(format!("Plan for `{input}`: budget {text}")),
            None if request.pending_calls > 0 => ModelStep::Wait,
            None => ModelStep::ToolUses(vec![ToolUse {
                id: "price-1".into(),
                name: "call_agent".into(),
                input: json!({"agent": "pricing", "input": input}),
            }]),
        };
        Box::pin(async move { Ok(ModelReply::new(step)) })
    }
}

/// A tool the app registers for the pricing agent: it sees the agent's env, never the caller's.
struct Quote;

impl Tool for Quote {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "quote".into(),
            description: "Price a campaign by its number of words".into(),
            input_schema: json!({"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}),
        }
    }

    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a> {
        let words = input["input"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .count();
        let rate: u64 = ctx
            .env
            .get("RATE")
            .and_then(|r| r.parse().ok())
            .unwrap_or(1);
        Box::pin(async move { Ok(format!("{} EUR", words as u64 * rate)) })
    }
}

/// The app's own supervisor: it owns the consort host as a linked child.
struct App;

impl Actor for App {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _myself: ActorRef<()>, _args: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: SupervisionEvent,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(who, why) = event {
            eprintln!("app: child {} failed: {why}", who.get_id());
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let planner = AgentConfig::builder("planner")
        .description("plans campaigns, built in code")
        .can_call(["pricing"])
        .build()?;
    let pricing = AgentConfig::builder("pricing")
        .description("prices campaigns, built in code")
        .accept_from(["planner"])
        .model(ModelConfig::Script {
            steps: vec![
                ScriptStep::Tool(ToolStep {
                    name: "quote".into(),
                    input: "{input}".into(),
                    arguments: None,
                }),
                ScriptStep::Answer("{tool.quote}".into()),
            ],
        })
        .env("RATE", "12")
        .build()?;
    // The set checks the agents against each other: every peer named exists.
    let agents = AgentSet::from_agents([planner, pricing])?;
    let spec = HostSpec::builder(agents, data.path())
        .watch_config(None) // agents built in code have no agent.yaml to watch
        .model("planner", Arc::new(Planner))
        .tool("pricing", Arc::new(Quote))
        .build();

    let (app, app_join) = Actor::spawn(None, App, ()).await?;
    let (host, _host_join) = Host::spawn_linked(spec, app.get_cell()).await?;

    let run = host
        .start_run("planner", "spring launch on three channels", Channel::Api)
        .await?;
    let done = host.wait(&run.id, Duration::from_secs(10)).await?;
    println!("{}", done.output.as_deref().unwrap_or("(no answer)"));
    for r in host.jobs(None).await? {
        println!(
            "{}  {:<8} {:<9} channel={:<14} depth={} turns={} tools={} calls={}",
            r.id,
            r.agent,
            r.status,
            r.channel.to_string(),
            r.hop_depth,
            r.cost.model_turns,
            r.cost.tool_calls,
            r.cost.calls_placed
        );
    }
    host.stop();
    app.stop(None);
    app_join.await?;
    Ok(())
}
