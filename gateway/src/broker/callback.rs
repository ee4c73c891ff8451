//! The authorization response at Pforte's `/connect/{route}/callback`: `state` (to find the
//! pending authorization), then either `code` or an OAuth `error`, and `iss` (RFC 9207), which
//! must name the server the authorization was started at — a mix-up defence: a response
//! carried to the wrong callback is refused before its code is sent anywhere — pure.

use super::discover::UpstreamServer;

/// A callback's parameters (the first of each; unknown ones ignored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Callback {
    pub state: String,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
    iss: Option<String>,
}

/// Why a callback gives no code.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallbackError {
    /// The user declined, or the server refused the request (`error`, its description).
    #[error("the authorization server answered {error}{}", describe(.description))]
    Denied {
        error: String,
        description: Option<String>,
    },
    /// `iss` names another server than the one the authorization was started at (or is
    /// missing where the server promised it).
    #[error("the response's issuer {found:?} is not {expected}")]
    WrongIssuer {
        expected: String,
        found: Option<String>,
    },
    #[error("the response carries neither code nor error")]
    NoCode,
}

fn describe(d: &Option<String>) -> String {
    d.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
}

/// The callback's query string read; `None` without a `state` (nothing to match it to).
pub fn read_callback(query: &str) -> Option<Callback> {
    let mut state = None;
    let mut c = Callback {
        state: String::new(),
        code: None,
        error: None,
        error_description: None,
        iss: None,
    };
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let slot = match k.as_ref() {
            "state" => &mut state,
            "code" => &mut c.code,
            "error" => &mut c.error,
            "error_description" => &mut c.error_description,
            "iss" => &mut c.iss,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v.into_owned());
        }
    }
    c.state = state.filter(|s| !s.is_empty())?;
    Some(c)
}

impl Callback {
    /// The code, once the response is known to come from `server` (its `iss`, required when
    /// the server advertises `authorization_response_iss_parameter_supported`).
    pub fn code_for(&self, server: &UpstreamServer) -> Result<&str, CallbackError> {
        let issuer_ok = match &self.iss {
            Some(iss) => iss == &server.issuer,
            None => !server.iss_parameter_supported,
        };
        if !issuer_ok {
            return Err(CallbackError::WrongIssuer {
                expected: server.issuer.clone(),
                found: self.iss.clone(),
            });
        }
        if let Some(e) = &self.error {
            return Err(CallbackError::Denied {
                error: e.clone(),
                description: self.error_description.clone(),
            });
        }
        self.code
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or(CallbackError::NoCode)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use url::Url;

    fn server(iss_supported: bool) -> UpstreamServer {
        UpstreamServer {
            resource: "https://up.example/mcp".into(),
            issuer: "https://as.example".into(),
            authorization_endpoint: Url::parse("https://as.example/authorize").unwrap(),
            token_endpoint: Url::parse("https://as.example/token").unwrap(),
            registration_endpoint: None,
            revocation_endpoint: None,
            cimd_supported: false,
            iss_parameter_supported: iss_supported,
            scopes_supported: Vec::new(),
            token_auth_methods: Vec::new(),
            ca_file: None,
            allowed_hosts: Vec::new(),
        }
    }

    #[test]
    fn a_code_from_the_right_server() {
        let c = read_callback("code=c1&state=s1&iss=https%3A%2F%2Fas.example&x=y").unwrap();
        assert_eq!(c.state, "s1");
        assert_eq!(c.code_for(&server(true)), Ok("c1"));
        assert_eq!(c.code_for(&server(false)), Ok("c1"));
        let quiet = read_callback("state=s1&code=c1").unwrap();
        assert_eq!(quiet.code_for(&server(false)), Ok("c1"));
        let twice = read_callback("state=s1&code=c1&code=c2").unwrap();
        assert_eq!(twice.code_for(&server(false)), Ok("c1"));
    }

    #[test]
    fn mix_up_and_refusals() {
        let other = read_callback("code=c1&state=s1&iss=https%3A%2F%2Fevil.example").unwrap();
        assert!(matches!(
            other.code_for(&server(false)),
            Err(CallbackError::WrongIssuer { .. })
        ));
        let missing = read_callback("code=c1&state=s1").unwrap();
        assert!(matches!(
            missing.code_for(&server(true)),
            Err(CallbackError::WrongIssuer { found: None, .. })
        ));
        let denied =
            read_callback("error=access_denied&error_description=no%20thanks&state=s1").unwrap();
        assert_eq!(
            denied.code_for(&server(false)),
            Err(CallbackError::Denied {
                error: "access_denied".into(),
                description: Some("no thanks".into())
            })
        );
        assert_eq!(
            read_callback("state=s1").unwrap().code_for(&server(false)),
            Err(CallbackError::NoCode)
        );
        assert_eq!(read_callback("code=c1"), None);
        assert_eq!(read_callback("code=c1&state="), None);
    }
}
