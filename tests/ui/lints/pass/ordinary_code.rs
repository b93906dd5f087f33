//! Ordinary training-loop and host code that the lints must leave alone: the usual fixes
//! (`losses.push(loss.to_scalar()?)`, `metrics.insert(k, v.item())`, `total += loss.item()`),
//! string processing, timers and memory statistics in a benchmark loop, and
//! `#[vramguard::allow]` on a loop statement and on a `match` arm.
#![deny(deprecated)]
#![allow(dead_code)]
use std::collections::HashMap;
use std::time::Instant;
use vramguard::{memory, Device};

pub struct Tensor(pub Vec<f32>);
#[derive(Debug)]
pub struct E;
impl Tensor {
    pub fn input(i: usize) -> Tensor { Tensor(vec![i as f32; 4]) }
    pub fn forward(&self) -> Result<Tensor, E> { Ok(Tensor(self.0.clone())) }
    pub fn to_scalar<T: From<f32>>(&self) -> Result<T, E> { Ok(T::from(self.0[0])) }
    pub fn item(&self) -> f32 { self.0[0] }
    pub fn to_vec1<T: From<f32>>(&self) -> Result<Vec<T>, E> { Ok(self.0.iter().map(|&x| T::from(x)).collect()) }
}

#[vramguard::batch_scope]
fn train(n: usize) -> Result<(Vec<f32>, HashMap<String, f32>, f32, f64), E> {
    let mut losses = Vec::new();
    let mut metrics = HashMap::new();
    let mut total = 0.0f32;
    let mut total64 = 0.0f64;
    let mut preds: Vec<f32> = Vec::new();
    let mut epoch_losses: Vec<f64> = Vec::new();
    for i in 0..n {
        let loss = Tensor::input(i).forward()?;
        losses.push(loss.to_scalar::<f32>()?);
        losses.push(loss.to_scalar()?);
        let k = format!("step{i}");
        metrics.insert(k, loss.item());
        metrics.insert(format!("x{i}"), loss.to_scalar::<f32>()?);
        total += loss.item();
        total += loss.to_scalar::<f32>()?;
        total = total + loss.item();
        total64 += f64::from(loss.item());
        epoch_losses.push(loss.item() as f64);
        preds.extend(loss.to_vec1::<f32>()?);
        let v = loss.item();
        metrics.insert(String::from("v"), v);
        losses.push(v);
    }
    Ok((losses, metrics, total, total64))
}

#[vramguard::batch_scope]
fn host_code(lines: &[&str]) -> (Vec<String>, f32, Vec<usize>) {
    let mut out = Vec::new();
    let mut total = 0.0f32;
    let mut lens = Vec::new();
    for line in lines {
        out.push(line.to_uppercase());
        lens.push(line.len());
        total += line.parse::<f32>().unwrap_or(0.0);
        let words: Vec<&str> = line.split(' ').collect();
        lens.push(words.len());
    }
    (out, total, lens)
}

#[vramguard::batch_scope]
fn allow_positions(n: usize) -> usize {
    let mut results = Vec::new();
    #[vramguard::allow(accumulates_across_iterations)]
    for i in 0..n {
        let feat = Tensor::input(i).forward().unwrap();
        results.push(feat);
    }
    for i in 0..n {
        let feat = Tensor::input(i).forward().unwrap();
        match i {
            #[vramguard::allow(accumulates_across_iterations)]
            0 => results.push(feat),
            _ => {}
        }
    }
    results.len()
}

/// `num_traits::AsPrimitive::as_`, as candle-nn calls it.
trait AsPrimitive {
    fn as_(&self) -> f32;
}

impl AsPrimitive for f32 {
    fn as_(&self) -> f32 {
        *self
    }
}

/// A total declared as a number (candle-nn's layer norm): whatever is added to it is a number
/// too, even the result of a method the lints do not know.
#[vramguard::inference]
fn row_sums(rows: &[Vec<f32>]) -> (f32, f32) {
    let mut sum = 0f32;
    let mut sum2 = 0.0;
    for row in rows {
        for v in row {
            let v = v.as_();
            sum += v;
            sum2 = sum2 + v * v;
        }
    }
    (sum, sum2)
}

/// A benchmark loop: timers and memory statistics are host values, also around `empty_cache`.
#[vramguard::batch_scope]
fn bench(dev: &Device, n: usize) -> (f64, u64) {
    let mut times = Vec::new();
    let mut allocated = Vec::new();
    for _ in 0..n {
        let start = Instant::now();
        times.push(start.elapsed());
        allocated.push(memory::stats(dev).allocated_bytes);
        let stats = memory::stats(dev);
        allocated.push(stats.allocated_bytes);
    }
    let total: f64 = times.iter().map(|d| d.as_secs_f64()).sum();
    let before = memory::stats(dev);
    let t0 = Instant::now();
    let released = memory::empty_cache(dev);
    let after = memory::stats(dev);
    assert!(after.reserved_bytes <= before.reserved_bytes);
    (total + t0.elapsed().as_secs_f64(), released)
}

fn main() {
    let _ = bench(&Device::host(), 2);
    let _ = train(2).unwrap();
    let _ = host_code(&["1 2", "3"]);
    let _ = allow_positions(2);
    assert_eq!(row_sums(&[vec![1.0, -2.0], vec![3.0]]), (2.0, 14.0));
}
