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
//! This module decides nothing about tools: it only reports the identity a run acts for.

use std::process::Stdio;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use consort_actors::visibility::{BearerCheck, Caller, Identity, Principal, RoleGrants};
use consort_config::{HostAuthConfig, IdentityHookConfig, TokenSecret};
use consort_core::directory::Audience;

/// The role that makes a token's holder an operator of the host.
pub(crate) const OPERATOR_ROLE: &str = "operator";

/// The token check of one host.
#[derive(Clone, Debug, Default)]
pub struct HostAuth {
    /// (name, digest of the token).
    tokens: Vec<(String, [u8; 32])>,
    grants: RoleGrants,
    hook: Option<IdentityHookConfig>,
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
            hook: config.identity_hook.clone(),
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
                Some(hook) => ask_hook(hook, token).await,
                None => Identity::Absent,
            },
            check => Identity::from_bearer(&check, &self.grants),
        }
    }
}

/// Asks the external hook about a token no configured one matches.
async fn ask_hook(hook: &IdentityHookConfig, token: &str) -> Identity {
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
    let answer = tokio::time::timeout(Duration::from_millis(hook.timeout_ms), run)
        .await
        .ok()
        .flatten();
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
        (Some(principal), Some(roles)) => Identity::Present(Caller {
            principal,
            roles: roles.into_iter().collect(),
        }),
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
            }),
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
}
