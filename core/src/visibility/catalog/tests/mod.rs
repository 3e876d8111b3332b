//! Tests of the meta-tool answers over a catalog: ranking, visibility applied to search
//! results, request bounds, and `load_tool` answers that never tell a denied tool from a
//! missing one.
//!
//! This module holds the shared fixture: a small finance catalog with one tool of each kind of
//! auth, and a caller with the finance role.

mod load;
mod search;

use serde_json::json;

use super::{Catalog, CatalogEntry, SearchAnswer, SearchRequest, search_tools};
use crate::visibility::descriptor::{Anonymity, Auth, PolicyRef};
use crate::visibility::facts::{Identity, Principal, RoleGrants};
use crate::visibility::ladder::{PolicyDefinition, PolicyRegistry, Visibility};
use crate::visibility::origin::Origin;
use crate::visibility::probe_cache::ProbeCache;

fn entry(name: &str, description: &str, auth: Auth) -> CatalogEntry {
    CatalogEntry {
        name: name.into(),
        description: description.into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["a", "b"]},
                "note": {"type": ["string", "null"]},
            },
            "required": ["query"],
        }),
        auth,
    }
}

fn open() -> Auth {
    Auth {
        anonymous: Anonymity::Yes,
        policies: vec![],
        imperative: false,
    }
}

fn policy(name: &str) -> Auth {
    Auth {
        anonymous: Anonymity::No,
        policies: vec![PolicyRef::parse(name).unwrap()],
        imperative: false,
    }
}

fn catalog() -> Catalog {
    Catalog::new(
        4,
        vec![
            entry(
                "ledger_read",
                "Read the finance ledger",
                policy("roles:finance"),
            ),
            entry(
                "payroll",
                "Finance payroll of every employee",
                policy("secret-payroll-policy"),
            ),
            entry("weather", "Today's weather", open()),
            entry(
                "quota_report",
                "Usage report behind a licence gate",
                Auth {
                    imperative: true,
                    ..open()
                },
            ),
            entry("ledger", "The ledger itself", policy("roles:finance")),
        ],
    )
    .unwrap()
}

fn registry() -> PolicyRegistry {
    let mut registry = PolicyRegistry::new();
    registry
        .define(
            "secret-payroll-policy",
            PolicyDefinition {
                roles: vec!["hr".into()],
                ..PolicyDefinition::default()
            },
        )
        .unwrap();
    registry
}

fn cmo_finance() -> Identity {
    let mut grants = RoleGrants::new();
    grants.grant(Principal::Agent("cmo".into()), ["finance"]);
    // Trusted for any origin, so the grant alone decides here.
    grants.for_any_origin(Principal::Agent("cmo".into()));
    Identity::peer("cmo", &grants, &Origin::Absent, &RoleGrants::new())
}

fn search(identity: &Identity, query: &str, limit: usize) -> SearchAnswer {
    let registry = registry();
    search_tools(
        &catalog(),
        &SearchRequest {
            query: query.into(),
            limit,
        },
        &Visibility::without_probe(identity, &registry),
        &mut ProbeCache::new(0),
    )
    .unwrap()
}

fn names(answer: &SearchAnswer) -> Vec<&str> {
    answer.tools.iter().map(|card| card.name.as_str()).collect()
}
