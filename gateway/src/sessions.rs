//! Placeholder until the sessions module lands: an in-process map.

use std::{collections::HashMap, sync::Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    Owner,
    Foreign,
    Unknown,
}

#[derive(Debug, thiserror::Error)]
#[error("session store unavailable")]
pub struct SessionError;

#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<String, String>>);

impl Sessions {
    pub async fn bind(&self, id: &str, owner: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(id.to_owned(), owner.to_owned());
        }
    }
    pub async fn check(&self, id: &str, owner: &str) -> Result<Ownership, SessionError> {
        let m = self.0.lock().map_err(|_| SessionError)?;
        Ok(match m.get(id) {
            None => Ownership::Unknown,
            Some(o) if o == owner => Ownership::Owner,
            Some(_) => Ownership::Foreign,
        })
    }
    pub async fn forget(&self, id: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(id);
        }
    }
}
