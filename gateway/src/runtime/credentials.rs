//! The per-user credential service as `serve` opens it: the vault, when a route keeps a
//! credential per user, with the configured key ring on the configured store, the records of
//! routes no longer configured removed, and the broker.

use std::sync::Arc;

use super::ServeError;
use crate::{config::Settings, stores::Site};

/// The per-user credential service: the vault (SQLite in the data dir, or redis) opened with
/// the configured key ring when a route keeps a credential per user, the records of routes no
/// longer configured removed, the broker.
pub(super) fn open(
    settings: &Arc<Settings>,
    runtime: Option<tokio::runtime::Handle>,
    clock: Arc<dyn pforte_clock::Clock>,
    metrics: crate::metrics::CredentialMetrics,
) -> Result<Arc<crate::credentials::Credentials>, ServeError> {
    use crate::vault::{KeyRing, Vault, VaultOptions};
    let needed = settings.routes.iter().any(|r| {
        r.upstream_auth
            .as_ref()
            .is_some_and(crate::config::UpstreamAuth::per_user)
    });
    let vault = match (&settings.vault_key, needed) {
        (Some(key), true) => {
            let ring = match key {
                crate::config::VaultKey::File(path) => KeyRing::read_file(path),
                crate::config::VaultKey::Text(text) => KeyRing::parse(text),
            }
            .map_err(crate::vault::VaultError::from)?;
            let vault = match (&settings.store, runtime.clone()) {
                (Site::Redis(url), Some(rt)) => {
                    let _in_runtime = rt.enter();
                    Vault::open_redis(
                        url,
                        crate::vault::DEFAULT_PREFIX,
                        ring,
                        clock.clone(),
                        VaultOptions::default(),
                    )?
                }
                _ => Vault::open_sqlite(
                    &settings.data_dir,
                    ring,
                    clock.clone(),
                    VaultOptions::default(),
                )?,
            };
            let names: Vec<&str> = settings.routes.iter().map(|r| r.name.as_str()).collect();
            // A ring that opens none of the stored credentials is refused here, at start.
            let cleanup = async {
                vault.check_ring().await?;
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
                Ok::<(), crate::vault::VaultError>(())
            };
            match runtime {
                Some(rt) => rt.block_on(cleanup),
                None => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ServeError::Pingora(e.to_string()))?
                    .block_on(cleanup),
            }?;
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
