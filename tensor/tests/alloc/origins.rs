//! Where each byte came from: every allocation records the user's source line, the op and the
//! tensor's shape, and the one label (batch-scope iterations, tags) its thread carried.

use vramguard_alloc::{AllocOrigin, TraceEvent, TraceEventKind};
use vramguard_memory::scope::{self, BatchScope};
use vramguard_memory::{memory, Device};
use vramguard_tensor::Tensor;

fn recording_device() -> Device {
    let device = Device::isolated_host();
    memory::record_trace(&device, 1024);
    device
}

fn allocs(device: &Device) -> Vec<TraceEvent> {
    memory::trace(device)
        .events
        .into_iter()
        .filter(|e| e.kind == TraceEventKind::Alloc)
        .collect()
}

fn origin_of(event: &TraceEvent) -> &AllocOrigin {
    event
        .origin
        .as_ref()
        .expect("alloc events carry their origin")
}

#[test]
fn a_constructor_records_the_callers_line_its_name_and_the_shape() {
    let device = recording_device();
    let x = Tensor::zeros(&[4, 256], &device).unwrap();
    let line = line!() - 1;
    let events = allocs(&device);
    assert_eq!(events.len(), 1);
    let origin = origin_of(&events[0]);
    assert_eq!(origin.file, file!());
    assert_eq!(origin.line, line);
    assert_eq!(origin.op, "zeros");
    assert_eq!(origin.shape.as_deref(), Some(&[4usize, 256][..]));
    assert_eq!(events[0].size, memory::stats(&device).allocated_bytes);
    drop(x);
}

#[test]
fn layers_record_the_users_line_not_the_layer_code() {
    use vramguard_tensor::nn::{EncoderLayer, Linear, Module};
    let device = Device::isolated_host();
    let linear = Linear::new(16, 8, true, 1, &device).unwrap();
    let layer = EncoderLayer::new(16, 2, 32, 2, &device).unwrap();
    let x = Tensor::ones(&[2, 4, 16], &device).unwrap();
    memory::record_trace(&device, 4096);
    let y = linear.forward(&x).unwrap();
    let linear_line = line!() - 1;
    let z = layer.forward(&x).unwrap();
    let layer_line = line!() - 1;
    let got: Vec<(&'static str, &'static str, u32)> = allocs(&device)
        .iter()
        .map(|ev| {
            let o = origin_of(ev);
            (o.file, o.op, o.line)
        })
        .collect();
    // Every allocation inside a layer (its matmuls, softmax, layer norms) is the user's call.
    assert_eq!(got[0], (file!(), "Linear::forward", linear_line));
    assert!(got.len() > 10, "{got:?}");
    assert!(got[1..]
        .iter()
        .all(|g| *g == (file!(), "EncoderLayer::forward", layer_line)));
    drop((y, z));
}

#[test]
fn ops_and_operators_record_the_users_line_not_the_library_s() {
    let device = Device::isolated_host();
    let a = Tensor::ones(&[8, 16], &device).unwrap();
    let b = Tensor::ones(&[16, 32], &device).unwrap();
    memory::record_trace(&device, 1024);
    let c = a.matmul(&b).unwrap();
    let matmul_line = line!() - 1;
    let d = (&c + &c).unwrap();
    let add_line = line!() - 1;
    let e = d.softmax(1).unwrap();
    let softmax_line = line!() - 1;
    let got: Vec<(&'static str, u32, Vec<usize>)> = allocs(&device)
        .iter()
        .map(|ev| {
            let o = origin_of(ev);
            assert_eq!(o.file, file!(), "{o}");
            (o.op, o.line, o.shape.as_deref().unwrap_or(&[]).to_vec())
        })
        .collect();
    // softmax may allocate scratch tensors; each is the user's softmax call.
    assert_eq!(got[0], ("matmul", matmul_line, vec![8, 32]));
    assert_eq!(got[1], ("add", add_line, vec![8, 32]));
    assert!(got.len() >= 3);
    for g in &got[2..] {
        assert_eq!((g.0, g.1), ("softmax", softmax_line));
    }
    drop((c, d, e));
}

#[test]
fn a_raw_allocation_records_the_caller_of_device_allocate() {
    let device = recording_device();
    let block = device.allocate(3000).unwrap();
    let line = line!() - 1;
    let events = allocs(&device);
    let origin = origin_of(&events[0]);
    assert_eq!(
        (origin.file, origin.line, origin.op),
        (file!(), line, "allocate")
    );
    assert_eq!(origin.shape, None);
    drop(block);
    let trace = memory::trace(&device);
    let free = trace.events.iter().find(|e| e.kind == TraceEventKind::Free);
    let free = free.expect("the free is recorded");
    assert_eq!(
        free.origin.as_ref(),
        Some(origin),
        "a free names the block's origin"
    );
}

#[test]
fn snapshot_blocks_name_where_they_were_made() {
    let device = Device::isolated_host();
    let kept = Tensor::zeros(&[3, 5], &device).unwrap();
    let line = line!() - 1;
    let snapshot = memory::snapshot(&device);
    let blocks: Vec<_> = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.allocated)
        .collect();
    assert_eq!(blocks.len(), 1);
    let origin = blocks[0]
        .origin
        .as_ref()
        .expect("live blocks keep their origin");
    assert_eq!((origin.line, origin.op), (line, "zeros"));
    assert_eq!(
        origin.to_string(),
        format!("{}:{line} (zeros [3, 5])", file!())
    );
    drop(kept);
}

#[test]
fn batch_scope_iterations_and_tags_feed_one_label() {
    let device = recording_device();
    let mut kept = Vec::new();
    for _ in 0..2 {
        let _scope = BatchScope::enter("train");
        kept.push(device.allocate(1024).unwrap());
        let _tag = scope::tag("generator");
        kept.push(device.allocate(1024).unwrap());
    }
    {
        let _tag = scope::tag("eval");
        kept.push(device.allocate(1024).unwrap());
    }
    kept.push(device.allocate(1024).unwrap());
    let labels: Vec<Option<String>> = allocs(&device)
        .iter()
        .map(|e| e.label.as_ref().map(|l| l.to_string()))
        .collect();
    assert_eq!(
        labels,
        vec![
            Some("train #1".to_string()),
            Some("train #1 / generator".to_string()),
            Some("train #2".to_string()),
            Some("train #2 / generator".to_string()),
            Some("eval".to_string()),
            None,
        ]
    );
    let events = allocs(&device);
    let tagged = events[3].label.as_ref().expect("labelled");
    assert_eq!(tagged.batch_scope(), Some(("train", 2)));
    assert_eq!(tagged.tag(), Some("generator"));
    let names: Vec<(&str, Option<u64>)> = tagged
        .frames()
        .iter()
        .map(|f| (&*f.name, f.iteration))
        .collect();
    assert_eq!(names, vec![("train", Some(2)), ("generator", None)]);
    assert_eq!(events[4].label.as_ref().and_then(|l| l.batch_scope()), None);
}

#[test]
fn out_of_memory_names_the_largest_live_allocations_and_their_lines() {
    use vramguard_alloc::{AllocatorConfig, ConfigSource, HostBackend, OomCause};
    const MIB: u64 = 1 << 20;
    let config = AllocatorConfig::default()
        .with_expandable_segments(false)
        .with_memory_limit(64 * MIB);
    let device = Device::host_pool(HostBackend::new(), config).unwrap();
    let a = Tensor::zeros(&[4, 1 << 20], &device).unwrap();
    let a_line = line!() - 1;
    let b = Tensor::zeros(&[6, 1 << 20], &device).unwrap();
    let b_line = line!() - 1;
    let c = device.allocate(12 << 20).unwrap();
    let c_line = line!() - 1;
    let d = Tensor::ones(&[1 << 20], &device).unwrap();
    let d_line = line!() - 1;
    let e = Tensor::full(&[16, 16], 2.0, &device).unwrap();
    let e_line = line!() - 1;
    let f = device.allocate(512).unwrap();
    let err = device.allocate(16 << 20).unwrap_err();
    assert_eq!(err.cause, OomCause::LimitReached);
    assert_eq!(err.allocated, 56 * MIB + 1024 + 512);
    let listed: Vec<(u64, &str, u32, Option<Vec<usize>>)> = err
        .context
        .largest_live
        .iter()
        .map(|l| {
            let o = l.origin.as_ref().expect("origin");
            assert_eq!(o.file, file!());
            (
                l.size,
                o.op,
                o.line,
                o.shape.as_deref().map(<[usize]>::to_vec),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (24 * MIB, "zeros", b_line, Some(vec![6, 1 << 20])),
            (16 * MIB, "zeros", a_line, Some(vec![4, 1 << 20])),
            (12 * MIB, "allocate", c_line, None),
            (4 * MIB, "ones", d_line, Some(vec![1 << 20])),
            (1024, "full", e_line, Some(vec![16, 16])),
        ],
        "the five largest, largest first; the 512-byte block is left out"
    );
    let text = err.to_string();
    let expected = format!(
        "\nLargest live allocations (what holds the memory):\
         \n    24.0 MiB  {f}:{b_line} (zeros [6, 1048576])\
         \n    16.0 MiB  {f}:{a_line} (zeros [4, 1048576])\
         \n    12.0 MiB  {f}:{c_line} (allocate)\
         \n     4.0 MiB  {f}:{d_line} (ones [1048576])\
         \n     1.0 KiB  {f}:{e_line} (full [16, 16])",
        f = file!()
    );
    assert!(text.ends_with(&expected), "{text}");
    assert_eq!(err.config_source, ConfigSource::Code);
    assert!(
        text.contains("raise the limit (AllocatorConfig::with_memory_limit or AllocatorConfig::with_memory_fraction)"),
        "a device configured in code gets the builder methods: {text}"
    );
    assert!(!text.contains("VRAMGUARD_ALLOC_CONF"), "{text}");
    drop((a, b, c, d, e, f));
}
