//! The `[[policy]]` rules' series: each decision a rule took, by route, rule and effect
//! (`pforte_policy_decisions`). Rule names come from the configuration: the series are bounded.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::{Metrics, RouteName};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    route: RouteName,
    rule: RouteName,
    effect: &'static str,
}

/// The decisions of the rules.
#[derive(Clone, Debug, Default)]
pub(crate) struct RuleMetrics {
    decisions: Family<DecisionLabels, Counter>,
}

impl RuleMetrics {
    /// The family, registered in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let rules = Self::default();
        registry.register(
            "pforte_policy_decisions",
            "Messages a [[policy]] rule decided, by route, rule and effect (deny, approve, allow)",
            rules.decisions.clone(),
        );
        rules
    }
}

impl Metrics {
    /// Rule `rule` decided a message on route `route` (an index) with `effect`.
    pub(crate) fn rule_decided(&self, route: usize, rule: &str, effect: &'static str) {
        self.rules
            .decisions
            .get_or_create(&DecisionLabels {
                route: self.route(Some(route)),
                rule: RouteName::from(rule),
                effect,
            })
            .inc();
    }
}
