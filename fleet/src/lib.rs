//! consort-fleet
