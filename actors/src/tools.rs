//! Tools an agent's model can use, besides `call_agent` and `check_run`.
//!
//! A [`Tool`] is declared in agent.yaml (today: `sql`) or registered by an embedding app. It
//! runs with the agent's own env ([`ToolContext::env`]): the env is visible to the agent's own
//! tools only, never to its model, and never to a caller. A tool declared with
//! `approval: required` is parked by the engine until an operator decides; the tool itself
//! never sees that gate.
//!
//! A tool also carries what visibility and authorization read: its auth markers, its guards
//! and its own resource-dependent check ([`Tool::auth_markers`], [`Tool::guards`],
//! [`Tool::check_resource`]); the engine runs them through the authorization pipeline
//! (`tool_guard`, which imports this module, not the other way round) before the handler.
//!
//! This module never places calls and never writes run state; it runs one tool use and returns
//! its text.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

use consort_config::{Approval, ToolConfig, ToolKind};
use consort_net::RunId;

use crate::guard::{Guard, declared_guard};
use crate::model::ToolSpec;
use crate::visibility::{AuthMarkers, Identity, PolicyRef};

/// What a tool may know about the run that uses it.
#[derive(Clone, Copy, Debug)]
pub struct ToolContext<'a> {
    /// The agent whose run uses the tool.
    pub agent: &'a str,
    /// The run that uses the tool.
    pub run_id: &'a RunId,
    /// The run's input text.
    pub input: &'a str,
    /// The agent's env from its agent.yaml.
    pub env: &'a BTreeMap<String, String>,
}

/// Why a tool use failed; the text goes back to the model as an error result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid input: {0}")]
    /// The input does not match the tool's schema.
    InvalidInput(String),
    #[error("forbidden: {0}")]
    /// The use is not allowed.
    Forbidden(String),
    #[error("{0}")]
    /// The tool ran and failed.
    Failed(String),
}

/// The boxed future a [`Tool`] returns.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'a>>;

/// One tool. Implementations must not panic on any input.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and input schema, as the model is told.
    fn spec(&self) -> ToolSpec;
    /// Whether a use must wait for an operator's approval.
    fn approval(&self) -> Approval {
        Approval::None
    }
    /// Runs the tool on `input`; the text answered goes back to the model.
    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a>;
    /// The markers visibility's T0 reads: an anonymous marker and the declared policies (the
    /// agent's fallback policy and the guard flag are added by the engine).
    fn auth_markers(&self) -> AuthMarkers {
        AuthMarkers::default()
    }
    /// The guards that run before the handler (see `crate::guard`).
    fn guards(&self) -> Vec<Arc<dyn Guard>> {
        Vec::new()
    }
    /// The tool's own resource-dependent check, with the arguments, after the guards and
    /// before the handler. `Err` is the refusal the model reads.
    fn check_resource(&self, _caller: &Identity, _input: &Value) -> Result<(), String> {
        Ok(())
    }
}

/// Builds the tool an agent.yaml declaration describes, with its `auth:` and `guard:`.
pub fn declared_tool(config: &ToolConfig) -> Arc<dyn Tool> {
    let inner: Arc<dyn Tool> = match &config.kind {
        ToolKind::Sql { database } => Arc::new(SqlTool {
            name: config.name.clone(),
            description: config.description.clone(),
            database: database.clone(),
            approval: config.approval,
        }),
    };
    let markers = config
        .auth
        .as_ref()
        .map_or_else(AuthMarkers::default, |auth| AuthMarkers {
            anonymous_marker: auth.anonymous,
            policies: auth
                .policies
                .iter()
                .map(|p| {
                    // consort-config checked the form; a name that still fails fails closed.
                    PolicyRef::parse(p)
                        .unwrap_or_else(|_| PolicyRef::Named("invalid-policy".into()))
                })
                .collect(),
            fallback_policy: None,
            guard: false,
        });
    Arc::new(Declared {
        inner,
        markers,
        guards: config.guard.iter().map(declared_guard).collect(),
    })
}

/// A declared tool with the markers and guards of its agent.yaml entry.
struct Declared {
    inner: Arc<dyn Tool>,
    markers: AuthMarkers,
    guards: Vec<Arc<dyn Guard>>,
}

impl Tool for Declared {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }
    fn approval(&self) -> Approval {
        self.inner.approval()
    }
    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a> {
        self.inner.invoke(ctx, input)
    }
    fn auth_markers(&self) -> AuthMarkers {
        self.markers.clone()
    }
    fn guards(&self) -> Vec<Arc<dyn Guard>> {
        self.guards.clone()
    }
    fn check_resource(&self, caller: &Identity, input: &Value) -> Result<(), String> {
        self.inner.check_resource(caller, input)
    }
}

/// Most rows a query answer carries; the rest is summarised.
const SQL_MAX_ROWS: usize = 200;

/// A read-only SQL query against a SQLite file that belongs to the agent.
///
/// Read-only is enforced by SQLite itself: the file is opened with `SQLITE_OPEN_READ_ONLY` and
/// `query_only`, so a write fails in the engine whatever the text looks like. Named parameters
/// are bound, never spliced: `:input` is the run's input text and `:NAME` an entry of the
/// agent's env, so a query can use what the caller asked without the caller writing SQL.
pub struct SqlTool {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The SQLite file, opened read-only.
    pub database: PathBuf,
    /// Whether a use waits for an operator's approval.
    pub approval: Approval,
}

impl Tool for SqlTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "one read-only SQLite statement"}},
                "required": ["query"],
                "additionalProperties": false,
            }),
        }
    }

    fn approval(&self) -> Approval {
        self.approval
    }

    fn invoke<'a>(&'a self, ctx: ToolContext<'a>, input: &'a Value) -> ToolFuture<'a> {
        let query = input
            .get("query")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let database = self.database.clone();
        let mut env = ctx.env.clone();
        env.insert("input".to_owned(), ctx.input.to_owned());
        Box::pin(async move {
            let query = query.ok_or_else(|| {
                ToolError::InvalidInput("expected {\"query\": \"<one SQL statement>\"}".into())
            })?;
            tokio::task::spawn_blocking(move || run_query(&database, &query, &env))
                .await
                .map_err(|e| ToolError::Failed(format!("sql tool task failed: {e}")))?
        })
    }
}

fn run_query(
    database: &std::path::Path,
    query: &str,
    env: &BTreeMap<String, String>,
) -> Result<String, ToolError> {
    let fail = |e: rusqlite::Error| ToolError::Failed(format!("sql: {e}"));
    let conn = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(fail)?;
    conn.execute_batch("PRAGMA query_only = ON;")
        .map_err(fail)?;
    let mut stmt = conn.prepare(query).map_err(fail)?;
    for index in 1..=stmt.parameter_count() {
        let Some(name) = stmt.parameter_name(index).map(str::to_owned) else {
            return Err(ToolError::InvalidInput(
                "positional parameters (?) have no value; use :NAME to bind from env".into(),
            ));
        };
        let key = name.trim_start_matches([':', '@', '$']);
        let value = env.get(key).ok_or_else(|| {
            ToolError::InvalidInput(format!(
                "parameter {name} is neither :input nor a key of the agent's env"
            ))
        })?;
        stmt.raw_bind_parameter(index, value).map_err(fail)?;
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    let mut rows = stmt.raw_query();
    let mut lines = Vec::new();
    let mut total = 0usize;
    while let Some(row) = rows.next().map_err(fail)? {
        total += 1;
        if lines.len() >= SQL_MAX_ROWS {
            continue;
        }
        let mut cells = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            cells.push(match row.get_ref(i).map_err(fail)? {
                ValueRef::Null => "NULL".to_owned(),
                ValueRef::Integer(v) => v.to_string(),
                ValueRef::Real(v) => v.to_string(),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                ValueRef::Blob(b) => format!("<{} bytes>", b.len()),
            });
        }
        lines.push(cells.join(" | "));
    }
    if columns.len() == 1 && total == 1 {
        return Ok(lines.pop().unwrap_or_default());
    }
    let mut out = columns.join(" | ");
    for line in lines {
        out.push('\n');
        out.push_str(&line);
    }
    if total > SQL_MAX_ROWS {
        out.push_str(&format!(
            "\n… ({} more rows not shown)",
            total - SQL_MAX_ROWS
        ));
    }
    if total == 0 {
        out.push_str("\n(no rows)");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE spend (month TEXT, region TEXT, amount REAL);
             INSERT INTO spend VALUES ('2026-08', 'eu', 100.5), ('2026-08', 'us', 20), ('2026-07', 'eu', 7);",
        )
        .unwrap();
        (dir, path)
    }

    fn tool(path: PathBuf) -> SqlTool {
        SqlTool {
            name: "ledger".into(),
            description: String::new(),
            database: path,
            approval: Approval::None,
        }
    }

    #[tokio::test]
    async fn answers_reads_and_binds_env() {
        let (_dir, path) = ledger();
        let tool = tool(path);
        let env = BTreeMap::from([("REGION".to_owned(), "eu".to_owned())]);
        let run = RunId::random();
        let ctx = ToolContext {
            agent: "cfo",
            run_id: &run,
            input: "2026-08",
            env: &env,
        };
        let one = json!({"query": "SELECT sum(amount) FROM spend WHERE month = '2026-08'"});
        assert_eq!(tool.invoke(ctx, &one).await.unwrap(), "120.5");
        let bound = json!({"query": "SELECT sum(amount) FROM spend WHERE region = :REGION"});
        assert_eq!(tool.invoke(ctx, &bound).await.unwrap(), "107.5");
        let input = json!({"query": "SELECT sum(amount) FROM spend WHERE month = :input"});
        assert_eq!(tool.invoke(ctx, &input).await.unwrap(), "120.5");
        let missing = json!({"query": "SELECT :NOPE"});
        assert!(matches!(
            tool.invoke(ctx, &missing).await,
            Err(ToolError::InvalidInput(_))
        ));
        let input = json!({"query": "SELECT sum(amount) FROM spend WHERE month = :input"});
        assert_eq!(tool.invoke(ctx, &input).await.unwrap(), "120.5");
        let missing = json!({"query": "SELECT :NOPE"});
        assert!(matches!(
            tool.invoke(ctx, &missing).await,
            Err(ToolError::InvalidInput(_))
        ));
        let table = json!({"query": "SELECT month, amount FROM spend ORDER BY amount"});
        assert!(
            tool.invoke(ctx, &table)
                .await
                .unwrap()
                .starts_with("month | amount\n2026-07 | 7")
        );
    }

    #[tokio::test]
    async fn refuses_writes_in_the_engine() {
        let (_dir, path) = ledger();
        let tool = tool(path.clone());
        let env = BTreeMap::new();
        let run = RunId::random();
        let ctx = ToolContext {
            agent: "cfo",
            run_id: &run,
            input: "2026-08",
            env: &env,
        };
        for write in [
            "DELETE FROM spend",
            "/* select */ INSERT INTO spend VALUES ('x','y',1)",
            "WITH x AS (SELECT 1) UPDATE spend SET amount = 0",
        ] {
            let err = tool
                .invoke(ctx, &json!({"query": write}))
                .await
                .unwrap_err();
            assert!(matches!(err, ToolError::Failed(_)), "{write}: {err}");
        }
        let conn = Connection::open(&path).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM spend", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
        let bad = tool
            .invoke(ctx, &json!({"sql": "SELECT 1"}))
            .await
            .unwrap_err();
        assert!(matches!(bad, ToolError::InvalidInput(_)));
    }
}
