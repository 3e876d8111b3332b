//! consort-actors
