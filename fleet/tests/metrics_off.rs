//! `GET /metrics` on a host started without a metrics recorder (what an embedding app that
//! installs none gets): an in-process `consort dev` host answers its operator 404
//! `metrics_off`, not an empty page a scraper would take for a host with no activity.

use std::time::Duration;

use consort_fleet::dev::{DevHost, DevOptions};

#[tokio::test]
async fn a_host_without_a_recorder_says_its_metrics_are_off() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agents").join("a");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("agent.yaml"),
        "name: a\nmodel: {script: [{answer: hi}]}\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let dev = DevHost::start(DevOptions::new(
        vec![dir.path().join("agents")],
        dir.path().join("data"),
    ))
    .await
    .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let response = http
        .get(format!("http://{}/metrics", dev.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "metrics_off", "{body}");
}
