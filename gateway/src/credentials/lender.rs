//! The lender of a per-user route's tool catalog: whose credential the catalog borrows, and
//! what a request of theirs carries upstream.

use std::sync::Arc;

use super::Credentials;
use crate::config::UpstreamAuth;

/// Where route `i`'s tool catalog borrows a credential: the people connected to it, and what
/// a request of theirs carries — their key, or their fresh OAuth access token, as for their own
/// calls; on an `env` route the bridge is told whose variables the catalog's child starts with
/// (`x-pforte-lent-by`, the person percent-encoded).
#[derive(Debug)]
pub(crate) struct RouteLender {
    credentials: Arc<Credentials>,
    route: usize,
}

impl RouteLender {
    /// Route `route`'s lender, as the catalog takes it.
    pub(crate) fn shared(
        credentials: &Arc<Credentials>,
        route: usize,
    ) -> Arc<dyn crate::catalog::Lender> {
        Arc::new(Self {
            credentials: credentials.clone(),
            route,
        })
    }
}

#[async_trait::async_trait]
impl crate::catalog::Lender for RouteLender {
    async fn people(&self) -> Result<Vec<String>, String> {
        let (Some(vault), Some(route)) =
            (&self.credentials.vault, self.credentials.route(self.route))
        else {
            return Ok(Vec::new());
        };
        vault
            .connected(&route.name)
            .await
            .map_err(|e| e.to_string())
    }

    async fn headers(
        &self,
        person: &str,
    ) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, String> {
        let env = matches!(
            self.credentials
                .route(self.route)
                .and_then(|r| r.upstream_auth.as_ref()),
            Some(UpstreamAuth::Env { .. })
        );
        match self.credentials.for_request(self.route, person).await {
            Ok(Some(injected)) => Ok(vec![(injected.name, injected.value)]),
            Ok(None) if env => {
                let value = http::HeaderValue::from_str(&crate::forward::percent_encode(person))
                    .map_err(|e| e.to_string())?;
                Ok(vec![(
                    http::HeaderName::from_static(crate::forward::header::LENT_BY),
                    value,
                )])
            }
            Ok(None) => Ok(Vec::new()),
            Err(missing) => Err(missing.to_string()),
        }
    }
}
