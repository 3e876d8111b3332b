//! Tests of `agent.yaml` loading: one file, its errors, sets of agents and the visibility
//! declarations.
//!
//! This module holds the fixtures the test files share (an example agent, folder builders and
//! error pickers); each child module tests one concern through the public loaders only, so a
//! test never reaches into a conversion step and stays valid when those are reorganised.

mod a2a;
mod adapters;
mod builder;
mod errors;
mod loading;
mod mcp;
mod set;
mod snapshot;
mod sql;
mod visibility;

use std::fs;
use std::path::{Path, PathBuf};

use super::{AGENT_FILE, AgentConfig};
use crate::error::ConfigError;

const CFO: &str = "\
name: cfo
description: Answers questions about spend from the ledger
agents:
  can_call: [analyst]
  accept_from: [cmo]
model:
  script:
    - tool: {name: ledger, input: \"SELECT sum(amount) FROM spend WHERE month = :input AND region = :LEDGER_REGION\"}
    - call: [{agent: analyst, input: \"check {input}\"}, {agent: analyst, input: \"x\", count: 3}]
    - check: \"{call.analyst}\"
    - answer: \"August spend: {tool.ledger}\"
tools:
  - name: ledger
    description: Read-only SQL over the finance ledger
    kind: sql
    database: ledger.db
    approval: required
    bind_env: [LEDGER_REGION]
env:
  LEDGER_REGION: eu
";

fn agent_dir(root: &Path, name: &str, yaml: &str) -> PathBuf {
    let d = root.join(name);
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join(AGENT_FILE), yaml).unwrap();
    d
}

fn simple(name: &str, can_call: &[&str], accept_from: &[&str]) -> String {
    format!(
        "name: {name}\nagents:\n  can_call: [{}]\n  accept_from: [{}]\nmodel:\n  script:\n    - answer: hi\n",
        can_call.join(", "),
        accept_from.join(", ")
    )
}

fn load_text(yaml: &[u8]) -> Result<AgentConfig, ConfigError> {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("a");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join(AGENT_FILE), yaml).unwrap();
    fs::write(d.join("ledger.db"), b"").unwrap();
    AgentConfig::load(&d)
}

/// (variant, line, column, key, message) of an error.
fn parts(e: &ConfigError) -> (&'static str, u64, u64, String, String) {
    match e {
        ConfigError::Syntax {
            line,
            column,
            message,
            ..
        } => ("syntax", *line, *column, String::new(), message.clone()),
        ConfigError::Schema {
            line,
            column,
            key,
            message,
            ..
        } => ("schema", *line, *column, key.clone(), message.clone()),
        ConfigError::Invalid {
            line,
            column,
            key,
            message,
            ..
        } => ("invalid", *line, *column, key.clone(), message.clone()),
        other => panic!("unexpected error {other}"),
    }
}

fn err(yaml: &str) -> (&'static str, u64, u64, String, String) {
    match load_text(yaml.as_bytes()) {
        Ok(a) => panic!("accepted: {a:?}"),
        Err(e) => {
            eprintln!("{e}");
            parts(&e)
        }
    }
}
