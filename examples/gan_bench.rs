//! `gan` benchmark: a GAN training loop on synthetic data (see `examples/common/gan.rs`),
//! without an attribute and under `#[batch_scope]`, in two update forms: `opt.backward_step(&loss)`
//! (the headline rows) and PyTorch's classic `zero_grad(); backward(); step()` (rows ending in
//! `_zero_grad`).
//!
//! Peaks are exact allocator statistics above the bytes live before the loop (parameters and
//! optimizer state, after one warm-up step whose gradients are dropped):
//! - `peak_bytes_plain`: the loop as written, no attribute;
//! - `peak_bytes_batch_scope`: the same loop under `#[batch_scope]`;
//! - `peak_bytes_liveness_bound`: the same op sequence if every tensor died at its last use
//!   (recorded by the tensor layer while running the plain loop), gradients included;
//! - `peak_bytes_liveness_bound_grads_held`: the same, except that gradients stored in the
//!   parameters live until `zero_grad` frees them — the floor for dropping locals early, since
//!   no transform of locals can free what the parameters hold;
//! - `peak_backward_step_over_zero_grad`: scoped peak of the headline form over the classic one;
//! - `growth_bytes_per_iter_leaky`: the naive loop that keeps `fake`, `real`, `d_loss` and
//!   `g_loss` of each iteration in a history, as the batch scope measured it
//!   ((live bytes after the last iteration − after the first) / (iterations − 1));
//! - `time_ratio_batch_scope_over_plain`: median time of `--steps` steps, interleaved.
//!
//! Flags: `--batch N` (64), `--steps N` (50), `--reps N` (7), `--quick` (tiny model, 10 steps),
//! plus the shared `--json` and `--write`. `--device cuda[:N]`: the same rows on a GPU, in
//! device bytes (report `gan_cuda`; each measurement on a device with an allocator of its own);
//! without a usable GPU it says so in one line and exits 0.

#[path = "common/device_arg.rs"]
mod device_arg;
#[path = "common/devices.rs"]
mod devices;
#[path = "common/gan.rs"]
mod gan;
#[path = "../benches/support/report.rs"]
mod report;

use device_arg::{synchronize, DeviceArg};
use gan::{
    train_leaky, train_plain, train_plain_zero_grad, train_scoped, train_scoped_zero_grad, Gan,
    GanConfig,
};
use report::{Args, Report, Unit};
use std::time::Instant;
use vramguard::tensor::PeakBoundRecorder;
use vramguard::{memory, scope, Device};

/// Discriminator and generator loss of each step.
type Losses = Vec<(f32, f32)>;
type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("gan_bench failed: {e}");
        std::process::exit(1);
    }
}

/// A new device with an allocator of its own (so that its statistics are one measurement's):
/// the host's, or the GPU `--device` names.
fn fresh_device(args: &Args) -> BoxResult<Device> {
    match DeviceArg::parse(args.value("device"))? {
        DeviceArg::Host => Ok(devices::isolated_host()?),
        DeviceArg::Cuda(device) => Ok(device),
        DeviceArg::Unavailable(why) => Err(why.into()),
    }
}

fn run(args: &Args) -> BoxResult<()> {
    let on_gpu = match DeviceArg::parse(args.value("device"))? {
        DeviceArg::Host => false,
        DeviceArg::Cuda(_) => true,
        DeviceArg::Unavailable(why) => {
            println!("{why}");
            return Ok(());
        }
    };
    let new_device = || fresh_device(args);
    let mut config = if args.quick {
        GanConfig::tiny()
    } else {
        GanConfig::mnist_like()
    };
    if let Some(batch) = args.value::<usize>("batch") {
        config.batch = batch.max(1);
    }
    let steps: usize = args
        .value::<usize>("steps")
        .unwrap_or(if args.quick { 10 } else { 50 })
        .max(2);
    let reps: usize = args
        .value::<usize>("reps")
        .unwrap_or(if args.quick { 3 } else { 7 })
        .max(1);
    eprintln!(
        "GAN: batch {}, noise {}, hidden {}, data {}; {steps} steps per run",
        config.batch, config.noise, config.hidden, config.data
    );

    let peaks = measure_form(&new_device, config, steps, train_plain, train_scoped)?;
    let peaks_zero_grad = measure_form(
        &new_device,
        config,
        steps,
        train_plain_zero_grad,
        train_scoped_zero_grad,
    )?;

    eprintln!("running the leaky loop ...");
    let leaky_dev = new_device()?;
    let mut leaky_gan = new_gan(config, train_plain, &leaky_dev)?;
    let mut history = Vec::new();
    scope::reset("gan-leaky");
    train_leaky(&mut leaky_gan, 1, 1, &leaky_dev, &mut history)?;
    let live_first = scope::last_report("gan-leaky").map_or(0, |r| r.live_bytes);
    train_leaky(&mut leaky_gan, steps - 1, 2, &leaky_dev, &mut history)?;
    let last = scope::last_report("gan-leaky").ok_or("the leaky loop produced no scope report")?;
    let growth = (last.live_bytes - live_first) as f64 / (steps - 1) as f64;
    drop(history);

    eprintln!("timing {reps} interleaved runs of each variant ...");
    let (plain_dev, scoped_dev) = (new_device()?, new_device()?);
    let mut plain_gan = new_gan(config, train_plain, &plain_dev)?;
    let mut scoped_gan = new_gan(config, train_plain, &scoped_dev)?;
    let (mut t_plain, mut t_scoped) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let first = 1 + steps * (rep + 1);
        let start = Instant::now();
        train_plain(&mut plain_gan, steps, first, &plain_dev)?;
        synchronize(&plain_dev)?;
        t_plain.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        train_scoped(&mut scoped_gan, steps, first, &scoped_dev)?;
        synchronize(&scoped_dev)?;
        t_scoped.push(start.elapsed().as_secs_f64());
    }
    let time_ratio = median(&mut t_scoped) / median(&mut t_plain);

    let mut r = Report::new(if on_gpu { "gan_cuda" } else { "gan" });
    if on_gpu {
        r.cargo_args("--example gan_bench");
    }
    peaks.report(&mut r, "", true);
    peaks_zero_grad.report(&mut r, "_zero_grad", false);
    r.metric("growth_bytes_per_iter_leaky", growth, Unit::Bytes);
    r.metric(
        "leaky_escaped_count_per_iter",
        last.escaped_count as f64,
        Unit::Count,
    );
    r.metric_with_target(
        "time_ratio_batch_scope_over_plain",
        time_ratio,
        Unit::Ratio,
        "≤ 1.02",
        time_ratio <= 1.02,
    );
    let identical = peaks.losses_identical && peaks_zero_grad.losses_identical;
    r.metric(
        "losses_bit_identical",
        f64::from(u8::from(identical)),
        Unit::Count,
    );
    r.metric(
        "peak_backward_step_over_zero_grad",
        peaks.scoped as f64 / peaks_zero_grad.scoped.max(1) as f64,
        Unit::Ratio,
    );
    r.note(&format!(
        "GAN (generator and discriminator MLPs, 3 layers each, least-squares loss, Adam), batch {}, noise {}, hidden {}, data {}, \
         {steps} steps, {}. Peaks are allocator bytes above the parameters and optimizer state (one warm-up step, \
         gradients then dropped). Headline rows: each update is `opt.backward_step(&loss)` (gradients for that optimizer's \
         parameters only, freed right after the update); `_zero_grad` rows: PyTorch's classic `zero_grad(); backward(); step()`, \
         where gradients stay in the parameters until the next `zero_grad` and the generator's backward also fills the \
         discriminator's. `peak_backward_step_over_zero_grad` compares the two scoped loops. The bounds are recorded from the \
         plain loop's op sequence with every buffer freed after its last use; `_grads_held` keeps parameter gradients until \
         the code frees them, the floor for any transform of locals. `batch_scope_over_plain` is near 1 because the peak lies \
         in the discriminator's backward pass, where the graph holds the activations whatever the locals do, and Rust already \
         frees a loop body's locals at the end of each iteration — where a Python GAN loses memory to tensors kept \
         until reassigned. Times: median of {reps} interleaved runs of {steps} steps (backward_step form). \
         `losses_bit_identical` = 1 when every loss of both scoped loops equals its plain loop's bit for bit.",
        config.batch,
        config.noise,
        config.hidden,
        config.data,
        if on_gpu {
            "CUDA backend, device bytes"
        } else {
            "host backend"
        }
    ));
    r.finish(args);
    if !identical {
        return Err("the #[batch_scope] loop computed different losses than the plain loop".into());
    }
    Ok(())
}

/// A training loop stamped out by `gan_loop!`.
type TrainFn = fn(&mut Gan, usize, usize, &Device) -> gan::Result<Losses>;

/// A GAN after one warm-up step of `train`: the optimizer state exists, and the gradients the
/// `zero_grad_backward_step` form leaves behind are dropped, so that both forms start from
/// parameters and optimizer state alone.
fn new_gan(config: GanConfig, train: TrainFn, device: &Device) -> BoxResult<Gan> {
    let mut gan = Gan::new(config, 7, device)?;
    train(&mut gan, 1, 0, device)?;
    gan.opt_d.zero_grad();
    gan.opt_g.zero_grad();
    Ok(gan)
}

/// Peaks of one update form: the plain loop, the scoped loop and the liveness bounds.
struct FormPeaks {
    plain: u64,
    scoped: u64,
    bound: u64,
    bound_grads_held: u64,
    losses_identical: bool,
}

/// Peak allocated bytes of `train` above the bytes live before it, and its losses.
fn peak_of(
    new_device: &dyn Fn() -> BoxResult<Device>,
    config: GanConfig,
    steps: usize,
    train: TrainFn,
    record_bound: bool,
) -> BoxResult<(u64, Losses, Option<vramguard::tensor::PeakBound>)> {
    let device = new_device()?;
    let mut gan = new_gan(config, train, &device)?;
    let before = memory::stats(&device).allocated_bytes;
    memory::reset_peak_stats(&device);
    let recorder = record_bound.then(PeakBoundRecorder::start);
    let losses = train(&mut gan, steps, 1, &device)?;
    let bound = recorder.map(PeakBoundRecorder::finish);
    let peak = memory::stats(&device).peak_allocated_bytes - before;
    Ok((peak, losses, bound))
}

fn measure_form(
    new_device: &dyn Fn() -> BoxResult<Device>,
    config: GanConfig,
    steps: usize,
    plain: TrainFn,
    scoped: TrainFn,
) -> BoxResult<FormPeaks> {
    let (peak_plain, losses_plain, _) = peak_of(new_device, config, steps, plain, false)?;
    let (peak_scoped, losses_scoped, _) = peak_of(new_device, config, steps, scoped, false)?;
    // The bound: the plain loop's op sequence, recorded on a device of its own.
    let (_, _, bound) = peak_of(new_device, config, steps, plain, true)?;
    let bound = bound.ok_or("no liveness recording")?;
    let losses_identical = losses_plain.len() == losses_scoped.len()
        && losses_plain
            .iter()
            .zip(&losses_scoped)
            .all(|(a, b)| a.0.to_bits() == b.0.to_bits() && a.1.to_bits() == b.1.to_bits());
    Ok(FormPeaks {
        plain: peak_plain,
        scoped: peak_scoped,
        bound: bound.peak_bytes,
        bound_grads_held: bound.peak_bytes_grads_held,
        losses_identical,
    })
}

impl FormPeaks {
    /// Adds this form's rows, each name ending in `suffix`; `targets` marks the headline form.
    fn report(&self, r: &mut Report, suffix: &str, targets: bool) {
        let name = |base: &str| format!("{base}{suffix}");
        r.metric(&name("peak_bytes_plain"), self.plain as f64, Unit::Bytes);
        r.metric(
            &name("peak_bytes_batch_scope"),
            self.scoped as f64,
            Unit::Bytes,
        );
        r.metric(
            &name("peak_bytes_liveness_bound"),
            self.bound as f64,
            Unit::Bytes,
        );
        r.metric(
            &name("peak_bytes_liveness_bound_grads_held"),
            self.bound_grads_held as f64,
            Unit::Bytes,
        );
        let over_bound = self.scoped as f64 / self.bound.max(1) as f64;
        if targets {
            r.metric_with_target(
                &name("batch_scope_over_liveness_bound"),
                over_bound,
                Unit::Ratio,
                "≤ 1.15",
                over_bound <= 1.15,
            );
        } else {
            r.metric(
                &name("batch_scope_over_liveness_bound"),
                over_bound,
                Unit::Ratio,
            );
        }
        r.metric(
            &name("batch_scope_over_liveness_bound_grads_held"),
            self.scoped as f64 / self.bound_grads_held.max(1) as f64,
            Unit::Ratio,
        );
        r.metric(
            &name("batch_scope_over_plain"),
            self.scoped as f64 / self.plain.max(1) as f64,
            Unit::Ratio,
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
