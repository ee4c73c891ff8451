//! One person, one user, whichever way they come: a sign-in through an OpenID provider and an
//! enterprise grant (ID-JAG) land on the same user. A person is linked by issuer + subject
//! (`identities` in the store); an identity not linked yet joins the user named by its verified
//! email only when that email's domain is one of the issuer's `allowed_domains` (the issuer
//! speaks for the domain) and the user is not another subject of the same issuer; otherwise a
//! new user is created, named by the verified email (readable everywhere: headers, audit, CLI),
//! else `ISSUER#SUBJECT`. `decide` is the pure rule; `AuthServer::person` applies it, and
//! `migrate_names` renames the `ISSUER#SUBJECT` users of earlier versions at start.

use super::AuthServer;
use crate::crypto;
use crate::error::StoreError;
use crate::model::{ExternalIdentity, NO_PASSWORD, UserRecord, Via};
use crate::oidc::domain_listed;
use crate::store::Store;

/// The username of a person without a usable verified email (and of every person from a
/// provider before 0.x): issuer and subject, which a local username (no `:` or `#`) can never
/// equal.
pub(crate) fn legacy_username(issuer: &str, subject: &str) -> String {
    format!("{issuer}#{subject}")
}

/// The key of the link from an identity (issuer + subject) to its user.
pub(crate) fn identity_key(issuer: &str, subject: &str) -> String {
    crypto::hash_secret(&format!("{issuer}\n{subject}"))
}

/// The name a new person gets: the verified email when it can be a username, else
/// `ISSUER#SUBJECT`.
pub(crate) fn readable_name(email: Option<&str>, issuer: &str, subject: &str) -> String {
    email
        .filter(|e| e.contains('@') && crate::admin::valid_username(e))
        .map_or_else(|| legacy_username(issuer, subject), str::to_owned)
}

/// Someone arriving from an identity provider.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    /// The verified email (lower-case).
    pub email: Option<&'a str>,
    /// The domains this issuer speaks for (`allowed_domains` of the provider or enterprise IdP).
    pub domains: &'a [String],
    /// Whether a new user may be created for them.
    pub may_create: bool,
}

/// Which user an arrival is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The user already linked to (or named for) this identity.
    Known(String),
    /// An existing user, joined by the verified email: link it.
    Join(String),
    /// A new user of this name.
    Create(String),
    /// Not this user, and no new one: why (for the person and the audit log).
    Refuse(String),
}

/// The rule: `linked` is the user the identity is linked to, `named` the user of
/// [`readable_name`] (read only when nothing is linked).
pub(crate) fn decide(
    a: &Arrival<'_>,
    linked: Option<&UserRecord>,
    named: Option<&UserRecord>,
) -> Decision {
    if let Some(user) = linked {
        return Decision::Known(user.username.clone());
    }
    let name = readable_name(a.email, a.issuer, a.subject);
    let Some(user) = named else {
        return if a.may_create {
            Decision::Create(name)
        } else {
            Decision::Refuse(format!(
                "no user {name} here, and {} may not create users of that domain",
                a.issuer
            ))
        };
    };
    let ext = user.external.as_ref();
    if ext.is_some_and(|e| e.issuer == a.issuer && e.subject == a.subject) {
        return Decision::Known(user.username.clone());
    }
    let by_email = a.email == Some(user.username.as_str())
        && a.email.is_some_and(|e| domain_listed(e, a.domains));
    let other_subject = ext.is_some_and(|e| e.issuer == a.issuer);
    if by_email && !other_subject {
        return Decision::Join(user.username.clone());
    }
    Decision::Refuse(if other_subject {
        format!(
            "the user {} belongs to another account of {}",
            user.username, a.issuer
        )
    } else {
        format!(
            "a user {} exists, and {} does not speak for its domain (allowed_domains)",
            user.username, a.issuer
        )
    })
}

impl AuthServer {
    /// The user `a` is (linked, joined or created), with `external` recorded on it: always for
    /// a sign-in (`Via::Sso`: the provider's latest claims), only on a user without one for an
    /// enterprise grant. `Ok(Err(why))`: refused.
    pub(super) async fn person(
        &self,
        a: &Arrival<'_>,
        external: ExternalIdentity,
    ) -> Result<Result<String, String>, StoreError> {
        let key = identity_key(a.issuer, a.subject);
        let now = self.now();
        for _ in 0..2 {
            let linked = match self.store.linked_user(&key).await? {
                Some(name) => self.store.get_user(&name).await?,
                None => None,
            };
            let named = match linked {
                Some(_) => None,
                None => {
                    let name = readable_name(a.email, a.issuer, a.subject);
                    self.store.get_user(&name).await?
                }
            };
            let decision = decide(a, linked.as_ref(), named.as_ref());
            let (name, user) = match decision {
                Decision::Refuse(why) => return Ok(Err(why)),
                Decision::Known(name) | Decision::Join(name) => {
                    let user = linked.or(named);
                    (name, user)
                }
                Decision::Create(name) => {
                    let user = UserRecord {
                        username: name.clone(),
                        password_hash: if external.via == Via::Enterprise {
                            NO_PASSWORD.into()
                        } else {
                            String::new()
                        },
                        created_at: now,
                        updated_at: now,
                        external: Some(external.clone()),
                        admin: false,
                    };
                    if !self.store.create_user(&user).await? {
                        continue; // created meanwhile: decide again
                    }
                    tracing::info!(user = %name, issuer = %a.issuer, via = ?external.via, "new user from an identity provider");
                    self.store.link_identity(&key, &name).await?;
                    return Ok(Ok(name));
                }
            };
            if self.store.linked_user(&key).await?.as_deref() != Some(name.as_str()) {
                self.store.link_identity(&key, &name).await?;
            }
            if let Some(mut user) = user {
                let replace = match external.via {
                    Via::Sso => user.external.as_ref() != Some(&external),
                    Via::Enterprise => user.external.is_none() && user.password_hash == NO_PASSWORD,
                };
                if replace {
                    user.external = Some(external.clone());
                    user.updated_at = now;
                    self.store.update_user(&user).await?;
                }
            }
            return Ok(Ok(name));
        }
        Ok(Err("the account changed while signing in; try again".into()))
    }
}

/// At start: every user of a provider is linked by issuer + subject, and each named
/// `ISSUER#SUBJECT` by an earlier version is renamed to its verified email (with its grants,
/// tokens, sessions and links) unless that name is taken. Returns how many were renamed.
pub(crate) async fn migrate_names(store: &dyn Store, now: u64) -> Result<usize, StoreError> {
    let mut renamed = 0;
    for user in store.list_users().await? {
        let Some(ext) = &user.external else { continue };
        let key = identity_key(&ext.issuer, &ext.subject);
        if store.linked_user(&key).await?.is_none() {
            store.link_identity(&key, &user.username).await?;
        }
        if user.username != legacy_username(&ext.issuer, &ext.subject) {
            continue;
        }
        let name = readable_name(ext.email.as_deref(), &ext.issuer, &ext.subject);
        if name == user.username {
            continue;
        }
        if store.rename_user(&user.username, &name, now).await? {
            tracing::info!(from = %user.username, to = %name, "user renamed to their verified email");
            renamed += 1;
        } else {
            tracing::warn!(user = %user.username, taken = %name, "user kept its old name: another user has its email's name");
        }
    }
    Ok(renamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, ext: Option<(&str, &str)>) -> UserRecord {
        UserRecord {
            username: name.into(),
            password_hash: String::new(),
            created_at: 0,
            updated_at: 0,
            external: ext.map(|(issuer, subject)| ExternalIdentity {
                issuer: issuer.into(),
                subject: subject.into(),
                ..ExternalIdentity::default()
            }),
            admin: false,
        }
    }

    fn arrival<'a>(
        issuer: &'a str,
        subject: &'a str,
        email: Option<&'a str>,
        domains: &'a [String],
    ) -> Arrival<'a> {
        Arrival {
            issuer,
            subject,
            email,
            domains,
            may_create: true,
        }
    }

    #[test]
    fn a_new_person_is_named_by_the_verified_email_else_issuer_and_subject() {
        let none: [String; 0] = [];
        let a = arrival("https://idp", "s1", Some("ann@acme.example"), &none);
        assert_eq!(
            decide(&a, None, None),
            Decision::Create("ann@acme.example".into())
        );
        let a = arrival("https://idp", "s1", None, &none);
        assert_eq!(
            decide(&a, None, None),
            Decision::Create("https://idp#s1".into())
        );
        let refused = Arrival {
            may_create: false,
            ..arrival("https://idp", "s1", Some("ann@acme.example"), &none)
        };
        assert!(matches!(decide(&refused, None, None), Decision::Refuse(_)));
    }

    #[test]
    fn the_link_wins_then_the_same_identity_then_the_email_within_the_issuers_domains() {
        let acme = ["acme.example".to_owned()];
        let ann = user("ann@acme.example", Some(("https://sso", "ann")));
        // Linked: whatever the email says now.
        let a = arrival("https://jag", "x", Some("other@acme.example"), &acme);
        assert_eq!(
            decide(&a, Some(&ann), None),
            Decision::Known(ann.username.clone())
        );
        // Another issuer that speaks for acme.example joins her by email.
        let a = arrival("https://jag", "u-ann", Some("ann@acme.example"), &acme);
        assert_eq!(
            decide(&a, None, Some(&ann)),
            Decision::Join(ann.username.clone())
        );
        // … one that does not speak for the domain does not.
        let a = arrival("https://jag", "u-ann", Some("ann@acme.example"), &[]);
        assert!(
            matches!(decide(&a, None, Some(&ann)), Decision::Refuse(w) if w.contains("does not speak"))
        );
        // Another subject of her own issuer is another person.
        let a = arrival("https://sso", "mallory", Some("ann@acme.example"), &acme);
        assert!(
            matches!(decide(&a, None, Some(&ann)), Decision::Refuse(w) if w.contains("another account"))
        );
        // A local user of that name is joined when the issuer speaks for the domain.
        let local = user("ann@acme.example", None);
        let a = arrival("https://sso", "ann", Some("ann@acme.example"), &acme);
        assert_eq!(
            decide(&a, None, Some(&local)),
            Decision::Join(local.username.clone())
        );
    }
}
