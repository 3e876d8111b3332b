//! Tests of `model: {kind: openai | command, …}`: what a well-formed declaration reads as, and
//! that every mistake names its key and line.

use super::{err, load_text};
use crate::agent::{CommandModel, ModelConfig, OpenAiModel, ToolChoice};

#[test]
fn an_openai_model_reads_with_its_defaults() {
    let a = load_text(
        b"name: x\nmodel:\n  kind: openai\n  base_url: http://127.0.0.1:8088/v1/\n  model: qwen\n",
    )
    .unwrap();
    assert_eq!(
        a.model,
        ModelConfig::OpenAi(OpenAiModel {
            base_url: "http://127.0.0.1:8088/v1".into(),
            model: "qwen".into(),
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            timeout_s: OpenAiModel::DEFAULT_TIMEOUT_S,
            max_retries: OpenAiModel::DEFAULT_MAX_RETRIES,
            repair_attempts: OpenAiModel::DEFAULT_REPAIR_ATTEMPTS,
            stream: false,
            headers: vec![],
            system: None,
            tool_choice: ToolChoice::Auto,
        })
    );
}

#[test]
fn an_openai_model_reads_every_key() {
    let a = load_text(
        b"name: x\nmodel:\n  kind: openai\n  base_url: https://api.example.com/v1\n  model: m\n  api_key_env: EXAMPLE_KEY\n  temperature: 0.2\n  max_tokens: 512\n  timeout_s: 30\n  max_retries: 5\n  repair_attempts: 1\n  stream: true\n  tool_choice: required\n  headers: {X-Team: finance}\n  system: You answer in one line.\n",
    )
    .unwrap();
    let ModelConfig::OpenAi(m) = a.model else {
        panic!("{:?}", a.model)
    };
    assert_eq!(m.api_key_env.as_deref(), Some("EXAMPLE_KEY"));
    assert_eq!(
        (
            m.temperature,
            m.max_tokens,
            m.timeout_s,
            m.max_retries,
            m.repair_attempts
        ),
        (Some(0.2), Some(512), 30, 5, 1)
    );
    assert!(m.stream);
    assert_eq!(m.tool_choice, ToolChoice::Required);
    assert_eq!(m.headers, vec![("X-Team".into(), "finance".into())]);
    assert_eq!(m.system.as_deref(), Some("You answer in one line."));
}

#[test]
fn a_command_model_runs_in_the_agent_folder() {
    let a =
        load_text(b"name: x\nmodel: {kind: command, argv: [./model.py, --fast], timeout_s: 5}\n")
            .unwrap();
    assert_eq!(
        a.model,
        ModelConfig::Command(CommandModel {
            argv: vec!["./model.py".into(), "--fast".into()],
            dir: a.dir.clone(),
            timeout_s: 5,
            max_retries: 1,
            repair_attempts: OpenAiModel::DEFAULT_REPAIR_ATTEMPTS,
            system: None,
        })
    );
}

#[test]
fn the_script_model_may_name_its_kind() {
    let a = load_text(b"name: x\nmodel: {kind: script, script: [{answer: hi}]}\n").unwrap();
    assert!(matches!(a.model, ModelConfig::Script { ref steps } if steps.len() == 1));
}

#[test]
fn mistakes_name_their_key_and_line() {
    let cases: &[(&str, (&str, u64, &str), &str)] = &[
        (
            "name: x\nmodel:\n  kind: openai\n  model: m\n",
            ("schema", 3, "model.base_url"),
            "missing required key `base_url`",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: localhost:8080\n  model: m\n",
            ("invalid", 4, "model.base_url"),
            "not an http:// or https:// URL",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n",
            ("schema", 3, "model.model"),
            "missing required key `model`",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  api_key_env: sk-live-123\n",
            ("invalid", 6, "model.api_key_env"),
            "not an environment variable name",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  temperature: 3\n",
            ("invalid", 6, "model.temperature"),
            "expected 0 to 2",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  timeout_s: 0\n",
            ("invalid", 6, "model.timeout_s"),
            "expected 1 to 3600",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  headers:\n    Authorization: Bearer sk\n",
            ("invalid", 7, "model.headers.Authorization"),
            "api_key_env",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  argv: [x]\n",
            ("invalid", 6, "model.argv"),
            "applies to kind `command`",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  tool_choice: always\n",
            ("invalid", 6, "model.tool_choice"),
            "not one of `auto`, `required`",
        ),
        (
            "name: x\nmodel:\n  kind: command\n  argv: []\n",
            ("invalid", 4, "model.argv"),
            "needs the program",
        ),
        (
            "name: x\nmodel:\n  kind: command\n  argv: [p]\n  base_url: http://h/v1\n",
            ("invalid", 5, "model.base_url"),
            "applies to kind `openai`",
        ),
        (
            "name: x\nmodel:\n  script: []\n  model: m\n",
            ("invalid", 4, "model.model"),
            "does not apply to the script model",
        ),
        (
            "name: x\nmodel:\n  kind: openai\n  base_url: http://h/v1\n  model: m\n  script: []\n",
            ("invalid", 6, "model.script"),
            "does not apply to kind `openai`",
        ),
        (
            "name: x\nmodel:\n  kind: gpt\n",
            ("schema", 3, "model.kind"),
            "",
        ),
        (
            "name: x\nmodel: {}\n",
            ("schema", 2, "model"),
            "missing `kind`",
        ),
    ];
    for (yaml, (kind, line, key), needle) in cases {
        let (k, l, _, got_key, msg) = err(yaml);
        assert_eq!(
            (k, l, got_key.as_str()),
            (*kind, *line, *key),
            "{yaml}\n{msg}"
        );
        assert!(msg.contains(needle), "{yaml}\n{msg}");
    }
}
