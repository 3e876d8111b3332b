//! `GET /metrics` end to end: real `consort serve` and `consort dev` processes, real calls
//! (one accepted across hosts, one refused by the callee's host), then a scrape of each host's
//! Prometheus page, read the way Prometheus reads it (name, labels, value). Every wait polls a
//! condition with a bound.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use support::{Fleet, ServeFleet, eventually, path_str};

/// One sample of a scrape: metric name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the Prometheus text format (the subset consort's series use: no escapes in label
/// values, no timestamps).
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line has a value");
            let value: f64 = value.parse().expect("a numeric value");
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels end with }");
                    let labels = body
                        .split("\",")
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (k, v) = pair.split_once("=\"").expect("label k=\"v\"");
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// The value of the series `name` whose labels include every one of `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// `GET /metrics` with an optional bearer token: status, content type, body.
fn scrape(url: &str, token: Option<&str>) -> (u16, String, String) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client");
    let mut request = http.get(format!("{url}/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().expect("GET /metrics");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, content_type, response.text().expect("body"))
}

const OPS: &str = "dev-token-ops";

/// The example's cmo and cfo, plus `rogue`, which may call the cfo (its own `can_call` says
/// so) but which the cfo does not accept: its call is refused by the cfo's host.
fn example_with_rogue(dir: &Path) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/marketing-finance");
    for agent in ["cmo", "cfo"] {
        let to = dir.join("agents").join(agent);
        std::fs::create_dir_all(&to).expect("agent dir");
        for entry in std::fs::read_dir(example.join(agent)).expect("example folder") {
            let entry = entry.expect("example entry");
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy example");
        }
    }
    std::fs::copy(example.join("host-auth.yaml"), dir.join("host-auth.yaml"))
        .expect("copy auth file");
    let rogue = dir.join("agents").join("rogue");
    std::fs::create_dir_all(&rogue).expect("rogue dir");
    std::fs::write(
        rogue.join("agent.yaml"),
        "name: rogue\nagents: {can_call: [cfo]}\nmodel:\n  script:\n    - call: [{agent: cfo, input: \"2026-08\"}]\n    - answer: \"rogue heard: {reply.cfo}\"\n",
    )
    .expect("write rogue");
}

#[test]
fn a_two_host_fleet_counts_runs_and_calls_and_shows_link_and_commit_times_to_operators() {
    let dir = tempfile::tempdir().expect("temp dir");
    example_with_rogue(dir.path());
    let auth = dir.path().join("host-auth.yaml");
    let mut fleet = ServeFleet::new(dir, &[("alpha", &["cmo", "rogue"]), ("beta", &["cfo"])]);
    let args = ["--auth", path_str(&auth)];
    fleet.start_with_args("beta", &[], &args);
    fleet.start_with_args("alpha", &[], &args);

    // A call that is accepted (cmo -> cfo, across the link) and one the cfo's host refuses.
    let bound = Duration::from_secs(60);
    let asked = fleet.start_run("alpha", "cmo", "What did we spend in August?");
    let run = fleet.wait_settled("alpha", &asked, bound);
    assert_eq!(run["status"], "succeeded", "{run}");
    let rogue = fleet.start_run("alpha", "rogue", "try the cfo");
    let run = fleet.wait_settled("alpha", &rogue, bound);
    assert!(
        run["output"]
            .as_str()
            .is_some_and(|o| o.contains("does not accept calls from rogue")),
        "{run}"
    );

    // The operator's scrape of alpha: the counters moved, with the right labels.
    let (status, content_type, body) = scrape(fleet.url("alpha"), Some(OPS));
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "text/plain; version=0.0.4");
    let alpha = parse(&body);
    let host = ("host", "alpha");
    for agent in ["cmo", "rogue"] {
        assert_eq!(
            value(
                &alpha,
                "consort_runs_started_total",
                &[host, ("agent", agent), ("channel", "api")]
            ),
            Some(1.0),
            "{body}"
        );
        assert_eq!(
            value(
                &alpha,
                "consort_runs_settled_total",
                &[host, ("agent", agent), ("status", "succeeded")]
            ),
            Some(1.0),
            "{body}"
        );
    }
    assert_eq!(
        value(
            &alpha,
            "consort_calls_placed_total",
            &[host, ("caller", "cmo"), ("callee", "cfo")]
        ),
        Some(1.0),
        "{body}"
    );
    // The refused call was not placed, and is counted under the refusal's stable code.
    assert_eq!(
        value(
            &alpha,
            "consort_calls_placed_total",
            &[host, ("caller", "rogue")]
        ),
        None,
        "{body}"
    );
    assert_eq!(
        value(
            &alpha,
            "consort_calls_refused_total",
            &[host, ("reason", "not_accepted")]
        ),
        Some(1.0),
        "{body}"
    );
    assert!(
        value(&alpha, "consort_store_commit_seconds_count", &[host]).is_some_and(|n| n > 0.0),
        "{body}"
    );
    assert!(
        value(
            &alpha,
            "consort_store_commit_seconds_bucket",
            &[host, ("le", "+Inf")]
        )
        .is_some_and(|n| n > 0.0),
        "{body}"
    );
    assert!(
        value(&alpha, "consort_mailbox_depth", &[host]).is_some(),
        "{body}"
    );

    // The callee's host: the cfo's run came in on an agent channel; the refused call started
    // nothing there.
    let (status, _, body) = scrape(fleet.url("beta"), Some(OPS));
    assert_eq!(status, 200, "{body}");
    let beta = parse(&body);
    assert_eq!(
        value(
            &beta,
            "consort_runs_started_total",
            &[("host", "beta"), ("agent", "cfo"), ("channel", "agent")]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(
            &beta,
            "consort_runs_settled_total",
            &[("host", "beta"), ("agent", "cfo"), ("status", "succeeded")]
        ),
        Some(1.0),
        "{body}"
    );

    // The link's round trip, sampled every few seconds on both ends of the connection.
    for (me, peer) in [("alpha", "beta"), ("beta", "alpha")] {
        let rtt = eventually(
            "the link round trip to be sampled",
            Duration::from_secs(30),
            || {
                let (_, _, body) = scrape(fleet.url(me), Some(OPS));
                value(
                    &parse(&body),
                    "consort_link_rtt_seconds",
                    &[("host", me), ("peer", peer)],
                )
            },
        );
        assert!(rtt > 0.0 && rtt < 5.0, "{me} -> {peer}: {rtt}");
    }

    // Only operators scrape: a token without the operator role is forbidden, no token (even
    // where anonymous callers may start runs) is asked for one.
    let (status, _, body) = scrape(fleet.url("alpha"), Some("dev-token-alice"));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("operator role"), "{body}");
    let (status, _, body) = scrape(fleet.url("alpha"), None);
    assert_eq!(status, 401, "{body}");
    let (status, _, _) = scrape(fleet.url("alpha"), Some("not-a-token"));
    assert_eq!(status, 401);
}

#[test]
fn consort_dev_serves_its_local_operator_and_its_mailboxes_drain_to_zero() {
    let fleet = Fleet::new();
    fleet.agent(
        "a",
        "name: a\nagents: {can_call: [b]}\nlimits: {max_calls_per_run: 1}\nmodel:\n  script:\n    - call: [{agent: b, input: one, count: 2}]\n    - answer: \"a heard: {replies}\"\n",
    );
    fleet.agent(
        "b",
        "name: b\nagents: {accept_from: [a]}\nmodel: {script: [{answer: b answers}]}\n",
    );
    let served = fleet.serve(&[]);
    let run = served.run_wait("a", "go");
    assert_eq!(run["status"], "succeeded", "{run}");

    // No auth file: whoever reaches the loopback API is its operator.
    let (status, content_type, body) = scrape(&served.url, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "text/plain; version=0.0.4");
    let samples = parse(&body);
    let host = ("host", "local");
    assert_eq!(
        value(
            &samples,
            "consort_calls_placed_total",
            &[host, ("caller", "a"), ("callee", "b")]
        ),
        Some(1.0),
        "{body}"
    );
    // The second call of the two is past a's per-run cap of one.
    assert_eq!(
        value(
            &samples,
            "consort_calls_refused_total",
            &[host, ("reason", "call_cap")]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(
            &samples,
            "consort_runs_started_total",
            &[host, ("agent", "b"), ("channel", "agent")]
        ),
        Some(1.0),
        "{body}"
    );
    assert!(
        value(&samples, "consort_store_commit_seconds_count", &[host]).is_some_and(|n| n > 0.0),
        "{body}"
    );

    // Every message sent to an agent is taken: once the host is quiet, nothing is queued.
    eventually(
        "the agents' mailboxes to drain",
        Duration::from_secs(30),
        || {
            let (_, _, body) = scrape(&served.url, None);
            (value(&parse(&body), "consort_mailbox_depth", &[host]) == Some(0.0)).then_some(())
        },
    );
}
