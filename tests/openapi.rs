//! `GET /openapi.json` with the real binary: the document lists every route a host answers and
//! every route the README's table names, each route it lists reaches a handler, and an
//! independent validator accepts it as OpenAPI 3.1.

mod support;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use support::{Fleet, Served, path_str};

const ECHO: &str = "name: echo\nmodel: {script: [{answer: \"echo {input}\"}]}\n";

/// The host, with an auth file that refuses anonymous callers: the description is served even
/// so (it names routes, not data).
fn host() -> (Fleet, Served) {
    let fleet = Fleet::new();
    fleet.agent("echo", ECHO);
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(
        &auth,
        "tokens:\n  - {name: ops, token: tok-ops, roles: [operator]}\nanonymous: refuse\n",
    )
    .unwrap();
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    (fleet, served)
}

fn description(served: &Served) -> Value {
    let resp = served
        .http()
        .get(format!("{}/openapi.json", served.url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    resp.json().unwrap()
}

/// `(METHOD, /path)` of every operation in the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for method in ops.as_object().expect("operations").keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// `(METHOD, /path)` of every row of the README's "HTTP API" table.
fn in_readme() -> BTreeSet<(String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## HTTP API\n")
        .nth(1)
        .expect("an HTTP API section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let mut routes = BTreeSet::new();
    for line in section.lines() {
        // The first cell of a row: one or more `METHOD /path…` in backticks.
        let Some(cell) = line.strip_prefix('|').and_then(|r| r.split('|').next()) else {
            continue;
        };
        for quoted in cell.split('`').skip(1).step_by(2) {
            let Some((method, rest)) = quoted.split_once(' ') else {
                continue;
            };
            if !["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method) {
                continue;
            }
            let path: String = rest.chars().take_while(|c| !"?[ ".contains(*c)).collect();
            routes.insert((method.to_owned(), path));
        }
    }
    routes
}

#[test]
fn the_description_names_every_route_and_each_one_it_names_is_served() {
    let (_fleet, served) = host();
    let doc = description(&served);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let routes = documented(&doc);
    let readme = in_readme();
    assert!(
        readme.len() >= 14,
        "the README's table was read: {readme:?}"
    );
    assert_eq!(
        routes, readme,
        "the description and the README's route table must name the same routes"
    );
    // Each documented route reaches a handler: never the fallback's `not_found`, never 405.
    let run_id = format!("run_{}", "0".repeat(32));
    for (method, path) in &routes {
        let path_here = path.replace("{id}", &run_id).replace("{file}", "app.js");
        let url = format!("{}{path_here}", served.url);
        let req = match method.as_str() {
            "GET" => served.http().get(&url),
            "POST" => served
                .http()
                .post(&url)
                .header("content-type", "application/json")
                .body("{}"),
            other => panic!("unexpected method {other}"),
        };
        let resp = req.bearer_auth("tok-ops").send().unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().unwrap_or(Value::Null);
        assert_ne!(status, 405, "{method} {path}");
        assert_ne!(
            body["error"]["code"], "not_found",
            "{method} {path} is documented but not routed"
        );
    }
    // A route nobody documented is not served either.
    let resp = served
        .http()
        .get(format!("{}/no/such/route", served.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
}

#[test]
fn each_operation_says_what_it_answers_and_how_to_authenticate() {
    let (_fleet, served) = host();
    let doc = description(&served);
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let what = format!("{method} {path}");
            assert!(op["summary"].is_string(), "{what} has no summary");
            let answers = op["responses"].as_object().unwrap();
            assert!(
                answers
                    .keys()
                    .any(|s| s.starts_with('2') || s.starts_with('3')),
                "{what} names no success (or redirect)"
            );
            for (status, answer) in answers {
                assert!(
                    answer["description"].is_string(),
                    "{what} {status} has no description"
                );
            }
        }
    }
    // The live streams are described where their pages are.
    let events = &doc["paths"]["/runs/{id}/events"]["get"];
    assert!(events["responses"]["200"]["content"]["text/event-stream"].is_object());
    let params: Vec<&str> = events["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["id", "after", "limit", "follow"]);
    assert_eq!(
        doc["paths"]["/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/StartRun"
    );
}

/// The document as an independent OpenAPI validator reads it (`openapi-spec-validator`, from
/// PyPI; `.ci/run` installs it and sets `CONSORT_OPENAPI_VALIDATOR=required`).
#[test]
fn an_independent_validator_accepts_the_description() {
    if !support::python_module(
        "openapi_spec_validator",
        "CONSORT_OPENAPI_VALIDATOR",
        "pip install openapi-spec-validator",
    ) {
        return;
    }
    let (fleet, served) = host();
    let doc = description(&served);
    let file = fleet.dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let out = Command::new("python3")
        .args(["-m", "openapi_spec_validator", path_str(&file)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the validator refused the description: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
