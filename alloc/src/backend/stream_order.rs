//! Which streams must wait for which before a buffer is used on a stream: the ordering rule of
//! `device::CudaBuffer`, kept apart from the driver calls so the host tests check it.
//!
//! The rule is cudarc's `CudaSlice`'s (a read waits for the last write; a write waits for the
//! last write and for every read since), in both directions: the buffer's own stream waits
//! for another stream's writes just as another stream waits for the own stream's. A stream
//! that already waited for the last write reads without waiting again.

use super::StreamId;

/// How a launch uses the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Access {
    /// The launch only reads it (`DevicePtr::device_ptr`).
    Read,
    /// The launch may write it (`DevicePtrMut::device_ptr_mut`).
    Write,
}

/// The streams that wrote and read a buffer last.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct StreamOrder {
    /// The stream of the last write (the buffer's own stream at first: its contents, zeros or
    /// a previous owner's bytes, are ordered on it).
    writer: StreamId,
    /// Streams that read since that write (each already waited for it).
    readers: Vec<StreamId>,
}

impl StreamOrder {
    /// A buffer whose contents are ordered on `owner`.
    #[doc(hidden)]
    pub fn new(owner: StreamId) -> StreamOrder {
        StreamOrder {
            writer: owner,
            readers: Vec::new(),
        }
    }

    /// Notes `access` on `stream` and returns the streams whose work queued so far `stream`
    /// must wait for first (none, one, or for a write the readers since the last write).
    #[doc(hidden)]
    pub fn access(&mut self, stream: StreamId, access: Access) -> Vec<StreamId> {
        let mut waits = Vec::new();
        match access {
            Access::Read => {
                if stream != self.writer && !self.readers.contains(&stream) {
                    waits.push(self.writer);
                }
                if !self.readers.contains(&stream) {
                    self.readers.push(stream);
                }
            }
            Access::Write => {
                if stream != self.writer && !self.readers.contains(&stream) {
                    waits.push(self.writer);
                }
                for &r in &self.readers {
                    if r != stream && !waits.contains(&r) {
                        waits.push(r);
                    }
                }
                self.writer = stream;
                self.readers.clear();
            }
        }
        waits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: StreamId = StreamId(0x10);
    const SIDE: StreamId = StreamId(0x20);
    const THIRD: StreamId = StreamId(0x30);

    #[test]
    fn the_own_stream_waits_for_another_streams_write() {
        let mut o = StreamOrder::new(OWN);
        assert_eq!(o.access(OWN, Access::Write), vec![]);
        // The side stream reads and writes after the own stream's write...
        assert_eq!(o.access(SIDE, Access::Write), vec![OWN]);
        // ...and the own stream must see that write (the direction that was missing).
        assert_eq!(o.access(OWN, Access::Read), vec![SIDE]);
        assert_eq!(o.access(OWN, Access::Read), vec![]);
    }

    #[test]
    fn a_write_waits_for_every_read_since_the_last_write() {
        let mut o = StreamOrder::new(OWN);
        assert_eq!(o.access(SIDE, Access::Read), vec![OWN]);
        assert_eq!(o.access(THIRD, Access::Read), vec![OWN]);
        // Reads need not wait for reads; the side stream already waited for the write.
        assert_eq!(o.access(SIDE, Access::Read), vec![]);
        assert_eq!(o.access(OWN, Access::Write), vec![SIDE, THIRD]);
        assert_eq!(o.access(THIRD, Access::Write), vec![OWN]);
        // A reader that writes waits for the other readers only.
        assert_eq!(o.access(SIDE, Access::Read), vec![THIRD]);
        assert_eq!(o.access(OWN, Access::Read), vec![THIRD]);
        assert_eq!(o.access(SIDE, Access::Write), vec![OWN]);
    }

    #[test]
    fn work_on_the_own_stream_alone_never_waits() {
        let mut o = StreamOrder::new(OWN);
        for access in [Access::Read, Access::Write, Access::Read, Access::Write] {
            assert_eq!(o.access(OWN, access), vec![]);
        }
    }
}
