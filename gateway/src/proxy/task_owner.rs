//! The task step of the admission (SEP-2663): a `tasks/get|update|cancel` request passes only
//! for the principal whose `tools/call` created the task, on that route, with that tool's
//! scopes; the records are `crate::tasks`.

use super::Gateway;
use crate::{
    auth::Principal,
    mcp::{Kind, Message},
    reply::Rejection,
    tasks::{self, Standing},
};

impl Gateway {
    /// A task request (`tasks/get|update|cancel`) is admitted only for the principal whose
    /// `tools/call` created the task, on the same route, with that tool's scopes; any other
    /// task id (another's, or one the gateway never saw created) is 404 and never reaches the
    /// upstream.
    pub(super) async fn check_task(
        &self,
        principal: &Principal,
        message: &Message,
        route: usize,
        owner: &str,
    ) -> Result<(), Rejection> {
        let not_found = || Rejection::TaskNotFound {
            id: message.id.clone(),
        };
        let Some(task_id) = message.target.as_deref() else {
            return Err(not_found());
        };
        let record = self.edge.tasks.get(task_id).await.map_err(|e| {
            tracing::warn!(error = %e, "task records unavailable");
            Rejection::CredentialsUnavailable
        })?;
        let name = &self.settings.routes[route].name;
        match tasks::standing(record.as_ref(), owner, name) {
            Standing::Owner(tool) if self.settings.admission.tool_policy => {
                // The task carries on its tool's call: the tool's rules and scopes apply.
                let call = Message {
                    kind: Kind::Request,
                    method: "tools/call".to_owned(),
                    target: Some(tool),
                    id: message.id.clone(),
                    traceparent: None,
                    meta_version: None,
                };
                self.authorize(principal, &call, route).await
            }
            Standing::Owner(_) => Ok(()),
            Standing::Foreign | Standing::Unknown => Err(not_found()),
        }
    }
}
