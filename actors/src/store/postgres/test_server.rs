//! A throwaway PostgreSQL server for tests: `initdb` into a temporary folder, `postgres` on a
//! free loopback port, stopped (fast shutdown) and removed on drop.
//!
//! The binaries are looked up on `PATH`, then under `/usr/lib/postgresql/<version>/bin`
//! (Debian's `postgresql` package). Where none is found, [`TestServer::start`] prints why and
//! returns `None`: the test skips, it does not fail, unless `CONSORT_PG_TESTS=required` (CI,
//! which installs PostgreSQL) makes a skip a failure. PostgreSQL refuses to run as root, so as
//! root the server runs as the user `$CONSORT_PG_TEST_USER` (default `postgres`, which Debian's
//! package creates) through `runuser`.
//!
//! Shared by the consort-actors unit tests and the end-to-end tests (`tests/postgres_store.rs`
//! includes this file), so it uses nothing but std, `tempfile` and `postgres`.

#![allow(dead_code, unreachable_pub)]

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server; stopped and removed when dropped.
pub struct TestServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    run_as: Option<String>,
    child: Child,
    port: u16,
}

/// Where `name` is: on `PATH`, else in the newest `/usr/lib/postgresql/*/bin`.
fn find_binary(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("bin").join(name))
        .filter(|candidate| candidate.is_file())
        .collect();
    versions.sort_by_key(|path| {
        path.components()
            .nth(4)
            .and_then(|c| c.as_os_str().to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop()
}

fn output_of(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn skip(why: &str) -> Option<TestServer> {
    assert!(
        std::env::var("CONSORT_PG_TESTS").as_deref() != Ok("required"),
        "CONSORT_PG_TESTS=required, but no PostgreSQL server can be started: {why}"
    );
    eprintln!("SKIPPED: no PostgreSQL server for this test: {why}");
    None
}

impl TestServer {
    /// Starts a server, or says why not and returns `None`.
    pub fn start() -> Option<Self> {
        let (Some(initdb), Some(postgres)) = (find_binary("initdb"), find_binary("postgres"))
        else {
            return skip("initdb/postgres not found on PATH or under /usr/lib/postgresql");
        };
        let bin = match postgres.parent() {
            Some(dir) => dir.to_path_buf(),
            None => return skip("the postgres binary has no folder"),
        };
        let run_as = if output_of("id", &["-u"]).as_deref() == Some("0") {
            let user = std::env::var("CONSORT_PG_TEST_USER").unwrap_or_else(|_| "postgres".into());
            if output_of("id", &["-u", &user]).is_none() {
                return skip(&format!(
                    "running as root, and there is no user `{user}` to run the server as"
                ));
            }
            Some(user)
        } else {
            None
        };
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => return skip(&format!("no temporary folder: {e}")),
        };
        if let Some(user) = &run_as {
            let ids = (
                output_of("id", &["-u", user]).and_then(|u| u.parse::<u32>().ok()),
                output_of("id", &["-g", user]).and_then(|g| g.parse::<u32>().ok()),
            );
            let (Some(uid), Some(gid)) = ids else {
                return skip(&format!("the ids of user `{user}` are unknown"));
            };
            if let Err(e) = std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)) {
                return skip(&format!(
                    "cannot hand the temporary folder to `{user}`: {e}"
                ));
            }
        }
        let data = dir.path().join("data");
        let init = command(&run_as, &initdb)
            .arg("-D")
            .arg(&data)
            .args(["-U", "consort", "--auth=trust", "-E", "UTF8", "--locale=C"])
            .arg("--no-sync")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        match init {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return skip(&format!(
                    "initdb failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Err(e) => return skip(&format!("initdb did not run: {e}")),
        }
        let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
            Ok(addr) => addr.port(),
            Err(e) => return skip(&format!("no free port: {e}")),
        };
        let log = match File::create(dir.path().join("server.log")) {
            Ok(log) => log,
            Err(e) => return skip(&format!("no server log: {e}")),
        };
        let err_log = match log.try_clone() {
            Ok(log) => log,
            Err(e) => return skip(&format!("no server log: {e}")),
        };
        let child = command(&run_as, &postgres)
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            // A test server: nothing it holds must survive a crash.
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => return skip(&format!("postgres did not start: {e}")),
        };
        let mut server = Self {
            dir,
            bin,
            run_as,
            child,
            port,
        };
        server.wait_until_ready();
        Some(server)
    }

    /// Panics (a broken test setup, after the binaries were found) when the server does not
    /// accept connections within 30 seconds.
    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if ::postgres::Client::connect(&self.url("postgres"), ::postgres::NoTls).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("postgres exited ({status}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections in 30 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The URL of database `db` on this server (user `consort`, no password).
    pub fn url(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=consort dbname={db} connect_timeout=5",
            self.port
        )
    }

    /// Creates a fresh database and returns its URL.
    pub fn database(&self, db: &str) -> String {
        let mut admin = ::postgres::Client::connect(&self.url("postgres"), ::postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test server: {e}"));
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap_or_else(|e| panic!("create database {db}: {e}"));
        self.url(db)
    }

    /// The folder the server lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// `program`, run as `run_as` through `runuser` when given.
fn command(run_as: &Option<String>, program: &Path) -> Command {
    match run_as {
        Some(user) => {
            // Not always on a root shell's PATH.
            let runuser = find_binary("runuser")
                .or_else(|| {
                    ["/usr/sbin/runuser", "/sbin/runuser"]
                        .iter()
                        .map(PathBuf::from)
                        .find(|p| p.is_file())
                })
                .unwrap_or_else(|| PathBuf::from("runuser"));
            let mut cmd = Command::new(runuser);
            cmd.args(["-u", user, "--"]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Fast shutdown: the server ends its sessions and its children and exits.
        let stopped = command(&self.run_as, &self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["stop", "-m", "fast", "-w", "-t", "20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(stopped, Ok(status) if status.success()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
