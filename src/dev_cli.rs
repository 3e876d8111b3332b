//! `consort dev`: serve the agents of some folders on one host in this process, and, with
//! `--ask`, start one run, wait for it and print it with every run it produced (blocked ones
//! say how to approve them). The host is `consort_fleet::dev::DevHost`; this module only
//! assembles its options from the flags and prints.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::json;

use consort_actors::store::Durability;
use consort_actors::visibility::{Identity, Principal};
use consort_actors::{AgentOptions, Channel, RunRecord, RunStatus};
use consort_fleet::HostAuth;
use consort_fleet::dev::{DevHost, DevOptions};
use consort_fleet::listener::HttpBounds;
use consort_net::RunId;

use crate::{DevArgs, metrics_install, output, print_json, print_settled};

pub(crate) async fn dev(args: DevArgs) -> Result<ExitCode> {
    let durability = Durability::parse(&args.durability).ok_or_else(|| {
        anyhow!(
            "--durability must be normal or full, not `{}`",
            args.durability
        )
    })?;
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("creating data folder {}", args.data.display()))?;
    let default_listen: SocketAddr = if args.ask.is_some() {
        SocketAddr::from(([127, 0, 0, 1], 0))
    } else {
        SocketAddr::from(([127, 0, 0, 1], 7400))
    };
    let agent_options = AgentOptions::default().with_durability(durability);
    let auth = args
        .auth
        .as_deref()
        .map(consort_config::HostAuthConfig::load)
        .transpose()?;
    let identity = ask_identity(args.as_principal.as_deref(), auth.as_ref())?;
    let dev = DevHost::start(DevOptions {
        dirs: args.dirs.clone(),
        data_dir: args.data.clone(),
        listen: args.listen.unwrap_or(default_listen),
        agent_options,
        auth,
        allow_hosts: args.allow_hosts.clone(),
        http: HttpBounds::default(),
        metrics: Some(metrics_install::install()?),
        store: consort_fleet::store_backend(
            &consort_config::StoreConfig::Sqlite,
            args.store_url_env.as_deref(),
        )?,
        lease: args.lease.lease(),
    })
    .await?;
    let url = format!("http://{}", dev.addr);
    eprintln!(
        "consort: serving {} on {url} (data in {})",
        dev.host.agents().join(", "),
        args.data.display()
    );

    let Some(ask) = args.ask else {
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = dev.server => {}
        }
        dev.host.stop();
        return Ok(ExitCode::SUCCESS);
    };
    let [agent, input] =
        <[String; 2]>::try_from(ask).map_err(|_| anyhow!("--ask takes AGENT INPUT"))?;
    if !dev.host.agents().contains(&agent) {
        bail!(
            "no agent named `{agent}` is served (agents: {})",
            dev.host.agents().join(", ")
        );
    }
    let started = dev
        .host
        .start_run_as(&agent, &input, Channel::Cli, identity)
        .await?;
    let mut notices = dev.host.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut told_blocked = std::collections::BTreeSet::new();
    let run = loop {
        let run = dev
            .host
            .wait(&started.id, Duration::from_millis(500))
            .await?;
        if run.status.is_settled() {
            break run;
        }
        for blocked in produced(&dev.host, &started.id)
            .await?
            .into_iter()
            .filter(|r| r.status == RunStatus::Blocked)
        {
            if told_blocked.insert(blocked.id.clone()) {
                eprintln!(
                    "consort: run {} ({}) waits for approval: consort approve {} --at {url}",
                    blocked.id, blocked.agent, blocked.id
                );
            }
        }
        if tokio::time::Instant::now() >= deadline {
            break run;
        }
        while notices.try_recv().is_ok() {}
    };
    let runs = produced(&dev.host, &started.id).await?;
    if args.json {
        print_json(&json!({"run": run, "answer": run.output, "runs": runs}))?;
    } else {
        print_settled(&run);
        println!();
        println!("{}", output::runs_table(&runs));
    }
    dev.host.stop();
    Ok(if run.status == RunStatus::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The identity of `dev --ask --as PRINCIPAL`: a token's principal with its roles in the auth
/// file, or anonymous. An agent never starts a request of its own accord.
fn ask_identity(
    principal: Option<&str>,
    auth: Option<&consort_config::HostAuthConfig>,
) -> Result<Identity> {
    let Some(text) = principal else {
        return Ok(Identity::Absent);
    };
    let principal = Principal::parse(text).context("--as")?;
    if let Principal::Agent(_) = principal {
        bail!("--as: a request comes from api:<token-name> or anonymous, not from an agent");
    }
    let auth = auth.map_or_else(HostAuth::none, HostAuth::new);
    Ok(Identity::from_principal(&principal, auth.grants()))
}

/// Resolves on Ctrl-C or SIGTERM: unsettled runs stay in the stores and resume on restart.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The root run and every run it produced, transitively, oldest first.
async fn produced(host: &consort_actors::Host, root: &RunId) -> Result<Vec<RunRecord>> {
    let all = host.jobs(None).await?;
    let mut ids = vec![root.clone()];
    let mut out: Vec<RunRecord> = Vec::new();
    while let Some(id) = ids.pop() {
        if let Some(run) = all.iter().find(|r| r.id == id) {
            out.push(run.clone());
        }
        ids.extend(
            all.iter()
                .filter(|r| r.parent_run.as_ref() == Some(&id))
                .map(|r| r.id.clone()),
        );
    }
    out.sort_by(|a, b| {
        a.created_at_ms
            .cmp(&b.created_at_ms)
            .then(a.hop_depth.cmp(&b.hop_depth))
    });
    Ok(out)
}
