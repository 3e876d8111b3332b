//! The tool-visibility declarations of `agent.yaml`: a tool's `auth:` and `guard:` blocks, and
//! the agent's named `policies:`, `fallback_policy:`, `grants:` and `probe_budget:`.
//!
//! Owns their raw serde shapes (unknown keys refused) and their checks, each error naming the
//! file, line, column and key: a policy name must be a plain name or the role form
//! `roles:<name>[,<name>]` with no empty name; a named policy must be defined under
//! `policies:`; a definition must require something (`roles`, `principals`, `origin_roles` or
//! `needs_resource`); principals are `api:<name>`, `agent:<name>` or `anonymous`; a grant is a
//! list of roles or `{roles: [...], on_behalf_of: role_holders | any}`. It must not evaluate policies or decide visibility: that is
//! consort-core's `visibility` module, which reads the plain data built here.

use std::collections::BTreeMap;

use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use crate::agent::is_valid_name;
use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

/// The prefix of the role form of a policy name.
pub(crate) const ROLE_POLICY_PREFIX: &str = "roles:";

/// The most probes one search may run, when an agent sets none.
pub(crate) const DEFAULT_PROBE_BUDGET: usize = 25;

/// A tool's `auth:` block: the markers visibility's T0 reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolAuthConfig {
    /// `anonymous: true`: the anonymous marker (the tool needs no identity).
    pub anonymous: bool,
    /// Policy names: named policies of this agent, or `roles:<name>[,<name>]`.
    pub policies: Vec<String>,
}

/// A declarable guard: code that runs before a tool's handler and decides without its
/// arguments.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GuardConfig {
    /// A feature gate: `enabled: false` refuses every use with `message`.
    Feature {
        /// False refuses every use.
        enabled: bool,
        /// The refusal the model reads.
        message: String,
    },
    /// At most `max_uses` uses of the tool while the agent runs (counted in memory, reset by a
    /// config reload or a restart).
    Quota {
        /// The most uses allowed.
        max_uses: u64,
    },
}

/// A named policy: every requirement given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicyConfig {
    /// The caller must have one of these roles.
    pub roles: Vec<String>,
    /// The caller must be one of these principals (`api:<name>`, `agent:<name>`, `anonymous`).
    pub principals: Vec<String>,
    /// The origin of the caller's call tree (who started its root run) must hold one of these
    /// roles, as this host grants them.
    pub origin_roles: Vec<String>,
    /// The policy needs the resource (the tool's arguments): it reports no result at list
    /// time, and the tool's own check decides at invoke time.
    pub needs_resource: bool,
}

/// What an agent grants one peer agent that calls it: `grants: {<agent>: [roles]}` or
/// `grants: {<agent>: {roles: [...], on_behalf_of: any}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GrantConfig {
    /// The roles granted.
    pub roles: Vec<String>,
    /// `on_behalf_of: any`: the peer acts with these roles whoever started the request it
    /// serves. By default (`role_holders`) it acts with a role only for an origin that holds
    /// that role too.
    pub on_behalf_of_any: bool,
}

/// The agent-level visibility declarations.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VisibilityConfig {
    /// Named policies, by name.
    pub policies: BTreeMap<String, PolicyConfig>,
    /// The policy of tools that declare none.
    pub fallback_policy: Option<String>,
    /// Roles this agent grants to peer agents that call it, by agent name.
    pub grants: BTreeMap<String, GrantConfig>,
    /// T2 probes run on at most this many ranked candidates per search.
    pub probe_budget: usize,
}

impl Default for VisibilityConfig {
    fn default() -> Self {
        Self {
            policies: BTreeMap::new(),
            fallback_policy: None,
            grants: BTreeMap::new(),
            probe_budget: DEFAULT_PROBE_BUDGET,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Raw shapes.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolAuth {
    anonymous: Option<bool>,
    policies: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawGuardKind {
    Feature,
    Quota,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGuard {
    kind: RawGuardKind,
    enabled: Option<bool>,
    message: Option<String>,
    max_uses: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    roles: Option<Vec<Spanned<String>>>,
    principals: Option<Vec<Spanned<String>>>,
    origin_roles: Option<Vec<Spanned<String>>>,
    needs_resource: Option<bool>,
}

/// One grant as written: a list of roles, or a map with `roles` and `on_behalf_of`.
pub(crate) enum RawGrant {
    Roles(Vec<Spanned<String>>),
    Scoped(RawScopedGrant),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScopedGrant {
    roles: Vec<Spanned<String>>,
    on_behalf_of: Option<Spanned<RawOnBehalfOf>>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawOnBehalfOf {
    RoleHolders,
    Any,
}

impl<'de> Deserialize<'de> for RawGrant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct GrantVisitor;
        impl<'de> Visitor<'de> for GrantVisitor {
            type Value = RawGrant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of roles, or {roles: [...], on_behalf_of: role_holders | any}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawGrant, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(RawGrant::Roles)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawGrant, A::Error> {
                RawScopedGrant::deserialize(MapAccessDeserializer::new(map)).map(RawGrant::Scoped)
            }
        }
        deserializer.deserialize_any(GrantVisitor)
    }
}

/// The agent-level keys, as [`crate::agent`]'s raw agent holds them.
pub(crate) struct RawAgentVisibility {
    pub policies: Option<BTreeMap<String, Spanned<RawPolicy>>>,
    pub fallback_policy: Option<Spanned<String>>,
    pub grants: Option<BTreeMap<String, Spanned<RawGrant>>>,
    pub probe_budget: Option<Spanned<u64>>,
}

/// Largest `probe_budget` accepted.
pub(crate) const MAX_PROBE_BUDGET: u64 = 1000;

/// A role or policy name: starts with a letter or digit, then letters, digits, `_`, `.`, `-`.
pub(crate) fn is_policy_word(text: &str) -> bool {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if first.is_ascii_alphanumeric() => {
            chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        }
        _ => false,
    }
}

/// Why `text` is not a principal (`api:<name>`, `agent:<name>` or `anonymous`), if it is not.
pub(crate) fn principal_problem(text: &str) -> Option<String> {
    if text == "anonymous" {
        return None;
    }
    let name = text
        .strip_prefix("api:")
        .or_else(|| text.strip_prefix("agent:"));
    match name {
        None => Some(format!(
            "unknown principal form `{text}`: expected api:<token-name>, agent:<name> or anonymous"
        )),
        Some(name) if !is_policy_word(name) => Some(format!(
            "invalid principal `{text}`: the name must start with a letter or digit and use only letters, digits, _, . or -"
        )),
        Some(_) => None,
    }
}

fn check_roles(
    ctx: Ctx<'_>,
    key: &KeyPath,
    roles: Vec<Spanned<String>>,
) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (i, role) in roles.into_iter().enumerate() {
        if !is_policy_word(&role.value) {
            return Err(ctx.invalid(
                Pos::of(&role),
                &key.index(i),
                format!(
                    "invalid role name `{}`: expected a letter or digit, then letters, digits, _, . or -",
                    role.value
                ),
            ));
        }
        if !out.contains(&role.value) {
            out.push(role.value);
        }
    }
    Ok(out)
}

pub(crate) fn convert_agent_visibility(
    ctx: Ctx<'_>,
    raw: RawAgentVisibility,
) -> Result<VisibilityConfig, ConfigError> {
    let root = KeyPath::root();
    let mut policies = BTreeMap::new();
    for (name, policy) in raw.policies.unwrap_or_default() {
        let key = root.key("policies").key(&name);
        let at = Pos::of(&policy);
        if !is_policy_word(&name) {
            return Err(ctx.invalid(
                at,
                &key,
                format!(
                    "invalid policy name `{name}`: a defined policy needs a plain name (a letter or digit, then letters, digits, _, . or -); role policies (roles:...) need no definition"
                ),
            ));
        }
        let policy = policy.value;
        let roles = check_roles(ctx, &key.key("roles"), policy.roles.unwrap_or_default())?;
        let mut principals = Vec::new();
        for (i, p) in policy
            .principals
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            if let Some(problem) = principal_problem(&p.value) {
                return Err(ctx.invalid(Pos::of(&p), &key.key("principals").index(i), problem));
            }
            principals.push(p.value);
        }
        let origin_roles = check_roles(
            ctx,
            &key.key("origin_roles"),
            policy.origin_roles.unwrap_or_default(),
        )?;
        let needs_resource = policy.needs_resource.unwrap_or(false);
        if roles.is_empty() && principals.is_empty() && origin_roles.is_empty() && !needs_resource {
            return Err(ctx.invalid(
                at,
                &key,
                format!(
                    "policy `{name}` requires nothing: give `roles`, `principals`, `origin_roles` or `needs_resource: true`"
                ),
            ));
        }
        policies.insert(
            name,
            PolicyConfig {
                roles,
                principals,
                origin_roles,
                needs_resource,
            },
        );
    }
    let fallback_policy = match raw.fallback_policy {
        None => None,
        Some(p) => {
            check_policy_ref(ctx, &root.key("fallback_policy"), &p, &policies)?;
            Some(p.value)
        }
    };
    let mut grants = BTreeMap::new();
    for (agent, grant) in raw.grants.unwrap_or_default() {
        let key = root.key("grants").key(&agent);
        if !is_valid_name(&agent) {
            return Err(ctx.invalid(
                Pos::of(&grant),
                &key,
                format!("`{agent}` is not an agent name (1 to 64 of a-z, 0-9, `_`, `-`)"),
            ));
        }
        let grant = match grant.value {
            RawGrant::Roles(roles) => GrantConfig {
                roles: check_roles(ctx, &key, roles)?,
                on_behalf_of_any: false,
            },
            RawGrant::Scoped(scoped) => GrantConfig {
                roles: check_roles(ctx, &key.key("roles"), scoped.roles)?,
                on_behalf_of_any: matches!(
                    scoped.on_behalf_of.map(|o| o.value),
                    Some(RawOnBehalfOf::Any)
                ),
            },
        };
        grants.insert(agent, grant);
    }
    let probe_budget = match raw.probe_budget {
        None => DEFAULT_PROBE_BUDGET,
        Some(n) if n.value <= MAX_PROBE_BUDGET => n.value as usize,
        Some(n) => {
            return Err(ctx.invalid(
                Pos::of(&n),
                &root.key("probe_budget"),
                format!(
                    "probe_budget {} is out of range; expected 0 to {MAX_PROBE_BUDGET}",
                    n.value
                ),
            ));
        }
    };
    Ok(VisibilityConfig {
        policies,
        fallback_policy,
        grants,
        probe_budget,
    })
}

/// Checks one policy name: the role form with non-empty names, or a defined policy.
fn check_policy_ref(
    ctx: Ctx<'_>,
    key: &KeyPath,
    policy: &Spanned<String>,
    defined: &BTreeMap<String, PolicyConfig>,
) -> Result<(), ConfigError> {
    let text = &policy.value;
    let at = Pos::of(policy);
    if let Some(list) = text.strip_prefix(ROLE_POLICY_PREFIX) {
        let names: Vec<&str> = list.split(',').collect();
        if names.iter().any(|n| n.trim().is_empty()) {
            return Err(ctx.invalid(
                at,
                key,
                format!(
                    "role policy `{text}` needs at least one non-empty role name (roles:<name>[,<name>])"
                ),
            ));
        }
        if let Some(bad) = names.iter().find(|n| !is_policy_word(n)) {
            return Err(ctx.invalid(
                at,
                key,
                format!(
                    "invalid role name `{bad}` in `{text}`: expected a letter or digit, then letters, digits, _, . or -"
                ),
            ));
        }
        return Ok(());
    }
    if !is_policy_word(text) {
        return Err(ctx.invalid(
            at,
            key,
            format!("invalid policy name `{text}`: expected a defined policy name or roles:<name>[,<name>]"),
        ));
    }
    if !defined.contains_key(text) {
        let names: Vec<String> = defined.keys().cloned().collect();
        return Err(ctx.invalid(
            at,
            key,
            format!(
                "no policy named `{text}` is defined in this agent's `policies` (defined: {})",
                crate::error::known_list(&names)
            ),
        ));
    }
    Ok(())
}

pub(crate) fn convert_tool_auth(
    ctx: Ctx<'_>,
    key: &KeyPath,
    raw: RawToolAuth,
    defined: &BTreeMap<String, PolicyConfig>,
) -> Result<ToolAuthConfig, ConfigError> {
    let mut policies: Vec<String> = Vec::new();
    for (i, p) in raw.policies.unwrap_or_default().into_iter().enumerate() {
        let pkey = key.key("policies").index(i);
        check_policy_ref(ctx, &pkey, &p, defined)?;
        if policies.contains(&p.value) {
            return Err(ctx.invalid(
                Pos::of(&p),
                &pkey,
                format!("policy `{}` is listed twice", p.value),
            ));
        }
        policies.push(p.value);
    }
    Ok(ToolAuthConfig {
        anonymous: raw.anonymous.unwrap_or(false),
        policies,
    })
}

pub(crate) fn convert_guard(
    ctx: Ctx<'_>,
    key: &KeyPath,
    guard: Spanned<RawGuard>,
) -> Result<GuardConfig, ConfigError> {
    let at = Pos::of(&guard);
    let g = guard.value;
    match g.kind {
        RawGuardKind::Feature => {
            if let Some(n) = &g.max_uses {
                return Err(ctx.schema(
                    Pos::of(n),
                    &key.key("max_uses"),
                    "`max_uses` belongs to guards of kind `quota`, not `feature`",
                ));
            }
            let Some(enabled) = g.enabled else {
                return Err(ctx.schema(
                    at,
                    &key.key("enabled"),
                    "missing required key `enabled` (guards of kind `feature` need one)",
                ));
            };
            Ok(GuardConfig::Feature {
                enabled,
                message: g
                    .message
                    .unwrap_or_else(|| "this tool is switched off".to_owned()),
            })
        }
        RawGuardKind::Quota => {
            if g.enabled.is_some() || g.message.is_some() {
                return Err(ctx.schema(
                    at,
                    key,
                    "`enabled` and `message` belong to guards of kind `feature`, not `quota`",
                ));
            }
            let Some(n) = g.max_uses else {
                return Err(ctx.schema(
                    at,
                    &key.key("max_uses"),
                    "missing required key `max_uses` (guards of kind `quota` need one)",
                ));
            };
            Ok(GuardConfig::Quota { max_uses: n.value })
        }
    }
}
