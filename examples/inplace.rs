//! In-place updates: `b = a + 1` holds two copies, `a.add_(1)` one, and
//! the consuming form `a + 1.0` with `a` owned reuses `a`'s buffer when nothing else can see it.
//! Then the pitfall: an in-place op on a tensor autograd saved for backward, which here is a
//! typed error naming the op instead of a wrong gradient.
//!
//! ```sh
//! cargo run --release --example inplace [-- --mib 64] [--device cuda[:N]]
//! ```
//!
//! With `--device cuda` the same table is measured in device bytes on a GPU; without a usable
//! GPU it says so in one line and exits 0.

#[path = "common/device_arg.rs"]
mod device_arg;
#[path = "common/devices.rs"]
mod devices;
#[path = "../benches/support/report.rs"]
mod report;

use device_arg::DeviceArg;
use vramguard::{memory, Device, Tensor, TensorError};

fn main() {
    let args = report::Args::parse();
    let device = match DeviceArg::parse(args.value("device")) {
        Ok(DeviceArg::Host) => match devices::isolated_host() {
            Ok(device) => device,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        },
        Ok(DeviceArg::Cuda(d)) => d,
        Ok(DeviceArg::Unavailable(why)) => {
            println!("{why}");
            return;
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = run(args.value("mib").unwrap_or(64), &device) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Peak bytes allocated by `f` above what was live before it.
fn peak(device: &Device, f: impl FnOnce() -> Result<(), TensorError>) -> Result<u64, TensorError> {
    let before = memory::stats(device).allocated_bytes;
    memory::reset_peak_stats(device);
    f()?;
    Ok(memory::stats(device).peak_allocated_bytes - before)
}

/// One measured case: a name and the code whose peak is measured.
type Case<'a> = (&'a str, Box<dyn Fn() -> Result<(), TensorError> + 'a>);

fn run(mib: usize, device: &Device) -> Result<(), TensorError> {
    if mib == 0 {
        return Err(TensorError::InvalidArgument {
            op: "inplace example",
            shape: vec![],
            message: "--mib must be at least 1".into(),
        });
    }
    let n = mib * (1 << 20) / 4;
    let size = (n * 4) as f64 / f64::from(1 << 20);
    println!("a: {n} f32 ({size:.0} MiB); peak allocated bytes, exact, including a\n");

    let rows: [Case; 4] = [
        (
            "b = &a + 1.0 (a new tensor)",
            Box::new(|| {
                let a = Tensor::zeros(&[n], device)?;
                let b = (&a + 1.0)?;
                drop((a, b));
                Ok(())
            }),
        ),
        (
            "a.add_(1.0) (in place)",
            Box::new(|| {
                let a = Tensor::zeros(&[n], device)?;
                a.add_(1.0)?;
                Ok(())
            }),
        ),
        (
            "a = a + 1.0 (consuming, a unique)",
            Box::new(|| {
                let a = Tensor::zeros(&[n], device)?;
                let a = (a + 1.0)?;
                drop(a);
                Ok(())
            }),
        ),
        (
            "a2 = a + 1.0 (consuming, a shared)",
            Box::new(|| {
                let a = Tensor::zeros(&[n], device)?;
                let view = a.clone(); // shares the storage: `a` must stay untouched
                let a2 = (a + 1.0)?;
                assert_eq!(view.to_vec()?[0], 0.0);
                drop((view, a2));
                Ok(())
            }),
        ),
    ];
    for (name, f) in &rows {
        let bytes = peak(device, f)?;
        println!(
            "  {name:<38} {:>8.1} MiB  ({:.0}× a)",
            bytes as f64 / f64::from(1 << 20),
            bytes as f64 / (n * 4) as f64
        );
    }

    println!("\nthe pitfall: relu_ on an activation autograd saved for backward");
    let w = Tensor::randn(&[4, 4], 0.0, 1.0, 1, device)?.with_requires_grad()?;
    let x = Tensor::randn(&[2, 4], 0.0, 1.0, 2, device)?;
    let h = x.matmul(&w)?.tanh()?; // tanh saves its output for backward
    h.relu_()?; // ...which this overwrites
    match h.sum_all()?.backward() {
        Err(e) => println!("  backward: {e}"),
        Ok(()) => println!("  backward unexpectedly succeeded"),
    }
    let h = x.matmul(&w)?.tanh()?.relu()?; // out of place: correct
    h.sum_all()?.backward()?;
    println!(
        "  out of place: backward ok, grad of w has {} elements",
        w.grad().map_or(0, |g| g.elem_count())
    );
    Ok(())
}
