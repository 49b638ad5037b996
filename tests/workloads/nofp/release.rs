// Rust as `cargo build --release` builds it: optimised, no frame pointers,
// only .eh_frame to unwind with. Known chains, with every named function
// kept out of line:
//
//   main -> release::run -> release::checksum_phase -> release::fold_words
//        -> (closure in fold_words) -> release::mix_word
//   main -> release::run -> release::collatz_phase -> release::collatz_len
//
// The work per round is fixed (not timed), so the split between the two
// chains is the same on any machine: about 2/3 and 1/3.
//
// usage: release SECONDS
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn mix_word(x: u64) -> u64 {
    let mut h = x;
    for _ in 0..24 {
        h ^= h >> 31;
        h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h
}

#[inline(never)]
fn fold_words(words: &[u64]) -> u64 {
    words
        .iter()
        .map(|&w| black_box(mix_word(black_box(w))))
        .filter(|h| h & 1 == 0)
        .fold(0u64, |acc, h| acc.wrapping_add(h))
}

#[inline(never)]
fn checksum_phase(words: &[u64]) -> u64 {
    let mut total = 0u64;
    for chunk in words.chunks(64) {
        total = total.wrapping_add(fold_words(black_box(chunk)));
    }
    total
}

#[inline(never)]
fn collatz_len(mut n: u64) -> u32 {
    let mut steps = 0;
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    steps
}

#[inline(never)]
fn collatz_phase(start: u64, count: u64) -> u64 {
    (start..start + count).map(|n| collatz_len(black_box(n)) as u64).sum()
}

#[inline(never)]
fn run(deadline: Instant) -> u64 {
    let words: Vec<u64> = (0..4096u64).map(|i| i.wrapping_mul(0x2545_f491_4f6c_dd1d)).collect();
    let mut acc = 0u64;
    let mut round = 0u64;
    while Instant::now() < deadline {
        acc = acc.wrapping_add(checksum_phase(black_box(&words)));
        acc = acc.wrapping_add(collatz_phase(1 + (round % 1000) * 64, 256));
        round += 1;
    }
    acc
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    black_box(run(deadline));
}
