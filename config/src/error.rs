//! The one error type of consort-config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("placeholder")]
    Placeholder,
}
