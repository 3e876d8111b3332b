//! The one codec of consort: every byte that leaves a process as an envelope or a link frame
//! is made and read here.
//!
//! The wire format is bincode 2.0.1 (pinned with `=` in the workspace) with one fixed
//! configuration, [`WIRE_CONFIG`]: big-endian, fixed-width integers (so a length or a
//! timestamp always takes the same bytes, which keeps the format easy to read in a hex dump
//! and to fuzz), and a decode limit of [`MAX_FRAME`] bytes. The limit is enforced by bincode
//! *before* it allocates for a claimed length, so a hostile length prefix costs nothing.
//! Decoding refuses trailing bytes and envelope versions other than [`ENVELOPE_VERSION`]; the
//! version (an envelope's first field) is read before the rest, so an envelope of an older
//! layout is refused as [`CodecError::WrongVersion`], not as garbage.
//!
//! Enum variants are encoded by their index, so the order of [`Frame`], [`RefusalReason`] and
//! [`RemoteRunState`] variants is part of the wire format: only append.
//!
//! This module never decides whether a call is allowed and never checks signatures; it only
//! turns values into bytes and bytes into values (see `chain` for signatures: hops are signed
//! over their own canonical bytes, never over this encoding).

use bincode::config::{BigEndian, Configuration, Fixint, Limit};
use bincode::error::{DecodeError, EncodeError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::chain::operator::{OperatorAnswer, OperatorRequest};
use crate::chain::presence::PresenceReport;
use crate::envelope::{CallEnvelope, ENVELOPE_VERSION, ReplyEnvelope};
use crate::error::CodecError;
use consort_core::RunId;
use consort_core::directory::{ExcerptSource, WaitUntil};

/// The largest encoded frame or envelope, in bytes (1 MiB). Run outputs are capped well below
/// this by the callee's host; anything larger is refused unread.
pub const MAX_FRAME: usize = 1 << 20;

/// The one bincode configuration of the wire format. Changing it changes the wire format.
pub(crate) const WIRE_CONFIG: Configuration<BigEndian, Fixint, Limit<MAX_FRAME>> =
    bincode::config::standard()
        .with_big_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_FRAME>();

/// One message of the link protocol. Each QUIC stream carries one request frame and one
/// response frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// Request: run this call on the receiving host. Answered by `Accepted` or `Refused`.
    Call(CallEnvelope),
    /// Request: a child run settled; here is its answer. Answered by `Ack` or `Refused`.
    Reply(ReplyEnvelope),
    /// Response to `Call`: the child run exists. `existing` is true when it already existed
    /// (a replay), so the caller's guards do not count it again.
    Accepted {
        /// The child run, as derived from the last hop.
        child_run: RunId,
        /// True when the run was already there before this call.
        existing: bool,
    },
    /// Response to any request: refused, with a typed reason and words a model can act on.
    Refused {
        /// Why, for code.
        reason: RefusalReason,
        /// Why, for the model and the operator.
        text: String,
    },
    /// Request: the status of a child run placed earlier by `caller` from `parent_run`.
    CheckRun {
        /// The calling agent (must be served by the requesting host).
        caller: String,
        /// The agent running the child.
        callee: String,
        /// The caller's run that placed the call.
        parent_run: RunId,
        /// The child run asked about.
        child_run: RunId,
    },
    /// Response to `CheckRun`.
    RunStatus {
        /// The child run asked about.
        child_run: RunId,
        /// Where it stands.
        state: RemoteRunState,
        /// Its output (capped) once settled.
        output: Option<String>,
        /// Hops from the root run, as the callee's host recorded it from the verified chain.
        hop_depth: u32,
        /// When the callee's host stored the run, Unix milliseconds (its clock).
        created_at_ms: u64,
        /// The input the run was given (capped like the output).
        input: String,
    },
    /// Response to `Reply`: received and stored.
    Ack,
    /// Request: send the reply of child run `child_run` (of agent `callee`) again, as a
    /// `Reply` request, if it has settled; answered by `Ack`. Sent by a caller's host that
    /// resumes a waiting run after a restart (the reply may have been lost). The receiver
    /// answers only when the child's caller is served by the requesting host.
    ResendReply {
        /// The agent running the child.
        callee: String,
        /// The child run whose reply is wanted.
        child_run: RunId,
    },
    /// Request: the presence of these agents, as the receiving host's supervisor sees them.
    /// Answered by `PresenceReport` (or `Refused`). `nonce` ties the signed answer to this
    /// query.
    PresenceQuery {
        /// Fresh random bytes per query.
        nonce: [u8; 16],
        /// The agents asked about (at most `chain::presence::MAX_PRESENCE_AGENTS`).
        agents: Vec<String>,
    },
    /// Response to `PresenceQuery`, signed by the reporting host.
    PresenceReport(PresenceReport),
    /// Request: what `asker` (an agent served by the requesting host, or `None` for that
    /// host's operator) may see of `agent` and one of its runs. Answered by `DirectoryAnswer`.
    Observe {
        /// Who asks.
        asker: Option<String>,
        /// The agent observed.
        agent: String,
        /// One of its runs.
        run: Option<RunId>,
        /// Where an excerpt comes from.
        source: ExcerptSource,
        /// The most excerpt lines.
        lines: u32,
    },
    /// Request: wait up to `wait_ms` on a run of `agent`, pinned (see
    /// `consort_core::directory::wait`). Answered by `DirectoryAnswer`.
    WaitRun {
        /// Who asks.
        asker: Option<String>,
        /// The agent.
        agent: String,
        /// Its run.
        run: RunId,
        /// What ends the wait.
        until: WaitUntil,
        /// The state-change sequence already seen.
        after_seq: u64,
        /// The incarnation pinned, if already resolved.
        incarnation: Option<String>,
        /// How long the receiving host may wait before answering.
        wait_ms: u32,
    },
    /// Response to `Observe` and `WaitRun`: the answer in the HTTP API's JSON shape.
    DirectoryAnswer {
        /// The JSON text.
        json: String,
    },
    /// Request: hand `agent` a message from `asker` (an agent served by the requesting host,
    /// or `None` for that host's operator), into `run` or as a new run. Answered by
    /// `DirectoryAnswer` with the receipt.
    Deliver {
        /// The sender.
        asker: Option<String>,
        /// The agent it goes to.
        agent: String,
        /// One of its runs, or `None` for a new run.
        run: Option<RunId>,
        /// The sender's idempotency key.
        delivery_id: String,
        /// The message.
        text: String,
    },
    /// Request: the receipt of an earlier delivery from `asker` (see `Deliver`). Answered by
    /// `DirectoryAnswer` with the receipt (`unknown_delivery` when there is none).
    DeliveryStatus {
        /// The sender.
        asker: Option<String>,
        /// The agent it went to.
        agent: String,
        /// The run it went into, or `None` for a new-run delivery.
        run: Option<RunId>,
        /// The sender's id for it.
        delivery_id: String,
    },
    /// Request: a fleet command signed by an operator (see `chain::operator`). Accepted only
    /// from a peer the link authenticated as an operator, never from a host; answered by
    /// `OperatorAnswer`.
    OperatorRequest(OperatorRequest),
    /// Response to `OperatorRequest`.
    OperatorAnswer(OperatorAnswer),
}

impl Frame {
    /// The frame's variant name, for logs (never its contents).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Call(_) => "Call",
            Self::Reply(_) => "Reply",
            Self::Accepted { .. } => "Accepted",
            Self::Refused { .. } => "Refused",
            Self::CheckRun { .. } => "CheckRun",
            Self::RunStatus { .. } => "RunStatus",
            Self::Ack => "Ack",
            Self::ResendReply { .. } => "ResendReply",
            Self::PresenceQuery { .. } => "PresenceQuery",
            Self::PresenceReport(_) => "PresenceReport",
            Self::Observe { .. } => "Observe",
            Self::WaitRun { .. } => "WaitRun",
            Self::DirectoryAnswer { .. } => "DirectoryAnswer",
            Self::Deliver { .. } => "Deliver",
            Self::DeliveryStatus { .. } => "DeliveryStatus",
            Self::OperatorRequest(_) => "OperatorRequest",
            Self::OperatorAnswer(_) => "OperatorAnswer",
        }
    }
}

/// Why a host refused a request. Append only: the index is the wire tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The callee does not accept calls from the caller (no consent edge).
    NotAccepted,
    /// The chain is at the hop limit.
    DepthLimit,
    /// The calling run has placed its maximum number of calls.
    CallLimit,
    /// The callee is saturated; try later.
    Saturated,
    /// The chain or reply failed verification.
    BadChain,
    /// The envelope expired.
    Expired,
    /// No such agent on this host.
    UnknownAgent,
    /// No such run (for `CheckRun`, or a reply to an unknown call).
    UnknownRun,
    /// The request frame could not be decoded, or was the wrong kind of frame.
    Malformed,
    /// The host failed internally; the request may be retried.
    Internal,
    /// A refusal consort-core decided that has no reason of its own above (the callee is
    /// down, the host drains, a delivery's target settled, …): final, never retried. The
    /// frame's text holds the refusal's wire form (`Refusal::to_wire`).
    Refused,
}

/// Where a child run stands, as seen from another host. Append only: the index is the wire tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RemoteRunState {
    /// Accepted, not started yet.
    Queued,
    /// Running.
    Running,
    /// Parked on an approval gate.
    Blocked,
    /// Settled with an answer.
    Succeeded,
    /// Settled with a failure.
    Failed,
    /// Waiting for replies from runs it called in turn.
    Waiting,
}

/// Encodes a call envelope.
pub fn encode_call(envelope: &CallEnvelope) -> Result<Vec<u8>, CodecError> {
    encode(envelope)
}

/// Decodes a call envelope: size-limited, no trailing bytes, current version only.
pub fn decode_call(bytes: &[u8]) -> Result<CallEnvelope, CodecError> {
    check_size(bytes)?;
    peek_version(bytes)?;
    let envelope: CallEnvelope = decode(bytes)?;
    check_version(envelope.version)?;
    Ok(envelope)
}

/// Encodes a reply envelope.
pub fn encode_reply(reply: &ReplyEnvelope) -> Result<Vec<u8>, CodecError> {
    encode(reply)
}

/// Decodes a reply envelope: size-limited, no trailing bytes, current version only.
pub fn decode_reply(bytes: &[u8]) -> Result<ReplyEnvelope, CodecError> {
    check_size(bytes)?;
    peek_version(bytes)?;
    let reply: ReplyEnvelope = decode(bytes)?;
    check_version(reply.version)?;
    Ok(reply)
}

/// Encodes a link frame.
pub fn encode_frame(frame: &Frame) -> Result<Vec<u8>, CodecError> {
    encode(frame)
}

/// Decodes a link frame: size-limited, no trailing bytes, and any envelope inside it must be
/// of the current version.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, CodecError> {
    check_size(bytes)?;
    // A call or reply frame's envelope version follows the variant tag: read it first, so that
    // an envelope of another version is refused as that, not as garbage of the current layout.
    if let Some(tag) = bytes.get(..FRAME_TAG_BYTES)
        && (tag == FRAME_TAG_CALL || tag == FRAME_TAG_REPLY)
    {
        peek_version(&bytes[FRAME_TAG_BYTES..])?;
    }
    let frame: Frame = decode(bytes)?;
    match &frame {
        Frame::Call(envelope) => check_version(envelope.version)?,
        Frame::Reply(reply) => check_version(reply.version)?,
        _ => {}
    }
    Ok(frame)
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let bytes = bincode::serde::encode_to_vec(value, WIRE_CONFIG).map_err(|error| match error {
        EncodeError::UnexpectedEnd => CodecError::TooLarge { limit: MAX_FRAME },
        other => CodecError::Encode(other.to_string()),
    })?;
    // The decode limit counts claimed bytes, the encoder does not; check here so that we
    // never send what a peer (or we) would refuse to read.
    if bytes.len() > MAX_FRAME {
        return Err(CodecError::TooLarge { limit: MAX_FRAME });
    }
    Ok(bytes)
}

/// Refuses more bytes than a frame may hold, before anything is read from them.
fn check_size(bytes: &[u8]) -> Result<(), CodecError> {
    if bytes.len() > MAX_FRAME {
        return Err(CodecError::TooLarge { limit: MAX_FRAME });
    }
    Ok(())
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    check_size(bytes)?;
    let (value, used) =
        bincode::serde::decode_from_slice::<T, _>(bytes, WIRE_CONFIG).map_err(decode_error)?;
    if used != bytes.len() {
        return Err(CodecError::TrailingBytes {
            extra: bytes.len() - used,
        });
    }
    Ok(value)
}

fn decode_error(error: DecodeError) -> CodecError {
    match error {
        DecodeError::UnexpectedEnd { .. } => CodecError::Truncated,
        DecodeError::LimitExceeded => CodecError::TooLarge { limit: MAX_FRAME },
        // A claimed length beyond usize on this platform is, a fortiori, beyond the limit.
        DecodeError::OutsideUsizeRange(_) => CodecError::TooLarge { limit: MAX_FRAME },
        other => CodecError::Garbage(other.to_string()),
    }
}

/// Bytes of a frame's variant tag (a fixed-width u32 in [`WIRE_CONFIG`]).
const FRAME_TAG_BYTES: usize = 4;
/// The tag of [`Frame::Call`] (variant 0), big-endian.
const FRAME_TAG_CALL: [u8; FRAME_TAG_BYTES] = 0u32.to_be_bytes();
/// The tag of [`Frame::Reply`] (variant 1), big-endian.
const FRAME_TAG_REPLY: [u8; FRAME_TAG_BYTES] = 1u32.to_be_bytes();

/// Checks the version an encoded envelope or reply opens with (its first field, a fixed-width
/// big-endian u16) before the rest is decoded: the layout after it may differ between
/// versions. Too short to hold one is left to the decoder to call truncated.
fn peek_version(bytes: &[u8]) -> Result<(), CodecError> {
    match bytes.get(..2) {
        Some(&[high, low]) => check_version(u16::from_be_bytes([high, low])),
        _ => Ok(()),
    }
}

fn check_version(found: u16) -> Result<(), CodecError> {
    if found == ENVELOPE_VERSION {
        Ok(())
    } else {
        Err(CodecError::WrongVersion {
            found,
            expected: ENVELOPE_VERSION,
        })
    }
}

#[cfg(test)]
mod tests;
