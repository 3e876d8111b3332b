//! Who an HTTP caller is: the bearer token checked against the host auth file, or an external
//! identity hook, turned into a three-valued [`Identity`].
//!
//! A token that matches a configured one is `present` as `api:<name>` with its roles. No
//! `Authorization` header, or a token that matches none (and no hook, or a hook that says it
//! does not know the token), is `absent`. A hook that cannot answer (it fails, times out, or
//! prints something else) is `unknown`: nothing here invents an identity. Tokens are compared
//! by their SHA-256 digests, so plain and hashed entries are checked the same way and the
//! comparison never short-circuits on the token's own bytes.
//!
//! The hook is bounded: at most `max_concurrent` hook processes run at once (a caller beyond
//! that waits within the hook's timeout, then is `unknown`), and an answer about a token is
//! reused for `cache_s` seconds, so a flood of unknown tokens starts a bounded number of
//! processes. Only answers are cached, never a failure to answer.
//!
//! This module decides nothing about tools or routes: it only reports the identity a run acts
//! for and the [`Requester`] the route rules in [`crate::access`] read.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use consort_actors::visibility::{BearerCheck, Caller, Identity, Principal, RoleGrants};
use consort_config::{AnonymousAccess, HostAuthConfig, IdentityHookConfig, TokenSecret};
use consort_core::directory::Audience;

use crate::access::Requester;

/// The role that makes a token's holder an operator of the host.
pub(crate) const OPERATOR_ROLE: &str = "operator";

/// The token check of one host.
#[derive(Clone, Debug, Default)]
pub struct HostAuth {
    /// (name, digest of the token).
    tokens: Vec<(String, [u8; 32])>,
    grants: RoleGrants,
    hook: Option<Arc<IdentityHook>>,
    anonymous: AnonymousAccess,
}

/// Most token answers the hook cache holds; past it, expired ones go, then everything.
const HOOK_CACHE_ENTRIES: usize = 4_096;

/// The identity hook with its bounds: a cap on processes at once and a cache of answers.
#[derive(Debug)]
struct IdentityHook {
    config: IdentityHookConfig,
    slots: tokio::sync::Semaphore,
    /// Digest of the token → (when answered, the answer).
    answers: Mutex<HashMap<[u8; 32], (Instant, Identity)>>,
}

impl IdentityHook {
    fn new(config: IdentityHookConfig) -> Self {
        Self {
            slots: tokio::sync::Semaphore::new(config.max_concurrent.max(1)),
            config,
            answers: Mutex::new(HashMap::new()),
        }
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(self.config.cache_s)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Identity> {
        let answers = self.answers.lock().ok()?;
        let (at, identity) = answers.get(key)?;
        (at.elapsed() < self.ttl()).then(|| identity.clone())
    }

    fn remember(&self, key: [u8; 32], identity: &Identity) {
        if self.config.cache_s == 0 || *identity == Identity::Unknown {
            return;
        }
        let Ok(mut answers) = self.answers.lock() else {
            return;
        };
        if answers.len() >= HOOK_CACHE_ENTRIES {
            let ttl = self.ttl();
            answers.retain(|_, (at, _)| at.elapsed() < ttl);
            if answers.len() >= HOOK_CACHE_ENTRIES {
                answers.clear();
            }
        }
        answers.insert(key, (Instant::now(), identity.clone()));
    }

    /// Asks the hook about `token`, within its bounds.
    async fn identify(&self, token: &str) -> Identity {
        let key = digest(token);
        if let Some(identity) = self.cached(&key) {
            return identity;
        }
        let timeout = Duration::from_millis(self.config.timeout_ms);
        let started = Instant::now();
        let Ok(Ok(_slot)) = tokio::time::timeout(timeout, self.slots.acquire()).await else {
            tracing::warn!(
                max_concurrent = self.config.max_concurrent,
                "identity hook is busy; identity is unknown"
            );
            return Identity::Unknown;
        };
        // Another caller may have asked about the same token while this one waited.
        if let Some(identity) = self.cached(&key) {
            return identity;
        }
        let left = timeout.saturating_sub(started.elapsed());
        let identity = ask_hook(&self.config, token, left).await;
        self.remember(key, &identity);
        identity
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equality that looks at every byte.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl HostAuth {
    /// A host without an auth file: every HTTP caller is absent.
    pub fn none() -> Self {
        Self::default()
    }

    /// Authentication by the tokens and identity hook of a checked auth file.
    pub fn new(config: &HostAuthConfig) -> Self {
        let mut grants = RoleGrants::new();
        let tokens = config
            .tokens
            .iter()
            .map(|t| {
                grants.grant(Principal::Api(t.name.clone()), t.roles.iter().cloned());
                let d = match &t.secret {
                    TokenSecret::Plain(plain) => digest(plain),
                    TokenSecret::Sha256(d) => *d,
                };
                (t.name.clone(), d)
            })
            .collect();
        Self {
            tokens,
            grants,
            hook: config
                .identity_hook
                .clone()
                .map(|hook| Arc::new(IdentityHook::new(hook))),
            anonymous: config.anonymous,
        }
    }

    /// What callers without a known token may do here.
    pub fn anonymous(&self) -> AnonymousAccess {
        self.anonymous
    }

    /// Who a caller with `identity` is to the route rules of [`crate::access`]. A host without
    /// an auth file has one local operator.
    pub fn requester(&self, identity: &Identity) -> Requester {
        if !self.is_configured() {
            return Requester::LocalOperator;
        }
        match identity {
            Identity::Present(caller) if caller.roles.contains(OPERATOR_ROLE) => {
                Requester::Operator {
                    principal: caller.principal.to_string(),
                }
            }
            Identity::Present(caller) => Requester::Principal {
                principal: caller.principal.to_string(),
            },
            Identity::Absent => Requester::Anonymous,
            Identity::Unknown => Requester::Unverified,
        }
    }

    /// The roles the host grants to `api:<name>` principals.
    pub fn grants(&self) -> &RoleGrants {
        &self.grants
    }

    /// Checks a presented token against the configured ones.
    pub fn check_token(&self, token: &str) -> BearerCheck {
        let presented = digest(token);
        let mut found = None;
        for (name, d) in &self.tokens {
            if same(d, &presented) {
                found = Some(name.clone());
            }
        }
        match found {
            Some(token_name) => BearerCheck::Valid { token_name },
            None => BearerCheck::Invalid,
        }
    }

    /// True when the host has an auth file (tokens or an identity hook).
    pub fn is_configured(&self) -> bool {
        !self.tokens.is_empty() || self.hook.is_some()
    }

    /// Who an HTTP caller with `identity` is to the peer directory. A host without an auth
    /// file serves its local operator (its API listens on loopback); with one, a token with the
    /// `operator` role is an operator, any other token a principal that belongs to no goal,
    /// and a request without a known token is unidentified.
    pub fn audience(&self, identity: &Identity) -> Audience {
        if !self.is_configured() {
            return Audience::Operator;
        }
        match identity {
            Identity::Present(caller) if caller.roles.contains(OPERATOR_ROLE) => Audience::Operator,
            Identity::Present(caller) => Audience::Principal(caller.principal.to_string()),
            Identity::Absent | Identity::Unknown => Audience::Unidentified,
        }
    }

    /// The identity of a request with this `Authorization` header value.
    pub async fn identify(&self, authorization: Option<&str>) -> Identity {
        let Some(header) = authorization else {
            return Identity::from_bearer(&BearerCheck::Missing, &self.grants);
        };
        let Some(token) = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Identity::from_bearer(&BearerCheck::Invalid, &self.grants);
        };
        match self.check_token(token) {
            BearerCheck::Invalid => match &self.hook {
                Some(hook) => hook.identify(token).await,
                None => Identity::Absent,
            },
            check => Identity::from_bearer(&check, &self.grants),
        }
    }
}

/// Asks the external hook about a token no configured one matches, within `timeout`.
async fn ask_hook(hook: &IdentityHookConfig, token: &str, timeout: Duration) -> Identity {
    let Some((program, args)) = hook.command.split_first() else {
        return Identity::Unknown;
    };
    let run = async {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that exits without reading its stdin is judged by its output alone.
            let _ = stdin.write_all(token.as_bytes()).await;
        }
        let out = child.wait_with_output().await.ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()
    };
    let answer = tokio::time::timeout(timeout, run).await.ok().flatten();
    let Some(answer) = answer else {
        tracing::warn!("identity hook could not answer; identity is unknown");
        return Identity::Unknown;
    };
    if answer.get("unknown_token") == Some(&serde_json::Value::Bool(true)) {
        return Identity::Absent;
    }
    let name = answer.get("name").and_then(|n| n.as_str());
    let principal = name.and_then(|n| Principal::parse(&format!("api:{n}")).ok());
    let roles: Option<Vec<String>> = match answer.get("roles") {
        None => Some(Vec::new()),
        Some(v) => v.as_array().and_then(|a| {
            a.iter()
                .map(|r| r.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        }),
    };
    match (principal, roles) {
        (Some(principal), Some(roles)) => {
            Identity::Present(Caller::new(principal, roles.into_iter().collect()))
        }
        _ => Identity::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use consort_config::TokenConfig;

    fn auth(hook: Option<Vec<&str>>) -> HostAuth {
        HostAuth::new(&HostAuthConfig {
            tokens: vec![
                TokenConfig {
                    name: "alice".into(),
                    secret: TokenSecret::Plain("tok-alice".into()),
                    roles: vec!["finance".into()],
                },
                TokenConfig {
                    name: "bob".into(),
                    secret: TokenSecret::Sha256(digest("tok-bob")),
                    roles: vec![],
                },
            ],
            identity_hook: hook.map(|c| IdentityHookConfig {
                command: c.into_iter().map(str::to_owned).collect(),
                timeout_ms: 2000,
                max_concurrent: 2,
                cache_s: 60,
            }),
            anonymous: AnonymousAccess::Refuse,
            file: "host-auth.yaml".into(),
        })
    }

    #[tokio::test]
    async fn tokens_map_to_three_valued_identity() {
        let a = auth(None);
        let Identity::Present(alice) = a.identify(Some("Bearer tok-alice")).await else {
            panic!("alice is present")
        };
        assert_eq!(alice.principal, Principal::Api("alice".into()));
        assert!(alice.roles.contains("finance"));
        assert!(matches!(
            a.identify(Some("Bearer tok-bob")).await,
            Identity::Present(_)
        ));
        assert_eq!(a.identify(None).await, Identity::Absent);
        assert_eq!(a.identify(Some("Bearer nope")).await, Identity::Absent);
        assert_eq!(a.identify(Some("Basic xyz")).await, Identity::Absent);
    }

    #[tokio::test]
    async fn a_hook_that_cannot_answer_is_unknown() {
        let failing = auth(Some(vec!["sh", "-c", "exit 3"]));
        assert_eq!(failing.identify(Some("Bearer x")).await, Identity::Unknown);
        let missing = auth(Some(vec!["/nonexistent/hook"]));
        assert_eq!(missing.identify(Some("Bearer x")).await, Identity::Unknown);
        let says_no = auth(Some(vec!["sh", "-c", "echo '{\"unknown_token\": true}'"]));
        assert_eq!(says_no.identify(Some("Bearer x")).await, Identity::Absent);
        let knows = auth(Some(vec![
            "sh",
            "-c",
            "echo '{\"name\": \"carol\", \"roles\": [\"hr\"]}'",
        ]));
        let Identity::Present(carol) = knows.identify(Some("Bearer x")).await else {
            panic!("carol is present")
        };
        assert_eq!(carol.principal, Principal::Api("carol".into()));
        // A configured token never reaches the hook.
        assert!(matches!(
            failing.identify(Some("Bearer tok-alice")).await,
            Identity::Present(_)
        ));
    }

    #[tokio::test]
    async fn the_hook_runs_a_bounded_number_of_processes_and_caches_answers() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let script = format!(
            "echo x >> {}; sleep 0.2; echo '{{\"name\": \"carol\"}}'",
            count.display()
        );
        let a = auth(Some(vec!["sh", "-c", &script]));
        // Eight callers with one token at once: two processes at a time, one answer reused.
        let mut asks = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let a = a.clone();
            asks.spawn(async move { a.identify(Some("Bearer same")).await });
        }
        while let Some(answer) = asks.join_next().await {
            assert!(matches!(answer.unwrap(), Identity::Present(_)));
        }
        let runs = std::fs::read_to_string(&count).unwrap().lines().count();
        assert!(runs <= 2, "{runs} hook processes for one token");
        // Later asks about it start none.
        a.identify(Some("Bearer same")).await;
        assert_eq!(
            std::fs::read_to_string(&count).unwrap().lines().count(),
            runs
        );
        // A failure to answer is not cached.
        let failing = auth(Some(vec!["sh", "-c", "exit 3"]));
        assert_eq!(failing.identify(Some("Bearer y")).await, Identity::Unknown);
        let Some(hook) = &failing.hook else {
            panic!("hook")
        };
        assert!(hook.cached(&digest("y")).is_none());
    }
}
