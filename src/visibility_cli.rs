//! The operator commands of tool visibility: `consort visibility` (one decision from a
//! descriptor file and a caller-facts file) and `consort tools search|load` (what a principal's
//! runs of an agent would see).
//!
//! `tools` reads agent folders (`--dir`, as `consort dev` takes them) and answers through
//! [`AgentCatalog`], the same code the engine's meta-tools use, with a fresh probe cache. Tools
//! registered in code by an embedding app are not in agent folders and are not shown. This
//! module only parses arguments and prints; every decision is made in consort-actors.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use consort_actors::visibility::{DecisionReport, Identity, Origin, Principal, ProbeCache};
use consort_actors::{AgentCatalog, MetaAnswer, visibility_from_files};
use consort_config::{AgentSet, HostAuthConfig};
use consort_fleet::HostAuth;

use crate::output;

/// `consort visibility`.
#[derive(Args)]
pub(crate) struct VisibilityArgs {
    /// A JSON auth descriptor (`$defs/Auth` of schemas/auth-descriptor.schema.json).
    #[arg(long)]
    auth: PathBuf,
    /// A JSON caller-facts file: `{"identity": "present|absent|unknown", "policies": {...}}`.
    #[arg(long)]
    caller: PathBuf,
    #[arg(long)]
    json: bool,
}

/// `consort tools`.
#[derive(Subcommand)]
pub(crate) enum ToolsCommand {
    /// Rank an agent's tools for a query, as a principal's runs would see them.
    Search {
        query: String,
        #[command(flatten)]
        who: Who,
        #[arg(long, default_value_t = 10)]
        limit: u64,
        #[arg(long)]
        json: bool,
    },
    /// One tool's full definition, as a principal's runs would see it.
    Load {
        tool: String,
        #[command(flatten)]
        who: Who,
        #[arg(long)]
        json: bool,
    },
}

/// Whose view, of which agent.
#[derive(Args)]
pub(crate) struct Who {
    /// The agent whose tools to show.
    #[arg(long)]
    agent: String,
    /// The principal: api:<token-name>, agent:<name> or anonymous.
    #[arg(long = "as")]
    principal: String,
    /// Agent folders, or folders of agent folders.
    #[arg(long = "dir", required = true, num_args = 1..)]
    dirs: Vec<PathBuf>,
    /// The host auth file, for the roles of api:<token-name> principals (and origins).
    #[arg(long)]
    auth: Option<PathBuf>,
    /// With --as agent:<name>: who started the request that agent's call serves
    /// (api:<token-name>, anonymous or unknown). The agent acts with the roles it is granted
    /// only as far as this origin holds them, unless its grant holds on behalf of anyone.
    #[arg(long, default_value = "anonymous")]
    origin: String,
}

pub(crate) fn visibility(args: VisibilityArgs) -> Result<ExitCode> {
    let (decision, rule) = visibility_from_files(&args.auth, &args.caller)?;
    let report = DecisionReport { decision, rule };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("decision: {} (rule {})", decision.as_str(), rule.number());
    }
    Ok(ExitCode::SUCCESS)
}

fn view(who: &Who) -> Result<(AgentCatalog, Identity)> {
    let principal = Principal::parse(&who.principal).context("--as")?;
    let set = AgentSet::load(&who.dirs)?;
    let Some(agent) = set.get(&who.agent) else {
        bail!(
            "no agent named `{}` in these folders (agents: {})",
            who.agent,
            set.names().join(", ")
        );
    };
    let origin = Origin::parse(&who.origin).context("--origin")?;
    let catalog = AgentCatalog::build(agent, &[], 1);
    let auth = match &who.auth {
        Some(file) => HostAuth::new(&HostAuthConfig::load(file)?),
        None => HostAuth::none(),
    };
    let identity = match &principal {
        Principal::Agent(caller) => catalog.peer_identity(caller, &origin, auth.grants()),
        Principal::Api(_) | Principal::Anonymous if origin != Origin::Absent => {
            bail!("--origin: only a run of --as agent:<name> acts for an origin other than itself")
        }
        Principal::Api(_) => Identity::from_principal(&principal, auth.grants()),
        Principal::Anonymous => Identity::Absent,
    };
    Ok((catalog, identity))
}

fn print_answer(answer: &MetaAnswer, json: bool, table: impl FnOnce(&Value)) -> Result<ExitCode> {
    let value: Value = serde_json::from_str(&answer.content)
        .map_err(|e| anyhow!("unexpected meta-tool answer: {e}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if answer.is_error {
        let message = value["error"]["message"]
            .as_str()
            .or_else(|| value["error"].as_str())
            .unwrap_or("error");
        println!("{message}");
    } else {
        table(&value);
    }
    Ok(if answer.is_error {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

pub(crate) fn tools(command: ToolsCommand) -> Result<ExitCode> {
    match command {
        ToolsCommand::Search {
            query,
            who,
            limit,
            json,
        } => {
            let (catalog, identity) = view(&who)?;
            let mut cache = ProbeCache::new(catalog.generation());
            let answer = catalog.search(
                &identity,
                &mut cache,
                &json!({"query": query, "limit": limit}),
            );
            print_answer(&answer, json, |v| {
                let rows: Vec<Vec<String>> = v["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|card| {
                        vec![
                            card["name"].as_str().unwrap_or_default().to_owned(),
                            if card["authUncertain"] == true {
                                "yes"
                            } else {
                                "no"
                            }
                            .to_owned(),
                            card["description"].as_str().unwrap_or_default().to_owned(),
                        ]
                    })
                    .collect();
                println!(
                    "{}",
                    output::table(&["TOOL", "AUTH UNCERTAIN", "DESCRIPTION"], &rows)
                );
                println!(
                    "{} shown of {} ranked (catalog generation {})",
                    rows.len(),
                    v["total"],
                    v["generation"]
                );
            })
        }
        ToolsCommand::Load { tool, who, json } => {
            let (catalog, identity) = view(&who)?;
            let mut cache = ProbeCache::new(catalog.generation());
            let answer = catalog.load(&identity, &mut cache, &json!({"name": tool}));
            print_answer(&answer, json, |v| {
                println!("{}", v["name"].as_str().unwrap_or_default());
                println!("{}", v["description"].as_str().unwrap_or_default());
                println!(
                    "{}",
                    serde_json::to_string_pretty(&v["inputSchema"]).unwrap_or_default()
                );
            })
        }
    }
}
