// Another library's `.backward()` (a tape, an undo stack) under #[inference]: the lint reads
// names, not types, so it warns, and the code still compiles.
struct UndoStack(Vec<u32>);

impl UndoStack {
    fn backward(&mut self) -> Option<u32> {
        self.0.pop()
    }
}

#[vramguard::inference]
fn undo_twice(stack: &mut UndoStack) -> Option<u32> {
    stack.backward();
    stack.backward()
}

fn main() {
    let mut stack = UndoStack(vec![1, 2, 3]);
    assert_eq!(undo_twice(&mut stack), Some(2));
}
