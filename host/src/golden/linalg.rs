//! Small dense vector kernels shared by the evaluation forms.

/// Dot product with four independent partial sums, so the adds pipeline instead of forming one serial chain.
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `acc += s · x`.
pub(crate) fn axpy(acc: &mut [f64], s: f64, x: &[f64]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += s * v;
    }
}
