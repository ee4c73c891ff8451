//! `/token` orchestration: code redemption (single use, replay revokes) and refresh rotation
//! (grace window returns the same successor; later reuse revokes the family).

use super::AuthServer;
use crate::crypto::{self, ACCESS_PREFIX, Secret};
use crate::error::OAuthError;
use crate::model::{
    AccessRecord, CodeRecord, GrantRecord, GrantedBy, RefreshRecord, RotateOutcome, TokenRecord,
};
use crate::observe::Event;
use crate::protocol::token::{self, GrantType, Reuse, TokenResponse};
use crate::protocol::{Client, Params, resource, scope};
use crate::store::{NewGrant, Rotation};

impl AuthServer {
    /// POST `/token` (form body, optional `Authorization` header) from `client_ip` (its
    /// metadata-fetch budget).
    pub(crate) async fn token(
        &self,
        body: &str,
        authorization: Option<&str>,
        client_ip: Option<std::net::IpAddr>,
    ) -> Result<TokenResponse, OAuthError> {
        let params = Params::parse(body);
        let grant = token::grant_type(&params)?;
        let client = self.authenticate(&params, authorization, client_ip).await?;
        match grant {
            GrantType::AuthorizationCode => self.redeem_code(&client, &params).await,
            GrantType::RefreshToken => self.refresh(&client, &params).await,
            // Answered by `token_endpoint` (no refresh token, so not a `TokenResponse`).
            GrantType::JwtBearer => Err(OAuthError::UnsupportedGrantType(
                "the jwt-bearer grant is answered by the token endpoint".into(),
            )),
        }
    }

    async fn redeem_code(
        &self,
        client: &Client,
        params: &Params,
    ) -> Result<TokenResponse, OAuthError> {
        let Some(code) = params.single("code").map_err(OAuthError::InvalidRequest)? else {
            return Err(OAuthError::InvalidRequest("code is required".into()));
        };
        let hash = crypto::hash_secret(code);
        let now = self.now();
        let Some(record) = self.store.get_code(&hash).await? else {
            return Err(OAuthError::InvalidGrant(
                "unknown authorization code".into(),
            ));
        };
        if record.used {
            return Err(self.replayed(&record, now).await);
        }
        resource::check_bound(
            &params.all("resource"),
            &record.resource,
            &self.cfg.resource_entries(),
        )?;
        token::check_code(&record, &client.client_id, params, now)?;
        let access = crypto::random_token(self.entropy.as_ref(), ACCESS_PREFIX);
        let refresh = self.new_refresh();
        let grant = GrantRecord {
            family_id: record.family_id.clone(),
            client_id: record.client_id.clone(),
            username: record.username.clone(),
            scopes: record.scopes.clone(),
            resource: record.resource.clone(),
            created_at: now,
            last_used_at: now,
            expires_at: now + self.cfg.refresh_ttl_secs,
            revoked_at: None,
            granted_by: GrantedBy::Consent,
        };
        let (a, r) = self.token_records(&grant, &access, &refresh, &record.scopes, now);
        // One atomic step: a replay that lost the race finds the grant and revokes it.
        let new = NewGrant {
            grant: &grant,
            access: &a,
            refresh: &r,
        };
        if !self.store.redeem_code(&hash, new).await? {
            return Err(self.replayed(&record, now).await);
        }
        self.store.touch_client(&client.client_id, now).await?;
        tracing::info!(user = %grant.username, client_id = %grant.client_id, grant = %grant.family_id, "tokens issued");
        self.observer.event(Event::TokensIssued);
        Ok(TokenResponse {
            access_token: access,
            refresh_token: refresh,
            expires_in: self.cfg.access_ttl_secs,
            scope: scope::join(&record.scopes),
        })
    }

    async fn replayed(&self, record: &CodeRecord, now: u64) -> OAuthError {
        tracing::warn!(client_id = %record.client_id, grant = %record.family_id, "authorization code replayed; revoking its tokens");
        self.observer.event(Event::ReuseDetected);
        if let Err(e) = self.store.revoke_grant(&record.family_id, now).await {
            return e.into();
        }
        self.validator.clear_cache();
        OAuthError::InvalidGrant("the authorization code was already used".into())
    }

    fn token_records(
        &self,
        grant: &GrantRecord,
        access: &Secret,
        refresh: &Secret,
        access_scopes: &[String],
        now: u64,
    ) -> (AccessRecord, RefreshRecord) {
        (
            AccessRecord {
                token: TokenRecord {
                    token_hash: crypto::hash_secret(access.expose()),
                    family_id: grant.family_id.clone(),
                    client_id: grant.client_id.clone(),
                    username: grant.username.clone(),
                    scopes: access_scopes.to_vec(),
                    resource: grant.resource.clone(),
                    issued_at: now,
                    expires_at: now + self.cfg.access_ttl_secs,
                },
                revoked: false,
            },
            RefreshRecord {
                token: TokenRecord {
                    token_hash: crypto::hash_secret(refresh.expose()),
                    family_id: grant.family_id.clone(),
                    client_id: grant.client_id.clone(),
                    username: grant.username.clone(),
                    scopes: grant.scopes.clone(),
                    resource: grant.resource.clone(),
                    issued_at: now,
                    expires_at: now + self.cfg.refresh_ttl_secs,
                },
                rotated_at: None,
            },
        )
    }

    async fn refresh(&self, client: &Client, params: &Params) -> Result<TokenResponse, OAuthError> {
        let Some(presented) = params
            .single("refresh_token")
            .map_err(OAuthError::InvalidRequest)?
        else {
            return Err(OAuthError::InvalidRequest(
                "refresh_token is required".into(),
            ));
        };
        let hash = crypto::hash_secret(presented);
        let now = self.now();
        let Some(old) = self.store.get_refresh(&hash).await? else {
            return Err(OAuthError::InvalidGrant("unknown refresh token".into()));
        };
        resource::check_bound(
            &params.all("resource"),
            &old.resource,
            &self.cfg.resource_entries(),
        )?;
        token::check_refresh(&old, &client.client_id, params, now)?;
        let scopes = scope::narrow(
            params.single("scope").map_err(OAuthError::InvalidRequest)?,
            &old.scopes,
        )?;
        // The successor pair is derived from the presented token under the server key, so a
        // reuse within the grace window can answer with the very same pair (DESIGN.md).
        let (access, refresh) = self.key.successor_tokens(presented);
        let grant = GrantRecord {
            family_id: old.family_id.clone(),
            client_id: old.client_id.clone(),
            username: old.username.clone(),
            scopes: old.scopes.clone(),
            resource: old.resource.clone(),
            created_at: now,
            last_used_at: now,
            expires_at: now + self.cfg.refresh_ttl_secs,
            revoked_at: None,
            granted_by: GrantedBy::Consent,
        };
        let (a, r) = self.token_records(&grant, &access, &refresh, &scopes, now);
        let rotation = Rotation {
            old_hash: &hash,
            now,
            access: &a,
            refresh: &r,
        };
        match self.store.rotate_refresh(rotation).await? {
            RotateOutcome::Rotated => {
                self.store.touch_client(&client.client_id, now).await?;
                self.observer.event(Event::TokensRefreshed);
                Ok(TokenResponse {
                    access_token: access,
                    refresh_token: refresh,
                    expires_in: self.cfg.access_ttl_secs,
                    scope: scope::join(&scopes),
                })
            }
            RotateOutcome::AlreadyRotated { rotated_at } => {
                match token::on_reuse(rotated_at, now, self.cfg.refresh_grace_secs) {
                    Reuse::ReturnSuccessor => {
                        let stored = self
                            .store
                            .get_access(&crypto::hash_secret(access.expose()))
                            .await?;
                        match stored {
                            Some((rec, false)) if !rec.revoked && rec.expires_at > now => {
                                Ok(TokenResponse {
                                    access_token: access,
                                    refresh_token: refresh,
                                    expires_in: rec.expires_at - now,
                                    scope: scope::join(&rec.scopes),
                                })
                            }
                            _ => Err(OAuthError::InvalidGrant(
                                "the refresh token was already used".into(),
                            )),
                        }
                    }
                    Reuse::RevokeFamily => {
                        tracing::warn!(client_id = %old.client_id, grant = %old.family_id, "rotated refresh token reused after the grace window; revoking the grant");
                        self.observer.event(Event::ReuseDetected);
                        self.store.revoke_grant(&old.family_id, now).await?;
                        self.validator.clear_cache();
                        Err(OAuthError::InvalidGrant(
                            "the refresh token was already used".into(),
                        ))
                    }
                }
            }
            RotateOutcome::FamilyRevoked | RotateOutcome::NotFound => Err(
                OAuthError::InvalidGrant("the refresh token is no longer valid".into()),
            ),
        }
    }
}
