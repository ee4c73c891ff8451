//! Placeholder until the audit module lands.

#[derive(Debug, serde::Serialize)]
pub struct AuditPrincipal<'a> {
    pub kind: &'a str,
    pub subject: &'a str,
    pub client: &'a str,
}

#[derive(Debug, serde::Serialize)]
pub struct AuditRecord<'a> {
    pub time: String,
    pub request_id: &'a str,
    pub route: &'a str,
    pub principal: Option<AuditPrincipal<'a>>,
    pub method: &'a str,
    pub name: Option<&'a str>,
    pub decision: &'a str,
    pub reason: Option<&'a str>,
    pub upstream_status: Option<u16>,
    pub duration_ms: u64,
}

#[derive(Debug)]
pub struct AuditLog;

impl AuditLog {
    pub fn record(&self, rec: &AuditRecord<'_>) {
        if let Ok(line) = serde_json::to_string(rec) {
            println!("{line}");
        }
    }
}

pub fn timestamp(ms: u64) -> String {
    ms.to_string()
}
