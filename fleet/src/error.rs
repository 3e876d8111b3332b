//! The one error type of consort-fleet.

/// Errors from assembling a host, serving its API, or talking to one as a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    #[error(transparent)]
    Config(#[from] consort_config::ConfigError),
    #[error(transparent)]
    Actors(#[from] consort_actors::ActorsError),
    /// The HTTP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The host at this URL could not be reached.
    #[error("cannot reach a consort host at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// The host answered with an error.
    #[error("{message} (HTTP {status}, {code})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// Links, keys or envelopes (consort-net).
    #[error(transparent)]
    Net(#[from] consort_net::NetError),
    /// `--host` names no host of fleet.yaml.
    #[error("{file}: there is no host named `{host}` (hosts: {known})")]
    UnknownHost {
        host: String,
        file: String,
        known: String,
    },
    /// The host key does not match the key fleet.yaml pins for the host.
    #[error(
        "key file {key_file} holds the key {actual}, but {file} pins another key for host `{host}`"
    )]
    WrongKey {
        host: String,
        key_file: String,
        file: String,
        actual: String,
    },
    /// A pinned key in fleet.yaml is not a valid ed25519 point.
    #[error("{file}: the public_key of host `{host}` is not a valid ed25519 key")]
    BadPin { host: String, file: String },
    /// A data folder could not be made.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The host answered something that is not consort's API.
    #[error("unexpected answer from {url}: {detail}")]
    BadResponse { url: String, detail: String },
}
