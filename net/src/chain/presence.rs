//! Presence reports between hosts: what a host supervisor says about its agents, signed by
//! that host so the asking host can show who said it.
//!
//! The asking host sends [`crate::Frame::PresenceQuery`] with a fresh nonce and the agents it
//! wants; the owning host answers [`crate::Frame::PresenceReport`] signed over
//! [`presence_canonical_bytes`] (domain tag, layout version, the reporting host, the nonce, the
//! observation time and each report field by field, length-prefixed, like hops). The nonce ties
//! the answer to the question, so a recorded report cannot answer a later one. This module
//! proves who reported what; what a report means as presence is consort-core's
//! (`directory::presence_of`).

use ed25519_dalek::Signature;
use serde::{Deserialize, Serialize};

use consort_core::RunStatus;
use consort_core::directory::{ActorState, AgentReport};

use super::Canonical;
use crate::error::ChainError;
use crate::keys::{HostKey, KeyRing};

/// Domain tag of a presence report's canonical bytes.
const PRESENCE_DOMAIN: &[u8] = b"consort/presence/v1";

/// The most agents one presence query may name (a directory asks only for the rows it shows).
pub const MAX_PRESENCE_AGENTS: usize = 1_000;

/// One host's signed answer to a presence query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceReport {
    /// The reporting host.
    pub host: String,
    /// The nonce of the query it answers.
    pub nonce: [u8; 16],
    /// When it observed its agents, Unix milliseconds (its clock).
    pub observed_at_ms: u64,
    /// One report per agent asked about.
    pub reports: Vec<AgentReport>,
    /// The reporting host's ed25519 signature over [`presence_canonical_bytes`].
    pub signature: Vec<u8>,
}

/// The bytes a presence report's signature covers.
pub fn presence_canonical_bytes(report: &PresenceReport) -> Vec<u8> {
    let mut out = Canonical::new(PRESENCE_DOMAIN);
    out.field(report.host.as_bytes());
    out.field(&report.nonce);
    out.field(&report.observed_at_ms.to_be_bytes());
    out.field(&(report.reports.len() as u64).to_be_bytes());
    for r in &report.reports {
        out.field(r.agent.as_bytes());
        out.field(match r.actor {
            ActorState::Up => b"up",
            ActorState::Down => b"down",
            ActorState::StoreNotWritable => b"store_not_writable",
            ActorState::NotServed => b"not_served",
            ActorState::Offline => b"offline",
        });
        out.field(r.incarnation.as_bytes());
        let w = &r.work;
        for count in [w.queued, w.running, w.waiting, w.blocked] {
            out.field(&count.to_be_bytes());
        }
        for since in [w.oldest_change_ms, w.blocked_since_ms, w.unread_since_ms] {
            match since {
                None => out.field(b""),
                Some(ms) => out.field(&ms.to_be_bytes()),
            }
        }
        match &w.last_settled {
            None => out.field(b""),
            Some(last) => {
                out.field(last.run.as_str().as_bytes());
                out.field(match last.status {
                    RunStatus::Succeeded => b"succeeded",
                    RunStatus::Failed => b"failed",
                    // A report never names an open run as settled; sign what it says anyway.
                    other => other.as_str().as_bytes(),
                });
                out.field(&last.at_ms.to_be_bytes());
            }
        }
    }
    out.finish()
}

/// Signs `report` as `host`.
pub fn sign_presence(report: &mut PresenceReport, key: &HostKey) {
    report.signature = key.sign(&presence_canonical_bytes(report)).to_vec();
}

/// Verifies a report received from `expected_host` for the query with `nonce`: from that
/// host, for that query, signed (strictly) with the key pinned for it.
pub fn verify_presence(
    report: &PresenceReport,
    expected_host: &str,
    nonce: &[u8; 16],
    ring: &KeyRing,
) -> Result<(), ChainError> {
    if report.host != expected_host {
        return Err(ChainError::WrongSigner {
            hop: 0,
            expected: expected_host.to_owned(),
            actual: report.host.clone(),
        });
    }
    if &report.nonce != nonce {
        return Err(ChainError::BadSignature { hop: 0 });
    }
    let (key, _) = ring
        .pinned(expected_host)
        .ok_or_else(|| ChainError::UnknownHost {
            hop: 0,
            host: expected_host.to_owned(),
        })?;
    let bytes: [u8; 64] = report
        .signature
        .as_slice()
        .try_into()
        .map_err(|_| ChainError::BadSignature { hop: 0 })?;
    key.verifying_key()
        .verify_strict(
            &presence_canonical_bytes(report),
            &Signature::from_bytes(&bytes),
        )
        .map_err(|_| ChainError::BadSignature { hop: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use consort_core::RunId;
    use consort_core::directory::{LastSettled, WorkState};

    fn report(key: &HostKey) -> PresenceReport {
        let mut r = PresenceReport {
            host: "beta".into(),
            nonce: [7; 16],
            observed_at_ms: 1_700_000_000_000,
            reports: vec![AgentReport {
                agent: "cfo".into(),
                actor: ActorState::Up,
                work: WorkState {
                    running: 1,
                    last_settled: Some(LastSettled {
                        run: RunId::parse("run_00000000000000000000000000000001").unwrap(),
                        status: RunStatus::Succeeded,
                        at_ms: 5,
                    }),
                    ..WorkState::default()
                },
                incarnation: "1-1".into(),
            }],
            signature: Vec::new(),
        };
        sign_presence(&mut r, key);
        r
    }

    fn ring(key: &HostKey) -> KeyRing {
        let mut ring = KeyRing::new();
        ring.insert("beta", key.public()).unwrap();
        ring
    }

    #[test]
    fn a_signed_report_verifies_for_its_host_and_nonce() {
        let key = HostKey::generate();
        let r = report(&key);
        assert!(verify_presence(&r, "beta", &[7; 16], &ring(&key)).is_ok());
    }

    #[test]
    fn a_changed_report_another_nonce_or_another_host_is_refused() {
        let key = HostKey::generate();
        let ring = ring(&key);
        let mut changed = report(&key);
        changed.reports[0].work.blocked = 1;
        assert!(verify_presence(&changed, "beta", &[7; 16], &ring).is_err());
        assert!(verify_presence(&report(&key), "beta", &[8; 16], &ring).is_err());
        assert!(verify_presence(&report(&key), "alpha", &[7; 16], &ring).is_err());
        let mut short = report(&key);
        short.signature.truncate(10);
        assert!(verify_presence(&short, "beta", &[7; 16], &ring).is_err());
    }

    #[test]
    fn a_report_signed_by_another_key_is_refused() {
        let key = HostKey::generate();
        let other = HostKey::generate();
        assert!(verify_presence(&report(&other), "beta", &[7; 16], &ring(&key)).is_err());
    }
}
