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

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_consort");

/// An agent `payer` whose one tool use, a payment, waits for an operator's approval (its
/// folder needs the ledger [`Fleet::ledger`] writes), then answers `done`.
pub(crate) const GATED_PAYER: &str = r#"
name: payer
description: pays a supplier
model:
  script:
    - tool: {name: pay, input: "SELECT 'paid ' || :input"}
    - answer: "done"
tools:
  - {name: pay, kind: sql, database: ledger.db, description: pays, approval: required}
"#;

/// A temporary folder holding agent folders and a data folder.
pub(crate) struct Fleet {
    pub dir: tempfile::TempDir,
}

impl Fleet {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub(crate) fn agents(&self) -> PathBuf {
        self.dir.path().join("agents")
    }

    pub(crate) fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Writes `agents/<name>/agent.yaml`.
    pub(crate) fn agent(&self, name: &str, yaml: &str) -> PathBuf {
        let dir = self.agents().join(name);
        std::fs::create_dir_all(&dir).expect("agent dir");
        let file = dir.join("agent.yaml");
        std::fs::write(&file, yaml).expect("write agent.yaml");
        file
    }

    /// Writes a ledger database into `agents/<name>/ledger.db`.
    pub(crate) fn ledger(&self, name: &str) {
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
    pub(crate) fn serve(&self, env: &[(&str, &str)]) -> Served {
        Served::start(&[self.agents()], &self.data(), env)
    }

    /// Runs the binary to the end with these arguments.
    pub(crate) fn consort(&self, args: &[&str]) -> Output {
        consort(args)
    }

    /// `jobs list --data <data> --json`.
    pub(crate) fn jobs(&self) -> Vec<Value> {
        let out = consort(&[
            "jobs",
            "list",
            "--data",
            path_str(&self.data()),
            "--limit",
            "1000",
            "--json",
        ]);
        assert!(out.status.success(), "jobs list failed: {}", stderr(&out));
        let page: Value = serde_json::from_slice(&out.stdout).expect("jobs json");
        page["runs"].as_array().cloned().expect("a page of runs")
    }

    pub(crate) fn events(&self, run: &str) -> Vec<Value> {
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

pub(crate) fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

pub(crate) fn consort(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CONSORT_AT")
        .env_remove("CONSORT_FAULT")
        .output()
        .expect("run consort")
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `consort dev` process serving on loopback; killed when dropped.
pub(crate) struct Served {
    pub child: Child,
    pub url: String,
    lines: mpsc::Receiver<String>,
    /// Lines written before the serving line (an agent failing as it resumes its runs can
    /// log before the API is up): read first by `wait_for_line` and `stderr_lines`.
    early: std::collections::VecDeque<String>,
}

impl Served {
    pub(crate) fn start(dirs: &[PathBuf], data: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_with(dirs, data, env, &[])
    }

    /// As [`Served::start`], with extra `consort dev` arguments (e.g. `--auth FILE`).
    pub(crate) fn start_with(
        dirs: &[PathBuf],
        data: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Self {
        Self::start_listening(dirs, data, env, args, "127.0.0.1:0")
    }

    /// As [`Served::start_with`], on the address `listen` (to restart a host where its
    /// clients expect it).
    pub(crate) fn start_listening(
        dirs: &[PathBuf],
        data: &Path,
        env: &[(&str, &str)],
        args: &[&str],
        listen: &str,
    ) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.arg("dev");
        for d in dirs {
            cmd.arg(d);
        }
        cmd.args(args);
        cmd.args(["--data", path_str(data), "--listen", listen])
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
        let mut served = Self {
            child,
            url: String::new(),
            lines: rx,
            early: std::collections::VecDeque::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let line = loop {
            let left = deadline
                .checked_duration_since(Instant::now())
                .expect("consort dev did not report its URL");
            let line = served
                .lines
                .recv_timeout(left)
                .expect("consort dev did not report its URL");
            if line.contains("consort: serving") {
                break line;
            }
            served.early.push_back(line);
        };
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("url in the serving line")
            .to_owned();
        served.url = url;
        served
    }

    /// Waits for a stderr line containing `needle`.
    pub(crate) fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        while let Some(line) = self.early.pop_front() {
            if line.contains(needle) {
                return Some(line);
            }
        }
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

    /// The stderr lines the host wrote since the last read (waits up to `settle` for more).
    pub(crate) fn stderr_lines(&mut self, settle: Duration) -> Vec<String> {
        let mut lines: Vec<String> = self.early.drain(..).collect();
        while let Ok(line) = self.lines.recv_timeout(settle) {
            lines.push(line);
        }
        lines
    }

    /// Runs a CLI command against this host (`--at URL` appended).
    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--at", &self.url]);
        consort(&all)
    }

    /// `consort run AGENT INPUT --wait --json` against this host.
    pub(crate) fn run_wait(&self, agent: &str, input: &str) -> Value {
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
    pub(crate) fn show(&self, id: &str) -> Option<Value> {
        let out = self.cli(&["runs", "show", id, "--json"]);
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Polls until run `id` has `status`; returns `{run, events}`.
    pub(crate) fn wait_status(&self, id: &str, status: &str) -> Value {
        eventually(
            &format!("run {id} to be {status}"),
            Duration::from_secs(30),
            || self.show(id).filter(|v| v["run"]["status"] == status),
        )
    }

    /// Polls, with `token`, until run `id` has `status`; returns the run.
    pub(crate) fn wait_status_with(&self, id: &str, status: &str, token: &str) -> Value {
        eventually(
            &format!("run {id} to be {status}"),
            Duration::from_secs(30),
            || {
                let out = self.cli(&["runs", "show", id, "--json", "--token", token]);
                let shown: Value = serde_json::from_slice(&out.stdout).ok()?;
                (shown["run"]["status"] == status).then(|| shown["run"].clone())
            },
        )
    }

    pub(crate) fn http(&self) -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("http client")
    }

    /// SIGKILL, no cleanup: what a crash looks like.
    pub(crate) fn kill(mut self) {
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
pub(crate) fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
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
pub(crate) fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect()
}

/// Runs of one agent from a jobs listing.
pub(crate) fn runs_of<'a>(jobs: &'a [Value], agent: &str) -> Vec<&'a Value> {
    jobs.iter().filter(|r| r["agent"] == agent).collect()
}

impl Served {
    /// Waits (bounded) for a host started with `CONSORT_FAULT=<point>` to reach that fault
    /// point and die there on its own (an abort, as a crash would); returns how it ended.
    pub(crate) fn wait_for_crash(
        &mut self,
        point: &str,
        timeout: Duration,
    ) -> std::process::ExitStatus {
        let marker = format!("consort: fault point {point} reached");
        self.wait_for_line(&marker, timeout)
            .unwrap_or_else(|| panic!("the host never reached fault point {point}"));
        eventually(&format!("the host to die at {point}"), timeout, || {
            self.child.try_wait().ok().flatten()
        })
    }
}

/// A free UDP port on loopback (for a host's link address in a generated fleet.yaml).
pub(crate) fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|socket| socket.local_addr())
        .expect("a free loopback UDP port")
        .port()
}

/// One `consort serve` process of a [`ServeFleet`].
pub(crate) struct ServeHost {
    pub name: String,
    pub child: Option<Child>,
    pub data: PathBuf,
    pub stderr: PathBuf,
    pub url: String,
}

/// A fleet of `consort serve` processes on loopback: keys made by `consort keygen`, a
/// generated fleet.yaml, one data folder per host that survives restarts. Every process is
/// killed when the fleet is dropped.
pub(crate) struct ServeFleet {
    pub dir: tempfile::TempDir,
    pub hosts: Vec<ServeHost>,
    pub http: reqwest::blocking::Client,
}

impl ServeFleet {
    /// The marketing-finance example: cmo on `alpha`, cfo on `beta`. `edit` may change the
    /// copied agent folders before the fleet starts.
    pub(crate) fn example(edit: impl FnOnce(&Path)) -> Self {
        Self::example_with_operators(edit, &[])
    }

    /// As [`ServeFleet::example`], with `operators` listed under `operators:` in fleet.yaml
    /// (their keys made by `consort keygen` as `keys/<name>.key`).
    pub(crate) fn example_with_operators(edit: impl FnOnce(&Path), operators: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/marketing-finance");
        for agent in ["cmo", "cfo"] {
            let to = dir.path().join("agents").join(agent);
            std::fs::create_dir_all(&to).expect("agent dir");
            for entry in std::fs::read_dir(example.join(agent)).expect("example folder") {
                let entry = entry.expect("example entry");
                std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy example");
            }
        }
        edit(dir.path());
        Self::new_with_operators(dir, &[("alpha", &["cmo"]), ("beta", &["cfo"])], operators)
    }

    /// A fleet of `hosts` (name, agent folders under `agents/` of `dir`).
    pub(crate) fn new(dir: tempfile::TempDir, hosts: &[(&str, &[&str])]) -> Self {
        Self::new_with_operators(dir, hosts, &[])
    }

    /// As [`ServeFleet::new`], with `operators` (see [`ServeFleet::example_with_operators`]).
    pub(crate) fn new_with_operators(
        dir: tempfile::TempDir,
        hosts: &[(&str, &[&str])],
        operators: &[&str],
    ) -> Self {
        let keygen = |name: &str| {
            let out = Command::new(BIN)
                .args(["keygen", "--out"])
                .arg(dir.path().join("keys"))
                .args(["--name", name])
                .output()
                .expect("run keygen");
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let mut yaml = String::from("hosts:\n");
        for (name, agents) in hosts {
            let public = keygen(name);
            let list: Vec<String> = agents.iter().map(|a| format!("agents/{a}")).collect();
            yaml.push_str(&format!(
                "  - name: {name}\n    address: 127.0.0.1:{}\n    public_key: \"{public}\"\n    agents: [{}]\n",
                free_udp_port(),
                list.join(", ")
            ));
        }
        if !operators.is_empty() {
            yaml.push_str("operators:\n");
            for name in operators {
                let public = keygen(name);
                yaml.push_str(&format!("  - name: {name}\n    public_key: \"{public}\"\n"));
            }
        }
        std::fs::write(dir.path().join("fleet.yaml"), yaml).expect("write fleet.yaml");
        let hosts = hosts
            .iter()
            .map(|(name, _)| ServeHost {
                name: name.to_string(),
                child: None,
                data: dir.path().join("data").join(name),
                stderr: dir.path().join(format!("{name}.stderr")),
                url: String::new(),
            })
            .collect();
        Self {
            dir,
            hosts,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
        }
    }

    fn index(&self, host: &str) -> usize {
        self.hosts
            .iter()
            .position(|h| h.name == host)
            .unwrap_or_else(|| panic!("no host {host}"))
    }

    /// Starts `host` on its data folder and waits until it serves.
    pub(crate) fn start(&mut self, host: &str) {
        self.start_with_env(host, &[]);
    }

    /// As [`ServeFleet::start`], with extra environment (e.g. `CONSORT_FAULT`).
    pub(crate) fn start_with_env(&mut self, host: &str, env: &[(&str, &str)]) {
        self.start_with_args(host, env, &[]);
    }

    /// As [`ServeFleet::start_with_env`], with extra `consort serve` arguments.
    pub(crate) fn start_with_args(&mut self, host: &str, env: &[(&str, &str)], args: &[&str]) {
        let fleet_file = self.dir.path().join("fleet.yaml");
        let i = self.index(host);
        let h = &mut self.hosts[i];
        let _ = std::fs::remove_file(h.data.join("serve.json"));
        // Append, so a restarted host's log follows the previous one.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&h.stderr)
            .expect("stderr file");
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--fleet")
            .arg(&fleet_file)
            .args(["--host", host, "--data"])
            .arg(&h.data)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("CONSORT_FAULT")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn consort serve");
        let pid = u64::from(child.id());
        h.child = Some(child);
        let note = h.data.join("serve.json");
        h.url = eventually("serve.json", Duration::from_secs(30), || {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&note).ok()?).ok()?;
            (v["pid"].as_u64() == Some(pid)).then(|| v["url"].as_str().map(str::to_owned))?
        });
    }

    /// Stops `host` with SIGTERM (an operator's stop) and waits for it to exit.
    pub(crate) fn terminate(&mut self, host: &str) {
        let i = self.index(host);
        if let Some(mut child) = self.hosts[i].child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("run kill");
            assert!(status.success());
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if child.try_wait().expect("wait for serve").is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{host} did not exit within 10 s of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// SIGKILL: what a crash looks like.
    pub(crate) fn kill(&mut self, host: &str) {
        let i = self.index(host);
        if let Some(mut child) = self.hosts[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `consort fleet ARGS --fleet fleet.yaml --key keys/<operator>.key`, run to the end.
    pub(crate) fn fleet_cli(&self, operator: &str, args: &[&str]) -> Output {
        let fleet_file = self.dir.path().join("fleet.yaml");
        let key = self.dir.path().join("keys").join(format!("{operator}.key"));
        let mut all: Vec<&str> = vec!["fleet"];
        all.extend_from_slice(args);
        all.extend(["--fleet", path_str(&fleet_file), "--key", path_str(&key)]);
        consort(&all)
    }

    pub(crate) fn url(&self, host: &str) -> &str {
        &self.hosts[self.index(host)].url
    }

    pub(crate) fn host_stderr(&self, host: &str) -> String {
        std::fs::read_to_string(&self.hosts[self.index(host)].stderr).unwrap_or_default()
    }

    /// `POST /runs` on `host`; the new run's id.
    pub(crate) fn start_run(&self, host: &str, agent: &str, input: &str) -> String {
        let r: Value = self
            .http
            .post(format!("{}/runs", self.url(host)))
            .json(&serde_json::json!({"agent": agent, "input": input}))
            .send()
            .expect("POST /runs")
            .json()
            .expect("run json");
        r["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no run id: {r}"))
            .to_owned()
    }

    /// `GET /runs/{id}` on `host`, if it answers.
    pub(crate) fn run(&self, host: &str, id: &str) -> Option<Value> {
        self.http
            .get(format!("{}/runs/{id}", self.url(host)))
            .send()
            .ok()?
            .json()
            .ok()
    }

    /// Waits (at most `bound`) for a run to settle.
    pub(crate) fn wait_settled(&self, host: &str, id: &str, bound: Duration) -> Value {
        eventually("the run to settle", bound, || {
            self.run(host, id)
                .filter(|r| matches!(r["status"].as_str(), Some("succeeded" | "failed")))
        })
    }

    /// `GET /jobs` on `host`.
    pub(crate) fn jobs_of(&self, host: &str) -> Vec<Value> {
        self.http
            .get(format!("{}/jobs?limit=1000", self.url(host)))
            .send()
            .ok()
            .and_then(|r| r.json::<Value>().ok())
            .and_then(|v| v["runs"].as_array().cloned())
            .unwrap_or_default()
    }

    /// `GET /runs/{id}/events` on `host`.
    pub(crate) fn events_of(&self, host: &str, id: &str) -> Vec<Value> {
        self.http
            .get(format!("{}/runs/{id}/events?limit=1000", self.url(host)))
            .send()
            .ok()
            .and_then(|r| r.json::<Value>().ok())
            .and_then(|v| v["events"].as_array().cloned())
            .unwrap_or_default()
    }
}

impl Drop for ServeFleet {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            if let Some(mut child) = h.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl ServeFleet {
    /// Waits (bounded) for `host`'s process to end on its own (a fault point's abort).
    pub(crate) fn wait_exit(&mut self, host: &str, bound: Duration) {
        let i = self.index(host);
        let child = self.hosts[i].child.as_mut().expect("host is running");
        eventually(&format!("{host} to exit"), bound, || {
            child.try_wait().ok().flatten()
        });
        self.hosts[i].child = None;
    }
}

/// A cfo whose ledger tool waits for an operator's approval (`approval: required`).
pub(crate) const GATED_CFO: &str = r#"
name: cfo
description: finance
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = :input"}
    - answer: "{tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: required}
"#;

/// Whether python3 can import `module`. Where it cannot, a test skips with `install` as the
/// way to get it, unless `required_by` (an environment variable `.ci/run` sets to `required`)
/// says it must run: then this fails.
pub(crate) fn python_module(module: &str, required_by: &str, install: &str) -> bool {
    let available = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        assert_ne!(
            std::env::var(required_by).as_deref(),
            Ok("required"),
            "python3 cannot import {module}, which {required_by} says is required here"
        );
        eprintln!("skipped: `{install}` to run this test");
    }
    available
}

/// The interpreter `python3` names, by its full path: a program the host starts (an MCP
/// server) gets a cleared environment, so nothing may depend on a shell's `PATH`.
pub(crate) fn python_executable() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    String::from_utf8(out.stdout)
        .expect("a UTF-8 path")
        .trim()
        .to_owned()
}
