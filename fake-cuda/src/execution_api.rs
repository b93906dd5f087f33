//! The exported functions that run work: streams, events, modules and kernel launches, each a
//! small body over [`Driver`]. What each enforces is in the crate documentation; the queues and
//! the kernels themselves live in `streams` and `kernels`. (The device, context and memory
//! functions are in `driver_api`, the pool's in `pool_api`.)

use crate::api::exports;
use crate::driver_api::{invalid, out, stream_of, Handle};
use crate::errors::{self, CallResult, Fail};
use crate::kernels::{self, Module};
use crate::state::{config, driver, Driver};
use crate::streams::{canonical_stream, Event, Stream, Work};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

exports! {
    unknown = errors::UNKNOWN;

    /// A stream (`CU_STREAM_NON_BLOCKING` = 1, or blocking).
    fn cuStreamCreate(stream: *mut Handle, flags: c_uint) {
        let mut d = driver()?;
        d.in_context()?;
        if flags > 1 {
            return Err(invalid(format!("stream flags {flags}")));
        }
        if stream.is_null() {
            return Err(invalid("a null output pointer"));
        }
        let h = d.new_handle();
        d.streams.insert(h, Stream::new(flags == 0));
        out(stream, h as Handle)
    }

    /// A stream; the priority is accepted and ignored.
    fn cuStreamCreateWithPriority(stream: *mut Handle, flags: c_uint, priority: c_int) {
        let _ = priority;
        // SAFETY: forwarded arguments.
        match unsafe { cuStreamCreate(stream, flags) } {
            errors::SUCCESS => Ok(()),
            code => Err(Fail::quiet(code)),
        }
    }

    /// Destroys a stream; its queued work still runs when waited for.
    fn cuStreamDestroy_v2(stream: Handle) {
        let mut d = driver()?;
        d.initialized()?;
        let id = stream as u64;
        if canonical_stream(id) == 0 {
            return Err(invalid("the null stream cannot be destroyed"));
        }
        let s = d.stream(id)?;
        d.streams.get_mut(&s).expect("checked").destroyed = true;
        Ok(())
    }

    /// Runs the stream's queued work (for the null stream, the blocking streams' too).
    fn cuStreamSynchronize(stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        if s == 0 {
            d.run_legacy()?;
        } else {
            let tail = d.tail(s);
            d.run_to(tail)?;
        }
        d.synchronized();
        Ok(())
    }

    /// Whether the stream's work is done (polling makes progress, see `streams`).
    fn cuStreamQuery(stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        let tail = d.tail(s);
        if d.poll(tail)? {
            Ok(())
        } else {
            Err(Fail::quiet(errors::NOT_READY))
        }
    }

    /// Work queued later on `stream` waits for the event's recorded work.
    fn cuStreamWaitEvent(stream: Handle, event: Handle, flags: c_uint) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        if flags != 0 {
            return Err(invalid(format!("wait flags {flags}")));
        }
        let point = match d.events.get(&(event as u64)) {
            Some(e) if !e.destroyed => e.recorded,
            _ => return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not an event", event as u64))),
        };
        match point {
            Some(p) if !d.reached(p) && p.0 != s => d.enqueue(s, "cuStreamWaitEvent", vec![p], Work::Wait),
            _ => Ok(()),
        }
    }

    /// An event (`CU_EVENT_DISABLE_TIMING` = 2 turns timing off).
    fn cuEventCreate(event: *mut Handle, flags: c_uint) {
        let mut d = driver()?;
        d.in_context()?;
        if flags & !0b1111 != 0 {
            return Err(invalid(format!("event flags {flags}")));
        }
        if event.is_null() {
            return Err(invalid("a null output pointer"));
        }
        let h = d.new_handle();
        d.events.insert(h, Event { timing: flags & 2 == 0, recorded: None, time: None, polls: 0, destroyed: false });
        out(event, h as Handle)
    }

    /// Destroys an event (a wait already queued on it still holds).
    fn cuEventDestroy_v2(event: Handle) {
        let mut d = driver()?;
        d.initialized()?;
        match d.events.get_mut(&(event as u64)) {
            Some(e) if !e.destroyed => {
                e.destroyed = true;
                Ok(())
            }
            _ => Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not an event", event as u64))),
        }
    }

    /// Records the work queued so far on `stream`.
    fn cuEventRecord(event: Handle, stream: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        let id = event as u64;
        let timing = match d.events.get(&id) {
            Some(e) if !e.destroyed => e.timing,
            _ => return Err(Fail::loud(errors::INVALID_HANDLE, format!("{id:#x} is not an event"))),
        };
        if timing {
            d.enqueue(s, "cuEventRecord", Vec::new(), Work::Mark { event: id })?;
        }
        let point = d.tail(s);
        let e = d.events.get_mut(&id).expect("checked");
        e.recorded = Some(point);
        e.polls = 0;
        Ok(())
    }

    /// Whether the event's work is done (polling makes progress, see `streams`).
    fn cuEventQuery(event: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let point = match d.events.get(&(event as u64)) {
            Some(e) if !e.destroyed => e.recorded,
            _ => return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not an event", event as u64))),
        };
        match point {
            None => Ok(()),
            Some(p) => {
                if d.poll(p)? {
                    Ok(())
                } else {
                    Err(Fail::quiet(errors::NOT_READY))
                }
            }
        }
    }

    /// Runs the work the event recorded.
    fn cuEventSynchronize(event: Handle) {
        let mut d = driver()?;
        d.in_context()?;
        let point = match d.events.get(&(event as u64)) {
            Some(e) if !e.destroyed => e.recorded,
            _ => return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not an event", event as u64))),
        };
        if let Some(p) = point {
            d.run_to(p)?;
        }
        d.synchronized();
        Ok(())
    }

    /// Milliseconds between two timed events whose work ran.
    fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) {
        let d = driver()?;
        d.in_context()?;
        let time = |e: Handle| -> Result<std::time::Instant, Fail> {
            match d.events.get(&(e as u64)) {
                Some(ev) if !ev.destroyed && !ev.timing => Err(Fail::loud(errors::INVALID_HANDLE, "an event created with CU_EVENT_DISABLE_TIMING")),
                Some(ev) if !ev.destroyed => ev.time.ok_or(Fail::quiet(errors::NOT_READY)),
                _ => Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not an event", e as u64))),
            }
        };
        let (a, b) = (time(start)?, time(end)?);
        let elapsed = if b >= a { (b - a).as_secs_f32() * 1e3 } else { -((a - b).as_secs_f32() * 1e3) };
        out(ms, elapsed)
    }

    /// As `cuEventElapsedTime`.
    fn cuEventElapsedTime_v2(ms: *mut f32, start: Handle, end: Handle) {
        // SAFETY: forwarded arguments.
        match unsafe { cuEventElapsedTime(ms, start, end) } {
            errors::SUCCESS => Ok(()),
            code => Err(Fail::quiet(code)),
        }
    }

    /// Loads a PTX module (NUL-terminated text): its `.entry` kernels.
    fn cuModuleLoadData(module: *mut Handle, image: *const c_void) {
        let mut d = driver()?;
        d.in_context()?;
        if image.is_null() {
            return Err(invalid("a null image"));
        }
        // SAFETY: the driver's contract: PTX is NUL-terminated text.
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
        let text = text.to_str().map_err(|_| Fail::loud(errors::INVALID_IMAGE, "the image is not PTX text (cubins and fatbins are not modelled)"))?;
        load_module(&mut d, module, text)
    }

    /// Loads a PTX module from a file.
    fn cuModuleLoad(module: *mut Handle, fname: *const c_char) {
        let mut d = driver()?;
        d.in_context()?;
        if fname.is_null() {
            return Err(invalid("a null file name"));
        }
        // SAFETY: a NUL-terminated path.
        let path = unsafe { CStr::from_ptr(fname) }.to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).map_err(|e| Fail::loud(errors::FILE_NOT_FOUND, format!("{path}: {e}")))?;
        load_module(&mut d, module, &text)
    }

    /// Unloads a module: its functions can no longer be launched.
    fn cuModuleUnload(module: Handle) {
        let mut d = driver()?;
        d.initialized()?;
        match d.modules.get_mut(&(module as u64)) {
            Some(m) if !m.unloaded => {
                m.unloaded = true;
                Ok(())
            }
            _ => Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a loaded module", module as u64))),
        }
    }

    /// A kernel of a module, resolved to its host build.
    fn cuModuleGetFunction(function: *mut Handle, module: Handle, name: *const c_char) {
        let mut d = driver()?;
        d.in_context()?;
        if name.is_null() || function.is_null() {
            return Err(invalid("a null name or output pointer"));
        }
        // SAFETY: a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let entry = match d.modules.get(&(module as u64)) {
            Some(m) if !m.unloaded => m.entries.iter().find(|e| e.name == name).cloned(),
            _ => return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a loaded module", module as u64))),
        };
        let Some(entry) = entry else {
            return Err(Fail::loud(errors::NOT_FOUND, format!("the module has no kernel {name}")));
        };
        if d.host_libraries.is_none() {
            let libs = kernels::load_libraries(&config().host_kernels).map_err(|e| Fail::loud(errors::NOT_FOUND, e))?;
            d.host_libraries = Some(libs);
        }
        let f = kernels::resolve(d.host_libraries.as_deref().unwrap_or_default(), module as u64, &entry)?;
        let h = d.new_handle();
        d.functions.insert(h, f);
        out(function, h as Handle)
    }

    /// A few attributes of a kernel (the host build has no registers to count).
    fn cuFuncGetAttribute(value: *mut c_int, attrib: c_int, function: Handle) {
        let d = driver()?;
        d.in_context()?;
        if !d.functions.contains_key(&(function as u64)) {
            return Err(Fail::loud(errors::INVALID_HANDLE, "not a function"));
        }
        out(value, match attrib {
            0 => 1024, // MAX_THREADS_PER_BLOCK
            4 => 32,   // NUM_REGS
            _ => 0,
        })
    }

    /// Queues a kernel: one-dimensional grid and block, parameters marshalled per its PTX
    /// signature (see `kernels`).
    fn cuLaunchKernel(
        f: Handle, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint,
        block_z: c_uint, shared_bytes: c_uint, stream: Handle, kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let mut d = driver()?;
        d.in_context()?;
        let s = stream_of(&d, stream)?;
        let function = match d.functions.get(&(f as u64)) {
            Some(function) => function.clone(),
            None => return Err(Fail::loud(errors::INVALID_HANDLE, format!("{:#x} is not a function", f as u64))),
        };
        if d.modules.get(&function.module).is_none_or(|m| m.unloaded) {
            return Err(Fail::loud(errors::INVALID_HANDLE, format!("kernel {}: its module was unloaded", function.entry.name)));
        }
        if !extra.is_null() {
            return Err(Fail::loud(errors::NOT_SUPPORTED, "launch parameters through `extra` are not modelled"));
        }
        if grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0 {
            return Err(invalid("a launch dimension of 0"));
        }
        if u64::from(block_x) * u64::from(block_y) * u64::from(block_z) > 1024 {
            return Err(Fail::loud(errors::INVALID_VALUE, "more than 1024 threads per block"));
        }
        if shared_bytes > 48 << 10 {
            return Err(Fail::loud(errors::INVALID_VALUE, format!("{shared_bytes} bytes of dynamic shared memory (48 KiB without opting in)")));
        }
        if grid_y != 1 || grid_z != 1 || block_y != 1 || block_z != 1 {
            return Err(Fail::loud(errors::NOT_SUPPORTED, "grids and blocks of more than one dimension (the host shim indexes x only)"));
        }
        // SAFETY: the driver's contract: one pointer per parameter of the kernel.
        let launch = unsafe { kernels::prepare(&function, grid_x, block_x, kernel_params) }?;
        d.enqueue(s, "cuLaunchKernel", Vec::new(), Work::Kernel(launch))
    }

    /// Host functions queued on a stream are not modelled (they would call back into the
    /// driver while it runs queued work).
    fn cuLaunchHostFunc(stream: Handle, host_fn: *mut c_void, user_data: *mut c_void) {
        let _ = (stream, host_fn, user_data);
        Err(Fail::loud(errors::NOT_SUPPORTED, "cuLaunchHostFunc is not modelled by the fake"))
    }
}

fn load_module(d: &mut Driver, module: *mut Handle, text: &str) -> CallResult {
    if module.is_null() {
        return Err(invalid("a null output pointer"));
    }
    let entries = crate::ptx::entries(text).map_err(|e| Fail::loud(errors::INVALID_PTX, e))?;
    let h = d.new_handle();
    d.modules.insert(
        h,
        Module {
            entries,
            unloaded: false,
        },
    );
    out(module, h as Handle)
}
