//! The model an agent.yaml declares (`model:`), as the agent actor asks it.
//!
//! A model set by an embedding app in code replaces this one and survives reloads; a declared
//! model is built again when a reload changes its entry. Building one never fails: a model that
//! cannot be built (a bad endpoint URL) is an [`UnusableModel`] that fails each turn with why.

use std::sync::Arc;

use consort_config::{AgentConfig, ModelConfig};

use crate::model::command::CommandAdapter;
use crate::model::openai::OpenAiAdapter;
use crate::model::{Model, UnusableModel};
use crate::script::ScriptModel;

/// The model `config` declares.
pub(crate) fn declared_model(config: &AgentConfig) -> Arc<dyn Model> {
    match &config.model {
        ModelConfig::Script { steps } => Arc::new(ScriptModel::new(steps.clone())),
        ModelConfig::OpenAi(m) => match OpenAiAdapter::new(m.clone(), config.description.clone()) {
            Ok(adapter) => Arc::new(adapter),
            Err(e) => Arc::new(UnusableModel(e)),
        },
        ModelConfig::Command(m) => Arc::new(CommandAdapter::new(
            m.clone(),
            config.name.clone(),
            config.description.clone(),
        )),
    }
}
