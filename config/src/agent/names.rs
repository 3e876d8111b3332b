//! What makes a valid agent (or host) name, and the sentence that says why one is not.
//!
//! Agent names and host names follow one rule, so the fleet loader calls these functions
//! rather than keeping a copy that could drift. This module must stay a pure check with no
//! file or YAML access: the caller knows which key it read, so the caller builds the error.

/// Longest agent (and host) name.
const MAX_NAME_LEN: usize = 64;

/// Whether `name` is a valid agent or host name: 1..=64 of `[a-z0-9_-]`.
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Why `name` fails [`is_valid_name`], worded for an operator.
pub(crate) fn name_problem(name: &str) -> String {
    if name.is_empty() {
        "name is empty; expected 1 to 64 characters of a-z, 0-9, `_` and `-`".to_owned()
    } else if name.len() > MAX_NAME_LEN {
        format!(
            "name is {} characters long; at most {MAX_NAME_LEN} allowed",
            name.len()
        )
    } else {
        format!("invalid name `{name}`; expected only a-z, 0-9, `_` and `-`")
    }
}

/// Checks an agent or host name given outside a file (a CLI flag): `Err` holds the sentence
/// `name_problem` gives.
pub fn check_name(name: &str) -> Result<(), String> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(name_problem(name))
    }
}
