//! The float64 CPU golden model of the spec (filled in by the golden-model work).
