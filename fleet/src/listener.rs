//! Where a host's HTTP API may listen, which requests reach its handlers, and the bounds on
//! what a connection may hold.
//!
//! - **Where.** An API without an auth file serves whoever reaches it as its operator, so it
//!   may listen on loopback only ([`check_listen`]); beyond loopback the host refuses to start
//!   without an auth file.
//! - **Which requests.** The `Host` header must name this API ([`HostCheck`]): a loopback name
//!   or address, the address it is bound to, or a name the operator allowed (`--allow-host`).
//!   That stops DNS rebinding, where a web page's own domain resolves to 127.0.0.1. A request
//!   that carries an `Origin` of another site is refused, and every `POST` must say
//!   `Content-Type: application/json`: a browser cannot send that cross-site without a CORS
//!   preflight, which this API never grants (it sends no CORS headers at all).
//! - **Bounds.** At most [`HttpBounds::max_connections`] connections at once (the rest wait in
//!   the kernel's backlog, holding no file of this process); request headers must arrive within
//!   [`HttpBounds::header_timeout`] and a body within [`HttpBounds::body_timeout`]; a body is
//!   at most [`HttpBounds::max_body_bytes`]. The body limit and timeout are tower-http's layers;
//!   the header timeout is hyper's.
//!
//! The checks are pure functions; [`serve`] is the accept loop that applies the connection
//! bounds. Nothing here knows routes or identities.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::FleetError;
use crate::bounds::{SharedHeld, header_deadline};

/// The bounds on the API's connections and requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpBounds {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (also how long an idle
    /// keep-alive connection is kept).
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_timeout: Duration,
    /// The largest request body accepted.
    pub max_body_bytes: usize,
    /// Live streams (`follow=1`) open at once; each also holds one of `max_connections`.
    pub max_streams: usize,
    /// Connections served at once from one client address: one address never takes the
    /// whole of `max_connections`.
    pub max_connections_per_address: usize,
    /// The shortest header deadline: `header_timeout` tightens toward it as the host nears
    /// `max_connections` (see [`crate::bounds::header_deadline`]).
    pub header_timeout_floor: Duration,
    /// Live streams one principal may hold at once.
    pub max_streams_per_principal: usize,
    /// Stream slots kept for operators: other principals share the rest.
    pub operator_streams: usize,
    /// The longest `wait_ms` a request may ask for (longer asks wait this long).
    pub max_wait: Duration,
    /// Waits (`wait_ms`, `wait_peer`) one principal may hold at once.
    pub max_waits_per_principal: usize,
    /// Runs one principal may start per minute through the API, after a burst of
    /// `run_burst`; more are answered 429 with `Retry-After`.
    pub runs_per_minute: u32,
    /// Runs one principal may start at once before `runs_per_minute` applies.
    pub run_burst: u32,
}

impl Default for HttpBounds {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 1024 * 1024,
            max_streams: 64,
            max_connections_per_address: 32,
            header_timeout_floor: Duration::from_secs(1),
            max_streams_per_principal: 8,
            operator_streams: 8,
            max_wait: Duration::from_secs(60),
            max_waits_per_principal: 16,
            runs_per_minute: 600,
            run_burst: 200,
        }
    }
}

/// Refuses to listen beyond loopback without an auth file: such an API makes whoever reaches
/// it an operator of the host.
pub fn check_listen(addr: SocketAddr, has_auth: bool) -> Result<(), FleetError> {
    if addr.ip().is_loopback() || has_auth {
        return Ok(());
    }
    Err(FleetError::UnsafeListen {
        addr: addr.to_string(),
    })
}

/// The `Host` header values an API answers to.
#[derive(Clone, Debug)]
pub struct HostCheck {
    bound: SocketAddr,
    allowed: Vec<String>,
}

impl HostCheck {
    /// An API bound to `bound`, also answering to the names in `allowed` (any port).
    pub fn new(bound: SocketAddr, allowed: &[String]) -> Self {
        Self {
            bound,
            allowed: allowed.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether a request whose `Host` header is `host` is meant for this API.
    pub fn allows(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else {
            return false;
        };
        let local = self.bound.ip().is_loopback() || self.bound.ip().is_unspecified();
        if name == "localhost" && local {
            return true;
        }
        if let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            if ip.is_loopback() && local {
                return true;
            }
            if ip == self.bound.ip() {
                return true;
            }
            // A wildcard bind answers on every address of the machine; a literal address
            // cannot be a rebinding attacker's domain.
            return self.bound.ip().is_unspecified();
        }
        self.allowed.contains(&name)
    }

    /// Whether a request with this `Origin` header may reach the API: no browser origin
    /// other than the API's own.
    pub fn allows_origin(&self, origin: &str) -> bool {
        let rest = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        match rest {
            Some(authority) => self.allows(authority.trim_end_matches('/')),
            None => false,
        }
    }
}

/// The host part of a `Host` header (`name`, `name:port`, `[v6]:port`), lowercased; `None`
/// for a value that is not one.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    if host.is_empty() || host.contains(['/', '@', ' ', '\\']) {
        return None;
    }
    let name = if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        &host[..end + 2]
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return None,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

/// Serves `app` on `listener` within `bounds`, until the task is dropped.
pub async fn serve(listener: TcpListener, app: Router, bounds: HttpBounds) {
    let cap = bounds.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(cap));
    let per_address = SharedHeld::<IpAddr>::new(bounds.max_connections_per_address.max(1));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of files or a connection reset before accept: wait a little rather
                // than spin, and keep serving.
                tracing::warn!("HTTP API could not accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // One address never holds more than its share: the connection over it is closed at
        // once, and its slot is free for another client.
        let Some(held) = per_address.hold(peer.ip()) else {
            tracing::debug!(%peer, "HTTP connection refused: its address holds its share of connections");
            continue;
        };
        // Half-open connections give their slots back sooner the fuller the host is.
        let in_use = cap - slots.available_permits();
        let header_timeout = header_deadline(
            in_use,
            cap,
            bounds.header_timeout,
            bounds.header_timeout_floor.min(bounds.header_timeout),
        );
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _held = held;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let connection = http.serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!(%peer, "HTTP connection ended: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(addr: &str) -> SocketAddr {
        addr.parse().unwrap()
    }

    #[test]
    fn loopback_needs_no_auth_and_anything_else_does() {
        assert!(check_listen(at("127.0.0.1:7400"), false).is_ok());
        assert!(check_listen(at("[::1]:7400"), false).is_ok());
        assert!(check_listen(at("127.0.0.2:0"), false).is_ok());
        for addr in ["0.0.0.0:7400", "[::]:7400", "10.1.2.3:80"] {
            let e = check_listen(at(addr), false).unwrap_err();
            assert!(e.to_string().contains("--auth"), "{e}");
            assert!(check_listen(at(addr), true).is_ok());
        }
    }

    #[test]
    fn host_names_parse_with_and_without_ports() {
        assert_eq!(host_name("LocalHost:7400").as_deref(), Some("localhost"));
        assert_eq!(host_name("example.com.").as_deref(), Some("example.com"));
        assert_eq!(host_name("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(host_name("127.0.0.1").as_deref(), Some("127.0.0.1"));
        for bad in ["", "a b", "x:y", "[::1", "[::1]x", "u@h", "h/p"] {
            assert_eq!(host_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_loopback_api_answers_only_to_loopback_names() {
        let check = HostCheck::new(at("127.0.0.1:7400"), &[]);
        for ok in [
            "127.0.0.1:7400",
            "localhost:7400",
            "localhost",
            "[::1]:7400",
            "127.0.0.1",
        ] {
            assert!(check.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:7400",
            "evil.example",
            "10.0.0.1:7400",
            "",
            "localhost.evil",
        ] {
            assert!(!check.allows(bad), "{bad}");
        }
        assert!(check.allows_origin("http://localhost:7400"));
        assert!(!check.allows_origin("https://evil.example"));
        assert!(!check.allows_origin("null"));
    }

    #[test]
    fn a_public_api_answers_to_its_address_and_allowed_names() {
        let check = HostCheck::new(at("10.0.0.5:7400"), &["Api.Example.com".into()]);
        assert!(check.allows("10.0.0.5:7400"));
        assert!(check.allows("api.example.com"));
        assert!(check.allows("API.EXAMPLE.COM:443"));
        assert!(!check.allows("localhost:7400"));
        assert!(!check.allows("127.0.0.1:7400"));
        assert!(!check.allows("other.example.com"));
        let any = HostCheck::new(at("0.0.0.0:7400"), &[]);
        assert!(any.allows("10.0.0.5:7400"));
        assert!(any.allows("192.168.1.9"));
        assert!(!any.allows("rebound.example"));
    }
}
