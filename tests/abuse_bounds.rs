//! Bounds that hold under abuse, against the real binary: one client address cannot hold the
//! connection slots with half-sent requests, one principal cannot start runs without bound,
//! park waits without bound, or take every live-stream slot (an operator's stream is still
//! served). Each bound's default is in docs/SECURITY.md.

mod support;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Fleet, GATED_PAYER, Served, path_str};

const ECHO: &str = "name: echo\nmodel: {script: [{answer: \"echo {input}\"}]}\n";

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: bob, token: tok-bob}
";

fn client_from(address: IpAddr) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .local_address(address)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

#[test]
fn half_open_connections_from_one_address_never_hold_up_another_client() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let served = fleet.serve(&[]);
    let addr = served.url.trim_start_matches("http://").to_owned();
    // 300 requests that never finish their headers, all from 127.0.0.1.
    let mut stalled = Vec::new();
    for _ in 0..300 {
        if let Ok(mut c) = TcpStream::connect(&addr) {
            let _ = c.write_all(b"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            stalled.push(c);
        }
    }
    // A fresh request from another address is answered at once, not after a header timeout.
    let other = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    let began = Instant::now();
    let answered = other
        .get(format!("{}/agents", served.url))
        .send()
        .expect("a fresh request is served");
    assert!(answered.status().is_success(), "{answered:?}");
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "a fresh request waited {took:?}"
    );
    drop(stalled);
}

#[test]
fn one_principal_cannot_start_runs_without_bound() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let served = fleet.serve(&[]);
    let http = served.http();
    let mut created = 0;
    let mut limited = None;
    for i in 0..400 {
        let resp = http
            .post(format!("{}/runs", served.url))
            .json(&json!({"agent": "echo", "input": format!("n{i}")}))
            .send()
            .expect("POST /runs");
        match resp.status().as_u16() {
            201 => created += 1,
            429 => {
                let retry = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                let body: Value = resp.json().unwrap_or(Value::Null);
                if body["error"]["code"] == "too_many_runs" {
                    limited = Some((retry, body));
                    break;
                }
            }
            other => panic!("POST /runs answered {other}"),
        }
    }
    let (retry, body) = limited.expect("a caller that starts runs without pause is slowed down");
    assert!(created >= 200, "the burst is allowed: {created}");
    assert!(
        retry.is_some_and(|s| (1..=60).contains(&s)),
        "{retry:?} {body}"
    );
}

#[test]
fn waits_are_counted_per_principal() {
    let fleet = Fleet::new();
    fleet.agent("payer", GATED_PAYER);
    fleet.ledger("payer");
    let served = fleet.serve(&[]);
    let (_, run) = {
        let resp = served
            .http()
            .post(format!("{}/runs", served.url))
            .json(&json!({"agent": "payer", "input": "acme"}))
            .send()
            .expect("POST /runs");
        (resp.status(), resp.json::<Value>().expect("run"))
    };
    let id = run["id"].as_str().expect("id").to_owned();
    served.wait_status(&id, "blocked");
    let url = format!("{}/runs/{id}?wait_ms=30000", served.url);
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(60))
                    .build()
                    .expect("client")
                    .get(url)
                    .send()
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    // Let the sixteen park, then one more is refused at once.
    std::thread::sleep(Duration::from_millis(500));
    let began = Instant::now();
    let resp = served.http().get(&url).send().expect("GET wait");
    assert_eq!(
        resp.status().as_u16(),
        429,
        "a seventeenth wait of one caller"
    );
    assert!(resp.headers().get("retry-after").is_some());
    assert!(began.elapsed() < Duration::from_secs(5));
    let body: Value = resp.json().expect("json");
    assert_eq!(body["error"]["code"], "too_many_waits", "{body}");
    // The run settles: every parked wait returns, and their counts come back.
    let approve = served
        .http()
        .post(format!("{}/runs/{id}/approve", served.url))
        .json(&json!({"approve": true}))
        .send()
        .expect("approve");
    assert_eq!(approve.status().as_u16(), 200);
    for waiter in waiters {
        assert_eq!(waiter.join().expect("waiter").expect("answered"), 200);
    }
    let again = served.http().get(&url).send().expect("GET");
    assert_eq!(again.status().as_u16(), 200);
}

#[test]
fn one_token_cannot_take_every_stream_and_the_operator_is_still_served() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let file = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&file, AUTH).expect("auth file");
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&file)],
    );
    let follow = |token: &str| {
        served
            .http()
            .get(format!("{}/jobs?follow=1", served.url))
            .bearer_auth(token)
            .send()
            .expect("GET /jobs?follow=1")
    };
    let bobs: Vec<_> = (0..8).map(|_| follow("tok-bob")).collect();
    assert!(bobs.iter().all(|r| r.status().is_success()));
    let ninth = follow("tok-bob");
    assert_eq!(
        ninth.status().as_u16(),
        429,
        "one token holds at most its share"
    );
    let ops = follow("tok-ops");
    assert!(ops.status().is_success(), "the operator's stream is served");
    drop(bobs);
}

fn start_large(served: &Served, count: usize, bytes: usize) -> Vec<String> {
    let http = served.http();
    (0..count)
        .map(|i| {
            let input = format!("{i:04}{}", "x".repeat(bytes));
            let resp = http
                .post(format!("{}/runs", served.url))
                .json(&json!({"agent": "echo", "input": input}))
                .send()
                .expect("POST /runs");
            assert_eq!(resp.status().as_u16(), 201, "run {i}");
            let run: Value = resp.json().expect("run");
            run["id"].as_str().expect("id").to_owned()
        })
        .collect()
}

#[test]
fn a_page_of_large_runs_stays_within_its_byte_bound_and_each_run_reads_whole() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let served = fleet.serve(&[]);
    let ids = start_large(&served, 60, 64 * 1024);
    served.wait_status(ids.last().expect("a run"), "succeeded");
    let body = served
        .http()
        .get(format!("{}/jobs?limit=1000", served.url))
        .send()
        .and_then(|r| r.bytes())
        .expect("GET /jobs");
    // 60 runs of 64 KiB in and out would be about 7.7 MB whole.
    assert!(body.len() < 1024 * 1024, "a page of {} bytes", body.len());
    let page: Value = serde_json::from_slice(&body).expect("page");
    let first = &page["runs"][0];
    let input = first["input"].as_str().expect("input");
    assert!(
        input.contains("bytes in all; GET /runs/"),
        "the cut is marked"
    );
    let id = first["id"].as_str().expect("id");
    let whole: Value = served
        .http()
        .get(format!("{}/runs/{id}", served.url))
        .send()
        .and_then(|r| r.json())
        .expect("GET /runs/{id}");
    assert_eq!(whole["input"].as_str().map(str::len), Some(4 + 64 * 1024));
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn a_follower_that_never_reads_does_not_pin_the_host_s_memory() {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let served = fleet.serve(&[]);
    // Warm the host up, then open a stream and never read from it.
    let warm = start_large(&served, 5, 100 * 1024);
    served.wait_status(warm.last().expect("a run"), "succeeded");
    let before = rss_kib(served.child.id());
    let mut stream = TcpStream::connect(served.url.trim_start_matches("http://")).expect("connect");
    stream
        .write_all(
            format!(
                "GET /jobs?follow=1 HTTP/1.1\r\nHost: {}\r\n\r\n",
                served.url.trim_start_matches("http://")
            )
            .as_bytes(),
        )
        .expect("request");
    let ids = start_large(&served, 150, 200 * 1024);
    served.wait_status(ids.last().expect("a run"), "succeeded");
    let after = rss_kib(served.child.id());
    // With whole records in the feed the host grew by about 150 MB here (150 runs of 200 KB in
    // and out, a notice for each of their changes); with listed records, by about 3 MB.
    let grew = after.saturating_sub(before);
    assert!(
        grew < 64 * 1024,
        "the host grew by {grew} KiB with a follower that never reads"
    );
    drop(stream);
}
