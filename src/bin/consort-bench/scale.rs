//! `consort-bench agents [N]`: one host serving N idle agents (default 2,000), and what they
//! cost: the host's start time, the process's RSS and open files once it serves, and the ack
//! latency of a call to an agent no call has touched yet (a cold agent), against the targets
//! of a host meant to hold 100,000 agents (start ≤ 2 s, RSS ≤ 1 GiB, ≤ 1,024 open files, cold
//! ack p50 ≤ 5 ms). With RUNS, the agent folders are written once and RUNS hosts start in turn,
//! each on a data folder of its own; each is then started again on its data folder (a restart,
//! which reads the agent set's snapshot instead of every agent.yaml). It times only; it must
//! not be run as a test.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use consort_actors::CallOutcome;
use consort_fleet::dev::{DevHost, DevOptions};

use crate::{envelope, open_files, percentile, proc_status_mb};

/// Cold agents called, one at a time, for the ack latency.
const COLD_CALLS: usize = 200;

/// Writes N idle agents that accept calls from `caller`, and `caller`, which may call them all.
fn write_agents(root: &std::path::Path, n: usize) -> Result<Vec<String>> {
    let width = (n - 1).to_string().len();
    let names: Vec<String> = (0..n).map(|i| format!("a{i:0width$}")).collect();
    let agents = root.join("agents");
    for name in &names {
        let dir = agents.join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("agent.yaml"),
            format!(
                "name: {name}\nagents: {{accept_from: [caller]}}\nmodel: {{script: [{{answer: ok}}]}}\n"
            ),
        )?;
    }
    let dir = agents.join("caller");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "name: caller\nagents: {{can_call: [{}]}}\nmodel: {{script: [{{answer: ok}}]}}\n",
            names.join(", ")
        ),
    )?;
    Ok(names)
}

/// Runs the scale rows for `n` agents under `root`, `runs` times.
pub(crate) async fn scale_bench(root: &std::path::Path, n: usize, runs: usize) -> Result<()> {
    let names = write_agents(root, n)?;
    for run in 1..=runs.max(1) {
        println!("run {run} of {runs}:");
        one_host(root, &names, &root.join(format!("data-{run}"))).await?;
    }
    Ok(())
}

/// Starts one host on `data` serving the agents under `root`, measures it, stops it.
async fn one_host(root: &std::path::Path, names: &[String], data: &std::path::Path) -> Result<()> {
    let n = names.len();
    let baseline_files = open_files();
    let started = Instant::now();
    let host = DevHost::start(DevOptions::new(
        vec![root.join("agents")],
        data.to_path_buf(),
    ))
    .await
    .context("starting the host")?;
    let start = started.elapsed();
    // Let the agents' first reads settle before counting what they hold.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_mb = proc_status_mb("VmRSS:");
    let files = open_files().saturating_sub(baseline_files);

    let inbox = host.host.inbox();
    let step = (names.len() / COLD_CALLS).max(1);
    let mut latencies = Vec::with_capacity(COLD_CALLS);
    for (i, callee) in names.iter().step_by(step).take(COLD_CALLS).enumerate() {
        let began = Instant::now();
        let outcome = inbox
            .place_call(
                envelope("caller", callee, i as u64),
                Duration::from_secs(30),
            )
            .await?;
        latencies.push(began.elapsed());
        if let CallOutcome::Refused(refusal) = outcome {
            anyhow::bail!("a call to {callee} was refused: {refusal}");
        }
    }
    latencies.sort();
    let files_after = open_files().saturating_sub(baseline_files);
    host.host.stop();

    #[allow(clippy::cast_precision_loss)]
    let per_agent_kb = rss_mb as f64 * 1024.0 / n as f64;
    println!("| {n} idle agents on one host | figure | target at 100,000 agents |");
    println!("|---|---:|---:|");
    println!("| start (load, stores, actors, API) | {start:.2?} | ≤ 2 s |");
    println!("| RSS once serving | {rss_mb} MB ({per_agent_kb:.0} KB per agent) | ≤ 1 GiB |");
    println!(
        "| open files once serving | {files} ({:.1} per agent) | ≤ 1,024 |",
        files as f64 / n as f64
    );
    println!(
        "| call to a cold agent, ack p50 / p99 ({} calls) | {:.0} µs / {:.0} µs | p50 ≤ 5 ms |",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    println!("| open files after the calls | {files_after} | ≤ 1,024 |");
    drop(host);
    // Let the stopped host's actors and store connections go before the next one starts.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The same host again on the same data folder: it finds the agent set's snapshot there.
    let started = Instant::now();
    let again = DevHost::start(DevOptions::new(
        vec![root.join("agents")],
        data.to_path_buf(),
    ))
    .await
    .context("restarting the host")?;
    let restart = started.elapsed();
    println!("| restart on the same data folder (agent set snapshot) | {restart:.2?} | ≤ 2 s |");
    again.host.stop();
    drop(again);
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(())
}
