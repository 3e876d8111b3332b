//! Tests of the visibility declarations in `agent.yaml` (policies, grants, probe budget, tool
//! `auth:` and `guard:`) and of the script steps that exercise the meta-tools.

use super::{err, load_text, simple};
use crate::agent::{ModelConfig, ScriptStep};
use crate::visibility::{GrantConfig, GuardConfig, ToolAuthConfig, VisibilityConfig};

const VISIBLE: &str = "\
name: cfo
policies:
  finance_team: {roles: [finance]}
  the_cmo: {principals: [agent:cmo]}
  per_row: {needs_resource: true}
  asked_by_hr: {origin_roles: [hr, hr]}
fallback_policy: finance_team
grants: {cmo: [marketing], analyst: [finance, finance], assistant: {roles: [hr], on_behalf_of: any}, clerk: {roles: [hr], on_behalf_of: role_holders}}
probe_budget: 3
model:
  script:
    - search: {query: \"pay {input}\", limit: 5}
    - load: payroll
    - invoke: {name: payroll, arguments: {query: \"SELECT 1\"}}
    - answer: done
tools:
  - name: payroll
    kind: sql
    database: ledger.db
    auth: {policies: [\"roles:finance,hr\", finance_team]}
    guard: {kind: feature, enabled: false, message: payroll is closed}
  - name: ledger
    kind: sql
    database: ledger.db
    auth: {anonymous: true}
    guard: {kind: quota, max_uses: 2}
";

#[test]
fn loads_visibility_declarations_and_meta_tool_steps() {
    let a = load_text(VISIBLE.as_bytes()).unwrap();
    let v = &a.visibility;
    assert_eq!(v.policies["finance_team"].roles, vec!["finance"]);
    assert_eq!(v.policies["the_cmo"].principals, vec!["agent:cmo"]);
    assert!(v.policies["per_row"].needs_resource);
    assert_eq!(v.fallback_policy.as_deref(), Some("finance_team"));
    assert_eq!(v.policies["asked_by_hr"].origin_roles, vec!["hr"]);
    assert_eq!(
        v.grants["cmo"],
        GrantConfig {
            roles: vec!["marketing".into()],
            on_behalf_of_any: false
        }
    );
    assert_eq!(
        v.grants["analyst"].roles,
        vec!["finance"],
        "duplicates folded"
    );
    assert!(v.grants["assistant"].on_behalf_of_any);
    assert_eq!(v.grants["assistant"].roles, vec!["hr"]);
    assert!(!v.grants["clerk"].on_behalf_of_any);
    assert_eq!(v.probe_budget, 3);
    assert_eq!(
        a.tools[0].auth,
        Some(ToolAuthConfig {
            anonymous: false,
            policies: vec!["roles:finance,hr".into(), "finance_team".into()],
        })
    );
    assert_eq!(
        a.tools[0].guard,
        Some(GuardConfig::Feature {
            enabled: false,
            message: "payroll is closed".into()
        })
    );
    assert_eq!(a.tools[1].guard, Some(GuardConfig::Quota { max_uses: 2 }));
    assert!(a.tools[1].auth.as_ref().is_some_and(|x| x.anonymous));
    let ModelConfig::Script { steps } = &a.model else {
        panic!("a script model: {:?}", a.model)
    };
    assert_eq!(
        steps[0],
        ScriptStep::Search {
            query: "pay {input}".into(),
            limit: Some(5)
        }
    );
    assert_eq!(steps[1], ScriptStep::Load("payroll".into()));
    assert_eq!(
        steps[2],
        ScriptStep::Invoke {
            name: "payroll".into(),
            arguments: serde_json::json!({"query": "SELECT 1"})
        }
    );
    let plain = load_text(simple("x", &[], &[]).as_bytes()).unwrap();
    assert_eq!(plain.visibility, VisibilityConfig::default());
    assert_eq!(plain.visibility.probe_budget, 25);
}

#[test]
fn bad_visibility_input_names_line_and_key() {
    let with = |from: &str, to: &str| {
        assert!(VISIBLE.contains(from), "{from}");
        VISIBLE.replace(from, to)
    };
    // A value outside the descriptor's schema.
    let (k, l, _, key, _) = err(&with("auth: {anonymous: true}", "auth: {anonymous: maybe}"));
    assert_eq!(
        (k, l, key.as_str()),
        ("schema", 25, "tools[1].auth.anonymous")
    );
    // An unknown key in an auth block.
    let (k, _, _, key, msg) = err(&with("auth: {anonymous: true}", "auth: {anon: true}"));
    assert_eq!((k, key.as_str()), ("schema", "tools[1].auth.anon"), "{msg}");
    // A policy name no config defines.
    let (k, l, _, key, msg) = err(&with("finance_team]}\n    guard", "finanse]}\n    guard"));
    assert_eq!(
        (k, l, key.as_str()),
        ("invalid", 20, "tools[0].auth.policies[1]")
    );
    assert!(msg.contains("no policy named `finanse`"), "{msg}");
    assert!(msg.contains("finance_team"), "{msg}");
    // A role policy with an empty name list.
    for empty in ["roles:", "roles:finance,,hr", "roles: ,"] {
        let (k, _, _, key, msg) = err(&with("roles:finance,hr", empty));
        assert_eq!((k, key.as_str()), ("invalid", "tools[0].auth.policies[0]"));
        assert!(msg.contains("at least one non-empty role name"), "{msg}");
    }
    let (_, _, _, key, msg) = err(&with(
        "fallback_policy: finance_team",
        "fallback_policy: nope",
    ));
    assert_eq!(key, "fallback_policy");
    assert!(msg.contains("no policy named `nope`"), "{msg}");
    let (_, _, _, key, msg) = err(&with("per_row: {needs_resource: true}", "per_row: {}"));
    assert_eq!(key, "policies.per_row");
    assert!(msg.contains("requires nothing"), "{msg}");
    let (_, _, _, key, msg) = err(&with("[agent:cmo]", "[boss:cmo]"));
    assert_eq!(key, "policies.the_cmo.principals[0]");
    assert!(msg.contains("unknown principal form"), "{msg}");
    let (k, _, _, key, _) = err(&with("kind: quota, max_uses: 2", "kind: quota"));
    assert_eq!((k, key.as_str()), ("schema", "tools[1].guard.max_uses"));
    let (k, _, _, key, _) = err(&with("kind: quota", "kind: licence"));
    assert_eq!((k, key.as_str()), ("schema", "tools[1].guard.kind"));
    let (_, _, _, key, _) = err(&with("probe_budget: 3", "probe_budget: 5000"));
    assert_eq!(key, "probe_budget");
    let (_, _, _, key, _) = err(&with("grants: {cmo:", "grants: {Bad Name:"));
    assert_eq!(key, "grants.Bad Name");
    // The origin's roles and the scope of a grant.
    let (k, l, _, key, msg) = err(&with("origin_roles: [hr, hr]", "origin_roles: [\"h r\"]"));
    assert_eq!(
        (k, l, key.as_str()),
        ("invalid", 6, "policies.asked_by_hr.origin_roles[0]")
    );
    assert!(msg.contains("invalid role name `h r`"), "{msg}");
    let (_, _, _, key, msg) = err(&with("{origin_roles: [hr, hr]}", "{origin_roles: []}"));
    assert_eq!(key, "policies.asked_by_hr");
    assert!(msg.contains("`origin_roles`"), "{msg}");
    let (k, l, _, key, msg) = err(&with("on_behalf_of: any", "on_behalf_of: everyone"));
    assert_eq!(
        (k, l, key.as_str()),
        ("schema", 8, "grants.assistant.on_behalf_of")
    );
    assert!(msg.contains("role_holders") && msg.contains("any"), "{msg}");
    let (k, _, _, key, _) = err(&with("on_behalf_of: any", "on_behalf: any"));
    assert_eq!((k, key.as_str()), ("schema", "grants.assistant.on_behalf"));
    let (k, _, _, key, _) = err(&with(
        "{roles: [hr], on_behalf_of: any}",
        "{on_behalf_of: any}",
    ));
    assert_eq!((k, key.as_str()), ("schema", "grants.assistant.roles"));
    let (k, _, _, key, msg) = err(&with(
        "clerk: {roles: [hr], on_behalf_of: role_holders}",
        "clerk: {roles: [\"\"]}",
    ));
    assert_eq!(
        (k, key.as_str()),
        ("invalid", "grants.clerk.roles[0]"),
        "{msg}"
    );
    let (k, _, _, key, msg) = err(&with("analyst: [finance, finance]", "analyst: finance"));
    assert_eq!((k, key.as_str()), ("schema", "grants.analyst"), "{msg}");
    assert!(msg.contains("a list of roles"), "{msg}");
    let (k, _, _, key, _) = err(&with("limit: 5}", "limit: 5, extra: 1}"));
    assert_eq!(
        (k, key.as_str()),
        ("schema", "model.script[0].search.extra")
    );
}
