//! Regression tests for inputs the fuzzers found (see fuzz/README.md).
