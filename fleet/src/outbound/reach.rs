//! Which addresses the host's outbound HTTP clients may reach: plain decisions over an address,
//! a port and what the caller's declaration allows, with no I/O.
//!
//! An outbound client acts for a remote party's data (a card names an endpoint, a server
//! redirects), so it must never become a way into the host itself or its network: loopback,
//! private ranges, link-local (cloud metadata services live there) and unspecified addresses are
//! not reached unless the declaration allows the first two, link-local and unspecified never,
//! and no port the host itself listens on (its API and link ports) is reached on any address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of network an address is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressClass {
    /// Anywhere else.
    Public,
    /// This machine (`127.0.0.0/8`, `::1`).
    Loopback,
    /// A private network (`10/8`, `172.16/12`, `192.168/16`, `100.64/10`, `fc00::/7`).
    Private,
    /// The link (`169.254/16`, `fe80::/10`): where cloud metadata services answer.
    LinkLocal,
    /// No address (`0.0.0.0`, `::`), which reaches this machine.
    Unspecified,
    /// Multicast, broadcast, documentation and other reserved ranges: never a server.
    Reserved,
}

impl AddressClass {
    fn words(self) -> &'static str {
        match self {
            Self::Public => "a public address",
            Self::Loopback => "a loopback address (this machine)",
            Self::Private => "a private-network address",
            Self::LinkLocal => "a link-local address",
            Self::Unspecified => "an unspecified address (this machine)",
            Self::Reserved => "a reserved address",
        }
    }
}

/// Which networks beyond the public one a declaration allows its client to reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Networks {
    /// Loopback: for a server on this machine, in local development.
    pub loopback: bool,
    /// Private ranges: for a server on the same private network.
    pub private: bool,
}

/// Why an outbound request was not made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The address is on a network the declaration does not allow.
    Address {
        /// The address.
        ip: IpAddr,
        /// Its network.
        class: AddressClass,
    },
    /// The port is one the host itself listens on.
    OwnListener {
        /// The port.
        port: u16,
    },
    /// A redirect or a card's endpoint leads to another origin.
    OtherOrigin {
        /// Where it started.
        from: String,
        /// Where it led.
        to: String,
    },
    /// The name resolved to no address the client may reach.
    NoAddress {
        /// The name.
        host: String,
    },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Address { ip, class } => match class {
                AddressClass::Loopback | AddressClass::Private => write!(
                    f,
                    "{ip} is {}, which this agent's declaration does not allow (allow_networks: [{}])",
                    class.words(),
                    if *class == AddressClass::Loopback {
                        "loopback"
                    } else {
                        "private"
                    }
                ),
                _ => write!(f, "{ip} is {}, which is never reached", class.words()),
            },
            Self::OwnListener { port } => write!(
                f,
                "port {port} is one this host listens on: its outbound clients never call the host itself"
            ),
            Self::OtherOrigin { from, to } => {
                write!(
                    f,
                    "{to} is not on the origin {from}, and the declaration does not allow it"
                )
            }
            Self::NoAddress { host } => {
                write!(f, "{host} resolves to no address this agent may reach")
            }
        }
    }
}

/// The network of `ip` (an IPv4 address mapped into IPv6 counts as the IPv4 address).
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, ..] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        AddressClass::Private
    } else if ip.is_multicast() || ip.is_broadcast() || ip.is_documentation() || a >= 240 {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let first = ip.segments()[0];
    if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if first & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if first & 0xfe00 == 0xfc00 {
        AddressClass::Private
    } else if ip.is_multicast() || first == 0x2001 && ip.segments()[1] == 0x0db8 {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// Whether a client allowed `networks` may connect to `ip`.
pub fn may_reach(ip: IpAddr, networks: Networks) -> Result<(), Blocked> {
    let class = classify(ip);
    let allowed = match class {
        AddressClass::Public => true,
        AddressClass::Loopback => networks.loopback,
        AddressClass::Private => networks.private,
        AddressClass::LinkLocal | AddressClass::Unspecified | AddressClass::Reserved => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(Blocked::Address { ip, class })
    }
}

/// Whether `port` may be reached on any address: never one of the host's own listeners.
pub fn may_reach_port(port: u16, own_ports: &[u16]) -> Result<(), Blocked> {
    if own_ports.contains(&port) {
        Err(Blocked::OwnListener { port })
    } else {
        Ok(())
    }
}

/// Whether a request that started at origin `from` may go on to origin `to` (a redirect, or a
/// card's endpoint): the same origin, or one the declaration lists.
pub fn may_follow(from: &str, to: &str, allowed: &[String]) -> Result<(), Blocked> {
    if from == to || allowed.iter().any(|a| a.trim_end_matches('/') == to) {
        Ok(())
    } else {
        Err(Blocked::OtherOrigin {
            from: from.to_owned(),
            to: to.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn every_range_is_classified() {
        let cases = [
            ("8.8.8.8", AddressClass::Public),
            ("2606:4700::1111", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.255.0.9", AddressClass::Loopback),
            ("::1", AddressClass::Loopback),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("10.1.2.3", AddressClass::Private),
            ("172.16.0.1", AddressClass::Private),
            ("172.31.255.255", AddressClass::Private),
            ("172.32.0.1", AddressClass::Public),
            ("192.168.1.1", AddressClass::Private),
            ("100.64.0.1", AddressClass::Private),
            ("100.128.0.1", AddressClass::Public),
            ("fd00::1", AddressClass::Private),
            ("::ffff:10.0.0.1", AddressClass::Private),
            ("169.254.169.254", AddressClass::LinkLocal),
            ("fe80::1", AddressClass::LinkLocal),
            ("0.0.0.0", AddressClass::Unspecified),
            ("0.1.2.3", AddressClass::Unspecified),
            ("::", AddressClass::Unspecified),
            ("224.0.0.1", AddressClass::Reserved),
            ("255.255.255.255", AddressClass::Reserved),
            ("192.0.2.1", AddressClass::Reserved),
            ("ff02::1", AddressClass::Reserved),
            ("2001:db8::1", AddressClass::Reserved),
        ];
        for (text, class) in cases {
            assert_eq!(classify(ip(text)), class, "{text}");
        }
    }

    #[test]
    fn only_public_addresses_are_reached_unless_allowed_and_link_local_never() {
        let none = Networks::default();
        let lo = Networks {
            loopback: true,
            private: false,
        };
        let both = Networks {
            loopback: true,
            private: true,
        };
        assert!(may_reach(ip("93.184.216.34"), none).is_ok());
        assert!(may_reach(ip("127.0.0.1"), none).is_err());
        assert!(may_reach(ip("127.0.0.1"), lo).is_ok());
        assert!(may_reach(ip("10.0.0.1"), lo).is_err());
        assert!(may_reach(ip("10.0.0.1"), both).is_ok());
        for never in ["169.254.169.254", "fe80::1", "0.0.0.0", "::", "224.0.0.1"] {
            assert!(may_reach(ip(never), both).is_err(), "{never}");
        }
        let said = may_reach(ip("127.0.0.1"), none).unwrap_err().to_string();
        assert!(said.contains("allow_networks: [loopback]"), "{said}");
    }

    #[test]
    fn the_host_s_own_ports_and_other_origins_are_refused() {
        assert_eq!(
            may_reach_port(7400, &[7400, 7401]),
            Err(Blocked::OwnListener { port: 7400 })
        );
        assert!(may_reach_port(8080, &[7400]).is_ok());
        assert!(may_follow("https://a.example", "https://a.example", &[]).is_ok());
        assert!(may_follow("https://a.example", "https://b.example", &[]).is_err());
        let allowed = ["https://b.example/".to_owned()];
        assert!(may_follow("https://a.example", "https://b.example", &allowed).is_ok());
    }
}
