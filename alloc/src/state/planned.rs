//! A request of a planned batch-scope iteration placed where its plan puts it (the `plan`
//! module decides where; this file finds the free block of the expandable segment that holds
//! that range and cuts it out).

use super::{State, NIL};
use crate::plan::Obstacle;
use crate::Backend;

impl State {
    /// The block the plan puts request `ordinal` of `size` bytes in, mapping pages at the end
    /// of the expandable segment (within `limit`) when the plan reaches past it.
    #[doc(hidden)]
    pub fn take_planned<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        limit: Option<u64>,
        name: &str,
        size: usize,
        ordinal: u32,
    ) -> Option<u32> {
        let e = self.expandable?;
        let (mut live, mut holes) = (Vec::new(), Vec::new());
        if let Some(si) = e.seg {
            let mut at = self.segs[si as usize].head;
            while at != NIL {
                let n = &self.nodes[at as usize];
                if !n.mapped {
                    holes.push((n.addr, n.size));
                } else if n.allocated {
                    live.push(Obstacle {
                        addr: n.addr,
                        size: n.size,
                        ordinal: self.planner.ordinal(n.id),
                    });
                }
                at = n.next;
            }
        }
        let addr = self.planner.place(ordinal, size, e.addr, &live, &holes)?;
        let end = addr + size as u64;
        if end > e.addr + e.virt as u64 || !self.map_through(backend, limit, name, end) {
            return None;
        }
        self.take_range(addr, size)
    }

    /// Takes exactly `[addr, addr + size)` for a planned request, when a free block of the
    /// expandable segment holds it: the block is cut before and after the range, the pieces
    /// staying free. Returns the slot of the range (not yet marked allocated).
    fn take_range(&mut self, addr: u64, size: usize) -> Option<u32> {
        let si = self.expandable?.seg?;
        let mut at = self.segs[si as usize].head;
        while at != NIL {
            let n = &self.nodes[at as usize];
            if n.addr + n.size as u64 > addr {
                break;
            }
            at = n.next;
        }
        if at == NIL || !self.is_free(at) {
            return None;
        }
        let (baddr, bsize, pool) = {
            let n = &self.nodes[at as usize];
            (n.addr, n.size, n.pool)
        };
        if baddr > addr || addr + size as u64 > baddr + bsize as u64 {
            return None;
        }
        self.lookups[pool as usize] += 1;
        self.free_set_of(at).remove(bsize, baddr, at);
        self.note_inactive(at, bsize, false);
        let slot = if addr > baddr {
            let front = (addr - baddr) as usize;
            self.nodes[at as usize].size = front;
            let slot = self.insert_node_after(at, addr, bsize - front);
            self.free_set_of(at).insert(front, baddr, at);
            self.note_inactive(at, front, true);
            slot
        } else {
            at
        };
        let rest = self.nodes[slot as usize].size - size;
        if rest > 0 {
            self.split(slot, size);
        }
        Some(slot)
    }
}
