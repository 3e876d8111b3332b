//! Who waits for a verdict of an agent's machine, and what each is told.
//!
//! A request that reaches an agent from outside its mailbox's own flow (a link waiting to hear
//! whether a reply was taken, a starter, a canceler, a decider, a delivery's sender) waits for
//! an answer that reports something durable. The agent actor keeps it as an [`Asker`] in its
//! [`Askers`], under the id the machine hands back with the verdict
//! ([`Command::Answer`](consort_core::machine::Command::Answer)), or hands it to the store job
//! whose commit it waits for (a new run's insert). This module turns a verdict, a stored run or
//! a failure into the asker's answer; it decides nothing about the run (the machine did, and
//! what a delivery's sender reads is consort-core's [`delivery_receipt`]).

use std::collections::HashMap;

use ractor::RpcReplyPort;
use tracing::{info, warn};

use consort_core::directory::{Receipt, delivery_receipt};
use consort_core::machine::AskerId;
use consort_core::step::Verdict;
use consort_net::RunId;

use crate::run::RunRecord;
use crate::{ActorsError, Decided};

/// Someone waiting for a verdict of the agent machine, with what to answer them through.
pub(crate) enum Asker {
    /// A link waiting to hear whether a reply was taken.
    Taken(RpcReplyPort<bool>),
    /// A starter or a canceler, answered with the run as committed.
    Run(RpcReplyPort<Result<RunRecord, ActorsError>>),
    /// A decider, answered with the run as committed and the gate decided.
    Decide(RpcReplyPort<Result<Decided, ActorsError>>),
    /// A delivery's sender, answered with its receipt.
    Receipt {
        port: RpcReplyPort<Receipt>,
        delivery_id: String,
        from: String,
    },
}

impl Asker {
    /// Whether this asker's answer to a verdict carries the run as committed: the driver reads
    /// it before [`Asker::answer`].
    pub(crate) fn wants_record(&self, verdict: &Verdict) -> bool {
        matches!(self, Self::Run(_) | Self::Decide(_))
            && !matches!(verdict, Verdict::Refused(_) | Verdict::Dropped(_))
    }

    /// Answers the asker with its input's verdict on run `run`, now durable; `record` is the
    /// run as committed when [`Asker::wants_record`] asked for it.
    pub(crate) fn answer(
        self,
        run: &RunId,
        verdict: Verdict,
        record: Option<Result<Option<RunRecord>, ActorsError>>,
    ) {
        let unknown = || ActorsError::UnknownRun(run.to_string());
        let stored = |record: Option<Result<Option<RunRecord>, ActorsError>>| match record {
            Some(Ok(Some(record))) => Ok(record),
            Some(Err(e)) => Err(e),
            Some(Ok(None)) | None => Err(unknown()),
        };
        let answered = match self {
            Self::Taken(port) => {
                if let Verdict::Dropped(why) = &verdict {
                    warn!(run_id = %run, "reply dropped: {why}");
                }
                port.send(verdict == Verdict::Taken).is_ok()
            }
            Self::Run(port) => {
                let answer = match verdict {
                    Verdict::Refused(refusal) => Err(ActorsError::Refused(refusal)),
                    Verdict::Dropped(_) => Err(unknown()),
                    _ => stored(record),
                };
                port.send(answer).is_ok()
            }
            Self::Decide(port) => {
                let answer = match verdict {
                    Verdict::Decided { gate, already } => stored(record).map(|run| Decided {
                        run,
                        gate,
                        already_decided: already,
                    }),
                    Verdict::Refused(refusal) => Err(ActorsError::Refused(refusal)),
                    Verdict::Dropped(_) => Err(unknown()),
                    other => Err(ActorsError::Actor(format!(
                        "a decision was answered {other:?}"
                    ))),
                };
                port.send(answer).is_ok()
            }
            Self::Receipt {
                port,
                delivery_id,
                from,
            } => {
                match &verdict {
                    Verdict::Delivered { seq, existing } => {
                        info!(run_id = %run, sender = %from, seq, existing, "message delivered into a run");
                    }
                    Verdict::Refused(refusal) => {
                        info!(run_id = %run, sender = %from, reason = refusal.code(), "delivery refused");
                    }
                    Verdict::Dropped(_) => {}
                    other => {
                        warn!(run_id = %run, "a delivery got an unexpected verdict: {other:?}");
                    }
                }
                port.send(delivery_receipt(&delivery_id, run, &verdict))
                    .is_ok()
            }
        };
        if !answered {
            warn!(run_id = %run, "a requester stopped waiting for its answer");
        }
    }

    /// Answers the starter of a new run (through the API, or a delivery that makes one) once
    /// its insert is committed, or with why it is not there.
    pub(crate) fn started(self, stored: Result<RunRecord, ActorsError>) {
        match (self, stored) {
            (
                Self::Receipt {
                    port, delivery_id, ..
                },
                Ok(record),
            ) => {
                let receipt = Receipt::Enqueued {
                    delivery_id,
                    run: record.id,
                    seq: 1,
                    existing: false,
                };
                if port.send(receipt).is_err() {
                    warn!("a delivery's sender stopped waiting for its receipt");
                }
            }
            (Self::Run(port), Ok(record)) => {
                if port.send(Ok(record)).is_err() {
                    warn!("a run's starter stopped waiting; the run goes on");
                }
            }
            (asker, Ok(record)) => asker.fail(ActorsError::Actor(format!(
                "run {} was started for a requester that asked for something else",
                record.id
            ))),
            (asker, Err(e)) => asker.fail(e),
        }
    }

    /// Answers an asker whose input never reached the machine, or whose run was not stored:
    /// `error` says why.
    pub(crate) fn fail(self, error: ActorsError) {
        let answered = match self {
            Self::Taken(port) => port.send(false).is_ok(),
            Self::Run(port) => port.send(Err(error)).is_ok(),
            Self::Decide(port) => port.send(Err(error)).is_ok(),
            Self::Receipt {
                port, delivery_id, ..
            } => {
                let receipt = match error {
                    ActorsError::Refused(refusal) => Receipt::rejected(&delivery_id, &refusal),
                    error => Receipt::Rejected {
                        delivery_id,
                        code: "not_stored".into(),
                        reason: format!("the message was not stored: {error}"),
                    },
                };
                port.send(receipt).is_ok()
            }
        };
        if !answered {
            warn!("a requester stopped waiting for its answer");
        }
    }
}

/// The askers waiting for the machine, by the id it hands back.
#[derive(Default)]
pub(crate) struct Askers {
    next: AskerId,
    waiting: HashMap<AskerId, Asker>,
}

impl Askers {
    /// Keeps `asker`; returns its id.
    pub(crate) fn add(&mut self, asker: Asker) -> AskerId {
        self.next += 1;
        self.waiting.insert(self.next, asker);
        self.next
    }

    /// The asker kept under `id`, no longer kept.
    pub(crate) fn take(&mut self, id: AskerId) -> Option<Asker> {
        self.waiting.remove(&id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use consort_core::Refusal;
    use ractor::concurrency::oneshot;

    use super::*;
    use crate::run::Channel;
    use crate::store::NewRun;
    use crate::visibility::{Identity, Origin};

    fn record() -> RunRecord {
        let who = (Identity::Absent, Origin::Absent);
        NewRun::root(
            (RunId::random(), "cfo"),
            Channel::Api,
            "August".into(),
            who,
            None,
        )
        .record(1)
    }

    fn receipt_asker() -> (Asker, ractor::concurrency::OneshotReceiver<Receipt>) {
        let (port, answer) = oneshot();
        let asker = Asker::Receipt {
            port: port.into(),
            delivery_id: "d1".into(),
            from: "cmo".into(),
        };
        (asker, answer)
    }

    #[tokio::test]
    async fn a_decider_is_told_the_gate_with_the_run_as_committed() {
        let (port, answer) = oneshot();
        let asker = Asker::Decide(port.into());
        let verdict = Verdict::Decided {
            gate: "g1".into(),
            already: true,
        };
        assert!(asker.wants_record(&verdict));
        let run = record();
        asker.answer(&run.id.clone(), verdict, Some(Ok(Some(run.clone()))));
        let decided = answer.await.expect("answered").expect("decided");
        assert_eq!(
            (decided.gate.as_str(), decided.already_decided),
            ("g1", true)
        );
        assert_eq!(decided.run.id, run.id);
    }

    #[tokio::test]
    async fn a_refused_or_dropped_request_is_told_why_without_reading_the_run() {
        let run = record();
        let (port, answer) = oneshot();
        let asker = Asker::Run(port.into());
        let verdict = Verdict::Refused(Refusal::agent_down("cfo"));
        assert!(!asker.wants_record(&verdict));
        asker.answer(&run.id, verdict, None);
        assert!(matches!(answer.await, Ok(Err(ActorsError::Refused(_)))));

        let (port, answer) = oneshot();
        let asker = Asker::Decide(port.into());
        asker.answer(&run.id, Verdict::Dropped("no such run"), None);
        assert!(matches!(answer.await, Ok(Err(ActorsError::UnknownRun(_)))));
    }

    #[tokio::test]
    async fn a_delivery_refused_before_the_machine_gets_the_refusal_code() {
        let (asker, answer) = receipt_asker();
        asker.fail(ActorsError::Refused(Refusal::agent_down("cfo")));
        match answer.await.expect("answered") {
            Receipt::Rejected {
                delivery_id, code, ..
            } => {
                assert_eq!(delivery_id, "d1");
                assert_eq!(code, Refusal::agent_down("cfo").code());
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        let (asker, answer) = receipt_asker();
        asker.fail(ActorsError::Actor("disk gone".into()));
        assert!(matches!(
            answer.await.expect("answered"),
            Receipt::Rejected { code, .. } if code == "not_stored"
        ));
    }

    #[tokio::test]
    async fn a_new_run_delivery_is_enqueued_once_stored() {
        let (asker, answer) = receipt_asker();
        let run = record();
        asker.started(Ok(run.clone()));
        match answer.await.expect("answered") {
            Receipt::Enqueued {
                run: id,
                seq,
                existing,
                ..
            } => assert_eq!((id, seq, existing), (run.id, 1, false)),
            other => panic!("expected an enqueued receipt, got {other:?}"),
        }
    }
}
