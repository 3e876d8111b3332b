//! Goals: named sets of member agents that may see each other in the peer directory, and the
//! directory's settings.
//!
//! This module owns [`GoalsConfig`] and the shape it is written in (`goals:` and `directory:`,
//! top-level keys of `fleet.yaml` or of a `goals.yaml` in a `consort dev` folder), the checks of
//! one declaration (valid and unique goal names, non-empty member lists without repeats,
//! settings within their bounds), the check that every member is an agent of the set, and the
//! merge of several dev folders' `goals.yaml` files ([`load_dev_goals`]). Every error names the
//! file, line, column and key.
//!
//! It must not decide what a goal lets an agent see, build the directory or track presence:
//! that is the runtime's. Here it is plain data in, plain data (or a located error) out.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::agent::{AgentSet, is_valid_name, name_problem};
use crate::error::{ConfigError, known_list};
use crate::yaml::{Ctx, KeyPath, Pos, load_file};

/// The file name of a dev folder's goal declarations.
const GOALS_FILE: &str = "goals.yaml";

/// One goal: a name and the agents that belong to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalConfig {
    /// The goal's name (`name:`), unique among the goals of a fleet (or a dev run).
    pub name: String,
    /// Its members (`agents:`), in file order, each named once.
    pub agents: Vec<String>,
}

/// How the peer directory is served (`directory:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectorySettings {
    /// The most rows one directory answer holds (`row_cap`, 1..=1000; default 24).
    pub row_cap: usize,
    /// How long a presence probe may take before the peer counts as absent, in milliseconds
    /// (`presence_deadline_ms`, 100..=30000; default 2000).
    pub presence_deadline_ms: u64,
    /// How long open work may keep its status before the attention rollup lists it as not
    /// advancing, in seconds (`no_advancement_after_s`, 1..=86400; default 300).
    pub no_advancement_after_s: u64,
    /// How long after a delivery's receipt activity of the run is watched for before the
    /// delivery counts as stalled, in seconds (`activity_window_s`, 1..=600; default 5).
    pub activity_window_s: u64,
}

impl Default for DirectorySettings {
    fn default() -> Self {
        Self {
            row_cap: 24,
            presence_deadline_ms: 2_000,
            no_advancement_after_s: 300,
            activity_window_s: 5,
        }
    }
}

/// The goals of a fleet (or a dev run) and the directory's settings.
///
/// The default is what a fleet without `goals:` gets: no goals, default settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GoalsConfig {
    /// The goals, in declaration order (for dev folders: folder order, then file order).
    pub goals: Vec<GoalConfig>,
    /// The directory's settings.
    pub directory: DirectorySettings,
}

impl GoalsConfig {
    /// The names of the goals `agent` belongs to, in declaration order (empty when none).
    pub fn goals_of(&self, agent: &str) -> Vec<&str> {
        self.goals
            .iter()
            .filter(|g| g.agents.iter().any(|a| a == agent))
            .map(|g| g.name.as_str())
            .collect()
    }

    /// The goal with this name, if one is declared.
    pub fn goal(&self, name: &str) -> Option<&GoalConfig> {
        self.goals.iter().find(|g| g.name == name)
    }
}

// The raw shapes. fleet.yaml embeds `goals` and `directory` in its own raw struct (serde's
// `flatten` does not combine with `deny_unknown_fields`), so these are crate-visible.

/// One entry of `goals:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGoal {
    name: Spanned<String>,
    agents: Spanned<Vec<Spanned<String>>>,
}

/// `directory:`; an absent key keeps its default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDirectory {
    row_cap: Option<Spanned<u64>>,
    presence_deadline_ms: Option<Spanned<u64>>,
    no_advancement_after_s: Option<Spanned<u64>>,
    activity_window_s: Option<Spanned<u64>>,
}

/// A dev folder's `goals.yaml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGoalsFile {
    goals: Option<Vec<Spanned<RawGoal>>>,
    directory: Option<Spanned<RawDirectory>>,
}

/// Where one goal's name and members were written.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GoalSpans {
    name: Pos,
    agents: Vec<Pos>,
}

/// Goals checked on their own (not yet against the agents), with the positions the member
/// check and the merge of dev files point at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ParsedGoals {
    pub(crate) config: GoalsConfig,
    /// Same indexes as `config.goals`.
    spans: Vec<GoalSpans>,
    /// Where `directory:` was written, when it was.
    directory_at: Option<Pos>,
}

/// Checks the declaration on its own: goal names valid and unique, member lists non-empty
/// without repeats, settings within bounds. Members are checked for form here and for
/// existence by [`ParsedGoals::check_members`], which needs the agents.
pub(crate) fn convert_goals(
    ctx: Ctx<'_>,
    goals: Option<Vec<Spanned<RawGoal>>>,
    directory: Option<Spanned<RawDirectory>>,
) -> Result<ParsedGoals, ConfigError> {
    let mut parsed = ParsedGoals::default();
    for (i, g) in goals.unwrap_or_default().into_iter().enumerate() {
        let key = KeyPath::root().key("goals").index(i);
        let g = g.value;
        let name_at = Pos::of(&g.name);
        let name = g.name.value;
        if !is_valid_name(&name) {
            return Err(ctx.invalid(name_at, &key.key("name"), name_problem(&name)));
        }
        if parsed.config.goal(&name).is_some() {
            return Err(ctx.invalid(
                name_at,
                &key.key("name"),
                format!("duplicate goal name `{name}`"),
            ));
        }
        if g.agents.value.is_empty() {
            // A goal nobody belongs to shows nobody anything: almost surely a slip.
            return Err(ctx.invalid(
                Pos::of(&g.agents),
                &key.key("agents"),
                format!("goal `{name}` has no agents; list at least one"),
            ));
        }
        let mut agents: Vec<String> = Vec::new();
        let mut positions = Vec::new();
        for (j, a) in g.agents.value.into_iter().enumerate() {
            let at = Pos::of(&a);
            let member_key = key.key("agents").index(j);
            if !is_valid_name(&a.value) {
                return Err(ctx.invalid(at, &member_key, name_problem(&a.value)));
            }
            if agents.contains(&a.value) {
                return Err(ctx.invalid(
                    at,
                    &member_key,
                    format!("agent `{}` is listed twice in goal `{name}`", a.value),
                ));
            }
            agents.push(a.value);
            positions.push(at);
        }
        parsed.config.goals.push(GoalConfig { name, agents });
        parsed.spans.push(GoalSpans {
            name: name_at,
            agents: positions,
        });
    }
    if let Some(d) = directory {
        parsed.directory_at = Some(Pos::of(&d));
        parsed.config.directory = convert_directory(ctx, d.value)?;
    }
    Ok(parsed)
}

/// Reads `directory:` against its bounds; a value outside its bound names its key and range.
fn convert_directory(ctx: Ctx<'_>, raw: RawDirectory) -> Result<DirectorySettings, ConfigError> {
    let bounded =
        |value: Option<Spanned<u64>>, key: &str, min: u64, max: u64, default: u64| match value {
            None => Ok(default),
            Some(v) if (min..=max).contains(&v.value) => Ok(v.value),
            Some(v) => Err(ctx.invalid(
                Pos::of(&v),
                &KeyPath::root().key("directory").key(key),
                format!("must be between {min} and {max} (got {})", v.value),
            )),
        };
    let default = DirectorySettings::default();
    let row_cap = bounded(raw.row_cap, "row_cap", 1, 1_000, default.row_cap as u64)?;
    Ok(DirectorySettings {
        // Bounded by 1000 just above, so the conversion cannot truncate.
        row_cap: row_cap as usize,
        presence_deadline_ms: bounded(
            raw.presence_deadline_ms,
            "presence_deadline_ms",
            100,
            30_000,
            default.presence_deadline_ms,
        )?,
        no_advancement_after_s: bounded(
            raw.no_advancement_after_s,
            "no_advancement_after_s",
            1,
            86_400,
            default.no_advancement_after_s,
        )?,
        activity_window_s: bounded(
            raw.activity_window_s,
            "activity_window_s",
            1,
            600,
            default.activity_window_s,
        )?,
    })
}

impl ParsedGoals {
    /// Checks that every member is an agent of `agents`; the error points at the member's
    /// entry in the file `ctx` names and lists the known agents.
    pub(crate) fn check_members(&self, ctx: Ctx<'_>, agents: &AgentSet) -> Result<(), ConfigError> {
        for (i, (goal, spans)) in self.config.goals.iter().zip(&self.spans).enumerate() {
            for (j, member) in goal.agents.iter().enumerate() {
                if agents.get(member).is_none() {
                    let at = spans.agents.get(j).copied().unwrap_or(spans.name);
                    return Err(ctx.invalid(
                        at,
                        &KeyPath::root().key("goals").index(i).key("agents").index(j),
                        format!(
                            "goal `{}` names agent `{member}`, which no host serves (agents: {})",
                            goal.name,
                            known_list(&agents.names())
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The goals of a `consort dev` run: reads `goals.yaml` in each of `dirs` that holds one (an
/// agent folder given directly may hold one beside its `agent.yaml`; the agent folders inside a
/// folder of agent folders are not searched) and checks every member against `agents`.
///
/// Goals of several files are merged in the order of `dirs`. A goal name declared in two files
/// is an error at its second declaration; so are `directory:` settings given in a second file.
/// Without any `goals.yaml` the result is [`GoalsConfig::default`].
pub fn load_dev_goals(dirs: &[PathBuf], agents: &AgentSet) -> Result<GoalsConfig, ConfigError> {
    let mut merged = GoalsConfig::default();
    // Which file declared each goal and the settings, to name it in the second file's error.
    let mut declared_in: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut directory_from: Option<PathBuf> = None;
    for dir in dirs {
        let given = dir.join(GOALS_FILE);
        if !given.is_file() {
            continue;
        }
        let file = absolute(&given)?;
        let raw: RawGoalsFile = load_file(&file, "a goals declaration with `goals`")?;
        let ctx = Ctx { file: &file };
        let parsed = convert_goals(ctx, raw.goals, raw.directory)?;
        parsed.check_members(ctx, agents)?;
        for (i, (goal, spans)) in parsed
            .config
            .goals
            .into_iter()
            .zip(parsed.spans)
            .enumerate()
        {
            if let Some(first) = declared_in.get(&goal.name) {
                return Err(ctx.invalid(
                    spans.name,
                    &KeyPath::root().key("goals").index(i).key("name"),
                    format!(
                        "goal `{}` is also declared in {}",
                        goal.name,
                        first.display()
                    ),
                ));
            }
            declared_in.insert(goal.name.clone(), file.clone());
            merged.goals.push(goal);
        }
        if let Some(at) = parsed.directory_at {
            if let Some(first) = &directory_from {
                // Two sets of settings for one directory: neither can be right silently.
                return Err(ctx.invalid(
                    at,
                    &KeyPath::root().key("directory"),
                    format!(
                        "directory settings are also given in {}; give them in one goals.yaml only",
                        first.display()
                    ),
                ));
            }
            merged.directory = parsed.config.directory;
            directory_from = Some(file.clone());
        }
    }
    Ok(merged)
}

fn absolute(file: &Path) -> Result<PathBuf, ConfigError> {
    // canonicalize, as agent folders are: errors then name the file the same way agent.yaml
    // errors do, whatever form the folder was given in.
    std::fs::canonicalize(file).map_err(|source| ConfigError::Io {
        path: file.to_path_buf(),
        source,
    })
}
