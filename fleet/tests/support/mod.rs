//! What the fleet crate's integration tests share: agent folders on disk and free loopback
//! ports for fleet.yaml.

#![allow(dead_code)]

use std::path::Path;

/// Writes `<root>/agents/<name>/agent.yaml`.
pub(crate) fn agent(root: &Path, name: &str, yaml: &str) {
    let dir = root.join("agents").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("agent.yaml"), yaml).unwrap();
}

/// A loopback UDP port free right now, for a host's link address in fleet.yaml.
pub(crate) fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
