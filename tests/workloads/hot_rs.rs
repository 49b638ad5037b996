// hot_rs: burns CPU for argv[1] seconds (default 3) in
//
//   hot::main -> hot::outer -> hot::hot_loop
//
// The file is hot_rs.rs so the binary does not collide with the Go workload
// in build/workloads; the crate is renamed to `hot` so symbols read hot::….
#![crate_name = "hot"]

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn hot_loop(n: u64) -> u64 {
    let mut acc: u64 = 1;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i ^ (acc >> 3)));
    }
    acc
}

#[inline(never)]
fn outer(d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut sum: u64 = 0;
    while Instant::now() < end {
        for _ in 0..16 {
            sum = sum.wrapping_add(hot_loop(black_box(100_000)));
        }
    }
    sum
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|v: &f64| *v > 0.0)
        .unwrap_or(3.0);
    black_box(outer(Duration::from_secs_f64(secs)));
}
