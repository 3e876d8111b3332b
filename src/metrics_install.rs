//! The binary's half of metrics: install the Prometheus recorder every library records into.
//!
//! Libraries only record (through the `metrics` facade); a process has one global recorder,
//! and choosing it is the program's business, not a library's. `consort dev` and `consort
//! serve` install it here, before they start a host (a handle registered before the recorder
//! is installed stays a no-op), and hand its handle to the host's HTTP API, which renders it
//! at `GET /metrics`. It decides nothing else.

use anyhow::{Context, Result};
use metrics_exporter_prometheus::PrometheusHandle;

/// Installs the Prometheus recorder as the process's global recorder and starts its upkeep on
/// the current tokio runtime; returns the handle the API renders.
pub(crate) fn install() -> Result<PrometheusHandle> {
    let handle = consort_fleet::prometheus_builder()
        .context("configuring the metrics recorder")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    tokio::spawn(consort_fleet::run_upkeep(handle.clone()));
    Ok(handle)
}
