//! Any bytes as a request header or option data: the checks answer, never panic, and what they
//! accept lies inside the export.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvarray_nbd::proto::*;

fuzz_target!(|data: &[u8]| {
    let _ = parse_info_request(data);
    let Some(bytes) = data.get(..REQUEST_HEADER_BYTES) else {
        return;
    };
    let header = RequestHeader::decode(bytes.try_into().expect("28 bytes"));
    let limits = ExportLimits {
        size_bytes: 1 << 30,
        block_bytes: 512,
        read_only: data.len() % 2 == 0,
    };
    if let Ok(CheckedRequest::Read {
        offset_bytes,
        len_bytes,
    })
    | Ok(CheckedRequest::Write {
        offset_bytes,
        len_bytes,
        ..
    }) = check_request(&header, &limits, data.len() % 3 == 0)
    {
        assert!(offset_bytes + u64::from(len_bytes) <= limits.size_bytes);
        assert!(len_bytes <= PAYLOAD_BYTES_MAX);
    }
});
