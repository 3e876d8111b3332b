//! The facade's public API is chosen, not leaked: `tests/public_api.txt` lists every item an
//! embedding app can name as `consort::<item>`, and this test fails when the facade and the
//! list disagree, so a change to the API is a reviewed diff of that file.
//!
//! Two checks, both on stable Rust (rustdoc's JSON output would need nightly):
//! - at compile time, the `use consort::{…}` below imports every listed item: an item removed
//!   from the facade (or renamed) stops this file from compiling;
//! - at run time, the items of `src/lib.rs`'s `pub` lines (each `pub use`, expanded, and any
//!   item defined there) are compared with the list, and the list with the import below: an item
//!   added to the facade and not listed fails with the difference spelled out.
//!
//! To change the API: edit `src/lib.rs`, then the item's line in `tests/public_api.txt` and the
//! `use consort::{…}` here, and run `cargo test --test public_api`.

use std::collections::BTreeSet;

// Every item of tests/public_api.txt. Not used otherwise: importing is the check.
#[allow(unused_imports)]
use consort::{
    ActorsError, AgentConfig, AgentConfigBuilder, AgentOptions, AgentSet, AgentStatus, CallStep,
    Channel, ConfigError, Cost, Decided, EventRecord, FleetError, FolderLock, Host, HostSpec,
    HostSpecBuilder, Identity, Limits, McpClient, Message, Model, ModelConfig, ModelError,
    ModelFuture, ModelReply, ModelRequest, ModelStep, OnHeld, PostgresUrl, Refusal, Reloaded,
    RestartBudget, RunCounts, RunId, RunRecord, RunStatus, ScriptStep, StoreBackend, StoreLease,
    Tool, ToolContext, ToolError, ToolFuture, ToolServers, ToolSpec, ToolStep, ToolUse, TreeLimits,
};

const FACADE: &str = include_str!("../src/lib.rs");
const LISTED: &str = include_str!("public_api.txt");
const THIS_FILE: &str = include_str!("public_api.rs");

/// The items of `public_api.txt`: each line not blank and not a `#` comment.
fn listed() -> BTreeSet<String> {
    LISTED
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// `source` without its `//` comments (doc comments included), so a path named in prose is
/// never taken for an item.
fn without_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names a `use` tree brings in: `a::b::C` is `C`, `a::{B, c::D as E}` is `B` and `E`,
/// `a::b as c` is `c`. A glob cannot be listed, so it is reported as `*` (and fails).
fn use_tree_names(tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let inner = tree[open + 1..].trim_end().trim_end_matches('}');
        // Split on the commas at this level only.
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_tree_names(&inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        use_tree_names(&inner[start..], out);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let name = match tree.split_once(" as ") {
        Some((_, alias)) => alias.trim(),
        None => tree.rsplit("::").next().unwrap_or(tree).trim(),
    };
    if name != "self" && name != "_" {
        out.push(name.to_owned());
    }
}

/// What `src/lib.rs` makes public at the crate root, as `consort::<name>`: every `pub use`
/// expanded, and every item defined there with plain `pub` (`pub(crate)` is not public).
fn exported() -> BTreeSet<String> {
    let code = without_comments(FACADE);
    let mut names = Vec::new();
    let mut lines = code.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if let Some(first) = line.strip_prefix("pub use ") {
            // The statement runs to its `;`, over as many lines as a `{…}` group takes.
            let mut tree = first.to_owned();
            while !tree.contains(';') {
                match lines.next() {
                    Some(more) => tree.push_str(more),
                    None => break,
                }
            }
            let tree = tree.split(';').next().unwrap_or_default();
            use_tree_names(tree, &mut names);
            continue;
        }
        // An item defined in the facade itself: `pub fn name`, `pub struct Name`, `pub mod m`.
        let mut words = line.split_whitespace();
        if words.next() != Some("pub") {
            continue;
        }
        let mut kind = words.next();
        if kind == Some("async") || kind == Some("unsafe") {
            kind = words.next();
        }
        let defines = [
            "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union",
        ];
        if let (Some(kind), Some(name)) = (kind, words.next())
            && defines.contains(&kind)
        {
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names.into_iter().map(|n| format!("consort::{n}")).collect()
}

/// The items the `use consort::{…}` of this file imports.
fn imported_here() -> BTreeSet<String> {
    let code = without_comments(THIS_FILE);
    let Some(start) = code.find("use consort::{") else {
        panic!("tests/public_api.rs lost its `use consort::{{…}}`");
    };
    let rest = &code[start + "use consort::".len()..];
    let end = rest.find('}').map_or(rest.len(), |i| i + 1);
    let mut names = Vec::new();
    use_tree_names(&rest[..end], &mut names);
    names.into_iter().map(|n| format!("consort::{n}")).collect()
}

/// The lines one set has and the other lacks, for a failure message that says what to do.
fn difference(
    what: &str,
    have: &BTreeSet<String>,
    want: &BTreeSet<String>,
    fix: &str,
) -> Option<String> {
    let added: Vec<&String> = have.difference(want).collect();
    let missing: Vec<&String> = want.difference(have).collect();
    if added.is_empty() && missing.is_empty() {
        return None;
    }
    let mut message = format!("{what} differs from tests/public_api.txt ({fix}):\n");
    for item in added {
        message.push_str(&format!("+ {item}\n"));
    }
    for item in missing {
        message.push_str(&format!("- {item}\n"));
    }
    Some(message)
}

#[test]
fn the_facade_exports_exactly_the_listed_items() {
    let problem = difference(
        "src/lib.rs",
        &exported(),
        &listed(),
        "`+` is exported but not listed, `-` listed but not exported; \
         update the list (and the `use` in tests/public_api.rs) if the change is meant",
    );
    assert!(problem.is_none(), "{}", problem.unwrap_or_default());
}

#[test]
fn every_listed_item_is_imported_by_this_test() {
    let problem = difference(
        "the `use consort::{…}` of tests/public_api.rs",
        &imported_here(),
        &listed(),
        "the import is what fails to compile when an item goes: keep it equal to the list",
    );
    assert!(problem.is_none(), "{}", problem.unwrap_or_default());
}

#[test]
fn the_list_is_sorted_and_has_no_duplicates() {
    let lines: Vec<&str> = LISTED
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        lines, sorted,
        "tests/public_api.txt must be sorted, one item per line, each once"
    );
}

#[test]
fn the_parser_reads_groups_aliases_and_definitions() {
    let mut names = Vec::new();
    use_tree_names("a::{B, c::{D, E as F}, self}", &mut names);
    use_tree_names("x::y as z", &mut names);
    assert_eq!(names, ["B", "D", "F", "z"]);
}
