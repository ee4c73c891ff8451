//! Roles: what a signed-in user may grant (scopes) and use (resources), decided from the
//! `[oauth.roles]` table, the resource's `roles` / `users` lists and the user's record (name,
//! verified email, IdP groups) — pure.

use std::collections::BTreeSet;

use crate::config::{ResourceEntry, Roles};
use crate::model::UserRecord;

/// Who a user is, as far as roles are concerned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Member {
    pub username: String,
    /// Verified email (external users only), ASCII lower-case ([`email_case`]).
    pub email: Option<String>,
    pub groups: Vec<String>,
}

impl From<&UserRecord> for Member {
    fn from(u: &UserRecord) -> Self {
        let ext = u.external.as_ref();
        Self {
            username: u.username.clone(),
            email: ext.and_then(|e| e.email.as_deref()).map(email_case),
            groups: ext.map(|e| e.groups.clone()).unwrap_or_default(),
        }
    }
}

/// An email as compared everywhere: as the IdP sent it, with ASCII letters lower-cased only.
/// Unicode case folding would make a different address (`\u{212A}ate@…`, KELVIN SIGN) equal
/// an allow-listed `kate@…`.
pub(crate) fn email_case(email: &str) -> String {
    email.to_ascii_lowercase()
}

/// Which scopes a user may grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Grantable {
    All,
    Only(BTreeSet<String>),
}

impl Grantable {
    /// `requested` narrowed to what may be granted, in its order.
    pub(crate) fn narrow(&self, requested: &[String]) -> Vec<String> {
        match self {
            Grantable::All => requested.to_vec(),
            Grantable::Only(set) => requested
                .iter()
                .filter(|s| set.contains(*s))
                .cloned()
                .collect(),
        }
    }
}

/// Whether `users` lists the member: `*`, the username, or the verified email.
fn listed(users: &[String], m: &Member) -> bool {
    users.iter().any(|u| {
        u == "*"
            || *u == m.username
            || m.email
                .as_deref()
                .is_some_and(|e| u.eq_ignore_ascii_case(e))
    })
}

/// The names of the roles the member holds.
pub(crate) fn held<'a>(roles: &'a Roles, m: &Member) -> Vec<&'a str> {
    roles
        .iter()
        .filter(|(_, r)| listed(&r.users, m) || r.groups.iter().any(|g| m.groups.contains(g)))
        .map(|(name, _)| name.as_str())
        .collect()
}

/// The scopes the member may grant: every scope when no roles are configured; otherwise the
/// union of the held roles' scopes (a role without `scopes` gives every scope), nothing for a
/// member holding no role.
pub(crate) fn grantable(roles: &Roles, m: &Member) -> Grantable {
    if roles.is_empty() {
        return Grantable::All;
    }
    let mut only = BTreeSet::new();
    for name in held(roles, m) {
        match roles.get(name).and_then(|r| r.scopes.as_ref()) {
            None => return Grantable::All,
            Some(scopes) => only.extend(scopes.iter().cloned()),
        }
    }
    Grantable::Only(only)
}

/// Whether the member may use `resource`: open without `roles` and `users`; otherwise listed
/// in `users` or holding one of `roles`.
pub(crate) fn may_use(resource: &ResourceEntry, roles: &Roles, m: &Member) -> bool {
    if resource.roles.is_empty() && resource.users.is_empty() {
        return true;
    }
    listed(&resource.users, m)
        || held(roles, m)
            .iter()
            .any(|r| resource.roles.iter().any(|need| need == r))
}

/// Whether the member is an admin at `/account` through a role with `admin = true` (the local
/// admin flag on the user record counts besides).
pub(crate) fn admin(roles: &Roles, m: &Member) -> bool {
    held(roles, m)
        .iter()
        .any(|name| roles.get(*name).is_some_and(|r| r.admin))
}

/// Whether the member decides held calls (`/admin/approvals`) through a role with
/// `approver = true` (admins decide them besides).
pub(crate) fn approver(roles: &Roles, m: &Member) -> bool {
    held(roles, m)
        .iter()
        .any(|name| roles.get(*name).is_some_and(|r| r.approver))
}

/// Whether roles decide anything in this configuration (otherwise nobody needs looking up).
pub(crate) fn in_force(roles: &Roles, resources: &[ResourceEntry]) -> bool {
    !roles.is_empty()
        || resources
            .iter()
            .any(|r| !r.roles.is_empty() || !r.users.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;

    fn member(name: &str, email: Option<&str>, groups: &[&str]) -> Member {
        Member {
            username: name.into(),
            email: email.map(str::to_owned),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn roles() -> Roles {
        let mut r = Roles::new();
        r.insert(
            "readers".into(),
            Role {
                users: vec!["*".into()],
                scopes: Some(vec!["mcp:read".into()]),
                ..Role::default()
            },
        );
        r.insert(
            "writers".into(),
            Role {
                groups: vec!["eng".into()],
                users: vec!["alice".into(), "Bob@Example.com".into()],
                scopes: Some(vec!["mcp:read".into(), "mcp:write".into()]),
                admin: false,
                approver: false,
            },
        );
        r
    }

    fn route(roles: &[&str], users: &[&str]) -> ResourceEntry {
        ResourceEntry {
            url: "https://gw.example/notes/mcp".into(),
            name: "notes".into(),
            roles: roles.iter().map(|s| (*s).to_owned()).collect(),
            users: users.iter().map(|s| (*s).to_owned()).collect(),
            title: None,
        }
    }

    #[test]
    fn emails_fold_ascii_only_so_a_kelvin_sign_is_not_kate() {
        let kate = vec!["kate@partner.org".to_owned()];
        let kelvin = member(
            "kate-kelvin",
            Some(&email_case("\u{212A}ate@partner.org")),
            &[],
        );
        assert!(!listed(&kate, &kelvin));
        let upper = member("kate", Some(&email_case("KATE@Partner.org")), &[]);
        assert!(listed(&kate, &upper));
    }

    #[test]
    fn a_role_with_admin_makes_its_holders_admins_without_granting_scopes() {
        let mut r = roles();
        r.insert(
            "admins".into(),
            Role {
                groups: vec!["it".into()],
                scopes: Some(vec![]),
                admin: true,
                ..Role::default()
            },
        );
        let it = member("x", None, &["it"]);
        assert!(admin(&r, &it));
        assert!(!admin(&r, &member("alice", None, &["eng"])));
        let read: BTreeSet<String> = ["mcp:read"].map(String::from).into();
        assert_eq!(
            grantable(&r, &it),
            Grantable::Only(read),
            "readers (*) only"
        );
    }

    #[test]
    fn a_role_with_approver_makes_its_holders_approvers_not_admins() {
        let mut r = roles();
        r.insert(
            "leads".into(),
            Role {
                groups: vec!["leads".into()],
                scopes: Some(vec![]),
                approver: true,
                ..Role::default()
            },
        );
        let lead = member("x", None, &["leads"]);
        assert!(approver(&r, &lead) && !admin(&r, &lead));
        assert!(!approver(&r, &member("alice", None, &["eng"])));
    }

    #[test]
    fn without_roles_everyone_may_grant_everything() {
        let m = member("carol", None, &[]);
        assert_eq!(grantable(&Roles::new(), &m), Grantable::All);
        assert!(may_use(&route(&[], &[]), &Roles::new(), &m));
        assert!(!in_force(&Roles::new(), &[route(&[], &[])]));
    }

    #[test]
    fn groups_local_users_and_emails_map_to_scopes() {
        let r = roles();
        let write: BTreeSet<String> = ["mcp:read", "mcp:write"].map(String::from).into();
        let read: BTreeSet<String> = ["mcp:read"].map(String::from).into();
        assert_eq!(
            grantable(&r, &member("x", None, &["eng"])),
            Grantable::Only(write.clone())
        );
        assert_eq!(
            grantable(&r, &member("alice", None, &[])),
            Grantable::Only(write.clone())
        );
        assert_eq!(
            grantable(&r, &member("idp#7", Some("bob@example.com"), &[])),
            Grantable::Only(write)
        );
        assert_eq!(
            grantable(&r, &member("carol", None, &["ops"])),
            Grantable::Only(read.clone())
        );
        let scopes = ["mcp:write".to_owned(), "mcp:read".to_owned()];
        assert_eq!(Grantable::Only(read).narrow(&scopes), ["mcp:read"]);
    }

    #[test]
    fn a_member_of_no_role_may_grant_nothing() {
        let mut r = roles();
        r.remove("readers");
        assert_eq!(
            grantable(&r, &member("carol", None, &[])),
            Grantable::Only(BTreeSet::new())
        );
    }

    #[test]
    fn routes_require_a_role_or_a_listed_user() {
        let r = roles();
        let needs_writers = route(&["writers"], &[]);
        assert!(may_use(&needs_writers, &r, &member("x", None, &["eng"])));
        assert!(!may_use(&needs_writers, &r, &member("carol", None, &[])));
        let allow_list = route(&[], &["carol"]);
        assert!(may_use(&allow_list, &r, &member("carol", None, &[])));
        assert!(!may_use(&allow_list, &r, &member("alice", None, &[])));
        assert!(in_force(&Roles::new(), &[allow_list]));
    }
}
