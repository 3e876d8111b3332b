//! An arriving call's admission as one job of the store writer: the replay check, the inbound
//! guards' count of the parent's children and the insert, in the order consort-core's
//! [`InboundGate`] decides, inside one transaction of the writer's batch.
//!
//! This runs on the writer's thread; it decides nothing itself (the gate does) and answers
//! nobody (the agent actor's job callback does, once the batch is committed).

use consort_core::machine::{CallAdmission, InboundGate};
use consort_core::{Refusal, RunEvent};
use consort_net::RunId;

use super::{Inserted, NewRun, RunLog};
use crate::ActorsError;
use crate::run::RunRecord;

/// What the admission job found for an arriving call.
pub(crate) enum Admission {
    /// The child run exists: a replayed call.
    Replay,
    /// The inbound guards refused it (why); the parent's children counted in the store.
    Refused { children: u64, refusal: Refusal },
    /// Stored: the new run, its first event, and the parent's children before it.
    Stored {
        children_before: u64,
        record: Box<RunRecord>,
        created: RunEvent,
    },
}

/// Admits `new`, a call of run `parent`, as `gate` decides.
pub(crate) fn admit_call(
    store: &mut dyn RunLog,
    gate: &InboundGate,
    parent: &RunId,
    new: NewRun,
) -> Result<Admission, ActorsError> {
    let exists = store.has_run(&new.id)?;
    match gate.admit(exists, || store.count_children(parent))? {
        CallAdmission::Replay => Ok(Admission::Replay),
        CallAdmission::Refused { children, refusal } => {
            Ok(Admission::Refused { children, refusal })
        }
        CallAdmission::Insert { children_before } => {
            // The log the insert starts, so the actor's first step of the run reads nothing
            // back.
            let created = new.created_event();
            let Inserted::Created(record) = store.insert_run(new)? else {
                return Ok(Admission::Replay);
            };
            Ok(Admission::Stored {
                children_before,
                record: Box::new(record),
                created,
            })
        }
    }
}
