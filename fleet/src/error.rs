//! The one error type of consort-fleet.

/// Errors from assembling a host, serving its API, or talking to one as a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    #[error(transparent)]
    /// An agent.yaml, fleet.yaml or auth file is invalid.
    Config(#[from] consort_config::ConfigError),
    #[error(transparent)]
    /// The host (stores, actors) failed.
    Actors(#[from] consort_actors::ActorsError),
    /// The HTTP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        #[source]
        /// What the OS said.
        source: std::io::Error,
    },
    /// The API would listen beyond loopback without an auth file.
    #[error(
        "refusing to serve the HTTP API on {addr} without --auth: anyone who can reach it would be an operator of this host; listen on 127.0.0.1, or pass --auth FILE with tokens (see docs/SECURITY.md)"
    )]
    UnsafeListen {
        /// The address asked for.
        addr: String,
    },
    /// The host at this URL could not be reached.
    #[error("cannot reach a consort host at {url}: {detail}")]
    Unreachable {
        /// The URL tried.
        url: String,
        /// Why it failed.
        detail: String,
    },
    /// The host answered with an error.
    #[error("{message} (HTTP {status}, {code})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The API's stable error code.
        code: String,
        /// The API's error message.
        message: String,
    },
    /// Links, keys or envelopes (consort-net).
    #[error(transparent)]
    Net(#[from] consort_net::NetError),
    /// `--host` names no host of fleet.yaml.
    #[error("{file}: there is no host named `{host}` (hosts: {known})")]
    UnknownHost {
        /// The host asked for.
        host: String,
        /// The fleet.yaml file.
        file: String,
        /// The hosts it declares.
        known: String,
    },
    /// The host key does not match the key fleet.yaml pins for the host.
    #[error(
        "key file {key_file} holds the key {actual}, but {file} pins another key for host `{host}`"
    )]
    WrongKey {
        /// The host.
        host: String,
        /// The key file read.
        key_file: String,
        /// The fleet.yaml file.
        file: String,
        /// The public key the key file holds.
        actual: String,
    },
    /// A pinned key in fleet.yaml is not a valid ed25519 point.
    #[error("{file}: the public_key of host `{host}` is not a valid ed25519 key")]
    BadPin {
        /// The host whose pin is bad.
        host: String,
        /// The fleet.yaml file.
        file: String,
    },
    /// A key fleet.yaml lists under `operators:` is not a valid ed25519 point.
    #[error("{file}: the public_key of operator `{operator}` is not a valid ed25519 key")]
    BadOperatorKey {
        /// The operator whose key is bad.
        operator: String,
        /// The fleet.yaml file.
        file: String,
    },
    /// The operator key given is not one fleet.yaml lists under `operators:`.
    #[error(
        "the key {key} is not listed under `operators:` in {file}; add it there (and restart the hosts) to send fleet commands with it"
    )]
    NotAnOperator {
        /// The key's public half.
        key: String,
        /// The fleet.yaml file.
        file: String,
    },
    /// A data folder could not be made.
    #[error("{path}: {source}")]
    Io {
        /// The folder.
        path: String,
        #[source]
        /// What the OS said.
        source: std::io::Error,
    },
    /// The host answered something that is not consort's API.
    #[error("unexpected answer from {url}: {detail}")]
    BadResponse {
        /// The URL asked.
        url: String,
        /// What was wrong with the answer.
        detail: String,
    },
}
