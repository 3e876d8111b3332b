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
    /// The host answered something that is not consort's API.
    #[error("unexpected answer from {url}: {detail}")]
    BadResponse { url: String, detail: String },
}
