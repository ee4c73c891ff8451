//! The overview's "Virtual servers" section, gathered: each `[[virtual]]` with its members, the
//! tools each member contributes to the name map over the catalogs as last listed, and whether
//! a member route takes each person's own credential (`console/virtuals.rs` renders it).

use crate::{
    console::virtuals::{MemberRow, VirtualRow},
    proxy::Gateway,
};

impl Gateway {
    /// Every virtual server as the console shows it.
    pub(super) fn virtual_rows(&self) -> Vec<VirtualRow> {
        self.settings
            .virtuals
            .iter()
            .map(|v| {
                let (map, routes) = self.virtual_map(v);
                let members = v
                    .server
                    .members
                    .iter()
                    .zip(&routes)
                    .enumerate()
                    .map(|(m, (member, &route))| MemberRow {
                        route: member.route.clone(),
                        prefix: member.prefix.clone(),
                        tools: self
                            .edge
                            .catalogs
                            .get(route)
                            .and_then(|c| c.definitions())
                            .map(|_| map.entries.values().filter(|e| e.member == m).count()),
                        per_user: self.edge.credentials.per_user(route),
                    })
                    .collect();
                VirtualRow {
                    name: v.server.name.clone(),
                    title: v.server.title.clone(),
                    path: v.path.clone(),
                    members,
                    tools: map.entries.len(),
                    search: v.server.search.then_some(v.server.pinned.len()),
                }
            })
            .collect()
    }
}
