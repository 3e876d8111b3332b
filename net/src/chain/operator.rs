//! Operator requests: fleet commands (`consort fleet status|drain|...`) an operator signs with
//! its own key and sends to one host, and what that host checks before it acts on one.
//!
//! A request names its operator, the one host it is for, the command with its arguments, when
//! it was issued, when it expires (a short lifetime: [`MAX_OPERATOR_LIFETIME_MS`]) and a fresh
//! random nonce. The operator signs [`operator_canonical_bytes`]: a domain tag of its own
//! (`consort/operator-request/v1`, so no hop, reply or presence signature can pass for one),
//! the canonical layout version, the request's format version, then every field
//! length-prefixed, the command as its name followed by its arguments, an absent argument as a
//! marker of its own. Like hops, these bytes are built by hand, never by the codec.
//!
//! [`verify_operator_request`] is the whole check, as a pure function of the request, the
//! fleet's operator keys, the receiving host's name, the operator the link authenticated and
//! the clock: the format, a known operator, the same operator the TLS handshake proved, this
//! host as the target, a lifetime within the bound, not issued in the future nor expired (both
//! with the links' clock skew), and a signature that verifies with `verify_strict`. Replays are
//! [`ReplayWindow`]'s: a nonce is remembered until its request could no longer be accepted,
//! and a nonce seen again in that time is refused. The window is bounded; when it is full, new
//! requests are refused rather than old nonces forgotten early.
//!
//! This module proves who asked what of which host, and whether the request is fresh; what a
//! command does, and who may run it beyond being an operator of the fleet, is not decided here.
//! It reads no clock: callers pass `now_ms`.

use std::collections::HashMap;

use ed25519_dalek::Signature;
use serde::{Deserialize, Serialize};

use super::Canonical;
use crate::keys::{HostKey, KeyRing};
use consort_core::RunId;

/// Domain tag of an operator request's canonical bytes.
const OPERATOR_DOMAIN: &[u8] = b"consort/operator-request/v1";

/// The format of an operator request (its fields and what they mean). A host refuses any
/// other with [`OperatorRefusal::WrongFormat`].
pub const OPERATOR_FORMAT: u16 = 1;

/// The longest lifetime (expiry minus issue time) a host accepts for an operator request.
/// The CLI gives its requests this lifetime.
pub const MAX_OPERATOR_LIFETIME_MS: u64 = 60_000;

/// The largest operator request a host reads, in bytes, before decoding it (a command and its
/// arguments are a few hundred bytes; the link's general limit is far larger).
pub const MAX_OPERATOR_REQUEST: usize = 16 * 1024;

/// How many nonces a [`ReplayWindow`] remembers at most by default: far more than operators
/// send within one request lifetime.
pub const REPLAY_WINDOW_CAPACITY: usize = 10_000;

/// A fleet command, with its arguments. Append only: the index is the wire tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatorCommand {
    /// The host's agents, runs by status, links, last failure and admission.
    Status,
    /// Stop admitting new root runs; accepted runs go on.
    Drain,
    /// Admit new root runs again after a drain.
    Resume,
    /// Restart one agent's actor (its accepted runs resume as after a crash).
    Restart {
        /// The agent.
        agent: String,
    },
    /// Re-read every agent.yaml of the host now.
    Reload,
    /// Approve (or deny) the gated tool a blocked run waits on.
    Decide {
        /// The blocked run.
        run: RunId,
        /// True approves, false denies.
        approve: bool,
    },
    /// One page of the host's runs, newest first.
    Jobs {
        /// Only this agent's runs.
        agent: Option<String>,
        /// The most runs in the page (the host clamps it to its own bounds).
        limit: u32,
        /// Where the previous page ended.
        cursor: Option<String>,
    },
}

impl OperatorCommand {
    /// The command's name, as the CLI spells it (and as it is signed).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Drain => "drain",
            Self::Resume => "resume",
            Self::Restart { .. } => "restart",
            Self::Reload => "reload",
            Self::Decide { .. } => "approve",
            Self::Jobs { .. } => "jobs",
        }
    }
}

/// One signed fleet command for one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorRequest {
    /// [`OPERATOR_FORMAT`] when made by this build.
    pub format: u16,
    /// The operator's name in fleet.yaml.
    pub operator: String,
    /// The host the request is for.
    pub host: String,
    /// What to do.
    pub command: OperatorCommand,
    /// When it was issued, Unix milliseconds (the operator's clock).
    pub issued_at_ms: u64,
    /// After this (plus the allowed skew), the host refuses it.
    pub expires_at_ms: u64,
    /// Fresh random bytes: a host refuses a nonce it saw within the request's lifetime.
    pub nonce: [u8; 16],
    /// The operator's ed25519 signature over [`operator_canonical_bytes`] (64 bytes).
    pub signature: Vec<u8>,
}

impl OperatorRequest {
    /// An unsigned request issued at `now_ms`, living [`MAX_OPERATOR_LIFETIME_MS`], with a
    /// nonce from the operating system's random source.
    pub fn new(operator: &str, host: &str, command: OperatorCommand, now_ms: u64) -> Self {
        Self {
            format: OPERATOR_FORMAT,
            operator: operator.to_owned(),
            host: host.to_owned(),
            command,
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(MAX_OPERATOR_LIFETIME_MS),
            nonce: rand::random(),
            signature: Vec::new(),
        }
    }
}

/// What a host answers to an operator request. Append only: the index is the wire tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatorAnswer {
    /// The command ran; its answer, as JSON.
    Done {
        /// The answer's JSON text.
        json: String,
    },
    /// The request was verified but the command failed (an unknown agent, a run that is not
    /// blocked, a config that does not read, ...).
    Failed {
        /// A stable code (`unknown_agent`, `unknown_run`, a refusal's code, `invalid_config`,
        /// `internal`, ...).
        code: String,
        /// What happened, for the operator.
        message: String,
    },
    /// The request did not pass [`verify_operator_request`] or the replay window; nothing ran.
    Refused(OperatorRefusal),
}

/// Why a host refused an operator request before running it. Append only: the index is the
/// wire tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorRefusal {
    /// The request's format is not one this host reads.
    #[error("operator request format {found}; this host reads format {expected}")]
    WrongFormat {
        /// The format in the request.
        found: u16,
        /// The format this host reads.
        expected: u16,
    },
    /// The request names an operator fleet.yaml does not list under `operators:`.
    #[error("`{operator}` is not an operator of this fleet")]
    UnknownOperator {
        /// The name in the request.
        operator: String,
    },
    /// The request is signed as another operator than the one the link authenticated.
    #[error("the request is signed as `{signed_as}`, but the link authenticated `{link_peer}`")]
    NotTheLinkPeer {
        /// The operator the request names.
        signed_as: String,
        /// The operator whose key the TLS handshake proved.
        link_peer: String,
    },
    /// The request is for another host.
    #[error("the request is for host `{target}`, not for `{here}`")]
    WrongHost {
        /// The host the request names.
        target: String,
        /// The host that received it.
        here: String,
    },
    /// The request claims a lifetime beyond what a host accepts.
    #[error("the request is valid for {lifetime_ms} ms, longer than the allowed {limit_ms} ms")]
    LifetimeTooLong {
        /// Its claimed lifetime.
        lifetime_ms: u64,
        /// The host's bound.
        limit_ms: u64,
    },
    /// The request was issued in the future, beyond the allowed clock skew.
    #[error("the request was issued at {issued_at_ms} ms, in the future (now {now_ms} ms)")]
    NotYetValid {
        /// When it claims to be issued.
        issued_at_ms: u64,
        /// The host's clock.
        now_ms: u64,
    },
    /// The request expired, even allowing for clock skew.
    #[error("the request expired at {expires_at_ms} ms (now {now_ms} ms)")]
    Expired {
        /// When it expired.
        expires_at_ms: u64,
        /// The host's clock.
        now_ms: u64,
    },
    /// The signature does not verify (strictly) with the operator's key: a request signed by
    /// another key, or changed after it was signed.
    #[error("the signature does not verify with the key of operator `{operator}`")]
    BadSignature {
        /// The operator the request names.
        operator: String,
    },
    /// This request (its nonce) was already received within its lifetime.
    #[error("this request was already received (a replay)")]
    Replayed,
    /// The host remembers as many recent requests as it may; it takes new ones as old ones
    /// expire.
    #[error("too many operator requests within one request lifetime; try again shortly")]
    ReplayWindowFull,
}

impl OperatorRefusal {
    /// A stable machine name for the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Self::WrongFormat { .. } => "wrong_format",
            Self::UnknownOperator { .. } => "unknown_operator",
            Self::NotTheLinkPeer { .. } => "not_the_link_peer",
            Self::WrongHost { .. } => "wrong_host",
            Self::LifetimeTooLong { .. } => "lifetime_too_long",
            Self::NotYetValid { .. } => "not_yet_valid",
            Self::Expired { .. } => "expired",
            Self::BadSignature { .. } => "bad_signature",
            Self::Replayed => "replayed",
            Self::ReplayWindowFull => "replay_window_full",
        }
    }
}

/// The receiving host's clock and bounds for [`verify_operator_request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperatorLimits {
    /// The host's clock, Unix milliseconds.
    pub now_ms: u64,
    /// Clock skew allowed between the operator's machine and the host.
    pub allowed_skew_ms: u64,
    /// The longest lifetime accepted ([`MAX_OPERATOR_LIFETIME_MS`] unless a host says less).
    pub max_lifetime_ms: u64,
}

/// The bytes an operator request's signature covers; see the module documentation.
pub fn operator_canonical_bytes(request: &OperatorRequest) -> Vec<u8> {
    let mut out = Canonical::new(OPERATOR_DOMAIN);
    out.field(&request.format.to_be_bytes());
    out.field(request.operator.as_bytes());
    out.field(request.host.as_bytes());
    out.field(request.command.name().as_bytes());
    match &request.command {
        OperatorCommand::Status
        | OperatorCommand::Drain
        | OperatorCommand::Resume
        | OperatorCommand::Reload => {}
        OperatorCommand::Restart { agent } => out.field(agent.as_bytes()),
        OperatorCommand::Decide { run, approve } => {
            out.field(run.as_str().as_bytes());
            out.field(if *approve { b"approve" } else { b"deny" });
        }
        OperatorCommand::Jobs {
            agent,
            limit,
            cursor,
        } => {
            optional_field(&mut out, agent.as_deref());
            out.field(&limit.to_be_bytes());
            optional_field(&mut out, cursor.as_deref());
        }
    }
    out.field(&request.issued_at_ms.to_be_bytes());
    out.field(&request.expires_at_ms.to_be_bytes());
    out.field(&request.nonce);
    out.finish()
}

/// An optional text: a presence marker, then the text when there is one, so that an absent
/// value and an empty one sign differently.
fn optional_field(out: &mut Canonical, value: Option<&str>) {
    match value {
        None => out.field(b"none"),
        Some(text) => {
            out.field(b"some");
            out.field(text.as_bytes());
        }
    }
}

/// Signs `request` with the operator's key.
pub fn sign_operator_request(request: &mut OperatorRequest, key: &HostKey) {
    request.signature = key.sign(&operator_canonical_bytes(request)).to_vec();
}

/// Checks an operator request received by host `here` from the operator `link_peer` (the one
/// whose key the link's TLS handshake proved), against the fleet's operator keys. See the
/// module documentation for the order; the first failing check is the answer. Replays are not
/// checked here: see [`ReplayWindow`], asked only after this passed.
pub fn verify_operator_request(
    request: &OperatorRequest,
    operators: &KeyRing,
    here: &str,
    link_peer: &str,
    limits: &OperatorLimits,
) -> Result<(), OperatorRefusal> {
    if request.format != OPERATOR_FORMAT {
        return Err(OperatorRefusal::WrongFormat {
            found: request.format,
            expected: OPERATOR_FORMAT,
        });
    }
    let Some(key) = operators.key(&request.operator) else {
        return Err(OperatorRefusal::UnknownOperator {
            operator: request.operator.clone(),
        });
    };
    if request.operator != link_peer {
        return Err(OperatorRefusal::NotTheLinkPeer {
            signed_as: request.operator.clone(),
            link_peer: link_peer.to_owned(),
        });
    }
    if request.host != here {
        return Err(OperatorRefusal::WrongHost {
            target: request.host.clone(),
            here: here.to_owned(),
        });
    }
    let lifetime_ms = request.expires_at_ms.saturating_sub(request.issued_at_ms);
    if lifetime_ms > limits.max_lifetime_ms {
        return Err(OperatorRefusal::LifetimeTooLong {
            lifetime_ms,
            limit_ms: limits.max_lifetime_ms,
        });
    }
    if request.issued_at_ms > limits.now_ms.saturating_add(limits.allowed_skew_ms) {
        return Err(OperatorRefusal::NotYetValid {
            issued_at_ms: request.issued_at_ms,
            now_ms: limits.now_ms,
        });
    }
    if request.expires_at_ms.saturating_add(limits.allowed_skew_ms) < limits.now_ms {
        return Err(OperatorRefusal::Expired {
            expires_at_ms: request.expires_at_ms,
            now_ms: limits.now_ms,
        });
    }
    let bad_signature = || OperatorRefusal::BadSignature {
        operator: request.operator.clone(),
    };
    let signature: [u8; 64] = request
        .signature
        .as_slice()
        .try_into()
        .map_err(|_| bad_signature())?;
    key.verifying_key()
        .verify_strict(
            &operator_canonical_bytes(request),
            &Signature::from_bytes(&signature),
        )
        .map_err(|_| bad_signature())
}

/// The nonces of the operator requests a host accepted recently, each kept until its request
/// could no longer be accepted (its expiry plus the skew). Bounded: see
/// [`ReplayWindow::admit`].
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// (operator, nonce) -> the time after which the request would be refused as expired.
    seen: HashMap<(String, [u8; 16]), u64>,
    capacity: usize,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::with_capacity(REPLAY_WINDOW_CAPACITY)
    }
}

impl ReplayWindow {
    /// A window remembering at most `capacity` nonces.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            seen: HashMap::new(),
            capacity,
        }
    }

    /// Records the nonce of a request that passed [`verify_operator_request`]: refuses it as
    /// [`OperatorRefusal::Replayed`] if the same operator's nonce is still remembered, and as
    /// [`OperatorRefusal::ReplayWindowFull`] when the window holds `capacity` nonces none of
    /// which has expired (forgetting one early would let its request be replayed).
    pub fn admit(
        &mut self,
        request: &OperatorRequest,
        limits: &OperatorLimits,
    ) -> Result<(), OperatorRefusal> {
        let now = limits.now_ms;
        self.seen.retain(|_, forget_after| *forget_after >= now);
        let key = (request.operator.clone(), request.nonce);
        if self.seen.contains_key(&key) {
            return Err(OperatorRefusal::Replayed);
        }
        if self.seen.len() >= self.capacity {
            return Err(OperatorRefusal::ReplayWindowFull);
        }
        let forget_after = request.expires_at_ms.saturating_add(limits.allowed_skew_ms);
        self.seen.insert(key, forget_after);
        Ok(())
    }

    /// How many nonces are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True when no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests;
