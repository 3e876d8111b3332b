//! The two peers consort's acked calls are compared with, built the way a team would build
//! them by hand, each doing the one durable write an accepted call needs:
//!
//! - **(a) an HTTP RPC service**: axum on HTTP/1.1 (keep-alive), a JSON POST of the call, and a
//!   handler that inserts the call into SQLite (WAL, `synchronous=NORMAL`, like consort's
//!   stores) in its own commit, on a blocking thread, then answers `{"accepted": true}`.
//! - **(b) a naive in-host actor store**: a ractor actor whose handler inserts the call into
//!   SQLite in its own commit and replies; callers `call` it.
//!
//! Neither batches commits across requests: that is what "one commit per call" costs. They own
//! no consort code and must not be run as tests.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

/// The call a peer accepts: what consort's envelope carries that a store must keep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PeerCall {
    pub caller: String,
    pub callee: String,
    pub parent_run: String,
    pub tool_use_id: String,
    pub input: String,
}

impl PeerCall {
    pub(crate) fn numbered(n: u64) -> Self {
        Self {
            caller: "cmo".into(),
            callee: "cfo".into(),
            parent_run: format!("run_{n:032x}"),
            tool_use_id: format!("tu_{n}"),
            input: "What did we spend in August 2026?".into(),
        }
    }
}

/// A SQLite file set up as consort's stores are (WAL, `synchronous=NORMAL`), with a unique key
/// on the child, so a repeated call is found rather than stored twice.
fn open_store(path: &std::path::Path) -> Result<Connection> {
    let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;
         CREATE TABLE IF NOT EXISTS calls (
             parent_run TEXT NOT NULL, tool_use_id TEXT NOT NULL, caller TEXT NOT NULL,
             callee TEXT NOT NULL, input TEXT NOT NULL,
             PRIMARY KEY (parent_run, tool_use_id));",
    )?;
    Ok(conn)
}

/// One commit: the call, unless it is already there.
fn insert(conn: &Connection, call: &PeerCall) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "INSERT OR IGNORE INTO calls (parent_run, tool_use_id, caller, callee, input)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            call.parent_run,
            call.tool_use_id,
            call.caller,
            call.callee,
            call.input
        ],
    )?;
    Ok(n == 1)
}

/// Peer (a): serves `POST /call` on a free loopback port; returns its URL.
pub(crate) async fn start_http_peer(dir: &std::path::Path) -> Result<String> {
    let conn = Arc::new(Mutex::new(open_store(&dir.join("http-peer.db"))?));
    let app = axum::Router::new()
        .route(
            "/call",
            axum::routing::post(
                |axum::extract::State(conn): axum::extract::State<Arc<Mutex<Connection>>>,
                 axum::Json(call): axum::Json<PeerCall>| async move {
                    let stored = tokio::task::spawn_blocking(move || {
                        let conn = conn.lock().map_err(|_| "store lock poisoned".to_owned())?;
                        insert(&conn, &call).map_err(|e| e.to_string())
                    })
                    .await;
                    match stored {
                        Ok(Ok(_)) => (
                            axum::http::StatusCode::OK,
                            axum::Json(serde_json::json!({"accepted": true})),
                        ),
                        Ok(Err(e)) => (
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            axum::Json(serde_json::json!({"error": e})),
                        ),
                        Err(e) => (
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            axum::Json(serde_json::json!({"error": e.to_string()})),
                        ),
                    }
                },
            ),
        )
        .with_state(conn);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/call", listener.local_addr()?);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("consort-bench: the HTTP peer stopped: {e}");
        }
    });
    Ok(url)
}

/// Peer (b): an actor that stores each call in its own commit.
pub(crate) struct StoreActor;

/// A call to store, and where to say it was stored.
pub(crate) struct StoreCall(pub PeerCall, pub RpcReplyPort<bool>);

impl Actor for StoreActor {
    type Msg = StoreCall;
    type State = Connection;
    type Arguments = std::path::PathBuf;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        path: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(open_store(&path)?)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        StoreCall(call, reply): Self::Msg,
        conn: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The naive actor store: the commit runs in the handler, one call at a time.
        let stored = insert(conn, &call)?;
        let _ = reply.send(stored);
        Ok(())
    }
}

/// Starts peer (b) on a store in `dir`.
pub(crate) async fn start_actor_peer(dir: &std::path::Path) -> Result<ActorRef<StoreCall>> {
    let (actor, _handle) = Actor::spawn(None, StoreActor, dir.join("actor-peer.db"))
        .await
        .context("spawning the actor peer")?;
    Ok(actor)
}
