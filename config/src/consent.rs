//! The consent graph (types only for now).

/// How one declared edge resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeStatus {
    Connected,
    CallerOnly,
    CalleeOnly,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub caller: String,
    pub callee: String,
    pub status: EdgeStatus,
}

#[derive(Clone, Debug, Default)]
pub struct ConsentGraph;
