//! DNS under the address policy: a name is resolved here and every address it resolves to is
//! checked before the connection is made to it (so a name cannot rebind to a private address
//! between the check and the connect).

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::address::{AddressPolicy, Refusal};

/// The resolver a client with an address policy connects through.
#[derive(Debug)]
pub(crate) struct PolicyResolver {
    pub(crate) policy: Arc<AddressPolicy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs
                .iter()
                .find(|a| !policy.address_allowed(&host, a.ip()))
            {
                return Err(Box::new(Refusal::Address { host, ip: bad.ip() })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}
