//! Blocks: ids and alignment, and a block freed only to its own allocator. (Host pointers only from host memory, and a device kept alive exactly as long as its allocations, are rules of devices: `vramguard-memory`'s `device::tests`.)

use super::*;

#[test]
fn block_ids_are_unique_and_memory_is_aligned() {
    let a = fixed();
    let b1 = a.allocate(100).unwrap();
    let b2 = a.allocate(100).unwrap();
    let id2 = b2.id;
    a.free(b2);
    let b3 = a.allocate(100).unwrap();
    assert_eq!(b3.addr % 64, 0);
    assert!(b1.id != id2 && b3.id != id2 && b3.id != b1.id);
    a.free(b1);
    a.free(b3);
}

#[test]
fn a_block_from_another_allocator_is_refused() {
    let a = fixed();
    let b = fixed();
    let foreign = a.allocate(1000).unwrap();
    let mine = b.allocate(1000).unwrap();
    let before = b.stats();
    b.free(foreign);
    assert_eq!(b.stats(), before);
    check(&b);
    // `mine` is still live: the next block must not be handed out over it.
    let next = b.allocate(1000).unwrap();
    assert_ne!(next.addr, mine.addr);

    // A block of an allocator that is gone (its address may be reused by the next one).
    let gone = fixed();
    let stale = gone.allocate(1000).unwrap();
    drop(gone);
    let c = fixed();
    let live = c.allocate(1000).unwrap();
    let before = c.stats();
    c.free(stale);
    assert_eq!(c.stats(), before);
    check(&c);
    let other = c.allocate(1000).unwrap();
    assert_ne!(other.addr, live.addr);
    for (x, blk) in [(&b, mine), (&b, next), (&c, live), (&c, other)] {
        x.free(blk);
    }
    assert_eq!(b.stats().allocated_bytes, 0);
    assert_eq!(c.stats().allocated_bytes, 0);
}
