//! What a `search_tools` request may ask: its query length and result limit.
//!
//! The bounds are checked before any ranking or probing, so an oversized request costs
//! nothing and is refused with a typed error the model can read. This module must not rank or
//! decide visibility; it only says whether a request is well formed.

use serde::{Deserialize, Serialize};

use crate::visibility::error::VisibilityError;

/// The longest `search_tools` query, in characters.
pub const MAX_QUERY_CHARS: usize = 512;
/// The largest `search_tools` limit.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// The limit when a request gives none.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;

/// A `search_tools` request, as the model sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Words to match against tool names and descriptions.
    pub query: String,
    #[serde(default = "default_limit")]
    /// The most cards to return (1 to [`MAX_SEARCH_LIMIT`]).
    pub limit: usize,
}

fn default_limit() -> usize {
    DEFAULT_SEARCH_LIMIT
}

/// Refuses a query longer than [`MAX_QUERY_CHARS`] or a limit outside 1 to [`MAX_SEARCH_LIMIT`].
pub(super) fn check_request(request: &SearchRequest) -> Result<(), VisibilityError> {
    let length = request.query.chars().count();
    if length > MAX_QUERY_CHARS {
        return Err(VisibilityError::QueryTooLong {
            length,
            max: MAX_QUERY_CHARS,
        });
    }
    if request.limit == 0 || request.limit > MAX_SEARCH_LIMIT {
        return Err(VisibilityError::LimitOutOfRange {
            limit: request.limit,
            max: MAX_SEARCH_LIMIT,
        });
    }
    Ok(())
}
