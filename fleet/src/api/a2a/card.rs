//! The A2A agent cards: how a client finds this host's agents and learns how to call them.
//!
//! A host of one agent answers that agent's card at the well-known path; a host of several
//! answers a card with one skill per agent whose endpoint is `/a2a` (where a new message names
//! its agent), and each agent has its own card under `/a2a/{agent}`. The URLs on a card are
//! built from the request's `Host` header, so they are ones the card's reader can reach under
//! the name it used, whatever address the host is bound to.
//!
//! Cards are public, as A2A discovery needs: they are read without a token, so they must carry
//! nothing but the agents' names, what the agents say of themselves and the bearer scheme.
//! Nothing here reads a store or looks at who is asking.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::HOST;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use consort_a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityRequirement, SecurityScheme, StringList,
};
use consort_actors::{ActorsError, Host};

use super::AGENT_BASE;
use crate::api::ApiError;
use crate::api::openapi::ErrorDoc;

/// An A2A agent card, as `/openapi.json` describes it (the A2A 1.0 `AgentCard`).
#[derive(Serialize, ToSchema)]
#[schema(as = A2aAgentCard)]
struct AgentCardDoc {
    /// The agent's (or host's) name.
    name: String,
    /// What it does.
    description: String,
    /// Where its JSON-RPC endpoint is: `[{url, protocolBinding: "JSONRPC", protocolVersion: "1.0"}]`.
    #[serde(rename = "supportedInterfaces")]
    supported_interfaces: Vec<Value>,
    /// The bearer scheme.
    #[serde(rename = "securitySchemes")]
    security_schemes: Value,
    /// One skill per agent.
    skills: Vec<Value>,
}

/// `http://<Host header>`: where this request reached the API, so the card's URLs are ones
/// its reader can reach.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

fn bearer_security() -> (
    std::collections::BTreeMap<String, SecurityScheme>,
    Vec<SecurityRequirement>,
) {
    let scheme = SecurityScheme::HttpAuthSecurityScheme(HttpAuthSecurityScheme {
        description: Some(
            "A token of the host's auth file (`Authorization: Bearer <token>`); tasks act for its principal"
                .to_owned(),
        ),
        scheme: "Bearer".to_owned(),
        bearer_format: None,
    });
    (
        [("bearer".to_owned(), scheme)].into(),
        vec![SecurityRequirement {
            schemes: [("bearer".to_owned(), StringList::default())].into(),
        }],
    )
}

fn skill_of(agent: &str, description: &str) -> AgentSkill {
    AgentSkill {
        id: agent.to_owned(),
        name: agent.to_owned(),
        description: if description.trim().is_empty() {
            format!("Ask the consort agent `{agent}`; it answers with its own tools and data.")
        } else {
            description.trim().to_owned()
        },
        tags: vec!["consort".to_owned()],
        ..AgentSkill::default()
    }
}

fn card(name: &str, description: String, url: String, skills: Vec<AgentSkill>) -> AgentCard {
    let (security_schemes, security_requirements) = bearer_security();
    AgentCard {
        name: name.to_owned(),
        description,
        supported_interfaces: vec![AgentInterface {
            url,
            protocol_binding: consort_a2a::JSONRPC_BINDING.to_owned(),
            tenant: None,
            protocol_version: consort_a2a::PROTOCOL_VERSION.to_owned(),
        }],
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extended_agent_card: Some(false),
            extensions: Vec::new(),
        },
        security_schemes,
        security_requirements,
        default_input_modes: vec!["text/plain".to_owned()],
        default_output_modes: vec!["text/plain".to_owned()],
        skills,
        ..AgentCard::default()
    }
}

fn agent_card(host: &Host, headers: &HeaderMap, agent: &str) -> Option<AgentCard> {
    let (name, description) = host.described_agents().find(|(a, _)| *a == agent)?;
    let skill = skill_of(name, description);
    Some(card(
        name,
        skill.description.clone(),
        format!("{}{AGENT_BASE}/{name}", base_url(headers)),
        vec![skill],
    ))
}

fn host_card(host: &Host, headers: &HeaderMap) -> AgentCard {
    if let [only] = host.agents()
        && let Some(card) = agent_card(host, headers, only)
    {
        return card;
    }
    let skills: Vec<AgentSkill> = host
        .described_agents()
        .map(|(agent, description)| skill_of(agent, description))
        .collect();
    let names = host.agents().join(", ");
    card(
        "consort",
        format!(
            "A consort host serving the agents {names}. Each has its own card at {AGENT_BASE}/<agent>/.well-known/agent-card.json; at this endpoint a new message names its agent in metadata.agent."
        ),
        format!("{}{AGENT_BASE}", base_url(headers)),
        skills,
    )
}

#[utoipa::path(
    get, path = "/.well-known/agent-card.json", tag = "a2a",
    summary = "A2A: the host's agent card",
    description = "The card of the host's one agent, or, on a host of several, a card with one skill per agent whose endpoint is `/a2a`. Public, as A2A discovery needs.",
    responses((status = 200, description = "an A2A 1.0 agent card", body = AgentCardDoc)),
)]
pub(crate) async fn host_card_route(State(host): State<Host>, headers: HeaderMap) -> Response {
    Json(host_card(&host, &headers)).into_response()
}

#[utoipa::path(
    get, path = "/a2a/{agent}/.well-known/agent-card.json", tag = "a2a",
    summary = "A2A: one agent's card",
    params(("agent" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, description = "an A2A 1.0 agent card", body = AgentCardDoc),
        (status = 404, description = "no such agent here", body = ErrorDoc),
    ),
)]
pub(crate) async fn agent_card_route(
    State(host): State<Host>,
    headers: HeaderMap,
    Path(agent): Path<String>,
) -> Response {
    match agent_card(&host, &headers, &agent) {
        Some(card) => Json(card).into_response(),
        None => ApiError::from(ActorsError::UnknownAgent(agent)).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_names_its_endpoint_and_the_bearer_scheme() {
        let card = card(
            "cfo",
            "ledger".into(),
            "http://h:1/a2a/cfo".into(),
            vec![skill_of("cfo", "")],
        );
        assert_eq!(card.interface_url("JSONRPC"), Some("http://h:1/a2a/cfo"));
        assert!(card.security_schemes.contains_key("bearer"));
        assert_eq!(card.capabilities.streaming, Some(true));
        assert!(card.skills[0].description.contains("`cfo`"));
        assert_eq!(
            skill_of("cfo", " Answers spend questions. ").description,
            "Answers spend questions."
        );
    }
}
