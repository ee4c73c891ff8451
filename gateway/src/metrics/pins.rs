//! The pinned tool definitions' series: each change of a pinned definition the gateway saw,
//! by route and whether it is held or only logged (`pforte_tool_definition_changes`).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::RouteName;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    route: RouteName,
    outcome: &'static str,
}

/// What `pins.rs` counts into (through the report wired at start).
#[derive(Clone, Debug, Default)]
pub(crate) struct PinMetrics {
    changes: Family<ChangeLabels, Counter>,
}

impl PinMetrics {
    /// The family, registered in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let pins = Self::default();
        registry.register(
            "pforte_tool_definition_changes",
            "Changes of a pinned tool definition seen in a route's catalog, held (until \
             approved) or logged",
            pins.changes.clone(),
        );
        pins
    }

    /// One change of `route`'s tool definition.
    pub(crate) fn changed(&self, route: &str, held: bool) {
        self.changes
            .get_or_create(&ChangeLabels {
                route: RouteName::from(route),
                outcome: if held { "held" } else { "logged" },
            })
            .inc();
    }
}
