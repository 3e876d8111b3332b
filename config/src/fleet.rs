//! `fleet.yaml`: the hosts of a fleet, their addresses and pinned keys, the agents each
//! serves, where each keeps its run stores (`store:`), the operators whose keys may send fleet
//! commands, and the fleet's goals.
//!
//! Owns parsing and checking of the file (unique host names, addresses and keys; unique
//! operator names and keys, none of them a host's key; well-formed ed25519 public keys) and
//! [`FleetConfig::agents`], which loads every host's agent folders,
//! checks that each agent lives on exactly one host and that every goal member is one of them.
//! What a goal declaration may hold is the `goals` module's; this one only embeds it and
//! points its member check at fleet.yaml. It must not resolve host names, open sockets or
//! verify keys cryptographically: addresses are IP literals, keys are 32 bytes that
//! consort-net checks when it uses them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::agent::{
    AddError, AgentSet, RACY_MARGIN, SetBuilder, SnapshotReport, is_valid_name, load_with_snapshot,
    name_problem,
};
use crate::error::ConfigError;
use crate::goals::{GoalsConfig, ParsedGoals, RawDirectory, RawGoal, convert_goals};
use crate::yaml::{Ctx, KeyPath, Pos, load_file};

/// The prefix of a public key in `fleet.yaml`.
pub(crate) const ED25519_PREFIX: &str = "ed25519:";

/// One host of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// The host's name, unique in the fleet.
    pub name: String,
    /// Where its link listens (UDP, QUIC).
    pub address: SocketAddr,
    /// The host's ed25519 public key (pinned for TLS and envelope signatures).
    pub public_key: [u8; 32],
    /// The folders listed under `agents`, absolute (resolved against the folder of
    /// `fleet.yaml`). Each is an agent folder or a folder of agent folders.
    pub agent_dirs: Vec<PathBuf>,
    /// Where the host keeps its agents' run stores (`store:`; SQLite files when absent).
    pub store: StoreConfig,
}

/// A host's `store:`: where its agents' runs are kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreConfig {
    /// `kind: sqlite` (the default): one SQLite file per agent in the host's data folder.
    #[default]
    Sqlite,
    /// `kind: postgres`: one PostgreSQL database, whose connection URL is read from the
    /// environment variable `url_env` when the host starts (never written in the file).
    Postgres {
        /// The environment variable that holds the connection URL.
        url_env: String,
    },
}

/// One operator of the fleet: a person (or system) whose key may send fleet commands
/// (`consort fleet status|drain|...`) to every host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorConfig {
    /// The operator's name, unique among the fleet's operators; signed into every command.
    pub name: String,
    /// The operator's ed25519 public key (backs its TLS client identity and signs commands).
    pub public_key: [u8; 32],
}

/// A parsed and checked `fleet.yaml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetConfig {
    /// The `fleet.yaml` file, absolute.
    pub file: PathBuf,
    /// The hosts, in file order.
    pub hosts: Vec<HostConfig>,
    /// The operators (`operators:`), in file order; empty when the file declares none.
    pub operators: Vec<OperatorConfig>,
    /// Where each host's `agents` entries were written (same indexes as `hosts`), so that
    /// [`FleetConfig::agents`] can point at the entry that caused an error.
    dir_positions: Vec<Vec<Pos>>,
    /// `goals:` and `directory:`, checked on their own; members are checked against the
    /// fleet's agents by [`FleetConfig::agents`], where the agents are loaded.
    goals: ParsedGoals,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    hosts: Vec<Spanned<RawHost>>,
    operators: Option<Vec<Spanned<RawOperator>>>,
    goals: Option<Vec<Spanned<RawGoal>>>,
    directory: Option<Spanned<RawDirectory>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Spanned<String>,
    address: Spanned<String>,
    public_key: Spanned<String>,
    agents: Option<Vec<Spanned<String>>>,
    store: Option<Spanned<RawStore>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    kind: Spanned<String>,
    url_env: Option<Spanned<String>>,
}

/// Checks a host's `store:` (`key` is the path to it).
fn convert_store(
    ctx: Ctx<'_>,
    raw: Option<Spanned<RawStore>>,
    key: &KeyPath,
) -> Result<StoreConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(StoreConfig::Sqlite);
    };
    let at = Pos::of(&raw);
    let raw = raw.value;
    match (raw.kind.value.trim(), raw.url_env) {
        ("sqlite", None) => Ok(StoreConfig::Sqlite),
        ("sqlite", Some(var)) => Err(ctx.invalid(
            Pos::of(&var),
            &key.key("url_env"),
            "`url_env` applies to `kind: postgres` only",
        )),
        ("postgres", None) => Err(ctx.invalid(
            at,
            key,
            "a postgres store needs `url_env`: the environment variable that holds its \
             connection URL (the URL itself is never written in fleet.yaml)",
        )),
        ("postgres", Some(var)) => {
            let name = var.value.trim();
            let first_ok = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !first_ok || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ctx.invalid(
                    Pos::of(&var),
                    &key.key("url_env"),
                    format!(
                        "`{name}` is not an environment variable name (letters, digits and `_`, \
                         not starting with a digit); name the variable that holds the URL, \
                         not the URL"
                    ),
                ));
            }
            Ok(StoreConfig::Postgres {
                url_env: name.to_owned(),
            })
        }
        (other, _) => Err(ctx.invalid(
            Pos::of(&raw.kind),
            &key.key("kind"),
            format!("unknown store kind `{other}`; expected `sqlite` or `postgres`"),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    name: Spanned<String>,
    public_key: Spanned<String>,
}

/// Parses `ed25519:<64 hex chars>` into the 32 key bytes.
pub(crate) fn parse_public_key(text: &str) -> Result<[u8; 32], String> {
    let Some(hex) = text.strip_prefix(ED25519_PREFIX) else {
        return Err(format!(
            "expected `{ED25519_PREFIX}` followed by 64 hex characters"
        ));
    };
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(format!(
            "expected 64 hex characters after `{ED25519_PREFIX}` (a 32-byte key), found {}",
            hex.chars().count()
        ));
    }
    let mut key = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        match (
            pair.first().copied().and_then(digit),
            pair.get(1).copied().and_then(digit),
        ) {
            (Some(h), Some(l)) => key[i] = (h * 16 + l) as u8,
            _ => return Err("the key contains a character that is not a hex digit".to_owned()),
        }
    }
    Ok(key)
}

/// The fleet's agents as one set, and the host that serves each agent (by agent name).
pub type FleetAgents = (AgentSet, BTreeMap<String, String>);

impl FleetConfig {
    /// Reads and checks `fleet.yaml` (agent folders are resolved, not yet loaded, and goal
    /// members are checked for form, not yet against the agents: see [`FleetConfig::agents`]).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = std::fs::canonicalize(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let raw: RawFleet = load_file(&file, "a fleet declaration with `hosts`")?;
        let ctx = Ctx { file: &file };
        let mut hosts: Vec<HostConfig> = Vec::new();
        let mut dir_positions = Vec::new();
        for (i, h) in raw.hosts.into_iter().enumerate() {
            let key = KeyPath::root().key("hosts").index(i);
            let h = h.value;
            let name = h.name.value.clone();
            if !is_valid_name(&name) {
                return Err(ctx.invalid(Pos::of(&h.name), &key.key("name"), name_problem(&name)));
            }
            let address: SocketAddr = h.address.value.trim().parse().map_err(|_| {
                ctx.invalid(
                    Pos::of(&h.address),
                    &key.key("address"),
                    format!(
                        "invalid address `{}`; expected an IP address and port such as 127.0.0.1:7401",
                        h.address.value
                    ),
                )
            })?;
            let public_key = parse_public_key(h.public_key.value.trim())
                .map_err(|m| ctx.invalid(Pos::of(&h.public_key), &key.key("public_key"), m))?;
            for other in &hosts {
                let dup = if other.name == name {
                    Some((
                        Pos::of(&h.name),
                        "name",
                        format!("duplicate host name `{name}`"),
                    ))
                } else if other.address == address {
                    Some((
                        Pos::of(&h.address),
                        "address",
                        format!("address {address} is also used by host `{}`", other.name),
                    ))
                } else if other.public_key == public_key {
                    // One key for two hosts would make the pinned identity ambiguous.
                    Some((
                        Pos::of(&h.public_key),
                        "public_key",
                        format!("this key is also the key of host `{}`", other.name),
                    ))
                } else {
                    None
                };
                if let Some((at, field, msg)) = dup {
                    return Err(ctx.invalid(at, &key.key(field), msg));
                }
            }
            let store = convert_store(ctx, h.store, &key.key("store"))?;
            let entries = h.agents.unwrap_or_default();
            dir_positions.push(entries.iter().map(Pos::of).collect());
            let agent_dirs = entries.into_iter().map(|e| base.join(e.value)).collect();
            hosts.push(HostConfig {
                name,
                address,
                public_key,
                agent_dirs,
                store,
            });
        }
        let operators = convert_operators(ctx, raw.operators.unwrap_or_default(), &hosts)?;
        // After the hosts: errors come in file order, and `goals:` usually follows `hosts:`.
        let goals = convert_goals(ctx, raw.goals, raw.directory)?;
        Ok(Self {
            file,
            hosts,
            operators,
            dir_positions,
            goals,
        })
    }

    /// The operator with this name, if the fleet declares one.
    pub fn operator(&self, name: &str) -> Option<&OperatorConfig> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// The host with this name, if the fleet declares it.
    pub fn host(&self, name: &str) -> Option<&HostConfig> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// Loads the agents of every host: the whole fleet's [`AgentSet`] (checked as one set, so
    /// peers on other hosts count as existing) and, for each agent, the host that serves it.
    /// An agent placed on two hosts, an `agents` entry that is not an agent folder (or a
    /// folder of them) and a goal member that is no agent of the fleet are
    /// [`ConfigError::Invalid`] pointing into `fleet.yaml`.
    pub fn agents(&self) -> Result<FleetAgents, ConfigError> {
        self.agents_into(&mut SetBuilder::new())
    }

    /// As [`FleetConfig::agents`], taking the agents whose agent.yaml is unchanged from the
    /// compiled snapshot at `snapshot` (see [`AgentSet::load_cached`]); errors are the same.
    pub fn agents_cached(
        &self,
        snapshot: &Path,
    ) -> Result<(FleetAgents, SnapshotReport), ConfigError> {
        load_with_snapshot(
            snapshot,
            RACY_MARGIN,
            |b| self.agents_into(b),
            |(set, _)| set,
            || self.agents(),
        )
    }

    fn agents_into(&self, builder: &mut SetBuilder) -> Result<FleetAgents, ConfigError> {
        let ctx = Ctx { file: &self.file };
        let mut placement: BTreeMap<String, String> = BTreeMap::new();
        for (i, host) in self.hosts.iter().enumerate() {
            for (j, dir) in host.agent_dirs.iter().enumerate() {
                let at = self
                    .dir_positions
                    .get(i)
                    .and_then(|p| p.get(j))
                    .copied()
                    .unwrap_or(Pos::START);
                let key = KeyPath::root().key("hosts").index(i).key("agents").index(j);
                if !dir.is_dir() {
                    return Err(ctx.invalid(
                        at,
                        &key,
                        format!("agent folder `{}` does not exist", dir.display()),
                    ));
                }
                let added = match builder.add_path(dir) {
                    Ok(a) => a,
                    Err(AddError::Config(ConfigError::NoAgents { path })) => {
                        return Err(ctx.invalid(
                            at,
                            &key,
                            format!(
                                "`{}` holds no agent.yaml and no agent subfolders",
                                path.display()
                            ),
                        ));
                    }
                    Err(AddError::Duplicate { name, .. }) => {
                        // Name the hosts: the agent files alone do not say which host is which.
                        let first = placement.get(&name).cloned().unwrap_or_default();
                        return Err(ctx.invalid(
                            at,
                            &key,
                            format!(
                                "agent `{name}` is placed on host `{first}` and on host `{}`",
                                host.name
                            ),
                        ));
                    }
                    Err(e) => return Err(e.into()),
                };
                for name in added {
                    placement.insert(name, host.name.clone());
                }
            }
        }
        let set = builder.finish(&[])?;
        // Here rather than in `load`: the members can only be checked once the agents are
        // loaded, and every caller that serves the fleet loads them through this method.
        self.goals.check_members(ctx, &set)?;
        Ok((set, placement))
    }

    /// The goals and directory settings as declared, checked on their own but not against the
    /// fleet's agents: after [`FleetConfig::agents`] succeeded, every member is an agent.
    pub fn declared_goals(&self) -> &GoalsConfig {
        &self.goals.config
    }

    /// The goals and directory settings, with every member checked against the fleet's agents
    /// (loaded through [`FleetConfig::agents`], so its errors are this method's too). A fleet
    /// without `goals:` has [`GoalsConfig::default`].
    pub fn goals(&self) -> Result<GoalsConfig, ConfigError> {
        self.agents()?;
        Ok(self.goals.config.clone())
    }
}

/// Checks `operators:`: valid names, well-formed keys, no name or key twice, and no key that
/// is also a host's (a key seen at a handshake must name one peer, and an operator must never
/// pass for a host or the other way round).
fn convert_operators(
    ctx: Ctx<'_>,
    raw: Vec<Spanned<RawOperator>>,
    hosts: &[HostConfig],
) -> Result<Vec<OperatorConfig>, ConfigError> {
    let mut operators: Vec<OperatorConfig> = Vec::with_capacity(raw.len());
    for (i, o) in raw.into_iter().enumerate() {
        let key = KeyPath::root().key("operators").index(i);
        let o = o.value;
        let name = o.name.value.clone();
        if !is_valid_name(&name) {
            return Err(ctx.invalid(Pos::of(&o.name), &key.key("name"), name_problem(&name)));
        }
        if operators.iter().any(|other| other.name == name) {
            return Err(ctx.invalid(
                Pos::of(&o.name),
                &key.key("name"),
                format!("duplicate operator name `{name}`"),
            ));
        }
        let at_key = Pos::of(&o.public_key);
        let public_key = parse_public_key(o.public_key.value.trim())
            .map_err(|m| ctx.invalid(at_key, &key.key("public_key"), m))?;
        if let Some(host) = hosts.iter().find(|h| h.public_key == public_key) {
            return Err(ctx.invalid(
                at_key,
                &key.key("public_key"),
                format!(
                    "this key is also the key of host `{}`; an operator needs a key of its own (consort keygen --out keys --name {name})",
                    host.name
                ),
            ));
        }
        if let Some(other) = operators
            .iter()
            .find(|other| other.public_key == public_key)
        {
            return Err(ctx.invalid(
                at_key,
                &key.key("public_key"),
                format!("this key is also the key of operator `{}`", other.name),
            ));
        }
        operators.push(OperatorConfig { name, public_key });
    }
    Ok(operators)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const KEY_A: &str = "ed25519:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const KEY_B: &str = "ed25519:FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF";

    fn agent(root: &Path, name: &str, yaml: &str) {
        let d = root.join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("agent.yaml"), yaml).unwrap();
    }

    fn fleet(yaml: &str) -> (tempfile::TempDir, Result<FleetConfig, ConfigError>) {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("fleet.yaml");
        fs::write(&f, yaml).unwrap();
        let r = FleetConfig::load(&f);
        (t, r)
    }

    fn two_hosts(a_agents: &str, b_agents: &str) -> String {
        format!(
            "hosts:\n  - name: alpha\n    address: 127.0.0.1:7401\n    public_key: \"{KEY_A}\"\n    agents: {a_agents}\n  - name: beta\n    address: 127.0.0.1:7402\n    public_key: \"{KEY_B}\"\n    agents: {b_agents}\n"
        )
    }

    fn invalid(e: ConfigError) -> (u64, u64, String, String) {
        match e {
            ConfigError::Invalid {
                line,
                column,
                key,
                message,
                ..
            } => (line, column, key, message),
            other => panic!("expected Invalid, got {other}"),
        }
    }

    fn one_host_with(store: &str) -> String {
        format!(
            "hosts:\n  - name: alpha\n    address: 127.0.0.1:7401\n    public_key: \"{KEY_A}\"\n{store}"
        )
    }

    #[test]
    fn a_hosts_store_is_sqlite_unless_it_says_postgres() {
        let (_t, r) = fleet(&one_host_with(""));
        assert_eq!(r.unwrap().hosts[0].store, StoreConfig::Sqlite);
        let (_t, r) = fleet(&one_host_with("    store: {kind: sqlite}\n"));
        assert_eq!(r.unwrap().hosts[0].store, StoreConfig::Sqlite);
        let (_t, r) = fleet(&one_host_with(
            "    store:\n      kind: postgres\n      url_env: CONSORT_PG_URL\n",
        ));
        assert_eq!(
            r.unwrap().hosts[0].store,
            StoreConfig::Postgres {
                url_env: "CONSORT_PG_URL".into()
            }
        );
    }

    #[test]
    fn a_bad_store_names_its_line_and_key() {
        let cases = [
            (
                "    store: {kind: mysql}\n",
                (5, "hosts[0].store.kind", "unknown store kind `mysql`"),
            ),
            (
                "    store: {kind: postgres}\n",
                (5, "hosts[0].store", "needs `url_env`"),
            ),
            (
                "    store:\n      kind: postgres\n      url_env: postgresql://me@db/consort\n",
                (
                    7,
                    "hosts[0].store.url_env",
                    "not an environment variable name",
                ),
            ),
            (
                "    store:\n      kind: sqlite\n      url_env: CONSORT_PG_URL\n",
                (7, "hosts[0].store.url_env", "`kind: postgres` only"),
            ),
        ];
        for (store, (line, key, message)) in cases {
            let (_t, r) = fleet(&one_host_with(store));
            let (at, _column, found_key, found) = invalid(r.unwrap_err());
            assert_eq!((at, found_key.as_str()), (line, key), "{store}: {found}");
            assert!(found.contains(message), "{store}: {found}");
        }
        // An unknown field under `store:` is refused too.
        let (_t, r) = fleet(&one_host_with(
            "    store: {kind: postgres, url: \"postgresql://db\"}\n",
        ));
        assert!(r.is_err());
    }

    #[test]
    fn loads_hosts_and_places_agents() {
        let (t, r) = fleet(&two_hosts("[agents/cmo]", "[agents/cfo]"));
        agent(
            &t.path().join("agents"),
            "cmo",
            "name: cmo\nagents:\n  can_call: [cfo]\nmodel:\n  script: []\n",
        );
        agent(
            &t.path().join("agents"),
            "cfo",
            "name: cfo\nagents:\n  accept_from: [cmo]\nmodel:\n  script: []\n",
        );
        let f = r.unwrap();
        assert_eq!(f.hosts.len(), 2);
        let alpha = f.host("alpha").unwrap();
        assert_eq!(
            alpha.address,
            "127.0.0.1:7401".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(alpha.public_key[..4], [0, 1, 2, 3]);
        assert_eq!(f.host("beta").unwrap().public_key, [0xff; 32]);
        let base = fs::canonicalize(t.path()).unwrap();
        assert_eq!(alpha.agent_dirs, vec![base.join("agents/cmo")]);
        let (set, placement) = f.agents().unwrap();
        assert_eq!(set.names(), vec!["cfo", "cmo"]);
        assert_eq!(placement.get("cmo").map(String::as_str), Some("alpha"));
        assert_eq!(placement.get("cfo").map(String::as_str), Some("beta"));
        assert_eq!(
            set.get("cmo").map(|a| a.can_call.clone()),
            Some(vec!["cfo".to_string()])
        );
    }

    #[test]
    fn agent_on_two_hosts_is_refused() {
        let (t, r) = fleet(&two_hosts("[agents/cmo]", "[agents]"));
        agent(
            &t.path().join("agents"),
            "cmo",
            "name: cmo\nmodel:\n  script: []\n",
        );
        let (l, c, key, msg) = invalid(r.unwrap().agents().unwrap_err());
        assert_eq!((l, c, key.as_str()), (9, 14, "hosts[1].agents[0]"));
        assert_eq!(
            msg,
            "agent `cmo` is placed on host `alpha` and on host `beta`"
        );
    }

    #[test]
    fn missing_agent_folder_points_at_the_entry() {
        let (t, r) = fleet(&two_hosts("[agents/cmo]", "[]"));
        let (l, c, key, msg) = invalid(r.unwrap().agents().unwrap_err());
        assert_eq!((l, c, key.as_str()), (5, 14, "hosts[0].agents[0]"));
        assert!(msg.contains("does not exist"), "{msg}");
        fs::create_dir_all(t.path().join("agents/cmo")).unwrap();
        let f = FleetConfig::load(&t.path().join("fleet.yaml")).unwrap();
        let (l, _, _, msg) = invalid(f.agents().unwrap_err());
        assert_eq!(l, 5);
        assert!(msg.contains("no agent.yaml"), "{msg}");
    }

    #[test]
    fn host_checks() {
        let good = two_hosts("[]", "[]");
        let (_t, r) = fleet(&good.replace("name: beta", "name: alpha"));
        let (l, c, key, _) = invalid(r.unwrap_err());
        assert_eq!((l, c, key.as_str()), (6, 11, "hosts[1].name"));

        let (_t, r) = fleet(&good.replace("7402", "7401"));
        let (l, c, key, _) = invalid(r.unwrap_err());
        assert_eq!((l, c, key.as_str()), (7, 14, "hosts[1].address"));

        let (_t, r) = fleet(&good.replace(KEY_B, KEY_A));
        let (l, c, key, _) = invalid(r.unwrap_err());
        assert_eq!((l, c, key.as_str()), (8, 17, "hosts[1].public_key"));

        let (_t, r) = fleet(&good.replace("127.0.0.1:7402", "localhost:7402"));
        let (l, c, key, _) = invalid(r.unwrap_err());
        assert_eq!((l, c, key.as_str()), (7, 14, "hosts[1].address"));

        for bad in [
            &KEY_B[..KEY_B.len() - 2],
            "ed25519:zz",
            "rsa:00",
            &KEY_B.replace('F', "g"),
        ] {
            let (_t, r) = fleet(&good.replace(KEY_B, bad));
            let (l, c, key, _) = invalid(r.unwrap_err());
            assert_eq!(
                (l, c, key.as_str()),
                (8, 17, "hosts[1].public_key"),
                "{bad}"
            );
        }
        let (_t, r) = fleet(&good.replace("name: beta", "name: Beta"));
        assert_eq!(invalid(r.unwrap_err()).2, "hosts[1].name");

        let (_t, r) = fleet(&good.replace(
            "    agents: []\n  - name: beta",
            "    agentz: []\n  - name: beta",
        ));
        assert!(matches!(
            r,
            Err(ConfigError::Schema {
                line: 5,
                column: 5,
                ..
            })
        ));
        let (_t, r) = fleet("hosts:\n  - name: a\n");
        assert!(matches!(r, Err(ConfigError::Schema { .. })));
    }

    const KEY_C: &str = "ed25519:2020202020202020202020202020202020202020202020202020202020202020";
    const KEY_D: &str = "ed25519:3030303030303030303030303030303030303030303030303030303030303030";

    #[test]
    fn operators_are_read_with_their_keys() {
        let yaml = format!(
            "{}operators:\n  - name: ops\n    public_key: \"{KEY_C}\"\n  - name: oncall-2\n    public_key: \"{KEY_D}\"\n",
            two_hosts("[]", "[]")
        );
        let (_t, r) = fleet(&yaml);
        let f = r.unwrap();
        assert_eq!(f.operators.len(), 2);
        assert_eq!(f.operator("ops").unwrap().public_key, [0x20; 32]);
        assert_eq!(f.operator("oncall-2").unwrap().public_key, [0x30; 32]);
        assert!(f.operator("alpha").is_none());
        // A fleet without `operators:` has none.
        let (_t, r) = fleet(&two_hosts("[]", "[]"));
        assert!(r.unwrap().operators.is_empty());
    }

    #[test]
    fn operator_errors_point_at_the_entry() {
        let hosts = two_hosts("[]", "[]");
        let with = |ops: &str| format!("{hosts}operators:\n{ops}");
        // Lines 1-9 are the hosts; `operators:` is line 10, the first entry line 11.
        let cases = [
            (
                format!("  - name: Ops\n    public_key: \"{KEY_C}\"\n"),
                (11, 11, "operators[0].name"),
                "invalid name",
            ),
            (
                "  - name: ops\n    public_key: \"ed25519:12\"\n".to_owned(),
                (12, 17, "operators[0].public_key"),
                "64 hex characters",
            ),
            (
                format!("  - name: ops\n    public_key: \"{KEY_A}\"\n"),
                (12, 17, "operators[0].public_key"),
                "also the key of host `alpha`",
            ),
            (
                format!(
                    "  - name: ops\n    public_key: \"{KEY_C}\"\n  - name: ops\n    public_key: \"{KEY_D}\"\n"
                ),
                (13, 11, "operators[1].name"),
                "duplicate operator name `ops`",
            ),
            (
                format!(
                    "  - name: ops\n    public_key: \"{KEY_C}\"\n  - name: ops2\n    public_key: \"{KEY_C}\"\n"
                ),
                (14, 17, "operators[1].public_key"),
                "also the key of operator `ops`",
            ),
        ];
        for (ops, at, needle) in cases {
            let (_t, r) = fleet(&with(&ops));
            let (l, c, key, msg) = invalid(r.unwrap_err());
            assert_eq!((l, c, key.as_str()), at, "{ops}");
            assert!(msg.contains(needle), "{msg}");
        }
        let (_t, r) = fleet(&with("  - name: ops\n    key: \"x\"\n"));
        assert!(matches!(r, Err(ConfigError::Schema { .. })));
    }

    #[test]
    fn public_key_parsing() {
        assert_eq!(parse_public_key(KEY_B), Ok([0xff; 32]));
        assert!(parse_public_key("ed25519:").is_err());
        // Multi-byte characters must not panic the pairwise hex decoding.
        assert!(parse_public_key(&format!("ed25519:{}", "é".repeat(32))).is_err());
    }
}
