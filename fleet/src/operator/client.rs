//! The operator's side of fleet commands: [`FleetOperator`].
//!
//! It reads who the operator is from fleet.yaml (the `operators:` entry whose key is the
//! operator's key) and where each host is and which key it must present, signs one request
//! per host (each with its own nonce, for that host only) and sends them in parallel over a
//! client-only [`OperatorLink`]. Every host gets an answer in the result: the command's answer,
//! the host's typed refusal or failure, or why it could not be reached. It decides nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use consort_config::FleetConfig;
use consort_net::{
    Frame, HostKey, LinkConfig, OperatorAnswer, OperatorCommand, OperatorLink, OperatorRequest,
    PublicKey, sign_operator_request,
};

use crate::FleetError;

/// One host of the fleet as an operator dials it.
#[derive(Clone, Debug)]
struct Target {
    name: String,
    address: SocketAddr,
    key: PublicKey,
}

/// An operator of a fleet, ready to send commands to its hosts.
pub struct FleetOperator {
    name: String,
    /// The fleet.yaml file, for errors.
    file: String,
    key: HostKey,
    targets: Vec<Target>,
    link: Arc<OperatorLink>,
}

/// What one host answered (or why it did not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostAnswer {
    /// The host.
    pub host: String,
    /// True when the command ran and `answer` holds its answer.
    pub ok: bool,
    /// The command's answer (see the answer types of this module).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
    /// Why there is no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<OperatorFailure>,
}

/// Why a host gave no answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorFailure {
    /// `unreachable` (the link could not carry the request), `refused` (the host refused the
    /// request before running it), `failed` (the command ran and failed) or `bad_answer`.
    pub kind: String,
    /// A stable code: the refusal's (`bad_signature`, `expired`, `replayed`, ...), the
    /// command's (`unknown_agent`, `not_awaiting_approval`, `draining`, ...), or the kind.
    pub code: String,
    /// What happened, for the operator.
    pub message: String,
}

impl FleetOperator {
    /// The operator whose key is `key` in `fleet`, with `link`'s dial and request timeouts.
    /// Refuses a key fleet.yaml does not list under `operators:` (no host would accept it).
    pub fn new(fleet: &FleetConfig, key: HostKey, link: LinkConfig) -> Result<Self, FleetError> {
        let public = key.public();
        let Some(operator) = fleet
            .operators
            .iter()
            .find(|o| o.public_key == public.to_bytes())
        else {
            return Err(FleetError::NotAnOperator {
                key: public.to_string(),
                file: fleet.file.display().to_string(),
            });
        };
        let targets = fleet
            .hosts
            .iter()
            .map(|h| {
                let key =
                    PublicKey::from_bytes(&h.public_key).ok_or_else(|| FleetError::BadPin {
                        host: h.name.clone(),
                        file: fleet.file.display().to_string(),
                    })?;
                Ok(Target {
                    name: h.name.clone(),
                    address: h.address,
                    key,
                })
            })
            .collect::<Result<Vec<_>, FleetError>>()?;
        let link =
            OperatorLink::new(&operator.name, &key, link).map_err(consort_net::NetError::from)?;
        Ok(Self {
            name: operator.name.clone(),
            file: fleet.file.display().to_string(),
            key,
            targets,
            link: Arc::new(link),
        })
    }

    /// The operator's name in fleet.yaml.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `command` to every host of the fleet, or only to those in `only` (each must be a
    /// host of the fleet), all at once; one answer per host, in fleet.yaml's order.
    pub async fn send(
        &self,
        command: &OperatorCommand,
        only: &[String],
    ) -> Result<Vec<HostAnswer>, FleetError> {
        if let Some(unknown) = only
            .iter()
            .find(|name| !self.targets.iter().any(|t| &t.name == *name))
        {
            return Err(FleetError::UnknownHost {
                host: unknown.clone(),
                file: self.file.clone(),
                known: self
                    .targets
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (index, target) in self
            .targets
            .iter()
            .filter(|t| only.is_empty() || only.contains(&t.name))
            .enumerate()
        {
            let mut request =
                OperatorRequest::new(&self.name, &target.name, command.clone(), now_ms());
            sign_operator_request(&mut request, &self.key);
            let link = self.link.clone();
            let target = target.clone();
            tasks.spawn(async move {
                let answered = link
                    .request(
                        &target.name,
                        target.address,
                        target.key,
                        &Frame::OperatorRequest(request),
                    )
                    .await;
                (index, host_answer(&target.name, answered))
            });
        }
        let mut answers = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(answer) => answers.push(answer),
                Err(error) => {
                    return Err(FleetError::BadResponse {
                        url: "the fleet's links".into(),
                        detail: format!("a request task did not finish: {error}"),
                    });
                }
            }
        }
        answers.sort_by_key(|(index, _)| *index);
        Ok(answers.into_iter().map(|(_, answer)| answer).collect())
    }

    /// Lets hosts see the connections end (at most the link's shutdown grace).
    pub async fn close(&self) {
        self.link.close().await;
    }
}

impl HostAnswer {
    /// Whether the host answered that it does not hold what the command names: an agent it
    /// does not serve (`restart`, `jobs --agent`) or a run it does not store (`approve`).
    pub fn not_here(&self) -> bool {
        self.error.as_ref().is_some_and(|e| {
            e.kind == "failed" && matches!(e.code.as_str(), "unknown_agent" | "unknown_run")
        })
    }
}

/// Whether a command sent to several hosts succeeded: every host answered, except that for a
/// command naming one agent or run (`restart`, `approve`, `jobs --agent`), sent to hosts that
/// do not hold it, those hosts' [`HostAnswer::not_here`] is no failure as long as some host
/// did answer.
pub fn all_answered(command: &OperatorCommand, answers: &[HostAnswer]) -> bool {
    let names_one_thing = matches!(
        command,
        OperatorCommand::Restart { .. }
            | OperatorCommand::Decide { .. }
            | OperatorCommand::Jobs { agent: Some(_), .. }
    );
    if names_one_thing {
        answers.iter().any(|a| a.ok) && answers.iter().all(|a| a.ok || a.not_here())
    } else {
        answers.iter().all(|a| a.ok)
    }
}

/// One host's outcome, from what its link brought back.
fn host_answer(host: &str, answered: Result<Frame, consort_net::LinkError>) -> HostAnswer {
    let failure = |kind: &str, code: &str, message: String| HostAnswer {
        host: host.to_owned(),
        ok: false,
        answer: None,
        error: Some(OperatorFailure {
            kind: kind.to_owned(),
            code: code.to_owned(),
            message,
        }),
    };
    match answered {
        Err(error) => failure("unreachable", "unreachable", error.to_string()),
        Ok(Frame::OperatorAnswer(OperatorAnswer::Done { json })) => {
            match serde_json::from_str(&json) {
                Ok(answer) => HostAnswer {
                    host: host.to_owned(),
                    ok: true,
                    answer: Some(answer),
                    error: None,
                },
                Err(e) => failure("bad_answer", "bad_answer", format!("not JSON: {e}")),
            }
        }
        Ok(Frame::OperatorAnswer(OperatorAnswer::Failed { code, message })) => {
            failure("failed", &code, message)
        }
        Ok(Frame::OperatorAnswer(OperatorAnswer::Refused(refusal))) => {
            failure("refused", refusal.code(), refusal.to_string())
        }
        Ok(Frame::Refused { text, .. }) => failure("refused", "refused", text),
        Ok(other) => failure(
            "bad_answer",
            "bad_answer",
            format!("the host answered with a {} frame", other.kind()),
        ),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use consort_net::{LinkError, OperatorRefusal, RunId};

    fn answered(host: &str, frame: Frame) -> HostAnswer {
        host_answer(host, Ok(frame))
    }

    fn done(host: &str) -> HostAnswer {
        answered(
            host,
            Frame::OperatorAnswer(OperatorAnswer::Done {
                json: "{\"draining\":true}".into(),
            }),
        )
    }

    fn failed(host: &str, code: &str) -> HostAnswer {
        answered(
            host,
            Frame::OperatorAnswer(OperatorAnswer::Failed {
                code: code.into(),
                message: "no".into(),
            }),
        )
    }

    #[test]
    fn each_outcome_is_named() {
        let ok = done("alpha");
        assert!(ok.ok && ok.error.is_none());
        assert_eq!(ok.answer, Some(serde_json::json!({"draining": true})));
        let refused = answered(
            "beta",
            Frame::OperatorAnswer(OperatorAnswer::Refused(OperatorRefusal::Replayed)),
        );
        let error = refused.error.unwrap();
        assert_eq!(
            (error.kind.as_str(), error.code.as_str()),
            ("refused", "replayed")
        );
        let down = host_answer(
            "beta",
            Err(LinkError::Unreachable {
                host: "beta".into(),
                reason: "no answer".into(),
            }),
        );
        assert_eq!(down.error.unwrap().kind, "unreachable");
        let odd = answered("beta", Frame::Ack);
        assert_eq!(odd.error.unwrap().kind, "bad_answer");
        let garbage = answered(
            "beta",
            Frame::OperatorAnswer(OperatorAnswer::Done { json: "{".into() }),
        );
        assert_eq!(garbage.error.unwrap().kind, "bad_answer");
    }

    #[test]
    fn a_host_without_the_named_agent_or_run_fails_nothing_when_another_answered() {
        let restart = OperatorCommand::Restart {
            agent: "cfo".into(),
        };
        let decide = OperatorCommand::Decide {
            run: RunId::random(),
            approve: true,
        };
        let by_agent = OperatorCommand::Jobs {
            agent: Some("cfo".into()),
            limit: 10,
            cursor: None,
        };
        for command in [&restart, &decide, &by_agent] {
            let code = if matches!(command, OperatorCommand::Decide { .. }) {
                "unknown_run"
            } else {
                "unknown_agent"
            };
            assert!(all_answered(
                command,
                &[failed("alpha", code), done("beta")]
            ));
            assert!(!all_answered(
                command,
                &[failed("alpha", code), failed("beta", code)]
            ));
            assert!(!all_answered(
                command,
                &[failed("alpha", "internal"), done("beta")]
            ));
        }
        // Commands for every host need every host.
        for command in [
            OperatorCommand::Status,
            OperatorCommand::Drain,
            OperatorCommand::Reload,
            OperatorCommand::Jobs {
                agent: None,
                limit: 10,
                cursor: None,
            },
        ] {
            assert!(all_answered(&command, &[done("alpha"), done("beta")]));
            assert!(!all_answered(
                &command,
                &[done("alpha"), failed("beta", "unknown_agent")]
            ));
        }
        assert!(!failed("a", "unknown_agent").ok);
        assert!(failed("a", "unknown_agent").not_here());
        assert!(!failed("a", "draining").not_here());
    }
}
