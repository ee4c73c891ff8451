//! Fuzzes the catalog's event-stream reader (`pforte::catalog::sse::EventReader`) with the
//! input cut into pieces of every size the first byte picks and a cap the second byte picks:
//! no panic; how the bytes are cut changes nothing (the same events, the same overflow); no
//! event's data is longer than the cap; and once the cap is passed the reader holds nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::{EventReader, TooLong};

/// Every event `stream` completes, cut in `step`-byte pieces, under a cap of `max` bytes; the
/// overflow if there is one (then the events up to it).
fn read(stream: &[u8], step: usize, max: usize) -> (Vec<Vec<u8>>, Option<TooLong>) {
    let mut reader = EventReader::new(max);
    let mut events = Vec::new();
    for piece in stream.chunks(step) {
        match reader.push(piece) {
            Ok(done) => events.extend(done),
            Err(e) => {
                // The reader is reusable only as an empty one: nothing of the stream is held.
                return (events, Some(e));
            }
        }
    }
    match reader.finish() {
        Ok(last) => events.extend(last),
        Err(e) => return (events, Some(e)),
    }
    (events, None)
}

fuzz_target!(|data: &[u8]| {
    let [first, second, stream @ ..] = data else {
        return;
    };
    let step = usize::from(first % 16) + 1;
    let max = usize::from(*second) + 1;
    let (cut_events, cut_err) = read(stream, step, max);
    let (whole_events, whole_err) = read(stream, stream.len().max(1), max);
    assert_eq!(cut_err, whole_err, "the cut changed the overflow");
    if whole_err.is_none() {
        assert_eq!(cut_events, whole_events, "the cut changed the events");
    }
    for event in cut_events.iter().chain(&whole_events) {
        assert!(event.len() <= max, "an event of {} bytes past a cap of {max}", event.len());
    }
});
