//! The keys of the real-model kinds of `model:`: `kind: openai` (a chat-completions server)
//! and `kind: command` (a local program speaking JSON lines).
//!
//! This module owns [`OpenAiModel`] and [`CommandModel`], their defaults and bounds, and the
//! checks that make a typo an error with file, line and key rather than a failed run: a
//! `base_url` that is not an http(s) URL, an env variable name that cannot be one, a header
//! that cannot be sent. It never reads the environment or the network: the API key is read by
//! the adapter when it makes a request, so the key never sits in a config value.

use std::path::Path;
use std::path::PathBuf;

use serde_saphyr::Spanned;

use super::model::RawModel;
use crate::error::ConfigError;
use crate::yaml::{Ctx, KeyPath, Pos};

/// `model: {kind: openai, …}`: a server that speaks the OpenAI-compatible chat-completions API
/// with tool calls (vLLM, llama.cpp's server, Ollama, hosted APIs).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OpenAiModel {
    /// The API root, without a trailing slash (`http://127.0.0.1:8080/v1`); requests go to
    /// `{base_url}/chat/completions`.
    pub base_url: String,
    /// The model name sent with each request.
    pub model: String,
    /// The environment variable holding the API key, read at each request; `None` sends no
    /// `Authorization` header (local servers).
    pub api_key_env: Option<String>,
    /// Sampling temperature, if set (0 to 2).
    pub temperature: Option<f64>,
    /// The most completion tokens per turn, if set.
    pub max_tokens: Option<u32>,
    /// The longest one request may take, in seconds.
    pub timeout_s: u32,
    /// How many times a request is sent again after a 429, a 5xx, a timeout or a failed
    /// connection.
    pub max_retries: u32,
    /// How many times a turn with a malformed tool call is sent back to the model before the
    /// run fails.
    pub repair_attempts: u32,
    /// Ask for a streamed answer (server-sent events).
    pub stream: bool,
    /// Extra request headers, in order.
    pub headers: Vec<(String, String)>,
    /// The system prompt; `None` uses consort's own, built from the agent's description.
    pub system: Option<String>,
    /// Whether the model may answer in plain text (`auto`) or must call a tool every turn
    /// (`required`, the answer being a `final_answer` call).
    pub tool_choice: ToolChoice,
}

/// `tool_choice:` of `kind: openai`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ToolChoice {
    /// The model answers in text or calls tools, as it likes (the API's default).
    #[default]
    Auto,
    /// Every turn is a tool call; consort offers `final_answer` for the answer. For small
    /// models that describe a tool call in prose instead of making it.
    Required,
}

/// `model: {kind: command, argv: […]}`: a local program that reads one JSON request per line on
/// stdin and answers one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommandModel {
    /// The program and its arguments; a relative program path is relative to the agent's folder.
    pub argv: Vec<String>,
    /// The agent's folder: the program's working directory.
    pub dir: PathBuf,
    /// The longest one answer may take, in seconds; the program is restarted after a timeout.
    pub timeout_s: u32,
    /// How many times a request is sent again to a restarted program after a crash.
    pub max_retries: u32,
    /// As for [`OpenAiModel::repair_attempts`].
    pub repair_attempts: u32,
    /// The system prompt, passed to the program with each request.
    pub system: Option<String>,
}

/// Defaults and bounds of the adapter keys.
impl OpenAiModel {
    /// `timeout_s` when unset.
    pub const DEFAULT_TIMEOUT_S: u32 = 120;
    /// The largest `timeout_s`.
    pub const MAX_TIMEOUT_S: u32 = 3600;
    /// `max_retries` when unset.
    pub const DEFAULT_MAX_RETRIES: u32 = 3;
    /// The largest `max_retries`.
    pub const MAX_RETRIES_BOUND: u32 = 10;
    /// `repair_attempts` when unset.
    pub const DEFAULT_REPAIR_ATTEMPTS: u32 = 2;
    /// The largest `repair_attempts`.
    pub const MAX_REPAIR_ATTEMPTS: u32 = 10;
    /// The largest `max_tokens`.
    pub const MAX_TOKENS_BOUND: u32 = 1_000_000;
}

const OPENAI_ONLY: [&str; 8] = [
    "base_url",
    "model",
    "api_key_env",
    "temperature",
    "max_tokens",
    "stream",
    "headers",
    "tool_choice",
];
const COMMAND_ONLY: [&str; 1] = ["argv"];

/// The adapter keys present in `raw`, with where each was written, in declaration order.
pub(super) fn endpoint_keys(raw: &RawModel) -> Vec<(&'static str, Pos)> {
    fn at<T>(s: &Option<Spanned<T>>) -> Option<Pos> {
        s.as_ref().map(Pos::of)
    }
    [
        ("base_url", at(&raw.base_url)),
        ("model", at(&raw.model)),
        ("api_key_env", at(&raw.api_key_env)),
        ("temperature", at(&raw.temperature)),
        ("max_tokens", at(&raw.max_tokens)),
        ("timeout_s", at(&raw.timeout_s)),
        ("max_retries", at(&raw.max_retries)),
        ("repair_attempts", at(&raw.repair_attempts)),
        ("stream", at(&raw.stream)),
        ("headers", at(&raw.headers)),
        ("system", at(&raw.system)),
        ("tool_choice", at(&raw.tool_choice)),
        ("argv", at(&raw.argv)),
    ]
    .into_iter()
    .filter_map(|(k, p)| p.map(|p| (k, p)))
    .collect()
}

/// Refuses a key of the other adapter kind.
fn foreign_key(
    ctx: Ctx<'_>,
    base: &KeyPath,
    raw: &RawModel,
    foreign: &[&str],
    kind: &str,
    other: &str,
) -> Result<(), ConfigError> {
    match endpoint_keys(raw)
        .into_iter()
        .find(|(k, _)| foreign.contains(k))
    {
        Some((key, at)) => Err(ctx.invalid(
            at,
            &base.key(key),
            format!("`{key}` applies to kind `{other}`, not `{kind}`"),
        )),
        None => Ok(()),
    }
}

/// A number key with a default and an inclusive range.
fn bounded(
    ctx: Ctx<'_>,
    base: &KeyPath,
    key: &str,
    raw: Option<Spanned<u64>>,
    default: u32,
    (low, high): (u32, u32),
) -> Result<u32, ConfigError> {
    let Some(v) = raw else {
        return Ok(default);
    };
    if v.value < u64::from(low) || v.value > u64::from(high) {
        return Err(ctx.invalid(
            Pos::of(&v),
            &base.key(key),
            format!(
                "{key} {} is out of range; expected {low} to {high}",
                v.value
            ),
        ));
    }
    Ok(v.value as u32)
}

/// The keys both adapter kinds read.
struct SharedKeys {
    timeout_s: u32,
    max_retries: u32,
    repair_attempts: u32,
    system: Option<String>,
}

fn shared_keys(
    ctx: Ctx<'_>,
    base: &KeyPath,
    raw: &RawModel,
    default_retries: u32,
) -> Result<SharedKeys, ConfigError> {
    let system = match &raw.system {
        Some(s) if s.value.trim().is_empty() => {
            return Err(ctx.invalid(
                Pos::of(s),
                &base.key("system"),
                "the system prompt is empty; leave `system` out to use consort's own",
            ));
        }
        other => other.as_ref().map(|s| s.value.clone()),
    };
    Ok(SharedKeys {
        timeout_s: bounded(
            ctx,
            base,
            "timeout_s",
            raw.timeout_s.clone(),
            OpenAiModel::DEFAULT_TIMEOUT_S,
            (1, OpenAiModel::MAX_TIMEOUT_S),
        )?,
        max_retries: bounded(
            ctx,
            base,
            "max_retries",
            raw.max_retries.clone(),
            default_retries,
            (0, OpenAiModel::MAX_RETRIES_BOUND),
        )?,
        repair_attempts: bounded(
            ctx,
            base,
            "repair_attempts",
            raw.repair_attempts.clone(),
            OpenAiModel::DEFAULT_REPAIR_ATTEMPTS,
            (0, OpenAiModel::MAX_REPAIR_ATTEMPTS),
        )?,
        system,
    })
}

/// Reads `kind: openai`.
pub(super) fn convert_openai(
    ctx: Ctx<'_>,
    base: &KeyPath,
    at: Pos,
    raw: RawModel,
) -> Result<OpenAiModel, ConfigError> {
    foreign_key(ctx, base, &raw, &COMMAND_ONLY, "openai", "command")?;
    let shared = shared_keys(ctx, base, &raw, OpenAiModel::DEFAULT_MAX_RETRIES)?;
    let Some(url) = raw.base_url else {
        return Err(ctx.schema(at, &base.key("base_url"), "missing required key `base_url` (kind `openai` needs the API root, e.g. http://127.0.0.1:8080/v1)"));
    };
    let base_url = check_base_url(&url.value)
        .map_err(|m| ctx.invalid(Pos::of(&url), &base.key("base_url"), m))?;
    let Some(model) = raw.model else {
        return Err(ctx.schema(
            at,
            &base.key("model"),
            "missing required key `model` (the model name the server serves)",
        ));
    };
    if model.value.trim().is_empty() {
        return Err(ctx.invalid(
            Pos::of(&model),
            &base.key("model"),
            "the model name is empty",
        ));
    }
    let api_key_env = match raw.api_key_env {
        None => None,
        Some(v) if is_env_name(&v.value) => Some(v.value),
        Some(v) => {
            return Err(ctx.invalid(
                Pos::of(&v),
                &base.key("api_key_env"),
                format!(
                    "`{}` is not an environment variable name (letters, digits and `_`, not starting with a digit); name the variable that holds the key, not the key",
                    v.value
                ),
            ));
        }
    };
    let temperature = match raw.temperature {
        None => None,
        Some(t) if t.value.is_finite() && (0.0..=2.0).contains(&t.value) => Some(t.value),
        Some(t) => {
            return Err(ctx.invalid(
                Pos::of(&t),
                &base.key("temperature"),
                format!("temperature {} is out of range; expected 0 to 2", t.value),
            ));
        }
    };
    let max_tokens = match raw.max_tokens {
        None => None,
        Some(v) => Some(bounded(
            ctx,
            base,
            "max_tokens",
            Some(v),
            0,
            (1, OpenAiModel::MAX_TOKENS_BOUND),
        )?),
    };
    let mut headers = Vec::new();
    for (name, value) in raw.headers.map(|h| h.value.0).unwrap_or_default() {
        let key = base.key("headers").key(&name.value);
        if name.value.is_empty() || !name.value.bytes().all(is_token_byte) {
            return Err(ctx.invalid(
                Pos::of(&name),
                &key,
                "not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~)",
            ));
        }
        if name.value.eq_ignore_ascii_case("authorization") {
            return Err(ctx.invalid(
                Pos::of(&name),
                &key,
                "set the key with `api_key_env` (the name of the variable that holds it): a key written in agent.yaml would end up in every copy of the file",
            ));
        }
        if value
            .value
            .bytes()
            .any(|b| b == b'\r' || b == b'\n' || b == 0)
        {
            return Err(ctx.invalid(
                Pos::of(&value),
                &key,
                "a header value must not contain a line break or NUL",
            ));
        }
        headers.push((name.value, value.value));
    }
    let tool_choice = match raw.tool_choice {
        None => ToolChoice::Auto,
        Some(c) if c.value == "auto" => ToolChoice::Auto,
        Some(c) if c.value == "required" => ToolChoice::Required,
        Some(c) => {
            return Err(ctx.invalid(
                Pos::of(&c),
                &base.key("tool_choice"),
                format!("tool_choice `{}` is not one of `auto`, `required`", c.value),
            ));
        }
    };
    Ok(OpenAiModel {
        tool_choice,
        base_url,
        model: model.value,
        api_key_env,
        temperature,
        max_tokens,
        timeout_s: shared.timeout_s,
        max_retries: shared.max_retries,
        repair_attempts: shared.repair_attempts,
        stream: raw.stream.is_some_and(|s| s.value),
        headers,
        system: shared.system,
    })
}

/// Reads `kind: command`.
pub(super) fn convert_command(
    ctx: Ctx<'_>,
    base: &KeyPath,
    at: Pos,
    dir: &Path,
    raw: RawModel,
) -> Result<CommandModel, ConfigError> {
    foreign_key(ctx, base, &raw, &OPENAI_ONLY, "command", "openai")?;
    let shared = shared_keys(ctx, base, &raw, 1)?;
    let Some(argv) = raw.argv else {
        return Err(ctx.schema(
            at,
            &base.key("argv"),
            "missing required key `argv` (the program to run and its arguments)",
        ));
    };
    if argv.value.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(ctx.invalid(
            Pos::of(&argv),
            &base.key("argv"),
            "`argv` needs the program as its first entry",
        ));
    }
    if let Some(i) = argv.value.iter().position(|a| a.contains('\0')) {
        return Err(ctx.invalid(
            Pos::of(&argv),
            &base.key("argv").index(i),
            "an argument must not contain NUL",
        ));
    }
    Ok(CommandModel {
        argv: argv.value,
        dir: dir.to_path_buf(),
        timeout_s: shared.timeout_s,
        max_retries: shared.max_retries,
        repair_attempts: shared.repair_attempts,
        system: shared.system,
    })
}

/// An http(s) URL with a host and no query or fragment, without its trailing slash.
fn check_base_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("`{url}` is not an http:// or https:// URL"))?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{url}` contains a space or a control character"));
    }
    if url.contains(['?', '#']) {
        return Err(format!(
            "`{url}` has a query or a fragment; give the API root only (e.g. http://127.0.0.1:8080/v1)"
        ));
    }
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("`{url}` names no host"));
    }
    if host.contains('@') {
        // The URL goes into error texts and logs; a credential in it would go with it.
        return Err(
            "the URL carries credentials (`user:password@`); set the key with `api_key_env` instead"
                .into(),
        );
    }
    if url.ends_with("/chat/completions") || url.ends_with("/chat/completions/") {
        return Err(format!(
            "`{url}` is the endpoint, not the API root; drop `/chat/completions` (consort adds it)"
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::{check_base_url, is_env_name};

    #[test]
    fn base_urls() {
        assert_eq!(
            check_base_url("http://127.0.0.1:8080/v1/").as_deref(),
            Ok("http://127.0.0.1:8080/v1")
        );
        assert_eq!(
            check_base_url("https://api.example.com/v1").as_deref(),
            Ok("https://api.example.com/v1")
        );
        for bad in [
            "127.0.0.1:8080/v1",
            "ftp://x/v1",
            "http:///v1",
            "http://:80/v1",
            "http://x/v1?key=1",
            "http://x y/v1",
            "http://x/v1/chat/completions",
            "https://user:sk-123@api.example.com/v1",
        ] {
            assert!(check_base_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("OPENAI_API_KEY"));
        assert!(is_env_name("_k1"));
        for bad in ["", "1KEY", "sk-abc123", "A B", "A=B"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }
}
