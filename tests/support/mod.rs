//! Shared pieces of the end-to-end tests: agent folders on disk, the real `consort` binary as
//! a child process, and bounded polling. Every wait here has a deadline; nothing sleeps a fixed
//! time where a condition can be polled.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_consort");

/// A temporary folder holding agent folders and a data folder.
pub struct Fleet {
    pub dir: tempfile::TempDir,
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn agents(&self) -> PathBuf {
        self.dir.path().join("agents")
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Writes `agents/<name>/agent.yaml`.
    pub fn agent(&self, name: &str, yaml: &str) -> PathBuf {
        let dir = self.agents().join(name);
        std::fs::create_dir_all(&dir).expect("agent dir");
        let file = dir.join("agent.yaml");
        std::fs::write(&file, yaml).expect("write agent.yaml");
        file
    }

    /// Writes a ledger database into `agents/<name>/ledger.db`.
    pub fn ledger(&self, name: &str) {
        let path = self.agents().join(name).join("ledger.db");
        let conn = rusqlite::Connection::open(path).expect("ledger");
        conn.execute_batch(
            "CREATE TABLE spend (month TEXT, category TEXT, amount REAL);
             INSERT INTO spend VALUES ('2026-08', 'ads', 40000), ('2026-08', 'events', 8250),
                                      ('2026-07', 'ads', 1);",
        )
        .expect("ledger rows");
    }

    /// `consort dev agents --data data`, serving on a free loopback port.
    pub fn serve(&self, env: &[(&str, &str)]) -> Served {
        Served::start(&[self.agents()], &self.data(), env)
    }

    /// Runs the binary to the end with these arguments.
    pub fn consort(&self, args: &[&str]) -> Output {
        consort(args)
    }

    /// `jobs list --data <data> --json`.
    pub fn jobs(&self) -> Vec<Value> {
        let out = consort(&["jobs", "list", "--data", path_str(&self.data()), "--json"]);
        assert!(out.status.success(), "jobs list failed: {}", stderr(&out));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("jobs json")
    }

    pub fn events(&self, run: &str) -> Vec<Value> {
        let out = consort(&[
            "runs",
            "show",
            run,
            "--data",
            path_str(&self.data()),
            "--json",
        ]);
        assert!(out.status.success(), "runs show failed: {}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).expect("runs show json");
        v["events"].as_array().cloned().unwrap_or_default()
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

pub fn consort(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CONSORT_AT")
        .env_remove("CONSORT_FAULT")
        .output()
        .expect("run consort")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `consort dev` process serving on loopback; killed when dropped.
pub struct Served {
    pub child: Child,
    pub url: String,
    lines: mpsc::Receiver<String>,
}

impl Served {
    pub fn start(dirs: &[PathBuf], data: &Path, env: &[(&str, &str)]) -> Served {
        Served::start_with(dirs, data, env, &[])
    }

    /// As [`Served::start`], with extra `consort dev` arguments (e.g. `--auth FILE`).
    pub fn start_with(
        dirs: &[PathBuf],
        data: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Served {
        let mut cmd = Command::new(BIN);
        cmd.arg("dev");
        for d in dirs {
            cmd.arg(d);
        }
        cmd.args(args);
        cmd.args(["--data", path_str(data), "--listen", "127.0.0.1:0"])
            .env_remove("CONSORT_FAULT")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn consort dev");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut served = Served {
            child,
            url: String::new(),
            lines: rx,
        };
        let line = served
            .wait_for_line("consort: serving", Duration::from_secs(30))
            .expect("consort dev did not report its URL");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("url in the serving line")
            .to_owned();
        served.url = url;
        served
    }

    /// Waits for a stderr line containing `needle`.
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// Runs a CLI command against this host (`--at URL` appended).
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--at", &self.url]);
        consort(&all)
    }

    /// `consort run AGENT INPUT --wait --json` against this host.
    pub fn run_wait(&self, agent: &str, input: &str) -> Value {
        let out = self.cli(&[
            "run",
            agent,
            input,
            "--wait",
            "--json",
            "--timeout-secs",
            "60",
        ]);
        assert!(
            !out.stdout.is_empty(),
            "consort run printed nothing: {}",
            stderr(&out)
        );
        serde_json::from_slice(&out.stdout).expect("run json")
    }

    /// `runs show ID --json` against this host: `{run, events}`, if the run is there.
    pub fn show(&self, id: &str) -> Option<Value> {
        let out = self.cli(&["runs", "show", id, "--json"]);
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Polls until run `id` has `status`; returns `{run, events}`.
    pub fn wait_status(&self, id: &str, status: &str) -> Value {
        eventually(
            &format!("run {id} to be {status}"),
            Duration::from_secs(30),
            || self.show(id).filter(|v| v["run"]["status"] == status),
        )
    }

    pub fn http(&self) -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("http client")
    }

    /// SIGKILL, no cleanup: what a crash looks like.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it returns `Some`, or panics after `timeout` with `what`.
pub fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Event kinds of a run's log, in order.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect()
}

/// Runs of one agent from a jobs listing.
pub fn runs_of<'a>(jobs: &'a [Value], agent: &str) -> Vec<&'a Value> {
    jobs.iter().filter(|r| r["agent"] == agent).collect()
}

impl Served {
    /// Waits (bounded) for a host started with `CONSORT_FAULT=<point>` to reach that fault
    /// point and die there on its own (an abort, as a crash would); returns how it ended.
    pub fn wait_for_crash(&mut self, point: &str, timeout: Duration) -> std::process::ExitStatus {
        let marker = format!("consort: fault point {point} reached");
        self.wait_for_line(&marker, timeout)
            .unwrap_or_else(|| panic!("the host never reached fault point {point}"));
        eventually(&format!("the host to die at {point}"), timeout, || {
            self.child.try_wait().ok().flatten()
        })
    }
}
