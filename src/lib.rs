//! consort
