//! An agent actor's jobs at the store writer, each carrying a ticket of the agent's machine:
//! an append to a run, a root run's insert, an arriving call's admission.
//!
//! The writer commits one store's jobs in the order they were sent and, after each commit,
//! hands the job's [`Committed`] to the actor's notice (a cast back to the actor), which keeps
//! what the job left and tells the machine. A job whose asker waits for the commit (the
//! starter of a root run, the caller of an accepted call) is answered from the writer thread
//! right after the commit, before the notice: the acknowledgement of a run never reports one a
//! crash could take back.
//!
//! Nothing here decides: the machine ordered the job and decided its gate; the jobs only
//! record, answer and report.

use consort_core::RunView;
use consort_core::machine::{CallAdmitted, CallReservation, InboundGate};
use consort_core::step::CallOutcome;
use consort_core::{Refusal, Transition};
use consort_net::RunId;
use ractor::RpcReplyPort;
use tracing::{Span, info, warn};

use super::{Admission, AgentStore, Applied, Inserted, NewRun, admit_call};
use crate::ActorsError;
use crate::asker::Asker;
use crate::fault::{self, Point};
use crate::run::RunRecord;

/// A job of an agent actor that the store writer has committed (or failed to).
pub(crate) struct Committed {
    /// The job's ticket: every job with a smaller one is committed too.
    pub(crate) ticket: u64,
    /// What the job was and what it found.
    pub(crate) done: Done,
}

/// The outcome of one committed job.
pub(crate) enum Done {
    /// An append to a run, with the log length its view expected after it.
    Appended {
        run: RunId,
        expected_seq: u64,
        result: Result<Box<Applied>, ActorsError>,
    },
    /// A root run's insert (its starter has been answered already; the run has been
    /// stepping since it was sent). A failure is the store's error, as text and whether the
    /// store could not be written at all.
    Started {
        run: RunId,
        stored: Result<(), (String, bool)>,
    },
    /// A call's admission (its caller has been answered already): what admission reserved
    /// for it when it was sent, and what the job found.
    Admitted {
        child: RunId,
        reservation: CallReservation,
        found: CallAdmitted,
        /// The stored run and its first event.
        stored: Option<(Box<RunRecord>, consort_core::RunEvent)>,
    },
}

impl Done {
    /// A root run's insert that failed, as the actor's failure (the run has been stepping on
    /// it, as on an append).
    pub(crate) fn not_started(
        store: &AgentStore,
        run: &RunId,
        (detail, not_writable): (String, bool),
    ) -> ActorsError {
        let (path, detail) = (
            store.path().to_owned(),
            format!("run {run} was not stored: {detail}"),
        );
        if not_writable {
            ActorsError::StoreNotWritable { path, detail }
        } else {
            ActorsError::Commit { path, detail }
        }
    }
}

impl AgentStore {
    /// Appends `transition` (which the machine folded into its view already) to run `run` as
    /// job `ticket`; `notice` gets the stored record back.
    pub(crate) fn append_job(
        &self,
        (run, ticket, expected_seq): (&RunId, u64, u64),
        transition: Transition,
        notice: impl FnOnce(Committed) + Send + 'static,
    ) -> Result<(), ActorsError> {
        let (run, key) = (run.clone(), run.clone());
        self.write_then(
            move |store| store.append(&key, transition),
            move |result| {
                let done = Done::Appended {
                    run,
                    expected_seq,
                    result: result.map(Box::new),
                };
                notice(Committed { ticket, done });
            },
        )
    }

    /// Inserts root run `new` as job `ticket`; `starter` is answered once it is committed, and
    /// `on_stored` runs then (the run's count).
    pub(crate) fn insert_root_job(
        &self,
        (new, ticket): (NewRun, u64),
        starter: Asker,
        on_stored: impl FnOnce() + Send + 'static,
        notice: impl FnOnce(Committed) + Send + 'static,
    ) -> Result<(), ActorsError> {
        let run = new.id.clone();
        self.write_then(
            move |store| store.insert_run(new),
            move |result: Result<Inserted, ActorsError>| {
                let stored = match result {
                    Ok(inserted) => {
                        on_stored();
                        let record = inserted.record().clone();
                        fault::crash_at(Point::RootStored, &record.id);
                        info!(run_id = %record.id, agent = %record.agent, hop_depth = 0, origin = %record.origin, "run started");
                        starter.started(Ok(record));
                        Ok(())
                    }
                    Err(e) => {
                        let failure = (e.to_string(), e.is_store_not_writable());
                        starter.started(Err(e));
                        Err(failure)
                    }
                };
                notice(Committed {
                    ticket,
                    done: Done::Started { run, stored },
                });
            },
        )
    }

    /// Admits call `new` of run `parent` as `gate` decides, as job `ticket` (see
    /// [`admit_call`]); `caller` is answered once the outcome is committed, in `span`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit_job(
        &self,
        (gate, parent, new, ticket): (InboundGate, RunId, NewRun, u64),
        reservation: CallReservation,
        caller: RpcReplyPort<CallOutcome>,
        span: Span,
        notice: impl FnOnce(Committed) + Send + 'static,
    ) -> Result<(), ActorsError> {
        let (child, agent) = (new.id.clone(), new.agent.clone());
        self.write_then(
            move |store| admit_call(store, &gate, &parent, new),
            move |result: Result<Admission, ActorsError>| {
                let _in_span = span.enter();
                let accepted = |existing| CallOutcome::Accepted {
                    child_run: child.clone(),
                    existing,
                };
                let (outcome, found, stored) = match result {
                    Ok(Admission::Replay) => {
                        info!("replayed call finds the existing run");
                        (accepted(true), CallAdmitted::Replay, None)
                    }
                    Ok(Admission::Refused { children, refusal }) => {
                        warn!(reason = refusal.code(), "call refused: {refusal}");
                        let found = CallAdmitted::Refused { children };
                        (CallOutcome::Refused(refusal), found, None)
                    }
                    Ok(Admission::Stored {
                        children_before,
                        record,
                        created,
                    }) => {
                        fault::crash_at(Point::ChildStored, &child);
                        info!("call accepted");
                        let found = CallAdmitted::Stored { children_before };
                        (accepted(false), found, Some((record, created)))
                    }
                    Err(error) => {
                        warn!(%error, "call could not be stored");
                        let outcome = CallOutcome::Refused(Refusal::agent_down(&agent));
                        (outcome, CallAdmitted::Failed, None)
                    }
                };
                if caller.send(outcome).is_err() {
                    warn!(
                        "a caller stopped waiting for a call's answer; a replay will find the run"
                    );
                }
                let done = Done::Admitted {
                    child,
                    reservation,
                    found,
                    stored,
                };
                notice(Committed { ticket, done });
            },
        )
    }

    /// Reads run `id`'s record and log (after the writes sent before it), folded into the
    /// machine's view, or `None` when the store has no such run.
    pub(crate) async fn load(
        &self,
        id: &RunId,
    ) -> Result<Option<(RunRecord, RunView)>, ActorsError> {
        let key = id.clone();
        let loaded = self
            .read(move |store| {
                let Some(record) = store.run(&key)? else {
                    return Ok(None);
                };
                Ok(Some((record, store.events(&key)?)))
            })
            .await?;
        Ok(loaded.map(|(record, events)| {
            let view = RunView::from_events(events.iter().map(|e| &e.event));
            (record, view)
        }))
    }
}
