//! Decoding arbitrary bytes must never panic, and whatever decodes must re-encode to the same
//! bytes (the format has one encoding per value, which signatures and dedupe rely on).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = consort_net::decode_frame(data) {
        let again = consort_net::encode_frame(&frame).expect("a decoded frame re-encodes");
        assert_eq!(again, data, "one encoding per frame");
    }
    let _ = consort_net::decode_call(data);
    let _ = consort_net::decode_reply(data);
});
