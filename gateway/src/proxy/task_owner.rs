//! The task step of the admission (SEP-2663): a `tasks/get|update|cancel` request passes only
//! for the principal whose `tools/call` created the task, on that route, with that tool's
//! scopes, and goes to the instance that answered that call; the records are `crate::tasks`.

use super::Gateway;
use crate::{
    auth::Principal,
    mcp::{Kind, Message},
    reply::Rejection,
    tasks::{self, Standing},
};

/// An admitted task request.
#[derive(Debug)]
pub(super) struct TaskAdmitted {
    /// The tool whose call created the task.
    pub(super) tool: String,
    /// On a route with several instances: the one holding the task.
    pub(super) instance: Option<usize>,
}

impl Gateway {
    /// A task request (`tasks/get|update|cancel`) is admitted only for the principal whose
    /// `tools/call` created the task, on the same route, with that tool's scopes; any other
    /// task id (another's, or one the gateway never saw created) is 404 and never reaches the
    /// upstream. On a route with several instances it goes to the one that answered the call
    /// (in a session: only if that is the session's, `session_instance`); when that one is gone
    /// the task is not found either — never asked of another instance.
    pub(super) async fn check_task(
        &self,
        principal: &Principal,
        message: &Message,
        route: usize,
        owner: &str,
        session_instance: Option<usize>,
    ) -> Result<TaskAdmitted, Rejection> {
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
        let Standing::Owner(record) = tasks::standing(record.as_ref(), owner, name) else {
            return Err(not_found());
        };
        if self.settings.admission.tool_policy {
            // The task carries on its tool's call: the tool's rules and scopes apply.
            let call = Message {
                kind: Kind::Request,
                method: "tools/call".to_owned(),
                target: Some(record.tool.clone()),
                id: message.id.clone(),
                traceparent: None,
                meta_version: None,
            };
            self.authorize(principal, &call, route).await?;
        }
        let Some(instances) = self.routes.get(route).and_then(|r| r.instances.as_ref()) else {
            return Ok(TaskAdmitted {
                tool: record.tool,
                instance: None,
            });
        };
        let held = instances.route_session(record.instance.as_deref());
        match tasks::instance_for(held, session_instance) {
            Some(i) => Ok(TaskAdmitted {
                tool: record.tool,
                instance: Some(i),
            }),
            None => {
                tracing::info!(
                    route = instances.route(),
                    gone = ?held.err(),
                    in_session = session_instance.is_some(),
                    "task unreachable: 404, never asked of another instance"
                );
                Err(Rejection::TaskUnreachable {
                    id: message.id.clone(),
                })
            }
        }
    }
}
