//! A minimal writer of Python pickles (protocol 2) for the values a memory snapshot holds:
//! dicts, lists, tuples, strings, integers, floats, booleans and `None`. It writes a stream of
//! opcodes as Python's own pickler would for those types, without the memo (no object is
//! shared), so `pickle.load` reads it back into plain Python objects. It owns nothing else.

/// Builds one pickle. Containers are opened and closed explicitly; the caller keeps them
/// balanced (dict entries as key, value pairs).
#[derive(Debug, Default)]
#[doc(hidden)]
pub struct PickleWriter {
    out: Vec<u8>,
}

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const TUPLE: u8 = b't';
const BINUNICODE: u8 = b'X';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const NONE: u8 = b'N';

impl PickleWriter {
    /// A pickle with its protocol header written.
    #[doc(hidden)]
    pub fn new() -> Self {
        PickleWriter {
            out: vec![PROTO, 2],
        }
    }

    /// Ends the pickle and returns its bytes.
    #[doc(hidden)]
    pub fn finish(mut self) -> Vec<u8> {
        self.out.push(STOP);
        self.out
    }

    /// Opens a dict: write key, value pairs, then [`PickleWriter::end_dict`].
    #[doc(hidden)]
    pub fn begin_dict(&mut self) {
        self.out.extend_from_slice(&[EMPTY_DICT, MARK]);
    }

    #[doc(hidden)]
    pub fn end_dict(&mut self) {
        self.out.push(SETITEMS);
    }

    /// Opens a list: write the items, then [`PickleWriter::end_list`].
    #[doc(hidden)]
    pub fn begin_list(&mut self) {
        self.out.extend_from_slice(&[EMPTY_LIST, MARK]);
    }

    #[doc(hidden)]
    pub fn end_list(&mut self) {
        self.out.push(APPENDS);
    }

    /// Opens a tuple: write the items, then [`PickleWriter::end_tuple`].
    #[doc(hidden)]
    pub fn begin_tuple(&mut self) {
        self.out.push(MARK);
    }

    #[doc(hidden)]
    pub fn end_tuple(&mut self) {
        self.out.push(TUPLE);
    }

    #[doc(hidden)]
    pub fn str(&mut self, s: &str) {
        self.out.push(BINUNICODE);
        // A pickle string is at most 4 GiB; snapshot strings are names and file paths.
        let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(&s.as_bytes()[..len as usize]);
    }

    #[doc(hidden)]
    pub fn int(&mut self, v: i128) {
        if let Ok(b) = u8::try_from(v) {
            self.out.extend_from_slice(&[BININT1, b]);
        } else if let Ok(h) = u16::try_from(v) {
            self.out.push(BININT2);
            self.out.extend_from_slice(&h.to_le_bytes());
        } else if let Ok(w) = i32::try_from(v) {
            self.out.push(BININT);
            self.out.extend_from_slice(&w.to_le_bytes());
        } else {
            // Two's complement, little-endian, as short as the sign allows.
            let bytes = v.to_le_bytes();
            let mut len = bytes.len();
            while len > 1 {
                let (top, next) = (bytes[len - 1], bytes[len - 2]);
                let redundant = (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0);
                if !redundant {
                    break;
                }
                len -= 1;
            }
            self.out.extend_from_slice(&[LONG1, len as u8]);
            self.out.extend_from_slice(&bytes[..len]);
        }
    }

    #[doc(hidden)]
    pub fn uint(&mut self, v: u64) {
        self.int(i128::from(v));
    }

    #[doc(hidden)]
    pub fn float(&mut self, v: f64) {
        self.out.push(BINFLOAT);
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    #[doc(hidden)]
    pub fn bool(&mut self, v: bool) {
        self.out.push(if v { NEWTRUE } else { NEWFALSE });
    }

    #[doc(hidden)]
    pub fn none(&mut self) {
        self.out.push(NONE);
    }

    /// `key: <string>` inside an open dict.
    #[doc(hidden)]
    pub fn entry_str(&mut self, key: &str, value: &str) {
        self.str(key);
        self.str(value);
    }

    /// `key: <int>` inside an open dict.
    #[doc(hidden)]
    pub fn entry_uint(&mut self, key: &str, value: u64) {
        self.str(key);
        self.uint(value);
    }
}

#[cfg(test)]
mod tests {
    use super::PickleWriter;

    // The expected bytes are what CPython's `pickle.dumps(value, protocol=2)` writes for the
    // same values after `pickletools.optimize` (which drops the memo opcodes `pickle.loads`
    // does not need), except that CPython writes a pair as `TUPLE2` where this writer uses the
    // general `MARK … TUPLE`, which reads the same.

    #[test]
    fn integers_use_the_shortest_opcode() {
        let mut p = PickleWriter::new();
        p.begin_list();
        for v in [
            0,
            255,
            256,
            65535,
            65536,
            -1,
            i128::from(i32::MIN),
            1 << 40,
            -(1 << 40),
        ] {
            p.int(v);
        }
        p.end_list();
        let bytes = p.finish();
        let expected: Vec<u8> = [
            &[0x80, 2, b']', b'('][..],
            &[b'K', 0],
            &[b'K', 255],
            &[b'M', 0, 1],
            &[b'M', 255, 255],
            &[b'J', 0, 0, 1, 0],
            &[b'J', 255, 255, 255, 255],
            &[b'J', 0, 0, 0, 0x80],
            &[0x8a, 6, 0, 0, 0, 0, 0, 1],
            &[0x8a, 6, 0, 0, 0, 0, 0, 0xff],
            b"e.",
        ]
        .concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn containers_strings_and_constants() {
        let mut p = PickleWriter::new();
        p.begin_dict();
        p.entry_str("a", "é");
        p.str("t");
        p.begin_tuple();
        p.int(1);
        p.bool(true);
        p.end_tuple();
        p.str("n");
        p.none();
        p.str("f");
        p.float(0.5);
        p.str("b");
        p.bool(false);
        p.end_dict();
        let expected: Vec<u8> = [
            &[0x80, 2, b'}', b'('][..],
            &[b'X', 1, 0, 0, 0, b'a'],
            &[b'X', 2, 0, 0, 0, 0xc3, 0xa9],
            &[b'X', 1, 0, 0, 0, b't', b'(', b'K', 1, 0x88, b't'],
            &[b'X', 1, 0, 0, 0, b'n', b'N'],
            &[b'X', 1, 0, 0, 0, b'f', b'G', 0x3f, 0xe0, 0, 0, 0, 0, 0, 0],
            &[b'X', 1, 0, 0, 0, b'b', 0x89],
            b"u.",
        ]
        .concat();
        assert_eq!(p.finish(), expected);
    }
}
