//! Injected randomness: the `Ids` source that names new documents, random or sequential (tests).
//! Time comes from `pforte_clock`, injected the same way.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// Names new documents.
pub trait Ids: Send + Sync + 'static {
    fn new_uuid(&self) -> String;
}

/// Random v4 uuids.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RandomIds;

impl Ids for RandomIds {
    fn new_uuid(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// Predictable uuids `00000000-0000-4000-8000-00000000000N` (tests).
#[derive(Debug, Clone, Default)]
pub struct SequentialIds(Arc<AtomicU64>);

impl Ids for SequentialIds {
    fn new_uuid(&self) -> String {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        format!("00000000-0000-4000-8000-{n:012}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_are_deterministic() {
        let ids = SequentialIds::default();
        assert_eq!(ids.new_uuid(), "00000000-0000-4000-8000-000000000001");
        assert_eq!(ids.new_uuid(), "00000000-0000-4000-8000-000000000002");
    }
}
