//! `memory::dump_snapshot` writes PyTorch's snapshot pickle: read back with Python's `pickle`
//! and checked field by field against the schema `torch.cuda.memory._snapshot` documents (and
//! `torch/csrc/cuda/memory_snapshot.cpp` writes). Skipped, with the reason printed, where
//! `python3` is missing.

use std::process::Command;
use vramguard_alloc::{AllocatorConfig, HostBackend};
use vramguard_memory::scope::BatchScope;
use vramguard_memory::{memory, Device};
use vramguard_tensor::Tensor;

const MIB: u64 = 1 << 20;

/// Checks the pickle at argv[1] against the schema and the expectations in argv[2] (JSON).
const CHECK: &str = r#"
import json, pickle, sys
with open(sys.argv[1], "rb") as f:
    s = pickle.load(f)
want = json.loads(sys.argv[2])
assert set(s) == {"segments", "device_traces", "allocator_settings"}, set(s)
assert s["allocator_settings"] == {"max_split_size": None, "garbage_collection_threshold": 0.0,
                                   "expandable_segments": True}, s["allocator_settings"]

FRAME = {"filename": str, "line": int, "name": str}
def check_frames(frames):
    assert isinstance(frames, list), frames
    for fr in frames:
        assert {k: type(v) for k, v in fr.items()} == FRAME, fr

SEGMENT = {"device": int, "address": int, "total_size": int, "allocated_size": int,
           "active_size": int, "requested_size": int, "stream": int, "segment_type": str,
           "segment_pool_id": tuple, "is_expandable": bool, "frames": list, "blocks": list}
BLOCK = {"address": int, "size": int, "requested_size": int, "state": str, "frames": list}
live = []
for seg in s["segments"]:
    assert {k: type(v) for k, v in seg.items()} == SEGMENT, seg
    assert seg["device"] == 0 and seg["stream"] == 0 and seg["segment_pool_id"] == (0, 0)
    assert seg["segment_type"] in ("small", "large")
    check_frames(seg["frames"])
    at = seg["address"]
    for b in seg["blocks"]:
        assert {k: type(v) for k, v in b.items()} == BLOCK, b
        assert b["address"] == at, "blocks tile the segment in address order"
        at += b["size"]
        assert b["state"] in ("active_allocated", "inactive"), b
        check_frames(b["frames"])
        if b["state"] == "active_allocated":
            live.append(b)
        else:
            assert b["frames"] == [] and b["requested_size"] == 0, b
    assert at == seg["address"] + seg["total_size"]
    active = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
    assert seg["allocated_size"] == seg["active_size"] == sum(b["size"] for b in active)
    assert seg["requested_size"] == sum(b["requested_size"] for b in active)
# What _memory_viz.segsum asserts: allocated + internal + external free = reserved.
internal = sum(b["size"] - b["requested_size"] for b in live)
external = sum(b["size"] for seg in s["segments"] for b in seg["blocks"] if b["state"] == "inactive")
reserved = sum(seg["total_size"] for seg in s["segments"])
assert sum(b["requested_size"] for b in live) + internal + external == reserved
assert reserved == want["reserved"], (reserved, want["reserved"])
assert sorted([b["size"], b["requested_size"], b["frames"]] for b in live) == want["live"], live
assert {seg["is_expandable"] for seg in s["segments"]} == {True, False}

assert isinstance(s["device_traces"], list) and len(s["device_traces"]) == 1
trace = s["device_traces"][0]
ENTRY = {"action": str, "addr": int, "size": int, "stream": int, "time_us": int, "frames": list}
for e in trace:
    keys = dict(ENTRY)
    if e["action"] == "oom":
        del keys["addr"]
        keys["device_free"] = int
    if "user_metadata" in e:
        keys["user_metadata"] = str
    assert {k: type(v) for k, v in e.items()} == keys, e
    check_frames(e["frames"])
times = [e["time_us"] for e in trace]
assert times == sorted(times)
got = [[e["action"], e["size"], e["frames"], e.get("user_metadata")] for e in trace]
assert got == want["trace"], json.dumps(got)
allocated = {}
for e in trace:
    if e["action"] == "alloc":
        allocated[e["addr"]] = e["size"]
    elif e["action"] == "free_requested":
        assert allocated[e["addr"]] == e["size"], "a free names a live allocation"
    elif e["action"] == "free_completed":
        assert allocated.pop(e["addr"]) == e["size"]
print("schema ok:", len(s["segments"]), "segments,", len(trace), "trace entries")
"#;

fn python3() -> Option<String> {
    let out = Command::new("python3").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn frame(line: u32, name: &str) -> serde_json::Value {
    serde_json::json!([{"filename": file!(), "line": line, "name": name}])
}

#[test]
fn the_snapshot_pickle_reads_back_with_pythons_pickle_as_pytorch_documents_it() {
    let Some(version) = python3() else {
        println!("skipped: python3 not found (needed to read the pickle back)");
        return;
    };
    // Expandable segments, as the default on Unix; the small pool has fixed segments.
    let config = AllocatorConfig::default()
        .with_expandable_segments(true)
        .with_memory_limit(64 * MIB);
    let device = Device::host_pool(HostBackend::new(), config).unwrap();
    memory::record_trace(&device, 1000);
    let (kept, lines) = {
        let _iteration = BatchScope::enter("train");
        let x = Tensor::zeros(&[4, 1 << 20], &device).unwrap();
        let x_line = line!() - 1;
        let y = Tensor::ones(&[16, 16], &device).unwrap();
        let y_line = line!() - 1;
        drop(x);
        // Carved from x's freed block.
        let z = Tensor::zeros(&[2, 1 << 20], &device).unwrap();
        let z_line = line!() - 1;
        let raw = device.allocate(3000).unwrap();
        let raw_line = line!() - 1;
        ((y, z, raw), [x_line, y_line, z_line, raw_line])
    };
    // Over the limit: the free tail of the mapped range is unmapped, then the request fails.
    let oom = device.allocate(100 << 20).unwrap_err();
    drop(oom);
    let path = std::env::temp_dir().join(format!(
        "vramguard-memory-viz-{}.pickle",
        std::process::id()
    ));
    memory::dump_snapshot(&device, &path).unwrap();

    let [x_line, y_line, z_line, raw_line] = lines;
    let x = frame(x_line, "zeros [4, 1048576]");
    let y = frame(y_line, "ones [16, 16]");
    let z = frame(z_line, "zeros [2, 1048576]");
    let raw = frame(raw_line, "allocate");
    let none = serde_json::json!([]);
    let it = "train #1";
    let want = serde_json::json!({
        // z's 8 MiB still mapped in the expandable range, and one 2 MiB small-pool segment.
        "reserved": 10 * MIB,
        // Live blocks, by size.
        "live": [[1024, 1024, y], [3072, 3000, raw], [8 * MIB, 8 * MIB, z]],
        "trace": [
            ["segment_map", 16 * MIB, none, it],
            ["alloc", 16 * MIB, x, it],
            ["segment_alloc", 2 * MIB, none, it],
            ["alloc", 1024, y, it],
            ["free_requested", 16 * MIB, x, it],
            ["free_completed", 16 * MIB, x, it],
            ["alloc", 8 * MIB, z, it],
            ["alloc", 3072, raw, it],
            ["segment_unmap", 8 * MIB, none, null],
            ["oom", 100 * MIB, none, null],
        ],
    });
    let out = Command::new("python3")
        .args(["-c", CHECK])
        .arg(&path)
        .arg(want.to_string())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{version} rejected the snapshot:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("schema ok"), "{stdout}");
    drop(kept);
}
