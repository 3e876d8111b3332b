//! The agent card: what an A2A agent says about itself (name, skills, where and how to reach
//! it, how to authenticate), served at [`crate::AGENT_CARD_PATH`].
//!
//! Only the HTTP security scheme (bearer tokens) is modelled field by field, because it is the
//! one consort serves and presents; a remote card's other schemes are kept as raw JSON so that
//! reading such a card never fails on them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An agent's self-description.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// The agent's name.
    pub name: String,
    /// What it does, for people and for models that pick an agent.
    #[serde(default)]
    pub description: String,
    /// Where it is served, and over which binding; the first is preferred.
    #[serde(default)]
    pub supported_interfaces: Vec<AgentInterface>,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    /// The agent's own version.
    #[serde(default)]
    pub version: String,
    /// Where its documentation is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    /// The optional protocol features it supports.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// The security schemes it accepts, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// Which schemes a request must satisfy (any one entry of the list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
    /// The media types it accepts.
    #[serde(default)]
    pub default_input_modes: Vec<String>,
    /// The media types it answers with.
    #[serde(default)]
    pub default_output_modes: Vec<String>,
    /// What it can do.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
    /// An icon for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
}

impl AgentCard {
    /// The URL of the card's first interface of `binding` (`JSONRPC`), if it has one.
    pub fn interface_url(&self, binding: &str) -> Option<&str> {
        self.supported_interfaces
            .iter()
            .find(|i| i.protocol_binding.eq_ignore_ascii_case(binding))
            .map(|i| i.url.as_str())
    }
}

/// One place and binding an agent is served at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// The endpoint's URL.
    pub url: String,
    /// `JSONRPC`, `GRPC` or `HTTP+JSON`.
    pub protocol_binding: String,
    /// A tenant to name in requests, where the server hosts several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The protocol version served there (`1.0`).
    #[serde(default)]
    pub protocol_version: String,
}

/// Who runs an agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentProvider {
    /// The provider's site.
    #[serde(default)]
    pub url: String,
    /// The provider's name.
    #[serde(default)]
    pub organization: String,
}

/// The optional protocol features an agent supports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `SendStreamingMessage` and `SubscribeToTask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Push notification configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    /// `GetExtendedAgentCard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_agent_card: Option<bool>,
    /// Protocol extensions, kept as sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<Value>,
}

/// One thing an agent can do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// The skill's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// Media types it accepts, where they differ from the card's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    /// Media types it answers with, where they differ from the card's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
}

/// How a client may authenticate (protobuf `oneof scheme`: one field names the kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SecurityScheme {
    /// HTTP authentication, such as a bearer token.
    HttpAuthSecurityScheme(HttpAuthSecurityScheme),
    /// Any other kind (API key, OAuth 2.0, OpenID Connect, mutual TLS), kept as sent.
    #[serde(untagged)]
    Other(Value),
}

/// HTTP authentication (RFC 9110 scheme names: `Bearer`, `Basic`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthSecurityScheme {
    /// What the scheme is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The scheme's name, `Bearer` for a bearer token.
    pub scheme: String,
    /// A hint at the token's format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_format: Option<String>,
}

/// Schemes that together satisfy a requirement, each with the scopes it needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityRequirement {
    /// Scheme name → scopes.
    #[serde(default)]
    pub schemes: BTreeMap<String, StringList>,
}

/// A list of strings (protobuf's wrapper for a repeated string inside a map).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StringList {
    /// The strings.
    #[serde(default)]
    pub list: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bearer_card_has_the_protobuf_json_shape() {
        let card = AgentCard {
            name: "cfo".into(),
            description: "Answers spend questions.".into(),
            supported_interfaces: vec![AgentInterface {
                url: "http://127.0.0.1:7700/a2a/cfo".into(),
                protocol_binding: "JSONRPC".into(),
                tenant: None,
                protocol_version: "1.0".into(),
            }],
            version: "0.1.0".into(),
            capabilities: AgentCapabilities {
                streaming: Some(true),
                ..AgentCapabilities::default()
            },
            security_schemes: BTreeMap::from([(
                "bearer".to_owned(),
                SecurityScheme::HttpAuthSecurityScheme(HttpAuthSecurityScheme {
                    scheme: "Bearer".into(),
                    ..HttpAuthSecurityScheme::default()
                }),
            )]),
            security_requirements: vec![SecurityRequirement {
                schemes: BTreeMap::from([("bearer".to_owned(), StringList::default())]),
            }],
            default_input_modes: vec!["text/plain".into()],
            default_output_modes: vec!["text/plain".into()],
            ..AgentCard::default()
        };
        let wire = serde_json::to_value(&card).unwrap();
        assert_eq!(
            wire["securitySchemes"],
            json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}})
        );
        assert_eq!(
            wire["securityRequirements"],
            json!([{"schemes": {"bearer": {"list": []}}}])
        );
        assert_eq!(wire["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        let back: AgentCard = serde_json::from_value(wire).unwrap();
        assert_eq!(back, card);
        assert_eq!(
            back.interface_url("jsonrpc"),
            Some("http://127.0.0.1:7700/a2a/cfo")
        );
        assert_eq!(back.interface_url("GRPC"), None);
    }

    #[test]
    fn other_schemes_are_kept_not_refused() {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "x",
            "securitySchemes": {
                "key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}},
                "oauth": {"oauth2SecurityScheme": {"flows": {}}}
            }
        }))
        .unwrap();
        assert!(matches!(
            card.security_schemes.get("key"),
            Some(SecurityScheme::Other(_))
        ));
        assert_eq!(
            serde_json::to_value(&card.security_schemes).unwrap()["key"],
            json!({"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}})
        );
    }
}
