//! The host's auth file (`consort dev ... --auth host-auth.yaml`): the bearer tokens HTTP
//! callers present, the principal (`api:<name>`) and roles each maps to, and an optional
//! external identity hook.
//!
//! ```yaml
//! tokens:
//!   - name: alice
//!     sha256: 5e88...          # hex SHA-256 of the token (recommended)
//!     roles: [finance]
//!   - name: bob
//!     token: dev-token-bob     # the token itself (development only)
//! identity_hook:
//!   command: [/usr/local/bin/who-is, --json]
//!   timeout_ms: 2000
//!   max_concurrent: 4        # hook processes at once; more callers wait, then are unknown
//!   cache_s: 60              # how long an answer is reused for the same token
//! anonymous: refuse          # or `runs`: callers without a known token may start runs
//! ```
//!
//! Owns the raw shape (unknown keys refused) and its checks, with file:line:col:key errors. It
//! must not check tokens or run the hook: consort-fleet's `auth` module does, from this data.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::error::ConfigError;
use crate::visibility::is_policy_word;
use crate::yaml::{Ctx, KeyPath, Pos, load_file};

/// How a configured token is stored.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSecret {
    /// The token itself (development only).
    Plain(String),
    /// The SHA-256 digest of the token.
    Sha256([u8; 32]),
}

impl std::fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain(_) => f.write_str("Plain(<redacted>)"),
            Self::Sha256(_) => f.write_str("Sha256(..)"),
        }
    }
}

/// One bearer token: `api:<name>` with `roles`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenConfig {
    /// The token's name; a caller using it is `api:<name>`.
    pub name: String,
    /// The bearer secret.
    pub secret: TokenSecret,
    /// Roles the caller holds (what `roles:` policies check).
    pub roles: Vec<String>,
}

/// An external program asked about tokens that match no configured token. It reads the token
/// on stdin and prints `{"name": "...", "roles": [...]}` (a known caller) or
/// `{"unknown_token": true}` (an invalid token); anything else, a non-zero exit or a timeout
/// means it could not answer, and identity is `unknown`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityHookConfig {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// How long it may take, in milliseconds, before identity is `unknown`.
    pub timeout_ms: u64,
    /// How many hook processes may run at once; a caller beyond that waits (within
    /// `timeout_ms`) and is `unknown` if no slot frees.
    pub max_concurrent: usize,
    /// How long, in seconds, an answer about one token is reused (0: never).
    pub cache_s: u64,
}

/// What a caller without a known token may do on a host that has an auth file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnonymousAccess {
    /// Nothing: every route answers 401 (the default).
    #[default]
    Refuse,
    /// Start runs, which act as `anonymous` (tools decide what that identity may use), and
    /// read runs that act as `anonymous`: such callers are indistinguishable, so they share
    /// what they start.
    Runs,
}

/// The host auth file, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostAuthConfig {
    /// The configured tokens.
    pub tokens: Vec<TokenConfig>,
    /// Asked about tokens that match none of `tokens`, if set.
    pub identity_hook: Option<IdentityHookConfig>,
    /// What callers without a known token may do.
    pub anonymous: AnonymousAccess,
    /// The auth file, absolute.
    pub file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHostAuth {
    tokens: Option<Vec<Spanned<RawToken>>>,
    identity_hook: Option<Spanned<RawHook>>,
    anonymous: Option<RawAnonymous>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawAnonymous {
    Refuse,
    Runs,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: Spanned<String>,
    token: Option<Spanned<String>>,
    sha256: Option<Spanned<String>>,
    roles: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHook {
    command: Vec<String>,
    timeout_ms: Option<Spanned<u64>>,
    max_concurrent: Option<Spanned<usize>>,
    cache_s: Option<Spanned<u64>>,
}

/// Longest hook timeout accepted.
pub(crate) const MAX_HOOK_TIMEOUT_MS: u64 = 60_000;
/// Most hook processes at once that a file may ask for.
pub(crate) const MAX_HOOK_CONCURRENCY: usize = 64;
/// Longest an answer may be cached, in seconds.
pub(crate) const MAX_HOOK_CACHE_S: u64 = 3_600;

impl HostAuthConfig {
    /// Reads and checks a host auth file.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let raw: RawHostAuth = load_file(file, "a host auth file with `tokens`")?;
        let ctx = Ctx { file };
        let root = KeyPath::root();
        let mut tokens = Vec::new();
        let mut names = BTreeSet::new();
        let mut secrets: Vec<TokenSecret> = Vec::new();
        for (i, t) in raw.tokens.unwrap_or_default().into_iter().enumerate() {
            let key = root.key("tokens").index(i);
            let at = Pos::of(&t);
            let t = t.value;
            let name = t.name.value.clone();
            if !is_policy_word(&name) {
                return Err(ctx.invalid(
                    Pos::of(&t.name),
                    &key.key("name"),
                    format!("invalid token name `{name}`: expected a letter or digit, then letters, digits, _, . or -"),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(ctx.invalid(
                    Pos::of(&t.name),
                    &key.key("name"),
                    format!("duplicate token name `{name}`"),
                ));
            }
            let secret = match (t.token, t.sha256) {
                (Some(plain), None) => {
                    if plain.value.trim().is_empty() {
                        return Err(ctx.invalid(
                            Pos::of(&plain),
                            &key.key("token"),
                            "a token must not be empty",
                        ));
                    }
                    TokenSecret::Plain(plain.value)
                }
                (None, Some(digest)) => {
                    let mut bytes = [0u8; 32];
                    let text = digest.value.trim();
                    let valid = text.len() == 64
                        && text.is_ascii()
                        && (0..32).all(|j| {
                            u8::from_str_radix(&text[2 * j..2 * j + 2], 16)
                                .map(|b| bytes[j] = b)
                                .is_ok()
                        });
                    if !valid {
                        return Err(ctx.invalid(
                            Pos::of(&digest),
                            &key.key("sha256"),
                            "expected 64 hex digits (the SHA-256 of the token, e.g. from `printf %s TOKEN | sha256sum`)",
                        ));
                    }
                    TokenSecret::Sha256(bytes)
                }
                (Some(_), Some(s)) => {
                    return Err(ctx.schema(
                        Pos::of(&s),
                        &key.key("sha256"),
                        "give either `token` or `sha256`, not both",
                    ));
                }
                (None, None) => {
                    return Err(ctx.schema(
                        at,
                        &key.key("sha256"),
                        "missing required key `sha256` (or `token`)",
                    ));
                }
            };
            if secrets.contains(&secret) {
                return Err(ctx.invalid(at, &key, "the same token is configured twice"));
            }
            secrets.push(secret.clone());
            let mut roles = Vec::new();
            for (j, role) in t.roles.unwrap_or_default().into_iter().enumerate() {
                if !is_policy_word(&role.value) {
                    return Err(ctx.invalid(
                        Pos::of(&role),
                        &key.key("roles").index(j),
                        format!("invalid role name `{}`", role.value),
                    ));
                }
                roles.push(role.value);
            }
            tokens.push(TokenConfig {
                name,
                secret,
                roles,
            });
        }
        let identity_hook = match raw.identity_hook {
            None => None,
            Some(h) => {
                let at = Pos::of(&h);
                let h = h.value;
                if h.command.is_empty() || h.command[0].trim().is_empty() {
                    return Err(ctx.invalid(
                        at,
                        &root.key("identity_hook").key("command"),
                        "the hook command needs at least a program",
                    ));
                }
                let timeout_ms = match h.timeout_ms {
                    None => 2000,
                    Some(n) if (1..=MAX_HOOK_TIMEOUT_MS).contains(&n.value) => n.value,
                    Some(n) => {
                        return Err(ctx.invalid(
                            Pos::of(&n),
                            &root.key("identity_hook").key("timeout_ms"),
                            format!("timeout_ms {} is out of range; expected 1 to {MAX_HOOK_TIMEOUT_MS}", n.value),
                        ));
                    }
                };
                let hook_key = root.key("identity_hook");
                let max_concurrent = match h.max_concurrent {
                    None => 4,
                    Some(n) if (1..=MAX_HOOK_CONCURRENCY).contains(&n.value) => n.value,
                    Some(n) => {
                        return Err(ctx.invalid(
                            Pos::of(&n),
                            &hook_key.key("max_concurrent"),
                            format!("max_concurrent {} is out of range; expected 1 to {MAX_HOOK_CONCURRENCY}", n.value),
                        ));
                    }
                };
                let cache_s = match h.cache_s {
                    None => 60,
                    Some(n) if n.value <= MAX_HOOK_CACHE_S => n.value,
                    Some(n) => {
                        return Err(ctx.invalid(
                            Pos::of(&n),
                            &hook_key.key("cache_s"),
                            format!(
                                "cache_s {} is out of range; expected 0 to {MAX_HOOK_CACHE_S}",
                                n.value
                            ),
                        ));
                    }
                };
                Some(IdentityHookConfig {
                    command: h.command,
                    timeout_ms,
                    max_concurrent,
                    cache_s,
                })
            }
        };
        let anonymous = match raw.anonymous {
            None | Some(RawAnonymous::Refuse) => AnonymousAccess::Refuse,
            Some(RawAnonymous::Runs) => AnonymousAccess::Runs,
        };
        Ok(Self {
            tokens,
            identity_hook,
            anonymous,
            file: file.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<HostAuthConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("host-auth.yaml");
        std::fs::write(&file, text).unwrap();
        HostAuthConfig::load(&file)
    }

    #[test]
    fn loads_plain_and_hashed_tokens() {
        let digest = "a".repeat(64);
        let auth = load(&format!(
            "tokens:\n  - {{name: alice, token: secret-a, roles: [finance]}}\n  - {{name: bob, sha256: \"{digest}\"}}\nidentity_hook: {{command: [who]}}\n"
        ))
        .unwrap();
        assert_eq!(auth.tokens.len(), 2);
        assert_eq!(auth.tokens[0].roles, vec!["finance"]);
        assert_eq!(auth.tokens[1].secret, TokenSecret::Sha256([0xaa; 32]));
        assert_eq!(auth.anonymous, AnonymousAccess::Refuse);
        let hook = auth.identity_hook.unwrap();
        assert_eq!(
            (hook.timeout_ms, hook.max_concurrent, hook.cache_s),
            (2000, 4, 60)
        );
        let open = load("tokens: []\nanonymous: runs\n").unwrap();
        assert_eq!(open.anonymous, AnonymousAccess::Runs);
    }

    #[test]
    fn bad_input_names_file_line_and_key() {
        let e = load("tokens:\n  - {name: alice, token: x, role: [a]}\n").unwrap_err();
        assert_eq!(e.key(), Some("tokens[0].role"), "{e}");
        let e = load("tokens:\n  - {name: alice, sha256: zz}\n").unwrap_err();
        assert_eq!(e.key(), Some("tokens[0].sha256"), "{e}");
        assert_eq!(e.position().map(|p| p.0), Some(2));
        let e = load("tokens:\n  - {name: a, token: x}\n  - {name: a, token: y}\n").unwrap_err();
        assert!(e.to_string().contains("duplicate token name"), "{e}");
        let e = load("tokens:\n  - {name: a}\n").unwrap_err();
        assert!(e.to_string().contains("sha256"), "{e}");
        assert!(e.to_string().contains("host-auth.yaml"), "{e}");
        let e = load("anonymous: everything\n").unwrap_err();
        assert_eq!(e.key(), Some("anonymous"), "{e}");
        let e = load("identity_hook: {command: [who], max_concurrent: 0}\n").unwrap_err();
        assert_eq!(e.key(), Some("identity_hook.max_concurrent"), "{e}");
        let e = load("identity_hook: {command: [who], cache_s: 99999}\n").unwrap_err();
        assert_eq!(e.key(), Some("identity_hook.cache_s"), "{e}");
    }
}
