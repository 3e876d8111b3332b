//! The `a2a_agents:` section of agent.yaml: remote agents that speak the A2A protocol (any
//! vendor's), which this agent may call as it calls a consort peer.
//!
//! This module owns [`A2aAgentConfig`], its raw serde shape and the per-entry checks: a name of
//! the fleet's form, unique in the list and not the agent itself; a card URL that is http(s),
//! names a host and carries no credentials; a `token_env` that is a key of the agent's own
//! `env:`; a `timeout_ms` within its bounds. Whether a name clashes with an agent of the fleet
//! needs the set (`set.rs`). Declaring an A2A agent grants nothing: the consent edge is still
//! `agents.can_call`, checked with the other guards by consort-core. This module must not
//! fetch a card, open a connection or read the process environment.

use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

use super::{is_valid_name, name_problem};

/// A remote A2A agent an agent may call (`a2a_agents:` in agent.yaml).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct A2aAgentConfig {
    /// The name the agent's model (or script) calls it by; never an agent of the fleet.
    pub name: String,
    /// Where its agent card is served (`card:`), an http(s) URL.
    pub card: String,
    /// The key of the calling agent's `env:` whose value is sent as the bearer token
    /// (`token_env:`); `None` sends no token.
    pub token_env: Option<String>,
    /// The bound on one whole call, card fetch and polling included, in milliseconds
    /// (`timeout_ms:`, default [`DEFAULT_A2A_TIMEOUT_MS`], at most [`MAX_A2A_TIMEOUT_MS`]).
    pub timeout_ms: u64,
    /// Networks beyond the public one the host's client may reach for this agent
    /// (`allow_networks: [loopback, private]`; none by default). Link-local and unspecified
    /// addresses, and the host's own listening ports, are never reached.
    pub allow_networks: AllowedNetworks,
    /// Origins (`https://host[:port]`) the card may name as its endpoint besides its own
    /// (`endpoint_origins:`; none by default: the endpoint must be on the card's origin).
    pub endpoint_origins: Vec<String>,
}

/// Networks beyond the public one an outbound client may reach (`allow_networks:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllowedNetworks {
    /// `loopback`: a server on this machine (local development).
    pub loopback: bool,
    /// `private`: a server on a private network (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7).
    pub private: bool,
}

/// How long a call to an A2A agent may take when `timeout_ms` is not given.
pub const DEFAULT_A2A_TIMEOUT_MS: u64 = 60_000;
/// The longest `timeout_ms` an A2A agent may be given (ten minutes).
pub const MAX_A2A_TIMEOUT_MS: u64 = 600_000;
/// The shortest `timeout_ms`: below it not even a card fetch on loopback is sure to finish.
pub const MIN_A2A_TIMEOUT_MS: u64 = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawA2aAgent {
    name: Spanned<String>,
    card: Spanned<String>,
    token_env: Option<Spanned<String>>,
    timeout_ms: Option<Spanned<u64>>,
    allow_networks: Option<Vec<Spanned<String>>>,
    endpoint_origins: Option<Vec<Spanned<String>>>,
}

/// Converts `a2a_agents:`; `names` gets where each name was written, for the set's checks.
pub(super) fn convert_a2a_agents(
    ctx: Ctx<'_>,
    me: &str,
    raw: Option<Vec<RawA2aAgent>>,
    env: &BTreeMap<String, String>,
    names: &mut Vec<Pos>,
) -> Result<Vec<A2aAgentConfig>, ConfigError> {
    let raw = raw.unwrap_or_default();
    let mut out = Vec::with_capacity(raw.len());
    let mut seen = HashSet::with_capacity(raw.len());
    for (i, entry) in raw.into_iter().enumerate() {
        let base = KeyPath::root().key("a2a_agents").index(i);
        let at = Pos::of(&entry.name);
        let name = entry.name.value;
        if !is_valid_name(&name) {
            return Err(ctx.invalid(at, &base.key("name"), name_problem(&name)));
        }
        if name == me {
            return Err(ctx.invalid(
                at,
                &base.key("name"),
                format!("`{name}` is this agent's own name; an A2A agent needs a name of its own"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(ctx.invalid(
                at,
                &base.key("name"),
                format!("`{name}` is declared twice in a2a_agents"),
            ));
        }
        let card = check_card_url(&entry.card.value)
            .map_err(|m| ctx.invalid(Pos::of(&entry.card), &base.key("card"), m))?;
        let token_env = match entry.token_env {
            None => None,
            Some(key) if env.contains_key(&key.value) => Some(key.value),
            Some(key) => {
                let known: Vec<&str> = env.keys().map(String::as_str).collect();
                return Err(ctx.invalid(
                    Pos::of(&key),
                    &base.key("token_env"),
                    format!(
                        "`{}` is not a key of this agent's env (keys: {}); add it to `env:` with the token as its value",
                        key.value,
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        };
        let timeout_ms = match entry.timeout_ms {
            None => DEFAULT_A2A_TIMEOUT_MS,
            Some(t) if (MIN_A2A_TIMEOUT_MS..=MAX_A2A_TIMEOUT_MS).contains(&t.value) => t.value,
            Some(t) => {
                return Err(ctx.invalid(
                    Pos::of(&t),
                    &base.key("timeout_ms"),
                    format!(
                        "must be between {MIN_A2A_TIMEOUT_MS} and {MAX_A2A_TIMEOUT_MS} (got {})",
                        t.value
                    ),
                ));
            }
        };
        let mut allow_networks = AllowedNetworks::default();
        for (j, network) in entry.allow_networks.unwrap_or_default().iter().enumerate() {
            match network.value.as_str() {
                "loopback" => allow_networks.loopback = true,
                "private" => allow_networks.private = true,
                other => {
                    return Err(ctx.invalid(
                        Pos::of(network),
                        &base.key("allow_networks").index(j),
                        format!("`{other}` is not a network consort can allow: `loopback` or `private` (link-local and unspecified addresses are never reached)"),
                    ));
                }
            }
        }
        let mut endpoint_origins = Vec::new();
        for (j, origin) in entry
            .endpoint_origins
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let checked = check_origin(&origin.value).map_err(|m| {
                ctx.invalid(Pos::of(origin), &base.key("endpoint_origins").index(j), m)
            })?;
            endpoint_origins.push(checked);
        }
        names.push(at);
        out.push(A2aAgentConfig {
            name,
            card,
            token_env,
            timeout_ms,
            allow_networks,
            endpoint_origins,
        });
    }
    Ok(out)
}

/// An origin an endpoint may be on: `http(s)://host[:port]`, nothing after it.
fn check_origin(origin: &str) -> Result<String, String> {
    let trimmed = origin.trim_end_matches('/');
    let url = check_card_url(trimmed)?;
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    if rest.contains(['/', '?', '#']) {
        return Err(format!(
            "`{origin}` is not an origin: give the scheme, host and port only (e.g. https://agent.example:8443)"
        ));
    }
    Ok(url)
}

/// An agent card's URL: http(s), a host, no credentials, no spaces.
fn check_card_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            format!("`{url}` is not an http:// or https:// URL of the agent's card (e.g. https://agent.example/.well-known/agent-card.json)")
        })?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{url}` contains a space or a control character"));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("`{url}` names no host"));
    }
    if host.contains('@') {
        // The URL goes into replies, error texts and logs; a credential in it would go too.
        return Err(
            "the URL carries credentials (`user:password@`); send a token with `token_env` instead"
                .into(),
        );
    }
    Ok(url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::check_card_url;

    #[test]
    fn card_urls() {
        for good in [
            "http://127.0.0.1:9999/.well-known/agent-card.json",
            "https://agent.example/.well-known/agent-card.json",
            "https://agent.example",
        ] {
            assert_eq!(check_card_url(good).as_deref(), Ok(good));
        }
        for (bad, says) in [
            ("ftp://x/card", "not an http"),
            ("agent.example/card", "not an http"),
            ("http:///card", "names no host"),
            ("http://:80/card", "names no host"),
            ("http://u:p@host/card", "credentials"),
            ("http://host/a card", "space"),
        ] {
            let e = check_card_url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
