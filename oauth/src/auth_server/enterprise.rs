//! Enterprise-Managed Authorization at `/token`: the RFC 7523 `jwt-bearer` grant with an
//! ID-JAG from a trusted identity provider. Header and signature (`jwks.rs`, `jsonwebtoken`),
//! claims (`protocol::id_jag`, at the injected clock), the `jti` spent once in the store (so
//! across gateways on one redis), the user linked by issuer + subject or by email, and an
//! access token (no refresh token: the client asks its IdP for a fresh ID-JAG instead).

use serde_json::Value;

use super::AuthServer;
use crate::crypto::{self, ACCESS_PREFIX};
use crate::error::OAuthError;
use crate::jwks::KeyError;
use crate::model::{AccessRecord, GrantRecord, GrantedBy, NO_PASSWORD, TokenRecord, UserRecord};
use crate::observe::{AuditEntry, Event};
use crate::protocol::id_jag::{self, Expected, Terms};
use crate::protocol::token::{self, GrantType};
use crate::protocol::{Client, Params, resource, scope};
use crate::roles::{self, Member};

/// The longest assertion read (an ID-JAG is a few hundred bytes to a few KiB).
const MAX_ASSERTION_BYTES: usize = 16 * 1024;

fn refused(why: impl Into<String>) -> OAuthError {
    OAuthError::InvalidGrant(why.into())
}

impl AuthServer {
    /// POST `/token`: every grant type, answered as the JSON body of a success.
    pub(crate) async fn token_endpoint(
        &self,
        body: &str,
        authorization: Option<&str>,
        client_ip: Option<std::net::IpAddr>,
    ) -> Result<Value, OAuthError> {
        let params = Params::parse(body);
        if token::grant_type(&params)? != GrantType::JwtBearer {
            return self
                .token(body, authorization, client_ip)
                .await
                .map(|t| t.to_json());
        }
        if self.cfg.enterprise.is_empty() {
            return Err(OAuthError::UnsupportedGrantType(
                "the jwt-bearer grant needs a trusted identity provider ([[oauth.enterprise]]); none is configured".into(),
            ));
        }
        let client = self.authenticate(&params, authorization, client_ip).await?;
        let result = self.enterprise_grant(&client, &params, client_ip).await;
        if let Err(e) = &result {
            // The refusal's code and words (never the assertion) go to the audit log.
            let reason = e.to_string();
            self.observer.audit(&AuditEntry {
                action: "enterprise_grant",
                via: None,
                user: None,
                client_id: Some(&client.client_id),
                outcome: "refused",
                reason: Some(&reason),
                scopes: None,
                resource: None,
                client_ip,
            });
        }
        result
    }

    /// The `jwt-bearer` grant: checks the ID-JAG in `assertion` and issues an access token.
    pub(crate) async fn enterprise_grant(
        &self,
        client: &Client,
        params: &Params,
        client_ip: Option<std::net::IpAddr>,
    ) -> Result<Value, OAuthError> {
        let single = |n: &str| params.single(n).map_err(OAuthError::InvalidRequest);
        let Some(assertion) = single("assertion")? else {
            return Err(OAuthError::InvalidRequest("assertion is required".into()));
        };
        if assertion.len() > MAX_ASSERTION_BYTES {
            return Err(refused("the assertion is too long to be an ID-JAG"));
        }
        let header = jsonwebtoken::decode_header(assertion)
            .map_err(|_| refused("the assertion is not a signed JWT"))?;
        if !id_jag::typ_ok(header.typ.as_deref()) {
            return Err(refused(format!(
                "the assertion's typ is not {} (is it an ID-JAG?)",
                id_jag::TYP
            )));
        }
        // The issuer, read before the signature is checked, only picks whose keys check it.
        let unverified: Value = jsonwebtoken::dangerous::insecure_decode_claims(assertion)
            .map_err(|_| refused("the assertion's claims are not JSON"))?;
        let iss = unverified
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(idp) = self.cfg.enterprise.iter().find(|i| i.issuer == iss) else {
            return Err(refused(format!(
                "the ID-JAG's issuer {iss:?} is not a trusted identity provider here"
            )));
        };
        let now_ms = self.clock.now_ms();
        let claims = match self.idp_keys.verify(idp, assertion, &header, now_ms).await {
            Ok(c) => c,
            Err(KeyError::Refused(why)) => return Err(refused(why)),
            Err(KeyError::Fetch(why)) => {
                tracing::warn!(issuer = %idp.issuer, error = %why, "enterprise identity provider keys unavailable");
                return Err(refused(format!(
                    "the signing keys of {} could not be fetched; try again later",
                    idp.issuer
                )));
            }
        };
        let requested_resources = params.all("resource");
        // The configured scopes here; the user's roles narrow them once the ID-JAG says who
        // the user is (`enterprise_roles`).
        let cap = &self.cfg.scopes_supported;
        let expected = Expected {
            idp,
            audience: &self.cfg.issuer,
            client_id: &client.client_id,
            resources: &self.cfg.resource_entries(),
            requested_resources: &requested_resources,
            requested_scope: single("scope")?,
            scope_cap: cap,
            now: now_ms / 1000,
        };
        let mut terms = id_jag::check(&claims, &expected)?;
        let now = self.now();
        let jti_key = crypto::hash_secret(&format!("{}\n{}", terms.issuer, terms.jti));
        let keep_until = terms.exp + id_jag::SKEW_SECS;
        if !self
            .store
            .spend_assertion(&jti_key, keep_until, now)
            .await?
        {
            tracing::warn!(issuer = %terms.issuer, client_id = %client.client_id, "ID-JAG replayed");
            self.observer.event(Event::ReuseDetected);
            return Err(refused(
                "the ID-JAG was already used (its jti was seen before)",
            ));
        }
        let username = self.enterprise_user(idp, &terms).await?;
        terms.scopes = self.enterprise_roles(&username, &terms).await?;
        self.issue_enterprise_token(client, &terms, &username, now, client_ip)
            .await
    }

    /// The ID-JAG's scopes capped by what the user may grant (`[oauth.roles]`, as on the
    /// consent page), refused when the route requires a role the user lacks or nothing is left.
    async fn enterprise_roles(
        &self,
        username: &str,
        terms: &Terms,
    ) -> Result<Vec<String>, OAuthError> {
        let entries = self.cfg.resource_entries();
        if !roles::in_force(&self.cfg.roles, &entries) {
            return Ok(terms.scopes.clone());
        }
        let Some(user) = self.store.get_user(username).await? else {
            return Err(refused(format!("the user {username} no longer exists")));
        };
        let member = Member::from(&user);
        if let Some(entry) = resource::find(&entries, &terms.resource)
            && !roles::may_use(entry, &self.cfg.roles, &member)
        {
            return Err(refused(format!(
                "the user {username} may not use {} (it requires a role they do not hold)",
                entry.name
            )));
        }
        let scopes = roles::grantable(&self.cfg.roles, &member).narrow(&terms.scopes);
        if scopes.is_empty() {
            return Err(refused(format!(
                "the user {username} may grant none of the ID-JAG's scopes ({})",
                scope::join(&terms.scopes)
            )));
        }
        Ok(scopes)
    }

    async fn issue_enterprise_token(
        &self,
        client: &Client,
        terms: &Terms,
        username: &str,
        now: u64,
        client_ip: Option<std::net::IpAddr>,
    ) -> Result<Value, OAuthError> {
        let access = crypto::random_token(self.entropy.as_ref(), ACCESS_PREFIX);
        let expires_at = now + self.cfg.access_ttl_secs;
        let grant = GrantRecord {
            family_id: crypto::random_id(self.entropy.as_ref()),
            client_id: client.client_id.clone(),
            username: username.to_owned(),
            scopes: terms.scopes.clone(),
            resource: terms.resource.clone(),
            created_at: now,
            last_used_at: now,
            expires_at,
            revoked_at: None,
            granted_by: GrantedBy::Enterprise {
                issuer: terms.issuer.clone(),
            },
        };
        let record = AccessRecord {
            token: TokenRecord {
                token_hash: crypto::hash_secret(access.expose()),
                family_id: grant.family_id.clone(),
                client_id: grant.client_id.clone(),
                username: grant.username.clone(),
                scopes: grant.scopes.clone(),
                resource: grant.resource.clone(),
                issued_at: now,
                expires_at,
            },
            revoked: false,
        };
        self.store.create_access_grant(&grant, &record).await?;
        self.store.touch_client(&client.client_id, now).await?;
        tracing::info!(user = %username, client_id = %client.client_id, grant = %grant.family_id, issuer = %terms.issuer, "enterprise grant: access token issued");
        self.observer.event(Event::TokensIssued);
        self.observer.audit(&AuditEntry {
            action: "enterprise_grant",
            via: Some(&terms.issuer),
            user: Some(username),
            client_id: Some(&client.client_id),
            outcome: "issued",
            reason: None,
            scopes: Some(&grant.scopes),
            resource: Some(&grant.resource),
            client_ip,
        });
        Ok(serde_json::json!({
            "access_token": access.expose(),
            "token_type": "Bearer",
            "expires_in": self.cfg.access_ttl_secs,
            "scope": scope::join(&terms.scopes),
        }))
    }

    /// The user an ID-JAG speaks for: the one linked to its issuer + subject; else, when its
    /// verified email's domain is one of the issuer's `allowed_domains`, the user of that name
    /// (created when missing), then linked.
    async fn enterprise_user(
        &self,
        idp: &crate::config::EnterpriseIdp,
        terms: &Terms,
    ) -> Result<String, OAuthError> {
        let identity = crypto::hash_secret(&format!("{}\n{}", terms.issuer, terms.subject));
        if let Some(name) = self.store.linked_user(&identity).await?
            && self.store.get_user(&name).await?.is_some()
        {
            return Ok(name);
        }
        let Some(email) = &terms.email else {
            return Err(refused(format!(
                "no user here is linked to subject {} of {}, and the ID-JAG carries no verified email",
                terms.subject, terms.issuer
            )));
        };
        // An IdP vouches for its own domains only: another domain's email names nobody here.
        if !id_jag::domain_allowed(email, &idp.allowed_domains) {
            return Err(refused(format!(
                "no user here is linked to subject {} of {}, and it may not create users of the domain of {email} nor link them by email",
                terms.subject, terms.issuer
            )));
        }
        if self.store.get_user(email).await?.is_none() {
            if !crate::admin::valid_username(email) {
                return Err(refused(format!(
                    "the email {email} cannot be a username here"
                )));
            }
            let user = UserRecord {
                username: email.clone(),
                password_hash: NO_PASSWORD.into(),
                created_at: self.now(),
                updated_at: self.now(),
                external: None,
                admin: false,
            };
            if self.store.create_user(&user).await? {
                tracing::info!(user = %email, issuer = %terms.issuer, "user created by an enterprise identity provider");
            }
        }
        self.store.link_identity(&identity, email).await?;
        Ok(email.clone())
    }
}
