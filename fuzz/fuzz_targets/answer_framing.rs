//! Fuzzes the upstream answer reader (`pforte::proxy::wire`: head, framing, chunk decoding,
//! through `decode_answer`) with the input cut into pieces of every size the first byte picks:
//! no panic, no hang; the result does not depend on how the bytes were cut; a head the client
//! gets states exactly one framing (`Transfer-Encoding: chunked`, one `Content-Length` equal to
//! the body's length, or neither) and never a `101`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::decode_answer;

fuzz_target!(|data: &[u8]| {
    let Some((&first, wire)) = data.split_first() else {
        return;
    };
    let step = usize::from(first % 16) + 1;
    let cut = decode_answer(wire, step);
    let whole = decode_answer(wire, wire.len().max(1));
    match (&cut, &whole) {
        (Ok((a, body_a)), Ok((b, body_b))) => {
            assert_eq!(a.status, b.status);
            assert_eq!(body_a, body_b);
        }
        (Err(_), Err(_)) => {}
        _ => panic!("the cut changed the outcome: {cut:?} / {whole:?}"),
    }
    let Ok((head, body)) = whole else {
        return;
    };
    let status = head.status.as_u16();
    assert_ne!(status, 101);
    if status == 204 || status == 304 {
        // No body, whatever the lines say: the client's writer sends none.
        assert!(body.is_empty());
        return;
    }
    let te: Vec<_> = head.headers.get_all("transfer-encoding").iter().collect();
    let cl: Vec<_> = head.headers.get_all("content-length").iter().collect();
    match (te.as_slice(), cl.as_slice()) {
        ([], []) => {}
        ([only], []) => assert_eq!(only.as_bytes(), b"chunked"),
        ([], [only]) => assert_eq!(only.to_str().ok(), Some(body.len().to_string().as_str())),
        _ => panic!("ambiguous framing: {:?}", head.headers),
    }
});
