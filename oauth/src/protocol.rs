//! The sans-I/O protocol core: pure functions from request data, records and `now` to
//! decisions. No I/O, no clock, no randomness here; `auth_server` feeds it and acts on the result.

pub(crate) mod authorize;
pub(crate) mod cimd;
pub(crate) mod id_jag;
pub(crate) mod metadata;
pub(crate) mod pkce;
pub(crate) mod redirect;
pub(crate) mod registration;
pub(crate) mod resource;
pub(crate) mod scope;
pub(crate) mod token;

use crate::model::AuthMethod;

/// A client as the protocol sees it, whether dynamically registered (RFC 7591) or described by
/// a Client ID Metadata Document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    pub client_id: String,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
    pub auth_method: AuthMethod,
    /// SHA-256 of the secret, for confidential clients.
    pub secret_hash: Option<String>,
    pub kind: ClientKind,
}

/// Where a client's metadata came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    Registered,
    MetadataDocument,
}

impl Client {
    /// The name to show on the consent page.
    pub(crate) fn display_name(&self) -> &str {
        self.name
            .as_deref()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(&self.client_id)
    }
}

impl From<&crate::model::ClientRecord> for Client {
    fn from(r: &crate::model::ClientRecord) -> Self {
        Client {
            client_id: r.client_id.clone(),
            name: r.client_name.clone(),
            redirect_uris: r.redirect_uris.clone(),
            auth_method: r.auth_method,
            secret_hash: r.secret_hash.clone(),
            kind: ClientKind::Registered,
        }
    }
}

/// Request parameters as ordered pairs, as they arrived (query string or form body).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params(pub(crate) Vec<(String, String)>);

impl Params {
    /// Parses `application/x-www-form-urlencoded` text.
    pub fn parse(encoded: &str) -> Self {
        Params(
            url::form_urlencoded::parse(encoded.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// Re-encodes the pairs.
    pub fn encode(&self) -> String {
        url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(self.0.iter())
            .finish()
    }

    /// The single value of `name`; an empty value counts as absent (RFC 6749 §3.1).
    /// Err if the parameter is repeated.
    pub fn single(&self, name: &str) -> Result<Option<&str>, String> {
        let mut found = None;
        for (k, v) in &self.0 {
            if k == name {
                if found.is_some() {
                    return Err(format!("parameter {name} is repeated"));
                }
                found = Some(v.as_str());
            }
        }
        Ok(found.filter(|v| !v.is_empty()))
    }

    /// Every value of `name`.
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}
