//! A reload changes the model an agent.yaml declares: edit `model: script:` while `consort dev`
//! serves the agent, and the next run plays the new script, whether the file watcher or
//! `consort reload` picked the edit up. A model an embedding app set in code is the app's: a
//! reload of the agent's yaml keeps it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use consort::{
    AgentSet, Channel, Host, HostSpec, Model, ModelFuture, ModelReply, ModelRequest, ModelStep,
};
use support::{Fleet, stderr, stdout};

fn scripted(answer: &str) -> String {
    format!("name: echo\ndescription: answers\nmodel:\n  script:\n    - answer: \"{answer}\"\n")
}

const WAIT: Duration = Duration::from_secs(30);

/// Replaces `file` with `text` in one rename, keeping its modification time: the watcher,
/// which compares modification times, cannot see this edit; only `consort reload` can.
fn replace_unseen(file: &std::path::Path, text: &str) {
    let stamp = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .expect("mtime");
    let tmp = file.with_extension("yaml.new");
    std::fs::write(&tmp, text).expect("write new agent.yaml");
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .and_then(|f| f.set_modified(stamp))
        .expect("keep the mtime");
    std::fs::rename(&tmp, file).expect("rename over agent.yaml");
}

#[test]
fn the_watcher_picks_up_a_new_script_and_the_next_run_plays_it() {
    let fleet = Fleet::new();
    let file = fleet.agent("echo", &scripted("old script"));
    let mut host = fleet.serve(&[]);
    assert_eq!(host.run_wait("echo", "one")["output"], "old script");

    std::fs::write(&file, scripted("new script")).expect("edit agent.yaml");
    host.wait_for_line("agent.yaml re-read: new config in force", WAIT)
        .expect("the watcher re-read agent.yaml");

    let run = host.run_wait("echo", "two");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "new script", "{run}");
}

#[test]
fn consort_reload_picks_up_a_new_script_and_the_next_run_plays_it() {
    let fleet = Fleet::new();
    let file = fleet.agent("echo", &scripted("old script"));
    let host = fleet.serve(&[]);
    assert_eq!(host.run_wait("echo", "one")["output"], "old script");

    replace_unseen(&file, &scripted("new script"));
    let reload = host.cli(&["reload"]);
    assert!(reload.status.success(), "{}", stderr(&reload));
    assert!(
        stdout(&reload).contains("echo"),
        "reload reports the changed agent: {}",
        stdout(&reload)
    );

    let run = host.run_wait("echo", "two");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], "new script", "{run}");
}

/// An embedding app's model: always the same answer.
struct FromCode;

impl Model for FromCode {
    fn respond<'a>(&'a self, _request: ModelRequest<'a>) -> ModelFuture<'a> {
        Box::pin(async { Ok(ModelReply::new(ModelStep::Answer("from code".into()))) })
    }
}

#[tokio::test]
async fn a_reload_keeps_a_model_set_in_code() {
    let fleet = Fleet::new();
    let file = fleet.agent("echo", &scripted("old script"));
    let agents = AgentSet::load(&[fleet.agents()]).expect("agents");
    let spec = HostSpec::builder(agents, fleet.data())
        .watch_config(None)
        .model("echo", Arc::new(FromCode) as Arc<dyn Model>)
        .build();
    let (host, _join) = Host::spawn(spec).await.expect("host");

    let ask = async |input: &str| {
        let run = host
            .start_run("echo", input, Channel::Api)
            .await
            .expect("start");
        host.wait(&run.id, WAIT).await.expect("wait")
    };
    assert_eq!(ask("one").await.output.as_deref(), Some("from code"));

    std::fs::write(&file, scripted("new script")).expect("edit agent.yaml");
    let reloaded = host.reload().await.expect("reload");
    assert_eq!(reloaded.changed, vec!["echo".to_owned()]);
    assert!(reloaded.revived.is_empty(), "{reloaded:?}");
    assert_eq!(ask("two").await.output.as_deref(), Some("from code"));
    host.stop();
}
