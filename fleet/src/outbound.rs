//! The host's outbound HTTP clients never act as the host.
//!
//! A client that fetches what a remote party names (an A2A card and the endpoint it lists, a
//! redirect) would otherwise be a way in: a card naming `http://127.0.0.1:<API port>/a2a/vault`
//! made the host call its own API as the local operator. Every such client is built here
//! ([`GuardedClients`]) and checks, by the rules of [`reach`]:
//! - the URL before each request and each redirect: never a port the host itself listens on
//!   ([`OwnListeners`]), on any address; an address literal must be on an allowed network;
//! - every address a name resolves to, at connect time ([`GuardedResolver`]): a name that
//!   resolves to a loopback, private, link-local or unspecified address is not reached unless
//!   the declaration allows loopback or private networks, so DNS rebinding gets nowhere;
//! - redirects stay on the origin they started from.
//!
//! Every request also carries this process's marker ([`MARKER_HEADER`]); the host's API refuses
//! a request that carries it (`api.rs`), so even a path these checks missed never reaches the
//! API as the local operator. This module decides nothing about calls (the caller's step did)
//! and never reads a response.

pub mod reach;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock, RwLock};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::redirect::Policy;

use reach::{Blocked, Networks, may_follow, may_reach, may_reach_port};

/// The header every outbound request of this process carries, with [`marker`] as its value.
pub const MARKER_HEADER: &str = "x-consort-outbound";

/// The most redirects followed (each on the same origin).
const MAX_REDIRECTS: usize = 3;

/// This process's outbound marker: random, made once, never logged.
pub fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| format!("{:032x}", rand::random::<u128>()))
}

/// Whether a request that reached the host's API came from this process's own outbound
/// clients.
pub fn is_own_request(headers: &HeaderMap) -> bool {
    headers
        .get(MARKER_HEADER)
        .is_some_and(|v| v.as_bytes() == marker().as_bytes())
}

/// The ports this host listens on (its HTTP API, its link), which its outbound clients never
/// reach on any address. Shared: the API's port is known only once it is bound.
#[derive(Clone, Debug, Default)]
pub struct OwnListeners(Arc<RwLock<Vec<u16>>>);

impl OwnListeners {
    /// Adds a port the host listens on.
    pub fn add(&self, port: u16) {
        if let Ok(mut ports) = self.0.write()
            && !ports.contains(&port)
        {
            ports.push(port);
        }
    }

    /// The ports known so far.
    pub fn ports(&self) -> Vec<u16> {
        self.0.read().map(|p| p.clone()).unwrap_or_default()
    }
}

/// Checks `url` before a request: not one of the host's ports, and an address literal on an
/// allowed network (a name is checked as it resolves, by [`GuardedResolver`]).
pub fn check_url(
    url: &reqwest::Url,
    networks: Networks,
    own: &OwnListeners,
) -> Result<(), Blocked> {
    if let Some(port) = url.port_or_known_default() {
        may_reach_port(port, &own.ports())?;
    }
    let Some(host) = url.host_str() else {
        return Err(Blocked::NoAddress {
            host: url.to_string(),
        });
    };
    // An IPv6 literal is written in brackets; a name is checked as it resolves.
    match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(ip) => may_reach(ip, networks),
        Err(_) => Ok(()),
    }
}

/// The origin of `url` as `scheme://host[:port]`.
pub fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

/// A resolver that hands the connector only addresses on networks the client may reach.
#[derive(Clone, Copy, Debug)]
pub struct GuardedResolver {
    networks: Networks,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let networks = self.networks;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut first_refusal = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|addr| match may_reach(addr.ip(), networks) {
                    Ok(()) => true,
                    Err(blocked) => {
                        first_refusal.get_or_insert(blocked);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let blocked = first_refusal.unwrap_or(Blocked::NoAddress { host });
                return Err(
                    Box::new(BlockedError(blocked)) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// A refusal as the error a resolver or a redirect hands reqwest.
#[derive(Debug)]
pub struct BlockedError(pub Blocked);

impl std::fmt::Display for BlockedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not reached: {}", self.0)
    }
}

impl std::error::Error for BlockedError {}

/// The refusal a reqwest error carries, if it was one of these checks.
pub fn blocked_of(error: &reqwest::Error) -> Option<Blocked> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(BlockedError(blocked)) = e.downcast_ref::<BlockedError>() {
            return Some(blocked.clone());
        }
        source = e.source();
    }
    None
}

/// One client per allowance of networks, each with the guarded resolver, same-origin
/// redirects and the process marker.
#[derive(Clone, Debug)]
pub struct GuardedClients {
    /// Indexed by `slot` of the networks each allows.
    clients: [reqwest::Client; 4],
    own: OwnListeners,
}

/// Where the client for `networks` is kept.
fn slot(networks: Networks) -> usize {
    usize::from(networks.loopback) | (usize::from(networks.private) << 1)
}

impl GuardedClients {
    /// Clients built from `base` (timeouts and the like) for every allowance of networks.
    pub fn new(
        base: impl Fn() -> reqwest::ClientBuilder,
        own: OwnListeners,
    ) -> Result<Self, reqwest::Error> {
        let build = |slot: usize| {
            let networks = Networks {
                loopback: slot & 1 != 0,
                private: slot & 2 != 0,
            };
            let mut headers = HeaderMap::new();
            if let Ok(value) = HeaderValue::from_str(marker()) {
                headers.insert(MARKER_HEADER, value);
            }
            let redirect_own = own.clone();
            base()
                .dns_resolver(Arc::new(GuardedResolver { networks }))
                .default_headers(headers)
                .redirect(Policy::custom(move |attempt| {
                    let Some(from) = attempt.previous().first().map(origin) else {
                        return attempt.stop();
                    };
                    if attempt.previous().len() > MAX_REDIRECTS {
                        return attempt.stop();
                    }
                    let checked = may_follow(&from, &origin(attempt.url()), &[])
                        .and_then(|()| check_url(attempt.url(), networks, &redirect_own));
                    match checked {
                        Ok(()) => attempt.follow(),
                        Err(blocked) => attempt.error(BlockedError(blocked)),
                    }
                }))
                .build()
        };
        let clients = [build(0)?, build(1)?, build(2)?, build(3)?];
        Ok(Self { clients, own })
    }

    /// The client for a declaration that allows `networks`, once `url` is checked.
    pub fn for_url(
        &self,
        url: &reqwest::Url,
        networks: Networks,
    ) -> Result<&reqwest::Client, Blocked> {
        check_url(url, networks, &self.own)?;
        Ok(&self.clients[slot(networks)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_process_s_marker_marks_a_request_as_its_own() {
        let mut headers = HeaderMap::new();
        assert!(!is_own_request(&headers));
        headers.insert(MARKER_HEADER, HeaderValue::from_static("guess"));
        assert!(!is_own_request(&headers));
        headers.insert(
            MARKER_HEADER,
            HeaderValue::from_str(marker()).expect("ascii"),
        );
        assert!(is_own_request(&headers));
    }

    #[test]
    fn a_url_on_the_host_s_port_or_a_forbidden_literal_is_refused_before_any_request() {
        let own = OwnListeners::default();
        own.add(7400);
        let open = Networks {
            loopback: true,
            private: true,
        };
        let url = |text: &str| reqwest::Url::parse(text).expect("url");
        assert!(matches!(
            check_url(&url("http://api.example:7400/x"), open, &own),
            Err(Blocked::OwnListener { port: 7400 })
        ));
        assert!(check_url(&url("http://127.0.0.1:9000/"), open, &own).is_ok());
        assert!(check_url(&url("http://127.0.0.1:9000/"), Networks::default(), &own).is_err());
        assert!(check_url(&url("http://[::1]:9000/"), Networks::default(), &own).is_err());
        assert!(check_url(&url("http://169.254.169.254/latest"), open, &own).is_err());
        assert!(
            check_url(
                &url("https://agent.example/card"),
                Networks::default(),
                &own
            )
            .is_ok()
        );
    }
}
