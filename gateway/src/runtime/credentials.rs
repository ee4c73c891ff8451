//! The per-user credential service as `serve` opens it: the vault, when a route keeps a
//! credential per user, with the configured key ring on the configured store, the records of
//! routes no longer configured removed, and the broker.

use std::sync::Arc;

use super::ServeError;
use crate::config::Settings;

/// The per-user credential service: the vault on the `records` the stores opened (when a route
/// keeps a credential per user and a key is set) with the configured key ring, the records of
/// routes no longer configured removed (on the stores' `runtime`), the broker.
pub(super) fn open(
    settings: &Arc<Settings>,
    records: Option<crate::vault::Records>,
    runtime: &tokio::runtime::Handle,
    clock: Arc<dyn pforte_clock::Clock>,
    metrics: crate::metrics::CredentialMetrics,
) -> Result<Arc<crate::credentials::Credentials>, ServeError> {
    use crate::vault::{KeyRing, Vault, VaultOptions};
    let vault = match (&settings.vault_key, records) {
        (Some(key), Some(records)) => {
            let ring = match key {
                crate::config::VaultKey::File(path) => KeyRing::read_file(path),
                crate::config::VaultKey::Text(text) => KeyRing::parse(text),
            }
            .map_err(crate::vault::VaultError::from)?;
            let vault = Vault::open(records, ring, clock.clone(), VaultOptions::default());
            runtime.block_on(tidy(&vault, settings))?;
            Some(vault)
        }
        _ => None,
    };
    let broker = crate::broker::Broker::new(clock.clone());
    Ok(Arc::new(crate::credentials::Credentials::new(
        settings.clone(),
        vault,
        broker,
        clock,
        metrics,
    )?))
}

/// Refuses a ring that opens none of the stored credentials (at start), and removes the
/// records of routes no longer configured.
async fn tidy(vault: &crate::vault::Vault, settings: &Settings) -> Result<(), ServeError> {
    vault.check_ring().await?;
    let names: Vec<&str> = settings.routes.iter().map(|r| r.name.as_str()).collect();
    match vault.retain_routes(&names).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            removed = n,
            "vault: records of routes no longer configured removed"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "vault: could not remove the records of removed routes")
        }
    }
    Ok(())
}
